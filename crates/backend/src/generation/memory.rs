//! [`MemoryHost`]: generations in memory, the reference [`Host`] for tests — with a fault that
//! stops every write after a number of them, to check what a crash at each step leaves.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::host::{At, AtTarget, CloneHow, Cloned, Host, Switch, Switched};
use crate::backend::{Backend, Batch, Error, LockGuard};
use crate::lock::Holder;
use crate::memory::{MemNode, MemoryBackend};
use crate::op::Op;
use crate::source::BlobSource;

/// What a name of the memory host holds.
#[derive(Clone)]
enum Place {
    /// A directory tree.
    Dir(MemoryBackend),
    /// A symlink to a slot.
    Link(String),
}

#[derive(Default)]
struct Inner {
    target: Option<Place>,
    home: bool,
    slots: BTreeMap<String, Place>,
    record: Option<Vec<u8>>,
    locked: bool,
}

/// Counts writes and stops all of them after the first `after` (as if the process died there).
#[derive(Debug)]
struct Budget {
    after: AtomicU64,
    done: AtomicU64,
}

impl Budget {
    fn tick(&self, what: &'static str, path: &str) -> Result<(), Error> {
        let n = self.done.fetch_add(1, Ordering::SeqCst);
        if n >= self.after.load(Ordering::SeqCst) {
            return Err(Error::Injected { after: n, op: what, path: path.to_string() });
        }
        Ok(())
    }
}

/// Generations in memory: the target, the home and its slots are [`MemoryBackend`] trees and
/// names. [`MemoryHost::fail_after`] makes every write (of the host and of the generations'
/// backends: ops and state writes) fail after that many, to check crashes at every step.
pub struct MemoryHost {
    inner: Arc<Mutex<Inner>>,
    budget: Arc<Budget>,
    exchange: bool,
}

impl MemoryHost {
    /// An empty place (no target yet); `exchange`: whether it can swap directories.
    pub fn new(exchange: bool) -> Self {
        MemoryHost {
            inner: Default::default(),
            budget: Arc::new(Budget { after: AtomicU64::new(u64::MAX), done: AtomicU64::new(0) }),
            exchange,
        }
    }

    /// Let `n` more writes through, then fail every one (`u64::MAX`: never fail).
    pub fn fail_after(&self, n: u64) {
        let done = self.budget.done.load(Ordering::SeqCst);
        self.budget.after.store(done.saturating_add(n), Ordering::SeqCst);
    }

    /// Writes made so far.
    pub fn writes(&self) -> u64 {
        self.budget.done.load(Ordering::SeqCst)
    }

    /// What a reader resolving the target now would read: the tree of the directory it is or
    /// points to (`None`: no target, or a dangling link).
    pub fn resolve(&self) -> Option<BTreeMap<Vec<u8>, MemNode>> {
        let inner = self.inner.lock().expect("never poisoned");
        match &inner.target {
            Some(Place::Dir(b)) => Some(b.snapshot()),
            Some(Place::Link(s)) => match inner.slots.get(s) {
                Some(Place::Dir(b)) => Some(b.snapshot()),
                _ => None,
            },
            None => None,
        }
    }

    /// The slots' names, as the home holds them.
    pub fn slot_names(&self) -> Vec<String> {
        self.inner.lock().expect("never poisoned").slots.keys().cloned().collect()
    }

    /// Make the target a plain directory holding `tree` (a target before it is atomic).
    pub fn set_target(&self, tree: MemoryBackend) {
        self.inner.lock().expect("never poisoned").target = Some(Place::Dir(tree));
    }

    fn ticking(&self, b: MemoryBackend) -> Arc<dyn Backend> {
        Arc::new(Ticking { inner: b, budget: self.budget.clone() })
    }
}

impl fmt::Display for MemoryHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("memory-generations")
    }
}

/// A generation's backend: the memory tree, its writes counted against the host's budget.
struct Ticking {
    inner: MemoryBackend,
    budget: Arc<Budget>,
}

impl fmt::Display for Ticking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ticking({})", self.inner)
    }
}

#[async_trait]
impl Backend for Ticking {
    crate::delegate_backend!(inner, except execute, execute_batch, store_state);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.budget.tick(op.kind().name(), &op.path().display())?;
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        for op in batch.iter() {
            self.execute(op, blobs).await?;
        }
        Ok(())
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.budget.tick("store state", ".treesync/state")?;
        self.inner.store_state(bytes).await
    }
}

#[async_trait]
impl Host for MemoryHost {
    fn home_name(&self) -> String {
        ".target.treesync".into()
    }

    async fn can_exchange(&self) -> Result<bool, Error> {
        Ok(self.exchange)
    }

    async fn at_target(&self) -> Result<AtTarget, Error> {
        let inner = self.inner.lock().expect("never poisoned");
        Ok(match &inner.target {
            None => AtTarget::Missing,
            Some(Place::Link(s)) => {
                AtTarget::Link { text: format!("{}/{s}", self.home_name()).into_bytes(), slot: Some(s.clone()) }
            }
            Some(Place::Dir(b)) => {
                let managed = b.has_state();
                AtTarget::Dir { managed, empty: !managed && b.snapshot().is_empty() }
            }
        })
    }

    async fn home_exists(&self) -> Result<bool, Error> {
        Ok(self.inner.lock().expect("never poisoned").home)
    }

    async fn create_home(&self) -> Result<(), Error> {
        if !self.inner.lock().expect("never poisoned").home {
            self.budget.tick("create home", ".target.treesync")?;
            self.inner.lock().expect("never poisoned").home = true;
        }
        Ok(())
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let mut inner = self.inner.lock().expect("never poisoned");
        if inner.locked {
            return Err(Error::Locked { holder: holder.to_string() });
        }
        inner.locked = true;
        Ok(LockGuard(Box::new(Unlock(self.inner.clone()))))
    }

