//! `cargo xtask scale`: large trees, measured: a 1,000,000-file tree (and 100,000 for
//! comparison) synced initially and then incrementally, and 200,000 entries in one directory;
//! wall time and peak RSS per run, every target compared with `git archive`. Recorded in
//! RELIABILITY.md.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::git_stdin;

use crate::measure::{Usage, fmt_time, measure_usage, median};
use crate::repo::{make_repo, matches_git_archive};
use xtask::util::{project_root, run_quiet};

struct Row {
    case: String,
    run: String,
    time: Duration,
    /// User + system CPU time (median, like `time`).
    cpu: Duration,
    /// Peak RSS in KiB (the largest of the runs).
    rss_kib: u64,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut sizes = vec![100_000usize, 1_000_000];
    let mut one_dir = 200_000usize;
    let mut dir = std::path::PathBuf::from("/tmp/treesync-scale");
    let mut write = true;
    let mut keep = false;
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
            "--keep" => keep = true,
            "--runs" => runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--treesync" => treesync = Some(value()?.into()),
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let root = project_root();
    let bin = crate::bench::treesync_binary(&root, treesync)?;
    let runs = runs.max(1);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // A tmpfs kept by an earlier `--keep` run is used again, with its repositories.
    let already = Command::new("mountpoint").arg("-q").arg(&dir).status().is_ok_and(|s| s.success());
    let mounted = !already
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=12g", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
    let result = (|| {
        let mut rows = Vec::new();
        let mut sized = Vec::new();
        for &n in &sizes {
            let repo = dir.join(format!("repo-{n}.git"));
            if !(keep && has_tags(&repo)) {
                make_repo(&repo, n)?;
            }
            let case = format!("{n} files, 100 per directory (K=14)");
            sized.push(Wide { target: dir.join(format!("target-{n}")), repo, case });
        }
        let flat = wide(&bin, &sized, &dir, runs, &mut rows)?;
        for s in &sized {
            let _ = std::fs::remove_dir_all(&s.target);
            if !keep {
                let _ = std::fs::remove_dir_all(&s.repo);
            }
        }
        if one_dir > 0 {
            let repo = dir.join("repo-one-dir.git");
            if !(keep && has_tags(&repo)) {
                one_directory(&repo, one_dir)?;
            }
            let one = [Wide {
                target: dir.join("target-one-dir"),
                repo: repo.clone(),
                case: format!("{one_dir} entries in one directory (K=9)"),
            }];
            wide(&bin, &one, &dir, runs, &mut rows)?;
            let _ = std::fs::remove_dir_all(&one[0].target);
            if !keep {
                let _ = std::fs::remove_dir_all(&repo);
            }
        }
        Ok::<_, String>((rows, flat))
    })();
    if mounted && !keep {
        let _ = Command::new("umount").arg("-l").arg(&dir).status();
    } else if keep {
        eprintln!("kept the repositories in {} (umount -l {} when done)", dir.display(), dir.display());
    }
    let (rows, flat) = result?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Targets on a tmpfs; release build; the initial sync once, the incremental syncs and the plan medians of {runs} runs (A → B and B → A take turns, and so do the tree sizes, run by run); peak RSS of the `treesync` process (`wait4` in a small parent process, so that the benchmark's own memory does not count). Every target was compared with `git archive` (`diff -r`) after the initial sync and after the first and the last incremental sync of each direction.\n"
    );
    let _ = writeln!(md, "| tree | run | time | CPU (user + sys) | peak RSS |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|");
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} MiB |",
            r.case,
            r.run,
            fmt_time(r.time),
            fmt_time(r.cpu),
            r.rss_kib / 1024
        );
    }
    if let Some(flat) = flat {
        let _ = writeln!(md, "\n{flat}");
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

/// Does `repo` hold the tags A and B of a finished generation (for `--keep`)?
fn has_tags(repo: &Path) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "-q", "--verify", "B^{commit}"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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

/// One tree size of a `wide` run: its repository, its target and the table's name for it.
struct Wide {
    repo: std::path::PathBuf,
    target: std::path::PathBuf,
    case: String,
}

/// Initial sync of each tree, then `runs` incremental syncs A → B and B → A with the trees
/// taking turns run by run (so that a busy moment of the machine weighs on every size), then
/// `runs` plans likewise. With more than one tree: a table of the largest tree's medians over
/// the smallest's (wall and CPU), the "flat in N" figure.
fn wide(bin: &Path, trees: &[Wide], dir: &Path, runs: usize, rows: &mut Vec<Row>) -> Result<Option<String>, String> {
    let scratch = dir.join("want");
    let mib = |kib: u64| kib / 1024;
    for t in trees {
        let _ = std::fs::remove_dir_all(&t.target);
        let run = "initial sync (nothing → A)";
        eprintln!("{}: {run}…", t.case);
        let u = measure_usage(&mut sync(bin, &t.repo, "A", &t.target))?;
        matches_git_archive(&t.repo, "A", &t.target, &scratch)?;
        eprintln!("  {run} in {}, peak RSS {} MiB, same as git archive", fmt_time(u.wall), mib(u.rss_kib));
        rows.push(Row { case: t.case.clone(), run: run.into(), time: u.wall, cpu: u.cpu(), rss_kib: u.rss_kib });
    }
    // Per tree: (wall, cpu) of each run, and the peak RSS, for A → B, B → A and plan.
    let mut forth: Vec<Series> = trees.iter().map(|_| Series::default()).collect();
    let mut back: Vec<Series> = trees.iter().map(|_| Series::default()).collect();
    let mut plans: Vec<Series> = trees.iter().map(|_| Series::default()).collect();
    for i in 0..runs {
        let check = i == 0 || i + 1 == runs;
        for (k, t) in trees.iter().enumerate() {
            let u = measure_usage(&mut sync(bin, &t.repo, "B", &t.target))?;
            if check {
                matches_git_archive(&t.repo, "B", &t.target, &scratch)?;
            }
            forth[k].push(&u);
            let u = measure_usage(&mut sync(bin, &t.repo, "A", &t.target))?;
            if check {
                matches_git_archive(&t.repo, "A", &t.target, &scratch)?;
            }
            back[k].push(&u);
        }
    }
    for _ in 0..runs {
        for (k, t) in trees.iter().enumerate() {
            let u = measure_usage(
                Command::new(bin).args(["plan", "--repo"]).arg(&t.repo).args(["--ref", "B", "--target"]).arg(&t.target),
            )?;
            plans[k].push(&u);
        }
    }
    for (k, t) in trees.iter().enumerate() {
        eprintln!("  {}: A → B: {}", t.case, forth[k].walls());
        eprintln!("  {}: B → A: {}", t.case, back[k].walls());
        for (run, s) in [
            ("incremental sync A → B", &forth[k]),
            ("incremental sync B → A", &back[k]),
            ("plan A → B (no writes)", &plans[k]),
        ] {
            rows.push(Row { case: t.case.clone(), run: run.into(), time: s.wall(), cpu: s.cpu(), rss_kib: s.rss_kib });
        }
    }
    if trees.len() < 2 {
        return Ok(None);
    }
    let (small, large) = (0, trees.len() - 1);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Flat in N: the medians of the largest tree over those of the smallest (issue 18 asks for ≤ 1.5× at 1,000,000 vs 10,000 files).\n"
    );
    let _ = writeln!(md, "| run | {} | {} | wall ratio | CPU ratio |", trees[small].case, trees[large].case);
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64().max(1e-9);
    for (run, s) in
        [("incremental sync A → B", &forth), ("incremental sync B → A", &back), ("plan A → B (no writes)", &plans)]
    {
        let _ = writeln!(
            md,
            "| {run} | {} wall, {} CPU | {} wall, {} CPU | {:.2}× | {:.2}× |",
            fmt_time(s[small].wall()),
            fmt_time(s[small].cpu()),
            fmt_time(s[large].wall()),
            fmt_time(s[large].cpu()),
            ratio(s[small].wall(), s[large].wall()),
            ratio(s[small].cpu(), s[large].cpu()),
        );
    }
    Ok(Some(md))
}

/// The runs of one kind on one tree.
#[derive(Default)]
struct Series {
    walls: Vec<Duration>,
    cpus: Vec<Duration>,
    rss_kib: u64,
}

impl Series {
    fn push(&mut self, u: &Usage) {
        self.walls.push(u.wall);
        self.cpus.push(u.cpu());
        self.rss_kib = self.rss_kib.max(u.rss_kib);
    }
    fn wall(&self) -> Duration {
        median(self.walls.clone())
    }
    fn cpu(&self) -> Duration {
        median(self.cpus.clone())
    }
    fn walls(&self) -> String {
        self.walls.iter().map(|t| fmt_time(*t)).collect::<Vec<_>>().join(" ")
    }
}
