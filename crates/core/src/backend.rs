//! The [`Backend`] trait: where a plan's ops land (a local disk, an NFS mount, a bucket, memory).
//!
//! A backend executes single ops or batches of independent ops (all from one [`Phase`](crate::Phase)),
//! keeps the small state folder, and hands out a lock. Concurrency and batching are described by its
//! [`Policy`]; wrappers in [`crate::policy`] change or enforce it around any backend.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::op::Op;
use crate::path::RelPath;
use crate::source::BlobSource;

/// What a backend can represent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Symbolic links are real links.
    pub symlinks: bool,
    /// The exec bit is kept.
    pub exec_bit: bool,
    /// Empty directories exist (for gitlinks).
    pub empty_dirs: bool,
    /// Names differing only by case are different entries.
    pub case_sensitive: bool,
    /// [`Backend::lock`] excludes other processes. Without it (object stores), a journal entry
    /// of another sync that is younger than the lease counts as that sync still running.
    pub exclusive_lock: bool,
}

/// How a backend wants to be driven by the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How many batches may be in flight at once.
    pub jobs: usize,
    /// How many ops of one phase go into one batch, at most.
    pub batch: usize,
    /// How many ops a batch gets at least when a small phase is spread over the jobs: on a
    /// fast disk, fanning 10 ops out to 8 threads costs more than running them on one.
    pub min_batch: usize,
    /// How many metadata lookups (directory probes, the stat calls of a scan) may be in flight
    /// at once. On NFS the kernel serializes lookups on locks, so parallel ones only cost more.
    pub lookups: usize,
    /// Interleave each phase's ops over their directories instead of running them in path
    /// order. Clients lock a directory for every create, rename and remove in it (the VFS
    /// does, on NFS too), so ops in flight together should be in different directories.
    pub spread: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { jobs: 1, batch: 1, min_batch: 1, lookups: 1, spread: false }
    }
}

/// A slice of a phase's ops, cheap to clone and `'static` so backends can move it to a thread.
#[derive(Clone)]
pub struct Batch {
    ops: Arc<[Op]>,
    range: std::ops::Range<usize>,
}

impl Batch {
    /// The ops `range` of `ops`.
    pub fn new(ops: Arc<[Op]>, range: std::ops::Range<usize>) -> Self {
        assert!(range.end <= ops.len(), "batch range within the phase");
        Batch { ops, range }
    }

    /// A batch of all of `ops`.
    pub fn all(ops: Arc<[Op]>) -> Self {
        let n = ops.len();
        Batch { ops, range: 0..n }
    }

    /// The first `n` ops of this batch.
    pub fn prefix(&self, n: usize) -> Batch {
        Batch { ops: self.ops.clone(), range: self.range.start..self.range.start + n.min(self.len()) }
    }
}

impl std::ops::Deref for Batch {
    type Target = [Op];
    fn deref(&self) -> &[Op] {
        &self.ops[self.range.clone()]
    }
}

/// An entry found by [`Backend::read_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name within its directory.
    pub name: Vec<u8>,
    /// Is it a directory (not following symlinks)?
    pub is_dir: bool,
}

/// The stat data of a file as a filesystem reports it (what a git index records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileStat {
    /// Modification time, seconds.
    pub mtime_secs: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsecs: u32,
    /// Status change time, seconds.
    pub ctime_secs: i64,
    /// Status change time, nanoseconds.
    pub ctime_nsecs: u32,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// What [`Backend::scan`] found at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundKind {
    /// A directory.
    Dir,
    /// A file, or an object whose type the listing does not tell (see `typed`).
    File {
        /// Size in bytes.
        size: u64,
        /// Exec bit, where the listing tells it.
        executable: Option<bool>,
        /// Stat data, on filesystems.
        stat: Option<FileStat>,
        /// The object's ETag, on object stores (the MD5 of the content for single-part uploads).
        etag: Option<String>,
        /// `false` when the listing cannot tell files from symlinks (object-store listings).
        typed: bool,
    },
    /// A symlink.
    Link {
        /// Its target.
        target: Vec<u8>,
        /// Stat data of the link itself, on filesystems.
        stat: Option<FileStat>,
    },
    /// Something else (a FIFO, a device, …).
    Other,
}

/// One entry of a [`Backend::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `/`-separated path below the target root.
    pub path: Vec<u8>,
    /// What is there.
    pub kind: FoundKind,
}

/// What is at the target root before a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    /// Nothing there (it will be created) or an empty directory.
    Empty,
    /// A directory with a `.treesync` folder.
    Managed,
    /// A directory with other content and no `.treesync` folder.
    Unmanaged,
}

