//! `cargo xtask bench jump`: a big jump of real history on the local disk (issue 33): treesync
//! vs `git checkout` between two commits of a real repository (git/git v2.26.1 ↔ master:
//! ~4,700 paths changed), round trips A→B→A, side by side in one run.
//!
//! Both tools read the same repository: a `git clone --bare --shared` of the one given (so
//! `git checkout` moves the clone's HEAD, not the caller's). Each has its own work tree (git
//! its own index, `GIT_INDEX_FILE`) in `--dir`, which must be on the disk measured (not a
//! tmpfs: the point is the filesystem's metadata cost). Before every timed run `sync(1)`
//! writes out what earlier runs left dirty, so each run starts from a tree on disk (as a
//! jump to a release does in real use) and pays only its own work; which tool goes first
//! does not change from run to run, so the order is fixed: treesync, then git. The medians are
//! per direction. Then one jump A→B of each tool under `strace -f -c`: system calls by name,
//! per file written.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use xtask::util::{project_root, run_quiet};

use crate::measure::{Usage, fmt_time, measure_usage, median};

struct Config {
    repo: PathBuf,
    from: String,
    to: String,
    runs: usize,
    dir: PathBuf,
    treesync: Option<PathBuf>,
    write: bool,
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config {
        repo: PathBuf::new(),
        from: String::new(),
        to: String::new(),
        runs: 5,
        dir: PathBuf::from("/var/tmp/treesync-bench-jump"),
        treesync: None,
        write: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--jump-repo" => c.repo = PathBuf::from(value()?),
            "--jump-from" => c.from = value()?.clone(),
            "--jump-to" => c.to = value()?.clone(),
            "--runs" => c.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--dir" => c.dir = PathBuf::from(value()?),
            "--treesync" => c.treesync = Some(PathBuf::from(value()?)),
            "--no-write" => c.write = false,
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    if c.repo.as_os_str().is_empty() || c.from.is_empty() || c.to.is_empty() {
        return Err(
            "bench jump needs --jump-repo PATH --jump-from A --jump-to B (e.g. a clone of git/git, v2.26.1 and master)"
                .into(),
        );
    }
    if c.runs == 0 {
        return Err("--runs must be ≥ 1".into());
    }
    Ok(c)
}

/// One tool's jumps in one direction.
#[derive(Default)]
struct Runs {
    usage: Vec<Usage>,
}

impl Runs {
    fn wall(&self) -> Duration {
        median(self.usage.iter().map(|u| u.wall).collect())
    }
    fn cpu(&self) -> Duration {
        median(self.usage.iter().map(|u| u.cpu()).collect())
    }
    fn range(&self) -> String {
        let min = self.usage.iter().map(|u| u.wall).min().unwrap_or_default();
        let max = self.usage.iter().map(|u| u.wall).max().unwrap_or_default();
        format!("{}–{}", fmt_time(min), fmt_time(max))
    }
}

pub fn run(args: &[String]) -> Result<(), String> {
    let c = parse(args)?;
    let root = project_root();
    let treesync = super::output::treesync_binary(&root, c.treesync.clone())?;
    let d = &c.dir;
    let _ = std::fs::remove_dir_all(d);
    std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    // `stat -f` calls ext4 "ext2/ext3"; findmnt names the mount's type, and its options say
    // whether the journal is there (`noload`) and discards are synchronous (`discard`).
    let fs_type = run_quiet(Command::new("findmnt").args(["-n", "-o", "FSTYPE,OPTIONS", "-T"]).arg(d))?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if fs_type.starts_with("tmpfs") {
        return Err(format!("{} is on a tmpfs: give --dir on the disk to measure", d.display()));
    }
    let rev = |r: &str| -> Result<String, String> {
        let out = run_quiet(
            Command::new("git")
                .arg("--git-dir")
                .arg(&c.repo)
                .args(["rev-parse", "--verify"])
                .arg(format!("{r}^{{commit}}")),
        )?;
        Ok(out.trim().to_string())
    };
    let (a, b) = (rev(&c.from)?, rev(&c.to)?);
    let repo = d.join("repo.git");
    run_quiet(Command::new("git").args(["clone", "-q", "--bare", "--shared"]).arg(&c.repo).arg(&repo))?;
    let changes = run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args([
        "diff",
        "--no-renames",
        "--name-status",
        &a,
        &b,
    ]))?;
    let count = |s: &str| changes.lines().filter(|l| l.starts_with(s)).count();
    let (added, modified, deleted) = (count("A"), count("M") + count("T"), count("D"));

    let ts_target = d.join("ts");
    let git_work = d.join("gw");
    let git_index = d.join("git.index");
    std::fs::create_dir_all(&git_work).map_err(|e| e.to_string())?;
    let ts = |rev: &str| {
        let mut cmd = Command::new(&treesync);
        cmd.args(["sync", "-q", "--repo"]).arg(&repo).args(["--ref", rev, "--target"]).arg(&ts_target);
        cmd
    };
    let git = |rev: &str| {
        let mut cmd = Command::new("git");
        cmd.arg("--git-dir").arg(&repo).arg("--work-tree").arg(&git_work).env("GIT_INDEX_FILE", &git_index);
        cmd.args(["checkout", "-q", "-f", "--detach", rev]);
        cmd
    };
    let flush = || run_quiet(&mut Command::new("sync")).map(|_| ());
    eprintln!("jump: checking out {} in both trees…", c.from);
    run_quiet(&mut ts(&a))?;
    run_quiet(&mut git(&a))?;

