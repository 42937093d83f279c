//! `cargo xtask bench nfs`: treesync vs git on the slow FUSE filesystem (the NAS stand-in:
//! a fixed latency on every metadata op, kernel caches off like NFS with `actimeo=0`).
//!
//! The backing directory is on the bench tmpfs; trees are prepared there directly (fast) and
//! every measured command works through the mount. Requests are counted by the filesystem.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::slowfs::{self, SlowFs};

use crate::measure::{fmt_time, measure, median};
use crate::repo::{GIT_CHECKOUTS, fresh_checkout, git, git_checkout, make_repo, rm, rm_all, settle};
use xtask::util::run_quiet;

pub struct Config {
    /// Tree sizes for the update case.
    pub sizes: Vec<usize>,
    /// Files of the initial-checkout case.
    pub initial_files: usize,
    /// Latency of every metadata op.
    pub latency: Duration,
    /// Runs per treesync measurement (medians).
    pub runs: usize,
    /// Runs per git measurement (git's runs are long here).
    pub git_runs: usize,
    /// Also time `git -c core.preloadIndex=false checkout B` (~450 s at N = 100,000).
    pub slow_git: bool,
    /// Files of the verify case (the first `treesync verify` right after an initial sync through
    /// the mount, vs `git status -uno`); 0: left out.
    pub verify_files: usize,
}

struct Row {
    case: String,
    tool: String,
    time: Duration,
    ops: u64,
    files: usize,
    note: String,
}

/// Time `cmd` `runs` times after `setup`, counting the filesystem requests of each run.
fn timed(
    fs: &SlowFs,
    runs: usize,
    mut setup: impl FnMut() -> Result<(), String>,
    mut cmd: impl FnMut() -> Command,
) -> Result<(Duration, u64), String> {
    let mut times = Vec::new();
    let mut ops = Vec::new();
    for _ in 0..runs {
        setup()?;
        let _ = fs.settled_stats();
        fs.reset();
        let (t, _) = measure(&mut cmd())?;
        times.push(t);
        ops.push(fs.settled_stats().total());
    }
    ops.sort_unstable();
    Ok((median(times), ops[ops.len() / 2]))
}

pub fn run(c: &Config, dir: &Path, treesync: &Path) -> Result<Tables, String> {
    slowfs::check().map_err(|m| format!("the NFS benchmark needs FUSE: {m}"))?;
    let backing = dir.join("nfs-backing");
    let mnt = dir.join("nfs-mnt");
    rm(&backing);
    std::fs::create_dir_all(&backing).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let fs = SlowFs::mount(
        &backing,
        &mnt,
        slowfs::Config { meta_latency: c.latency, threads: 128, ..slowfs::Config::default() },
    )
    .map_err(|e| format!("mounting the slow filesystem: {e}"))?;
    let mut rows = Vec::new();
    for &n in &c.sizes {
        update(c, dir, &fs, treesync, n, &mut rows)?;
    }
    if c.initial_files > 0 {
        initial(c, dir, &fs, treesync, &mut rows)?;
    }
    let mut verify_rows = Vec::new();
    if c.verify_files > 0 {
        verify(dir, &fs, treesync, c.verify_files, &mut verify_rows)?;
    }
    drop(fs);
    rm(&backing);
    Ok(Tables {
        sync: (!rows.is_empty()).then(|| render(&rows, c)),
        verify: (!verify_rows.is_empty()).then(|| render(&verify_rows, c)),
    })
}

/// The tables of one run: syncs (update, initial checkout) and the verify case, each `None`
/// when not run, so that a run of one part leaves the other's figures in BENCHMARKS.md alone.
pub struct Tables {
    pub sync: Option<String>,
    pub verify: Option<String>,
}

fn ts_sync(treesync: &Path, repo: &Path, rev: &str, target: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(treesync);
    cmd.args(["sync", "-q", "--repo"]).arg(repo).args(["--ref", rev, "--target"]).arg(target).args(extra);
    cmd
}

