//! [`sync()`]: the whole job — lock, read the journal, finish an interrupted sync, plan, apply,
//! record. One small state read and two small writes per sync, nothing proportional to the tree.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::apply::{self, Progress};
use crate::backend::{self, Backend, TargetState};
use crate::convert::Converter;
use crate::gitworktree;
use crate::index_delta;
use crate::op::{OpCounts, Plan};
use crate::path::RelPath;
use crate::plan::{self, ExistingEntry, ExistingKind};
use crate::select::Select;
use crate::source::{self, BlobSource, Repo, Resolved};
use crate::state::{self, InProgress, SyncState, Synced};
use crate::submodule::{self, Submodules};
use crate::verify;
use gix_hash::ObjectId;

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

/// What [`prepare()`] found and planned.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// What the target's state said, if it has one.
    pub state: Option<SyncState>,
    /// What was at the target root.
    pub target: TargetState,
    /// An interrupted sync, and the plan that finishes it (run first).
    pub resume: Option<(InProgress, Plan)>,
    /// The plan to the requested commit (shared with other targets through
    /// [`Options::plans`]).
    pub main: Arc<Plan>,
    /// The requested commit.
    pub to: Resolved,
    /// The directory of `to.commit` whose tree `to.tree` is (a subtree sync), as the state
    /// will record it; `None` for the whole tree.
    pub path: Option<String>,
    /// `main` is a takeover: of an unmanaged target, or of a managed one (`--force`) by
    /// repairing it to the requested tree (then `repair` too).
    pub takeover: bool,
    /// `main` repairs what differs from the requested tree (see [`InProgress::repair`]).
    pub repair: bool,
    /// With `takeover`: what of the target's present content it removes and writes over.
    pub replaced: Option<Replaced>,
    /// The state file as read, to check under the lock that it is still the one planned against.
    state_bytes: Option<Vec<u8>>,
    /// Planned for a target that does not tell case apart.
    case_insensitive: bool,
    /// What `main` converts files with (the repository's settings now).
    converter: Arc<Converter>,
    /// What the `resume` plan converts files with (the journal's settings).
    resume_converter: Option<Arc<Converter>>,
    /// After `main`, the target's gitlinks hold their submodules' trees.
    pub recurse_submodules: bool,
    /// The submodules the plans read (with `recurse_submodules`, or to empty gitlinks).
    pub submodules: Vec<submodule::Used>,
    /// The repositories the plans' blobs are in: the repository, then submodules.
    repos: Vec<Repo>,
    /// The paths `main` selects (`None`: all).
    pub select: Option<Select>,
    /// The files with `export-subst` placeholders expanded after `main`.
    export_subst: Vec<String>,
    /// `main` is an initial checkout applied while it is planned: it holds only its counts.
    main_stream: Option<Streamed>,
    /// The same for `resume`.
    resume_stream: Option<Streamed>,
    /// What the LFS objects of the plans' pointer files add to the pointers' own bytes (the
    /// plans count blobs; a pointer is written as its object, [`check_lfs`]).
    lfs_bytes: u64,
}

/// An initial checkout applied as it is planned, in chunks ([`plan::stream_checkout`]), after
/// a walk that refused whatever the plan would refuse and counted its ops
/// ([`plan::measure_checkout`]), so that memory holds a chunk of ops, not all of them.
#[derive(Debug, Clone)]
struct Streamed {
    /// The tree written.
    tree: ObjectId,
    options: plan::Options,
    /// What files are converted with (`None`: as blobs are), and the tree's `.gitattributes`.
    settings: Option<crate::convert::Settings>,
    attributes: crate::convert::AttributeFiles,
    /// Ops per chunk.
    chunk: usize,
}

impl Prepared {
    /// The conversion settings the target's files are written with after this sync.
    pub fn conversions(&self) -> &crate::convert::Settings {
        self.converter.settings()
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

/// How to [`prepare()`]: what a sync with these settings would plan.
#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// Plan a takeover ([`Options::force`]): of a target treesync did not write, or of a
    /// managed one by comparing it with the requested tree once.
    pub force: bool,
    /// Create a missing target root (and its `.treesync` folder) before reading it; without
    /// it, nothing is written at all.
    pub create: bool,
    /// How large a plan may get ([`plan::Limits`]).
    pub limits: plan::Limits,
    /// Plan gitlinks filled with their submodules' trees ([`Options::recurse_submodules`]).
    pub recurse_submodules: bool,
    /// Plan only the paths these patterns select ([`Options::select`]).
    pub select: Select,
    /// `git archive` semantics ([`Options::export`]).
    pub export: bool,
    /// What LFS pointer files are written as ([`Options::lfs`]).
    pub lfs: crate::lfs::LfsMode,
}

/// Read the target's state and plan, without writing anything (unless
/// [`PrepareOptions::create`]).
pub async fn prepare(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    options: &PrepareOptions,
) -> Result<Prepared, Error> {
    let to = repo.resolve(rev)?;
    let target = backend.prepare_target(options.create).await?;
    let goal = Goal {
        path: Some(source::subtree_path(rev)),
        recurse: Some(options.recurse_submodules),
        select: Some(options.select.clone()),
        export: Some(options.export),
        lfs: Some(options.lfs),
    };
    prepare_at(repo, to, goal, backend, options.force, target, options.limits, None, None).await
}

/// Where a sync goes beyond the commit: each `None` keeps what the state records (a repair,
/// which goes to the recorded tree).
#[derive(Debug, Clone)]
struct Goal {
    /// The directory the tree is of its commit.
    path: Option<Option<String>>,
    /// Gitlinks filled with their submodules' trees.
    recurse: Option<bool>,
    /// The paths selected.
    select: Option<Select>,
    /// `git archive` semantics.
    export: Option<bool>,
    /// What LFS pointer files are written as.
    lfs: Option<crate::lfs::LfsMode>,
}

/// How to plan `from → to` when gitlinks are filled on either side: through the submodules.
struct Planning<'r> {
    repo: &'r Repo,
    options: plan::Options,
    submodules: Option<Submodules>,
}

