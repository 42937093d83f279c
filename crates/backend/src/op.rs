//! [`Op`], [`Phase`] and [`Plan`]: what a sync will do, as data.

use std::sync::Arc;

use gix_hash::ObjectId;
use serde::Serialize;

use crate::path::RelPath;

/// One abstract operation on the target. Every op is idempotent: running it again after it
/// (or the plan around it) was interrupted gives the same result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Create a directory (fine if it exists as a directory).
    Mkdir {
        /// Where.
        path: RelPath,
    },
    /// Write the blob's bytes to `path`, atomically replacing any non-directory there.
    Write {
        /// Where.
        path: RelPath,
        /// The blob to write.
        #[serde(serialize_with = "crate::json::id")]
        #[schemars(with = "crate::json::schema::ObjectId")]
        blob: ObjectId,
        /// Its size in bytes.
        size: u64,
        /// Whether the file gets exec bits (`100755`).
        executable: bool,
        /// How the blob is converted on its way to the file (`.gitattributes`), `None`: written
        /// as it is. `size` is then the blob's size, not the file's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conversion: Option<Arc<crate::conversion::Conversion>>,
        /// Why a file whose blob did not change is written again (its conversion changed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Create a symbolic link, atomically replacing any non-directory there.
    Symlink {
        /// Where.
        path: RelPath,
        /// The link target, verbatim from the blob (in JSON: [`crate::path::json_form`], lossless).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        target: Vec<u8>,
    },
    /// Change only the exec bits of an existing file (content unchanged).
    Chmod {
        /// Where.
        path: RelPath,
        /// Whether the file becomes executable.
        executable: bool,
        /// The file's blob, for backends that can only change modes by rewriting (object stores).
        #[serde(serialize_with = "crate::json::id")]
        #[schemars(with = "crate::json::schema::ObjectId")]
        blob: ObjectId,
        /// Its size in bytes.
        size: u64,
        /// Its conversion, for backends that rewrite ([`Op::Write::conversion`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conversion: Option<Arc<crate::conversion::Conversion>>,
    },
    /// Remove a file or symlink (fine if it is gone).
    Unlink {
        /// Where.
        path: RelPath,
    },
    /// Remove an empty directory (fine if it is gone).
    Rmdir {
        /// Where.
        path: RelPath,
    },
}

/// The kinds of [`Op`], for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// [`Op::Mkdir`]
    Mkdir,
    /// [`Op::Write`]
    Write,
    /// [`Op::Symlink`]
    Symlink,
    /// [`Op::Chmod`]
    Chmod,
    /// [`Op::Unlink`]
    Unlink,
    /// [`Op::Rmdir`]
    Rmdir,
}

impl OpKind {
    /// All kinds, in display order.
    pub const ALL: [OpKind; 6] =
        [OpKind::Mkdir, OpKind::Write, OpKind::Symlink, OpKind::Chmod, OpKind::Unlink, OpKind::Rmdir];

    /// A short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Mkdir => "mkdir",
            OpKind::Write => "write",
            OpKind::Symlink => "symlink",
            OpKind::Chmod => "chmod",
            OpKind::Unlink => "unlink",
            OpKind::Rmdir => "rmdir",
        }
    }
}

impl Op {
    /// The path this op works on.
    pub fn path(&self) -> &RelPath {
        match self {
            Op::Mkdir { path }
            | Op::Write { path, .. }
            | Op::Symlink { path, .. }
            | Op::Chmod { path, .. }
            | Op::Unlink { path }
            | Op::Rmdir { path } => path,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Mkdir { .. } => OpKind::Mkdir,
            Op::Write { .. } => OpKind::Write,
            Op::Symlink { .. } => OpKind::Symlink,
            Op::Chmod { .. } => OpKind::Chmod,
            Op::Unlink { .. } => OpKind::Unlink,
            Op::Rmdir { .. } => OpKind::Rmdir,
        }
    }

    /// Bytes of content this op writes.
    pub fn bytes(&self) -> u64 {
        match self {
            Op::Write { size, .. } => *size,
            Op::Symlink { target, .. } => target.len() as u64,
            _ => 0,
        }
    }
}

/// Counts of ops by kind, plus bytes written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct OpCounts {
    /// Directories created.
    pub mkdir: u64,
    /// Files written.
    pub write: u64,
    /// Symlinks created.
    pub symlink: u64,
    /// Files whose exec bit changed.
    pub chmod: u64,
    /// Files and symlinks removed.
    pub unlink: u64,
    /// Directories removed.
    pub rmdir: u64,
    /// Bytes of file content and link targets written.
    pub bytes: u64,
}

impl OpCounts {
    /// Count one op.
    pub fn add(&mut self, op: &Op) {
        *self.slot(op.kind()) += 1;
        self.bytes += op.bytes();
    }

    /// Add another count.
    pub fn merge(&mut self, other: &OpCounts) {
        for k in OpKind::ALL {
            *self.slot(k) += other.get(k);
        }
        self.bytes += other.bytes;
    }

    fn slot(&mut self, k: OpKind) -> &mut u64 {
        match k {
            OpKind::Mkdir => &mut self.mkdir,
            OpKind::Write => &mut self.write,
            OpKind::Symlink => &mut self.symlink,
            OpKind::Chmod => &mut self.chmod,
            OpKind::Unlink => &mut self.unlink,
            OpKind::Rmdir => &mut self.rmdir,
        }
    }

