//! The command line's tests, one module per subject, in one test binary: each file in `tests/`
//! used to be its own binary linking every dependency (40 links per build). The helpers they all
//! use are `treesync_testkit::cli`'s, bound here to this crate's `treesync` binary.

use std::path::Path;
use std::process::Output;

use treesync_testkit::cli::Cli;

mod adopt;
mod atomic;
mod atomic_ops;
mod atomic_readers;
mod cli;
mod config;
mod config_mirrors;
mod crash;
mod deb;
mod deploy;
mod export_subst;
mod faithful;
mod file_url;
mod filters;
mod gitsync;
mod gitsync_flags;
mod gitsync_rest;
mod gitsync_run;
mod hooks;
mod hostile_shapes;
mod json;
mod kubernetes;
mod lfs;
mod memory;
mod metrics;
mod mistakes;
mod nfs;
mod nfs_url;
mod oracle;
mod pack_index;
mod real_history;
mod real_repo;
mod remote;
mod s3;
mod select_export;
mod submodules;
mod subtree;
mod trust;
mod verify;
mod verify_by_git;
mod verify_converted;
mod verify_slices;
mod watch;
mod watch_all;

/// The `treesync` binary built with these tests.
pub fn cli() -> Cli {
    Cli::new(env!("CARGO_BIN_EXE_treesync"))
}

/// Run `treesync ARGS`.
pub fn treesync(args: &[&str]) -> Output {
    cli().run(args)
}

/// Run `treesync ARGS`, expect success, return stdout.
pub fn ok(args: &[&str]) -> String {
    cli().ok(args)
}

/// The `--json` document of `ARGS`, validated against the JSON schema `schema_text`.
pub fn json(args: &[&str], schema_text: &str) -> serde_json::Value {
    cli().json(args, schema_text)
}

/// `treesync sync` with no system or global git config.
pub fn sync_without_git_config(repo: &Path, rev: &str, target: &Path) -> Output {
    cli().sync_without_git_config(repo, rev, target)
}

/// `treesync verify --json`: exit code (0 or 1) and report.
pub fn verify(repo: &Path, target: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    cli().verify(repo, target, extra)
}

/// Every op of a `plan --json` document, phase after phase.
pub fn plan_ops(plan: &serde_json::Value) -> Vec<&serde_json::Value> {
    let phases = plan["plan"]["phases"].as_array().expect("phases");
    phases.iter().flat_map(|phase| phase["ops"].as_array().expect("ops")).collect()
}

/// The JSON schemas of `--json` outputs (docs/schema).
pub mod schema {
    pub const ADOPT: &str = include_str!("../../../../docs/schema/adopt.schema.json");
    pub const PLAN: &str = include_str!("../../../../docs/schema/plan.schema.json");
    pub const STATUS: &str = include_str!("../../../../docs/schema/status.schema.json");
    pub const SYNC: &str = include_str!("../../../../docs/schema/sync.schema.json");
    pub const VERIFY: &str = include_str!("../../../../docs/schema/verify.schema.json");
    pub const WATCH_EVENT: &str = include_str!("../../../../docs/schema/watch-event.schema.json");
}
