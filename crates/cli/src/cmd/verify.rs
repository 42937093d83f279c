//! `treesync verify`: prove the target holds the synced tree; with `--repair`, fix what differs.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use serde::Serialize;
use treesync_core::slice;
use treesync_core::verify::{self, Drift, Level, Report};
use treesync_core::{OpCounts, sync};

use super::common::{make_backend, open_repo, place, runtime, unwrapped};
use crate::args::{LevelArg, OracleArg, VerifyArgs};
use crate::render::{human_age, human_bytes, print_json, print_plan, short};

/// `verify --json`: the report, what a repair did, and the verdict.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct VerifyOutput<'a> {
    /// The target, as the backend names it.
    pub(crate) target: String,
    /// The comparison (that planned the repair, with `--repair`).
    pub(crate) report: &'a Report,
    /// An interrupted sync that `--repair` finished first.
    pub(crate) finished: Option<&'a sync::Outcome>,
    /// The ops the repair ran.
    pub(crate) repaired: Option<OpCounts>,
    /// The comparison after the repair.
    pub(crate) after_repair: Option<&'a Report>,
    /// The target holds exactly the synced tree at the end.
    pub(crate) clean: bool,
    /// With `--repair --dry-run` and drift found: the ops the repair would run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) would_repair: Option<OpCounts>,
    /// What the verify (and a repair) cost in the storage's own terms, as in `sync --json`:
    /// NFS calls by procedure for `nfs://`, requests by method for object stores.
    pub(crate) cost: std::collections::BTreeMap<&'static str, u64>,
}

