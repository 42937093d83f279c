//! # treesync-backend-nfs
//!
//! Executes treesync plans on a network filesystem mounted on this machine (NFS, SMB/CIFS, a
//! FUSE network filesystem), through ordinary POSIX calls, with a policy made for storage where
//! every metadata call is a round trip:
//!
//! * **Directory handles, once per run.** Each directory the plan touches is looked up once,
//!   relative to its parent's handle, and every op runs relative to its directory's handle
//!   (`openat`, `renameat`, `unlinkat`, `mkdirat` on a directory descriptor): no path is ever
//!   resolved again from the root. No path the plan does not change is looked up at all.
//! * **Separate budgets** for lookups, for the read-only scan of `verify` and for writes
//!   (creates, renames, removals overlap well on NFS), as the [`Budgets`] wrapper. Lookups and
//!   writes are adaptive by default ([`Gate::adaptive`]): a budget grows while throughput rises
//!   and backs off when latency climbs, so nobody has to guess `--write-jobs` or
//!   `--lookup-jobs`. Each directory is looked up once; lookups of different children of one
//!   directory overlap (a kernel client holds the parent's lock shared for a lookup since
//!   Linux 4.7), and the directories a plan's later phases write in are looked up while its
//!   first phase runs. The scan of `verify` runs 32 threads by default: every stat is a round trip,
//!   and only many in flight hide it, as git's preloaded index does for `git status`.
//! * Files are written under a temporary name in their directory and renamed over the old one (no
//!   unlink before replace, no utime, chmod only for mode-only changes, symlinks last): the same
//!   atomic-replace code as the local backend ([`treesync_backend_local::fs`]).
//!
//! [`client`] is the other way to an NFS server: the built-in NFSv3 client of `nfs://` targets,
//! which needs no mount (not to be confused with `treesync-remote`, which fetches git
//! repositories).
//!
//! Use [`open`] for the composed backend, [`detect::choose`] to tell whether a directory is on
//! a network filesystem:
//!
//! ```
//! use treesync_backend_nfs::{Options, Window, detect};
//! use treesync_backend::Backend;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let target = dir.path().join("site");
//! // What `--backend auto` would pick for this directory, and why.
//! let choice = detect::choose(&target);
//! println!("network filesystem: {} ({})", choice.network, choice.reason);
//!
//! // One lookup at a time, at most 16 writes in flight (or `Window::WRITES`: adaptive).
//! let backend = treesync_backend_nfs::open(
//!     &target,
//!     Options { lookup_window: Window::Fixed(1), scan_jobs: 32, write_window: Window::Fixed(16), fsync: false },
//! );
//! assert_eq!((backend.policy().jobs, backend.policy().lookups, backend.policy().scans), (16, 1, 32));
//! // Hand it to `treesync_core::sync::sync` like any other backend.
//! # Ok(()) }
//! ```

pub mod client;
pub mod detect;
mod dirs;
mod meta;
pub mod mountinfo;

use std::fmt;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use treesync_backend::lock::Holder;

use async_trait::async_trait;
use rustix::io::Errno;
use treesync_backend::backend::{Backend, Batch, Capabilities, DirEntry, Error, Found, LockGuard, Policy, TargetState};
use treesync_backend::policy::{Adaptive, Budgets, Gate};
use treesync_backend::source::BlobSource;
use treesync_backend::{Op, RelPath};
use treesync_backend_local::fs::Target;

/// How many operations of one kind (directory lookups, writes) may be in flight: a fixed
/// number, or a window that moves with the latency the storage shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// Exactly this many.
    Fixed(usize),
    /// Adapt to the latency the storage shows (start, floor and ceiling in `Adaptive`).
    Adaptive(Adaptive),
}

impl Window {
    /// The default for writes: adaptive, starting at 16, between 1 and 64.
    pub const WRITES: Window = Window::Adaptive(Adaptive { initial: 16, min: 1, max: 64, backoff_latency: 2.0 });

