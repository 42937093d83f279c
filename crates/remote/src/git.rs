//! Running the `git` binary: never a prompt, protocol v2, stderr kept.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::Error;

/// `git ARGS` with the settings every call of this crate has: no terminal prompt, protocol v2,
/// no stdin, and none of the `GIT_*` variables that would point it at another repository (a
/// treesync run from a hook inherits them).
fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .env_remove("GIT_NAMESPACE")
        .args(["-c", "protocol.version=2"])
        .args(args)
        .stdin(Stdio::null());
    cmd
}

fn run(mut cmd: Command) -> Result<Output, Error> {
    cmd.output().map_err(|source| Error::Spawn { source })
}

/// git's stderr on one line.
fn stderr(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() { format!("git exited with {}", out.status) } else { lines.join("; ") }
}

/// `git -C DIR ARGS` on the cache repository (no network): stdout. A failure is
/// [`Error::Cache`] (the caller names the repository with [`Error::in_cache`]).
pub(crate) fn local(dir: &Path, args: &[&str]) -> Result<String, Error> {
    let mut cmd = command(args);
    if dir.exists() {
        cmd.current_dir(dir);
    }
    let out = run(cmd)?;
    if !out.status.success() {
        return Err(Error::Cache { path: dir.to_path_buf(), args: args.join(" "), stderr: stderr(&out) });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `git ARGS` that talks to `url` (run in `dir`): stdout. A failure is [`Error::Network`].
pub(crate) fn network(dir: &Path, what: &'static str, url: &str, args: &[&str]) -> Result<String, Error> {
    let mut cmd = command(args);
    cmd.current_dir(dir);
    let out = run(cmd)?;
    if !out.status.success() {
        return Err(Error::Network { what, url: url.to_string(), stderr: stderr(&out) });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