pub(crate) fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let repo = open_repo(
        args.repo.as_deref().expect("clap or the config file sets --repo"),
        args.cache.cache_dir.as_deref(),
        &[],
    )?;
    let chosen = make_backend(&args.target)?;
    let level = match args.level {
        LevelArg::Quick => Level::Quick,
        LevelArg::Stat => Level::Stat,
        LevelArg::Full => Level::Full,
    };
    let rt = runtime()?;
    // A target kept in generations: its current generation is verified, and a repair prepares
    // the next one and switches (never writing into the current one).
    let place = place(&args.target, chosen.clone(), treesync::Intent::Read, &rt)?;
    let backend = rt.block_on(place.reader()).map_err(unwrapped)?;
    let ctx = || format!("verifying {backend}");
    // One slice of the tree: the one named, or the next of the rolling position.
    let slice = match args.slice {
        Some(pick) => Some(rt.block_on(slice::start(&*backend, pick)).with_context(ctx)?),
        None => None,
    };
    let rolling = matches!(args.slice, Some(slice::Pick::Next { .. }));
    // A spinner on a terminal: a verify scans the whole target, which takes a while on a NAS.
    let spinner = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("verifying {backend}: scanning the target and comparing with the tree"));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    // Either a repair (which reports its comparison) or a plain verify ran.
    let (repair, verified) = if args.repair {
        // Under the target's lock and journal, like a sync (see sync::repair).
        let options = sync::RepairOptions {
            level,
            delete_extra: args.delete_extra,
            dry_run: args.dry_run,
            check_after: true,
            slice,
            sync: sync::Options { backend_name: chosen.label(), limits: args.limits.limits(), ..Default::default() },
        };
        let repaired = rt.block_on(place.repair(&repo, &options, &|_| {}, &AtomicBool::new(false)));
        let out = repaired
            .map(|r| {
                for n in r.generation.iter().flat_map(|g| &g.notes) {
                    eprintln!("note: {n}");
                }
                if let Some(g) = &r.generation
                    && let Some(s) = &g.prepared
                {
                    eprintln!("repaired into generation {s} and switched the target to it ({})", g.switch);
                }
                r.outcome
            })
            .map_err(unwrapped);
        let out = match place.host().filter(|_| place.is_atomic()) {
            Some(h) => out.with_context(|| format!("repairing {h} (a new generation, then a switch)")),
            None => out.with_context(|| format!("repairing {backend}")),
        };
        (Some(out), None)
    } else {
        // git judges every file's bytes, at the full level, of the whole tree.
        let options = match args.oracle {
            OracleArg::Git => verify::Options { level: Level::Full, oracle: verify::Oracle::Git, ..Default::default() },
            OracleArg::Treesync => verify::Options { level, slice, ..Default::default() },
        };
        let options = verify::Options { limits: args.limits.limits(), ..options };
        let report = rt.block_on(place.verify(&repo, &options, &|_| {}, &AtomicBool::new(false))).map_err(unwrapped);
        (None, Some(report.with_context(ctx)))
    };
    if let Some(bar) = &spinner {
        bar.finish_and_clear();
    }
    let (mut repair, mut verified) = (repair.transpose()?, verified.transpose()?);
    let report_mut = match (&mut repair, &mut verified) {
        (Some(r), _) => &mut r.report,
        (None, Some(report)) => report,
        (None, None) => unreachable!("a repair or a verify ran"),
    };
    // The rolling position: a `next/N` run that checked its slice moves it on (a repair may
    // have switched generations: the position goes to the current one); any slice tells when
    // the last full cycle completed.
    if slice.is_some() && report_mut.slice.is_some() {
        let current =
            if place.host().is_some() { rt.block_on(place.reader()).map_err(unwrapped)? } else { backend.clone() };
        rt.block_on(verify::roll(report_mut, Some(&*current), rolling && !args.dry_run)).with_context(ctx)?;
    }
    let repair = repair.as_ref();
    let report = match (repair, &verified) {
        (Some(r), _) => &r.report,
        (None, Some(report)) => report,
        (None, None) => unreachable!("a repair or a verify ran"),
    };
    let finished = repair.and_then(|r| r.finished.as_ref());
    let repaired = repair.and_then(|r| r.applied);
    let after = repair.and_then(|r| r.after.as_ref());
    let would_repair = repair.filter(|_| args.dry_run && !report.is_clean()).map(|r| r.planned);
    if would_repair.is_some() && !args.json {
        print_plan(&verify::repair_plan(&repo, report, args.delete_extra).with_context(ctx)?);
    }
    let clean = after.unwrap_or(report).is_clean();
    if args.json {
        print_json(&VerifyOutput {
            target: backend.to_string(),
            report,
            finished,
            repaired,
            after_repair: after,
            clean,
            would_repair,
            cost: backend.cost().into_iter().collect(),
        })?;
        return Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    print_text(report, &*backend, finished, repaired, clean);
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The verdict for people: what a repair finished first, each drift, the slice, the summary
/// line, the oracle and what a repair did.
fn print_text(
    report: &Report,
    backend: &dyn treesync_core::Backend,
    finished: Option<&sync::Outcome>,
    repaired: Option<OpCounts>,
    clean: bool,
) {
    if let Some(f) = finished {
        println!(
            "finished the interrupted sync to {} first: {}, {}",
            short(&f.commit),
            f.applied,
            human_bytes(f.applied.bytes)
        );
    } else if report.interrupted {
        println!(
            "the journal records a sync to {} that did not finish: compared with that commit (`treesync sync` or `verify --repair` finishes it)",
            short(&report.commit)
        );
    }
    for d in &report.drift {
        let what = match d {
            Drift::Missing { .. } => "missing".to_string(),
            Drift::Extra { dir: true, .. } => "extra directory".into(),
            Drift::Extra { .. } => "extra".into(),
            Drift::TypeChanged { expected, found, .. } => format!("is a {found}, should be a {expected}"),
            Drift::ModeChanged { executable: true, .. } => "should be executable".into(),
            Drift::ModeChanged { .. } => "should not be executable".into(),
            Drift::ContentChanged { .. } => "content differs".into(),
            Drift::LinkChanged { .. } => "symlink target differs".into(),
        };
        println!("{:<40} {what}", treesync_core::path::quote(d.path()));
    }
    if let Some(s) = &report.slice {
        let cycle = match s.last_full_cycle_unix {
            Some(at) => format!(
                "the last full cycle completed {} ago",
                human_age(treesync_core::state::now_unix().saturating_sub(at))
            ),
            None => "no full cycle completed yet".into(),
        };
        let next = s.next.map(|n| format!("; next: {n}/{}", s.n)).unwrap_or_default();
        println!(
            "slice {}/{}: {} directories listed, {} paths checked{next}; {cycle}",
            s.k, s.n, s.dirs, report.expected
        );
    }
    println!(
        "{} {}: {} entries checked at level {:?}, {} hashed, {} proven by stat data: {}",
        if report.is_clean() { "clean" } else { "DRIFT" },
        backend,
        report.expected,
        report.level,
        report.hashed,
        report.proven_by_stat,
        if report.is_clean() {
            "matches commit ".to_string() + &short(&report.commit)
        } else {
            format!("{} differences", report.drift.len())
        },
    );
    if let Some(o) = &report.oracle {
        println!(
            "judged by {}: {} files compared with the bytes git writes for them{}",
            o.git,
            o.judged,
            if o.not_judged > 0 {
                format!(
                    "; {} git does not write (submodules' files), compared with treesync's conversions",
                    o.not_judged
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(c) = repaired {
        println!(
            "repaired: {c}; verify afterwards: {}",
            if clean { "clean" } else { "STILL DRIFTING (extra entries need --delete-extra)" }
        );
    }
}
