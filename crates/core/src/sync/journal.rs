//! The lock and the journal around applying: entries, leases, release on failure, and
//! recording what was written for the next verify.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::prepare::Streamed;
use super::{DEFAULT_LEASE, Error, Options, Outcome};
use crate::apply::{self, Progress};
use crate::backend::{self, Backend};
use crate::index_delta;
use crate::op::{OpCounts, Plan};
use crate::plan;
use crate::source::{BlobSource, Repo, Resolved};
use crate::state::{self, InProgress, SyncState};
use gix_hash::ObjectId;

/// The journal entry of a transition this process runs now, to `to`.
pub(super) fn journal_entry(
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
pub(super) async fn apply_journaled(
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
            .stack_size(crate::plan::BIG_STACK)
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
pub(super) async fn record_written(backend: &dyn Backend, written: index_delta::Delta) {
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
pub(super) async fn under_lock<T>(
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
pub(super) fn check_lease(p: &InProgress, backend: &dyn Backend, options: &Options) -> Result<(), Error> {
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
pub(super) async fn release(backend: &dyn Backend, mut current: SyncState, e: Error) -> Error {
    if let Some(p) = &mut current.in_progress
        && p.holder.is_some()
        && !backend.capabilities().exclusive_lock
    {
        p.holder = None;
        let _ = backend.store_state(&current.to_bytes()).await;
    }
    e
}

pub(super) fn add_counts(mut e: Error, before: &OpCounts) -> Error {
    match &mut e {
        Error::Apply { done, .. } | Error::Interrupted { done } => done.merge(before),
        _ => {}
    }
    e
}
