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
    /// [`Backend::lock`] excludes other processes. Without it (object stores) there is no lock
    /// to take ([`Backend::lock`] answers [`Error::Unsupported`]): conditional state writes
    /// guard the state, and a journal entry of another sync that is younger than the lease
    /// counts as that sync still running.
    pub exclusive_lock: bool,
    /// The state folder keeps auxiliary files ([`Backend::load_aux`], [`Backend::store_aux`]),
    /// e.g. `verify`'s stat index. Without it those calls answer [`Error::Unsupported`] and
    /// callers go without (verify then proves files by hashing them or by their ETag).
    pub aux_store: bool,
}

impl Capabilities {
    /// What a filesystem target holds (a local disk, a mount, `nfs://`): symlinks, exec bits
    /// and empty directories, with an exclusive lock and auxiliary files in its state folder;
    /// `case_sensitive` as its probe found.
    pub const fn filesystem(case_sensitive: bool) -> Self {
        Capabilities {
            symlinks: true,
            exec_bit: true,
            empty_dirs: true,
            case_sensitive,
            exclusive_lock: true,
            aux_store: true,
        }
    }
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
    /// How many metadata lookups (directory probes, listings, state reads) may be in flight at
    /// once during a sync. On NFS they queue on the directory locks its writes take.
    pub lookups: usize,
    /// How many lookups a read-only scan ([`Backend::scan`], [`Backend::scan_dirs`]: verify's
    /// listing) keeps in flight: threads on a mounted filesystem, calls on `nfs://`. A scan
    /// takes no directory lock a write needs, so it may run wider than `lookups`: on a mount
    /// with `actimeo=0` every stat is a round trip, and only many in flight hide it (as git's
    /// preloaded index does for `git status`).
    pub scans: usize,
    /// Interleave each phase's ops over their directories instead of running them in path
    /// order. Clients lock a directory for every create, rename and remove in it (the VFS
    /// does, on NFS too), so ops in flight together should be in different directories.
    pub spread: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { jobs: 1, batch: 1, min_batch: 1, lookups: 1, scans: 1, spread: false }
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

