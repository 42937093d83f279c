//! `treesync sync`: bring the target to a commit.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use serde::Serialize;
use treesync_core::{Repo, apply, sync};

use super::{make_backend, runtime};
use crate::args::SyncArgs;
use crate::render::{BackendInfo, human_bytes, print_json, print_replaced, short};

/// `sync --json`: the sync's outcome, the backend that ran it and what it cost.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct SyncOutput<'a> {
    #[serde(flatten)]
    pub(crate) outcome: &'a sync::Outcome,
    #[serde(flatten)]
    pub(crate) backend: BackendInfo,
    /// The backend's cost in the storage's own terms (requests by method, lookups).
    pub(crate) cost: BTreeMap<&'static str, u64>,
    /// The NFS budgets; absent for other backends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) budgets: Option<treesync::BudgetsReport>,
}

pub(crate) fn run(args: SyncArgs) -> anyhow::Result<()> {
    let rev = args.source.rev()?;
    let repo = Repo::open(args.source.repo())?;
    let chosen = make_backend(&args.target)?;
    check_target_place(&repo, args.target.target(), args.force)?;
    let backend = chosen.backend.clone();
    let options = sync::Options {
        force: args.force,
        dry_run: args.dry_run,
        apply: apply::Options { jobs: args.target.jobs, batch: args.target.batch },
        backend_name: chosen.label(),
        lease: None,
        break_lock: args.break_lock,
        lock_wait: args.wait,
        git_worktree: args.git_worktree.then(|| PathBuf::from(args.target.target())),
        limits: args.limits.limits(),
        recurse_submodules: args.source.recurse_submodules,
        select: args.source.select()?,
        export: args.source.export,
        lfs: args.source.lfs.unwrap_or_default(),
    };
    anyhow::ensure!(
        !args.git_worktree || !matches!(chosen.kind, treesync::BackendKind::S3 | treesync::BackendKind::Memory),
        "--git-worktree needs a directory target"
    );
    let show_progress = !args.json && !args.quiet && std::io::stderr().is_terminal();
    let bar = show_progress.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg:24} [{bar:30}] {pos}/{len} ops, {elapsed}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar
    });
    let progress = |p: &apply::Progress<'_>| {
        if let Some(bar) = &bar {
            bar.set_length(p.ops_total);
            bar.set_position(p.ops_done);
            bar.set_message(p.phase.to_string());
        }
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        let flag = interrupt.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("treesync: interrupted; finishing the operations in flight (press Ctrl-C again to abort)");
                flag.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        sync::sync(&repo, &rev, &*backend, &options, &progress, &interrupt).await
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let outcome = outcome.with_context(|| format!("syncing {rev} to {backend}"))?;
    let cost = backend.cost();
    if args.json {
        return print_json(&SyncOutput {
            outcome: &outcome,
            backend: BackendInfo::of(&chosen),
            cost: cost.into_iter().collect(),
            budgets: chosen.budgets.report(),
        });
    }
    if args.quiet {
        return Ok(());
    }
    if let Some(r) = &outcome.resumed {
        println!("finished an interrupted sync to {}", short(&r.to_commit));
    }
    let from = outcome.from.map(|s| short(&s.commit)).unwrap_or_else(|| "nothing".into());
    let verb = if outcome.dry_run { "would sync" } else { "synced" };
    let counts = if outcome.dry_run { outcome.planned } else { outcome.applied };
    let cost: Vec<String> = cost.iter().map(|(k, v)| format!("{v} {k}")).collect();
    println!(
        "{verb} {} {from} -> {}: {counts}, {} in {:.2}s{}{}",
        backend,
        short(&outcome.commit),
        human_bytes(counts.bytes),
        outcome.elapsed.as_secs_f64(),
        if outcome.takeover { " (took over the target)" } else { "" },
        if cost.is_empty() || outcome.dry_run { String::new() } else { format!(" ({})", cost.join(", ")) },
    );
    if let Some(r) = &outcome.replaced {
        print_replaced(r, outcome.dry_run);
    }
    Ok(())
}

/// Refuse directory targets where a sync would wreck something ([`sync::check_place()`]),
/// with the paths resolved as the mount detection resolves them.
fn check_target_place(repo: &Repo, target: &str, force: bool) -> anyhow::Result<()> {
    use treesync_backend_nfs::detect::resolved;
    if target.contains("://") {
        return Ok(());
    }
    let target = resolved(std::path::Path::new(target));
    let git_dir = resolved(&repo.git_dir());
    let work_dir = repo.work_dir().map(|w| resolved(&w));
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| resolved(h.as_ref()));
    let place =
        sync::Place { target: &target, git_dir: &git_dir, work_dir: work_dir.as_deref(), home: home.as_deref() };
    Ok(sync::check_place(&place, force)?)
}
