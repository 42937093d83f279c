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
    crate::delegate_backend!(inner, except execute, execute_batch, store_state);

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

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        if self.state_too && self.struck() {
            return Err(Error::Injected {
                after: self.started.load(Ordering::SeqCst),
                op: "store state",
                path: ".treesync/state".into(),
            });
        }
        self.inner.store_state(bytes).await
    }
}
