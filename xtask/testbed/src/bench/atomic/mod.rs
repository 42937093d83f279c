//! `cargo xtask bench atomic`: what `treesync sync --atomic` costs per update (issue 16), next
//! to a non-atomic treesync update (the anchor) and to the git-sync way of getting a whole-tree
//! switch (a full `git worktree add` + `reset --hard` of every new commit, then a symlink flip),
//! on a local tmpfs and on the slow FUSE filesystem standing in for a NAS, in one run.
//!
//! Every tool walks the same commit chain C0 … Cn ([`chain`]): each Ci is C(i-1) with K paths
//! changed. treesync's first two syncs (C0, C1) are reported on their own rows; the steady
//! state is the median of the R updates after them (C2 … C(R+1)). With `--keep 2 --grace 0` an
//! `--atomic` update brings the generation retired at the update before — two commits behind —
//! up to date, so it applies the diff of two steps (up to 2K paths) and switches. The git-sync
//! way checks out every commit in full into a fresh worktree, flips a symlink to it and removes
//! the previous worktree (`rm -rf` + `git worktree prune`, as git-sync does). Disk use is what
//! `du -sk` reports (hard links counted once) and `du -sk --count-links` (each link counted),
//! for the kept generations and for the two full worktrees git-sync holds between its flip and
//! its cleanup.

use std::path::{Path, PathBuf};
use std::process::Command;

use treesync_testkit::slowfs::{self, SlowFs, Stats};

use crate::repo::{make_repo, matches_git_archive};

mod chain;
mod gitsync;
mod model;
mod render;

use crate::repo::rm;
pub use model::Config;
use model::{Bed, Case, DiskRow, Figures, Row, Sample, du, kinds};

/// Run the benchmark in `dir` (a tmpfs) with the `treesync` binary; the Markdown tables.
pub fn run(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    if c.runs == 0 || c.changed == 0 {
        return Err("--runs and --changed must be at least 1".into());
    }
    let repo = dir.join("atomic-repo.git");
    make_repo(&repo, c.files)?;
    // C0, C1 (the first two syncs), R steady-state updates, one more commit for git-sync's
    // second worktree in the disk figures.
    let steps = c.runs.max(c.nas_git_runs) + 2;
    eprintln!("atomic: writing {steps} commits of {} changed paths…", c.changed);
    chain::extend(&repo, steps, c.changed)?;
    let mut all = Figures::default();
    if c.local {
        let local = dir.join("atomic-local");
        rm(&local);
        std::fs::create_dir_all(&local).map_err(|e| format!("{}: {e}", local.display()))?;
        let bed = Bed {
            name: "local tmpfs".into(),
            work: local.clone(),
            backing: local.clone(),
            fs: None,
            git_runs: c.runs,
            switches: c.switches.clone(),
        };
        bench_bed(c, &bed, &repo, treesync, &mut all)?;
        rm(&local);
    }
    if c.nas {
        slowfs::check().map_err(|m| format!("the NAS testbed needs FUSE: {m}"))?;
        let backing = dir.join("atomic-nas-backing");
        let mnt = dir.join("atomic-nas-mnt");
        rm(&backing);
        for d in [&backing, &mnt] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let fs = SlowFs::mount(
            &backing,
            &mnt,
            slowfs::Config { meta_latency: c.latency, threads: 128, ..slowfs::Config::default() },
        )
        .map_err(|e| format!("mounting the slow filesystem: {e}"))?;
        let bed = Bed {
            name: format!("NAS (FUSE, {} per op)", crate::measure::fmt_time(c.latency)),
            work: fs.path().to_path_buf(),
            backing: fs.backing().to_path_buf(),
            fs: Some(&fs),
            git_runs: c.nas_git_runs.clamp(1, c.runs),
            switches: c.nas_switches.clone(),
        };
        let result = bench_bed(c, &bed, &repo, treesync, &mut all);
        drop(fs);
        rm(&backing);
        result?;
    }
    rm(&repo);
    Ok(render::tables(c, &all))
}

