//! `treesync watch`: keep targets following their refs ([`treesync_core::watch`]), printing its
//! events as log lines or JSON lines.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;
use treesync_core::duration::rfc3339;
use treesync_core::path::quote;
use treesync_core::watch::{self, Event};
use treesync_core::{Repo, apply, sync};

use super::{generations, make_backend, remote, runtime};
use crate::args::WatchArgs;
use crate::exit_code;
use crate::monitor::{self, Monitor, notify::Notifier, probe::Probe};
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

/// Watch one target, or every mirror at once (one task each, one process), until SIGINT or
/// SIGTERM.
pub(crate) fn run(runs: Vec<(Option<String>, WatchArgs)>) -> anyhow::Result<ExitCode> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let monitor = Monitor::new();
    let mirrors: Vec<_> = runs
        .iter()
        .map(|(name, args)| monitor.mirror(name.as_deref().or(args.source.rev.as_deref()).unwrap_or_default()))
        .collect();
    let metrics_addr = runs.iter().find_map(|(_, a)| a.metrics_addr);
    let notifier = Notifier::from_env()?.map(Arc::new);
    let rt = runtime()?;
    let results = rt.block_on(async {
        if let Some(addr) = metrics_addr {
            monitor::http::serve(addr, monitor.clone()).await?;
        }
        if let Some(n) = &notifier {
            tokio::spawn(n.clone().run(monitor.clone(), interrupt.clone()));
        }
        let (flag, notifier) = (interrupt.clone(), notifier.clone());
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
            if let Some(n) = notifier {
                n.stopping();
            }
        });
        let interrupt = &*interrupt;
        let watches = runs.into_iter().zip(mirrors).map(|((name, args), mirror)| async move {
            let r = watch_one(name, args, interrupt, &mirror).await;
            mirror.ended(r.as_ref().err().map(error_text));
            r
        });
        anyhow::Ok(futures::future::join_all(watches).await)
    })?;
    let mut code = 0;
    for r in results {
        if let Err(e) = r {
            eprintln!("treesync: error: {}", error_text(&e));
            code = code.max(exit_code(&e));
        }
    }
    Ok(ExitCode::from(code))
}

async fn watch_one(
    name: Option<String>,
    args: WatchArgs,
    interrupt: &AtomicBool,
    mirror: &monitor::Mirror,
) -> anyhow::Result<()> {
    let tag = name.as_ref().map(|n| format!("[{n}] ")).unwrap_or_default();
    let rev = args.source.rev().with_context(|| format!("{tag}choosing the revision"))?;
    // A URL: the watch's origin is the remote (each look asks the server, fetches what moved),
    // its repository the cache's.
    let remote = remote(args.source.repo(), args.source.cache_dir.as_deref())
        .with_context(|| format!("{tag}opening the repository's cache"))?;
    let repo = Repo::open(remote.as_ref().map_or(args.source.repo(), |r| r.path()))
        .with_context(|| format!("{tag}opening the repository"))?;
    let chosen = make_backend(&args.target).with_context(|| format!("{tag}opening the target"))?;
    let mut options = watch::Options {
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
        // A URL: the remote asks its server every interval. A local repository wakes the watch
        // by inotify; polling where that cannot work (said in the `watching` line), or when asked.
        origin: Some(match remote {
            Some(r) => Arc::new(r) as Arc<dyn watch::Origin>,
            None => watch::events::origin(&repo.git_dir(), std::slice::from_ref(&rev), args.poll),
        }),
        ..Default::default()
    };
    // The monitor (--metrics-addr, systemd) sees every event and the loop's rhythm.
    options.origin = Some(Arc::new(Probe::new(options.origin.take().unwrap_or(Arc::new(watch::Poll)), mirror.clone())));
    options.on_progress = Some(mirror.on_progress());
    let hooks = {
        let (mirror, line_tag, json) = (name.clone(), tag.clone(), args.json);
        let on_report = move |r: &treesync_core::hook::Report| {
            render(&Event::Hook { report: r.clone() }, mirror.as_deref(), &line_tag, json);
        };
        super::hooks::start(&args.hooks, Arc::new(on_report)).with_context(|| format!("{tag}starting the hooks"))?
    };
    let mut render = |event: &Event| {
        mirror.observe(event, &repo);
        render(event, name.as_deref(), &tag, args.json);
        if let Event::Synced { outcome } = event
            && !hooks.is_empty()
        {
            let body = super::hooks::watch_body(outcome, &chosen);
            hooks.submit(super::hooks::job(outcome, &args.target, &args.hooks, &body));
        }
    };
    // --atomic, or a target kept in generations: every sync prepares a generation and switches.
    let host = generations(&args.target)?;
    let atomic = match (&host, args.atomic.wanted()) {
        (Ok(_), Some(w)) => w,
        (Err(e), Some(true)) => anyhow::bail!("{tag}{e}"),
        (Ok(h), None) => treesync_core::generation::kept(&**h).await?,
        (Err(_), _) => false,
    };
    match host {
        Ok(h) if atomic => {
            let g = args.atomic.options(options.sync.clone());
            watch::watch_generations(&repo, &rev, &*h, &g, &options, &mut render, interrupt).await;
        }
        Ok(h) if treesync_core::generation::has_home(&*h).await? => {
            let g = args.atomic.options(options.sync.clone());
            let left = treesync_core::generation::leave(&*h, &g).await?;
            if left.restored {
                eprintln!("{tag}the target is a plain directory again (--no-atomic)");
            }
            watch::watch(&repo, &rev, &*chosen.backend, &options, &mut render, interrupt).await;
        }
        _ => {
            watch::watch(&repo, &rev, &*chosen.backend, &options, &mut render, interrupt).await;
        }
    }
    Ok(())
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
        Event::Hook { report } => super::hooks::text(report),
        other => other.name().to_string(),
    };
    let to_stderr = matches!(
        event,
        Event::Watching { .. } | Event::Error { .. } | Event::Stopping { .. } | Event::Stopped | Event::Hook { .. }
    );
    if to_stderr {
        eprintln!("{at} {tag}{text}");
    } else {
        println!("{at} {tag}{text}");
    }
}
