//! `cargo xtask bench nfs-client`: the built-in NFSv3 client (`nfs://` targets) against a real
//! NFS server (nfs-ganesha on 127.0.0.1, exporting a tmpfs) behind a TCP delay line, pipelined
//! (the defaults) vs the same client with one call in flight (what a kernel mount does: one
//! synchronous round trip per operation). Calls are counted by the client (`sync --json`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use treesync_testkit::delay::DelayProxy;
use treesync_testkit::ganesha::{self, Ganesha};
use treesync_testkit::history::{self, Model};

use crate::measure::{fmt_time, median};
use crate::repo::matches_git_archive;

pub struct Config {
    /// Files of the initial-checkout case; 0: skipped.
    pub initial_files: usize,
    /// Files of the update case (K = 10 changed: 6 modified, 2 added, 2 deleted); 0: skipped.
    pub update_files: usize,
    /// Files of the verify case (a stat-level `treesync verify` of a tree synced just before,
    /// pipelined vs one call in flight); 0: skipped.
    pub verify_files: usize,
    /// Delay each way.
    pub one_way: Duration,
    /// Runs per pipelined measurement (medians); the one-in-flight runs are long, one each.
    pub runs: usize,
}

struct Row {
    case: String,
    tool: String,
    time: Duration,
    calls: u64,
    by_proc: String,
}

const ONE: &str = "inflight=1";

/// Files the update case changes (K): 6 modified, 2 added, 2 deleted.
const CHANGED: usize = 10;

/// Run `treesync sync --json` once: wall time (the whole process: connect, MOUNT, the sync) and
/// the NFS calls it reports, by procedure.
fn sync(treesync: &Path, repo: &Path, rev: &str, url: &str, extra: &[&str]) -> Result<(Duration, u64, String), String> {
    let mut cmd = Command::new(treesync);
    cmd.args(["sync", "--json", "--repo"]).arg(repo).args(["--ref", rev, "--target", url]).args(extra);
    let (t, v) = json_run(&mut cmd, "sync", url)?;
    let (total, by) = calls(&v, "sync")?;
    Ok((t, total, by))
}

/// Run `treesync verify --json` (stat level) once: wall time, the report and the NFS calls.
fn verify(treesync: &Path, repo: &Path, url: &str, extra: &[&str]) -> Result<(Duration, u64, String, String), String> {
    let mut cmd = Command::new(treesync);
    cmd.args(["verify", "--json", "--repo"]).arg(repo).args(["--target", url]).args(extra);
    let (t, v) = json_run(&mut cmd, "verify", url)?;
    if v["clean"] != serde_json::Value::Bool(true) {
        return Err(format!("treesync verify {url} found drift: {}", v["report"]["drift"]));
    }
    let r = &v["report"];
    let note = format!("{} files, hashed {}, proven by stat {}", r["expected"], r["hashed"], r["proven_by_stat"]);
    let (total, by) = calls(&v, "verify")?;
    Ok((t, total, by, note))
}

