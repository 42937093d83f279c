//! [`repair()`]: bring a drifted target back to the tree its state records.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use super::function::{holder, run_locked};
use super::journal::{add_counts, journal_entry, record_written, release, under_lock};
use super::prepare::prepare_at;
use super::{Error, RepairOptions, RepairOutcome};
use crate::apply::{self, Progress};
use crate::backend::Backend;
use crate::convert::Converter;
use crate::index_delta;
use crate::op::OpCounts;
use crate::source::{self, BlobSource, Repo, Resolved};
use crate::state::{self, SyncState, Synced};
use crate::submodule;
use crate::verify;

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
        let compare = verify::Options {
            level: options.level,
            limits: options.sync.limits,
            slice: options.slice,
            ..Default::default()
        };
        let report = verify::verify(repo, backend, &compare, &|_| {}, interrupt).await?;
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
            let plans = options.sync.plans.as_deref();
            // No goal: the destination the state records.
            let prepared = prepare_at(repo, to, None, backend, false, target, options.sync.limits, plans, None).await?;
            Some(run_locked(repo, backend, prepared, &options.sync, &me, progress, interrupt, start).await?)
        } else {
            None
        };
        // What the target should hold once an interrupted sync is finished: what the state
        // records now, files converted as they were written.
        let against = if interrupted { verify::recorded(backend).await?.0 } else { against };
        let goal = Synced { commit: against.commit, tree: against.tree, at_unix: state::now_unix() };
        let converter = match against.converter(repo)? {
            Some(c) => Arc::new(c),
            None => Arc::new(Converter::new(repo, Default::default())?),
        };
        let compare = verify::Options {
            level: options.level,
            limits: options.sync.limits,
            slice: options.slice,
            against: Some(against.clone()),
            ..Default::default()
        };
        let report = verify::verify(repo, backend, &compare, &|_| {}, interrupt).await?;
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
                let again = verify::Options { level: verify::Level::Stat, record: false, ..compare.clone() };
                let again = verify::verify(repo, backend, &again, &|_| {}, interrupt).await?;
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
            outcome.after = Some(verify::verify(repo, backend, &compare, &|_| {}, interrupt).await?);
        }
        Ok(outcome)
    })
    .await
}
