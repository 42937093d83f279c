//! [`Cache`]: one plan per transition, shared by the targets that make the same one.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gix_hash::ObjectId;
use tokio::sync::OnceCell;

use super::{Error, Limits};
use crate::convert::Settings;
use crate::op::Plan;
use crate::select::Select;

/// Plans shared by the targets of one process that sync the same repository from the same
/// tree to the same commit with the same settings: mirrors of one ref, followed by one
/// `watch --all`. The first target to need a transition plans it; the others get the same
/// [`Plan`] (an `Arc`, not a copy) and apply it with their own backend and policy.
///
/// A plan is reused only when every input of the diff is the same (the key): the
/// repository's object database (its common git directory), the tree and commit the target
/// holds and the tree and commit it goes to, the conversion settings of both sides
/// ([`Settings`]: `.gitattributes` sources, `core.autocrlf`/`core.eol`, filter drivers, the
/// LFS mode, `--export`), the selection of both sides (`--include`/`--exclude`), the files
/// with `export-subst` placeholders to expand again, whether the target tells case apart, and
/// the [`Limits`]. Targets that differ in any of them plan on their own (a miss each).
///
/// Not cached (planned by each target as without a cache): takeovers and repairs (they
/// depend on what the target holds), the plan finishing an interrupted sync, and any sync
/// with `--recurse-submodules` on either side (the plan depends on the submodule
/// repositories found, and planning records which were read).
///
/// Bounded: it keeps the plans of the last [`capacity`](Cache::new) keys used (the oldest
/// used is dropped first), so a long-running watch does not grow. Targets asking for the
/// same key at the same time plan it once: the others wait for that plan.
///
/// ```
/// use std::sync::Arc;
/// use treesync_core::{plan, sync};
///
/// // One cache for every mirror the process follows.
/// let plans = Arc::new(plan::Cache::new(16));
/// let options = sync::Options { backend_name: "local".into(), plans: Some(plans.clone()), ..Default::default() };
/// // ... sync each mirror with `options` (its own backend and policy) ...
/// let counts = plans.counts();
/// assert_eq!((counts.hits, counts.misses, counts.entries), (0, 0, 0));
/// ```
pub struct Cache {
    capacity: usize,
    /// Least recently used first. A linear search: `capacity` is a handful of keys, and the
    /// lock is never held while planning (the entry's cell is), so a `Mutex` over a small
    /// list is simpler than a concurrent map and keeps the eviction order exact.
    entries: Mutex<VecDeque<(Key, Slot)>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// The plan of one key: made once, by the first caller; the others wait for it.
type Slot = Arc<OnceCell<Arc<Plan>>>;

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("plan::Cache").field("capacity", &self.capacity).field("counts", &self.counts()).finish()
    }
}

impl Default for Cache {
    /// A cache of [`Cache::DEFAULT_CAPACITY`] keys.
    fn default() -> Self {
        Cache::new(Cache::DEFAULT_CAPACITY)
    }
}

/// How a [`Cache`] has been used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Plans taken from the cache (planned by another target, or waited for).
    pub hits: u64,
    /// Plans made (a key not in the cache, or one whose planning had failed).
    pub misses: u64,
    /// Keys held now (at most the capacity).
    pub entries: usize,
}

/// Everything a diff plan depends on: equal keys plan the same ops.
///
/// Tree ids name their content, so two keys with the same ids read the same objects; the
/// repository is part of the key all the same, because the conversions read its LFS store
/// and a shared plan must never cross repositories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    /// The repository's common git directory (its object database).
    pub repo: PathBuf,
    /// The tree the target holds (`None`: nothing yet) and its commit.
    pub from: (Option<ObjectId>, Option<ObjectId>),
    /// The tree the target goes to, and its commit.
    pub to: (ObjectId, ObjectId),
    /// The conversion settings the target's files were written with (`None`: as blobs are).
    pub old_settings: Option<Settings>,
    /// The conversion settings to write with.
    pub new_settings: Option<Settings>,
    /// The selection the target holds.
    pub old_select: Select,
    /// The selection it goes to.
    pub new_select: Select,
    /// The `export-subst` files written again (the commit changes), if any.
    pub resubst: Option<Vec<String>>,
    /// The target does not tell case apart.
    pub case_insensitive: bool,
    /// The limits the plan is refused beyond.
    pub limits: Limits,
}

impl Cache {
    /// The capacity of [`Cache::default()`]: the distinct transitions (settings included)
    /// that stay cached.
    pub const DEFAULT_CAPACITY: usize = 16;