    /// The count for one kind.
    pub fn get(&self, k: OpKind) -> u64 {
        match k {
            OpKind::Mkdir => self.mkdir,
            OpKind::Write => self.write,
            OpKind::Symlink => self.symlink,
            OpKind::Chmod => self.chmod,
            OpKind::Unlink => self.unlink,
            OpKind::Rmdir => self.rmdir,
        }
    }

    /// All ops, any kind.
    pub fn total(&self) -> u64 {
        OpKind::ALL.iter().map(|k| self.get(*k)).sum()
    }
}

impl std::fmt::Display for OpCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for k in OpKind::ALL {
            let n = self.get(k);
            if n > 0 {
                if !first {
                    f.write_str(", ")?;
                }
                write!(f, "{n} {}", k.name())?;
                first = false;
            }
        }
        if first {
            f.write_str("no changes")?;
        }
        Ok(())
    }
}

/// A set of ops that are independent of each other: a backend may run them in any order and
/// as wide as its policy allows. Phases run one after another.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Phase {
    /// What this phase does, e.g. `remove files` or `create directories (depth 2)`.
    pub name: String,
    /// The ops, sorted by path.
    pub ops: Arc<[Op]>,
}

/// Ops sorted into the phases of a [`Plan`] as they come (the planner fills one directly, so a
/// plan's ops are never held twice).
#[derive(Debug, Default)]
pub struct Phases {
    unlinks: Vec<Op>,
    rmdirs: std::collections::BTreeMap<usize, Vec<Op>>,
    mkdirs: std::collections::BTreeMap<usize, Vec<Op>>,
    writes: Vec<Op>,
    symlinks: Vec<Op>,
}

impl Phases {
    /// Add an op to its phase.
    pub fn push(&mut self, op: Op) {
        match &op {
            Op::Unlink { .. } => self.unlinks.push(op),
            Op::Rmdir { path } => self.rmdirs.entry(path.depth()).or_default().push(op),
            Op::Mkdir { path } => self.mkdirs.entry(path.depth()).or_default().push(op),
            Op::Write { .. } | Op::Chmod { .. } => self.writes.push(op),
            Op::Symlink { .. } => self.symlinks.push(op),
        }
    }

    /// All ops, in no particular order.
    pub fn into_vec(self) -> Vec<Op> {
        let mut all = self.unlinks;
        all.extend(self.rmdirs.into_values().flatten());
        all.extend(self.mkdirs.into_values().flatten());
        all.extend(self.writes);
        all.extend(self.symlinks);
        all
    }

    /// Take the file writes and mode changes out (to be pushed back, changed).
    pub fn take_writes(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.writes)
    }

    /// The ops so far, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Op> {
        self.unlinks
            .iter()
            .chain(self.rmdirs.values().flatten())
            .chain(self.mkdirs.values().flatten())
            .chain(self.writes.iter())
            .chain(self.symlinks.iter())
    }

    /// The plan: each phase sorted by path, without duplicates, counted. One phase at a time
    /// is copied into its shared slice, so the peak is the ops plus the largest phase.
    pub fn into_plan(self, from: Option<ObjectId>, to: ObjectId) -> Plan {
        let mut phases = Vec::new();
        let mut counts = OpCounts::default();
        let mut push = |name: String, mut ops: Vec<Op>| {
            if ops.is_empty() {
                return;
            }
            ops.sort_by(|a, b| a.path().cmp(b.path()));
            ops.dedup();
            for op in &ops {
                counts.add(op);
            }
            phases.push(Phase { name, ops: ops.into() });
        };
        push("remove files".into(), self.unlinks);
        for (depth, ops) in self.rmdirs.into_iter().rev() {
            push(format!("remove directories (depth {depth})"), ops);
        }
        for (depth, ops) in self.mkdirs {
            push(format!("create directories (depth {depth})"), ops);
        }
        push("write files".into(), self.writes);
        push("create symlinks".into(), self.symlinks);
        Plan { from, to, phases, counts }
    }
}

/// What a sync from one tree to another does to the target.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Plan {
    /// The tree the target holds before (`None`: nothing, an initial checkout).
    #[serde(serialize_with = "crate::json::opt_id")]
    #[schemars(with = "Option<crate::json::schema::ObjectId>")]
    pub from: Option<ObjectId>,
    /// The tree the target holds after.
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub to: ObjectId,
    /// The phases, in execution order.
    pub phases: Vec<Phase>,
    /// Ops by kind.
    pub counts: OpCounts,
}

impl Plan {
    /// Order `ops` into phases of independent ops: files removed, directories removed deepest
    /// first, directories created parents first, files written (and chmods), symlinks last.
    pub fn from_ops(from: Option<ObjectId>, to: ObjectId, ops: impl IntoIterator<Item = Op>) -> Plan {
        let mut phases = Phases::default();
        for op in ops {
            phases.push(op);
        }
        phases.into_plan(from, to)
    }

    /// Does this plan change nothing?
    pub fn is_empty(&self) -> bool {
        self.phases.iter().all(|p| p.ops.is_empty())
    }

    /// All ops in execution order.
    pub fn ops(&self) -> impl Iterator<Item = &Op> {
        self.phases.iter().flat_map(|p| p.ops.iter())
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.phases.iter().map(|p| p.ops.len()).sum()
    }
}