/// All tools on one testbed.
fn bench_bed(c: &Config, bed: &Bed, repo: &Path, treesync: &Path, all: &mut Figures) -> Result<(), String> {
    let plain = Tool { label: "treesync sync".into(), name: "plain".into(), extra: vec![], anchor: true };
    treesync_tool(c, bed, repo, treesync, &plain, all)?;
    // What each mode resolved to here: an explicit mode equal to what `auto` picked is the
    // same configuration, measured once.
    let mut resolved: Vec<String> = Vec::new();
    for mode in &bed.switches {
        if mode != "auto" && resolved.contains(mode) {
            eprintln!("atomic: {}: --switch {mode} is what auto picked here; measured once", bed.name);
            continue;
        }
        let tool = Tool {
            label: format!("treesync sync --atomic --switch {mode}"),
            name: format!("atomic-{mode}"),
            extra: ["--atomic", "--keep", "2", "--grace", "0", "--switch", mode.as_str()].map(str::to_string).to_vec(),
            anchor: false,
        };
        resolved.extend(treesync_tool(c, bed, repo, treesync, &tool, all)?);
    }
    gitsync::run(bed, repo, all)
}

/// A treesync configuration to measure.
struct Tool {
    label: String,
    /// The target's directory name in the bed.
    name: String,
    extra: Vec<String>,
    anchor: bool,
}

/// What treesync's `--json` says about a run.
#[derive(Default)]
struct Report {
    applied: Option<u64>,
    switch: Option<String>,
    detail: String,
}

fn report(stdout: &str) -> Report {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(stdout.trim_start_matches(|ch: char| ch != '{')) else {
        return Report::default();
    };
    // The ops, not `bytes`.
    let applied = find(&v, "applied")
        .filter(|a| a.is_object())
        .map(|a| ["mkdir", "write", "symlink", "chmod", "unlink", "rmdir"].iter().filter_map(|k| a[k].as_u64()).sum());
    let switch = find(&v, "switch").and_then(|s| s.as_str()).map(str::to_string);
    let mut detail = Vec::new();
    if find(&v, "reused").and_then(serde_json::Value::as_bool) == Some(true) {
        detail.push("reused a retired generation".to_string());
    }
    if let Some(cl) = find(&v, "cloned").filter(|cl| cl.is_object()) {
        detail.push(format!(
            "new generation cloned by {} ({} entries, {} dirs, {} bytes copied)",
            cl["how"].as_str().unwrap_or("?"),
            cl["entries"],
            cl["dirs"],
            cl["bytes_copied"]
        ));
    }
    Report { applied, switch, detail: detail.join("; ") }
}

