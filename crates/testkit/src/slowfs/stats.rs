//! What a slow filesystem counts: requests by kind, the most in flight at once, the paths
//! touched; the live counters and the snapshot ([`Stats`]) taken of them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::pool::lock;

/// Kinds of FUSE requests, as counted in [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Statfs,
    Access,
    Create,
    Getxattr,
    Setxattr,
    Listxattr,
    Removexattr,
    Fallocate,
    Lseek,
    CopyFileRange,
    /// ioctl, poll, bmap, getlk, setlk: answered ENOSYS.
    Other,
}

impl Op {
    /// Every kind, in declaration order.
    pub const ALL: [Op; 32] = [
        Op::Lookup,
        Op::Getattr,
        Op::Setattr,
        Op::Readlink,
        Op::Mknod,
        Op::Mkdir,
        Op::Unlink,
        Op::Rmdir,
        Op::Symlink,
        Op::Rename,
        Op::Link,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Release,
        Op::Fsync,
        Op::Opendir,
        Op::Readdir,
        Op::Releasedir,
        Op::Fsyncdir,
        Op::Statfs,
        Op::Access,
        Op::Create,
        Op::Getxattr,
        Op::Setxattr,
        Op::Listxattr,
        Op::Removexattr,
        Op::Fallocate,
        Op::Lseek,
        Op::CopyFileRange,
        Op::Other,
    ];

    /// Lower-case name, as in the JSON snapshot.
    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "lookup",
            Op::Getattr => "getattr",
            Op::Setattr => "setattr",
            Op::Readlink => "readlink",
            Op::Mknod => "mknod",
            Op::Mkdir => "mkdir",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Symlink => "symlink",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Release => "release",
            Op::Fsync => "fsync",
            Op::Opendir => "opendir",
            Op::Readdir => "readdir",
            Op::Releasedir => "releasedir",
            Op::Fsyncdir => "fsyncdir",
            Op::Statfs => "statfs",
            Op::Access => "access",
            Op::Create => "create",
            Op::Getxattr => "getxattr",
            Op::Setxattr => "setxattr",
            Op::Listxattr => "listxattr",
            Op::Removexattr => "removexattr",
            Op::Fallocate => "fallocate",
            Op::Lseek => "lseek",
            Op::CopyFileRange => "copy_file_range",
            Op::Other => "other",
        }
    }

    /// Read and write pay [`Config::data_latency`](super::Config::data_latency); everything else [`Config::meta_latency`](super::Config::meta_latency).
    pub fn is_data(self) -> bool {
        matches!(self, Op::Read | Op::Write)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Counts for one kind of request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStats {
    /// Requests received.
    pub count: u64,
    /// Most requests of this kind in flight at once, from receipt to reply.
    pub max_in_flight: u64,
}

/// A snapshot of the counters, as returned by [`SlowFs::stats`](super::SlowFs::stats) and the control socket (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Counts by kind; kinds never seen since the last reset are absent.
    pub ops: BTreeMap<Op, OpStats>,
    /// Inodes forgotten (one per FORGET, one per entry of a BATCH_FORGET): the kernel dropping
    /// inodes from its cache, not requests made by a program, so not part of [`Stats::total`].
    pub forgets: u64,
    /// Most requests in flight at once, all kinds together.
    pub max_in_flight: u64,
    /// Most requests being served at once (holding a service slot, latency included); never
    /// above [`Config::max_concurrent`](super::Config::max_concurrent).
    pub max_in_service: u64,
    /// Most LOOKUPs in flight at once in one directory (their parent): what a Linux NFS client
    /// would hold that directory's lock for (see `docs/backends.md`).
    #[serde(default)]
    pub max_lookups_in_one_dir: u64,
    /// `(kind, path)` per request while recording was on, in order of receipt. Paths are
    /// relative to the mount root (`""` is the root itself); a rename or link records its
    /// source then its destination. An inode whose path is unknown shows as `<ino N>`.
    pub paths: Vec<(Op, String)>,
}

impl Stats {
    /// Requests of all kinds (FORGETs excluded).
    pub fn total(&self) -> u64 {
        self.ops.values().map(|s| s.count).sum()
    }

    /// Requests of one kind.
    pub fn count(&self, op: Op) -> u64 {
        self.ops.get(&op).map_or(0, |s| s.count)
    }

    /// Most requests of one kind in flight at once.
    pub fn max_in_flight_of(&self, op: Op) -> u64 {
        self.ops.get(&op).map_or(0, |s| s.max_in_flight)
    }

    /// Whether any recorded request touched exactly `path` (relative to the mount root).
    pub fn touched(&self, path: &str) -> bool {
        self.paths.iter().any(|(_, p)| p == path)
    }

    /// Whether any recorded request touched `path` or something below it.
    pub fn touched_under(&self, path: &str) -> bool {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        self.paths.iter().any(|(_, p)| p == path || p.starts_with(&prefix))
    }
}

/// The counts as a table: kind, count, max in flight, then the totals.
impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<16} {:>10} {:>14}", "kind", "count", "max in flight")?;
        for (op, s) in &self.ops {
            writeln!(f, "{:<16} {:>10} {:>14}", op.name(), s.count, s.max_in_flight)?;
        }
        writeln!(f, "{:<16} {:>10} {:>14}", "total", self.total(), self.max_in_flight)?;
        write!(f, "forgets: {}, max in service: {}", self.forgets, self.max_in_service)
    }
}

// ---------------------------------------------------------------------------------------------
// Counters

pub(super) const N_OPS: usize = Op::ALL.len();

pub(super) struct Counters {
    pub(super) count: [AtomicU64; N_OPS],
    pub(super) in_flight: [AtomicU64; N_OPS],
    pub(super) max_in_flight: [AtomicU64; N_OPS],
    pub(super) all_in_flight: AtomicU64,
    pub(super) all_max_in_flight: AtomicU64,
    pub(super) in_service: AtomicU64,
    pub(super) max_in_service: AtomicU64,
    pub(super) forgets: AtomicU64,
    /// LOOKUPs in flight by parent inode.
    pub(super) lookups_in: Mutex<HashMap<u64, u64>>,
    pub(super) max_lookups_in_one_dir: AtomicU64,
}

impl Counters {
    /// A LOOKUP in directory `parent` arrives.
    pub(super) fn lookup_starts(&self, parent: u64) {
        let mut m = lock(&self.lookups_in);
        let n = m.entry(parent).or_default();
        *n += 1;
        self.max_lookups_in_one_dir.fetch_max(*n, Ordering::SeqCst);
    }

    /// A LOOKUP in directory `parent` is answered (call it before the reply goes out).
    pub(super) fn lookup_ends(&self, parent: u64) {
        let mut m = lock(&self.lookups_in);
        if let Some(n) = m.get_mut(&parent) {
            *n -= 1;
            if *n == 0 {
                m.remove(&parent);
            }
        }
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            in_flight: std::array::from_fn(|_| AtomicU64::new(0)),
            max_in_flight: std::array::from_fn(|_| AtomicU64::new(0)),
            all_in_flight: AtomicU64::new(0),
            all_max_in_flight: AtomicU64::new(0),
            in_service: AtomicU64::new(0),
            max_in_service: AtomicU64::new(0),
            forgets: AtomicU64::new(0),
            lookups_in: Mutex::new(HashMap::new()),
            max_lookups_in_one_dir: AtomicU64::new(0),
        }
    }
}
