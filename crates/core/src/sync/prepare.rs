//! [`prepare()`]: read the target's state and plan what a sync does, before anything is written.

use std::sync::Arc;

use super::checks::{
    check_base, check_bytes, check_filters, check_lfs, repair_plan_to, replaced_by, with_submodule_stores,
};
use super::place::scan;
use super::{Error, Replaced};
use crate::backend::{Backend, TargetState};
use crate::convert::Converter;
use crate::op::Plan;
use crate::path::RelPath;
use crate::plan::{self, ExistingEntry};
use crate::select::Select;
use crate::source::{self, Repo, Resolved};
use crate::state::{InProgress, SyncState};
use crate::submodule::{self, Submodules};
use gix_hash::ObjectId;

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
    /// [`Options::plans`](super::Options::plans)).
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
    pub(super) state_bytes: Option<Vec<u8>>,
    /// Planned for a target that does not tell case apart.
    pub(super) case_insensitive: bool,
    /// What `main` converts files with (the repository's settings now).
    pub(super) converter: Arc<Converter>,
    /// What the `resume` plan converts files with (the journal's settings).
    pub(super) resume_converter: Option<Arc<Converter>>,
    /// After `main`, the target's gitlinks hold their submodules' trees.
    pub recurse_submodules: bool,
    /// The submodules the plans read (with `recurse_submodules`, or to empty gitlinks).
    pub submodules: Vec<submodule::Used>,
    /// The repositories the plans' blobs are in: the repository, then submodules.
    pub(super) repos: Vec<Repo>,
    /// The paths `main` selects (`None`: all).
    pub select: Option<Select>,
    /// The files with `export-subst` placeholders expanded after `main`.
    pub(super) export_subst: Vec<String>,
    /// `main` is an initial checkout applied while it is planned: it holds only its counts.
    pub(super) main_stream: Option<Streamed>,
    /// The same for `resume`.
    pub(super) resume_stream: Option<Streamed>,
    /// What the LFS objects of the plans' pointer files add to the pointers' own bytes (the
    /// plans count blobs; a pointer is written as its object, [`check_lfs`]).
    pub(super) lfs_bytes: u64,
}

/// An initial checkout applied as it is planned, in chunks ([`plan::stream_checkout`]), after
/// a walk that refused whatever the plan would refuse and counted its ops
/// ([`plan::measure_checkout`]), so that memory holds a chunk of ops, not all of them.
#[derive(Debug, Clone)]
pub(super) struct Streamed {
    /// The tree written.
    pub(super) tree: ObjectId,
    pub(super) options: plan::Options,
    /// What files are converted with (`None`: as blobs are), and the tree's `.gitattributes`.
    pub(super) settings: Option<crate::convert::Settings>,
    pub(super) attributes: crate::convert::AttributeFiles,
    /// Ops per chunk.
    pub(super) chunk: usize,
}

impl Prepared {
    /// The conversion settings the target's files are written with after this sync.
    pub fn conversions(&self) -> &crate::convert::Settings {
        self.converter.settings()
    }
}

/// How to [`prepare()`]: what a sync with these settings would plan.
#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// Plan a takeover ([`Options::force`](super::Options::force)): of a target treesync did not write, or of a
    /// managed one by comparing it with the requested tree once.
    pub force: bool,
    /// Create a missing target root (and its `.treesync` folder) before reading it; without
    /// it, nothing is written at all.
    pub create: bool,
    /// How large a plan may get ([`plan::Limits`]).
    pub limits: plan::Limits,
    /// Plan gitlinks filled with their submodules' trees ([`Options::recurse_submodules`](super::Options::recurse_submodules)).
    pub recurse_submodules: bool,
    /// Plan only the paths these patterns select ([`Options::select`](super::Options::select)).
    pub select: Select,
    /// `git archive` semantics ([`Options::export`](super::Options::export)).
    pub export: bool,
    /// What LFS pointer files are written as ([`Options::lfs`](super::Options::lfs)).
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
        path: source::subtree_path(rev),
        recurse: options.recurse_submodules,
        select: options.select.clone(),
        export: options.export,
        lfs: options.lfs,
    };
    prepare_at(repo, to, Some(goal), backend, options.force, target, options.limits, None, None).await
}