    // [direction][tool]: 0 = A→B, 1 = B→A; 0 = treesync, 1 = git.
    let mut runs: [[Runs; 2]; 2] = Default::default();
    for r in 0..c.runs {
        eprintln!("jump: round trip {}/{}…", r + 1, c.runs);
        for (dir, to) in [(0, &b), (1, &a)] {
            flush()?;
            runs[dir][0].usage.push(measure_usage(&mut ts(to))?);
            flush()?;
            runs[dir][1].usage.push(measure_usage(&mut git(to))?);
        }
    }

    eprintln!("jump: strace of one jump of each…");
    flush()?;
    let ts_calls = syscalls(&ts(&b))?;
    flush()?;
    let git_calls = syscalls(&git(&b))?;

    let diff = Command::new("diff")
        .args(["-r", "--no-dereference", "-x", ".treesync", "-x", ".git"])
        .arg(&ts_target)
        .arg(&git_work)
        .output()
        .map_err(|e| format!("diff: {e}"))?;
    if !diff.status.success() {
        return Err(format!(
            "treesync's tree and git's differ after the benchmark: {}",
            String::from_utf8_lossy(&diff.stdout).chars().take(2000).collect::<String>()
        ));
    }

    let mut md = String::new();
    let _ = writeln!(
        md,
        "{} (`{}`) ↔ {} (`{}`) of `{}`: {added} files added, {modified} modified, {deleted} deleted (no rename detection) from A to B; \
         work trees on `{fs_type}` in `{}`; `sync` before every timed run; medians of {} runs per direction, round trips A→B→A with the tools taking turns; {} cores, load average {} at the end.\n",
        c.from,
        &a[..10],
        c.to,
        &b[..10],
        c.repo.display(),
        d.display(),
        c.runs,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_default(),
    );
    let _ = writeln!(
        md,
        "| jump | tool | wall time (median) | range | CPU (user + sys, median) | git's time ÷ treesync's |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|");
    for (dir, label) in [(0, format!("{} → {}", c.from, c.to)), (1, format!("{} → {}", c.to, c.from))] {
        let ratio = runs[dir][1].wall().as_secs_f64() / runs[dir][0].wall().as_secs_f64();
        for (tool, name) in [(0, "`treesync sync`"), (1, "`git checkout -f --detach`")] {
            let r = &runs[dir][tool];
            let shown = if tool == 0 { format!("**{ratio:.2}×**") } else { "–".into() };
            let _ = writeln!(
                md,
                "| {label} | {name} | {} | {} | {} | {shown} |",
                fmt_time(r.wall()),
                r.range(),
                fmt_time(r.cpu())
            );
        }
    }
    let written = (added + modified).max(1) as f64;
    let _ = writeln!(
        md,
        "\nSystem calls of one jump {} → {} (`strace -f -c`; {} files written): the calls that touch files, and all.\n",
        c.from,
        c.to,
        added + modified
    );
    let _ = writeln!(md, "| syscall | treesync | per file written | git | per file written |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    let names = [
        "openat",
        "openat2",
        "linkat",
        "renameat",
        "rename",
        "unlinkat",
        "unlink",
        "write",
        "fstat",
        "newfstatat",
        "close",
        "futex",
    ];
    let get = |calls: &[(String, u64)], n: &str| calls.iter().find(|(k, _)| k == n).map(|(_, v)| *v).unwrap_or(0);
    for n in names {
        let (t, g) = (get(&ts_calls, n), get(&git_calls, n));
        if t + g > 0 {
            let _ = writeln!(md, "| `{n}` | {t} | {:.2} | {g} | {:.2} |", t as f64 / written, g as f64 / written);
        }
    }
    let (t, g) = (ts_calls.iter().map(|x| x.1).sum::<u64>(), git_calls.iter().map(|x| x.1).sum::<u64>());
    let _ = writeln!(md, "| all | {t} | {:.2} | {g} | {:.2} |", t as f64 / written, g as f64 / written);
    println!("{md}");
    if c.write {
        let build = match &c.treesync {
            Some(p) => format!(" --treesync {}", p.strip_prefix(&root).unwrap_or(p).display()),
            None => String::new(),
        };
        let block = format!(
            "Reproduce: `cargo xtask bench jump --jump-repo {} --jump-from {} --jump-to {} --runs {} --dir {}{build}` (the repository: `git clone --bare https://github.com/git/git`; `--dir` on the disk to measure, not a tmpfs).\n\n{md}",
            c.repo.display(),
            c.from,
            c.to,
            c.runs,
            d.display()
        );
        super::output::write_section(
            &root.join("BENCHMARKS.md"),
            "jump",
            "A big jump of real history on the local disk: treesync vs git checkout",
            &block,
        )?;
        eprintln!("BENCHMARKS.md updated");
    }
    let _ = std::fs::remove_dir_all(d);
    Ok(())
}

/// System calls of `cmd` and its children by name (`strace -f -c`).
fn syscalls(cmd: &Command) -> Result<Vec<(String, u64)>, String> {
    let summary = super::trace::strace(cmd, &["-f", "-c"])?;
    Ok(summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // `% time seconds usecs/call calls [errors] syscall`
            let calls = f.get(3)?.parse().ok()?;
            let name = f.last()?;
            (f.len() >= 5 && *name != "total").then(|| (name.to_string(), calls))
        })
        .collect())
}
