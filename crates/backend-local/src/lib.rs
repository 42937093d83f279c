//! # treesync-backend-local
//!
//! Executes treesync plans on a local filesystem (ext4, xfs, tmpfs, …) with wide parallelism.
//!
//! * Every file and symlink is first created under a temporary name in its own directory
//!   (`.treesync-tmp.NAME`) and then renamed into place, so a reader sees the old file or the
//!   new one, never a partial one. The name is the same on every run: the next run replays the
//!   interrupted plan and so reuses, and removes, whatever a killed run left behind. The
//!   planner refuses tree entries with that prefix, as git refuses `.git`.
//! * Every path is resolved from the target root with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`: nothing is ever written through a symlink or outside the target,
//!   whatever someone put into the tree.
//! * Modes are what git gives: `0666`/`0777` masked by the process umask.
//! * Runs batches of ops on tokio's blocking pool, `jobs` at a time (default 8).
//!
//! ```
//! use std::sync::atomic::AtomicBool;
//! use treesync_backend_local::{LocalBackend, Options};
//! use treesync_core::{Repo, sync};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let git = |args: &[&str]| std::process::Command::new("git").current_dir(dir.path()).args(args).output();
//! # git(&["init", "-q", "-b", "main"])?;
//! # std::fs::write(dir.path().join("hello.txt"), "hi\n")?;
//! # git(&["add", "."])?;
//! # git(&["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "one"])?;
//! # let out = tempfile::tempdir()?;
//! let repo = Repo::open(dir.path())?;
//! let target = LocalBackend::new(out.path().join("tree"), Options { jobs: 4, ..Options::default() });
//! let options = sync::Options { backend_name: "local".into(), ..Default::default() };
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(sync::sync(&repo, "main", &target, &options, &|_| {}, &AtomicBool::new(false)))?;
//! assert_eq!(std::fs::read_to_string(out.path().join("tree/hello.txt"))?, "hi\n");
//! # Ok(()) }
//! ```

pub mod fs;
pub mod generations;
pub mod lockfile;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use treesync_backend::lock::Holder;

use async_trait::async_trait;
use treesync_backend::backend::{Backend, Batch, Capabilities, DirEntry, Error, Found, LockGuard, Policy, TargetState};
use treesync_backend::source::BlobSource;
use treesync_backend::{Op, RelPath};

/// Options of the [`LocalBackend`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Batches in flight at once.
    pub jobs: usize,
    /// Ops per batch.
    pub batch: usize,
    /// Ops per batch at least, when a small phase is spread over the jobs.
    pub min_batch: usize,
    /// `fsync` every file (and the state file) before renaming it into place. Without it a
    /// killed process loses nothing (the journal is renamed into place after the ops), but a
    /// power loss may.
    pub fsync: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { jobs: 8, batch: 64, min_batch: 16, fsync: false }
    }
}

/// At most this many bytes of content are written on the calling thread ([`Backend::execute_batch`]
/// of a small phase); more go to the blocking pool.
const INLINE_BYTES: u64 = 256 << 10;

/// A target directory on a local filesystem. Cheap to clone.
#[derive(Clone)]
pub struct LocalBackend {
    inner: Arc<fs::Target>,
    options: Options,
}

impl LocalBackend {
    /// A backend for the directory `root` (which may not exist yet).
    pub fn new(root: impl Into<PathBuf>, options: Options) -> Self {
        LocalBackend { inner: Arc::new(fs::Target::new(root.into(), options.fsync)), options }
    }

    /// The target directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&fs::Target) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let inner = self.inner.clone();
        treesync_backend::backend::blocking(move || f(&inner)).await
    }

    /// A few metadata calls on the target's own files (the lock, the state, the auxiliary
    /// files): made on the calling thread. On a local disk they take microseconds, less than
    /// handing them to the blocking pool and back (two context switches, and a thread started
    /// for the first); a sync with nothing to do starts no thread. With `fsync` (a flush takes
    /// milliseconds) they go to the blocking pool like every write.
    async fn small<T: Send + 'static>(
        &self,
        f: impl FnOnce(&fs::Target) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if self.options.fsync { self.blocking(f).await } else { f(&self.inner) }
    }
}

impl fmt::Display for LocalBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "local:{}", self.inner.root.display())
    }
}

#[async_trait]
impl Backend for LocalBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::filesystem(self.inner.case_sensitive())
    }

    fn policy(&self) -> Policy {
        Policy {
            jobs: self.options.jobs,
            batch: self.options.batch,
            min_batch: self.options.min_batch.min(self.options.batch),
            lookups: self.options.jobs,
            scans: self.options.jobs,
            spread: false,
        }
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.execute_batch(Batch::all(Arc::from(vec![op.clone()])), blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        // A small phase (an incremental sync of a few files: one batch, nothing beside it) is
        // written on the calling thread: handing it to the blocking pool would only add a
        // thread's start and two context switches to what takes microseconds.
        let bytes: u64 = batch.iter().map(|op| if let Op::Write { size, .. } = op { *size } else { 0 }).sum();
        // With `fsync` (milliseconds per file) the pool it is.
        if !self.options.fsync
            && batch.is_whole_phase()
            && batch.len() <= self.options.min_batch
            && bytes <= INLINE_BYTES
        {
            return self.inner.run_batch(&batch, &**blobs);
        }
        let blobs = blobs.clone();
        self.blocking(move |t| t.run_batch(&batch, &*blobs)).await
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        self.small(move |t| {
            let state = t.prepare(create)?;
            if state == TargetState::Managed {
                t.probe_case();
            }
            Ok(state)
        })
        .await
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let dir = dir.clone();
        self.blocking(move |t| t.read_dir(&dir)).await
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.small(|t| t.load_state()).await
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        let bytes = bytes.to_vec();
        self.small(move |t| t.store_state(&bytes)).await
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let holder = holder.clone();
        self.small(move |t| {
            let guard = t.lock(&holder)?;
            t.probe_case();
            Ok(guard)
        })
        .await
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        let jobs = jobs.min(cores());
        self.blocking(move |t| t.scan(jobs)).await
    }

    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        let dirs: Vec<Vec<u8>> = dirs.iter().map(|d| d.as_bytes().to_vec()).collect();
        let jobs = jobs.min(cores());
        self.blocking(move |t| t.scan_dirs(&dirs, jobs)).await
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        let path = path.clone();
        self.blocking(move |t| t.read_file(&path)).await
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        let name = name.to_string();
        self.small(move |t| t.load_aux(&name)).await
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let (name, bytes) = (name.to_string(), bytes.to_vec());
        self.small(move |t| t.store_aux(&name, &bytes)).await
    }

    async fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let (name, bytes) = (name.to_string(), bytes.to_vec());
        self.small(move |t| t.append_aux(&name, &bytes)).await
    }

    async fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        let name = name.to_string();
        self.small(move |t| t.aux_mtime(&name)).await
    }

    fn take_written(&self) -> Vec<treesync_backend::backend::Written> {
        self.inner.take_written()
    }

    fn record_written(&self, on: bool) {
        self.inner.record_written(on)
    }
}

/// A local disk answers a stat in microseconds from the page cache: scan threads beyond the
/// cores only take turns.
fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
