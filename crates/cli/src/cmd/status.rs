//! `treesync status`: what is synced at a target, and whether a sync was interrupted or runs.

use anyhow::Context;
use serde::Serialize;
use treesync_core::sync;

use super::common::{make_backend, place, runtime};
use crate::args::StatusArgs;
use crate::exit::exit_code;
use crate::render::{BackendInfo, human_age, one_line, print_json, short};

/// `status --json`: the target's status and the backend that serves it now.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct StatusOutput {
    #[serde(flatten)]
    pub(crate) status: sync::Status,
    #[serde(flatten)]
    pub(crate) backend: BackendInfo,
    /// The target, as the backend names it (`local:/srv/site`), for the text form.
    #[serde(skip)]
    pub(crate) name: String,
    /// A directory target that does not exist (yet), for the text form: `target` says `empty`.
    #[serde(skip)]
    pub(crate) missing: bool,
    /// For a target kept in generations (`sync --atomic`): how it is switched and every
    /// generation (the state above is the current generation's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) generations: Option<treesync_core::generation::Status>,
}

/// One element of `status --all --json`: a mirror's status, or why it could not be read.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // one per mirror, printed and dropped
pub(crate) enum StatusRow {
    /// The status was read.
    Read {
        /// The mirror's name.
        mirror: String,
        /// Its target, as the config file says.
        target_url: String,
        #[serde(flatten)]
        status: StatusOutput,
    },
    /// It could not be.
    Failed {
        /// The mirror's name.
        mirror: String,
        /// Its target, as the config file says.
        target_url: String,
        /// The error, on one line.
        error: String,
    },
}

/// Open the target and read its status; `say_what` adds "reading the status of TARGET" to a
/// failure of the read (`status --all` names the mirror instead).
fn read(args: &StatusArgs, rt: &tokio::runtime::Runtime, say_what: bool) -> anyhow::Result<StatusOutput> {
    let chosen = make_backend(&args.target)?;
    let place = place(&args.target, chosen.clone(), treesync::Intent::Read, rt)?;
    let reader = rt.block_on(place.reader())?;
    let status = rt.block_on(sync::status(&*reader));
    let status =
        if say_what { status.with_context(|| format!("reading the status of {}", chosen.backend))? } else { status? };
    let generations = match place.host() {
        Some(h) => rt.block_on(treesync_core::generation::status(&**h))?,
        None => None,
    };
    let missing = status.target == "empty" && is_missing(&args.target);
    Ok(StatusOutput {
        status,
        backend: BackendInfo::of(&chosen),
        name: chosen.backend.to_string(),
        missing,
        generations,
    })
}

/// Whether the target is a directory (or `file://` URL) that does not exist: `status` says
/// `missing`, where the library says `empty` (a first sync creates it either way).
fn is_missing(target: &crate::args::TargetArgs) -> bool {
    let dir = treesync::Target::parse(target.target()).ok().and_then(|t| t.local_dir());
    dir.is_some_and(|d| std::fs::symlink_metadata(d).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound))
}

pub(crate) fn run(args: StatusArgs) -> anyhow::Result<()> {
    let rt = runtime()?;
    let out = read(&args, &rt, true)?;
    if args.json {
        return print_json(&out);
    }
    let status = &out.status;
    if out.missing {
        println!("target:  {} (missing: no such directory; the first sync creates it)", out.name);
    } else {
        println!("target:  {} ({})", out.name, status.target);
    }
    println!("backend: {} now, because {}", out.backend.backend, out.backend.backend_reason);
    match &status.state {
        None => println!("synced:  nothing yet"),
        Some(s) => {
            match &s.synced {
                Some(x) => match &s.path {
                    Some(path) => {
                        println!("synced:  {path}/ of commit {} (tree {}) at unix time {}", x.commit, x.tree, x.at_unix)
                    }
                    None => println!("synced:  commit {} (tree {}) at unix time {}", x.commit, x.tree, x.at_unix),
                },
                None => println!("synced:  nothing yet"),
            }
            // How the files are written: what a sync with other settings would change.
            if let Some(sel) = &s.select {
                let p = sel.patterns();
                println!("paths:   include {:?}, exclude {:?}", p.include, p.exclude);
            }
            if let Some(c) = &s.conversions {
                let mut how = Vec::new();
                if let Some(v) = &c.autocrlf {
                    how.push(format!("core.autocrlf={v}"));
                }
                if let Some(v) = &c.eol {
                    how.push(format!("core.eol={v}"));
                }
                if c.info_attributes.is_some() {
                    how.push("info/attributes".to_string());
                }
                if !c.drivers.is_empty() {
                    how.push(format!("filters {}", c.drivers.keys().cloned().collect::<Vec<_>>().join(", ")));
                }
                how.push(format!("lfs {}", c.lfs));
                if c.export {
                    how.push(format!("--export ({} expanded files)", s.export_subst.len()));
                }
                println!("files:   as git checkout writes them (.gitattributes; {})", how.join("; "));
            }
            if s.recurse_submodules {
                println!("submodules: filled (--recurse-submodules)");
            }
            println!("last sync by: {}", s.backend);
            if let Some(p) = &s.in_progress {
                println!(
                    "INTERRUPTED: a sync to commit {} started at unix time {} did not finish; the next `treesync sync` finishes it",
                    p.to_commit, p.started_unix
                );
                if let Some(h) = &p.holder {
                    println!("         it was run by {h}");
                }
            }
        }
    }
    if let Some(h) = &status.running {
        println!("running: a sync holds the lock now ({h})");
    }
    if let Some(g) = &out.generations {
        print_generations(g);
    }
    Ok(())
}

