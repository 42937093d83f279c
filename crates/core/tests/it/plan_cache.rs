//! `sync::Options::plans`: mirrors of one repository and ref share one plan per transition
//! (`plan::Cache`), and each still ends up holding exactly the tree it asked for. Real git
//! repositories (`git fast-import`), targets compared with `git archive`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use treesync_core::plan::{Cache, Counts};
use treesync_core::select::Select;
use treesync_core::{Backend, MemoryBackend, Repo, sync};
use treesync_testkit::conformance::{History, reduce};
use treesync_testkit::history::{Entry, Model, change_some, wide_tree};
use treesync_testkit::tree::{Node, read_memory};

fn file(content: &str) -> Entry {
    Entry::File { content: content.as_bytes().to_vec(), executable: false }
}

/// What `git archive` leaves out of every commit (`export-ignore`) and a plain sync writes.
const SECRET: &str = "secret";

/// Three commits: A; B (every file of A changes, one removed, one added); C (a file only C
/// has), which a target at C must lose on its way to B. Each has a `.gitattributes` making
/// [`SECRET`] `export-ignore`.
fn trees() -> Vec<Model> {
    let mut out = Vec::new();
    for (name, only) in [("a", "only-a"), ("b", "only-b"), ("c", "only-c")] {
        let mut m = Model::default();
        m.insert(".gitattributes", file(&format!("{SECRET} export-ignore\n")));
        m.insert(SECRET, file(&format!("{name}'s secret\n")));
        m.insert(only, file(name));
        for i in 0..12 {
            let content = if name == "c" { format!("a{i}") } else { format!("{name}{i}") };
            m.insert(&format!("d{}/f{i}", i % 3), file(&content));
        }
        out.push(m);
    }
    out
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

async fn sync_to(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    options: &sync::Options,
) -> Result<sync::Outcome, sync::Error> {
    sync::sync(repo, rev, backend, options, &|_| {}, &AtomicBool::new(false)).await
}

fn options(plans: Option<&Arc<Cache>>) -> sync::Options {
    sync::Options { backend_name: "memory".into(), plans: plans.cloned(), ..Default::default() }
}

/// What a plain sync of commit `i` writes: `git archive` of it, and the `export-ignore` file.
fn plain(h: &History, i: usize) -> BTreeMap<String, Node> {
    let mut tree = h.expected(i);
    let secret = trees()[i].0[SECRET].clone();
    let Entry::File { content, .. } = secret else { unreachable!("a file") };
    tree.insert(SECRET.into(), Node::File(content, false));
    tree
}

/// Panic unless `backend` holds `expected` (as far as it can hold it).
fn assert_holds(backend: &MemoryBackend, expected: &BTreeMap<String, Node>, what: &str) {
    let mut held = read_memory(&backend.snapshot());
    held.retain(|k, _| !k.starts_with(".treesync"));
    let expected = reduce(expected, backend.capabilities());
    if let Some(d) = treesync_testkit::tree::diff(&expected, &held) {
        panic!("{what}: the target is not what was asked for:\n{d}");
    }
}

#[tokio::test]
async fn ten_mirrors_moving_from_a_to_b_plan_once() {
    let h = History::from_trees(&trees());
    let mirrors: Vec<MemoryBackend> = (0..10).map(|_| MemoryBackend::new()).collect();
    for m in &mirrors {
        sync_to(&h.repo, &h.commits[A], m, &options(None)).await.expect("to A");
    }
    let cache = Arc::new(Cache::new(4));
    let mut applied = Vec::new();
    for m in &mirrors {
        let out = sync_to(&h.repo, &h.commits[B], m, &options(Some(&cache))).await.expect("to B");
        applied.push(out.applied);
    }
    assert_eq!(cache.counts(), Counts { hits: 9, misses: 1, entries: 1 });
    for (i, m) in mirrors.iter().enumerate() {
        assert_holds(m, &plain(&h, B), &format!("mirror {i}"));
    }
    // Each applied the whole plan itself (14 files written, one removed).
    assert!(applied.iter().all(|a| *a == applied[0] && a.total() == 15), "{applied:?}");
}

/// One target of [`mirrors_with_other_settings_plan_on_their_own`].
struct Mirror {
    what: &'static str,
    backend: MemoryBackend,
    /// The commit it holds before.
    at: usize,
    select: Select,
    export: bool,
}

#[tokio::test]
async fn mirrors_with_other_settings_plan_on_their_own() {
    let h = History::from_trees(&trees());
    // The same commits in another repository: the same ids, another object database.
    let other = History::from_trees(&trees());
    assert_eq!(other.commits, h.commits, "fast-import made the same commits");
    let d0 = Select::new(&["d0".to_string()], &[]).expect("select");
    let mirror =
        |what, backend, at, select: &Select, export| Mirror { what, backend, at, select: select.clone(), export };
    let all = Select::all();
    let mirrors = [
        mirror("plain 1", MemoryBackend::new(), A, &all, false),
        mirror("plain 2", MemoryBackend::new(), A, &all, false),
        mirror("plain 3", MemoryBackend::new(), A, &all, false),
        mirror("--include d0", MemoryBackend::new(), A, &d0, false),
        mirror("--export", MemoryBackend::new(), A, &all, true),
        mirror("at C", MemoryBackend::new(), C, &all, false),
        mirror("case-insensitive", MemoryBackend::case_insensitive(), A, &all, false),
    ];
    let with = |m: &Mirror, plans: Option<&Arc<Cache>>| sync::Options {
        select: m.select.clone(),
        export: m.export,
        ..options(plans)
    };
    for m in &mirrors {
        sync_to(&h.repo, &h.commits[m.at], &m.backend, &with(m, None)).await.expect(m.what);
    }
    let in_other = MemoryBackend::new();
    sync_to(&other.repo, &other.commits[A], &in_other, &options(None)).await.expect("other repository");

    let cache = Arc::new(Cache::new(16));
    for m in &mirrors {
        sync_to(&h.repo, &h.commits[B], &m.backend, &with(m, Some(&cache))).await.expect(m.what);
    }
    sync_to(&other.repo, &other.commits[B], &in_other, &options(Some(&cache))).await.expect("other repository");
    // The three plain mirrors share a plan; every other one (and the other repository) has
    // its own.
    assert_eq!(cache.counts(), Counts { hits: 2, misses: 6, entries: 6 });

    for m in &mirrors {
        let expected = match m.what {
            "--include d0" => plain(&h, B).into_iter().filter(|(k, _)| k == "d0" || k.starts_with("d0/")).collect(),
            "--export" => h.expected(B),
            _ => plain(&h, B),
        };
        assert_holds(&m.backend, &expected, m.what);
    }
    assert_holds(&in_other, &plain(&other, B), "other repository");
}

/// Ten mirrors on ten threads move from A to B at the same moment: one plans, nine wait for
/// its plan.
#[test]
fn mirrors_syncing_at_the_same_time_plan_once() {
    // A diff large enough that the nine others arrive while the first plans.
    let a = wide_tree(4_000, 7);
    let (b, _) = change_some(&a, 2_000, 100, 200, 8);
    let h = Arc::new(History::from_trees(&[a, b]));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(10).build().expect("runtime");
    let mirrors: Vec<Arc<MemoryBackend>> = (0..10).map(|_| Arc::new(MemoryBackend::new())).collect();
    let cache = Arc::new(Cache::new(4));
    runtime.block_on(async {
        for m in &mirrors {
            sync_to(&h.repo, &h.commits[0], &**m, &options(None)).await.expect("to A");
        }
        let start = Arc::new(tokio::sync::Barrier::new(mirrors.len()));
        let syncs = mirrors.iter().map(|m| {
            let (h, m, cache, start) = (h.clone(), m.clone(), cache.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                sync_to(&h.repo, &h.commits[1], &*m, &options(Some(&cache))).await.expect("to B")
            })
        });
        let outs: Vec<sync::Outcome> =
            futures::future::join_all(syncs).await.into_iter().map(|o| o.expect("task")).collect();
        // Each applied the whole plan itself: 2,000 changed, 100 added, 200 removed, and the
        // directories that empties.
        assert!(outs[0].applied.total() >= 2_300, "{}", outs[0].applied);
        assert!(outs.iter().all(|o| o.applied == outs[0].applied && o.planned == o.applied));
    });
    assert_eq!(cache.counts(), Counts { hits: 9, misses: 1, entries: 1 });
    let expected = h.expected(1);
    for (i, m) in mirrors.iter().enumerate() {
        assert_holds(m, &expected, &format!("mirror {i}"));
    }
}

