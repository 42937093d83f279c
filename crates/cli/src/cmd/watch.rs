//! `treesync watch`: keep targets following their refs ([`treesync_core::watch`]), printing its
//! events as log lines or JSON lines.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;
use treesync_core::duration::rfc3339;
use treesync_core::generation::{self, Host};
use treesync_core::path::quote;
use treesync_core::watch::{self, Event};
use treesync_core::{Repo, apply, sync};

use super::{generations, make_backend, runtime};
use crate::args::WatchArgs;
use crate::exit_code;
use crate::render::{error_text, human_bytes, short};

/// One line of `watch --json`: an event, when it happened and for which mirror.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct WatchLine<'a> {
    /// When, in UTC (RFC 3339, seconds).
    pub(crate) at: String,
    /// The mirror's name (`watch NAME`, `watch --all`).
    pub(crate) mirror: Option<&'a str>,
    #[serde(flatten)]
    pub(crate) event: &'a Event,
}

/// Watch one target, or every mirror at once (one process, one loop per repository: mirrors
/// of the same repository share each look at its refs and are synced at once), until SIGINT or
/// SIGTERM. A mirror that cannot start (its repository or target cannot be opened) is an
/// error printed at once; the others are watched all the same.
pub(crate) fn run(runs: Vec<(Option<String>, WatchArgs)>) -> anyhow::Result<ExitCode> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let rt = runtime()?;
    let code = rt.block_on(async {
        let flag = interrupt.clone();
        // The handlers are installed before any watch starts: a signal that arrives while the
        // first syncs run must stop the watch, not kill the process.
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            flag.store(true, Ordering::SeqCst);
        });
        let mut code = 0;
        let mut ready = Vec::new();
        for (name, args) in runs {
            match prepare(name.clone(), args).await {
                Ok(p) => ready.push(p),
                Err(e) => {
                    let tag = name.map(|n| format!("[{n}] ")).unwrap_or_default();
                    eprintln!("treesync: error: {tag}{}", error_text(&e));
                    code = code.max(exit_code(&e));
                }
            }
        }
        watch_prepared(&ready, &interrupt).await;
        anyhow::Ok(code)
    })?;
    Ok(ExitCode::from(code))
}

/// A mirror ready to be watched: its repository, target and options.
struct Prepared {
    /// `None`: a watch of the command line's target (no `[name]` tag, no `mirror` in JSON).
    name: Option<String>,
    json: bool,
    rev: String,
    repo: Repo,
    /// The repository's git directory, canonical: mirrors with the same one form a group.
    git_dir: PathBuf,
    backend: Arc<dyn treesync_core::Backend>,
    /// Set when the target is kept in generations (`--atomic`).
    generations: Option<(Arc<dyn Host>, generation::Options)>,
    options: watch::Options,
}

async fn prepare(name: Option<String>, args: WatchArgs) -> anyhow::Result<Prepared> {
    let tag = name.as_ref().map(|n| format!("[{n}] ")).unwrap_or_default();
    let rev = args.source.rev().with_context(|| format!("{tag}choosing the revision"))?;
    let repo = Repo::open(args.source.repo()).with_context(|| format!("{tag}opening the repository"))?;
    let chosen = make_backend(&args.target).with_context(|| format!("{tag}opening the target"))?;
    let options = watch::Options {
        interval: args.interval.unwrap_or(watch::DEFAULT_INTERVAL),
        verify_every: args.verify_every,
        repair: args.repair,
        sync: sync::Options {
            apply: apply::Options { jobs: args.target.jobs, batch: args.target.batch },
            backend_name: chosen.label(),
            limits: args.limits.limits(),
            recurse_submodules: args.source.recurse_submodules,
            select: args.source.select()?,
            export: args.source.export,
            lfs: args.source.lfs.unwrap_or_default(),
            ..Default::default()
        },
        ..Default::default()
    };
    // --atomic, or a target kept in generations: every sync prepares a generation and switches.
    let host = generations(&args.target)?;
    let atomic = match (&host, args.atomic.wanted()) {
        (Ok(_), Some(w)) => w,
        (Err(e), Some(true)) => anyhow::bail!("{tag}{e}"),
        (Ok(h), None) => generation::kept(&**h).await?,
        (Err(_), _) => false,
    };
    let generations = match host {
        Ok(h) if atomic => {
            let g = args.atomic.options(options.sync.clone());
            Some((h, g))
        }
        Ok(h) if generation::has_home(&*h).await? => {
            let g = args.atomic.options(options.sync.clone());
            let left = generation::leave(&*h, &g).await?;
            if left.restored {
                eprintln!("{tag}the target is a plain directory again (--no-atomic)");
            }
            None
        }
        _ => None,
    };
    let git_dir = std::fs::canonicalize(repo.git_dir()).unwrap_or_else(|_| repo.git_dir());
    Ok(Prepared { name, json: args.json, rev, repo, git_dir, backend: chosen.backend, generations, options })
}

