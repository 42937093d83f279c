//! `treesync plan`: what `sync` would do, changing nothing.

use anyhow::Context;
use serde::Serialize;
use treesync_core::{ObjectId, Plan, sync};

use super::common::runtime;
use crate::args::PlanArgs;
use crate::render::{print_json, print_plan, print_replaced, short};

/// `plan --json`: the plan to the requested commit, and the one that finishes an interrupted
/// sync first.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PlanOutput<'a> {
    /// The target, as the backend names it.
    pub(crate) target: String,
    /// The commit planned for.
    #[serde(serialize_with = "treesync_core::json::id")]
    #[schemars(with = "treesync_core::json::schema::ObjectId")]
    pub(crate) commit: ObjectId,
    /// Its tree, or the tree of one of its directories (a subtree sync, `REV:PATH`).
    #[serde(serialize_with = "treesync_core::json::id")]
    #[schemars(with = "treesync_core::json::schema::ObjectId")]
    pub(crate) tree: ObjectId,
    /// The directory of `commit` whose tree `tree` is (a subtree sync: `REV:PATH` or
    /// `--path`); absent for the whole tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    /// A takeover (`--force`).
    pub(crate) takeover: bool,
    /// What a takeover removes and writes over.
    pub(crate) replaced: Option<&'a sync::Replaced>,
    /// The plan that finishes an interrupted sync first.
    pub(crate) resume: Option<&'a Plan>,
    /// The plan to `commit`.
    pub(crate) plan: &'a Plan,
    /// The submodules whose trees the plans read (`--recurse-submodules`); absent when none.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) submodules: &'a [treesync_core::submodule::Used],
    /// The paths selected (`--include`/`--exclude`); absent: every path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) select: Option<&'a treesync_core::select::Select>,
    /// How the files are written: the repository's conversion settings.
    pub(crate) conversions: &'a treesync_core::convert::Settings,
}

pub(crate) fn run(args: PlanArgs) -> anyhow::Result<()> {
    let super::common::Opened { rev, repo, target: opened } = super::common::open(&args.spec)?;
    let rt = runtime()?;
    // A target kept in generations (or becoming so with --atomic): plan from the generation
    // the next sync would bring up to date.
    let place =
        super::common::place(&args.spec.target, opened, treesync::Intent::Write(args.spec.atomic.wanted()), &rt)?;
    let mut backend = place.opened.backend.clone();
    let mut note = None;
    if let (true, Some(host)) = (place.is_atomic(), place.host()) {
        let options = args.spec.atomic.options(sync::Options::default());
        match rt.block_on(place.planned_from(&options)).map_err(super::common::unwrapped)? {
            Some(from) => {
                backend = from;
                note = Some(format!(
                    "planned from the generation at {backend} (--atomic: the sync prepares it, then switches the target)"
                ));
            }
            None => note = Some(format!("--atomic: the first generation of {host} is a full checkout")),
        }
    }
    let options = sync::PrepareOptions { force: args.force, ..args.spec.settings().prepare_options()? };
    let target = treesync::Target::parse(args.spec.target.target())?;
    treesync::check_place(&target, &repo, args.force)?;
    let prepared = super::common::place_hint(
        rt.block_on(sync::prepare(&repo, &rev, &*backend, &options)).map_err(Into::into),
        &target,
        &repo,
    )
    .with_context(|| format!("planning {rev} for {backend}"))?;
    if args.json {
        return print_json(&PlanOutput {
            target: backend.to_string(),
            commit: prepared.to.commit,
            tree: prepared.to.tree,
            path: prepared.path.clone(),
            takeover: prepared.takeover,
            replaced: prepared.replaced.as_ref(),
            resume: prepared.resume.as_ref().map(|(_, p)| p),
            plan: &prepared.main,
            submodules: &prepared.submodules,
            select: prepared.select.as_ref(),
            conversions: prepared.conversions(),
        });
    }
    if let Some(n) = &note {
        println!("{n}");
    }
    if let Some((p, plan)) = &prepared.resume {
        println!("first finish the interrupted sync to {}:", short(&p.to_commit));
        print_plan(plan);
    }
    print_plan(&prepared.main);
    if let Some(r) = &prepared.replaced {
        print_replaced(r, true);
    }
    Ok(())
}
