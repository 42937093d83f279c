//! `cargo xtask scale`: large trees, measured: a 1,000,000-file tree (and 100,000 for
//! comparison) synced initially and then incrementally, and 200,000 entries in one directory;
//! wall time and peak RSS per run, every target compared with `git archive`. Recorded in
//! RELIABILITY.md.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::git_stdin;

use crate::measure::{fmt_time, measure, median};
use crate::repo::{make_repo, matches_git_archive};
use xtask::util::{project_root, run_quiet};

struct Row {
    case: String,
    run: String,
    time: Duration,
    /// Peak RSS in KiB (the largest of the runs).
    rss_kib: u64,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut sizes = vec![100_000usize, 1_000_000];
    let mut one_dir = 200_000usize;
    let mut dir = std::path::PathBuf::from("/tmp/treesync-scale");
    let mut write = true;
    let mut runs = 5usize;
    let mut treesync: Option<std::path::PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--files" => {
                sizes = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--files: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--one-dir" => one_dir = value()?.parse().map_err(|e| format!("--one-dir: {e}"))?,
            "--dir" => dir = value()?.into(),
            "--no-write" => write = false,
            "--runs" => runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--treesync" => treesync = Some(value()?.into()),
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let root = project_root();
    let bin = crate::bench::treesync_binary(&root, treesync)?;
    let runs = runs.max(1);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12g", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    let result = (|| {
        let mut rows = Vec::new();
        for &n in &sizes {
            let repo = dir.join(format!("repo-{n}.git"));
            make_repo(&repo, n)?;
            wide(&bin, &repo, &dir, &format!("{n} files, 100 per directory (K=14)"), runs, &mut rows)?;
            let _ = std::fs::remove_dir_all(&repo);
        }
        if one_dir > 0 {
            let repo = dir.join("repo-one-dir.git");
            one_directory(&repo, one_dir)?;
            wide(&bin, &repo, &dir, &format!("{one_dir} entries in one directory (K=9)"), runs, &mut rows)?;
            let _ = std::fs::remove_dir_all(&repo);
        }
        Ok::<_, String>(rows)
    })();
    if mounted {
        let _ = Command::new("umount").arg("-l").arg(&dir).status();
    }
    let rows = result?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Targets on a tmpfs; release build; the initial sync once, the incremental syncs and the plan medians of {runs} runs (A → B and B → A take turns); peak RSS of the `treesync` process (`wait4` in a small parent process, so that the benchmark's own memory does not count). Every target was compared with `git archive` (`diff -r`) after the initial sync and after the first and the last incremental sync of each direction.\n"
    );
    let _ = writeln!(md, "| tree | run | time | peak RSS |");
    let _ = writeln!(md, "|---|---|---:|---:|");
    for r in &rows {
        let _ = writeln!(md, "| {} | {} | {} | {} MiB |", r.case, r.run, fmt_time(r.time), r.rss_kib / 1024);
    }
    println!("{md}");
    if write {
        let path = root.join("RELIABILITY.md");
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let (start_m, end_m) = ("<!-- scale:start -->", "<!-- scale:end -->");
        let sizes: Vec<String> = sizes.iter().map(|n| n.to_string()).collect();
        let block = format!(
            "{start_m}\nReproduce: `cargo xtask scale --files {} --one-dir {one_dir} --runs {runs}` (root, for the tmpfs).\n\n{md}{end_m}",
            sizes.join(",")
        );
        let new = match (existing.find(start_m), existing.find(end_m)) {
            (Some(a), Some(b)) if b > a => format!("{}{block}{}", &existing[..a], &existing[b + end_m.len()..]),
            _ => format!("{existing}\n## Large trees\n\n{block}\n"),
        };
        std::fs::write(&path, new).map_err(|e| e.to_string())?;
        eprintln!("RELIABILITY.md updated");
    }
    Ok(())
}