/// Watch the prepared mirrors, grouped by repository, until the interrupt.
async fn watch_prepared(ready: &[Prepared], interrupt: &AtomicBool) {
    let mut groups: Vec<watch::Group<'_>> = Vec::new();
    let mut group_dirs: Vec<&PathBuf> = Vec::new();
    for (i, p) in ready.iter().enumerate() {
        let place = match &p.generations {
            Some((host, g)) => watch::Place::Generations(&**host, g),
            None => watch::Place::Plain(&*p.backend),
        };
        // The engine names mirrors by a string: the index keeps the command line's unnamed one
        // apart from the config's names.
        let mirror = watch::Mirror { name: i.to_string(), rev: p.rev.clone(), place, options: p.options.clone() };
        match group_dirs.iter().position(|d| **d == p.git_dir) {
            Some(g) => groups[g].mirrors.push(mirror),
            None => {
                group_dirs.push(&p.git_dir);
                let origin: Arc<dyn watch::Origin> = p.options.origin.clone().unwrap_or_else(|| Arc::new(watch::Poll));
                groups.push(watch::Group { repo: &p.repo, origin, mirrors: vec![mirror] });
            }
        }
    }
    let tags: Vec<String> =
        ready.iter().map(|p| p.name.as_ref().map(|n| format!("[{n}] ")).unwrap_or_default()).collect();
    let mut render = |index: &str, event: &Event| {
        let i: usize = index.parse().expect("mirrors are named by their index");
        render(event, ready[i].name.as_deref(), &tags[i], ready[i].json)
    };
    watch::watch_many(&groups, &mut render, interrupt).await;
}

/// One line per event: text for people (stderr for the watch's own life, stdout for results),
/// or a JSON object on stdout with `--json` (the final `stopped` stays a log line on stderr).
fn render(event: &Event, mirror: Option<&str>, tag: &str, json: bool) {
    let at = rfc3339(SystemTime::now());
    if json && !matches!(event, Event::Stopped) {
        let line = WatchLine { at, mirror, event };
        println!("{}", serde_json::to_string(&line).expect("events serialize"));
        return;
    }
    let text = match event {
        Event::Watching { rev, repo, target, waits, .. } => {
            format!("watching {rev} of {repo} for {target}, {waits}")
        }
        Event::Synced { outcome } => format!(
            "synced {} -> {}: {}, {} in {:.2}s",
            outcome.from.map(|s| short(&s.commit)).unwrap_or_else(|| "nothing".into()),
            short(&outcome.commit),
            outcome.applied,
            human_bytes(outcome.applied.bytes),
            outcome.elapsed.as_secs_f64()
        ),
        Event::Verified { report, clean: true } => {
            format!("verify: clean ({} entries, {} hashed)", report.expected, report.hashed)
        }
        Event::Verified { report, clean: false } => format!(
            "verify: DRIFT in {} paths, first: {}",
            report.drift.len(),
            report.drift.first().map(|d| quote(d.path()).into_owned()).unwrap_or_default()
        ),
        Event::Repaired { repaired } => format!("repaired: {repaired}"),
        Event::Error { message, retry_in, .. } => format!("error: {message}; retrying in {retry_in:?}"),
        Event::Stopping { message, .. } => format!("stopping: {message}"),
        Event::Stopped => "stopped".to_string(),
        other => other.name().to_string(),
    };
    let to_stderr =
        matches!(event, Event::Watching { .. } | Event::Error { .. } | Event::Stopping { .. } | Event::Stopped);
    if to_stderr {
        eprintln!("{at} {tag}{text}");
    } else {
        println!("{at} {tag}{text}");
    }
}
