//! One module per command: each takes its parsed flags, calls the library and renders what it
//! returns. Here: the dispatch, the mirrors of the config file, and opening the target.

pub(crate) mod adopt;
pub(crate) mod hooks;
pub(crate) mod plan;
pub(crate) mod status;
pub(crate) mod sync;
pub(crate) mod verify;
pub(crate) mod watch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use treesync_core::Repo;

use crate::args::{Cli, Command, Pick, SyncSpec, TargetArgs};
use crate::exit_code;
use crate::render::error_text;
use crate::{config, generate};

pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let cfg = cli.config;
    // A mirror's settings go under the command line's, group by group (`Settings::or`: flag >
    // mirror > defaults; the config file merged the mirror's over its defaults).
    match cli.command {
        Command::Sync(args) => {
            let pick = args.spec.pick.clone();
            each(
                expand(&cfg, &pick, args, |a, m| {
                    fill_spec(&mut a.spec, m);
                    a.hooks.settings = a.hooks.settings.clone().or(m.settings.hooks.clone());
                    a.hooks.mirror = Some(m.name.clone());
                })?,
                sync::run,
            )
        }
        Command::Plan(args) => {
            let pick = args.spec.pick.clone();
            each(expand(&cfg, &pick, args, |a, m| fill_spec(&mut a.spec, m))?, plan::run)
        }
        Command::Status(args) => {
            let pick = args.pick.clone();
            let runs = expand(&cfg, &pick, args, |a, m| fill_target(&mut a.target, m))?;
            if pick.all {
                return status::run_all(runs);
            }
            each(runs, status::run)
        }
        Command::Verify(args) => {
            let pick = args.pick.clone();
            let runs = expand(&cfg, &pick, args, |a, m| {
                a.repo = Some(m.repo.clone());
                a.cache = a.cache.clone().or(m.settings.cache.clone());
                fill_target(&mut a.target, m);
                a.limits = a.limits.clone().or(m.settings.limits.clone());
            })?;
            each_code(runs, verify::run)
        }
        Command::Watch(args) => {
            let pick = args.spec.pick.clone();
            watch::run(expand(&cfg, &pick, args, |a, m| {
                fill_spec(&mut a.spec, m);
                a.hooks.settings = a.hooks.settings.clone().or(m.settings.hooks.clone());
                a.hooks.mirror = Some(m.name.clone());
                a.watch = a.watch.clone().or(m.settings.watch.clone());
                a.metrics_addr = a.metrics_addr.or(m.metrics_addr);
            })?)
        }
        Command::Adopt(args) => adopt::run(args),
        Command::Generate(args) => generate::run(Cli::command(), &args.what, &args.out_dir).map(|()| ExitCode::SUCCESS),
    }
}

/// The invocations a command stands for: itself, or one per mirror of the config file.
fn expand<A: Clone>(
    config_path: &Option<PathBuf>,
    pick: &Pick,
    args: A,
    fill: impl Fn(&mut A, &config::MirrorSpec),
) -> anyhow::Result<Vec<(Option<String>, A)>> {
    if pick.mirror.is_none() && !pick.all {
        return Ok(vec![(None, args)]);
    }
    let path = config_path.clone().or_else(config::default_path).context(
        "no config file to read mirrors from: pass --config PATH (the default needs $XDG_CONFIG_HOME or $HOME)",
    )?;
    let cfg = config::load(&path)?;
    let mirrors: Vec<&config::MirrorSpec> = match &pick.mirror {
        Some(name) => vec![cfg.get(name)?],
        None => cfg.mirrors.iter().collect(),
    };
    Ok(mirrors
        .into_iter()
        .map(|m| {
            let mut a = args.clone();
            fill(&mut a, m);
            (Some(m.name.clone()), a)
        })
        .collect())
}

/// A mirror's repository, revision and target, and its settings under the command line's.
fn fill_spec(spec: &mut SyncSpec, m: &config::MirrorSpec) {
    let source = &mut spec.source;
    source.repo = Some(m.repo.clone());
    source.rev = Some(m.rev.clone());
    source.path = source.path.take().or_else(|| m.path.clone());
    source.cache = source.cache.clone().or(m.settings.cache.clone());
    source.content = source.content.clone().or(m.settings.content.clone());
    fill_target(&mut spec.target, m);
    spec.limits = spec.limits.clone().or(m.settings.limits.clone());
    spec.atomic = spec.atomic.clone().or(m.settings.generations.clone());
}

/// A mirror's target, and its settings under the command line's.
fn fill_target(target: &mut TargetArgs, m: &config::MirrorSpec) {
    target.target_arg = Some(m.target.clone());
    target.settings = target.settings.clone().or(m.settings.target.clone());
}

/// Run `f` for each invocation. One invocation: its error is the command's. Several (mirrors):
/// every one runs, errors are printed with the mirror's name, the exit code is the worst.
fn each<A>(runs: Vec<(Option<String>, A)>, f: impl Fn(A) -> anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    each_code(runs, |a| f(a).map(|()| ExitCode::SUCCESS))
}

fn each_code<A>(
    mut runs: Vec<(Option<String>, A)>,
    f: impl Fn(A) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    if runs.len() == 1 && runs[0].0.is_none() {
        let (_, a) = runs.pop().expect("one");
        return f(a);
    }
    let mut worst = 0u8;
    for (name, a) in runs {
        let name = name.unwrap_or_default();
        match f(a) {
            Ok(code) if code == ExitCode::SUCCESS => {}
            Ok(_) => worst = worst.max(1),
            Err(e) => {
                eprintln!("treesync: error: [{name}] {}", error_text(&e));
                worst = worst.max(exit_code(&e));
            }
        }
    }
    Ok(ExitCode::from(worst))
}