/// The first value of `key` in `v`, depth first.
fn find<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(o) => o.get(key).or_else(|| o.values().find_map(|x| find(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

/// The first two syncs and the steady-state updates of one treesync configuration, checked
/// against `git archive`, and its disk use; the switch mode it reported.
fn treesync_tool(
    c: &Config,
    bed: &Bed,
    repo: &Path,
    treesync: &Path,
    tool: &Tool,
    all: &mut Figures,
) -> Result<Option<String>, String> {
    let home = format!(".{}.treesync", tool.name);
    for p in [&tool.name, &home] {
        rm(&bed.backing.join(p));
    }
    let target = bed.work.join(&tool.name);
    let sync = |rev: &str| {
        let mut cmd = Command::new(treesync);
        cmd.args(["sync", "-q", "--json", "--repo"])
            .arg(repo)
            .args(["--ref", rev, "--target"])
            .arg(&target)
            .args(&tool.extra);
        cmd
    };
    let mut switch = None;
    for (case, rev) in [(Case::First, "C0"), (Case::Second, "C1")] {
        eprintln!("atomic: {}: {} {rev}…", bed.name, tool.label);
        let s = bed.run(&mut sync(rev))?;
        let r = report(&s.stdout);
        switch = switch.or(r.switch.clone());
        all.rows.push(row(bed, case, tool, &[s], &[r]));
    }
    eprintln!("atomic: {}: {} C2…C{}…", bed.name, tool.label, c.runs + 1);
    let mut samples = Vec::new();
    let mut reports = Vec::new();
    for i in 2..c.runs + 2 {
        let s = bed.run(&mut sync(&format!("C{i}")))?;
        reports.push(report(&s.stdout));
        samples.push(s);
    }
    all.rows.push(row(bed, Case::Update, tool, &samples, &reports));
    let last = format!("C{}", c.runs + 1);
    matches_git_archive(repo, &last, &bed.backing.join(&tool.name).join("."), &bed.backing.join("scratch"))
        .map_err(|e| format!("{}: {}: {e}", bed.name, tool.label))?;
    let parts = [bed.backing.join(&tool.name), bed.backing.join(&home)];
    let parts: Vec<&Path> = parts.iter().map(PathBuf::as_path).filter(|p| p.exists()).collect();
    let (kib, kib_all_links) = du(&parts)?;
    all.disk.push(DiskRow {
        bed: bed.name.clone(),
        what: if tool.anchor {
            format!("`{}` target (one tree and its state)", tool.label)
        } else {
            format!("`{}`: target and generations (`--keep 2`)", tool.label)
        },
        kib,
        kib_all_links,
        reference: false,
    });
    for p in [&tool.name, &home] {
        rm(&bed.backing.join(p));
    }
    Ok(switch)
}

/// The row of `samples` (one or more runs of the same case): median time, the requests of the
/// median run.
fn row(bed: &Bed, case: Case, tool: &Tool, samples: &[Sample], reports: &[Report]) -> Row {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| samples[i].time);
    let mid = order[order.len() / 2];
    let mut requests: Vec<u64> = samples.iter().filter_map(|s| s.stats.as_ref().map(Stats::total)).collect();
    requests.sort_unstable();
    let mut applied: Vec<u64> = reports.iter().filter_map(|r| r.applied).collect();
    applied.sort_unstable();
    let r = &reports[mid];
    let mut note = Vec::new();
    if let Some(s) = &r.switch {
        note.push(format!("switch: {s}"));
    }
    if !r.detail.is_empty() {
        note.push(r.detail.clone());
    }
    if applied.len() > 1 && applied.first() != applied.last() {
        note.push(format!(
            "ops applied {}–{} over the runs",
            applied.first().expect("not empty"),
            applied.last().expect("not empty")
        ));
    }
    Row {
        bed: bed.name.clone(),
        case,
        tool: tool.label.clone(),
        anchor: tool.anchor,
        time: samples[mid].time,
        requests: requests.get(requests.len() / 2).copied(),
        kinds: samples[mid].stats.as_ref().map(kinds).unwrap_or_default(),
        applied: applied.get(applied.len() / 2).copied(),
        note: note.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_report_counts_ops_not_bytes() {
        let out = r#"{"planned":{"write":9},"applied":{"mkdir":1,"write":10,"symlink":0,"chmod":0,"unlink":2,"rmdir":0,"bytes":5000},"backend":"local"}"#;
        let r = report(out);
        assert_eq!(r.applied, Some(13));
        assert_eq!(r.switch, None);
        assert_eq!(r.detail, "");
    }

    #[test]
    fn a_generation_report_gives_its_switch_and_how_the_generation_was_made() {
        let out = r#"{"sync":{"applied":{"write":20,"unlink":4,"bytes":1}},"switch":"exchange","switched":true,"reused":false,"cloned":{"how":"hardlink","dirs":3,"entries":300,"bytes_copied":0}}"#;
        let r = report(out);
        assert_eq!(r.applied, Some(24));
        assert_eq!(r.switch.as_deref(), Some("exchange"));
        assert_eq!(r.detail, "new generation cloned by hardlink (300 entries, 3 dirs, 0 bytes copied)");
        let reused = report(r#"{"sync":{"applied":{"write":2}},"switch":"symlink","reused":true}"#);
        assert_eq!(reused.detail, "reused a retired generation");
    }

    #[test]
    fn output_that_is_not_json_gives_an_empty_report() {
        let r = report("not json");
        assert_eq!(r.applied, None);
        assert_eq!(r.switch, None);
    }
}
