//! `--exec-after` and `--webhook` of `sync` and `watch`: the hooks of one target
//! ([`treesync_watch::hook`]), the job a sync gives them, and `sync`'s exit code 5 when a hook
//! gave up. See docs/hooks.md.

use std::collections::BTreeMap;

use treesync_core::sync;
use treesync_watch::hook::{Job, OnReport, Report, Runner, Verdict};

use super::document::SyncOutput;
use crate::args::{HookArgs, TargetArgs};
use crate::render::{BackendInfo, short};

/// `sync` succeeded, but a hook failed every try (exit code 5).
#[derive(Debug, thiserror::Error)]
#[error(
    "synced {commit}, but {what}\n  hint: the target holds the commit; a sync that changes nothing runs no hook, so run the hook by hand (or fix it and wait for the next change)"
)]
pub(crate) struct HookFailed {
    commit: String,
    what: String,
}

/// Start the hooks of `args` (a runner that does nothing without any), telling each try to
/// `on_report`.
pub(crate) fn start(args: &HookArgs, on_report: OnReport) -> anyhow::Result<Runner> {
    Ok(Runner::start(args.settings.options(), on_report)?)
}

/// Whether `sync` runs the hooks after `outcome`: it changed something, finished an
/// interrupted sync, or was the target's first (as `watch` tells `synced`), and was no dry run.
pub(crate) fn wanted(outcome: &sync::Outcome) -> bool {
    !outcome.dry_run && (outcome.from.is_none() || outcome.applied.total() > 0 || outcome.resumed.is_some())
}

/// The job of one sync: its environment, and `body` (the `sync --json` document) for the webhook.
pub(crate) fn job(outcome: &sync::Outcome, target: &TargetArgs, args: &HookArgs, body: &SyncOutput<'_>) -> Job {
    Job {
        commit: outcome.commit,
        previous: outcome.from.map(|s| s.commit),
        target: target.target().to_string(),
        changed: outcome.applied.total(),
        mirror: args.mirror.clone(),
        body: serde_json::to_vec(body).expect("the sync output serializes"),
    }
}

/// The `sync --json` document of a sync that `watch` ran (no generations' details; the cost is
/// the backend's since the watch started).
pub(crate) fn watch_body<'a>(outcome: &'a sync::Outcome, opened: &treesync::Opened) -> SyncOutput<'a> {
    SyncOutput {
        outcome,
        backend: BackendInfo::of(opened),
        cost: opened.backend.cost().into_iter().collect::<BTreeMap<_, _>>(),
        budgets: opened.budgets.report(),
        atomic: None,
        left_generations: None,
    }
}

/// A report as a log line (without the time and mirror).
pub(crate) fn text(r: &Report) -> String {
    let of = format!("hook {} after {} (try {} of {})", r.hook, short(&r.commit), r.attempt, r.tries);
    match r.result {
        Verdict::Ok => format!("{of}: ok, {}", r.message),
        Verdict::Retrying => {
            format!("{of}: FAILED, {}; retrying in {:?}", r.message, r.retry_in.unwrap_or_default())
        }
        Verdict::GaveUp => format!("{of}: FAILED, {}; gave up", r.message),
        Verdict::Superseded => format!("{of}: FAILED, {}", r.message),
    }
}

/// Wait for the hooks of `sync`; [`HookFailed`] when one gave up. SIGTERM or SIGINT meanwhile
/// stops them at once — a command still running is killed, its whole process group — and is a
/// [`HookFailed`] too (without it, SIGTERM left the command running and SIGINT waited for it).
pub(crate) fn finish(
    rt: &tokio::runtime::Runtime,
    runner: Runner,
    commit: &treesync_core::ObjectId,
) -> anyhow::Result<()> {
    if runner.is_empty() {
        return Ok(());
    }
    let gave_up = rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Before the hooks run (they run only while this waits): a signal now cannot kill
        // treesync and leave them behind.
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return Ok(runner.finish().await);
        };
        tokio::select! {
            gave_up = runner.finish() => Ok(gave_up),
            // Dropping the runner (with `finish`) kills what still runs.
            _ = term.recv() => Err("SIGTERM"),
            _ = int.recv() => Err("SIGINT"),
        }
    });
    let gave_up = match gave_up {
        Ok(gave_up) => gave_up,
        Err(signal) => {
            return Err(HookFailed {
                commit: short(commit),
                what: format!(
                    "the hooks were stopped by a signal ({signal}): a command still running was killed (its process group), a request dropped"
                ),
            }
            .into());
        }
    };
    let Some(first) = gave_up.first() else { return Ok(()) };
    let what: Vec<String> = gave_up
        .iter()
        .map(|r| format!("the {} hook gave up after {} tries ({})", r.hook, r.attempt, r.message))
        .collect();
    Err(HookFailed { commit: short(&first.commit), what: what.join(", and ") }.into())
}

/// Whether `r` is worth a line when the user asked for quiet.
pub(crate) fn failed(r: &Report) -> bool {
    r.result != Verdict::Ok
}