fn update(c: &Config, dir: &Path, fs: &SlowFs, treesync: &Path, n: usize, rows: &mut Vec<Row>) -> Result<(), String> {
    let repo = dir.join(format!("nfs-repo-{n}.git"));
    make_repo(&repo, n)?;
    let case = format!("update A→B, N={n}");
    let back_ts = fs.backing().join("ts");
    let mnt_ts = fs.path().join("ts");
    rm(&back_ts);
    eprintln!("{case}: preparing the trees in the backing directory…");
    run_quiet(&mut ts_sync(treesync, &repo, "A", &back_ts, &["--backend", "local"]))?;
    eprintln!("{case}: treesync…");
    let (t, ops) = timed(
        fs,
        c.runs,
        || run_quiet(&mut ts_sync(treesync, &repo, "A", &back_ts, &["--backend", "local"])).map(|_| ()),
        || ts_sync(treesync, &repo, "B", &mnt_ts, &[]),
    )?;
    rows.push(Row {
        case: case.clone(),
        tool: "treesync sync (auto → nfs)".into(),
        time: t,
        ops,
        files: 14,
        note: "defaults: lookups adaptive from 8, writes adaptive from 16".into(),
    });
    for (jobs, note) in
        [("1", "one directory lookup at a time (the old default)"), ("4", "directory lookups 4 at a time")]
    {
        let (t, ops) = timed(
            fs,
            c.runs,
            || run_quiet(&mut ts_sync(treesync, &repo, "A", &back_ts, &["--backend", "local"])).map(|_| ()),
            || ts_sync(treesync, &repo, "B", &mnt_ts, &["--lookup-jobs", jobs]),
        )?;
        rows.push(Row {
            case: case.clone(),
            tool: format!("treesync sync --lookup-jobs {jobs}"),
            time: t,
            ops,
            files: 14,
            note: note.into(),
        });
    }

    let back_gw = fs.backing().join("gw");
    let mnt_gw = fs.path().join("gw");
    let index = dir.join(format!("nfs-git-{n}.index"));
    rm_all(&[&back_gw, &index]);
    std::fs::create_dir_all(&back_gw).map_err(|e| e.to_string())?;
    // Put the work tree at A through the backing path, with a settled (non-racy) index.
    let reset = || -> Result<(), String> {
        run_quiet(git(&repo, &back_gw, &index).args(["checkout", "-q", "-f", "--detach", "A"]))?;
        settle(&repo, &back_gw, &index)
    };
    for (label, args) in [
        ("git checkout B", vec!["checkout", "-q", "--detach", "B"]),
        (
            "git -c core.preloadIndex=false checkout B",
            vec!["-c", "core.preloadIndex=false", "checkout", "-q", "--detach", "B"],
        ),
        ("git read-tree -m -u A B", vec!["read-tree", "-m", "-u", "A", "B"]),
    ] {
        if !c.slow_git && label.contains("preloadIndex=false") {
            continue;
        }
        eprintln!("{case}: {label}…");
        let (t, ops) = timed(fs, c.git_runs, &reset, || {
            let mut g = git(&repo, &mnt_gw, &index);
            g.args(&args);
            g
        })?;
        rows.push(Row { case: case.clone(), tool: label.into(), time: t, ops, files: 14, note: String::new() });
    }
    // Both trees must hold B.
    run_quiet(git(&repo, &back_gw, &index).args(["checkout", "-q", "-f", "--detach", "B"]))?;
    run_quiet(&mut ts_sync(treesync, &repo, "B", &back_ts, &["--backend", "local"]))?;
    same(&back_ts, &back_gw)?;
    rm_all(&[&back_ts, &back_gw, &index, &repo]);
    Ok(())
}

fn same(a: &Path, b: &Path) -> Result<(), String> {
    let diff =
        Command::new("diff").args(["-r", "--no-dereference", "-x", ".treesync", "-x", ".git"]).arg(a).arg(b).output();
    if diff.as_ref().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    Err(format!(
        "treesync's tree and git's differ: {}",
        diff.map(|o| String::from_utf8_lossy(&o.stdout).chars().take(2000).collect::<String>()).unwrap_or_default()
    ))
}

