//! [`sync()`]: the whole job — lock, read the journal, finish an interrupted sync, plan, apply,
//! record. One small state read and two small writes per sync, nothing proportional to the tree.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::apply::{self, Progress};
use crate::backend::{self, Backend, TargetState};
use crate::op::{OpCounts, Plan};
use crate::path::RelPath;
use crate::plan::{self, ExistingEntry, ExistingKind};
use crate::source::{self, BlobSource, Repo, Resolved};
use crate::state::{self, InProgress, SyncState, Synced};

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
    /// How large a plan may get ([`plan::Limits`]; the defaults are far above any real
    /// repository and refuse tree bombs).
    pub limits: plan::Limits,
}

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

/// What [`prepare()`] found and planned.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// What the target's state said, if it has one.
    pub state: Option<SyncState>,
    /// What was at the target root.
    pub target: TargetState,
    /// An interrupted sync, and the plan that finishes it (run first).
    pub resume: Option<(InProgress, Plan)>,
    /// The plan to the requested commit.
    pub main: Plan,
    /// The requested commit.
    pub to: Resolved,
    /// `main` is a takeover of an unmanaged target.
    pub takeover: bool,
}

/// What a sync did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// What the target held before (per its state).
    pub from: Option<Synced>,
    /// The commit synced to.
    #[serde(serialize_with = "ser_id")]
    pub commit: gix_hash::ObjectId,
    /// Its tree.
    #[serde(serialize_with = "ser_id")]
    pub tree: gix_hash::ObjectId,
    /// An interrupted sync that was finished first.
    pub resumed: Option<InProgress>,
    /// The target was taken over (`--force`).
    pub takeover: bool,
    /// Nothing was changed (`--dry-run`).
    pub dry_run: bool,
    /// Ops planned (resume and main plan together).
    pub planned: OpCounts,
    /// Ops done.
    pub applied: OpCounts,
    /// Writes of the state file (0 when nothing changed, else 1 or 2).
    pub state_writes: u32,
    /// Wall time.
    #[serde(serialize_with = "ser_secs")]
    pub elapsed: Duration,
}