impl Planning<'_> {
    /// Plan from tree `from.0` (gitlinks filled: `from.1`; files written with `from.2`, `None`:
    /// as blobs are) to `to` (filled: `new.0`, written with `new.1`).
    fn diff(
        &self,
        from: (Option<ObjectId>, bool, Option<&Converter>, &Select),
        to: ObjectId,
        new: (bool, Option<&Converter>, &Select),
        resubst: Option<&[String]>,
    ) -> Result<Plan, plan::Error> {
        let options = self.options;
        let (from, old, old_converter, old_select) = from;
        let checkout = plan::Checkout {
            resubst,
            select: Some(plan::Selecting { old: old_select, new: new.2 }),
            conversions: new.1.map(|c| plan::Conversions { old: old_converter, new: c }),
            recurse: match &self.submodules {
                Some(gitlinks) if old || new.0 => Some(plan::Recurse { old, new: new.0, gitlinks }),
                _ => None,
            },
        };
        plan::with_big_stack(|| self.repo.with_objects(|odb| plan::plan_checkout(odb, from, to, options, checkout)))
    }

    /// Plan the takeover of a target holding `existing` (gitlinks filled: `new`, files
    /// written with `converter`).
    fn takeover(
        &self,
        existing: &[ExistingEntry],
        to: ObjectId,
        new: bool,
        converter: Option<&Converter>,
        select: &Select,
    ) -> Result<Plan, plan::Error> {
        let options = self.options;
        let checkout = plan::Checkout {
            resubst: None,
            select: Some(plan::Selecting { old: select, new: select }),
            conversions: converter.map(|c| plan::Conversions { old: None, new: c }),
            recurse: match &self.submodules {
                Some(gitlinks) if new => Some(plan::Recurse { old: false, new: true, gitlinks }),
                _ => None,
            },
        };
        plan::with_big_stack(|| self.repo.with_objects(|odb| plan::plan_takeover(odb, existing, to, options, checkout)))
    }

    /// An initial checkout of `to` (files written with `converter`, paths selected by
    /// `select`, gitlinks filled with `recurse`) to apply while it is planned, in chunks of
    /// `chunk` ops: its counts as a plan without ops, and what to plan it with. `None` where
    /// the whole plan is needed before the first write: with a selection or `--export` (the
    /// directories made depend on every path selected), with submodules (planned through their
    /// own repositories), and where attributes name a filter (every file's conversion is
    /// checked for a required driver and every LFS object for its presence before any write).
    fn stream(
        &self,
        to: ObjectId,
        converter: Option<&Converter>,
        select: &Select,
        recurse: bool,
        chunk: usize,
    ) -> Result<Option<(Plan, Streamed)>, plan::Error> {
        if self.submodules.is_some() || recurse || !select.is_all() || converter.is_some_and(|c| c.settings().export) {
            return Ok(None);
        }
        let options = self.options;
        let measured =
            plan::with_big_stack(|| self.repo.with_objects(|odb| plan::measure_checkout(odb, to, options, converter)))?;
        if let Some(c) = converter {
            let settings = c.settings();
            let in_settings = [&settings.attributes_file, &settings.info_attributes]
                .into_iter()
                .any(|t| t.as_deref().is_some_and(|t| t.contains("filter")));
            let in_tree = self.repo.with_objects(|odb| {
                let mut buf = Vec::new();
                measured.attributes.iter().any(|(_, id)| {
                    // Unreadable: let the materialized plan report it.
                    gix_object::FindExt::find_blob(odb, id, &mut buf)
                        .map_or(true, |b| b.data.windows(6).any(|w| w == b"filter"))
                })
            });
            if in_settings || in_tree {
                tracing::debug!(target: "treesync::sync", "attributes name a filter: the initial checkout is planned whole");
                return Ok(None);
            }
        }
        let plan = Plan { from: None, to, phases: Vec::new(), counts: measured.counts };
        let streamed = Streamed {
            tree: to,
            options,
            settings: converter.map(|c| c.settings().clone()),
            attributes: measured.attributes,
            chunk,
        };
        Ok(Some((plan, streamed)))
    }

    /// What the plans read: submodules, and the repositories holding their blobs.
    fn read(&self) -> (Vec<submodule::Used>, Vec<Repo>) {
        match &self.submodules {
            Some(s) => (s.used(), s.repos()),
            None => (Vec::new(), vec![self.repo.clone()]),
        }
    }
}

