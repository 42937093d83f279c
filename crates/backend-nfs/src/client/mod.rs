//! `nfs://` targets: a built-in NFSv3 client that needs no mount, no root and no kernel NFS
//! support, and keeps a whole phase of the plan in flight on one TCP connection.
//!
//! Through a kernel mount every lookup is a synchronous round trip behind the VFS's locks; NFS
//! itself allows many calls in flight. Here each op of a phase is a short chain of calls
//! (the ops run concurrently under the [`Budgets`] wrapper, and
//! the calls of all of them share the connection):
//!
//! | op | calls |
//! |---|---|
//! | mkdir | MKDIR (its reply carries the new handle: no LOOKUP later) |
//! | write | GUARDED CREATE of `.treesync-tmp.NAME` with the mode (whatever is there is removed, never written through), WRITE (`FILE_SYNC` for one chunk; `UNSTABLE` chunks of the server's `wtmax` + one COMMIT for larger files), RENAME over `NAME` |
//! | symlink | SYMLINK of the temporary name, RENAME |
//! | chmod | LOOKUP, SETATTR; a file with other hard links is written anew like a write instead |
//! | unlink, rmdir | REMOVE, RMDIR |
//!
//! and every directory a plan touches is looked up once per run (LOOKUP results are cached by
//! path; directories made by the run are known from their MKDIR replies). No unchanged path is
//! ever looked up. The journal costs one LOOKUP + READ to read it and one WRITE per update (in
//! place, like the mounted backend, unless the file has other hard links: then it is replaced
//! by a new file); the lock is a file created with a guarded CREATE (`.treesync/lock.nfs`),
//! renewed every 30 s while held, taken over when its holder's process is gone (same host) or
//! it was not renewed for two minutes ([`ClientOptions::lease`]). A takeover RENAMEs the stale
//! file to a name of its own and checks it got the file it judged, so of several syncs taking
//! over at once one wins and the others find its fresh lock ([`Error::Locked`]). A renewal
//! that fails, or finds another file under the lock's name, stops the run: its next op or
//! state write fails with [`Error::LeaseLost`] instead of writing where another sync may
//! be writing.
//!
//! `verify` lists the target with READDIRPLUS (names, attributes and handles, ~100 entries a
//! call, up to the scan width in flight) and reads a file it must hash with the handle its
//! listing gave: one READ per file (by name again if the handle went stale).
//!
//! Calls that get no reply in time, or whose connection breaks, go again on a new connection;
//! the server's status codes become errors that name the path and say what they mean.
//!
//! The code is cut along these concerns: `mount` (portmapper, MOUNT, the NFS
//! connection, the target's handle), the directory-handle cache (`handles`), op execution
//! (`ops`), the state folder (`state`), the lock and its lease (`lock`) and `scan`, each
//! adding its calls to the backend's type, which `inner` declares with the state they share;
//! this file holds the options, [`open`] and the [`Backend`] implementation, which calls into
//! them.

pub mod generations;
mod handles;
mod inner;
mod lock;
mod mount;
pub mod nfs;
mod ops;
pub mod rpc;
mod scan;
mod state;
pub mod url;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use nfs3_types::nfs3::{fattr3, ftype3, nfsstat3, stable_how};
use tokio::sync::OnceCell;
use treesync_backend::backend::{Backend, Capabilities, DirEntry, Error, Found, LockGuard, Policy, TargetState};
use treesync_backend::lock::Holder;
use treesync_backend::path::STATE_DIR;
use treesync_backend::policy::{Adaptive, Budgets, Gate};
use treesync_backend::source::BlobSource;
use treesync_backend::{Op, RelPath};
use treesync_backend_local::fs::Target;

pub use generations::ClientHost;
pub use nfs::{Fh, NfsError};
pub use rpc::RpcOptions;
pub use url::NfsUrl;

#[allow(clippy::wildcard_imports)]
use inner::*;
pub use inner::{ClientBackend, LEASE};
use ops::read_all;