    /// A cache keeping the plans of the last `capacity` keys used (at least 1). Give it at
    /// least as many as the distinct settings of the targets sharing it (selections,
    /// `--export`, case sensitivity, the tree each holds): each needs its own plan.
    pub fn new(capacity: usize) -> Cache {
        Cache {
            capacity: capacity.max(1),
            entries: Mutex::new(VecDeque::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// How many plans were reused and made, and how many keys are held.
    pub fn counts(&self) -> Counts {
        Counts {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.entries.lock().expect("never poisoned: nothing panics holding it").len(),
        }
    }

    /// The plan of `key`: the cached one, the one another caller is making (waited for), or
    /// the one `plan` makes. A failed plan is not kept: the next caller plans again.
    pub(crate) async fn get_or_plan(
        &self,
        key: Key,
        plan: impl FnOnce() -> Result<Plan, Error>,
    ) -> Result<Arc<Plan>, Error> {
        let cell = {
            let mut entries = self.entries.lock().expect("never poisoned: nothing panics holding it");
            let cell = match entries.iter().position(|(k, _)| *k == key) {
                Some(i) => entries.remove(i).expect("found").1,
                None => Arc::new(OnceCell::new()),
            };
            entries.push_back((key, cell.clone()));
            while entries.len() > self.capacity {
                // Whoever still plans or applies it keeps its own reference.
                entries.pop_front();
            }
            cell
        };
        let mut planned = false;
        let shared = cell
            .get_or_try_init(|| {
                planned = true;
                self.misses.fetch_add(1, Ordering::Relaxed);
                std::future::ready(plan().map(Arc::new))
            })
            .await?;
        if !planned {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(shared.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(b: u8) -> ObjectId {
        ObjectId::from_bytes_or_panic(&[b; 20])
    }

    fn empty() -> Plan {
        Plan::from_ops(None, id(0), [])
    }

    fn key(to: u8) -> Key {
        Key {
            repo: "/r.git".into(),
            from: (None, None),
            to: (id(to), id(to)),
            old_settings: None,
            new_settings: Some(Settings::default()),
            old_select: Select::all(),
            new_select: Select::all(),
            resubst: None,
            case_insensitive: false,
            limits: Limits::default(),
        }
    }

    #[tokio::test]
    async fn a_key_is_planned_once_and_then_shared() {
        let cache = Cache::new(4);
        let a = cache.get_or_plan(key(1), || Ok(empty())).await.expect("plan");
        let b = cache.get_or_plan(key(1), || panic!("planned again")).await.expect("hit");
        assert!(Arc::ptr_eq(&a, &b), "the same plan, not a copy");
        assert_eq!(cache.counts(), Counts { hits: 1, misses: 1, entries: 1 });
    }

    #[tokio::test]
    async fn a_failed_plan_is_planned_again() {
        let cache = Cache::new(4);
        let failed = cache.get_or_plan(key(1), || Err(crate::plan::too_deep(b"a/b"))).await;
        assert!(failed.is_err());
        cache.get_or_plan(key(1), || Ok(empty())).await.expect("planned again");
        assert_eq!(cache.counts(), Counts { hits: 0, misses: 2, entries: 1 });
    }

    #[tokio::test]
    async fn the_least_recently_used_key_is_dropped() {
        let cache = Cache::new(2);
        for k in [1, 2, 1, 3] {
            cache.get_or_plan(key(k), || Ok(empty())).await.expect("plan");
        }
        assert_eq!(cache.counts(), Counts { hits: 1, misses: 3, entries: 2 });
        // 2 was the least recently used: dropped; 1 is still there.
        cache.get_or_plan(key(1), || panic!("1 was kept")).await.expect("hit");
        cache.get_or_plan(key(2), || Ok(empty())).await.expect("planned again");
        assert_eq!(cache.counts(), Counts { hits: 2, misses: 4, entries: 2 });
    }

    /// Ten tasks on ten threads ask for one key at the same moment while it takes a while to
    /// plan: one plans, nine wait for its plan.
    #[test]
    fn callers_at_the_same_time_plan_once() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(10).build().expect("runtime");
        let cache = Arc::new(Cache::new(4));
        let planned = Arc::new(AtomicU64::new(0));
        let start = Arc::new(tokio::sync::Barrier::new(10));
        let plans: Vec<Arc<Plan>> = runtime.block_on(async {
            let tasks: Vec<_> = (0..10)
                .map(|_| {
                    let (cache, planned, start) = (cache.clone(), planned.clone(), start.clone());
                    tokio::spawn(async move {
                        start.wait().await;
                        cache
                            .get_or_plan(key(1), || {
                                planned.fetch_add(1, Ordering::SeqCst);
                                // Long enough for the other nine to arrive while it plans.
                                std::thread::sleep(std::time::Duration::from_millis(300));
                                Ok(empty())
                            })
                            .await
                            .expect("plan")
                    })
                })
                .collect();
            futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("task")).collect()
        });
        assert_eq!(planned.load(Ordering::SeqCst), 1, "planned once");
        assert!(plans.iter().all(|p| Arc::ptr_eq(p, &plans[0])));
        assert_eq!(cache.counts(), Counts { hits: 9, misses: 1, entries: 1 });
    }
}