#[allow(clippy::too_many_arguments)] // private: the inputs of sync(), prepare() and repair()
async fn prepare_at(
    repo: &Repo,
    to: Resolved,
    goal: Goal,
    backend: &dyn Backend,
    force: bool,
    mut target: TargetState,
    limits: plan::Limits,
    plans: Option<&plan::Cache>,
    stream: Option<usize>,
) -> Result<Prepared, Error> {
    let Goal { path, recurse, select, export, lfs } = goal;
    let state_bytes = backend.load_state().await?;
    let state = match &state_bytes {
        Some(bytes) => match SyncState::parse(bytes) {
            Ok(s) => Some(s),
            // A damaged state file: `--force` takes the target over whatever it says.
            Err(_) if force => {
                target = TargetState::Managed;
                None
            }
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    if target == TargetState::Managed && state_bytes.is_none() {
        // A first sync that died before its journal was written leaves only the lock file.
        target = if backend.read_dir(&RelPath::root()).await?.is_empty() {
            TargetState::Empty
        } else {
            TargetState::Unmanaged
        };
    }

    let path = path.unwrap_or_else(|| match &state {
        Some(SyncState { in_progress: Some(p), .. }) => p.to_path.clone(),
        Some(s) => s.path.clone(),
        None => None,
    });
    let options = plan::Options { case_insensitive: !backend.capabilities().case_sensitive, limits };
    // What the target holds now (a finished interrupted sync's, or the synced), and what the
    // sync goes to: the paths selected, and git archive's semantics.
    let (held_select, held_export) = match &state {
        Some(SyncState { in_progress: Some(p), .. }) => {
            (p.to_select.clone(), p.to_conversions.as_ref().is_some_and(|c| c.export))
        }
        Some(s) => (s.select.clone(), s.conversions.as_ref().is_some_and(|c| c.export)),
        None => (None, false),
    };
    let select = select.unwrap_or_else(|| held_select.clone().unwrap_or_default());
    let export = export.unwrap_or(held_export);
    let mut settings = crate::convert::Settings::of(repo)?;
    settings.export = export;
    // The mode asked for, else (a repair) the one the target's files were written with.
    settings.lfs = lfs.unwrap_or_else(|| {
        let recorded = match &state {
            Some(SyncState { in_progress: Some(p), .. }) => p.to_conversions.as_ref(),
            Some(s) => s.conversions.as_ref(),
            None => None,
        };
        recorded.map(|c| c.lfs).unwrap_or_default()
    });
    let mut converter = Converter::new(repo, settings)?;
    if export {
        // `%(describe)` expands once in the archive of this tree, as these paths are selected.
        let commit =
            crate::export::CommitInfo::from_commit(repo, to.commit)?.archive(to.tree, converter.settings(), &select);
        converter = converter.with_commit(commit);
    }
    let converter = Arc::new(converter);
    // A converter for files written with `settings` from the commit, tree and selection `side`.
    #[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
    let converter_of = |settings: &Option<crate::convert::Settings>,
                        side: Option<(ObjectId, ObjectId, &Select)>|
     -> Result<Option<Arc<Converter>>, Error> {
        Ok(match settings {
            Some(s) if s == converter.settings() && (!s.export || side == Some((to.commit, to.tree, &select))) => {
                Some(converter.clone())
            }
            Some(s) => {
                let mut c = Converter::new(repo, s.clone())?;
                if let (true, Some((commit, tree, select))) = (s.export, side) {
                    let commit = crate::export::CommitInfo::from_commit(repo, commit)?;
                    c = c.with_commit(commit.archive(tree, s, select));
                }
                Some(Arc::new(c))
            }
            None => None,
        })
    };
    // How the target's files were written: per its state (none: as blobs are).
    let synced_select = state.as_ref().and_then(|s| s.select.clone()).unwrap_or_default();
    let synced_converter = converter_of(
        &state.as_ref().and_then(|s| s.conversions.clone()),
        state.as_ref().and_then(|s| s.synced).map(|s| (s.commit, s.tree, &synced_select)),
    )?;
    let synced_commit = state.as_ref().and_then(|s| s.synced).map(|s| s.commit);
    let substituted: Vec<String> = state.as_ref().map(|s| s.export_subst.clone()).unwrap_or_default();
    let held_select = held_select.unwrap_or_default();
    let recursed = state.as_ref().is_some_and(|s| s.recurse_submodules);
    let recurse = recurse.unwrap_or(match &state {
        Some(SyncState { in_progress: Some(p), .. }) => p.recurse_submodules,
        _ => recursed,
    });
    let resume_recurse = state.as_ref().and_then(|s| s.in_progress.as_ref()).map(|p| p.recurse_submodules);
    let planning = Planning {
        repo,
        options,
        // Only where a side has gitlinks filled; the `.gitmodules` of every commit involved.
        submodules: if recurse || recursed || resume_recurse == Some(true) {
            let synced = state.as_ref().and_then(|s| s.synced).map(|s| s.commit);
            let going = state.as_ref().and_then(|s| s.in_progress.as_ref()).map(|p| p.to_commit);
            let commits: Vec<ObjectId> = [synced, going, Some(to.commit)].into_iter().flatten().collect();
            Some(Submodules::new(repo, &commits, path.as_deref()))
        } else {
            None
        },
    };
    // `--force` on a managed target: take it over by comparing it with the requested tree
    // once (stat data proves what it can, the rest is hashed) and repairing what differs,
    // foreign entries included. Neither the journal nor the recorded tree is needed, so this
    // also gets a target out of any state: a damaged state file, a synced commit that is gone
    // from the repository, an interrupted sync whose replay keeps failing.
    if force && target == TargetState::Managed {
        let select_now = (!select.is_all()).then(|| select.clone());
        let (main, replaced, repos) =
            repair_plan_to(repo, backend, to, (&path, recurse, &select_now), true, limits, &converter).await?;
        let mut main = main;
        let lfs_bytes = check_lfs(&repos, &main, &converter)?;
        check_bytes(limits, main.counts.bytes, lfs_bytes)?;
        main.counts.bytes += lfs_bytes;
        return Ok(Prepared {
            state,
            target,
            resume: None,
            main: Arc::new(main),
            to,
            path,
            takeover: true,
            repair: true,
            replaced: Some(replaced),
            state_bytes,
            case_insensitive: options.case_insensitive,
            converter,
            resume_converter: None,
            // Compared with the tree as this sync writes it: gitlinks filled with `recurse`.
            recurse_submodules: recurse,
            submodules: Vec::new(),
            repos,
            select: (!select.is_all()).then(|| select.clone()),
            export_subst: substituted.clone(),
            main_stream: None,
            resume_stream: None,
            lfs_bytes,
        });
    }
    let mut resume = None;
    let mut resume_stream = None;
    let mut resume_converter = None;
    // Repositories a resumed repair reads blobs from beyond those the plans read.
    let mut repair_repos = Vec::new();
    let mut takeover = false;
    // What the main plan starts from: a tree, written with these settings.
    let mut base_converter = synced_converter.clone();
    let base = match &state {
        Some(SyncState { in_progress: Some(p), .. }) => {
            // Finished with the settings it started with (a journal of a version before
            // conversions: as blobs are).
            // A filter driver's command is how to run it, not what the tree holds: the one
            // configured now (a filter that failed the sync can be fixed, then the sync rerun).
            let journaled = p.to_conversions.clone().map(|mut s| {
                for (name, d) in &mut s.drivers {
                    if let Some(now) = converter.settings().drivers.get(name) {
                        d.clone_from(now);
                    }
                }
                s
            });
            let journal_select = p.to_select.clone().unwrap_or_default();
            let journal_converter = converter_of(&journaled, Some((p.to_commit, p.to_tree, &journal_select)))?;
            let plan = if p.repair {
                let to = Resolved { commit: p.to_commit, tree: p.to_tree };
                let with = journal_converter.clone().unwrap_or_else(|| converter.clone());
                let goal = (&p.to_path, p.recurse_submodules, &p.to_select);
                let (plan, _, repos) = repair_plan_to(repo, backend, to, goal, p.takeover, limits, &with).await?;
                repair_repos = repos;
                plan
            } else if p.takeover {
                let existing = scan(backend).await?;
                planning.takeover(
                    &existing,
                    p.to_tree,
                    p.recurse_submodules,
                    journal_converter.as_deref(),
                    &journal_select,
                )?
            } else if let Some((plan, streamed)) = match stream {
                // An interrupted initial checkout: finished as it was started, in chunks.
                Some(chunk) if p.from_tree.is_none() => planning.stream(
                    p.to_tree,
                    journal_converter.as_deref(),
                    &journal_select,
                    p.recurse_submodules,
                    chunk,
                )?,
                _ => None,
            } {
                resume_stream = Some(streamed);
                plan
            } else {
                check_base(repo, p.from_tree, state.as_ref())?;
                planning.diff(
                    (p.from_tree, recursed, synced_converter.as_deref(), &synced_select),
                    p.to_tree,
                    (p.recurse_submodules, journal_converter.as_deref(), &journal_select),
                    (synced_commit != Some(p.to_commit)).then_some(substituted.as_slice()),
                )?
            };
            resume = Some((p.clone(), plan));
            resume_converter = journal_converter.clone();
            base_converter = journal_converter;
            Some(p.to_tree)
        }
        Some(SyncState { synced, .. }) => {
            let base = synced.map(|s| s.tree);
            check_base(repo, base, state.as_ref())?;
            base
        }
        None => match target {
            TargetState::Empty | TargetState::Managed => None,
            TargetState::Unmanaged if force => {
                takeover = true;
                None
            }
            TargetState::Unmanaged => return Err(Error::Unmanaged { target: backend.to_string() }),
        },
    };
    let mut replaced = None;
    let mut main_stream = None;
    let streamed = match stream {
        Some(chunk) if base.is_none() && !takeover => {
            planning.stream(to.tree, Some(&converter), &select, recurse, chunk)?
        }
        _ => None,
    };
    let main = if let Some((plan, streamed)) = streamed {
        main_stream = Some(streamed);
        Arc::new(plan)
    } else if takeover {
        let existing = scan(backend).await?;
        let plan = planning.takeover(&existing, to.tree, recurse, Some(&converter), &select)?;
        replaced = Some(replaced_by(&plan, &existing));
        Arc::new(plan)
    } else {
        // What the target's gitlinks hold once an interrupted sync is finished, or now.
        let filled = resume_recurse.unwrap_or(recursed);
        let held_commit = match &state {
            Some(SyncState { in_progress: Some(p), .. }) => Some(p.to_commit),
            _ => synced_commit,
        };
        let from = (base, filled && base.is_some(), base_converter.as_deref(), &held_select);
        let new = (recurse, Some(&*converter), &select);
        let resubst = (held_commit != Some(to.commit)).then_some(substituted.as_slice());
        match plans {
            // With submodules the plan depends on the submodule repositories found, and
            // planning records which it read: not shared.
            Some(cache) if planning.submodules.is_none() => {
                let key = plan::Key {
                    repo: repo.common_dir(),
                    from: (base, held_commit.filter(|_| base.is_some())),
                    to: (to.tree, to.commit),
                    old_settings: base_converter.as_ref().map(|c| c.settings().clone()),
                    new_settings: Some(converter.settings().clone()),
                    old_select: held_select.clone(),
                    new_select: select.clone(),
                    resubst: resubst.map(<[String]>::to_vec),
                    case_insensitive: options.case_insensitive,
                    limits: options.limits,
                };
                cache.get_or_plan(key, || planning.diff(from, to.tree, new, resubst)).await?
            }
            _ => Arc::new(planning.diff(from, to.tree, new, resubst)?),
        }
    };
    // The expanded files after this sync: those before (still checked each time) and those
    // written now, less those removed.
    let export_subst = {
        let mut all: std::collections::BTreeSet<String> = substituted.iter().cloned().collect();
        let plans = resume.iter().map(|(_, p)| p).chain(std::iter::once(&*main));
        for op in plans.flat_map(|p| p.ops()) {
            match op {
                crate::Op::Write { path, conversion: Some(c), .. } if c.export_subst => {
                    all.insert(path.display());
                }
                crate::Op::Unlink { path } => {
                    all.remove(&path.display());
                }
                _ => {}
            }
        }
        if export { all.into_iter().collect() } else { Vec::new() }
    };
    check_filters(repo, &main, converter.settings())?;
    let (submodules, mut repos) = planning.read();
    for r in repair_repos {
        if !repos.iter().any(|o| o.git_dir() == r.git_dir()) {
            repos.push(r);
        }
    }
    // Files of submodules: their objects are in the submodules' own LFS stores.
    let converter = with_submodule_stores(repo, converter, &repos)?;
    let resume_converter = match resume_converter {
        Some(c) => Some(with_submodule_stores(repo, c, &repos)?),
        None => None,
    };
    // Every LFS object the plans write, before the lock, the journal or any write; by their
    // real sizes against --max-bytes.
    let mut main = main;
    let mut lfs_bytes = check_lfs(&repos, &main, &converter)?;
    let mut bytes = main.counts.bytes;
    if lfs_bytes > 0 {
        // The plan says what it writes: pointers by their objects' sizes.
        Arc::make_mut(&mut main).counts.bytes += lfs_bytes;
    }
    if let Some((_, plan)) = &mut resume {
        let more = check_lfs(&repos, plan, resume_converter.as_deref().unwrap_or(&converter))?;
        bytes += plan.counts.bytes;
        plan.counts.bytes += more;
        lfs_bytes += more;
    }
    check_bytes(limits, bytes, lfs_bytes)?;
    Ok(Prepared {
        state,
        target,
        resume,
        main,
        to,
        path,
        takeover,
        repair: false,
        replaced,
        state_bytes,
        case_insensitive: options.case_insensitive,
        converter,
        resume_converter,
        recurse_submodules: recurse,
        submodules,
        repos,
        select: (!select.is_all()).then_some(select),
        export_subst,
        main_stream,
        resume_stream,
        lfs_bytes,
    })
}

/// Refuse plans of `planned` bytes whose LFS objects add `lfs` bytes when together they pass
/// `limits.max_bytes` (an LFS pointer of 130 bytes may stand for gigabytes).
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
fn check_bytes(limits: plan::Limits, planned: u64, lfs: u64) -> Result<(), Error> {
    let bytes = planned.saturating_add(lfs);
    if lfs > 0 && bytes > limits.max_bytes {
        return Err(Error::Plan(plan::Error::TooLarge {
            limit: plan::Limit::Bytes,
            max: limits.max_bytes,
            planned: bytes,
        }));
    }
    Ok(())
}

/// Refuse a plan that uses a required filter driver without a command, before any write.
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
fn check_filters(repo: &Repo, plan: &Plan, settings: &crate::convert::Settings) -> Result<(), Error> {
    let uses = plan.ops().filter_map(|op| match op {
        crate::Op::Write { path, conversion: Some(c), .. } | crate::Op::Chmod { path, conversion: Some(c), .. } => {
            c.filter.as_deref().map(|f| (f, path.display()))
        }
        _ => None,
    });
    let uses: Vec<(&str, String)> = uses.collect();
    crate::convert::Resolver::check_required(settings, repo.path(), uses.iter().map(|(f, p)| (*f, p.as_str())))?;
    Ok(())
}

/// `converter`, reading LFS objects from the stores of the submodule repositories too
/// (`repos`: the repository, then the submodules the plans read), after the repository's own.
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
fn with_submodule_stores(repo: &Repo, converter: Arc<Converter>, repos: &[Repo]) -> Result<Arc<Converter>, Error> {
    let Some(store) = converter.lfs_store() else { return Ok(converter) };
    if repos.len() < 2 {
        return Ok(converter);
    }
    let others = repos[1..].iter().map(crate::lfs::Store::open).collect::<Result<Vec<_>, _>>()?;
    let store = store.clone().with_fallbacks(&others);
    Ok(Arc::new(Converter::new(repo, converter.settings().clone())?.with_lfs_store(store)))
}

/// Refuse a plan whose LFS pointer files need objects that are not in the LFS store of
/// `converter` ([`crate::lfs::check`]), before any write: the pointer of every written file with
/// `filter=lfs` is read from `repos` (the repository, then submodules'). Nothing to check when
/// pointer files are written ([`crate::lfs::LfsMode::Pointers`]).
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
fn check_lfs(repos: &[Repo], plan: &Plan, converter: &Converter) -> Result<u64, Error> {
    if converter.lfs_store().is_none() {
        return Ok(0);
    }
    let mut extra = 0u64;
    let blobs = submodule::Blobs::source(repos.to_vec());
    let mut wanted = Vec::new();
    for op in plan.ops() {
        let Some(content) = op.content() else { continue };
        let Some(conversion) = content.conversion.filter(|c| c.is_lfs()) else { continue };
        // Larger blobs are never pointers: not worth reading.
        if content.size > crate::lfs::MAX_POINTER_SIZE as u64 {
            continue;
        }
        let mut data = Vec::with_capacity(usize::try_from(content.size).unwrap_or(0));
        blobs
            .read_blob(content.blob, content.size, &mut |chunk| {
                data.extend_from_slice(chunk);
                Ok(())
            })
            .map_err(|e| match e {
                source::BlobError::Source(e) => Error::Source(e),
                source::BlobError::Convert(e) => Error::Convert(e.into()),
                source::BlobError::Sink(e) => Error::Lfs(crate::lfs::Error::Sink(e)),
            })?;
        if let Some(pointer) = converter.lfs_pointer(&data, conversion) {
            extra = extra.saturating_add(pointer.size.saturating_sub(content.size));
            wanted.push((pointer, content.path.display()));
        }
    }
    let store = converter.lfs_store().expect("checked above");
    crate::lfs::check(store, wanted)?;
    Ok(extra)
}

/// The ops that bring the target to `to`'s tree (directory `path` of its commit, gitlinks
/// filled with `recurse`) from whatever it holds: compare once, repair what differs (foreign
/// entries too with `delete_extra`), and what that replaces; the plan's files are converted
/// by `converter`, its blobs are in the repositories returned. Writes nothing, not even the
/// index.
#[allow(clippy::too_many_arguments)] // private: the inputs of a comparison and its repair
async fn repair_plan_to(
    repo: &Repo,
    backend: &dyn Backend,
    to: Resolved,
    (path, recurse, select): (&Option<String>, bool, &Option<Select>),
    delete_extra: bool,
    limits: plan::Limits,
    converter: &Converter,
) -> Result<(Plan, Replaced, Vec<Repo>), Error> {
    let against = verify::Against {
        commit: to.commit,
        tree: to.tree,
        path: path.clone(),
        conversions: Some(converter.settings().clone()),
        recurse_submodules: recurse,
        select: select.clone(),
    };
    let report = verify::verify_against(repo, backend, verify::Level::Stat, &against, false, limits).await?;
    let mut replaced = Replaced::default();
    for d in &report.drift {
        match d {
            verify::Drift::Missing { .. } => {}
            verify::Drift::Extra { path, .. } if delete_extra => replaced.note(true, path.clone()),
            verify::Drift::Extra { .. } => {}
            verify::Drift::TypeChanged { path, .. } => replaced.note(true, path.clone()),
            d => replaced.note(false, d.path().to_vec()),
        }
    }
    // Its writes carry the conversions the comparison expected (each submodule's files by
    // its own `.gitattributes`).
    let plan = verify::repair_plan(repo, &report, delete_extra)?;
    Ok((plan, replaced, report.repos().to_vec()))
}

/// What the takeover `plan` removes and writes over of the `existing` entries.
fn replaced_by(plan: &Plan, existing: &[ExistingEntry]) -> Replaced {
    let present: std::collections::HashSet<&RelPath> =
        existing.iter().filter(|e| e.kind == ExistingKind::NonDir).map(|e| &e.path).collect();
    let mut replaced = Replaced::default();
    let mut removed_dirs: Vec<&RelPath> = Vec::new();
    for op in plan.ops() {
        match op {
            crate::Op::Rmdir { path } => removed_dirs.push(path),
            crate::Op::Write { path, .. } | crate::Op::Symlink { path, .. } if present.contains(path) => {
                replaced.note(false, path.as_bytes().to_vec())
            }
            _ => {}
        }
    }
    let below = |p: &RelPath, d: &RelPath| {
        p.as_bytes().starts_with(d.as_bytes()) && p.as_bytes().get(d.as_bytes().len()) == Some(&b'/')
    };
    let mut removed: Vec<&RelPath> = plan
        .ops()
        .filter_map(|op| match op {
            crate::Op::Unlink { path } | crate::Op::Rmdir { path } => Some(path),
            _ => None,
        })
        .filter(|p| !removed_dirs.iter().any(|d| below(p, d)))
        .collect();
    removed.sort();
    for p in removed {
        replaced.note(true, p.as_bytes().to_vec());
    }
    replaced
}

/// The tree a diff starts from must still be in the repository: a commit that was amended
/// and garbage-collected is not corruption, and gets its own message.
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
fn check_base(repo: &Repo, tree: Option<ObjectId>, state: Option<&SyncState>) -> Result<(), Error> {
    let Some(tree) = tree else { return Ok(()) };
    if repo.with_objects(|odb| odb.try_header(&tree).ok().flatten().is_some()) {
        return Ok(());
    }
    let what = match state.and_then(|s| s.synced).filter(|s| s.tree == tree) {
        Some(s) => format!("commit {} (tree {tree})", s.commit),
        None => format!("tree {tree}"),
    };
    Err(Error::BaseGone { what })
}

/// List everything in the target (parents before children), for a takeover; refuse
/// ([`Error::Precious`]) a target holding what a takeover must never remove, whatever backend
/// serves it and however the target was spelled ([`precious`]).
async fn scan(backend: &dyn Backend) -> Result<Vec<ExistingEntry>, Error> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([RelPath::root()]);
    while let Some(dir) = queue.pop_front() {
        let entries = backend.read_dir(&dir).await?;
        if let Some((found, what)) = precious(&dir, &entries) {
            return Err(Error::Precious { target: backend.to_string(), found, what });
        }
        for e in entries {
            let path = dir.join(e.name.as_slice().into(), crate::path::NameKind::Other);
            // Names no tree could have are still foreign entries to remove; we cannot
            // represent them as a RelPath, so refuse clearly instead.
            let path = path.map_err(|e| {
                Error::Backend(backend::Error::Unrepresentable {
                    path: e.path.to_string(),
                    reason: e.reason.to_string(),
                })
            })?;
            if e.is_dir {
                queue.push_back(path.clone());
                out.push(ExistingEntry { path, kind: ExistingKind::Dir });
            } else {
                out.push(ExistingEntry { path, kind: ExistingKind::NonDir });
            }
        }
    }
    Ok(out)
}

/// What in the listing of `dir` a takeover must never remove, and what it is: a `.git` (a
/// clone, or a repository's git directory), the layout of a git directory (`HEAD`, `objects/`,
/// `refs/`: a bare repository), another target's state folder (`.treesync` below the root) or
/// generations home (`.NAME.treesync/`), and at the root a home directory's `.ssh/`.
fn precious(dir: &RelPath, entries: &[backend::DirEntry]) -> Option<(String, &'static str)> {
    let has = |name: &[u8], is_dir: bool| entries.iter().any(|e| e.name == name && e.is_dir == is_dir);
    let at = |name: &[u8]| {
        let mut p = dir.as_bytes().to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        String::from_utf8_lossy(&p).into_owned()
    };
    for e in entries {
        let n = e.name.as_slice();
        if n.eq_ignore_ascii_case(b".git") {
            return Some((at(n), "a git repository"));
        }
        if e.is_dir && n == crate::path::STATE_DIR.as_bytes() && !dir.is_root() {
            return Some((at(n), "another target that treesync manages"));
        }
        if e.is_dir && n.len() > ".treesync".len() + 1 && n.starts_with(b".") && n.ends_with(b".treesync") {
            return Some((at(n), "the generations of another target"));
        }
        if e.is_dir && dir.is_root() && n == b".ssh" {
            return Some((at(n), "a home directory"));
        }
    }
    if has(b"HEAD", false) && has(b"objects", true) && has(b"refs", true) {
        let found = match dir.is_root() {
            true => "HEAD, objects/, refs/".to_string(),
            false => format!("HEAD, objects/, refs/ in {}", String::from_utf8_lossy(dir.as_bytes())),
        };
        return Some((found, "a git repository"));
    }
    None
}

/// Where a directory target is, for [`check_place()`]: every path absolute, with its symlinks
/// resolved as far as it exists (a target about to be created keeps its missing tail).
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The target directory.
    pub target: &'a Path,
    /// The repository's git directory ([`Repo::git_dir()`]).
    pub git_dir: &'a Path,
    /// The repository's working tree, if it has one ([`Repo::work_dir()`]).
    pub work_dir: Option<&'a Path>,
    /// The user's home directory, if known.
    pub home: Option<&'a Path>,
}

