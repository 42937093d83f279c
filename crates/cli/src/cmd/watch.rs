//! `treesync watch`: keep targets following their refs ([`treesync_watch::watch`]), printing its
//! events as log lines or JSON lines.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;
use treesync_core::duration::rfc3339;
use treesync_core::generation;
use treesync_core::path::quote;
use treesync_core::{Repo, sync};
use treesync_watch::watch::{self, Event};

use super::common::{make_backend, remote, runtime};
use crate::args::WatchArgs;
use crate::exit::exit_code;
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

/// Watch one target, or every mirror at once (one process, one loop per repository: mirrors
/// of the same repository share each look at its refs and are synced at once), until SIGINT or
/// SIGTERM. A mirror that cannot start (its repository or target cannot be opened) is an
/// error printed at once; the others are watched all the same.
pub(crate) fn run(runs: Vec<(Option<String>, WatchArgs)>) -> anyhow::Result<ExitCode> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let monitor = Monitor::new();
    let mirrors: Vec<_> = runs
        .iter()
        .map(|(name, args)| monitor.mirror(name.as_deref().or(args.spec.source.rev.as_deref()).unwrap_or_default()))
        .collect();
    let metrics_addr = runs.iter().find_map(|(_, a)| a.metrics_addr);
    let notifier = Notifier::from_env()?.map(Arc::new);
    // Mirrors of one repository share one plan per (from, to): the first to need it plans it.
    let plans = Arc::new(treesync_core::plan::Cache::default());
    let rt = runtime()?;
    let code = rt.block_on(async {
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
        let mut code = 0;
        let mut ready = Vec::new();
        for ((name, args), mirror) in runs.into_iter().zip(mirrors) {
            match prepare(name.clone(), args, mirror.clone(), &plans).await {
                Ok(p) => ready.push(p),
                Err(e) => {
                    let tag = name.map(|n| format!("[{n}] ")).unwrap_or_default();
                    eprintln!("treesync: error: {tag}{}", error_text(&e));
                    mirror.ended(Some(error_text(&e)));
                    code = code.max(exit_code(&e));
                }
            }
        }
        watch_prepared(&ready, &interrupt).await;
        for p in &ready {
            p.mirror.ended(None);
        }
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
    /// The target, plain or kept in generations (`--atomic`).
    place: treesync::Place,
    /// The options of its generations, when it is kept in them.
    generations: generation::Options,
    options: watch::Options,
    /// Where its group learns that the refs moved, for a URL: the remote. For a local
    /// repository the group's origin is made once for all its mirrors' refs
    /// ([`watch_prepared`]).
    remote: Option<Arc<dyn watch::Origin>>,
    /// `--poll`: poll the local repository instead of watching it for events.
    poll: bool,
    /// Its metrics and health.
    mirror: monitor::Mirror,
    /// `--exec-after`, `--webhook`.
    hooks: treesync_watch::hook::Runner,
    hook_args: crate::args::HookArgs,
    target: crate::args::TargetArgs,
    chosen: treesync::Opened,
}

async fn prepare(
    name: Option<String>,
    args: WatchArgs,
    mirror: monitor::Mirror,
    plans: &Arc<treesync_core::plan::Cache>,
) -> anyhow::Result<Prepared> {
    let tag = name.as_ref().map(|n| format!("[{n}] ")).unwrap_or_default();
    let rev = args.spec.source.rev().with_context(|| format!("{tag}choosing the revision"))?;
    let select = args.spec.source.select()?;
    // A URL: the origin is the remote (each look asks the server, fetches what moved), the
    // repository the cache's.
    let remote = remote(args.spec.source.repo(), args.spec.source.cache.cache_dir.as_deref())
        .with_context(|| format!("{tag}opening the repository's cache"))?;
    let repo = Repo::open(remote.as_ref().map_or(args.spec.source.repo(), |r| r.path()))
        .with_context(|| format!("{tag}opening the repository"))?;
    // A selection that selects nothing of the commit there now: refused before the first sync.
    super::common::check_selection(
        &repo,
        &rev,
        &select,
        args.spec.source.content.recurse_submodules.unwrap_or_default(),
    )?;
    let chosen = make_backend(&args.spec.target).with_context(|| format!("{tag}opening the target"))?;
    let remote = remote.map(|r| Arc::new(r) as Arc<dyn watch::Origin>);
    let settings = treesync::Settings { watch: args.watch.clone(), ..args.spec.settings() };
    let options = watch::Options {
        interval: settings.watch.interval.unwrap_or(watch::DEFAULT_INTERVAL),
        verify_every: settings.watch.verify_every(),
        verify_slices: settings.watch.verify_slices,
        repair: settings.watch.repair.unwrap_or_default(),
        sync: sync::Options { plans: Some(plans.clone()), ..settings.sync_options(&chosen)? },
        // The monitor (--metrics-addr, systemd) hears each batch of a sync.
        on_progress: Some(mirror.on_progress()),
        ..Default::default()
    };
    let hooks = {
        let (mirror, line_tag, json) = (name.clone(), tag.clone(), args.json);
        let on_report = move |r: &treesync_watch::hook::Report| {
            render(&Event::Hook { report: r.clone() }, mirror.as_deref(), &line_tag, json);
        };
        super::hooks::start(&args.hooks, Arc::new(on_report)).with_context(|| format!("{tag}starting the hooks"))?
    };
    // --atomic, or a target kept in generations: every sync prepares a generation and switches.
    let target = treesync::Target::parse(args.spec.target.target())?;
    let intent = treesync::Intent::Write(args.spec.atomic.wanted());
    let mut place = treesync::Place::of(&target, chosen.clone(), &args.spec.target.settings.options(), intent)
        .await
        .map_err(|e| match e {
            treesync::PlaceError::Generations(e) => super::common::unwrapped(e),
            e => anyhow::anyhow!("{tag}{e}"),
        })?;
    let generations = args.spec.atomic.options(options.sync.clone());
    if place.leave(&generations).await?.is_some_and(|left| left.restored) {
        eprintln!("{tag}the target is a plain directory again (--no-atomic)");
    }
    let git_dir = std::fs::canonicalize(repo.git_dir()).unwrap_or_else(|_| repo.git_dir());
    Ok(Prepared {
        name,
        json: args.json,
        rev,
        repo,
        git_dir,
        place,
        generations,
        options,
        remote,
        poll: args.watch.poll.unwrap_or_default(),
        mirror,
        hooks,
        hook_args: args.hooks,
        target: args.spec.target,
        chosen,
    })
}

/// Watch the prepared mirrors, grouped by repository, until the interrupt.
async fn watch_prepared(ready: &[Prepared], interrupt: &AtomicBool) {
    let mut groups: Vec<watch::Group<'_>> = Vec::new();
    let mut group_dirs: Vec<&PathBuf> = Vec::new();
    for (i, p) in ready.iter().enumerate() {
        let place = p.place.watched(&p.generations);
        // The engine names mirrors by a string: the index keeps the command line's unnamed one
        // apart from the config's names.
        let mirror = watch::Mirror { name: i.to_string(), rev: p.rev.clone(), place, options: p.options.clone() };
        match group_dirs.iter().position(|d| **d == p.git_dir) {
            Some(g) => groups[g].mirrors.push(mirror),
            None => {
                group_dirs.push(&p.git_dir);
                // Filled in below, once the group's refs are known.
                let origin = p.remote.clone().unwrap_or_else(|| Arc::new(watch::Poll));
                groups.push(watch::Group { repo: &p.repo, origin, mirrors: vec![mirror] });
            }
        }
    }
    // A local repository: one inotify watch (or one poller) for the refs of all its mirrors;
    // one mirror asking for --poll makes its group poll.
    for (g, dir) in groups.iter_mut().zip(&group_dirs) {
        let members: Vec<&Prepared> = ready.iter().filter(|p| &p.git_dir == *dir).collect();
        if members[0].remote.is_none() {
            let revs: Vec<String> = members.iter().map(|p| p.rev.clone()).collect();
            g.origin = watch::events::origin(dir, &revs, members.iter().any(|p| p.poll));
        }
    }
    let tags: Vec<String> =
        ready.iter().map(|p| p.name.as_ref().map(|n| format!("[{n}] ")).unwrap_or_default()).collect();
    // The monitor (--metrics-addr, systemd) hears the rhythm of each group's loop.
    for (g, dir) in groups.iter_mut().zip(&group_dirs) {
        let mirrors = ready.iter().filter(|p| &p.git_dir == *dir).map(|p| p.mirror.clone()).collect();
        g.origin = Arc::new(Probe::new(g.origin.clone(), mirrors));
    }
    let mut render = |index: &str, event: &Event| {
        let i: usize = index.parse().expect("mirrors are named by their index");
        let p = &ready[i];
        p.mirror.observe(event, &p.repo);
        render(event, p.name.as_deref(), &tags[i], p.json);
        if let Event::Synced { outcome } = event
            && !p.hooks.is_empty()
        {
            let body = super::hooks::watch_body(outcome, &p.chosen);
            p.hooks.submit(super::hooks::job(outcome, &p.target, &p.hook_args, &body));
        }
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