/// Where a sync goes beyond the commit. A repair names none: it goes where the target's state
/// says ([`Goal::recorded`]).
#[derive(Debug, Clone, Default)]
pub(super) struct Goal {
    /// The directory the tree is of its commit.
    pub(super) path: Option<String>,
    /// Gitlinks filled with their submodules' trees.
    pub(super) recurse: bool,
    /// The paths selected.
    pub(super) select: Select,
    /// `git archive` semantics.
    pub(super) export: bool,
    /// What LFS pointer files are written as.
    pub(super) lfs: crate::lfs::LfsMode,
}

impl Goal {
    /// Where the target's `state` says it goes: the destination of its interrupted sync, else
    /// what it holds (a target with no state: nothing filled, selected or converted).
    fn recorded(state: Option<&SyncState>) -> Goal {
        let (path, recurse, select, conversions) = match state {
            Some(SyncState { in_progress: Some(p), .. }) => {
                (&p.to_path, p.recurse_submodules, &p.to_select, &p.to_conversions)
            }
            Some(s) => (&s.path, s.recurse_submodules, &s.select, &s.conversions),
            None => return Goal::default(),
        };
        Goal {
            path: path.clone(),
            recurse,
            select: select.clone().unwrap_or_default(),
            export: conversions.as_ref().is_some_and(|c| c.export),
            lfs: conversions.as_ref().map(|c| c.lfs).unwrap_or_default(),
        }
    }
}

/// How to plan `from → to` when gitlinks are filled on either side: through the submodules.
pub(super) struct Planning<'r> {
    pub(super) repo: &'r Repo,
    pub(super) options: plan::Options,
    pub(super) submodules: Option<Submodules>,
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
pub(super) async fn prepare_at(
    repo: &Repo,
    to: Resolved,
    goal: Option<Goal>,
    backend: &dyn Backend,
    force: bool,
    target: TargetState,
    limits: plan::Limits,
    plans: Option<&plan::Cache>,
    stream: Option<usize>,
) -> Result<Prepared, Error> {
    let (state_bytes, state, target) = read_state(backend, force, target).await?;
    let sides = Sides::new(repo, to, goal, state)?;
    let options = plan::Options { case_insensitive: !backend.capabilities().case_sensitive, limits };
    // `--force` on a managed target: take it over by comparing it with the requested tree
    // once (stat data proves what it can, the rest is hashed) and repairing what differs,
    // foreign entries included. Neither the journal nor the recorded tree is needed, so this
    // also gets a target out of any state: a damaged state file, a synced commit that is gone
    // from the repository, an interrupted sync whose replay keeps failing.
    if force && target == TargetState::Managed {
        return sides.take_over_managed(backend, options, target, state_bytes).await;
    }
    let planning = sides.planning(options);
    let mut takeover = false;
    // What the main plan starts from: a tree (after the interrupted sync, if any).
    let (resumed, base) = match &sides.state {
        Some(SyncState { in_progress: Some(p), .. }) => {
            (Some(sides.resume(p, &planning, backend, limits, stream).await?), Some(p.to_tree))
        }
        Some(SyncState { synced, .. }) => {
            let base = synced.map(|s| s.tree);
            check_base(repo, base, sides.state.as_ref())?;
            (None, base)
        }
        None => match target {
            TargetState::Empty | TargetState::Managed => (None, None),
            TargetState::Unmanaged if force => {
                takeover = true;
                (None, None)
            }
            TargetState::Unmanaged => return Err(Error::Unmanaged { target: backend.to_string() }),
        },
    };
    // Written with these settings: the interrupted sync's, else the synced tree's.
    let base_converter = match &resumed {
        Some(r) => r.converter.clone(),
        None => sides.synced_converter.clone(),
    };
    let main = sides.plan_main(&planning, backend, (base, base_converter.as_deref()), takeover, plans, stream).await?;
    let planned = Planned { resumed, main, takeover };
    sides.finish(&planning, planned, target, state_bytes, options, limits)
}

