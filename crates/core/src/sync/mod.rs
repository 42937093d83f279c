//! [`sync()`]: the whole job — lock, read the journal, finish an interrupted sync, plan, apply,
//! record. One small state read and two small writes per sync, nothing proportional to the tree.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::apply;
use crate::backend;
use crate::gitworktree;
use crate::op::OpCounts;
use crate::plan;
use crate::select::Select;
use crate::source;
use crate::state::{self, InProgress, Synced};
use crate::submodule;
use crate::verify;

mod checks;
mod function;
mod journal;
mod place;
mod prepare;
mod repair;
mod status;

pub use function::{holder, sync};
pub use place::{Place, check_place};
pub use prepare::{PrepareOptions, Prepared, prepare};
pub use repair::repair;
pub use state::hostname;
pub use status::{Status, status};

/// How to sync.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Take over a non-empty target that treesync did not write: write the tree and remove
    /// everything the tree does not have.
    pub force: bool,
    /// Plan only; change nothing (not even the lock or a missing target root).
    pub dry_run: bool,
    /// Executor settings.
    pub apply: apply::Options,
    /// Name of the backend, recorded in the state (`local`, `memory`, …).
    pub backend_name: String,
    /// On backends without an exclusive lock (object stores), how long another sync's journal
    /// entry counts as that sync still running. `None`: 10 minutes.
    pub lease: Option<Duration>,
    /// Take over an unfinished sync of another process even if its lease has not expired.
    pub break_lock: bool,
    /// When another writer holds the target's lock: wait this long for it (trying again every
    /// 200 ms) before giving up with [`backend::Error::Locked`]. `None`: give up at once.
    pub lock_wait: Option<Duration>,
    /// The target is this git clone (a directory): keep its `.git/index` and HEAD on the synced
    /// commit ([`gitworktree::update()`]), checked before and written after the sync, while the
    /// target's lock is held.
    pub git_worktree: Option<PathBuf>,
    /// How large a plan may get ([`plan::Limits`]; the defaults are far above any real
    /// repository and refuse tree bombs).
    pub limits: plan::Limits,
    /// Fill each gitlink with its submodule's tree at the recorded commit
    /// ([`crate::submodule`]); off, gitlinks are empty directories (as `git checkout` without
    /// `--recurse-submodules` leaves them). Recorded in the state: turning it on or off
    /// fills or empties the gitlinks of the synced tree.
    pub recurse_submodules: bool,
    /// Write only the paths these `--include`/`--exclude` patterns select ([`Select::all`]:
    /// every path). The state records them; changing them applies the difference.
    pub select: Select,
    /// `git archive` semantics (`--export`): `export-ignore` paths are left out and
    /// `export-subst` placeholders are expanded.
    pub export: bool,
    /// What files git stores as Git LFS pointers are written as ([`crate::lfs`]): their
    /// content from the repository's LFS store (the default; every object must be there
    /// before anything is written, [`Error::Lfs`] otherwise) or the pointer files. Recorded
    /// in the state with the conversion settings: a change rewrites the LFS files.
    pub lfs: crate::lfs::LfsMode,
    /// Plans shared with the other targets of this process that make the same transition
    /// (mirrors of one repository and ref): the first plans, the others reuse its plan
    /// ([`plan::Cache`]). `None`: every sync plans on its own.
    pub plans: Option<Arc<plan::Cache>>,
    /// Ops per chunk of an initial checkout applied while it is planned
    /// ([`plan::stream_checkout`]); `None`: [`DEFAULT_STREAM_CHUNK`]. Not with
    /// [`Options::plans`] or [`Options::dry_run`], which plan whole.
    pub stream_chunk: Option<usize>,
}

/// The chunk of an initial checkout applied while it is planned ([`Options::stream_chunk`]):
/// large enough that each chunk's writes run as wide as any backend's policy allows, small
/// enough that it costs a few MiB at most, whatever the size of the tree.
pub const DEFAULT_STREAM_CHUNK: usize = 8192;

/// The lease of [`Options::lease`] when none is given.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(600);