/// Held while a sync runs; dropping it releases the lock.
pub struct LockGuard(pub Box<dyn Send + Sync>);

/// A backend operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error at a path.
    #[error("cannot {op} {path}: {source}{}", hint(source))]
    Io {
        /// What was attempted (`write`, `create directory`, …).
        op: &'static str,
        /// Where (relative to the target, or the target itself).
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A directory that should be removed holds entries treesync did not write.
    #[error(
        "cannot remove directory {path}: it holds files treesync did not write\n  hint: someone changed the target; remove the extra entries and run sync again"
    )]
    NotEmpty {
        /// Where.
        path: String,
    },
    /// A path would be reached through a symbolic link or something that is not a directory.
    #[error(
        "refusing to write {path}: a parent of it is a symlink or not a directory on the target\n  hint: someone changed the target; treesync never writes through symlinks"
    )]
    NotBeneath {
        /// Where.
        path: String,
    },
    /// Something other than what treesync keeps in its state folder is there: a symlink or a
    /// file in place of `.treesync` or `.treesync/tmp`, a symlink in place of the lock or state.
    #[error(
        "refusing to use {path}: it is a {found}, not what treesync keeps there\n  hint: treesync keeps its lock, journal and temporaries in a real directory .treesync at the target's root and never follows a symlink there; remove {path} and run again (a target holding files then needs sync --force, which takes it over)"
    )]
    StateFolder {
        /// Where.
        path: String,
        /// What was found there (`symlink`, `file`, …).
        found: &'static str,
    },
    /// Another sync holds the target's lock.
    #[error(
        "another treesync is working on this target ({holder})\n  hint: wait for it to finish; a lock of a process that died is released by the OS automatically"
    )]
    Locked {
        /// Who holds it.
        holder: String,
    },
    /// A conditional write of the state failed: someone else changed it since it was read.
    #[error(
        "the target's state changed while this sync ran ({detail})\n  hint: another treesync is syncing the same target; only one of them may commit, run sync again when it is done"
    )]
    Conflict {
        /// What the store said.
        detail: String,
    },
    /// Content could not be read from the repository.
    #[error("cannot write {path}: {source}")]
    Blob {
        /// Where.
        path: String,
        /// Why.
        #[source]
        source: crate::source::Error,
    },
    /// A fault injected by [`crate::policy::Fail`].
    #[error("injected fault after {after} ops (at {op} {path})")]
    Injected {
        /// How many ops ran before.
        after: u64,
        /// The op kind that failed.
        op: &'static str,
        /// Its path.
        path: String,
    },
    /// The backend's state could not be understood.
    #[error("{0}")]
    State(String),
}

fn hint(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::*;
    match e.kind() {
        StorageFull => "\n  hint: the target's filesystem is full; free space and run sync again to finish",
        ReadOnlyFilesystem => "\n  hint: the target's filesystem is mounted read-only",
        PermissionDenied => "\n  hint: check the target's permissions (treesync needs to write there)",
        _ => "",
    }
}

impl Error {
    /// An I/O error helper.
    pub fn io(op: &'static str, path: impl fmt::Display, source: std::io::Error) -> Self {
        Error::Io { op, path: path.to_string(), source }
    }

    /// Feeding a blob to the file at `path` failed: the repository could not give it
    /// ([`Error::Blob`]), or the side taking it failed while doing `op` ("write", "read").
    pub fn from_blob(op: &'static str, path: &RelPath, e: crate::source::BlobError) -> Self {
        match e {
            crate::source::BlobError::Source(source) => Error::Blob { path: path.display(), source },
            crate::source::BlobError::Sink(e) => Error::io(op, path, e),
        }
    }

    /// The op met a target that differs from what the plan expects on the path it touches: a
    /// parent missing or not a directory (a symlink, a file), a directory where a file should
    /// be replaced, something else where a directory should be made. The executor heals such
    /// ops (see [`crate::apply`]); backends report these cases with these errors and kinds.
    pub fn is_drift(&self) -> bool {
        use std::io::ErrorKind::*;
        match self {
            Error::NotBeneath { .. } => true,
            Error::Io { source, .. } => {
                matches!(source.kind(), NotFound | NotADirectory | IsADirectory | AlreadyExists | DirectoryNotEmpty)
            }
            _ => false,
        }
    }