/// A bare repository with tags A (`n` files in one directory `flat/`, and a README) and B (5
/// modified, 2 added, 2 deleted). Built with `hash-object` and `mktree` (git fast-import slows
/// down quadratically with the size of one directory).
fn one_directory(repo: &Path, n: usize) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo).map_err(|e| e.to_string())?;
    run_quiet(Command::new("git").arg("init").arg("-q").arg("--bare").arg(repo))?;
    eprintln!("generating {n} entries in one directory…");
    let files = repo.join("gen");
    std::fs::create_dir_all(&files).map_err(|e| e.to_string())?;
    let mut paths = String::new();
    for i in 0..n + 7 {
        let p = files.join(format!("{i}"));
        std::fs::write(&p, format!("{i}\n")).map_err(|e| e.to_string())?;
        let _ = writeln!(paths, "{}", p.display());
    }
    let ids = git_stdin(repo, &["hash-object", "-w", "--stdin-paths"], paths.as_bytes());
    let ids: Vec<&str> = ids.lines().collect();
    let _ = std::fs::remove_dir_all(&files);
    let readme = git_stdin(repo, &["hash-object", "-w", "--stdin"], b"one big directory\n");
    let mk = |entries: &[(String, &str)]| -> String {
        let mut input = String::new();
        for (name, id) in entries {
            let _ = writeln!(input, "100644 blob {id}\t{name}");
        }
        let flat = git_stdin(repo, &["mktree"], input.as_bytes());
        git_stdin(repo, &["mktree"], format!("100644 blob {readme}\tREADME\n040000 tree {flat}\tflat\n").as_bytes())
    };
    let a: Vec<(String, &str)> = (0..n).map(|i| (format!("e{i:07}"), ids[i])).collect();
    let mut b = a.clone();
    for k in 0..5 {
        b[k * n / 5 + 1].1 = ids[n + k];
    }
    b.push((format!("new{:07}", 1), ids[n + 5]));
    b.push((format!("new{:07}", 2), ids[n + 6]));
    b.remove(n / 3);
    b.remove(2 * n / 3);
    let commit = |tree: &str, parent: Option<&str>| -> String {
        let mut args = vec!["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree, "-m", "one dir"];
        if let Some(p) = parent {
            args.extend(["-p", p]);
        }
        git_stdin(repo, &args, b"")
    };
    let ca = commit(&mk(&a), None);
    let cb = commit(&mk(&b), Some(&ca));
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["update-ref", "refs/tags/A", &ca]))?;
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["update-ref", "refs/tags/B", &cb]))?;
    Ok(())
}

fn sync(bin: &Path, repo: &Path, rev: &str, target: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args(["sync", "-q", "--repo"]).arg(repo).args(["--ref", rev, "--target"]).arg(target);
    c
}

fn wide(bin: &Path, repo: &Path, dir: &Path, case: &str, runs: usize, rows: &mut Vec<Row>) -> Result<(), String> {
    let target = dir.join("target");
    let scratch = dir.join("want");
    let _ = std::fs::remove_dir_all(&target);
    let mib = |kib: u64| kib / 1024;
    let run = "initial sync (nothing → A)";
    eprintln!("{case}: {run}…");
    let (t, rss) = measure(&mut sync(bin, repo, "A", &target))?;
    matches_git_archive(repo, "A", &target, &scratch)?;
    eprintln!("  {run} in {}, peak RSS {} MiB, same as git archive", fmt_time(t), mib(rss));
    rows.push(Row { case: case.into(), run: run.into(), time: t, rss_kib: rss });
    // The incremental syncs take turns (A → B, B → A, …), so that a busy moment of the machine
    // weighs on both directions; the first and the last of each are checked against git.
    let mut forth = Vec::new();
    let mut back = Vec::new();
    let (mut forth_rss, mut back_rss) = (0, 0);
    for i in 0..runs {
        let check = i == 0 || i + 1 == runs;
        let (t, rss) = measure(&mut sync(bin, repo, "B", &target))?;
        if check {
            matches_git_archive(repo, "B", &target, &scratch)?;
        }
        forth.push(t);
        forth_rss = forth_rss.max(rss);
        let (t, rss) = measure(&mut sync(bin, repo, "A", &target))?;
        if check {
            matches_git_archive(repo, "A", &target, &scratch)?;
        }
        back.push(t);
        back_rss = back_rss.max(rss);
    }
    eprintln!("  A → B: {}", forth.iter().map(|t| fmt_time(*t)).collect::<Vec<_>>().join(" "));
    eprintln!("  B → A: {}", back.iter().map(|t| fmt_time(*t)).collect::<Vec<_>>().join(" "));
    rows.push(Row {
        case: case.into(), run: "incremental sync A → B".into(), time: median(forth), rss_kib: forth_rss
    });
    rows.push(Row { case: case.into(), run: "incremental sync B → A".into(), time: median(back), rss_kib: back_rss });
    let mut plans = Vec::new();
    let mut plan_rss = 0;
    for _ in 0..runs {
        let (t, rss) = measure(
            Command::new(bin).args(["plan", "--repo"]).arg(repo).args(["--ref", "B", "--target"]).arg(&target),
        )?;
        plans.push(t);
        plan_rss = plan_rss.max(rss);
    }
    rows.push(Row {
        case: case.into(), run: "plan A → B (no writes)".into(), time: median(plans), rss_kib: plan_rss
    });
    let _ = std::fs::remove_dir_all(&target);
    Ok(())
}
