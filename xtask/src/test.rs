//! `cargo xtask ci`: the test suite and the release tarball check, as `.ci/run` runs them
//! (without `.ci/run`'s installs).

use xtask::util::{project_root, run_status};

pub fn run(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("ci takes no options, got {args:?}"));
    }
    for tool in ["git", "strace", "tar", "fusermount3"] {
        if std::process::Command::new(tool).arg("--version").output().is_err() {
            eprintln!("xtask ci: {tool} is missing; tests that need it are skipped (.ci/run installs it with apt)");
        }
    }
    run_status(std::process::Command::new("cargo").current_dir(project_root()).args(["test", "--workspace"]))?;
    run_status(
        std::process::Command::new("cargo").current_dir(project_root()).env("RUSTDOCFLAGS", "-D warnings").args([
            "doc",
            "--no-deps",
            "--workspace",
            "--quiet",
        ]),
    )?;
    run_status(std::process::Command::new("cargo").current_dir(project_root()).args(["xtask", "dist"]))
}