/// Syncing failed. The target is either unchanged or recorded as "in progress" in its journal,
/// and the next sync finishes the job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository or revision.
    #[error(transparent)]
    Source(#[from] source::Error),
    /// Planning (hostile trees, corrupt objects).
    #[error(transparent)]
    Plan(#[from] plan::Error),
    /// The target, outside of applying ops (lock, state, listing).
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// The state file.
    #[error(transparent)]
    State(#[from] state::ParseError),
    /// The repository's conversion settings or attributes (`.gitattributes`, filter drivers).
    #[error(transparent)]
    Convert(#[from] crate::convert::Error),
    /// The commit `export-subst` placeholders are expanded with (`--export`).
    #[error(transparent)]
    Export(#[from] crate::export::Error),
    /// Git LFS objects the files need are missing from the repository's LFS store (found
    /// before anything is written), or cannot be read.
    #[error(transparent)]
    Lfs(#[from] crate::lfs::Error),
    /// Comparing the target with a tree (a repair, or `--force` on a managed target).
    #[error(transparent)]
    Verify(#[from] verify::Error),
    /// The tree the target holds according to its state is no longer in the repository.
    #[error(
        "the {what} this target was last synced to is no longer in the repository (amended or force-pushed, then garbage-collected); the repository itself is fine\n  hint: run sync again with --force: treesync then compares the target with the requested commit once and rewrites only what differs"
    )]
    BaseGone {
        /// `commit ID` or `tree ID`.
        what: String,
    },
    /// The clone's index or HEAD (with [`Options::git_worktree`]).
    #[error(transparent)]
    GitWorktree(#[from] gitworktree::Error),
    /// The target holds files treesync did not write.
    #[error(
        "target {target} is not empty and was not written by treesync\n  hint: pass --force to take it over: treesync writes the tree there and removes everything the tree does not have"
    )]
    Unmanaged {
        /// The target, as the backend shows it.
        target: String,
    },
    /// Applying stopped.
    #[error("sync stopped during '{phase}' after {done} ops: {source}\n  hint: the journal in .treesync/state records the unfinished sync; run sync again to finish it", done = done.total())]
    Apply {
        /// Phase.
        phase: String,
        /// Done so far.
        done: OpCounts,
        /// Why.
        #[source]
        source: backend::Error,
    },
    /// [`Options::git_worktree`] with a subtree revision (`REV:PATH`): the clone's index and
    /// HEAD describe a whole commit, so they cannot describe a target that holds one directory
    /// of it.
    #[error(
        "--git-worktree cannot keep a git clone on {rev:?}: it names one directory of a commit, and a clone's index and HEAD describe the whole commit (git status would show every other file as deleted)\n  hint: sync the subtree without --git-worktree, or sync the whole commit (--ref without :PATH or --path) into the clone"
    )]
    GitWorktreeSubtree {
        /// The revision.
        rev: String,
    },
    /// The target is inside the repository's git directory ([`check_place()`]).
    #[error(
        "refusing to sync into {}: it is inside the repository's git directory {}, where the tree's files would mix with git's own\n  hint: choose a target directory outside {}",
        target.display(), git_dir.display(), git_dir.display()
    )]
    InsideGitDir {
        /// The target, resolved.
        target: PathBuf,
        /// The repository's git directory, resolved.
        git_dir: PathBuf,
    },
    /// A takeover (`--force`) of a place it would wreck ([`check_place()`]).
    #[error(
        "refusing to take over {} with --force: it is {what}, and --force removes everything the tree does not have\n  hint: sync into a new or empty directory instead",
        target.display()
    )]
    WouldWreck {
        /// The target, resolved.
        target: PathBuf,
        /// What it is: `the filesystem root`, `your home directory`, ….
        what: &'static str,
    },
    /// A takeover (`--force`) of a target that holds something treesync must never remove:
    /// a git repository, a home directory, another target's state or generations
    /// (the takeover's scan finds them, whatever backend serves the target).
    #[error(
        "refusing to take over {target} with --force: it holds {what} ({found}), and --force would remove it with everything else the tree does not have\n  hint: sync into a new or empty directory instead"
    )]
    Precious {
        /// The target, as the backend shows it.
        target: String,
        /// The entry found, relative to the target.
        found: String,
        /// What it is: `a git repository`, ….
        what: &'static str,
    },
    /// The target is inside a treesync state folder or generations home ([`check_place()`]).
    #[error(
        "refusing to sync into {}: {} is a folder treesync keeps for a target of its own (its state or its generations)\n  hint: choose a target directory outside {}",
        target.display(), dir.display(), dir.display()
    )]
    InsideTreesync {
        /// The target, resolved.
        target: PathBuf,
        /// The state folder or home it is in.
        dir: PathBuf,
    },
    /// Interrupted on request.
    #[error("sync interrupted after {} ops; run sync again to finish it", done.total())]
    Interrupted {
        /// Done so far.
        done: OpCounts,
    },
}

impl From<apply::Error> for Error {
    fn from(e: apply::Error) -> Self {
        match e {
            apply::Error::Backend { phase, source, done } => Error::Apply { phase, done, source },
            apply::Error::Interrupted { done } => Error::Interrupted { done },
        }
    }
}

