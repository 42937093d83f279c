//! A backend of your own: a wrapper that implements [`Backend`] around any other and logs
//! every call, then the same sync through it.
//!
//! ```sh
//! cargo run -p treesync --example logging -- REPO REV TARGET
//! cargo run -p treesync --example logging -- . HEAD memory://
//! ```
//!
//! A wrapper implements the methods it changes — here one line on stdout per operation and per
//! state or lock call — and forwards every other method of the trait to the backend inside with
//! [`treesync::core::delegate_backend!`]. The policy wrappers of the core (`Budgets`, `Latency`,
//! `Count`, `Fail`) are built the same way. `Display` shows the stack
//! (`Logged(local:/srv/site)`), and the wrapper keeps the inner backend's policy, so it runs
//! with the budgets [`treesync::open`] decided.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use treesync::core::backend::{Batch, Error, LockGuard};
use treesync::core::source::BlobSource;
use treesync::core::state::Holder;
use treesync::{Backend, Op, Repo, Target, sync};

/// Logs every call to the backend inside, and counts the ops.
struct Logged<B> {
    inner: B,
    ops: AtomicU64,
}

impl<B: Backend> fmt::Display for Logged<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Logged({})", self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for Logged<B> {
    // Everything not listed goes to `inner` untouched (capabilities, policy, read_dir, scan, …).
    treesync::core::delegate_backend!(inner, except execute, execute_batch, load_state, store_state, lock, unlock);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        println!("op: {} {}", op.kind().name(), op.path());
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.inner.execute(op, blobs).await
    }
    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        for op in batch.iter() {
            println!("op: {} {}", op.kind().name(), op.path());
        }
        self.ops.fetch_add(batch.iter().count() as u64, Ordering::Relaxed);
        self.inner.execute_batch(batch, blobs).await
    }
    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        println!("call: load_state");
        self.inner.load_state().await
    }
    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        println!("call: store_state ({} bytes)", bytes.len());
        self.inner.store_state(bytes).await
    }
    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        println!("call: lock (held by {holder})");
        self.inner.lock(holder).await
    }
    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        println!("call: unlock");
        self.inner.unlock(guard).await
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [repo, rev, target] = args.as_slice() else {
        eprintln!("usage: logging REPO REV TARGET");
        std::process::exit(2);
    };
    // The settings (here the defaults) open the target and make the sync's options.
    let settings = treesync::Settings::default();
    let opened = treesync::open(&Target::parse(target)?, &settings.target.options())?;
    let logged = Logged { inner: opened.backend.clone(), ops: AtomicU64::new(0) };
    let repo = Repo::open(repo)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let sync_options = sync::Options {
        backend_name: format!("logging example: {}", opened.label()),
        ..settings.sync_options(&opened)?
    };
    let outcome = runtime.block_on(sync::sync(&repo, rev, &logged, &sync_options, &|_| {}, &AtomicBool::new(false)))?;
    println!(
        "synced {} through {logged}: {} ops logged, {}",
        outcome.commit,
        logged.ops.load(Ordering::Relaxed),
        outcome.applied
    );
    Ok(())
}