    /// A directory cannot be made at `path`: something that is not a directory is there.
    pub fn not_a_directory_in_the_way(path: impl fmt::Display) -> Self {
        Error::io(
            "create directory",
            path,
            std::io::Error::new(std::io::ErrorKind::AlreadyExists, "something that is not a directory is in the way"),
        )
    }
}

/// Where ops land. See the [module docs](self).
#[async_trait]
pub trait Backend: Send + Sync + fmt::Display {
    /// What this backend can represent.
    fn capabilities(&self) -> Capabilities;

    /// How the executor should drive this backend.
    fn policy(&self) -> Policy;

    /// Execute one op.
    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error>;

    /// Execute a batch of independent ops. Stops at the first error; ops before it are done.
    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        for op in batch.iter() {
            self.execute(op, blobs).await?;
        }
        Ok(())
    }

    /// What the target root holds; with `create`, a missing root (not its parents) is created.
    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error>;

    /// List a directory (not following symlinks); `.treesync` at the root is left out.
    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error>;

    /// Read the state file, if there is one.
    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error>;

    /// Replace the state file atomically.
    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error>;

    /// Take the target's lock, or fail fast with [`Error::Locked`]. `holder` describes this process.
    async fn lock(&self, holder: &str) -> Result<LockGuard, Error>;

    /// Release a lock taken by [`Backend::lock`]. Backends whose lock is a file on a server
    /// (the built-in NFS client) remove it here; for the others dropping the guard is enough.
    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        drop(guard);
        Ok(())
    }

    /// Everything in the target (`.treesync` left out), for `verify`: one entry per file,
    /// symlink and directory, with the cheapest metadata the storage gives (one readdir per
    /// directory plus an lstat per entry on filesystems, one LIST per 1,000 keys on object stores).
    /// `jobs` bounds the lookups in flight (callers pass [`Policy::lookups`]).
    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error>;

    /// What this backend's work cost so far in the storage's own terms, for the summary of a
    /// run: e.g. S3 requests by method, NFS directory lookups. Ops by kind are counted by the
    /// executor already.
    fn cost(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Look up the directory `dir` ahead of ops in it. A backend that keeps handles of
    /// directories (NFS) opens `dir` here, once per run, so wrappers can budget these lookups
    /// apart from writes ([`crate::policy::Budgets`]); the others have nothing to do.
    async fn probe(&self, _dir: &RelPath) -> Result<(), Error> {
        Ok(())
    }

    /// A file's content, for hashing during `verify`.
    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error>;

    /// Read an auxiliary file of the state folder (e.g. `index`); `None` if absent or unsupported.
    async fn load_aux(&self, _name: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(None)
    }

    /// Write an auxiliary file of the state folder atomically; backends without one ignore it.
    async fn store_aux(&self, _name: &str, _bytes: &[u8]) -> Result<(), Error> {
        Ok(())
    }
}

/// Forward every method of [`Backend`] to `self.inner`, except those listed; used by wrappers.
#[macro_export]
#[doc(hidden)]
macro_rules! forward_backend {
    (capabilities) => {
        fn capabilities(&self) -> $crate::backend::Capabilities {
            self.inner.capabilities()
        }
    };
    (policy) => {
        fn policy(&self) -> $crate::backend::Policy {
            self.inner.policy()
        }
    };
    (cost) => {
        fn cost(&self) -> Vec<(&'static str, u64)> {
            self.inner.cost()
        }
    };
}

macro_rules! impl_for_pointer {
    ($ptr:ident) => {
        #[async_trait]
        impl<B: Backend + ?Sized> Backend for $ptr<B> {
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            fn policy(&self) -> Policy {
                (**self).policy()
            }
            fn cost(&self) -> Vec<(&'static str, u64)> {
                (**self).cost()
            }
            async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
                (**self).execute(op, blobs).await
            }
            async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
                (**self).execute_batch(batch, blobs).await
            }
            async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
                (**self).prepare_target(create).await
            }
            async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
                (**self).read_dir(dir).await
            }
            async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
                (**self).load_state().await
            }
            async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
                (**self).store_state(bytes).await
            }
            async fn lock(&self, holder: &str) -> Result<LockGuard, Error> {
                (**self).lock(holder).await
            }
            async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
                (**self).unlock(guard).await
            }
            async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
                (**self).scan(jobs).await
            }
            async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
                (**self).probe(dir).await
            }
            async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
                (**self).read_file(path).await
            }
            async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
                (**self).load_aux(name).await
            }
            async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
                (**self).store_aux(name, bytes).await
            }
        }
    };
}
impl_for_pointer!(Arc);
impl_for_pointer!(Box);