/// Read the target's state; what is at its root, corrected by what the state says.
async fn read_state(
    backend: &dyn Backend,
    force: bool,
    mut target: TargetState,
) -> Result<(Option<Vec<u8>>, Option<SyncState>, TargetState), Error> {
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
    Ok((state_bytes, state, target))
}

/// What the target holds (per its state) and where the sync goes, settled before planning.
struct Sides<'r> {
    repo: &'r Repo,
    to: Resolved,
    state: Option<SyncState>,
    /// The directory of `to.commit` synced (a subtree sync); `None`: the whole tree.
    path: Option<String>,
    /// The paths selected after this sync.
    select: Select,
    /// `git archive` semantics after this sync.
    export: bool,
    /// What this sync's files are converted with.
    converter: Arc<Converter>,
    /// How the synced tree's files were written (per the state; `None`: as blobs are).
    synced_converter: Option<Arc<Converter>>,
    /// The synced tree's selection, and its commit.
    synced_select: Select,
    synced_commit: Option<ObjectId>,
    /// The files with `export-subst` placeholders expanded by the syncs before.
    substituted: Vec<String>,
    /// What the target holds once an interrupted sync is finished, or now: its selection.
    held_select: Select,
    /// The synced tree's gitlinks are filled.
    recursed: bool,
    /// After this sync, gitlinks are filled.
    recurse: bool,
    /// The interrupted sync fills them (`None`: no interrupted sync).
    resume_recurse: Option<bool>,
}

/// An interrupted sync, and the plan that finishes it.
struct Resumed {
    entry: InProgress,
    plan: Plan,
    /// The plan holds only its counts: an initial checkout finished in chunks.
    stream: Option<Streamed>,
    /// What its files are converted with (the journal's settings).
    converter: Option<Arc<Converter>>,
    /// Repositories a resumed repair reads blobs from beyond those the plans read.
    repair_repos: Vec<Repo>,
}

/// The main plan: the whole plan, or an initial checkout's counts to apply in chunks.
struct Main {
    plan: Arc<Plan>,
    stream: Option<Streamed>,
    /// A takeover's: what of the target's content it removes and writes over.
    replaced: Option<Replaced>,
}

/// What `prepare_at` planned, before its last checks.
struct Planned {
    resumed: Option<Resumed>,
    main: Main,
    takeover: bool,
}

impl<'r> Sides<'r> {
    #[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
    fn new(repo: &'r Repo, to: Resolved, goal: Option<Goal>, state: Option<SyncState>) -> Result<Self, Error> {
        // What the target holds now (a finished interrupted sync's, or the synced), and what the
        // sync goes to: that, for a repair.
        let held = Goal::recorded(state.as_ref());
        let Goal { path, recurse, select, export, lfs } = goal.unwrap_or_else(|| held.clone());
        let mut settings = crate::convert::Settings::of(repo)?;
        settings.export = export;
        settings.lfs = lfs;
        let mut converter = Converter::new(repo, settings)?;
        if export {
            // `%(describe)` expands once in the archive of this tree, as these paths are selected.
            let commit = crate::export::CommitInfo::from_commit(repo, to.commit)?.archive(
                to.tree,
                converter.settings(),
                &select,
            );
            converter = converter.with_commit(commit);
        }
        let recursed = state.as_ref().is_some_and(|s| s.recurse_submodules);
        let mut sides = Sides {
            repo,
            to,
            path,
            export,
            converter: Arc::new(converter),
            synced_converter: None,
            synced_select: state.as_ref().and_then(|s| s.select.clone()).unwrap_or_default(),
            synced_commit: state.as_ref().and_then(|s| s.synced).map(|s| s.commit),
            substituted: state.as_ref().map(|s| s.export_subst.clone()).unwrap_or_default(),
            held_select: held.select,
            recursed,
            recurse,
            resume_recurse: state.as_ref().and_then(|s| s.in_progress.as_ref()).map(|p| p.recurse_submodules),
            select,
            state,
        };
        // How the target's files were written: per its state (none: as blobs are).
        let synced = sides.state.as_ref().and_then(|s| s.synced).map(|s| (s.commit, s.tree, &sides.synced_select));
        sides.synced_converter =
            sides.converter_of(&sides.state.as_ref().and_then(|s| s.conversions.clone()), synced)?;
        Ok(sides)
    }