    /// The default for directory lookups: adaptive, starting at 8, between 1 and 16. An
    /// incremental sync makes a few dozen lookups, fewer than one window of the controller, so
    /// the start is what it runs with: with lookups in one directory overlapping, 8 at a time
    /// (and writes starting at 16) took the update on the 1 ms FUSE testbed from 48 to 42 ms
    /// against 4 (and 8), `BENCHMARKS.md`; larger runs (a verify's stat calls, many new
    /// directories) widen it while the latency per lookup holds and narrow it when the server
    /// queues.
    pub const LOOKUPS: Window = Window::Adaptive(Adaptive { initial: 8, min: 1, max: 16, backoff_latency: 2.0 });

    /// The gate that holds the operations to this window.
    pub fn gate(self) -> Gate {
        match self {
            Window::Fixed(n) => Gate::fixed(n),
            Window::Adaptive(a) => Gate::adaptive(a),
        }
    }

    /// The range this window moves in; a fixed `n` as the range from 1 to `n`, starting at `n`.
    pub fn range(self) -> Adaptive {
        match self {
            Window::Adaptive(a) => a,
            Window::Fixed(n) => Adaptive { initial: n, min: 1, max: n, ..Adaptive::default() },
        }
    }
}

/// Options of [`open`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Directory lookups in flight during a sync (the probes of the directories it writes in),
    /// each directory looked up once. Default [`Window::LOOKUPS`]: adaptive, starting at 8,
    /// between 1 and 16.
    pub lookup_window: Window,
    /// Threads of a read-only scan (the readdir and stat calls of `verify`), each with one
    /// lookup in flight. Default 32: on these mounts every stat is a round trip (two FUSE
    /// requests, LOOKUP and GETATTR, with `actimeo=0`) and the scan takes no lock a write needs.
    pub scan_jobs: usize,
    /// Writes in flight. Default [`Window::WRITES`]: adaptive, starting at 16, between 1 and 64.
    pub write_window: Window,
    /// `fsync` every file before renaming it into place.
    pub fsync: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { lookup_window: Window::LOOKUPS, scan_jobs: 32, write_window: Window::WRITES, fsync: false }
    }
}

/// The NFS backend with its budgets: what the CLI uses for `--backend nfs`.
///
/// The backend takes a ticket of the lookup budget for each directory lookup it sends, and
/// holds the directory it looks in meanwhile, so a wider budget only ever adds lookups in
/// other directories: what a kernel client runs in parallel without contending (see
/// `docs/backends.md`).
pub fn open(root: impl Into<PathBuf>, options: Options) -> Budgets<NfsBackend> {
    let writes = options.write_window.gate();
    let lookups = options.lookup_window.gate();
    let backend = NfsBackend::build(root.into(), options.fsync, Some(lookups.clone()));
    Budgets::new(backend, lookups, writes).probes_gated_inside().with_scans(options.scan_jobs)
}

/// A target directory on a mounted network filesystem, without budgets (one op at a time
/// unless wrapped: see [`open`]). Cheap to clone.
#[derive(Clone)]
pub struct NfsBackend {
    target: Arc<Target>,
    meta: Arc<meta::Meta>,
    dirs: Arc<dirs::DirCache>,
}

impl NfsBackend {
    /// A backend for the directory `root` (which may not exist yet).
    pub fn new(root: impl Into<PathBuf>, fsync: bool) -> Self {
        NfsBackend::build(root.into(), fsync, None)
    }

    fn build(root: PathBuf, fsync: bool, lookups: Option<Gate>) -> Self {
        NfsBackend {
            target: Arc::new(Target::new(root.clone(), fsync)),
            meta: Arc::new(meta::Meta::new(root, fsync)),
            dirs: Arc::new(dirs::DirCache::new(lookups)),
        }
    }

    /// The target directory.
    pub fn root(&self) -> &Path {
        &self.target.root
    }

