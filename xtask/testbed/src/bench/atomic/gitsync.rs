//! The git-sync way of switching a whole tree (kubernetes/git-sync v4): every new commit is
//! checked out in full into a fresh worktree (`git worktree add --force --detach --no-checkout`
//! then `git reset --hard`), a symlink made next to the link is renamed over it (`ln -s` +
//! `mv -T`), and the previous worktree is removed (`rm -rf` + `git worktree prune`).
//!
//! The repository stays on the local tmpfs (as treesync's does); worktrees, the link and the
//! cleanup go through the testbed. The worktree the first measured update replaces is prepared
//! beforehand without the testbed's latency.

use std::path::Path;
use std::process::Command;

use treesync_testkit::slowfs::Stats;

use super::model::{Bed, Case, DiskRow, Figures, Row, Sample, du, kinds};
use crate::repo::rm;
use xtask::util::run_quiet;

/// A shell running `script` with git's user and system configuration left out.
fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("set -e\n{script}")])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    cmd
}

/// Check out `rev` in full into `root/wt-REV`, as git-sync does.
fn checkout(repo: &Path, root: &Path, rev: &str) -> String {
    let (repo, root) = (repo.display(), root.display());
    format!(
        "git --git-dir '{repo}' worktree add -q --force --detach --no-checkout '{root}/wt-{rev}' {rev}\n\
         git -C '{root}/wt-{rev}' reset -q --hard {rev}\n"
    )
}

/// Point `root/current` at `wt-REV` in one rename.
fn flip(root: &Path, rev: &str) -> String {
    let root = root.display();
    format!("ln -s 'wt-{rev}' '{root}/.current.tmp'\nmv -T '{root}/.current.tmp' '{root}/current'\n")
}

/// Remove `root/wt-REV` and git's record of it.
fn remove(repo: &Path, root: &Path, rev: &str) -> String {
    format!("rm -rf '{}/wt-{rev}'\ngit --git-dir '{}' worktree prune\n", root.display(), repo.display())
}

/// The steady-state updates C2 … C(1+runs) of the git-sync way on `bed`, checked against
/// `git archive`, and the disk use of two full worktrees.
pub(super) fn run(bed: &Bed, repo: &Path, all: &mut Figures) -> Result<(), String> {
    let work = bed.work.join("gitsync");
    let back = bed.backing.join("gitsync");
    rm(&back);
    std::fs::create_dir_all(&back).map_err(|e| format!("{}: {e}", back.display()))?;
    run_quiet(&mut sh(&format!("git --git-dir '{}' worktree prune", repo.display())))?;
    eprintln!("atomic: {}: git-sync way, preparing C1…", bed.name);
    run_quiet(&mut sh(&(checkout(repo, &back, "C1") + &flip(&back, "C1"))))?;
    let mut update = Vec::new();
    let mut cleanup = Vec::new();
    for i in 2..bed.git_runs + 2 {
        let (rev, old) = (format!("C{i}"), format!("C{}", i - 1));
        eprintln!("atomic: {}: git-sync way, {rev}…", bed.name);
        update.push(bed.run(&mut sh(&(checkout(repo, &work, &rev) + &flip(&work, &rev))))?);
        cleanup.push(bed.run(&mut sh(&remove(repo, &work, &old)))?);
    }
    let last = format!("C{}", bed.git_runs + 1);
    matches_archive(repo, &last, &back.join("current"), &bed.backing.join("scratch"))
        .map_err(|e| format!("{}: the git-sync way: {e}", bed.name))?;
    let total: Vec<Sample> = update
        .iter()
        .zip(&cleanup)
        .map(|(u, c)| Sample {
            time: u.time + c.time,
            stats: sum(u.stats.as_ref(), c.stats.as_ref()),
            stdout: String::new(),
        })
        .collect();
    let runs = bed.git_runs;
    for (what, samples) in [
        ("git-sync way: `worktree add --no-checkout` + `reset --hard` + `ln -s` + `mv -T`", &update),
        ("git-sync way: old worktree removed (`rm -rf` + `worktree prune`)", &cleanup),
        ("git-sync way: the whole update", &total),
    ] {
        all.rows.push(row(bed, what, samples, runs));
    }

    // Between its flip and its cleanup git-sync holds two full worktrees: add the next one.
    let next = format!("C{}", bed.git_runs + 2);
    run_quiet(&mut sh(&checkout(repo, &back, &next)))?;
    let (kib, kib_all_links) = du(&[back.as_path()])?;
    all.disk.push(DiskRow {
        bed: bed.name.clone(),
        what: "git-sync way: two full worktrees (between its flip and its cleanup)".into(),
        kib,
        kib_all_links,
        reference: true,
    });
    let (kib, kib_all_links) = du(&[repo.join("worktrees").as_path()])?;
    all.disk.push(DiskRow {
        bed: bed.name.clone(),
        what: "git-sync way: their git metadata (`worktrees/`: an index each, in the repository)".into(),
        kib,
        kib_all_links,
        reference: false,
    });
    rm(&back);
    run_quiet(&mut sh(&format!("git --git-dir '{}' worktree prune", repo.display())))?;
    Ok(())
}

/// Check that the worktree behind the link `current` holds exactly `git archive REV` (its `.git`
/// file left out), unpacking the archive into `scratch`.
fn matches_archive(repo: &Path, rev: &str, current: &Path, scratch: &Path) -> Result<(), String> {
    rm(scratch);
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let (repo, current, scratch) = (repo.display(), current.display(), scratch.display());
    let r = run_quiet(&mut sh(&format!(
        "git --git-dir '{repo}' archive {rev} | tar -x -C '{scratch}'\n\
         diff -r --no-dereference -x .git '{scratch}' '{current}/.' >&2"
    )));
    let _ = std::fs::remove_dir_all(scratch.to_string());
    r.map(|_| ()).map_err(|e| format!("the worktree differs from git archive {rev}: {e}"))
}

/// The requests of two runs together.
fn sum(a: Option<&Stats>, b: Option<&Stats>) -> Option<Stats> {
    let (a, b) = (a?, b?);
    let mut s = a.clone();
    for (op, st) in &b.ops {
        let e = s.ops.entry(*op).or_default();
        e.count += st.count;
        e.max_in_flight = e.max_in_flight.max(st.max_in_flight);
    }
    Some(s)
}

fn row(bed: &Bed, what: &str, samples: &[Sample], runs: usize) -> Row {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| samples[i].time);
    let mid = &samples[order[order.len() / 2]];
    let mut requests: Vec<u64> = samples.iter().filter_map(|s| s.stats.as_ref().map(Stats::total)).collect();
    requests.sort_unstable();
    Row {
        bed: bed.name.clone(),
        case: Case::Update,
        tool: what.to_string(),
        anchor: false,
        time: mid.time,
        requests: requests.get(requests.len() / 2).copied(),
        kinds: mid.stats.as_ref().map(kinds).unwrap_or_default(),
        applied: None,
        note: if runs == 1 { "one run".into() } else { format!("median of {runs} runs") },
    }
}