fn ser_id<S: serde::Serializer>(id: &gix_hash::ObjectId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Read the target's state and plan, without writing anything.
pub async fn prepare(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    force: bool,
    create: bool,
) -> Result<Prepared, Error> {
    prepare_with(repo, rev, backend, force, create, plan::Limits::default()).await
}

/// [`prepare`] with other [`plan::Limits`] than the defaults.
pub async fn prepare_with(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    force: bool,
    create: bool,
    limits: plan::Limits,
) -> Result<Prepared, Error> {
    let to = repo.resolve(rev)?;
    let target = backend.prepare_target(create).await?;
    prepare_at(repo, to, backend, force, target, limits).await
}

async fn prepare_at(
    repo: &Repo,
    to: Resolved,
    backend: &dyn Backend,
    force: bool,
    mut target: TargetState,
    limits: plan::Limits,
) -> Result<Prepared, Error> {
    let state = match backend.load_state().await? {
        Some(bytes) => Some(SyncState::parse(&bytes)?),
        None => None,
    };
    if target == TargetState::Managed && state.is_none() {
        // A first sync that died before its journal was written leaves only the lock file.
        target = if backend.read_dir(&RelPath::root()).await?.is_empty() {
            TargetState::Empty
        } else {
            TargetState::Unmanaged
        };
    }

    let options = plan::Options { case_insensitive: !backend.capabilities().case_sensitive, limits };
    let mut resume = None;
    let mut takeover = false;
    let base = match &state {
        Some(SyncState { in_progress: Some(p), .. }) => {
            let plan = if p.takeover {
                let existing = scan(backend).await?;
                plan::with_big_stack(|| {
                    repo.with_objects(|odb| plan::plan_takeover(odb, &existing, p.to_tree, options))
                })?
            } else {
                plan::with_big_stack(|| repo.with_objects(|odb| plan::plan_with(odb, p.from_tree, p.to_tree, options)))?
            };
            resume = Some((p.clone(), plan));
            Some(p.to_tree)
        }
        Some(SyncState { synced, .. }) => synced.map(|s| s.tree),
        None => match target {
            TargetState::Empty | TargetState::Managed => None,
            TargetState::Unmanaged if force => {
                takeover = true;
                None
            }
            TargetState::Unmanaged => return Err(Error::Unmanaged { target: backend.to_string() }),
        },
    };
    let main = if takeover {
        let existing = scan(backend).await?;
        plan::with_big_stack(|| repo.with_objects(|odb| plan::plan_takeover(odb, &existing, to.tree, options)))?
    } else {
        plan::with_big_stack(|| repo.with_objects(|odb| plan::plan_with(odb, base, to.tree, options)))?
    };
    Ok(Prepared { state, target, resume, main, to, takeover })
}

/// List everything in the target (parents before children), for a takeover.
async fn scan(backend: &dyn Backend) -> Result<Vec<ExistingEntry>, Error> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([RelPath::root()]);
    while let Some(dir) = queue.pop_front() {
        for e in backend.read_dir(&dir).await? {
            let path = dir.join(e.name.as_slice().into(), crate::path::NameKind::Other);
            // Names no tree could have (e.g. `.git`) are still foreign entries to remove; we
            // cannot represent them as a RelPath, so refuse clearly instead.
            let path = path.map_err(|e| {
                Error::Backend(backend::Error::State(format!(
                    "cannot take over the target: it holds {:?} ({}); remove it by hand",
                    e.path, e.reason
                )))
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

/// This machine's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown host".into())
}

/// Describe this process, for the lock file.
pub fn holder() -> String {
    format!("pid {} on {}, started at unix time {}", std::process::id(), hostname(), state::now_unix())
}

/// Sync `backend` to `rev` of `repo`. See the [module docs](self).
pub async fn sync(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    options: &Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<Outcome, Error> {
    let start = Instant::now();
    // Resolve first: a typo in the revision must not create the target or its lock.
    let to = repo.resolve(rev)?;
    let me = holder();
    let target = backend.prepare_target(!options.dry_run).await?;
    let lock = if options.dry_run { None } else { Some(backend.lock(&me).await?) };
    let result: Result<Outcome, Error> = async {
        let prepared = prepare_at(repo, to, backend, options.force, target, options.limits).await?;
        let Prepared { state, resume, main, to, takeover, .. } = prepared;
        if let Some((p, _)) = &resume {
            check_lease(p, backend, options)?;
        }
        let from = state.as_ref().and_then(|s| s.synced);
        let mut planned = main.counts;
        if let Some((_, plan)) = &resume {
            planned.merge(&plan.counts);
        }
        let mut outcome = Outcome {
            from,
            commit: to.commit,
            tree: to.tree,
            resumed: resume.as_ref().map(|r| r.0.clone()),
            takeover,
            dry_run: options.dry_run,
            planned,
            applied: OpCounts::default(),
            state_writes: 0,
            elapsed: Duration::ZERO,
        };
        if options.dry_run {
            outcome.elapsed = start.elapsed();
            return Ok(outcome);
        }

        let blobs: Arc<dyn BlobSource> = Arc::new(repo.clone());
        let mut current = state.unwrap_or(SyncState {
            version: state::VERSION,
            synced: None,
            in_progress: None,
            backend: options.backend_name.clone(),
        });
        current.version = state::VERSION;
        current.backend = options.backend_name.clone();

        tracing::debug!(target: "treesync::sync", %backend, ?target, "target prepared and locked");
        if let Some((p, plan)) = &resume {
            tracing::info!(
                target: "treesync::sync",
                to = %p.to_commit,
                ops = plan.len(),
                "finishing an interrupted sync first"
            );
            // The journal says "in progress" for this transition; it is ours now.
            if p.holder.is_some() && !backend.capabilities().exclusive_lock {
                current.in_progress = Some(InProgress {
                    holder: Some(me.to_string()),
                    host: Some(hostname()),
                    pid: Some(std::process::id()),
                    ..p.clone()
                });
                backend.store_state(&current.to_bytes()).await?;
                outcome.state_writes += 1;
            }
            let done = apply::apply(plan, backend, &blobs, options.apply, progress, interrupt).await;
            let done = match done {
                Ok(d) => d,
                Err(e) => return Err(release(backend, current, add_counts(e.into(), &outcome.applied)).await),
            };
            outcome.applied.merge(&done.counts);
            current.synced = Some(Synced { commit: p.to_commit, tree: p.to_tree, at_unix: state::now_unix() });
            current.in_progress = None;
            if main.is_empty() && p.to_commit == to.commit {
                backend.store_state(&current.to_bytes()).await?;
                outcome.state_writes += 1;
            }
        }

        let already = current.synced.is_some_and(|s| s.commit == to.commit) && current.in_progress.is_none();
        tracing::info!(
            target: "treesync::sync",
            from = ?current.synced.map(|s| s.commit.to_string()),
            to = %to.commit,
            plan = %main.counts,
            takeover,
            "planned"
        );
        if !main.is_empty() {
            current.in_progress = Some(InProgress {
                from_tree: if takeover { None } else { current.synced.map(|s| s.tree) },
                to_commit: to.commit,
                to_tree: to.tree,
                takeover,
                started_unix: state::now_unix(),
                holder: Some(me.to_string()),
                host: Some(hostname()),
                pid: Some(std::process::id()),
            });
            backend.store_state(&current.to_bytes()).await?;
            outcome.state_writes += 1;
            tracing::debug!(target: "treesync::sync", "journal: in progress");
            let done = apply::apply(&main, backend, &blobs, options.apply, progress, interrupt).await;
            let done = match done {
                Ok(d) => d,
                Err(e) => return Err(release(backend, current, add_counts(e.into(), &outcome.applied)).await),
            };
            outcome.applied.merge(&done.counts);
        }
        if !main.is_empty() || !already {
            current.synced = Some(Synced { commit: to.commit, tree: to.tree, at_unix: state::now_unix() });
            current.in_progress = None;
            backend.store_state(&current.to_bytes()).await?;
            outcome.state_writes += 1;
        }
        outcome.elapsed = start.elapsed();
        tracing::info!(
            target: "treesync::sync",
            applied = %outcome.applied,
            state_writes = outcome.state_writes,
            elapsed_ms = outcome.elapsed.as_millis() as u64,
            "synced"
        );
        Ok(outcome)
    }
    .await;
    if let Some(lock) = lock {
        // Released on every path; a failure to release matters only when all else went well.
        let unlocked = backend.unlock(lock).await;
        if result.is_ok() {
            unlocked?;
        }
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
    if let (Some(host), Some(pid)) = (&p.host, p.pid)
        && *host == hostname()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    {
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
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The state file, if any.
    pub state: Option<SyncState>,
    /// Whether the target root is managed, empty or foreign.
    pub target: &'static str,
    /// The holder of the lock, when a sync is running now.
    pub running: Option<String>,
}

/// Read a target's status without changing it (the lock is only probed).
pub async fn status(backend: &dyn Backend) -> Result<Status, Error> {
    let target = backend.prepare_target(false).await?;
    let state = match backend.load_state().await? {
        Some(bytes) => Some(SyncState::parse(&bytes)?),
        None => None,
    };
    let running = if target == TargetState::Managed {
        match backend.lock("treesync status (probe)").await {
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
