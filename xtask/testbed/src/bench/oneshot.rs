//! `cargo xtask bench oneshot`: what one `treesync sync` process costs next to git, as ratios.
//!
//! On the generated repository (N files in N/100 directories; commit B = commit A with 10 files
//! modified, 2 added, 2 deleted), with the work trees on tmpfs:
//! - **Update pairs**: `treesync sync` to B then back to A (two whole processes) against
//!   `git checkout -f --detach` B then A in a settled work tree with its own index (what users
//!   run). The median of R pairs each; the ratio is git's time over treesync's.
//! - **No-op**: `treesync sync` to the commit the target is at (start, open the repository, read
//!   the state, find nothing to do) against `git rev-parse --verify A` as a whole process, the
//!   floor of any command that opens the repository. The ratio is treesync's time over git's.
//! - System calls of one run of each (`strace -f -c`, every kind), so the counts show where a
//!   difference comes from.
//!
//! Each tool's runs come in a block (as hyperfine runs them), not taking turns.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xtask::util::run_quiet;

use super::trace::{strace, total_calls};
use crate::measure::median;
use crate::repo::{fresh_checkout, git, git_checkout, make_repo, rm_all, settle};

/// What to measure.
pub struct Config {
    /// Tree sizes, one table row group each.
    pub files: Vec<usize>,
    /// Pairs (and twice as many no-op runs, and four times as many of git's rev-parse).
    pub runs: usize,
}

/// Run it; returns the Markdown table.
pub fn run(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    let mut t = String::from(
        "| N | what | treesync | git | ratio | syscalls: treesync / git |\n| ---: | --- | ---: | ---: | ---: | ---: |\n",
    );
    for &n in &c.files {
        t.push_str(&size(n, c.runs, dir, treesync)?);
    }
    Ok(format!(
        "**One-shot syncs** (whole processes on tmpfs, each tool's runs in a block; medians of {} pairs, {} no-op runs; B = A with 10 files modified, 2 added, 2 deleted)\n\n{t}\n",
        c.runs,
        c.runs * 2
    ))
}

fn size(n: usize, runs: usize, dir: &Path, treesync: &Path) -> Result<String, String> {
    let repo = dir.join(format!("oneshot-{n}.git"));
    let target = dir.join(format!("oneshot-{n}-t"));
    let work = dir.join(format!("oneshot-{n}-g"));
    let index = dir.join(format!("oneshot-{n}-g.index"));
    eprintln!("oneshot: a repository of {n} files…");
    make_repo(&repo, n)?;
    rm_all(&[&target]);
    let sync = |rev: &str| {
        let mut cmd = Command::new(treesync);
        cmd.args(["sync", "-q", "--repo"]).arg(&repo).args(["--ref", rev, "--target"]).arg(&target);
        cmd
    };
    run_quiet(&mut sync("A"))?;
    fresh_checkout(&work, &index)?;
    run_quiet(&mut git_checkout(&repo, &work, &index, None, "A"))?;
    settle(&repo, &work, &index)?;
    let checkout = |rev: &str| git_checkout(&repo, &work, &index, None, rev);
    let rev_parse = || {
        let mut g = git(&repo, &work, &index);
        g.args(["rev-parse", "-q", "--verify", "A"]);
        g
    };
    // One round of each first: caches warm, both trees at A.
    for rev in ["B", "A"] {
        run_quiet(&mut sync(rev))?;
        run_quiet(&mut checkout(rev))?;
    }
    eprintln!("oneshot: {n} files, {runs} pairs each…");
    let mut ts_pairs = Vec::new();
    let mut git_pairs = Vec::new();
    // Each tool's runs in a block, as hyperfine runs them: taking turns with git, whose
    // checkout walks 100,000 files, every treesync run would start with caches git evicted.
    for _ in 0..runs {
        ts_pairs.push(wall(&mut sync("B"))? + wall(&mut sync("A"))?);
    }
    for _ in 0..runs {
        git_pairs.push(wall(&mut checkout("B"))? + wall(&mut checkout("A"))?);
    }
    let mut noop = Vec::new();
    let mut floor = Vec::new();
    for _ in 0..runs * 2 {
        noop.push(wall(&mut sync("A"))?);
    }
    for _ in 0..runs * 4 {
        floor.push(wall(&mut rev_parse())?);
    }
    crate::repo::matches_git_archive(&repo, "A", &target, &dir.join("oneshot-scratch"))?;
    let calls = |cmd: &Command| syscalls(cmd);
    let ts_update = calls(&sync("B"))? + calls(&sync("A"))?;
    let git_update = calls(&checkout("B"))? + calls(&checkout("A"))?;
    let (ts_noop, git_noop) = (calls(&sync("A"))?, calls(&rev_parse())?);
    rm_all(&[&repo, &target, &work, &index]);
    let (tp, gp) = (median(ts_pairs), median(git_pairs));
    let (tn, gn) = (median(noop), median(floor));
    Ok(format!(
        "| {n} | update pair A→B→A vs `git checkout -f` B, A | {} | {} | **{:.1}×** faster | {ts_update} / {git_update} |\n\
         | {n} | no-op sync vs `git rev-parse --verify A` | {} | {} | **{:.2}×** git's time | {ts_noop} / {git_noop} |\n",
        ms(tp),
        ms(gp),
        gp.as_secs_f64() / tp.as_secs_f64(),
        ms(tn),
        ms(gn),
        tn.as_secs_f64() / gn.as_secs_f64(),
    ))
}

/// Wall time of one run of `cmd` (output discarded), from spawn to exit.
fn wall(cmd: &mut Command) -> Result<Duration, String> {
    let start = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let took = start.elapsed();
    if !status.success() {
        return Err(format!("{cmd:?} failed: {status}"));
    }
    Ok(took)
}

/// System calls of one run of `cmd` and its children, every kind (`strace -f -c`'s total).
fn syscalls(cmd: &Command) -> Result<u64, String> {
    total_calls(&strace(cmd, &["-f", "-c"])?).ok_or_else(|| format!("no total in strace's summary of {cmd:?}"))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