/// Refuse directory targets where a sync would wreck something: inside the repository's git
/// directory (always: the tree's files would mix with git's own), and with `force` (which
/// removes everything the tree does not have) the filesystem root, the home directory, the
/// repository's working tree or a directory holding the repository.
#[allow(clippy::result_large_err)] // the crate's one error type; called once per run
pub fn check_place(place: &Place<'_>, force: bool) -> Result<(), Error> {
    let Place { target, git_dir, work_dir, home } = *place;
    if target.starts_with(git_dir) {
        return Err(Error::InsideGitDir { target: target.to_path_buf(), git_dir: git_dir.to_path_buf() });
    }
    // A state folder (`.treesync`) or a generations home (`.NAME.treesync`) on the way.
    let mut dir = PathBuf::new();
    for c in target.components() {
        dir.push(c);
        let name = c.as_os_str().as_encoded_bytes();
        if name.starts_with(b".") && name.ends_with(crate::path::STATE_DIR.as_bytes()) {
            return Err(Error::InsideTreesync { target: target.to_path_buf(), dir });
        }
    }
    if !force {
        return Ok(());
    }
    let what = if target.parent().is_none() {
        Some("the filesystem root")
    } else if home == Some(target) {
        Some("your home directory")
    } else if home.is_some_and(|h| h.starts_with(target)) {
        Some("a directory holding your home directory")
    } else if work_dir.is_some_and(|w| target == w || w.starts_with(target)) {
        Some("the repository's working tree (or a directory holding it)")
    } else if git_dir.starts_with(target) {
        Some("a directory holding the repository")
    } else {
        None
    };
    match what {
        Some(what) => Err(Error::WouldWreck { target: target.to_path_buf(), what }),
        None => Ok(()),
    }
}

