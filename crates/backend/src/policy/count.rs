use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::backend::{Backend, Batch, DirEntry, Error, Found, LockGuard, TargetState};
use crate::lock::Holder;
use crate::op::{Op, OpCounts};
use crate::path::RelPath;
use crate::source::BlobSource;

/// Everything a [`Count`] wrapper saw.
#[derive(Debug, Default, Clone)]
pub struct Record {
    /// Every op, in the order it was started.
    pub ops: Vec<Op>,
    /// Ops by kind.
    pub counts: OpCounts,
    /// Calls to `load_state`.
    pub state_reads: u64,
    /// Calls to `store_state`.
    pub state_writes: u64,
    /// Calls to `read_dir`.
    pub dir_reads: u64,
    /// Calls to `lock` and `prepare_target`.
    pub setup_calls: u64,
    /// Calls to `scan`.
    pub scans: u64,
    /// Calls to `read_file`.
    pub file_reads: u64,
    /// Calls to `probe`.
    pub probes: u64,
    /// Calls to `unlock`.
    pub unlocks: u64,
    /// Calls to `load_aux` and `aux_mtime`.
    pub aux_reads: u64,
    /// Calls to `store_aux` and `append_aux`.
    pub aux_writes: u64,
}

impl Record {
    /// Every call that touched the target: ops, state and auxiliary file reads and writes,
    /// directory listings, setup (lock, unlock, prepare), probes, scans and file reads.
    pub fn total_calls(&self) -> u64 {
        self.counts.total()
            + self.state_reads
            + self.state_writes
            + self.dir_reads
            + self.setup_calls
            + self.unlocks
            + self.probes
            + self.scans
            + self.file_reads
            + self.aux_reads
            + self.aux_writes
    }
}

/// Records every op and every state call, for tests and cost summaries.
pub struct Count<B> {
    inner: B,
    record: Arc<Mutex<Record>>,
}

impl<B: Backend> Count<B> {
    /// Wrap `inner`.
    pub fn new(inner: B) -> Self {
        Count { inner, record: Default::default() }
    }

    /// A handle to what was recorded so far; stays valid after the wrapper is moved.
    pub fn record(&self) -> Arc<Mutex<Record>> {
        self.record.clone()
    }

    fn note(&self, f: impl FnOnce(&mut Record)) {
        f(&mut self.record.lock().expect("record lock is never poisoned"));
    }
}

impl<B: Backend> fmt::Display for Count<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Count({})", self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for Count<B> {
    crate::delegate_backend!(inner, except storage);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.note(|r| {
            r.counts.add(op);
            r.ops.push(op.clone());
        });
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.note(|r| {
            for op in batch.iter() {
                r.counts.add(op);
                r.ops.push(op.clone());
            }
        });
        self.inner.execute_batch(batch, blobs).await
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        self.note(|r| r.setup_calls += 1);
        self.inner.prepare_target(create).await
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        self.note(|r| r.dir_reads += 1);
        self.inner.read_dir(dir).await
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.note(|r| r.state_reads += 1);
        self.inner.load_state().await
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.note(|r| r.state_writes += 1);
        self.inner.store_state(bytes).await
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        self.note(|r| r.setup_calls += 1);
        self.inner.lock(holder).await
    }

    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        self.note(|r| r.unlocks += 1);
        self.inner.unlock(guard).await
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        self.note(|r| r.scans += 1);
        self.inner.scan(jobs).await
    }

    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        self.note(|r| r.scans += 1);
        self.inner.scan_dirs(dirs, jobs).await
    }

    async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
        self.note(|r| r.probes += 1);
        self.inner.probe(dir).await
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        self.note(|r| r.file_reads += 1);
        self.inner.read_file(path).await
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        self.note(|r| r.aux_reads += 1);
        self.inner.load_aux(name).await
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.note(|r| r.aux_writes += 1);
        self.inner.store_aux(name, bytes).await
    }

    async fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.note(|r| r.aux_writes += 1);
        self.inner.append_aux(name, bytes).await
    }

    async fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        self.note(|r| r.aux_reads += 1);
        self.inner.aux_mtime(name).await
    }
}
