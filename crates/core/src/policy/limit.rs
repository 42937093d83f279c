use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use crate::backend::{Backend, Batch, Error, Policy};
use crate::op::Op;
use crate::source::BlobSource;

/// At most `n` op calls (single ops or batches) in flight on the inner backend, whoever calls.
pub struct Limit<B> {
    inner: B,
    n: usize,
    permits: Semaphore,
}

impl<B: Backend> Limit<B> {
    /// Wrap `inner` with a budget of `n` (at least 1).
    pub fn new(inner: B, n: usize) -> Self {
        let n = n.max(1);
        Limit { inner, n, permits: Semaphore::new(n) }
    }
}

impl<B: Backend> fmt::Display for Limit<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Limit({}, {})", self.n, self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for Limit<B> {
    crate::forward_backend!(capabilities);
    crate::forward_backend!(cost);

    fn policy(&self) -> Policy {
        Policy { jobs: self.n, ..self.inner.policy() }
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let _permit = self.permits.acquire().await.expect("semaphore is never closed");
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let _permit = self.permits.acquire().await.expect("semaphore is never closed");
        self.inner.execute_batch(batch, blobs).await
    }

    async fn prepare_target(&self, create: bool) -> Result<crate::backend::TargetState, Error> {
        self.inner.prepare_target(create).await
    }
    async fn read_dir(&self, dir: &crate::path::RelPath) -> Result<Vec<crate::backend::DirEntry>, Error> {
        self.inner.read_dir(dir).await
    }
    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.inner.load_state().await
    }
    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.inner.store_state(bytes).await
    }
    async fn lock(&self, holder: &str) -> Result<crate::backend::LockGuard, Error> {
        self.inner.lock(holder).await
    }

    async fn unlock(&self, guard: crate::backend::LockGuard) -> Result<(), Error> {
        self.inner.unlock(guard).await
    }
    async fn scan(&self, jobs: usize) -> Result<Vec<crate::backend::Found>, Error> {
        self.inner.scan(jobs).await
    }
    async fn probe(&self, dir: &crate::path::RelPath) -> Result<(), Error> {
        self.inner.probe(dir).await
    }
    async fn read_file(&self, path: &crate::path::RelPath) -> Result<Vec<u8>, Error> {
        self.inner.read_file(path).await
    }
    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        self.inner.load_aux(name).await
    }
    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.inner.store_aux(name, bytes).await
    }
}
