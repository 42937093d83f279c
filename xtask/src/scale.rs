//! `cargo xtask scale`: large trees, measured: a 1,000,000-file tree (and 100,000 for
//! comparison) synced initially and then incrementally, and 200,000 entries in one directory;
//! wall time and peak RSS per run, every target compared with `git archive`. Recorded in
//! RELIABILITY.md.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::history::{self, Entry, Model};

use crate::bench::{fmt_time, make_repo};
use crate::util::{measure, project_root, run_quiet, run_status};

struct Row {
    case: String,
    run: String,
    time: Duration,
    rss_mib: u64,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut sizes = vec![100_000usize, 1_000_000];
    let mut one_dir = 200_000usize;
    let mut dir = std::path::PathBuf::from("/tmp/treesync-scale");
    let mut write = true;
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
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let root = project_root();
    eprintln!("building treesync (release)…");
    run_status(Command::new("cargo").current_dir(&root).args(["build", "--release", "--quiet", "-p", "treesync-cli"]))?;
    let bin = root.join("target/release/treesync");
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
            wide(&bin, &repo, &dir, &format!("{n} files in 10,000-file directories… (K=14)"), &mut rows)?;
            let _ = std::fs::remove_dir_all(&repo);
        }
        if one_dir > 0 {
            let repo = dir.join("repo-one-dir.git");
            one_directory(&repo, one_dir)?;
            wide(&bin, &repo, &dir, &format!("{one_dir} entries in one directory (K=9)"), &mut rows)?;
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
        "Targets on a tmpfs; release build; one run each; peak RSS of the `treesync` process (`wait4`). Every target was compared with `git archive` (`diff -r`) after each sync.\n"
    );
    let _ = writeln!(md, "| tree | run | time | peak RSS |");
    let _ = writeln!(md, "|---|---|---:|---:|");
    for r in &rows {
        let _ = writeln!(md, "| {} | {} | {} | {} MiB |", r.case, r.run, fmt_time(r.time), r.rss_mib);
    }
    println!("{md}");
    if write {
        let path = root.join("RELIABILITY.md");
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let (start_m, end_m) = ("<!-- scale:start -->", "<!-- scale:end -->");
        let sizes: Vec<String> = sizes.iter().map(|n| n.to_string()).collect();
        let block = format!(
            "{start_m}\nReproduce: `cargo xtask scale --files {} --one-dir {one_dir}` (root, for the tmpfs).\n\n{md}{end_m}",
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

/// A bare repository with tags A (`n` files in one directory) and B (5 modified, 2 added, 2 deleted).
fn one_directory(repo: &Path, n: usize) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo).map_err(|e| e.to_string())?;
    run_quiet(Command::new("git").arg("init").arg("-q").arg("--bare").arg(repo))?;
    eprintln!("generating {n} entries in one directory…");
    let mut a = Model::default();
    for i in 0..n {
        a.insert(&format!("flat/e{i:07}"), Entry::File { content: format!("{i}\n").into_bytes(), executable: false });
    }
    a.insert("README", Entry::File { content: b"one big directory\n".to_vec(), executable: false });
    let (b, _) = history::change_some(&a, 5, 2, 2, 9);
    let commits = history::import(repo, "main", &[a, b]);
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["update-ref", "refs/tags/A", &commits[0]]))?;
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["update-ref", "refs/tags/B", &commits[1]]))?;
    Ok(())
}

fn sync(bin: &Path, repo: &Path, rev: &str, target: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args(["sync", "-q", "--repo"]).arg(repo).args(["--ref", rev, "--target"]).arg(target);
    c
}

fn same(repo: &Path, rev: &str, target: &Path, scratch: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let script = format!(
        "git -C '{}' archive {rev} | tar -x -C '{}' && diff -r --no-dereference -x .treesync '{}' '{}'",
        repo.display(),
        scratch.display(),
        scratch.display(),
        target.display()
    );
    let r = run_quiet(Command::new("sh").args(["-c", &script]));
    let _ = std::fs::remove_dir_all(scratch);
    r.map(|_| ()).map_err(|e| format!("the target differs from git archive {rev}: {e}"))
}

fn wide(bin: &Path, repo: &Path, dir: &Path, case: &str, rows: &mut Vec<Row>) -> Result<(), String> {
    let target = dir.join("target");
    let scratch = dir.join("want");
    let _ = std::fs::remove_dir_all(&target);
    let mib = |kib: u64| kib / 1024;
    for (run, rev) in [("initial sync (nothing → A)", "A"), ("incremental sync A → B", "B"), ("incremental sync B → A", "A")]
    {
        eprintln!("{case}: {run}…");
        let (t, rss) = measure(&mut sync(bin, repo, rev, &target))?;
        same(repo, rev, &target, &scratch)?;
        rows.push(Row { case: case.into(), run: run.into(), time: t, rss_mib: mib(rss) });
    }
    let (t, rss) = measure(Command::new(bin).args(["plan", "--repo"]).arg(repo).args(["--ref", "B", "--target"]).arg(&target))?;
    rows.push(Row { case: case.into(), run: "plan A → B (no writes)".into(), time: t, rss_mib: mib(rss) });
    let _ = std::fs::remove_dir_all(&target);
    Ok(())
}