    /// A converter for files written with `settings` from the commit, tree and selection
    /// `side`: this sync's own when they are the same.
    #[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
    fn converter_of(
        &self,
        settings: &Option<crate::convert::Settings>,
        side: Option<(ObjectId, ObjectId, &Select)>,
    ) -> Result<Option<Arc<Converter>>, Error> {
        let (repo, to) = (self.repo, self.to);
        Ok(match settings {
            Some(s)
                if s == self.converter.settings()
                    && (!s.export || side == Some((to.commit, to.tree, &self.select))) =>
            {
                Some(self.converter.clone())
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
    }

    /// How to plan: through the submodules only where a side has gitlinks filled (the
    /// `.gitmodules` of every commit involved).
    fn planning(&self, options: plan::Options) -> Planning<'r> {
        let state = self.state.as_ref();
        let filled = self.recurse || self.recursed || self.resume_recurse == Some(true);
        Planning {
            repo: self.repo,
            options,
            submodules: filled.then(|| {
                let synced = state.and_then(|s| s.synced).map(|s| s.commit);
                let going = state.and_then(|s| s.in_progress.as_ref()).map(|p| p.to_commit);
                let commits: Vec<ObjectId> = [synced, going, Some(self.to.commit)].into_iter().flatten().collect();
                Submodules::new(self.repo, &commits, self.path.as_deref())
            }),
        }
    }

    /// A takeover of a managed target (`--force`): compare it with the requested tree once and
    /// repair what differs.
    async fn take_over_managed(
        self,
        backend: &dyn Backend,
        options: plan::Options,
        target: TargetState,
        state_bytes: Option<Vec<u8>>,
    ) -> Result<Prepared, Error> {
        let (repo, to, limits) = (self.repo, self.to, options.limits);
        let select_now = (!self.select.is_all()).then(|| self.select.clone());
        let goal = (&self.path, self.recurse, &select_now);
        let (mut main, replaced, repos) =
            repair_plan_to(repo, backend, to, goal, true, limits, &self.converter).await?;
        let lfs_bytes = check_lfs(&repos, &main, &self.converter)?;
        check_bytes(limits, main.counts.bytes, lfs_bytes)?;
        main.counts.bytes += lfs_bytes;
        Ok(Prepared {
            state: self.state,
            target,
            resume: None,
            main: Arc::new(main),
            to,
            path: self.path,
            takeover: true,
            repair: true,
            replaced: Some(replaced),
            state_bytes,
            case_insensitive: options.case_insensitive,
            converter: self.converter,
            resume_converter: None,
            // Compared with the tree as this sync writes it: gitlinks filled with `recurse`.
            recurse_submodules: self.recurse,
            submodules: Vec::new(),
            repos,
            select: select_now,
            export_subst: self.substituted,
            main_stream: None,
            resume_stream: None,
            lfs_bytes,
        })
    }

    /// The plan that finishes the interrupted sync `p`, with the settings it started with (a
    /// journal of a version before conversions: as blobs are).
    async fn resume(
        &self,
        p: &InProgress,
        planning: &Planning<'_>,
        backend: &dyn Backend,
        limits: plan::Limits,
        stream: Option<usize>,
    ) -> Result<Resumed, Error> {
        let repo = self.repo;
        // A filter driver's command is how to run it, not what the tree holds: the one
        // configured now (a filter that failed the sync can be fixed, then the sync rerun).
        let journaled = p.to_conversions.clone().map(|mut s| {
            for (name, d) in &mut s.drivers {
                if let Some(now) = self.converter.settings().drivers.get(name) {
                    d.clone_from(now);
                }
            }
            s
        });
        let journal_select = p.to_select.clone().unwrap_or_default();
        let converter = self.converter_of(&journaled, Some((p.to_commit, p.to_tree, &journal_select)))?;
        let mut resumed = Resumed {
            entry: p.clone(),
            plan: Plan::from_ops(None, p.to_tree, Vec::new()),
            stream: None,
            converter: converter.clone(),
            repair_repos: Vec::new(),
        };
        resumed.plan = if p.repair {
            let to = Resolved { commit: p.to_commit, tree: p.to_tree };
            let with = converter.unwrap_or_else(|| self.converter.clone());
            let goal = (&p.to_path, p.recurse_submodules, &p.to_select);
            let (plan, _, repos) = repair_plan_to(repo, backend, to, goal, p.takeover, limits, &with).await?;
            resumed.repair_repos = repos;
            plan
        } else if p.takeover {
            let existing = scan(backend).await?;
            let c = converter.as_deref();
            planning.takeover(&existing, p.to_tree, p.recurse_submodules, c, &journal_select)?
        } else if let Some((plan, streamed)) = match stream {
            // An interrupted initial checkout: finished as it was started, in chunks.
            Some(chunk) if p.from_tree.is_none() => {
                let c = converter.as_deref();
                planning.stream(p.to_tree, c, &journal_select, p.recurse_submodules, chunk)?
            }
            _ => None,
        } {
            resumed.stream = Some(streamed);
            plan
        } else {
            check_base(repo, p.from_tree, self.state.as_ref())?;
            planning.diff(
                (p.from_tree, self.recursed, self.synced_converter.as_deref(), &self.synced_select),
                p.to_tree,
                (p.recurse_submodules, converter.as_deref(), &journal_select),
                (self.synced_commit != Some(p.to_commit)).then_some(self.substituted.as_slice()),
            )?
        };
        Ok(resumed)
    }

    /// The plan to the requested commit from `base` (a tree, written with its converter):
    /// streamed, a takeover, or a diff (shared through `plans`).
    async fn plan_main(
        &self,
        planning: &Planning<'_>,
        backend: &dyn Backend,
        (base, base_converter): (Option<ObjectId>, Option<&Converter>),
        takeover: bool,
        plans: Option<&plan::Cache>,
        stream: Option<usize>,
    ) -> Result<Main, Error> {
        let (repo, to, converter, select) = (self.repo, self.to, &self.converter, &self.select);
        let streamed = match stream {
            Some(chunk) if base.is_none() && !takeover => {
                planning.stream(to.tree, Some(converter), select, self.recurse, chunk)?
            }
            _ => None,
        };
        if let Some((plan, streamed)) = streamed {
            return Ok(Main { plan: Arc::new(plan), stream: Some(streamed), replaced: None });
        }
        if takeover {
            let existing = scan(backend).await?;
            let plan = planning.takeover(&existing, to.tree, self.recurse, Some(converter), select)?;
            let replaced = Some(replaced_by(&plan, &existing));
            return Ok(Main { plan: Arc::new(plan), stream: None, replaced });
        }
        // What the target's gitlinks hold once an interrupted sync is finished, or now.
        let filled = self.resume_recurse.unwrap_or(self.recursed);
        let held_commit = match &self.state {
            Some(SyncState { in_progress: Some(p), .. }) => Some(p.to_commit),
            _ => self.synced_commit,
        };
        let from = (base, filled && base.is_some(), base_converter, &self.held_select);
        let new = (self.recurse, Some(&**converter), select);
        let resubst = (held_commit != Some(to.commit)).then_some(self.substituted.as_slice());
        let plan = match plans {
            // With submodules the plan depends on the submodule repositories found, and
            // planning records which it read: not shared.
            Some(cache) if planning.submodules.is_none() => {
                let key = plan::Key {
                    repo: repo.common_dir(),
                    from: (base, held_commit.filter(|_| base.is_some())),
                    to: (to.tree, to.commit),
                    old_settings: base_converter.map(|c| c.settings().clone()),
                    new_settings: Some(converter.settings().clone()),
                    old_select: self.held_select.clone(),
                    new_select: select.clone(),
                    resubst: resubst.map(<[String]>::to_vec),
                    case_insensitive: planning.options.case_insensitive,
                    limits: planning.options.limits,
                };
                cache.get_or_plan(key, || planning.diff(from, to.tree, new, resubst)).await?
            }
            _ => Arc::new(planning.diff(from, to.tree, new, resubst)?),
        };
        Ok(Main { plan, stream: None, replaced: None })
    }

    /// The expanded files after this sync: those before (still checked each time) and those
    /// written now, less those removed.
    fn expanded_after(&self, resumed: Option<&Resumed>, main: &Plan) -> Vec<String> {
        if !self.export {
            return Vec::new();
        }
        let mut all: std::collections::BTreeSet<String> = self.substituted.iter().cloned().collect();
        let plans = resumed.map(|r| &r.plan).into_iter().chain(std::iter::once(main));
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
        all.into_iter().collect()
    }

    /// The checks before the lock, the journal or any write (filters, every LFS object the
    /// plans write, by their real sizes against --max-bytes), and the prepared sync.
    #[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
    fn finish(
        self,
        planning: &Planning<'_>,
        planned: Planned,
        target: TargetState,
        state_bytes: Option<Vec<u8>>,
        options: plan::Options,
        limits: plan::Limits,
    ) -> Result<Prepared, Error> {
        let Planned { resumed, main: Main { plan: mut main, stream: main_stream, replaced }, takeover } = planned;
        let export_subst = self.expanded_after(resumed.as_ref(), &main);
        check_filters(self.repo, &main, self.converter.settings())?;
        let (submodules, mut repos) = planning.read();
        let repair_repos = resumed.as_ref().map(|r| r.repair_repos.clone()).unwrap_or_default();
        for r in repair_repos {
            if !repos.iter().any(|o| o.git_dir() == r.git_dir()) {
                repos.push(r);
            }
        }
        // Files of submodules: their objects are in the submodules' own LFS stores.
        let converter = with_submodule_stores(self.repo, self.converter.clone(), &repos)?;
        let resume_converter = match resumed.as_ref().and_then(|r| r.converter.clone()) {
            Some(c) => Some(with_submodule_stores(self.repo, c, &repos)?),
            None => None,
        };
        let mut lfs_bytes = check_lfs(&repos, &main, &converter)?;
        let mut bytes = main.counts.bytes;
        if lfs_bytes > 0 {
            // The plan says what it writes: pointers by their objects' sizes.
            Arc::make_mut(&mut main).counts.bytes += lfs_bytes;
        }
        let (resume, resume_stream) = match resumed {
            Some(Resumed { entry, mut plan, stream, .. }) => {
                let more = check_lfs(&repos, &plan, resume_converter.as_deref().unwrap_or(&converter))?;
                bytes += plan.counts.bytes;
                plan.counts.bytes += more;
                lfs_bytes += more;
                (Some((entry, plan)), stream)
            }
            None => (None, None),
        };
        check_bytes(limits, bytes, lfs_bytes)?;
        Ok(Prepared {
            state: self.state,
            target,
            resume,
            main,
            to: self.to,
            path: self.path,
            takeover,
            repair: false,
            replaced,
            state_bytes,
            case_insensitive: options.case_insensitive,
            converter,
            resume_converter,
            recurse_submodules: self.recurse,
            submodules,
            repos,
            select: (!self.select.is_all()).then_some(self.select),
            export_subst,
            main_stream,
            resume_stream,
            lfs_bytes,
        })
    }
}
