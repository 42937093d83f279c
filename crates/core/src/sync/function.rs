//! [`sync()`] itself: plan outside or under the lock, then run under it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::checks::repair_plan_to;
use super::journal::{apply_journaled, check_lease, journal_entry, record_written, under_lock};
use super::prepare::{Goal, Prepared, Streamed, prepare_at};
use super::{DEFAULT_STREAM_CHUNK, Error, Options, Outcome};
use crate::apply::Progress;
use crate::backend::{Backend, TargetState};
use crate::convert::Converter;
use crate::gitworktree;
use crate::index_delta;
use crate::op::{OpCounts, Plan};
use crate::source::{self, BlobSource, Repo, Resolved};
use crate::state::{self, InProgress, SyncState, Synced};
use crate::submodule;
use gix_hash::ObjectId;

/// This process as the holder of a lock and a journal entry.
pub fn holder() -> state::Holder {
    state::Holder::this_process()
}

/// Sync `backend` to `rev` of `repo`. See the [module docs](super).
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
    tracing::trace!("phase: resolved");
    let path = source::subtree_path(rev);
    let goal = || {
        Some(Goal {
            path: path.clone(),
            recurse: options.recurse_submodules,
            select: options.select.clone(),
            export: options.export,
            lfs: options.lfs,
        })
    };
    let plans = options.plans.as_deref();
    // A dry run reports the plan as `plan` does: whole. Mirrors sharing plans
    // ([`Options::plans`]) share the whole plan of an initial checkout too: planned once.
    let stream = (!options.dry_run && plans.is_none()).then(|| options.stream_chunk.unwrap_or(DEFAULT_STREAM_CHUNK));
    let target = backend.prepare_target(false).await?;
    tracing::trace!("phase: target prepared");
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
        tracing::trace!("phase: prepared");
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
pub(super) async fn run_locked(
    repo: &Repo,
    backend: &dyn Backend,
    prepared: Prepared,
    options: &Options,
    me: &state::Holder,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
    start: Instant,
) -> Result<Outcome, Error> {
    let outcome = outcome_of(&prepared, options);
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
    let resume_blobs = converting(resume_converter.as_ref().unwrap_or(&converter));
    let dest = Dest { to, path, settings: Some(converter.settings().clone()), select, recurse, takeover };
    tracing::debug!(target: "treesync::sync", %backend, "target prepared and locked");
    // What this run writes, for the next verify (files written before, e.g. by a repair
    // that recorded nothing, are not this run's to record).
    drop(backend.take_written());
    let mut run = Run {
        repo,
        backend,
        options,
        progress,
        interrupt,
        me,
        current: current_state(state, options),
        outcome,
        written: index_delta::Delta::default(),
    };
    let mut dirs_recreated = 0;
    if let Some((p, plan)) = &resume {
        dirs_recreated += run.finish_resumed(p, plan, resume_stream.as_ref(), &resume_blobs, &dest, main_empty).await?;
    }
    let current = &run.current;
    let already = current.synced.is_some_and(|s| s.commit == dest.to.commit)
        && current.path == dest.path
        && current.conversions == dest.settings
        && current.select == dest.select
        && current.recurse_submodules == dest.recurse
        && current.in_progress.is_none();
    tracing::info!(
        target: "treesync::sync",
        from = ?current.synced.map(|s| s.commit.to_string()),
        to = %dest.to.commit,
        plan = %main.counts,
        takeover,
        repair,
        "planned"
    );
    if !main_empty {
        let from_tree = if takeover { None } else { run.current.synced.map(|s| s.tree) };
        run.current.in_progress = Some(dest.entry(from_tree, repair, me));
        run.store_state().await?;
        tracing::debug!(target: "treesync::sync", "journal: in progress");
        dirs_recreated += run.apply(&main, main_stream.as_ref(), &blobs).await?;
    }
    if dirs_recreated > 0 {
        run.heal(&dest, &converter, dirs_recreated).await?;
    }
    if !main_empty || !already || dirs_recreated > 0 {
        run.current.synced = Some(Synced { commit: dest.to.commit, tree: dest.to.tree, at_unix: state::now_unix() });
        run.current.export_subst = export_subst;
        dest.record(&mut run.current);
        run.store_state().await?;
    }
    let Run { mut outcome, written, .. } = run;
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

/// The state a run starts from: the target's, or a new one; of this version and backend.
fn current_state(state: Option<SyncState>, options: &Options) -> SyncState {
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
    current
}

/// Where a run goes, as the state records it once it is there.
struct Dest {
    to: Resolved,
    path: Option<String>,
    settings: Option<crate::convert::Settings>,
    select: Option<crate::select::Select>,
    recurse: bool,
    /// The run takes the target over.
    takeover: bool,
}

impl Dest {
    /// The journal entry of this process's transition to it, from `from_tree`.
    fn entry(&self, from_tree: Option<ObjectId>, repair: bool, me: &state::Holder) -> InProgress {
        journal_entry(self.to, &self.path, &self.settings, from_tree, self.takeover, repair, me)
            .recursing(self.recurse)
            .selecting(self.select.clone())
    }

    /// Record in `current` that the target holds it (the synced commit and export list apart).
    fn record(&self, current: &mut SyncState) {
        current.path.clone_from(&self.path);
        current.conversions.clone_from(&self.settings);
        current.select.clone_from(&self.select);
        current.recurse_submodules = self.recurse;
        current.in_progress = None;
    }
}

/// A run under the lock: where it applies, and its tally.
struct Run<'a> {
    repo: &'a Repo,
    backend: &'a dyn Backend,
    options: &'a Options,
    progress: &'a (dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &'a AtomicBool,
    me: &'a state::Holder,
    /// The state as this run last wrote it (or will).
    current: SyncState,
    outcome: Outcome,
    /// What it wrote, for the next verify.
    written: index_delta::Delta,
}

