use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::backend::{Backend, Batch, Error};
use crate::op::Op;
use crate::source::BlobSource;

/// What an injected fault looks like to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// [`Error::Injected`]: a plain "the process stopped here".
    Stop,
    /// An I/O error of this kind at the op's path, as the storage would report it
    /// (`StorageFull`, `PermissionDenied`, `ReadOnlyFilesystem`, `TimedOut`, `Other` for EIO, …).
    Io(std::io::ErrorKind),
}

/// Fault injection: the op after the first `after` ops fails (and every one after it), as if
/// the storage or the process had failed there. State writes are not counted and keep working
/// unless [`Fail::also_state`] is set, so tests can check what the journal says.
pub struct Fail<B> {
    inner: B,
    after: u64,
    started: AtomicU64,
    state_too: bool,
    fault: Fault,
}

impl<B: Backend> Fail<B> {
    /// Let `after` ops through, then fail.
    pub fn after(inner: B, after: u64) -> Self {
        Fail { inner, after, started: AtomicU64::new(0), state_too: false, fault: Fault::Stop }
    }

    /// Fail with `fault` instead of [`Fault::Stop`].
    pub fn with(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Once the fault has struck, also fail state writes (as if the process died).
    pub fn also_state(mut self) -> Self {
        self.state_too = true;
        self
    }

    fn fault(&self, index: u64, op: &Op) -> Error {
        match self.fault {
            Fault::Stop => Error::Injected { after: index, op: op.kind().name(), path: op.path().display() },
            Fault::Io(kind) => {
                Error::io(op.kind().name(), op.path(), std::io::Error::new(kind, format!("{kind} (injected)")))
            }
        }
    }

    fn struck(&self) -> bool {
        self.started.load(Ordering::SeqCst) > self.after
    }
}

impl<B: Backend> fmt::Display for Fail<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fail(after {}, {})", self.after, self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for Fail<B> {
    crate::forward_backend!(capabilities);
    crate::forward_backend!(cost);
    crate::forward_backend!(policy);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let index = self.started.fetch_add(1, Ordering::SeqCst);
        if index >= self.after {
            return Err(self.fault(index, op));
        }
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let n = batch.len() as u64;
        let start = self.started.fetch_add(n, Ordering::SeqCst);
        if start + n <= self.after {
            return self.inner.execute_batch(batch, blobs).await;
        }
        let allowed = self.after.saturating_sub(start);
        if allowed > 0 {
            self.inner.execute_batch(batch.prefix(allowed as usize), blobs).await?;
        }
        Err(self.fault(start + allowed, &batch[allowed as usize]))
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
        if self.state_too && self.struck() {
            return Err(Error::State("injected fault: state write after the process 'died'".into()));
        }
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
