use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Backend, Batch, DirEntry, Error, Found, LockGuard, TargetState};
use crate::lock::Holder;
use crate::op::Op;
use crate::path::RelPath;
use crate::source::BlobSource;

/// Slow storage: every call on the inner backend waits first, between `min` and `max` (the
/// spread is a fixed function of the call's path, so a run is repeatable). Ops finish out of
/// order and overlap differently than on fast storage; nothing else changes. For tests (slow
/// ops, reordering) and for trying a policy against a given latency.
pub struct Latency<B> {
    inner: B,
    min: Duration,
    max: Duration,
    waits: AtomicU64,
}

impl<B: Backend> Latency<B> {
    /// Every call waits `d`.
    pub fn fixed(inner: B, d: Duration) -> Self {
        Latency { inner, min: d, max: d, waits: AtomicU64::new(0) }
    }

    /// Every call waits between `min` and `max`.
    pub fn spread(inner: B, min: Duration, max: Duration) -> Self {
        Latency { inner, min, max: max.max(min), waits: AtomicU64::new(0) }
    }

    /// How many calls waited so far (one per op, and one per other call that reaches the storage).
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    async fn wait(&self, about: &[u8]) {
        self.waits.fetch_add(1, Ordering::Relaxed);
        let span = self.max.saturating_sub(self.min);
        let d = if span.is_zero() {
            self.min
        } else {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in about {
                h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
            self.min + span.mul_f64((h % 1000) as f64 / 1000.0)
        };
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
}

impl<B: Backend> fmt::Display for Latency<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Latency({:?}..{:?}, {})", self.min, self.max, self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for Latency<B> {
    // Every call that reaches the storage waits; `capabilities`, `policy` and `cost` only
    // describe the backend, and `take_written` hands over what it noted.
    crate::delegate_backend!(inner, except storage);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.wait(op.path().as_bytes()).await;
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        for op in batch.iter() {
            self.wait(op.path().as_bytes()).await;
        }
        self.inner.execute_batch(batch, blobs).await
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        self.wait(b"prepare").await;
        self.inner.prepare_target(create).await
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        self.wait(dir.as_bytes()).await;
        self.inner.read_dir(dir).await
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.wait(b"state").await;
        self.inner.load_state().await
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.wait(bytes).await;
        self.inner.store_state(bytes).await
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        self.wait(b"lock").await;
        self.inner.lock(holder).await
    }

    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        self.wait(b"unlock").await;
        self.inner.unlock(guard).await
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        self.wait(b"scan").await;
        self.inner.scan(jobs).await
    }

    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        self.wait(b"scan").await;
        self.inner.scan_dirs(dirs, jobs).await
    }

    async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
        self.wait(dir.as_bytes()).await;
        self.inner.probe(dir).await
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        self.wait(path.as_bytes()).await;
        self.inner.read_file(path).await
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        self.wait(name.as_bytes()).await;
        self.inner.load_aux(name).await
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.wait(name.as_bytes()).await;
        self.inner.store_aux(name, bytes).await
    }

    async fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.wait(name.as_bytes()).await;
        self.inner.append_aux(name, bytes).await
    }

    async fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        self.wait(name.as_bytes()).await;
        self.inner.aux_mtime(name).await
    }
}