impl Run<'_> {
    async fn store_state(&mut self) -> Result<(), Error> {
        self.backend.store_state(&self.current.to_bytes()).await?;
        self.outcome.state_writes += 1;
        Ok(())
    }

    /// Apply `plan` (planned from `stream` in chunks, if given) under the current journal
    /// entry; how many directories healing had to make.
    async fn apply(
        &mut self,
        plan: &Plan,
        stream: Option<&Streamed>,
        blobs: &Arc<dyn BlobSource>,
    ) -> Result<u64, Error> {
        let (repo, backend, options) = (self.repo, self.backend, self.options);
        let stream = stream.map(|s| (repo, s));
        let (progress, interrupt) = (self.progress, self.interrupt);
        let (current, outcome, written) = (&self.current, &mut self.outcome, &mut self.written);
        apply_journaled(plan, stream, backend, blobs, options, progress, interrupt, current, outcome, written).await
    }

    /// Finish the interrupted sync `p` with `plan`; the state records it done at once when
    /// nothing else is to do (`main_empty`, and it went where this run goes).
    async fn finish_resumed(
        &mut self,
        p: &InProgress,
        plan: &Plan,
        stream: Option<&Streamed>,
        blobs: &Arc<dyn BlobSource>,
        dest: &Dest,
        main_empty: bool,
    ) -> Result<u64, Error> {
        tracing::info!(
            target: "treesync::sync",
            to = %p.to_commit,
            ops = plan.len(),
            "finishing an interrupted sync first"
        );
        // The journal says "in progress" for this transition; it is ours now.
        if p.holder.is_some() && !self.backend.capabilities().exclusive_lock {
            self.current.in_progress = Some(p.clone().held_by(self.me));
            self.store_state().await?;
        }
        let dirs_recreated = self.apply(plan, stream, blobs).await?;
        let current = &mut self.current;
        current.synced = Some(Synced { commit: p.to_commit, tree: p.to_tree, at_unix: state::now_unix() });
        current.path = p.to_path.clone();
        current.conversions = p.to_conversions.clone();
        current.select = p.to_select.clone();
        current.recurse_submodules = p.recurse_submodules;
        current.in_progress = None;
        if main_empty
            && p.to_commit == dest.to.commit
            && p.to_path == dest.path
            && current.conversions == dest.settings
            && current.select == dest.select
            && p.recurse_submodules == dest.recurse
            && dirs_recreated == 0
        {
            self.store_state().await?;
        }
        Ok(dirs_recreated)
    }

    /// Healing had to make directories whose other content is gone (someone deleted a
    /// directory, or put a symlink or a file in its place): the diff cannot know what else
    /// is missing, so compare the target with the destination once and repair what
    /// differs. Journaled as a repair: an interruption is finished the same way.
    async fn heal(&mut self, dest: &Dest, converter: &Arc<Converter>, dirs_recreated: u64) -> Result<(), Error> {
        tracing::warn!(
            target: "treesync::sync",
            dirs_recreated,
            "the target had drifted (directories missing or replaced); comparing it with the destination once"
        );
        self.current.in_progress = Some(dest.entry(None, true, self.me));
        self.store_state().await?;
        let goal = (&dest.path, dest.recurse, &dest.select);
        let limits = self.options.limits;
        let (plan, _, repos) =
            repair_plan_to(self.repo, self.backend, dest.to, goal, dest.takeover, limits, converter).await?;
        let blobs: Arc<dyn BlobSource> =
            Arc::new(source::Converting::new(submodule::Blobs::source(repos), converter.clone()));
        self.apply(&plan, None, &blobs).await?;
        Ok(())
    }
}
