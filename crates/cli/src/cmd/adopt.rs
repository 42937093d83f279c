//! `treesync adopt`: take over a git clone ([`treesync_core::adopt`]) and say what was recorded.

use std::process::ExitCode;

use serde::Serialize;
use treesync_core::adopt;

use super::common::runtime;
use crate::args::AdoptArgs;
use crate::render::{print_json, short};

/// `adopt --json`: the clone and what was (or would be) recorded as synced.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct AdoptOutput<'a> {
    /// The clone, as given.
    pub(crate) target: String,
    #[serde(flatten)]
    pub(crate) outcome: &'a adopt::Outcome,
}

pub(crate) fn run(args: AdoptArgs) -> anyhow::Result<ExitCode> {
    let backend = treesync_backend_local::LocalBackend::new(&args.target, Default::default());
    let options = adopt::Options { dry_run: args.dry_run, backend_name: "local".into() };
    let outcome = runtime()?.block_on(adopt::adopt(&args.target, &backend, &options))?;
    if args.json {
        print_json(&AdoptOutput { target: args.target.display().to_string(), outcome: &outcome })?;
    } else {
        println!(
            "{} {} at commit {} ({} index entries, no file read); the next sync is incremental. `treesync verify` proves the files match.",
            if outcome.dry_run { "would adopt" } else { "adopted" },
            args.target.display(),
            short(&outcome.commit),
            outcome.index_entries,
        );
    }
    Ok(ExitCode::SUCCESS)
}