#[tokio::test]
async fn the_cache_keeps_only_its_last_keys() {
    let h = History::random(11, 12);
    let cache = Arc::new(Cache::new(3));
    let (first, second) = (MemoryBackend::new(), MemoryBackend::new());
    for (i, rev) in h.commits.iter().enumerate() {
        // Two mirrors in step: the first plans each transition, the second reuses it.
        sync_to(&h.repo, rev, &first, &options(Some(&cache))).await.expect("first");
        sync_to(&h.repo, rev, &second, &options(Some(&cache))).await.expect("second");
        let counts = cache.counts();
        assert_eq!((counts.misses, counts.hits), (i as u64 + 1, i as u64 + 1), "step {i}");
        assert!(counts.entries <= 3, "step {i}: {counts:?}");
        assert_holds(&second, &h.expected(i), &format!("step {i}"));
    }
    assert_eq!(cache.counts().entries, 3);
    // A late mirror's first transition (nothing → the first commit) is long gone: planned again.
    let late = MemoryBackend::new();
    sync_to(&h.repo, &h.commits[0], &late, &options(Some(&cache))).await.expect("late");
    assert_eq!(cache.counts(), Counts { hits: 12, misses: 13, entries: 3 });
    assert_holds(&late, &h.expected(0), "late");
}