/// What a takeover (`--force`) does to what is in the target already.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Replaced {
    /// Entries it removes: the tree does not have them, or has them with another type
    /// (a directory counts once, with what it holds).
    pub removed: u64,
    /// Files and symlinks it writes over (their content, target or mode differ, or it cannot
    /// tell without reading them).
    pub overwritten: u64,
    /// The first removed paths (at most [`Replaced::SHOWN`]).
    #[serde(serialize_with = "crate::path::ser_json_list")]
    #[schemars(with = "Vec<crate::json::schema::Path>")]
    pub first_removed: Vec<Vec<u8>>,
    /// The first overwritten paths (at most [`Replaced::SHOWN`]).
    #[serde(serialize_with = "crate::path::ser_json_list")]
    #[schemars(with = "Vec<crate::json::schema::Path>")]
    pub first_overwritten: Vec<Vec<u8>>,
}

impl Replaced {
    /// How many paths of each kind are listed.
    pub const SHOWN: usize = 5;

    fn note(&mut self, removed: bool, path: Vec<u8>) {
        let (n, first) = if removed {
            (&mut self.removed, &mut self.first_removed)
        } else {
            (&mut self.overwritten, &mut self.first_overwritten)
        };
        *n += 1;
        if first.len() < Self::SHOWN {
            first.push(path);
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "syncOutcome")]
pub struct Outcome {
    /// What the target held before (per its state).
    pub from: Option<Synced>,
    /// The commit synced to.
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub commit: gix_hash::ObjectId,
    /// Its tree, or the tree of one of its directories (a subtree sync, `REV:PATH`).
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub tree: gix_hash::ObjectId,
    /// The directory of `commit` whose tree `tree` is (a subtree sync: `REV:PATH` or
    /// `--path`); absent for the whole tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// An interrupted sync that was finished first.
    pub resumed: Option<InProgress>,
    /// The target was taken over (`--force`).
    pub takeover: bool,
    /// With `takeover`: what of the target's content was removed and written over.
    pub replaced: Option<Replaced>,
    /// The submodules whose trees were read (`--recurse-submodules`): each gitlink whose
    /// content changed, with the commit and the repository it was read from; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submodules: Vec<submodule::Used>,
    /// The paths selected (`--include`/`--exclude`); absent: every path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select: Option<Select>,
    /// How the files are written: the repository's conversion settings (`.gitattributes`
    /// conversions, filter drivers, the LFS mode, `--export`), as the state records them.
    pub conversions: crate::convert::Settings,
    /// Nothing was changed (`--dry-run`).
    pub dry_run: bool,
    /// Files written as UTF-8, unconverted, because their `working-tree-encoding` cannot be
    /// converted to — as `git checkout` writes them, after its "failed to encode" error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unconverted: Vec<crate::convert::Unconverted>,
    /// Ops planned (resume and main plan together).
    pub planned: OpCounts,
    /// Ops done.
    pub applied: OpCounts,
    /// Ops that met drift on the target and corrected it (see [`apply::Outcome::healed`]).
    pub healed: u64,
    /// Writes of the state file (0 when nothing changed, else 1 or 2).
    pub state_writes: u32,
    /// Wall time.
    #[serde(serialize_with = "crate::json::secs")]
    #[schemars(with = "crate::json::schema::Seconds")]
    pub elapsed: Duration,
}

/// How to repair a target (`verify --repair`).
#[derive(Debug, Clone, Default)]
pub struct RepairOptions {
    /// How thoroughly to compare before repairing.
    pub level: verify::Level,
    /// Also remove files and directories the tree does not have.
    pub delete_extra: bool,
    /// Compare and plan only; change nothing (no lock, no journal).
    pub dry_run: bool,
    /// Compare again after repairing (a second scan), to prove the result.
    pub check_after: bool,
    /// Compare (and so repair) one slice of the tree only ([`crate::slice`]); `None`: all.
    pub slice: Option<crate::slice::Slice>,
    /// Lock, journal and executor settings, as for a sync.
    pub sync: Options,
}

/// What a repair found and did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RepairOutcome {
    /// An interrupted sync that was finished first (before comparing).
    pub finished: Option<Outcome>,
    /// The comparison that planned the repair.
    pub report: verify::Report,
    /// Ops planned to repair the drift.
    pub planned: OpCounts,
    /// Ops done (`None` with `dry_run`, or when nothing differed).
    pub applied: Option<OpCounts>,
    /// The comparison after repairing (with `check_after`).
    pub after: Option<verify::Report>,
}