/// The generations of a target kept in them.
fn print_generations(g: &treesync_core::generation::Status) {
    match g.switch {
        Some(s) => println!("atomic:  generations in {}, switched by {s}", g.home),
        None => println!("atomic:  no longer (--no-atomic); retired generations left in {}", g.home),
    }
    for g1 in &g.generations {
        let commit = g1.commit.map(|c| short(&c)).unwrap_or_else(|| "-".into());
        let what = if g1.current {
            "current".to_string()
        } else if g1.preparing {
            "unfinished (the next sync that uses it finishes it)".to_string()
        } else {
            match &g1.retired {
                Some(at) => format!("retired at {at}"),
                None => "retired".to_string(),
            }
        };
        let held =
            if g1.held_by.is_empty() { String::new() } else { format!(", held open by process {:?}", g1.held_by) };
        println!("  {:<8} {commit:<12} {what}{held}", g1.slot);
    }
    if let Some(h) = &g.running {
        println!("running: a sync holds the generations' lock now ({h})");
    }
}

/// `status --all`: one line (or array element) per mirror; the exit code is the worst.
pub(crate) fn run_all(runs: Vec<(Option<String>, StatusArgs)>) -> anyhow::Result<std::process::ExitCode> {
    let rt = runtime()?;
    let json = runs.first().is_some_and(|(_, a)| a.json);
    let mut rows = Vec::new();
    let mut worst = 0u8;
    for (name, args) in runs {
        let mirror = name.unwrap_or_default();
        let target_url = args.target.target().to_string();
        rows.push(match read(&args, &rt, false) {
            Ok(status) => StatusRow::Read { mirror, target_url, status },
            Err(e) => {
                worst = worst.max(exit_code(&e));
                StatusRow::Failed { mirror, target_url, error: one_line(&e) }
            }
        });
    }
    if json {
        print_json(&rows)?;
        return Ok(std::process::ExitCode::from(worst));
    }
    let now = treesync_core::state::now_unix();
    println!("{:<16} {:<7} {:<12} {:<10} {:<12} TARGET", "MIRROR", "BACKEND", "SYNCED", "AGE", "STATE");
    for row in &rows {
        let (mirror, target_url, backend, synced, age, state) = match row {
            StatusRow::Failed { mirror, target_url, error } => {
                (mirror, target_url, "", "-".to_string(), "-".to_string(), format!("ERROR: {error}"))
            }
            StatusRow::Read { mirror, target_url, status: StatusOutput { status, backend, missing, .. } } => {
                let synced = status.state.as_ref().and_then(|s| s.synced);
                let state = if status.running.is_some() {
                    "running".to_string()
                } else if status.state.as_ref().is_some_and(|s| s.in_progress.is_some()) {
                    "INTERRUPTED".to_string()
                } else if synced.is_some() {
                    "ok".to_string()
                } else if *missing {
                    "missing".to_string()
                } else {
                    status.target.to_string()
                };
                (
                    mirror,
                    target_url,
                    backend.backend,
                    synced.map(|s| s.commit.to_hex_with_len(10).to_string()).unwrap_or_else(|| "-".into()),
                    synced.map(|s| human_age(now.saturating_sub(s.at_unix))).unwrap_or_else(|| "-".into()),
                    state,
                )
            }
        };
        println!("{mirror:<16} {backend:<7} {synced:<12} {age:<10} {state:<12} {target_url}");
    }
    Ok(std::process::ExitCode::from(worst))
}