use crate::Window;

/// Options of [`open`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Directory lookups in flight (default 32: over the built-in client they pipeline).
    pub lookup_jobs: usize,
    /// Ops in flight (default: adaptive from 16, between 1 and 128).
    pub write_window: Window,
    /// Record every call with its path (tests, `-vv`).
    pub record: bool,
    /// The lock's lease: a lock not renewed for this long is taken over by another sync; a
    /// held lock is renewed four times per lease, and a renewal that fails stops the run
    /// ([`Error::LeaseLost`]) before it writes more. Default [`LEASE`] (2 minutes).
    pub lease: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            lookup_jobs: 32,
            write_window: Window::Adaptive(Adaptive { initial: 16, min: 1, max: 128, backoff_latency: 2.0 }),
            record: false,
            lease: LEASE,
        }
    }
}

/// The `nfs://` backend with its budgets: what the CLI uses for `--target nfs://…`.
pub fn open(url: &str, options: ClientOptions) -> Result<Budgets<ClientBackend>, Error> {
    let url = NfsUrl::parse(url).map_err(|detail| Error::BadUrl { detail })?;
    let mut backend = ClientBackend::new(url, options.record)?;
    Arc::get_mut(&mut backend.inner).expect("not shared yet").lease = options.lease;
    Ok(with_budgets(backend, &options))
}

/// `backend` with the lookup and write budgets of `options`.
pub(crate) fn with_budgets(backend: ClientBackend, options: &ClientOptions) -> Budgets<ClientBackend> {
    Budgets::new(backend, Gate::fixed(options.lookup_jobs.max(1)), options.write_window.gate())
}

impl ClientBackend {
    /// A backend for `url` (nothing is contacted until the first call).
    pub fn new(url: NfsUrl, record: bool) -> Result<Self, Error> {
        let mut rpc = RpcOptions { uid: url.uid, gid: url.gid, ..Default::default() };
        if let Some(n) = url.inflight {
            rpc.max_in_flight = n;
        }
        if let Some(t) = url.timeout {
            rpc.timeout = t;
        }
        Ok(ClientBackend { inner: Arc::new(Inner::fresh(url, rpc, record)) })
    }

    /// NFS calls made so far, by procedure.
    pub fn calls(&self) -> Vec<(&'static str, u64)> {
        self.inner.nfs.get().map(|n| n.counts()).unwrap_or_default()
    }

    /// All NFS calls made so far.
    pub fn total_calls(&self) -> u64 {
        self.inner.nfs.get().map_or(0, |n| n.total())
    }

    /// Every call with the path it was about (when created with `record`).
    pub fn recorded(&self) -> Vec<(&'static str, Vec<u8>)> {
        self.inner.nfs.get().map(|n| n.recorded()).unwrap_or_default()
    }

    /// The RPC client of the NFS program, once connected (in-flight figures, test hooks).
    pub fn rpc(&self) -> Option<&rpc::Client> {
        self.inner.nfs.get().map(|n| n.rpc())
    }
}

impl fmt::Display for ClientBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner.url)
    }
}