    async fn load_record(&self) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.inner.lock().expect("never poisoned").record.clone())
    }

    async fn store_record(&self, bytes: &[u8]) -> Result<(), Error> {
        self.budget.tick("store record", "generations")?;
        self.inner.lock().expect("never poisoned").record = Some(bytes.to_vec());
        Ok(())
    }

    async fn slots(&self) -> Result<Vec<String>, Error> {
        Ok(self.slot_names())
    }

    fn open(&self, at: &At) -> Arc<dyn Backend> {
        let mut inner = self.inner.lock().expect("never poisoned");
        let tree = match at {
            At::Target => match &inner.target {
                Some(Place::Dir(b)) => b.clone(),
                _ => MemoryBackend::new(),
            },
            At::Slot(s) => match inner.slots.get(s) {
                Some(Place::Dir(b)) => b.clone(),
                _ => {
                    // A new slot: the directory a first write would create.
                    let b = MemoryBackend::new();
                    inner.slots.insert(s.clone(), Place::Dir(b.clone()));
                    b
                }
            },
        };
        drop(inner);
        self.ticking(tree)
    }

    async fn clone_tree(&self, from: &At, to: &str) -> Result<Cloned, Error> {
        let source = {
            let inner = self.inner.lock().expect("never poisoned");
            let place = match from {
                At::Target => inner.target.as_ref(),
                At::Slot(s) => inner.slots.get(s),
            };
            match place {
                Some(Place::Dir(b)) => b.clone(),
                _ => MemoryBackend::new(),
            }
        };
        // Entry by entry, each a write (a crash leaves a partial copy), the state last.
        let tree = MemoryBackend::new();
        self.budget.tick("clone", to)?;
        {
            // As `mkdir`: never over a slot that is there.
            let mut inner = self.inner.lock().expect("never poisoned");
            if inner.slots.contains_key(to) {
                return Err(Error::io("create", to, std::io::ErrorKind::AlreadyExists.into()));
            }
            inner.slots.insert(to.to_string(), Place::Dir(tree.clone()));
        }
        let (mut dirs, mut entries) = (0, 0);
        for (path, node) in source.snapshot() {
            let path = String::from_utf8_lossy(&path).into_owned();
            self.budget.tick("clone", &path)?;
            match &node {
                MemNode::Dir => dirs += 1,
                _ => entries += 1,
            }
            tree.insert(&path, node);
        }
        if let Some(state) = source.load_state().await? {
            self.budget.tick("clone", ".treesync/state")?;
            tree.store_state(&state).await?;
        }
        Ok(Cloned { how: CloneHow::Copy, dirs, entries, bytes_copied: 0 })
    }

    async fn switch(&self, slot: &str, how: Switch, displaced: &str) -> Result<Switched, Error> {
        self.budget.tick("switch", slot)?;
        let mut inner = self.inner.lock().expect("never poisoned");
        let old = inner.target.take();
        let previous = match (how, old) {
            (Switch::Symlink, None) => None,
            (Switch::Symlink, Some(Place::Link(s))) => Some(s),
            (Switch::Symlink, Some(dir @ Place::Dir(_))) => {
                // As `rename` without replacing: never over a slot that is there.
                if inner.slots.contains_key(displaced) {
                    inner.target = Some(dir);
                    return Err(Error::io("rename", displaced, std::io::ErrorKind::AlreadyExists.into()));
                }
                inner.slots.insert(displaced.to_string(), dir);
                Some(displaced.to_string())
            }
            (Switch::Exchange, old) => {
                let new = inner.slots.remove(slot).expect("the slot being switched to exists");
                let previous = match old {
                    None => None,
                    Some(Place::Link(s)) => Some(s),
                    Some(dir @ Place::Dir(_)) => {
                        inner.slots.insert(slot.to_string(), dir);
                        Some(slot.to_string())
                    }
                };
                inner.target = Some(new);
                return Ok(Switched { previous });
            }
        };
        inner.target = Some(Place::Link(slot.to_string()));
        Ok(Switched { previous })
    }

    async fn unlink_target(&self, slot: &str) -> Result<(), Error> {
        self.budget.tick("unlink target", slot)?;
        let mut inner = self.inner.lock().expect("never poisoned");
        let dir = inner.slots.remove(slot).expect("the slot exists");
        inner.target = Some(dir);
        Ok(())
    }

    async fn rename_slot(&self, from: &str, to: &str) -> Result<(), Error> {
        self.budget.tick("rename slot", from)?;
        let mut inner = self.inner.lock().expect("never poisoned");
        if let Some(p) = inner.slots.remove(from) {
            inner.slots.insert(to.to_string(), p);
        }
        Ok(())
    }

    async fn remove_slot(&self, slot: &str) -> Result<u64, Error> {
        self.budget.tick("remove slot", slot)?;
        Ok(u64::from(self.inner.lock().expect("never poisoned").slots.remove(slot).is_some()))
    }

    async fn remove_home(&self) -> Result<(), Error> {
        self.budget.tick("remove home", ".target.treesync")?;
        let mut inner = self.inner.lock().expect("never poisoned");
        inner.home = false;
        inner.record = None;
        Ok(())
    }
}

struct Unlock(Arc<Mutex<Inner>>);

impl Drop for Unlock {
    fn drop(&mut self) {
        self.0.lock().expect("never poisoned").locked = false;
    }
}
