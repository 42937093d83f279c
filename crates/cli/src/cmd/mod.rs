//! One module per command: each takes its parsed flags, calls the library and renders what it
//! returns. Here: the dispatch, the mirrors of the config file, and opening the target.

pub(crate) mod adopt;
pub(crate) mod common;
pub(crate) mod document;
pub(crate) mod gitsync;
pub(crate) mod hooks;
pub(crate) mod pid1;
pub(crate) mod plan;
pub(crate) mod status;
pub(crate) mod sync;
pub(crate) mod verify;
pub(crate) mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use crate::args::{Cli, Command, Pick, SyncSpec, TargetArgs};
use crate::exit::exit_code;
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
        Command::GitSync(args) => Ok(gitsync::main("treesync git-sync", &args.args)),
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