pub use state::hostname;

/// This process as the holder of a lock and a journal entry.
pub fn holder() -> state::Holder {
    state::Holder::this_process()
}

/// Sync `backend` to `rev` of `repo`. See the [module docs](self).
///
/// A target that treesync does not manage yet (missing, empty or foreign) is read and the sync
/// planned before anything is written: a refused sync (a foreign target, a hostile tree)
/// leaves it as it was, not even creating it or its lock; under the lock its state is read
/// again and the sync planned anew if another writer got there first. A managed target is
/// locked first and planned under the lock.
pub async fn sync(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    options: &Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<Outcome, Error> {
    let start = Instant::now();
    if options.git_worktree.is_some() && source::subtree_path(rev).is_some() {
        return Err(Error::GitWorktreeSubtree { rev: rev.into() });
    }
    // Resolve first: a typo in the revision must not create the target or its lock.
    let to = repo.resolve(rev)?;
    let path = source::subtree_path(rev);
    let goal = || Goal {
        path: Some(path.clone()),
        recurse: Some(options.recurse_submodules),
        select: Some(options.select.clone()),
        export: Some(options.export),
        lfs: Some(options.lfs),
    };
    let plans = options.plans.as_deref();
    // A dry run reports the plan as `plan` does: whole. Mirrors sharing plans
    // ([`Options::plans`]) share the whole plan of an initial checkout too: planned once.
    let stream = (!options.dry_run && plans.is_none()).then(|| options.stream_chunk.unwrap_or(DEFAULT_STREAM_CHUNK));
    let target = backend.prepare_target(false).await?;
    let early = if target != TargetState::Managed || options.dry_run {
        let prepared =
            prepare_at(repo, to, goal(), backend, options.force, target, options.limits, plans, stream).await?;
        if options.dry_run {
            let mut outcome = outcome_of(&prepared, options);
            outcome.elapsed = start.elapsed();
            return Ok(outcome);
        }
        backend.prepare_target(true).await?;
        Some(prepared)
    } else {
        None
    };
    let me = holder();
    under_lock(backend, &me, options.lock_wait, async || {
        // Again under the lock: a sync that waited for another (`--wait`) writes what the
        // revision names now, never the older commit it named before the wait.
        let to = repo.resolve(rev)?;
        if let Some(clone) = &options.git_worktree {
            // Before any file changes: a clone whose index or HEAD cannot be written safely
            // is refused while it still matches its HEAD.
            gitworktree::check(clone)?;
        }
        let prepared = match early {
            // Still what it was planned against (the lock also tells case-insensitive
            // targets apart, which a first sync plans for)?
            Some(p)
                if p.to == to
                    && backend.load_state().await? == p.state_bytes
                    && p.case_insensitive != backend.capabilities().case_sensitive =>
            {
                p
            }
            // Another writer got there first: read the target again.
            Some(_) => {
                let target = backend.prepare_target(false).await?;
                prepare_at(repo, to, goal(), backend, options.force, target, options.limits, plans, stream).await?
            }
            None => prepare_at(repo, to, goal(), backend, options.force, target, options.limits, plans, stream).await?,
        };
        let outcome = run_locked(repo, backend, prepared, options, &me, progress, interrupt, start).await?;
        if let Some(clone) = &options.git_worktree {
            // Still under the lock: no other sync moves the files while the index is rewritten.
            gitworktree::update(clone, repo, outcome.commit, outcome.tree)?;
        }
        Ok(outcome)
    })
    .await
}

fn outcome_of(prepared: &Prepared, options: &Options) -> Outcome {
    let mut planned = prepared.main.counts;
    if let Some((_, plan)) = &prepared.resume {
        planned.merge(&plan.counts);
    }
    Outcome {
        from: prepared.state.as_ref().and_then(|s| s.synced),
        commit: prepared.to.commit,
        tree: prepared.to.tree,
        path: prepared.path.clone(),
        resumed: prepared.resume.as_ref().map(|r| r.0.clone()),
        takeover: prepared.takeover,
        replaced: prepared.replaced.clone(),
        submodules: prepared.submodules.clone(),
        select: prepared.select.clone(),
        conversions: prepared.conversions().clone(),
        dry_run: options.dry_run,
        unconverted: Vec::new(),
        planned,
        applied: OpCounts::default(),
        healed: 0,
        state_writes: 0,
        elapsed: Duration::ZERO,
    }
}

/// The part of a sync that runs under the target's lock: finish an interrupted sync, journal,
/// apply, record.
#[allow(clippy::too_many_arguments)] // one call site each in sync() and repair()
async fn run_locked(
    repo: &Repo,
    backend: &dyn Backend,
    prepared: Prepared,
    options: &Options,
    me: &state::Holder,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
    start: Instant,
) -> Result<Outcome, Error> {
    let mut outcome = outcome_of(&prepared, options);
    let Prepared {
        state,
        resume,
        main,
        to,
        path,
        takeover,
        repair,
        converter,
        resume_converter,
        recurse_submodules: recurse,
        repos,
        select,
        export_subst,
        main_stream,
        resume_stream,
        lfs_bytes,
        ..
    } = prepared;
    let main_empty = main.is_empty() && main_stream.is_none();
    if let Some((p, _)) = &resume {
        check_lease(p, backend, options)?;
    }
    // Submodules' blobs are in their own repositories.
    let raw: Arc<dyn BlobSource> = submodule::Blobs::source(repos);
    // One budget of bytes for everything this sync writes (--max-bytes), conversions included.
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let converting = |c: &Arc<Converter>| -> Arc<dyn BlobSource> {
        Arc::new(source::Converting::new(raw.clone(), c.clone()).within(options.limits, written.clone()))
    };
    let blobs = converting(&converter);
    let resume_blobs = match &resume_converter {
        Some(c) => converting(c),
        None => converting(&converter),
    };
    let settings = Some(converter.settings().clone());
    let mut current = state.unwrap_or(SyncState {
        version: state::VERSION,
        synced: None,
        in_progress: None,
        path: None,
        conversions: None,
        select: None,
        export_subst: Vec::new(),
        recurse_submodules: false,
        backend: options.backend_name.clone(),
    });
    current.version = state::VERSION;
    current.backend = options.backend_name.clone();

    tracing::debug!(target: "treesync::sync", %backend, "target prepared and locked");
    // What this run writes, for the next verify (files written before, e.g. by a repair
    // that recorded nothing, are not this run's to record).
    drop(backend.take_written());
    let mut written = index_delta::Delta::default();
    let mut dirs_recreated = 0;
    if let Some((p, plan)) = &resume {
        tracing::info!(
            target: "treesync::sync",
            to = %p.to_commit,
            ops = plan.len(),
            "finishing an interrupted sync first"
        );
        // The journal says "in progress" for this transition; it is ours now.
        if p.holder.is_some() && !backend.capabilities().exclusive_lock {
            current.in_progress = Some(p.clone().held_by(me));
            backend.store_state(&current.to_bytes()).await?;
            outcome.state_writes += 1;
        }
        dirs_recreated += apply_journaled(
            plan,
            resume_stream.as_ref().map(|s| (repo, s)),
            backend,
            &resume_blobs,
            options,
            progress,
            interrupt,
            &current,
            &mut outcome,
            &mut written,
        )
        .await?;
        current.synced = Some(Synced { commit: p.to_commit, tree: p.to_tree, at_unix: state::now_unix() });
        current.path = p.to_path.clone();
        current.conversions = p.to_conversions.clone();
        current.select = p.to_select.clone();
        current.recurse_submodules = p.recurse_submodules;
        current.in_progress = None;
        if main_empty
            && p.to_commit == to.commit
            && p.to_path == path
            && current.conversions == settings
            && current.select == select
            && p.recurse_submodules == recurse
            && dirs_recreated == 0
        {
            backend.store_state(&current.to_bytes()).await?;
            outcome.state_writes += 1;
        }
    }

    let already = current.synced.is_some_and(|s| s.commit == to.commit)
        && current.path == path
        && current.conversions == settings
        && current.select == select
        && current.recurse_submodules == recurse
        && current.in_progress.is_none();
    tracing::info!(
        target: "treesync::sync",
        from = ?current.synced.map(|s| s.commit.to_string()),
        to = %to.commit,
        plan = %main.counts,
        takeover,
        repair,
        "planned"
    );
    if !main_empty {
        let from_tree = if takeover { None } else { current.synced.map(|s| s.tree) };
        current.in_progress = Some(
            journal_entry(to, &path, &settings, from_tree, takeover, repair, me)
                .recursing(recurse)
                .selecting(select.clone()),
        );
        backend.store_state(&current.to_bytes()).await?;
        outcome.state_writes += 1;
        tracing::debug!(target: "treesync::sync", "journal: in progress");
        dirs_recreated += apply_journaled(
            &main,
            main_stream.as_ref().map(|s| (repo, s)),
            backend,
            &blobs,
            options,
            progress,
            interrupt,
            &current,
            &mut outcome,
            &mut written,
        )
        .await?;
    }
    if dirs_recreated > 0 {
        // Healing had to make directories whose other content is gone (someone deleted a
        // directory, or put a symlink or a file in its place): the diff cannot know what else
        // is missing, so compare the target with the destination once and repair what
        // differs. Journaled as a repair: an interruption is finished the same way.
        tracing::warn!(
            target: "treesync::sync",
            dirs_recreated,
            "the target had drifted (directories missing or replaced); comparing it with the destination once"
        );
        current.in_progress = Some(
            journal_entry(to, &path, &settings, None, takeover, true, me).recursing(recurse).selecting(select.clone()),
        );
        backend.store_state(&current.to_bytes()).await?;
        outcome.state_writes += 1;
        let goal = (&path, recurse, &select);
        let (plan, _, repos) = repair_plan_to(repo, backend, to, goal, takeover, options.limits, &converter).await?;
        let blobs: Arc<dyn BlobSource> =
            Arc::new(source::Converting::new(submodule::Blobs::source(repos), converter.clone()));
        apply_journaled(
            &plan,
            None,
            backend,
            &blobs,
            options,
            progress,
            interrupt,
            &current,
            &mut outcome,
            &mut written,
        )
        .await?;
    }
    if !main_empty || !already || dirs_recreated > 0 {
        current.synced = Some(Synced { commit: to.commit, tree: to.tree, at_unix: state::now_unix() });
        current.path = path;
        current.conversions = settings;
        current.select = select;
        current.export_subst = export_subst;
        current.recurse_submodules = recurse;
        current.in_progress = None;
        backend.store_state(&current.to_bytes()).await?;
        outcome.state_writes += 1;
    }
    record_written(backend, written).await;
    outcome.unconverted = converter.unconverted();
    if let Some(c) = &resume_converter {
        outcome.unconverted.extend(c.unconverted());
    }
    // Every planned write was applied, pointers as their LFS objects.
    outcome.applied.bytes += lfs_bytes;
    outcome.elapsed = start.elapsed();
    tracing::info!(
        target: "treesync::sync",
        applied = %outcome.applied,
        healed = outcome.healed,
        state_writes = outcome.state_writes,
        elapsed_ms = outcome.elapsed.as_millis() as u64,
        "synced"
    );
    Ok(outcome)
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

/// Repair `backend` to the tree its state records — under the target's lock, with the
/// repair journaled like a sync (an interrupted repair is finished by the next sync or
/// repair), and against the state as it is once the lock is held, so a repair never writes
/// back a tree that a sync replaced meanwhile. A target whose journal records an unfinished
/// sync gets that sync finished first (its replay heals drift on the paths it touches).
pub async fn repair(
    repo: &Repo,
    backend: &dyn Backend,
    options: &RepairOptions,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<RepairOutcome, Error> {
    let start = Instant::now();
    // Refuse a target without a state before taking (and so creating) its lock.
    verify::recorded_commit(backend).await?;
    if options.dry_run {
        let report = verify::verify_slice(repo, backend, options.level, options.sync.limits, options.slice).await?;
        let plan = verify::repair_plan(repo, &report, options.delete_extra)?;
        return Ok(RepairOutcome { finished: None, planned: plan.counts, report, applied: None, after: None });
    }
    let me = holder();
    under_lock(backend, &me, options.sync.lock_wait, async || {
        // Under the lock: the state as it is now (a sync may have finished meanwhile).
        let (against, interrupted) = verify::recorded(backend).await?;
        let to = Resolved { commit: against.commit, tree: against.tree };
        let finished = if interrupted {
            let target = backend.prepare_target(false).await?;
            let goal = Goal { path: None, recurse: None, select: None, export: None, lfs: None };
            let plans = options.sync.plans.as_deref();
            let prepared = prepare_at(repo, to, goal, backend, false, target, options.sync.limits, plans, None).await?;
            Some(run_locked(repo, backend, prepared, &options.sync, &me, progress, interrupt, start).await?)
        } else {
            None
        };
        // What the target should hold once an interrupted sync is finished: what the state
        // records now, files converted as they were written.
        let against = if interrupted { verify::recorded(backend).await?.0 } else { against };
        let goal = Synced { commit: against.commit, tree: against.tree, at_unix: state::now_unix() };
        let settings = against.conversions.clone().unwrap_or_default();
        let mut converter = Converter::new(repo, settings.clone())?;
        if settings.export {
            let commit = crate::export::CommitInfo::from_commit(repo, against.commit)?;
            let select = against.select.clone().unwrap_or_default();
            converter = converter.with_commit(commit.archive(against.tree, &settings, &select));
        }
        let converter = Arc::new(converter);
        let (level, limits, slice) = (options.level, options.sync.limits, options.slice);
        let report = verify::verify_against_in(repo, backend, level, &against, true, limits, slice).await?;
        let plan = verify::repair_plan(repo, &report, options.delete_extra)?;
        let mut outcome = RepairOutcome { finished, planned: plan.counts, report, applied: None, after: None };
        if !plan.is_empty() {
            let bytes = backend.load_state().await?;
            let mut current = SyncState::parse(bytes.as_deref().unwrap_or_default())?;
            let synced = current.synced;
            let path = current.path.clone();
            // Repaired as the state records the files were written: same conversions, same
            // submodules (their blobs from their repositories).
            let settings = against.conversions.clone();
            current.in_progress = Some(
                journal_entry(to, &path, &settings, None, options.delete_extra, true, &me)
                    .recursing(against.recurse_submodules)
                    .selecting(current.select.clone()),
            );
            backend.store_state(&current.to_bytes()).await?;
            let raw = submodule::Blobs::source(outcome.report.repos().to_vec());
            let blobs: Arc<dyn BlobSource> = Arc::new(source::Converting::new(raw, converter.clone()));
            let mut plan = plan;
            let mut applied = OpCounts::default();
            drop(backend.take_written());
            let mut written = index_delta::Delta::default();
            for pass in 1.. {
                backend.record_written(written.records(&plan));
                let done = match apply::apply(&plan, backend, &blobs, options.sync.apply, progress, interrupt).await {
                    Ok(d) => d,
                    Err(e) => return Err(release(backend, current, add_counts(e.into(), &applied)).await),
                };
                written.note_applied(&plan, backend.take_written());
                applied.merge(&done.counts);
                // Healing had to make directories whose other content is gone (someone
                // changed the target while it was compared): compare those once more.
                if done.dirs_recreated == 0 || pass == 3 {
                    break;
                }
                let again = verify::verify_against_in(
                    repo,
                    backend,
                    verify::Level::Stat,
                    &against,
                    false,
                    options.sync.limits,
                    options.slice,
                )
                .await?;
                plan = verify::repair_plan(repo, &again, options.delete_extra)?;
            }
            outcome.applied = Some(applied);
            current.synced = synced.filter(|s| s.commit == goal.commit).or(Some(goal));
            current.conversions = settings;
            current.recurse_submodules = against.recurse_submodules;
            current.in_progress = None;
            backend.store_state(&current.to_bytes()).await?;
            record_written(backend, written).await;
        }
        if options.check_after && outcome.applied.is_some() {
            let (level, limits, slice) = (options.level, options.sync.limits, options.slice);
            outcome.after = Some(verify::verify_against_in(repo, backend, level, &against, true, limits, slice).await?);
        }
        Ok(outcome)
    })
    .await
}

/// The journal entry of a transition this process runs now, to `to`.
fn journal_entry(
    to: Resolved,
    path: &Option<String>,
    conversions: &Option<crate::convert::Settings>,
    from_tree: Option<ObjectId>,
    takeover: bool,
    repair: bool,
    me: &state::Holder,
) -> InProgress {
    InProgress {
        from_tree,
        to_commit: to.commit,
        to_tree: to.tree,
        to_path: path.clone(),
        to_conversions: conversions.clone(),
        to_select: None,
        takeover,
        repair,
        recurse_submodules: false,
        started_unix: state::now_unix(),
        holder: Some(me.clone()),
    }
}

/// Apply `plan` under the journal entry of `current`, adding what was done to `outcome`; how
/// many directories healing had to make. On failure the entry is released (see [`release`]).
/// With `stream`, `plan` holds only the counts: the ops are planned from `stream` in chunks
/// while they are applied ([`apply_streamed`]).
#[allow(clippy::too_many_arguments)] // the executor's inputs plus the journal and the tally
async fn apply_journaled(
    plan: &Plan,
    stream: Option<(&Repo, &Streamed)>,
    backend: &dyn Backend,
    blobs: &Arc<dyn BlobSource>,
    options: &Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
    current: &SyncState,
    outcome: &mut Outcome,
    written: &mut index_delta::Delta,
) -> Result<u64, Error> {
    let r = match stream {
        Some((repo, s)) => {
            apply_streamed(repo, s, plan.counts, backend, blobs, options, progress, interrupt, written).await
        }
        None => {
            backend.record_written(written.records(plan));
            apply::apply(plan, backend, blobs, options.apply, progress, interrupt)
                .await
                .inspect(|_| written.note_applied(plan, backend.take_written()))
                .map_err(Error::from)
        }
    };
    match r {
        Ok(done) => {
            outcome.applied.merge(&done.counts);
            outcome.healed += done.healed;
            Ok(done.dirs_recreated)
        }
        Err(e) => Err(release(backend, current.clone(), add_counts(e, &outcome.applied)).await),
    }
}

/// Plan the initial checkout `s` (of `total` ops) on a thread of its own, in chunks, and
/// apply each chunk as soon as it is planned: the next chunk is planned while one is written,
/// and memory holds two chunks at most (the channel's), not the plan. The journal entry is
/// written already; every op is idempotent, so an interrupted run is finished by the next.
#[allow(clippy::too_many_arguments)] // the executor's inputs plus the plan's source
async fn apply_streamed(
    repo: &Repo,
    s: &Streamed,
    total: OpCounts,
    backend: &dyn Backend,
    blobs: &Arc<dyn BlobSource>,
    options: &Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
    written: &mut index_delta::Delta,
) -> Result<apply::Outcome, Error> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Plan>(1);
    let planner = {
        let (repo, s) = (repo.clone(), s.clone());
        std::thread::Builder::new()
            .name("treesync-stream-plan".into())
            // As `plan::with_big_stack`: the walk recurses once per tree level.
            .stack_size(32 << 20)
            .spawn(move || {
                repo.with_objects(|odb| {
                    let resolver = match &s.settings {
                        Some(settings) => Some(crate::convert::Resolver::new(settings, s.attributes.clone())?),
                        None => None,
                    };
                    plan::stream_checkout(odb, s.tree, s.options, resolver, s.chunk, &mut |ops| {
                        tx.blocking_send(Plan::from_ops(None, s.tree, ops)).is_ok()
                    })
                })
            })
            .expect("a thread can be started")
    };
    // Each chunk's files are recorded once it is applied (`index_delta::Chunked`: an
    // append per chunk, holding about a chunk's entries), however large the checkout; the
    // recorder runs beside the writes. The pages of the mapped packs a chunk's blobs were read
    // from are given back by the planner's thread, which holds the object database
    // (`release_mapped_packs`).
    let record = backend.capabilities().aux_store;
    backend.record_written(record);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<index_delta::Noted>();
    let mut applied = move |chunk: &Plan| {
        let stats = backend.take_written();
        if record {
            // A chunk is applied in far longer than its append takes: the channel holds one.
            let _ = done_tx.send(index_delta::Noted::of(chunk, stats));
        }
    };
    let applying = async move {
        let r = apply::apply_chunks(rx, total, backend, blobs, options.apply, progress, interrupt, &mut applied).await;
        drop(applied); // the recorder stops once it has recorded every chunk applied
        r
    };
    let recording = async {
        let mut chunked = index_delta::Chunked::default();
        while let Some(noted) = done_rx.recv().await {
            if let Err(e) = chunked.chunk(backend, noted).await {
                tracing::warn!(
                    target: "treesync::sync",
                    error = %e,
                    "could not record the stat data of the files written; the next verify reads them"
                );
            }
        }
        chunked.rest()
    };
    let (r, rest) = tokio::join!(applying, recording);
    // The last chunk, and the entries the clock had not passed yet, are recorded after the
    // run's last state write (`record_written`), as a plan applied in one piece.
    for (path, e) in rest {
        written.paths.insert(path, e);
    }
    // The receiver is gone: a planner still walking stops at its next chunk.
    let planned = planner.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let done = r?;
    match planned {
        Ok(()) => Ok(done),
        // An object that became unreadable since it was measured. The chunks applied stay:
        // the journal entry makes the next sync finish them.
        Err(e) => Err(Error::Plan(e)),
    }
}

/// Record the stat data of the files a run wrote for the next verify ([`index_delta`]). The
/// run itself is done: a failure here only costs the next verify reading those files.
async fn record_written(backend: &dyn Backend, written: index_delta::Delta) {
    match index_delta::record(backend, written).await {
        Ok(0) => {}
        Ok(racy) => tracing::debug!(
            target: "treesync::sync",
            racy,
            "files written within the filesystem's last clock tick are left to the next verify to hash"
        ),
        // Backends that keep no delta (memory): nothing to record.
        Err(backend::Error::Unsupported { .. }) => {}
        Err(e) => tracing::warn!(
            target: "treesync::sync",
            error = %e,
            "could not record the stat data of the files written; the next verify reads them"
        ),
    }
}

/// Run `body` holding the target's lock (waiting up to `wait` while another writer holds
/// it), and release the lock on every path out of it.
async fn under_lock<T>(
    backend: &dyn Backend,
    me: &state::Holder,
    wait: Option<Duration>,
    body: impl AsyncFnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let deadline = wait.map(|w| Instant::now() + w);
    // Backends without an exclusive lock (object stores) are guarded by conditional state
    // writes and the journal's lease instead (see `check_lease`).
    if !backend.capabilities().exclusive_lock {
        return body().await;
    }
    let lock = loop {
        match backend.lock(me).await {
            Err(backend::Error::Locked { .. }) if deadline.is_some_and(|d| Instant::now() < d) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            r => break r?,
        }
    };
    let result = body().await;
    // A failure to release matters only when all else went well.
    let unlocked = backend.unlock(lock).await;
    if result.is_ok() {
        unlocked?;
    }
    result
}

/// Refuse to take over an unfinished sync whose holder may still be running (backends without
/// an exclusive lock only).
#[allow(clippy::result_large_err)] // the crate's one error type; this is not a hot path
fn check_lease(p: &InProgress, backend: &dyn Backend, options: &Options) -> Result<(), Error> {
    let Some(h) = &p.holder else { return Ok(()) };
    if backend.capabilities().exclusive_lock || options.break_lock {
        return Ok(());
    }
    // A holder on this machine whose process is gone died: no need to wait for its lease.
    if h.is_gone_here() {
        return Ok(());
    }
    let lease = options.lease.unwrap_or(DEFAULT_LEASE);
    let age = state::now_unix().saturating_sub(p.started_unix);
    if age < lease.as_secs() {
        return Err(Error::Backend(backend::Error::Locked {
            holder: format!(
                "{h}; its sync started {age} s ago. If it died, run again after its lease of {} s, or pass --break-lock",
                lease.as_secs()
            ),
        }));
    }
    Ok(())
}

/// After a failed apply, mark the journal entry as no longer held (best effort), so the next
/// run can finish the job at once, then return the error.
async fn release(backend: &dyn Backend, mut current: SyncState, e: Error) -> Error {
    if let Some(p) = &mut current.in_progress
        && p.holder.is_some()
        && !backend.capabilities().exclusive_lock
    {
        p.holder = None;
        let _ = backend.store_state(&current.to_bytes()).await;
    }
    e
}

fn add_counts(mut e: Error, before: &OpCounts) -> Error {
    match &mut e {
        Error::Apply { done, .. } | Error::Interrupted { done } => done.merge(before),
        _ => {}
    }
    e
}

/// What `treesync status` reports.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Status {
    /// The state file, if any.
    pub state: Option<SyncState>,
    /// What is at the target root: `empty` (nothing, or the directory does not exist yet),
    /// `managed` (treesync's state folder is there), `unmanaged` (files treesync did not write:
    /// `sync` needs `--force`).
    #[schemars(with = "TargetKind")]
    pub target: &'static str,
    /// When a sync holds the target's lock right now: the holder as written in the lock file,
    /// e.g. `pid 4242 on build-01, started at unix time 1796006406`; null otherwise. Always null
    /// on object stores, which have no lock: there a running sync shows as `state.in_progress`
    /// with a `holder`.
    pub running: Option<String>,
}

/// The values of [`Status::target`] (its schema).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // only its schema is used
enum TargetKind {
    Empty,
    Managed,
    Unmanaged,
}

/// Read a target's status without changing it (the lock is only probed).
pub async fn status(backend: &dyn Backend) -> Result<Status, Error> {
    let target = backend.prepare_target(false).await?;
    let state = match backend.load_state().await? {
        Some(bytes) => Some(SyncState::parse(&bytes)?),
        None => None,
    };
    let running = if target == TargetState::Managed && backend.capabilities().exclusive_lock {
        match backend.lock(&holder()).await {
            Ok(guard) => {
                backend.unlock(guard).await?;
                None
            }
            Err(backend::Error::Locked { holder }) => Some(holder),
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let target = match target {
        TargetState::Empty => "empty",
        TargetState::Managed => "managed",
        TargetState::Unmanaged => "unmanaged",
    };
    Ok(Status { state, target, running })
}