    /// Directories looked up so far (each at most once per run).
    pub fn dir_lookups(&self) -> u64 {
        self.dirs.opens()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&NfsBackend) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let me = self.clone();
        treesync_backend::backend::blocking(move || f(&me)).await
    }

    /// Probe case sensitivity relative to the root handle (see [`Target::probe_case_in`]).
    fn probe_case(&self) {
        match self.meta.root_fd() {
            Ok(root) => self.target.probe_case_in(root.as_fd()),
            Err(_) => self.target.probe_case(),
        }
    }

    fn run(&self, op: &Op, blobs: &dyn BlobSource) -> Result<(), Error> {
        let path = op.path();
        let (parent, name) = path.split_last();
        let dir = match (self.dirs.get(&self.meta, parent), op) {
            (Ok(fd), _) => fd,
            // The parent is gone: so is what we should remove. (A parent that is a symlink or
            // a file is drift the executor heals: reported below like for any other op.)
            (Err(Errno::NOENT), Op::Unlink { .. } | Op::Rmdir { .. }) => {
                if matches!(op, Op::Rmdir { .. }) {
                    self.dirs.forget(path.as_bytes());
                }
                return Ok(());
            }
            (Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV), _) => {
                return Err(Error::NotBeneath { path: path.display() });
            }
            (Err(e), _) => {
                return Err(Error::io(
                    "open the directory of",
                    path,
                    std::io::Error::from_raw_os_error(e.raw_os_error()),
                ));
            }
        };
        if matches!(op, Op::Rmdir { .. }) {
            // Drop our handles below it first (a handle does not keep a directory busy on
            // Linux, but a stale one must not be used for a new directory of that name).
            self.dirs.forget(path.as_bytes());
        }
        self.target.run_op(dir.as_fd(), name, op, blobs)
    }
}

impl fmt::Display for NfsBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nfs:{}", self.target.root.display())
    }
}

#[async_trait]
impl Backend for NfsBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::filesystem(self.target.case_sensitive())
    }

    fn cost(&self) -> Vec<(&'static str, u64)> {
        vec![("directory lookups", self.dirs.opens())]
    }

    fn policy(&self) -> Policy {
        Policy { jobs: 1, batch: 1, min_batch: 1, lookups: 1, scans: 1, spread: true }
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let (op, blobs) = (op.clone(), blobs.clone());
        self.blocking(move |b| b.run(&op, &*blobs)).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let blobs = blobs.clone();
        self.blocking(move |b| batch.iter().try_for_each(|op| b.run(op, &*blobs))).await
    }

    async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
        let dir = dir.clone();
        // A directory that cannot be opened is the op's business (an unlink below a removed
        // directory is fine, a write is not): it reports the error with the op's path.
        self.blocking(move |b| {
            let _ = b.dirs.get(&b.meta, dir.as_bytes());
            Ok(())
        })
        .await
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        self.blocking(move |b| {
            let (state, insensitive) = b.meta.prepare_probing(create, !b.target.case_probed())?;
            match insensitive {
                Some(found) => b.target.note_case_probe(found),
                None if state == TargetState::Managed => b.probe_case(),
                None => {}
            }
            Ok(state)
        })
        .await
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let dir = dir.clone();
        self.blocking(move |b| b.target.read_dir(&dir)).await
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.blocking(|b| b.meta.load_state()).await
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        let bytes = bytes.to_vec();
        self.blocking(move |b| b.meta.store_state(&bytes)).await
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let holder = holder.clone();
        self.blocking(move |b| {
            let guard = b.meta.lock(&holder)?;
            b.probe_case();
            // A new run: whatever we knew about directories may be stale now.
            b.dirs.clear();
            Ok(guard)
        })
        .await
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        self.blocking(move |b| b.target.scan(jobs)).await
    }

    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        let dirs: Vec<Vec<u8>> = dirs.iter().map(|d| d.as_bytes().to_vec()).collect();
        self.blocking(move |b| b.target.scan_dirs(&dirs, jobs)).await
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        let path = path.clone();
        self.blocking(move |b| b.target.read_file(&path)).await
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        let name = name.to_string();
        self.blocking(move |b| b.target.load_aux(&name)).await
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let (name, bytes) = (name.to_string(), bytes.to_vec());
        self.blocking(move |b| b.target.store_aux(&name, &bytes)).await
    }

    async fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let (name, bytes) = (name.to_string(), bytes.to_vec());
        self.blocking(move |b| b.meta.append_aux(&name, &bytes)).await
    }

    async fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        let name = name.to_string();
        self.blocking(move |b| b.meta.aux_mtime(&name)).await
    }

    fn take_written(&self) -> Vec<treesync_backend::backend::Written> {
        self.target.take_written()
    }

    fn record_written(&self, on: bool) {
        self.target.record_written(on)
    }
}