    /// Whether this batch is all of its phase's ops: nothing of the phase runs beside it.
    pub fn is_whole_phase(&self) -> bool {
        self.range == (0..self.ops.len())
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

/// The auxiliary file of the state folder that holds the index delta (core's `index_delta`).
pub const INDEX_DELTA: &str = "index-delta";

/// The largest plan applied in one piece (in ops) whose files a sync records. Recording costs
/// memory per file until the sync's end, and a backend's stat per file: a sync rewriting most
/// of a large tree records nothing, and its first verify reads every file, as before the delta
/// existed. An initial checkout is applied in chunks and records each (core's `index_delta::Chunked`), whatever
/// its size. Safe either way: a file a sync rewrote has other stat data (a new
/// inode, a new ctime) than any older entry of the index or the delta records.
pub const RECORD_AT_MOST: usize = 32_768;

/// A file a backend wrote from a blob ([`Backend::take_written`]), with the stat data a later
/// lstat of the untouched file returns: taken after the file was complete and in place (after
/// its close and the rename over its name), so a verify can prove it without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// `/`-separated path below the target root.
    pub path: Vec<u8>,
    /// Its size in bytes, as the file has it (after conversions).
    pub size: u64,
    /// Its stat data.
    pub stat: FileStat,
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
    /// Content could not be converted for the working tree (a filter driver failed, an
    /// encoding is unknown).
    #[error("cannot write {path}: {source}")]
    Convert {
        /// Where.
        path: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
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
    /// The backend has no such ability; [`Capabilities`] says which it has.
    #[error(
        "{backend} has no {ability}\n  hint: this is a bug in the caller, which should check the backend's capabilities first"
    )]
    Unsupported {
        /// What was asked for (`lock`, `auxiliary state files`).
        ability: &'static str,
        /// The backend.
        backend: String,
    },
    /// State was to be written without holding the target's lock.
    #[error(
        "{backend} writes its state only while it holds the target's lock\n  hint: this is a bug in the caller, which must take the lock first"
    )]
    NotLocked {
        /// The backend.
        backend: String,
    },
    /// A file treesync keeps (the lock, the state) is not a regular file of its own: writing
    /// through it would change another file.
    #[error(
        "{path} is not a file of its own (a hard link to another file, or not a regular file); treesync does not write through it\n  hint: {remove}, and run sync again"
    )]
    NotOwnFile {
        /// Where.
        path: String,
        /// How to remove it, for this backend: `remove it (rm PATH)` where the target is a
        /// local path; where it is not (an `nfs://` URL), where and how to remove it instead.
        remove: String,
    },
    /// The target holds an entry whose name no tree can have, so treesync cannot name it to
    /// remove it.
    #[error("cannot take over the target: it holds {path:?} ({reason})\n  hint: remove it by hand and run again")]
    Unrepresentable {
        /// The name as it was found (lossy).
        path: String,
        /// Why it cannot be represented.
        reason: String,
    },
    /// A worker thread running blocking filesystem calls panicked or was cancelled.
    #[error("a worker thread failed: {source}\n  hint: this is a bug; run again with RUST_BACKTRACE=1 and report it")]
    Worker {
        /// What the runtime said.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The target's URL could not be understood.
    #[error("{detail}")]
    BadUrl {
        /// What is wrong with it, with a hint.
        detail: String,
    },
    /// A server of the target could not be found or reached (name resolution, portmapper).
    #[error("cannot reach the {service} service of {host}: {detail}{hint}")]
    Unreachable {
        /// The service (`NFS`, `MOUNT`, `portmap`).
        service: &'static str,
        /// The host.
        host: String,
        /// What went wrong.
        detail: String,
        /// What to do, starting with a line break (or empty).
        hint: String,
        /// The cause, where there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The server would not mount the target, or has no export holding it.
    #[error("cannot mount {target}: {detail}{hint}")]
    Mount {
        /// The target (URL).
        target: String,
        /// Why.
        detail: String,
        /// What to do, starting with a line break (or empty).
        hint: &'static str,
        /// The cause, where there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A server's reply could not be decoded.
    #[error(
        "garbled {what} from the server: {detail}\n  hint: is this an NFSv3 server? try again; if it persists, report it with the server's make and version"
    )]
    Garbled {
        /// The reply (`export list`, `MNT reply`).
        what: &'static str,
        /// What the decoder said.
        detail: String,
    },
    /// The lease of the target's lock could not be renewed, so another host may take the lock:
    /// the run stopped before writing more.
    #[error(
        "lost the lock of {target}: renewing its lease failed ({detail})\n  hint: another treesync may take the target over now; check the server, then run sync again to finish"
    )]
    LeaseLost {
        /// The target.
        target: String,
        /// What the renewal met.
        detail: String,
    },
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
            crate::source::BlobError::Convert(source) => Error::Convert { path: path.display(), source },
        }
    }

    /// The op met a target that differs from what the plan expects on the path it touches: a
    /// parent missing or not a directory (a symlink, a file), a directory where a file should
    /// be replaced, something else where a directory should be made. The executor heals such
    /// ops (see core's `apply`); backends report these cases with these errors and kinds.
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

    /// A file treesync keeps at the local path `path` is not a file of its own
    /// ([`Error::NotOwnFile`]); the hint is to `rm` it.
    pub fn not_own_file(path: impl fmt::Display) -> Self {
        let path = path.to_string();
        Error::NotOwnFile { remove: format!("remove it (rm {path})"), path }
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

/// Run blocking work (filesystem calls) on tokio's blocking pool, for backends whose storage
/// has no async API. A worker that panicked or was cancelled becomes [`Error::Worker`].
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, Error> + Send + 'static) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|source| Err(Error::Worker { source }))
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

    /// Take the target's lock, or fail fast with [`Error::Locked`]. `holder` describes this
    /// process. Only backends with [`Capabilities::exclusive_lock`] have one; the others answer
    /// [`Error::Unsupported`].
    async fn lock(&self, _holder: &crate::lock::Holder) -> Result<LockGuard, Error> {
        Err(Error::Unsupported { ability: "lock", backend: self.to_string() })
    }

    /// Release a lock taken by [`Backend::lock`]. Backends whose lock is a file on a server
    /// (the built-in NFS client) remove it here; for the others dropping the guard is enough.
    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        drop(guard);
        Ok(())
    }

    /// Everything in the target (`.treesync` left out), for `verify`: one entry per file,
    /// symlink and directory, with the cheapest metadata the storage gives (one readdir per
    /// directory plus an lstat per entry on filesystems, one LIST per 1,000 keys on object stores).
    /// `jobs` bounds the lookups in flight (callers pass [`Policy::scans`]).
    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error>;

    /// What [`Backend::scan`] finds directly in each of `dirs` (one level, no recursion;
    /// `.treesync` at the root left out), for a verify of one slice of the tree
    /// (core's `slice`): only `dirs` are listed, reaching them costs lookups of their
    /// ancestors, nothing else of the target is touched. A directory of `dirs` that is missing
    /// or is not a directory is skipped (the listing of its parent tells what is there).
    ///
    /// The default scans the whole target and keeps what is directly in `dirs`: the same
    /// answer at the cost of a whole scan, for backends without a cheaper way (object stores
    /// today); filesystems override it.
    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        let wanted: std::collections::HashSet<&[u8]> = dirs.iter().map(|d| d.as_bytes()).collect();
        let parent =
            |p: &[u8]| -> Vec<u8> { p.iter().rposition(|b| *b == b'/').map_or(Vec::new(), |i| p[..i].to_vec()) };
        Ok(self.scan(jobs).await?.into_iter().filter(|f| wanted.contains(parent(&f.path).as_slice())).collect())
    }

    /// What this backend's work cost so far in the storage's own terms, for the summary of a
    /// run: e.g. S3 requests by method, NFS directory lookups. Ops by kind are counted by the
    /// executor already.
    fn cost(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Look up the directory `dir` ahead of ops in it. A backend that keeps handles of
    /// directories (NFS) opens `dir` here, once per run, so wrappers can budget these lookups
    /// apart from writes ([`crate::policy::Budgets`]). This is a hint, not an ability: for the
    /// others there is nothing to look up ahead, and the op itself does all the work, so the
    /// default does nothing and loses nothing.
    async fn probe(&self, _dir: &RelPath) -> Result<(), Error> {
        Ok(())
    }

    /// A file's content, for hashing during `verify`.
    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error>;

    /// Read an auxiliary file of the state folder (e.g. `index`); `None` if absent. Only
    /// backends with [`Capabilities::aux_store`] keep them; the others answer [`Error::Unsupported`].
    async fn load_aux(&self, _name: &str) -> Result<Option<Vec<u8>>, Error> {
        Err(Error::Unsupported { ability: "auxiliary state files", backend: self.to_string() })
    }

    /// Write an auxiliary file of the state folder atomically. Only backends with
    /// [`Capabilities::aux_store`] keep them; the others answer [`Error::Unsupported`].
    async fn store_aux(&self, _name: &str, _bytes: &[u8]) -> Result<(), Error> {
        Err(Error::Unsupported { ability: "auxiliary state files", backend: self.to_string() })
    }

    /// Append `bytes` to an auxiliary file of the state folder (created if absent), so that a
    /// journal costs what is added, not what it holds. A crash may leave a torn tail: readers
    /// must recognise complete records. Only backends with [`Capabilities::aux_store`] keep
    /// auxiliary files; the others answer [`Error::Unsupported`].
    async fn append_aux(&self, _name: &str, _bytes: &[u8]) -> Result<(), Error> {
        Err(Error::Unsupported { ability: "appending to auxiliary state files", backend: self.to_string() })
    }

    /// The modification time (seconds, nanoseconds) of a file of the state folder (an auxiliary
    /// file, or `state`), as the storage's clock stamped it; `None` if absent. A sync compares it with the files
    /// it wrote (git's racy-timestamp rule). Only backends with [`Capabilities::aux_store`]
    /// keep auxiliary files; the others answer [`Error::Unsupported`].
    async fn aux_mtime(&self, _name: &str) -> Result<Option<(i64, u32)>, Error> {
        Err(Error::Unsupported { ability: "auxiliary state files", backend: self.to_string() })
    }

    /// The files this backend wrote from blobs since the last call, in the order their writes
    /// completed, each with its stat data taken after it was in place ([`Written`]); a sync
    /// records them so that the next verify proves them without reading them. Backends that
    /// keep no stat data (object stores: ETags do that job), or do not record it, answer
    /// nothing: their files are proven the way they were before (hashed once by a verify).
    fn take_written(&self) -> Vec<Written> {
        Vec::new()
    }

    /// Whether to note the files written from now on for [`Backend::take_written`] (on until
    /// told otherwise). A sync turns it off for a plan larger than it records
    /// ([`RECORD_AT_MOST`]), so that no stat data is taken in vain (a
    /// GETATTR per file over `nfs://`), and on again for the next plan.
    fn record_written(&self, _on: bool) {}
}

/// The names of every method of [`Backend`], for tests that check that a wrapper forwards
/// (or handles) each of them.
pub const METHODS: [&str; 21] = [
    "capabilities",
    "policy",
    "execute",
    "execute_batch",
    "prepare_target",
    "read_dir",
    "load_state",
    "store_state",
    "lock",
    "unlock",
    "scan",
    "scan_dirs",
    "cost",
    "probe",
    "read_file",
    "load_aux",
    "store_aux",
    "append_aux",
    "aux_mtime",
    "take_written",
    "record_written",
];
