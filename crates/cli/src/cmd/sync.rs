//! `treesync sync`: bring the target to a commit.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use treesync_core::generation;
use treesync_core::{apply, sync};

use super::common::runtime;
use super::document::SyncOutput;
use crate::args::SyncArgs;
use crate::render::{BackendInfo, human_bytes, print_json, print_replaced, short};

pub(crate) fn run(args: SyncArgs) -> anyhow::Result<()> {
    let super::common::Opened { rev, repo, target: chosen } = super::common::open(&args.spec)?;
    let target = treesync::Target::parse(args.spec.target.target())?;
    treesync::check_place(&target, &repo, args.force)?;
    tracing::trace!("phase: place checked");
    let backend = chosen.backend.clone();
    let options = sync::Options {
        force: args.force,
        dry_run: args.dry_run,
        break_lock: args.break_lock,
        lock_wait: args.wait,
        git_worktree: args.git_worktree.then(|| PathBuf::from(args.spec.target.target())),
        // One target per process: nothing to share a plan with.
        plans: None,
        ..treesync::Settings { hooks: args.hooks.settings.clone(), ..args.spec.settings() }.sync_options(&chosen)?
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
    // The hooks start before the sync, so a webhook that is no URL stops it before it writes.
    let quiet = args.quiet;
    let hooks = {
        let _in_runtime = rt.enter();
        super::hooks::start(
            &args.hooks,
            Arc::new(move |r: &treesync_watch::hook::Report| {
                if !quiet || super::hooks::failed(r) {
                    eprintln!("treesync: {}", super::hooks::text(r));
                }
            }),
        )?
    };
    let mut place = super::common::place(
        &args.spec.target,
        chosen.clone(),
        treesync::Intent::Write(args.spec.atomic.wanted()),
        &rt,
    )?;
    tracing::trace!("phase: place decided");
    anyhow::ensure!(
        !(place.is_atomic() && args.git_worktree),
        "--git-worktree cannot keep a git clone in generations: the clone's .git is in one directory, and --atomic switches the target between several\n  hint: sync the clone without --atomic, or keep a separate target with --atomic"
    );
    let generation_options = args.spec.atomic.options(options.clone());
    let mut left = None;
    if let (Some(h), false) = (place.host().cloned().filter(|_| !place.is_atomic()), args.dry_run) {
        left = rt
            .block_on(place.leave(&generation_options))
            .with_context(|| format!("leaving the generations of {h} (--no-atomic)"))?;
    }
    let synced = rt.block_on(async {
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
        place.sync(&repo, &rev, &generation_options, &progress, &interrupt).await
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let synced = super::common::place_hint(synced.map_err(super::common::unwrapped), &target, &repo);
    let synced = match place.host().filter(|_| place.is_atomic()) {
        Some(h) => synced.with_context(|| format!("syncing {rev} to {h} (--atomic)"))?,
        None => synced.with_context(|| format!("syncing {rev} to {backend}"))?,
    };
    let (outcome, generated) = (synced.outcome, synced.generation);
    let cost = backend.cost();
    let output = SyncOutput {
        outcome: &outcome,
        backend: BackendInfo::of(&chosen),
        cost: cost.iter().copied().collect(),
        budgets: chosen.budgets.report(),
        atomic: generated.as_ref(),
        left_generations: left.as_ref(),
    };
    let job = (!hooks.is_empty() && super::hooks::wanted(&outcome))
        .then(|| super::hooks::job(&outcome, &args.spec.target, &args.hooks, &output));
    if args.json {
        print_json(&output)?;
    } else if !args.quiet {
        print_text(&outcome, &backend, &cost, left.as_ref(), generated.as_ref());
    }
    if let Some(job) = job {
        hooks.submit(job);
    }
    super::hooks::finish(&rt, hooks, &outcome.commit)
}

/// The summary of a sync for people.
fn print_text(
    outcome: &sync::Outcome,
    backend: &impl std::fmt::Display,
    cost: &[(&'static str, u64)],
    left: Option<&generation::LeaveOutcome>,
    generated: Option<&generation::Outcome>,
) {
    if let Some(l) = left {
        print_left(l);
    }
    print_unconverted(&outcome.unconverted);
    if let Some(g) = generated {
        print_generations(g, outcome);
        return;
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
}

/// The files written unconverted because git cannot convert them either (on stderr, as git
/// prints its "failed to encode" errors).
pub(crate) fn print_unconverted(unconverted: &[treesync_core::convert::Unconverted]) {
    const SHOWN: usize = 10;
    if unconverted.is_empty() {
        return;
    }
    eprintln!(
        "warning: {} file(s) written as UTF-8, unconverted, as `git checkout` writes them (it reports \"failed to encode\" for each):",
        unconverted.len()
    );
    for u in unconverted.iter().take(SHOWN) {
        eprintln!("  {u}");
    }
    if unconverted.len() > SHOWN {
        eprintln!("  … and {} more (`--json` lists them all, under \"unconverted\")", unconverted.len() - SHOWN);
    }
    eprintln!(
        "  hint: fix the content or the file's working-tree-encoding attribute; `iconv -f UTF-8 -t ENCODING FILE` shows where a file fails"
    );
}

/// What leaving the generations did (`--no-atomic`).
fn print_left(l: &generation::LeaveOutcome) {
    if l.restored {
        println!("the target is a plain directory again (it was a symlink to its current generation)");
    }
    if !l.removed.is_empty() {
        println!("removed retired generations: {}", l.removed.join(", "));
    }
    if !l.kept.is_empty() {
        println!(
            "kept generations {} until they are past the grace period; a later sync removes them",
            l.kept.join(", ")
        );
    }
    for note in &l.notes {
        println!("note: {note}");
    }
}

/// The summary of an atomic sync.
fn print_generations(g: &generation::Outcome, outcome: &sync::Outcome) {
    let from = outcome.from.map(|s| short(&s.commit)).unwrap_or_else(|| "nothing".into());
    if outcome.dry_run {
        println!(
            "would prepare a generation {from} -> {}: {} ({}), then switch the target ({})",
            short(&outcome.commit),
            outcome.planned,
            human_bytes(outcome.planned.bytes),
            g.switch
        );
    } else if !g.switched {
        println!("the current generation holds {} already; nothing to switch", short(&outcome.commit));
    } else {
        let how = match (&g.cloned, g.reused) {
            (_, true) => "reused".to_string(),
            (Some(c), _) => {
                format!("new, a {:?} copy of the current one ({} entries)", c.how, c.entries).to_lowercase()
            }
            (None, false) => "new".to_string(),
        };
        println!(
            "prepared a generation in {} ({how}) {from} -> {}: {}, {} in {:.2}s; switched the target ({})",
            g.prepared.as_deref().unwrap_or("?"),
            short(&outcome.commit),
            outcome.applied,
            human_bytes(outcome.applied.bytes),
            g.elapsed.as_secs_f64(),
            g.switch,
        );
    }
    if let Some(r) = &g.retired {
        println!("the previous tree is now in {r}, kept for its readers (reused or removed after the grace period)");
    }
    if !g.removed.is_empty() {
        println!("removed: {}", g.removed.join(", "));
    }
    for note in &g.notes {
        println!("note: {note}");
    }
}