#[async_trait]
impl Backend for ClientBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::filesystem(*self.inner.case_sensitive.get().unwrap_or(&true))
    }

    fn policy(&self) -> Policy {
        Policy { jobs: 1, batch: 1, min_batch: 1, lookups: 1, scans: 1, spread: false }
    }

    fn cost(&self) -> Vec<(&'static str, u64)> {
        let mut out = self.calls();
        let m = self.inner.mount_calls.load(Ordering::Relaxed);
        if m > 0 {
            out.push(("MOUNT", m));
        }
        out
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.run(op, blobs).await
    }

    async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
        // A directory that cannot be looked up is the op's business (an unlink below a removed
        // directory is fine, a write is not): it reports the error with the op's path.
        let _ = self.dir(dir.as_bytes()).await;
        Ok(())
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        *self.inner.root.lock().await = None;
        *self.inner.meta.lock().await = None;
        self.inner.dirs.clear();
        let Some(root) = self.root(create).await? else { return Ok(TargetState::Empty) };
        if self.inner.case_sensitive.get().is_none() {
            // Once per backend: servers on APFS, NTFS or casefold directories say so here.
            let nfs = self.nfs().await?;
            let sensitive = nfs.pathconf(&root).await.map(|p| !p.case_insensitive).unwrap_or(true);
            let _ = self.inner.case_sensitive.set(sensitive);
        }
        if self.meta(false).await?.is_some() {
            return Ok(TargetState::Managed);
        }
        let nfs = self.nfs().await?;
        let entries =
            nfs.readdirplus(&root, b"").await.map_err(|e| nfs_io("read target directory", self.shown(b""), e))?;
        Ok(if entries.iter().any(|e| e.name == STATE_DIR.as_bytes()) {
            // Made a moment ago by a sync starting at the same time as this one: whatever
            // else is there is its work (the state, read under the lock, will tell).
            TargetState::Managed
        } else if entries.is_empty() {
            TargetState::Empty
        } else {
            TargetState::Unmanaged
        })
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let nfs = self.nfs().await?;
        let fh = self.dir(dir.as_bytes()).await.map_err(|e| e.at("read directory", dir))?;
        let entries = nfs.readdirplus(&fh, dir.as_bytes()).await.map_err(|e| nfs_io("read directory", dir, e))?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if dir.is_root() && e.name == STATE_DIR.as_bytes() {
                continue;
            }
            let is_dir = match &e.attr {
                Some(a) => a.type_ == ftype3::NF3DIR,
                None => {
                    let p = join(dir.as_bytes(), &e.name);
                    nfs.lookup(&fh, &e.name, &p)
                        .await
                        .map_err(|er| nfs_io("read directory", dir, er))?
                        .1
                        .is_some_and(|a| a.type_ == ftype3::NF3DIR)
                }
            };
            out.push(DirEntry { name: e.name, is_dir });
        }
        Ok(out)
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        let nfs = self.nfs().await?;
        // Listed by the scan just before: its handle, if the file is still that one.
        let known = self.inner.scanned.lock().expect("never poisoned").get(path.as_bytes()).cloned();
        if let Some((fh, size)) = known {
            match read_all(nfs, &fh, size, path.as_bytes()).await {
                Ok(data) => return Ok(data),
                // Removed since (the server forgot the handle): look it up by name.
                Err(e) if is(&e, nfsstat3::NFS3ERR_STALE) => {}
                Err(e) => return Err(nfs_io("read", path, e)),
            }
        }
        let (parent, name) = split_last(path.as_bytes());
        let dir = self.dir(parent).await.map_err(|e| e.at("read", path))?;
        let (fh, attr) = nfs.lookup(&dir, name, path.as_bytes()).await.map_err(|e| nfs_io("read", path, e))?;
        read_all(nfs, &fh, attr.map_or(0, |a| a.size), path.as_bytes()).await.map_err(|e| nfs_io("read", path, e))
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.read_state().await
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.write_state(bytes).await
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        // A writer follows: handles an earlier scan listed may name replaced files after it.
        self.inner.scanned.lock().expect("never poisoned").clear();
        self.take_lock(holder).await
    }

    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        self.release(guard).await
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        self.scan_all(jobs).await
    }

    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        self.scan_dirs_only(dirs, jobs).await
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        self.read_aux(name).await
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.write_aux(name, bytes).await
    }

    async fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.append_to_aux(name, bytes).await
    }

    async fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        self.aux_time(name).await
    }

    fn take_written(&self) -> Vec<treesync_backend::backend::Written> {
        std::mem::take(&mut *self.inner.written.lock().expect("never poisoned"))
    }

    fn record_written(&self, on: bool) {
        self.inner.recording.store(on, Ordering::Relaxed);
    }
}
