//! `cargo xtask ci`: the test suite, as `.ci/run` runs it.

use crate::util::{project_root, run_status};

pub fn run(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("ci takes no options, got {args:?}"));
    }
    for tool in ["git", "strace", "tar"] {
        if std::process::Command::new(tool).arg("--version").output().is_err() {
            eprintln!("xtask ci: {tool} is missing; tests that need it are skipped (.ci/run installs it with apt)");
        }
    }
    run_status(std::process::Command::new("cargo").current_dir(project_root()).args(["test", "--workspace"]))
}
