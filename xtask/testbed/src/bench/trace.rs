//! What a benchmark measures of a command besides its time: its system calls (`strace`), and
//! the median time and peak memory of repeated runs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::measure::{measure, median};
use xtask::util::run_quiet;

const STAT_REGEX: &str = "trace=/^(stat|lstat|fstat|newfstatat|statx|fstatat64|stat64|lstat64|fstat64)$";

/// Stat-family syscalls of `cmd` and its children (`strace -c`'s total).
pub(super) fn stat_count(cmd: &Command) -> Result<u64, String> {
    let summary = strace(cmd, &["-f", "-c", "-e", STAT_REGEX])?;
    Ok(total_calls(&summary).unwrap_or(0))
}

/// The calls on the `total` line of a `strace -c` summary.
pub(super) fn total_calls(summary: &str) -> Option<u64> {
    summary.lines().find(|l| l.trim_end().ends_with("total"))?.split_whitespace().nth(3)?.parse().ok()
}

/// Stat-family syscalls of the whole process, and syscalls of any kind that name a path or
/// descriptor inside `target` (from `strace -y`, which prints the path behind each descriptor).
pub(super) fn stat_calls(cmd: &Command, target: &Path) -> Result<(u64, u64), String> {
    let stats = stat_count(cmd)?;
    let all = strace(cmd, &["-f", "-y"])?;
    let needle = target.to_string_lossy().into_owned();
    let on_target = all.lines().filter(|l| l.contains(needle.as_str())).count() as u64;
    Ok((stats, on_target))
}

pub(super) fn strace(cmd: &Command, flags: &[&str]) -> Result<String, String> {
    let out = std::env::temp_dir().join(format!("xtask-strace-{}", std::process::id()));
    let mut s = Command::new("strace");
    s.args(flags).arg("-o").arg(&out).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    run_quiet(&mut s)?;
    std::fs::read_to_string(&out).map_err(|e| format!("strace output: {e}"))
}

pub(super) fn timed(
    runs: usize,
    mut setup: impl FnMut() -> Result<(), String>,
    mut cmd: impl FnMut() -> Command,
) -> Result<(Duration, u64), String> {
    let mut times = Vec::new();
    let mut rss = 0;
    for _ in 0..runs {
        setup()?;
        let (t, r) = measure(&mut cmd())?;
        times.push(t);
        rss = rss.max(r);
    }
    Ok((median(times), rss))
}