fn initial(c: &Config, dir: &Path, fs: &SlowFs, treesync: &Path, rows: &mut Vec<Row>) -> Result<(), String> {
    let n = c.initial_files;
    let repo = dir.join(format!("nfs-repo-{n}.git"));
    make_repo(&repo, n)?;
    let case = format!("initial checkout, N={n}");
    let back = fs.backing().join("init");
    let mnt = fs.path().join("init");
    let mut variants: Vec<(String, Vec<String>)> = vec![("treesync nfs, adaptive writes".into(), vec![])];
    for j in [1, 4, 8, 16, 32, 64] {
        variants.push((format!("treesync nfs, --write-jobs {j}"), vec!["--write-jobs".into(), j.to_string()]));
    }
    variants.push(("treesync --backend local (local policy)".into(), vec!["--backend".into(), "local".into()]));
    for (label, extra) in variants {
        eprintln!("{case}: {label}…");
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut last_limits = String::new();
        let (t, ops) = timed(
            fs,
            c.runs,
            || {
                rm(&back);
                Ok(())
            },
            || {
                let mut cmd = ts_sync(treesync, &repo, "A", &mnt, &extra);
                cmd.arg("--json");
                cmd
            },
        )?;
        if label.contains("adaptive") {
            // One more run to report where the adaptive limit went.
            rm(&back);
            let out = run_quiet(&mut {
                let mut cmd = ts_sync(treesync, &repo, "A", &mnt, &extra);
                cmd.arg("--json");
                cmd
            })?;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(out.trim_start_matches(|ch: char| ch != '{')) {
                last_limits = format!(
                    "limits {} (max in flight {})",
                    v["budgets"]["write_limits"], v["budgets"]["max_writes_in_flight"]
                );
            }
        }
        rows.push(Row { case: case.clone(), tool: label, time: t, ops, files: n, note: last_limits });
    }
    let back_gi = fs.backing().join("gi");
    let mnt_gi = fs.path().join("gi");
    let index = dir.join("nfs-git-init.index");
    for (label, workers) in GIT_CHECKOUTS {
        eprintln!("{case}: {label}…");
        let (t, ops) = timed(
            fs,
            c.git_runs,
            || fresh_checkout(&back_gi, &index),
            || git_checkout(&repo, &mnt_gi, &index, workers, "A"),
        )?;
        rows.push(Row { case: case.clone(), tool: label.into(), time: t, ops, files: n, note: String::new() });
    }
    rm(&back);
    run_quiet(&mut ts_sync(treesync, &repo, "A", &back, &["--backend", "local"]))?;
    same(&back, &back_gi)?;
    rm_all(&[&back, &back_gi, &index, &repo]);
    Ok(())
}

/// Run `cmd` once through the mount: its wall time, the filesystem requests, its stdout as JSON
/// (`Null` if it printed none). Exit 1 (drift) is a failure here too: the tree must be clean.
fn once(fs: &SlowFs, cmd: &mut Command) -> Result<(Duration, u64, serde_json::Value), String> {
    let _ = fs.settled_stats();
    fs.reset();
    let start = std::time::Instant::now();
    let o = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let t = start.elapsed();
    if !o.status.success() {
        return Err(format!("{cmd:?} failed ({}): {}", o.status, String::from_utf8_lossy(&o.stderr)));
    }
    let ops = fs.settled_stats().total();
    Ok((t, ops, serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)))
}