/// Wall time and the JSON document of one run of `cmd`.
fn json_run(cmd: &mut Command, what: &str, url: &str) -> Result<(Duration, serde_json::Value), String> {
    let start = Instant::now();
    let out = cmd.output().map_err(|e| format!("cannot run treesync: {e}"))?;
    let t = start.elapsed();
    // verify exits 1 on drift, with its report on stdout.
    if !out.status.success() && out.stdout.is_empty() {
        return Err(format!("treesync {what} {url} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let v = serde_json::from_slice(&out.stdout).map_err(|e| format!("{what} --json printed no JSON: {e}"))?;
    Ok((t, v))
}

/// The NFS calls of a `--json` document (MOUNT calls left out of the total), and all of them by
/// procedure.
fn calls(v: &serde_json::Value, what: &str) -> Result<(u64, String), String> {
    let cost = v.get("cost").and_then(|c| c.as_object()).ok_or_else(|| format!("{what} --json has no cost"))?;
    let mut total = 0;
    let mut parts = Vec::new();
    for (k, n) in cost {
        let n = n.as_u64().unwrap_or(0);
        if k != "MOUNT" {
            total += n;
        }
        parts.push(format!("{n} {k}"));
    }
    Ok((total, parts.join(", ")))
}

fn url(port: u16, mount_port: u16, sub: &str, extra: &str) -> String {
    let mut u = format!("nfs://127.0.0.1:{port}{}/{sub}?mountport={mount_port}", ganesha::EXPORT_PATH);
    if !extra.is_empty() {
        u.push('&');
        u.push_str(extra);
    }
    u
}

/// The tables of one run, each `None` when its cases were skipped, so that a run of one part
/// leaves the other's figures in BENCHMARKS.md alone.
pub struct Tables {
    /// Initial checkout and update.
    pub sync: Option<String>,
    /// Verify.
    pub verify: Option<String>,
}

pub fn run(c: &Config, dir: &Path, treesync: &Path) -> Result<Tables, String> {
    ganesha::check().map_err(|m| format!("the nfs-client benchmark needs the nfs-ganesha testbed: {m}"))?;
    let server = Ganesha::start();
    let nfs = DelayProxy::start(server.nfs_addr(), c.one_way);
    let mnt = DelayProxy::start(server.mount_addr(), c.one_way);
    let rtt = {
        let mut samples = Vec::new();
        for _ in 0..20 {
            samples.push(ganesha::rpc_null(nfs.addr(), 100_003, 3).map_err(|e| format!("NULL call: {e}"))?);
        }
        median(samples)
    };
    eprintln!(
        "nfs-ganesha at {}, delay line {:?} each way: NULL round trip {}",
        server.nfs_addr(),
        c.one_way,
        fmt_time(rtt)
    );
    let (np, mp) = (nfs.addr().port(), mnt.addr().port());
    let bed = Bed { c, dir, treesync, server: &server, ports: (np, mp) };
    let mut rows = Vec::new();

    if c.initial_files > 0 {
        initial(&bed, &mut rows)?;
    }
    if c.update_files > 0 {
        update(&bed, &mut rows)?;
    }
    let mut verify_rows = Vec::new();
    if c.verify_files > 0 {
        verify_case(&bed, &mut verify_rows)?;
    }
    drop((nfs, mnt));
    server.stop();
    Ok(Tables {
        sync: (!rows.is_empty()).then(|| render(&rows, c, rtt)),
        verify: (!verify_rows.is_empty()).then(|| render(&verify_rows, c, rtt)),
    })
}

/// What every case runs against: the configuration, the scratch directory, the binary, the
/// server and its NFS and MOUNT ports (behind the delay line).
#[derive(Clone, Copy)]
struct Bed<'a> {
    c: &'a Config,
    dir: &'a Path,
    treesync: &'a Path,
    server: &'a Ganesha,
    ports: (u16, u16),
}

/// A new bare repository at `path` (whatever was there removed) holding `trees` as the history
/// of `main`: its path and the commits, oldest first.
fn repo_of(path: &Path, trees: &[Model]) -> Result<(PathBuf, Vec<String>), String> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
    treesync_testkit::git(path, &["init", "-q", "--bare"]);
    Ok((path.to_path_buf(), history::import(path, "main", trees)))
}

/// `runs` runs of `run` (wall time, NFS calls, calls by procedure) as a row: the median time,
/// the last run's calls.
fn median_row(
    case: &str,
    label: &str,
    runs: usize,
    mut run: impl FnMut(usize) -> Result<(Duration, u64, String), String>,
) -> Result<Row, String> {
    eprintln!("{case}: {label}…");
    let mut times = Vec::new();
    let (mut calls, mut by) = (0, String::new());
    for r in 0..runs {
        let (t, n, b) = run(r)?;
        times.push(t);
        (calls, by) = (n, b);
    }
    Ok(Row { case: case.into(), tool: label.into(), time: median(times), calls, by_proc: by })
}

/// Initial checkout of N files.
fn initial(bed: &Bed, rows: &mut Vec<Row>) -> Result<(), String> {
    let Bed { c, dir, treesync, server, ports: (np, mp) } = *bed;
    let n = c.initial_files;
    let (repo, commits) = repo_of(&dir.join(format!("nfs-client-{n}.git")), &[history::wide_tree(n, 1)])?;
    let a = commits.first().ok_or("import made no commit")?.clone();
    let case = format!("initial checkout, N={n}");
    for (label, extra_url, flags, runs) in [
        ("treesync nfs://, pipelined (defaults)", "", vec![], c.runs),
        ("treesync nfs://, one call in flight", ONE, vec!["--write-jobs", "1", "--lookup-jobs", "1"], 1),
    ] {
        let first = rows.len() * 10;
        rows.push(median_row(&case, label, runs, |r| {
            let sub = format!("init-{}", r + first);
            let _ = std::fs::remove_dir_all(server.dir().join(&sub));
            let run = sync(treesync, &repo, &a, &url(np, mp, &sub, extra_url), &flags)?;
            matches_git_archive(&repo, &a, &server.dir().join(&sub), &dir.join("want"))?;
            let _ = std::fs::remove_dir_all(server.dir().join(&sub));
            Ok(run)
        })?);
    }
    let _ = std::fs::remove_dir_all(&repo);
    Ok(())
}

/// Update with K = 10 in an N-file tree.
fn update(bed: &Bed, rows: &mut Vec<Row>) -> Result<(), String> {
    let Bed { c, dir, treesync, server, ports: (np, mp) } = *bed;
    let n = c.update_files;
    let base = history::wide_tree(n, 2);
    let (next, changed) = history::change_some(&base, 6, 2, 2, 3);
    let k = changed.len();
    if k != CHANGED {
        return Err(format!("change_some changed {k} files, not {CHANGED}"));
    }
    let (repo, commits) = repo_of(&dir.join(format!("nfs-client-{n}.git")), &[base, next])?;
    let (a, b) = (commits[0].clone(), commits[1].clone());
    let case = format!("update, N={n}, K={k}");
    eprintln!("{case}: preparing the tree at A…");
    let sub = "update";
    let _ = std::fs::remove_dir_all(server.dir().join(sub));
    sync(treesync, &repo, &a, &url(np, mp, sub, ""), &[])?;
    for (label, extra_url, flags, runs) in [
        ("treesync nfs://, pipelined (defaults)", "", vec![], c.runs),
        ("treesync nfs://, one call in flight", ONE, vec!["--write-jobs", "1", "--lookup-jobs", "1"], c.runs),
    ] {
        let row = median_row(&case, label, runs, |_| {
            sync(treesync, &repo, &a, &url(np, mp, sub, ""), &[])?;
            sync(treesync, &repo, &b, &url(np, mp, sub, extra_url), &flags)
        })?;
        matches_git_archive(&repo, &b, &server.dir().join(sub), &dir.join("want"))?;
        rows.push(row);
    }
    let _ = std::fs::remove_dir_all(&repo);
    Ok(())
}

/// Issue 18: a stat-level verify of N files synced just before, READDIRPLUS pipelined (the
/// defaults) vs one call in flight. The first verify after the sync proves the files by the
/// stat data the sync recorded (`.treesync/index-delta`, see docs/state.md) and writes the
/// index: it is a row of its own (one run); the compared rows are the verifies after it.
fn verify_case(bed: &Bed, rows: &mut Vec<Row>) -> Result<(), String> {
    let Bed { c, dir, treesync, server, ports: (np, mp) } = *bed;
    let n = c.verify_files;
    let (repo, commits) = repo_of(&dir.join(format!("nfs-client-verify-{n}.git")), &[history::wide_tree(n, 4)])?;
    let a = commits.first().ok_or("import made no commit")?.clone();
    let sub = "verify";
    let _ = std::fs::remove_dir_all(server.dir().join(sub));
    eprintln!("verify, N={n}: the sync…");
    sync(treesync, &repo, &a, &url(np, mp, sub, ""), &[])?;
    let first = format!("first verify after a sync, N={n}");
    eprintln!("{first}…");
    let (t, calls, by, note) = verify(treesync, &repo, &url(np, mp, sub, ""), &[])?;
    rows.push(Row {
        case: first,
        tool: "treesync nfs://, pipelined (defaults)".into(),
        time: t,
        calls,
        by_proc: format!("{by} ({note})"),
    });
    let case = format!("verify (stat level), index in place, N={n}");
    for (label, extra_url, flags) in [
        ("treesync nfs://, pipelined (defaults)", "", vec![]),
        ("treesync nfs://, one call in flight", ONE, vec!["--lookup-jobs", "1"]),
    ] {
        rows.push(median_row(&case, label, c.runs, |_| {
            let (t, calls, by, note) = verify(treesync, &repo, &url(np, mp, sub, extra_url), &flags)?;
            Ok((t, calls, format!("{by} ({note})")))
        })?);
    }
    // Reading files back: `--level full` reads and hashes every file (what a verify pays for
    // the files no stat data proves), one run each.
    let case = format!("verify --level full (every file read and hashed), N={n}");
    for (label, extra_url, flags) in [
        ("treesync nfs://, pipelined (defaults)", "", vec!["--level", "full"]),
        ("treesync nfs://, one call in flight", ONE, vec!["--level", "full", "--lookup-jobs", "1"]),
    ] {
        eprintln!("{case}: {label}…");
        let (t, calls, b, note) = verify(treesync, &repo, &url(np, mp, sub, extra_url), &flags)?;
        rows.push(Row { case: case.clone(), tool: label.into(), time: t, calls, by_proc: format!("{b} ({note})") });
    }
    let _ = std::fs::remove_dir_all(server.dir().join(sub));
    let _ = std::fs::remove_dir_all(&repo);
    Ok(())
}

fn render(rows: &[Row], c: &Config, rtt: Duration) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "nfs-ganesha {} on 127.0.0.1 exporting a tmpfs, reached through a TCP delay line of {} ms each way (measured NULL round trip {}). {}; calls are NFS calls counted by the client (MOUNT calls left out of the total).\n",
        ganesha_version(),
        c.one_way.as_secs_f64() * 1000.0,
        fmt_time(rtt),
        if rows.iter().any(|r| r.case.contains("verify")) {
            format!(
                "One run of the first verify and of each `--level full` verify, medians of {} otherwise. Each run is a whole `treesync verify --json` process (connect, MOUNT, reading the state and the index, the scan, the comparison with the tree); `one call in flight` is `inflight=1` in the URL and `--lookup-jobs 1`",
                c.runs
            )
        } else {
            format!(
                "One run of the one-in-flight initial checkout, medians of {} otherwise. Each run is a whole `treesync sync --json` process (connect, MOUNT, lock, journal, the plan); every target was compared with `git archive`",
                c.runs
            )
        }
    );
    let _ = writeln!(t, "| case | client | time | NFS calls | vs one in flight | calls by procedure |");
    let _ = writeln!(t, "|---|---|---:|---:|---:|---|");
    for r in rows {
        let base = rows.iter().find(|o| o.case == r.case && o.tool.contains("one call")).map(|o| o.time);
        let ratio = base.map_or(String::new(), |b| format!("{:.1}×", b.as_secs_f64() / r.time.as_secs_f64()));
        let _ =
            writeln!(t, "| {} | {} | {} | {} | {} | {} |", r.case, r.tool, fmt_time(r.time), r.calls, ratio, r.by_proc);
    }
    if let Some(u) = rows.iter().find(|r| r.case.starts_with("update") && r.tool.contains("pipelined")) {
        let k = CHANGED;
        let _ = writeln!(
            t,
            "\nUpdate, pipelined: {} NFS calls for K={k} (target ≤ 10·K+10 = {}), {} (target < 0.5 s).",
            u.calls,
            10 * k + 10,
            fmt_time(u.time)
        );
    }
    let verify = |tool: &str| rows.iter().find(|r| r.case.starts_with("verify (stat") && r.tool.contains(tool));
    if let (Some(p), Some(one)) = (verify("pipelined"), verify("one call")) {
        let _ = writeln!(
            t,
            "\nVerify with the index in place, pipelined: {} (target < 2 s), {:.1}× faster than one call in flight (target ≥ 20×).",
            fmt_time(p.time),
            one.time.as_secs_f64() / p.time.as_secs_f64()
        );
    }
    let full = |tool: &str| rows.iter().find(|r| r.case.starts_with("verify --level full") && r.tool.contains(tool));
    if let (Some(p), Some(one)) = (full("pipelined"), full("one call")) {
        let _ = writeln!(
            t,
            "
Verify reading every file back, pipelined: {}, {:.1}× faster than one call in flight.",
            fmt_time(p.time),
            one.time.as_secs_f64() / p.time.as_secs_f64()
        );
    }
    t
}

fn ganesha_version() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "nfs-ganesha"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "(version unknown)".into())
}