/// `--repo` as a remote repository when it is a URL ([`treesync_remote::is_url`]): its cache
/// repository under `cache_dir` (or the default cache directory), created if missing; `None` for
/// a local path. Does not touch the network.
pub(crate) fn remote(repo: &Path, cache_dir: Option<&Path>) -> anyhow::Result<Option<treesync_remote::Remote>> {
    let Some(url) = repo.to_str().filter(|r| treesync_remote::is_url(r)) else { return Ok(None) };
    let options = treesync_remote::OpenOptions { cache_dir: cache_dir.map(Path::to_path_buf) };
    Ok(Some(treesync_remote::Remote::open(url, &options)?))
}

/// Open `--repo`: a local repository as it is; a URL's cache repository after bringing `revs`
/// up to date in it (one request to the server, and one fetch when a ref moved).
pub(crate) fn open_repo(repo: &Path, cache_dir: Option<&Path>, revs: &[String]) -> anyhow::Result<Repo> {
    let Some(remote) = remote(repo, cache_dir)? else { return Ok(Repo::open(repo)?) };
    if !revs.is_empty() {
        let out = remote.update(revs)?;
        for r in &out.refs {
            let how = if r.fetched { "fetched" } else { "already in the cache" };
            tracing::info!("{}: {} is {} ({how}; {} request(s))", remote.url(), r.name, r.id, out.requests);
        }
    }
    Ok(Repo::open(remote.path())?)
}

/// Refuse a selection (`--include`/`--exclude`) that selects no path of the tree `rev` names
/// before anything is written: syncing it would empty the target
/// ([`treesync_core::select::Select::check_selects_some`]). A revision that does not resolve is
/// left to the sync, which says why.
pub(crate) fn check_selection(
    repo: &Repo,
    rev: &str,
    select: &treesync_core::select::Select,
    recurse_submodules: bool,
) -> anyhow::Result<()> {
    if select.is_all() {
        return Ok(());
    }
    let Ok(resolved) = repo.resolve(rev) else { return Ok(()) };
    Ok(select.check_selects_some(repo, rev, resolved, recurse_submodules)?)
}

/// What `sync` and `plan` work with: the revision, the repository (a URL's cache brought up to
/// date) and the target opened.
pub(crate) struct Opened {
    pub(crate) rev: String,
    pub(crate) repo: Repo,
    pub(crate) target: treesync::Opened,
}

/// Open what `spec` names; a selection that selects nothing is refused before the target is
/// opened.
pub(crate) fn open(spec: &SyncSpec) -> anyhow::Result<Opened> {
    let source = &spec.source;
    let rev = source.rev()?;
    let select = source.select()?;
    let repo = open_repo(source.repo(), source.cache.cache_dir.as_deref(), std::slice::from_ref(&rev))?;
    check_selection(&repo, &rev, &select, source.content.recurse_submodules.unwrap_or_default())?;
    let target = make_backend(&spec.target)?;
    Ok(Opened { rev, repo, target })
}

/// The async runtime of one command.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // Blocking filesystem work runs on tokio's blocking pool; the async side is light, so one
    // thread drives it (and a sync of ten files starts no worker threads it does not need).
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// Open the target as the library's front door does ([`treesync::open`]), with the flags.
pub(crate) fn make_backend(args: &TargetArgs) -> anyhow::Result<treesync::Opened> {
    // The executor runs with `--jobs` when given, else the backend's policy: both are the
    // decided `budgets.jobs` (the library gives the backend that policy).
    Ok(treesync::open(&treesync::Target::parse(args.target())?, &target_options(args))?)
}

/// A target refused as not written by treesync, where `--force` would be refused too (the root,
/// a home, a repository: [`treesync::unmanaged_hint`]): that refusal instead, so the hint
/// does not offer `--force`.
pub(crate) fn place_hint<T>(
    result: anyhow::Result<T>,
    target: &treesync::Target,
    repo: &treesync_core::Repo,
) -> anyhow::Result<T> {
    result.map_err(|e| {
        let unmanaged =
            e.chain().any(|c| matches!(c.downcast_ref(), Some(treesync_core::sync::Error::Unmanaged { .. })));
        match treesync::unmanaged_hint(target, repo).filter(|_| unmanaged) {
            Some(refusal) => anyhow::Error::from(refusal),
            None => e,
        }
    })
}

/// What kind of place the target opened as `opened` is for `intent` ([`treesync::Place::of`]:
/// the one decision about generations; the backend [`make_backend`] chose stands, the mount
/// table is not read again).
pub(crate) fn place(
    args: &TargetArgs,
    opened: treesync::Opened,
    intent: treesync::Intent,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<treesync::Place> {
    let target = treesync::Target::parse(args.target())?;
    rt.block_on(treesync::Place::of(&target, opened, &target_options(args), intent)).map_err(|e| match e {
        treesync::PlaceError::Open(e) => e.into(),
        treesync::PlaceError::Generations(e) => unwrapped(e),
        e => e.into(),
    })
}

/// A failure of an operation on a [`treesync::Place`] as the error the core gave it, so that
/// exit codes and hints see the sync's or the verify's own error.
pub(crate) fn unwrapped(e: treesync_core::generation::Error) -> anyhow::Error {
    use treesync_core::{generation, sync};
    match e {
        generation::Error::Sync(sync::Error::Verify(e)) => e.into(),
        generation::Error::Sync(e) => e.into(),
        e => e.into(),
    }
}

/// The library's target options, from the flags.
pub(crate) fn target_options(args: &TargetArgs) -> treesync::TargetOptions {
    args.settings.options()
}