/// Issue 18: the first `treesync verify` right after an initial sync through the mount (the
/// sync recorded the stat data of what it wrote, `.treesync/index-delta`), a second one, and
/// one with the scan's lookups one at a time (`--lookup-jobs 1`), vs `git status -uno` and
/// `git status` on the same tree with a settled index (`read-tree` and `update-index
/// --refresh` through the backing directory, as for the update case).
fn verify(dir: &Path, fs: &SlowFs, treesync: &Path, n: usize, rows: &mut Vec<Row>) -> Result<(), String> {
    let repo = dir.join(format!("nfs-repo-verify-{n}.git"));
    make_repo(&repo, n)?;
    let back = fs.backing().join("vf");
    let mnt = fs.path().join("vf");
    rm(&back);
    eprintln!("verify, N={n}: the initial sync through the mount…");
    let (t, ops, _) = once(fs, &mut ts_sync(treesync, &repo, "A", &mnt, &[]))?;
    rows.push(Row {
        case: format!("initial sync for the verify case, N={n}"),
        tool: "treesync sync A (auto → nfs)".into(),
        time: t,
        ops,
        files: n,
        note: "records the stat data of what it writes".into(),
    });
    let case = format!("verify right after an initial sync, N={n}");
    let index = dir.join(format!("nfs-git-verify-{n}.index"));
    rm(&index);
    run_quiet(git(&repo, &back, &index).args(["read-tree", "A"]))?;
    settle(&repo, &back, &index)?;
    eprintln!("{case}: git status -uno…");
    let (t, ops, _) = once(fs, git(&repo, &mnt, &index).args(["status", "-uno", "--porcelain"]))?;
    rows.push(Row {
        case: case.clone(),
        tool: "git status -uno".into(),
        time: t,
        ops,
        files: n,
        note: "preloaded index: lstat from up to 20 threads".into(),
    });
    eprintln!("{case}: git status…");
    let (t, ops, _) = once(fs, git(&repo, &mnt, &index).args(["status", "--porcelain"]))?;
    rows.push(Row {
        case: case.clone(),
        tool: "git status".into(),
        time: t,
        ops,
        files: n,
        note: "also lists every directory for untracked files".into(),
    });
    // The defaults (32 scan threads) twice, then the scan one lookup at a time.
    for (which, extra) in [("first", &[][..]), ("second", &[][..]), ("third", &["--lookup-jobs", "1"][..])] {
        eprintln!("{case}: the {which} treesync verify…");
        let mut cmd = Command::new(treesync);
        cmd.args(["verify", "--json", "--repo"]).arg(&repo).arg("--target").arg(&mnt).args(extra);
        let (t, ops, v) = once(fs, &mut cmd)?;
        let r = &v["report"];
        rows.push(Row {
            case: case.clone(),
            tool: format!("treesync verify {}({which})", extra.iter().map(|a| format!("{a} ")).collect::<String>()),
            time: t,
            ops,
            files: n,
            note: format!("hashed {}, proven by stat {}", r["hashed"], r["proven_by_stat"]),
        });
    }
    rm_all(&[&back, &index, &repo]);
    Ok(())
}

fn render(rows: &[Row], c: &Config) -> String {
    let mut md = String::new();
    let runs = if rows.iter().any(|r| r.case.starts_with("verify")) {
        "One run of each (the first verify can only run once). The index git status uses was settled \
         beforehand (read-tree, update-index --refresh through the backing directory)."
            .to_string()
    } else {
        format!(
            "treesync: medians of {} runs; git: medians of {} runs. Update = 10 files modified, 2 added, 2 deleted (K=14).",
            c.runs, c.git_runs
        )
    };
    let _ = writeln!(
        md,
        "Slow FUSE filesystem (`treesync_testkit::slowfs`): {} per metadata op, 0 per read/write, kernel \
         entry/attr caching off (like NFS `actimeo=0`), 128 server threads, backing directory on tmpfs. \
         Requests are counted by the filesystem (FORGETs not included). {runs}\n",
        fmt_time(c.latency),
    );
    let _ = writeln!(
        md,
        "| case | tool | time | FUSE requests | requests per changed/written file | time ÷ first row of the case | note |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---|");
    let mut case_base: Option<(String, Duration)> = None;
    for r in rows {
        if case_base.as_ref().is_none_or(|(c, _)| *c != r.case) {
            case_base = Some((r.case.clone(), r.time));
        }
        let base = case_base.as_ref().expect("set").1;
        let ratio = r.time.as_secs_f64() / base.as_secs_f64().max(1e-9);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {} | {} |",
            r.case,
            r.tool,
            fmt_time(r.time),
            r.ops,
            r.ops as f64 / r.files.max(1) as f64,
            if std::ptr::eq(r, rows.iter().find(|x| x.case == r.case).expect("the case's first row")) {
                "—".to_string()
            } else if ratio >= 10.0 {
                format!("{ratio:.0}×")
            } else {
                format!("{ratio:.2}×")
            },
            r.note
        );
    }
    md
}
