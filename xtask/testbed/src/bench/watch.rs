//! `cargo xtask bench watch`: how fast a push reaches the mirrors, and what following a ref costs.
//!
//! Three tables, each measured in one run:
//! - **Push to synced**: a `treesync watch --json` process follows `main` of a bare repository of
//!   N files; the benchmark moves `main` with `git update-ref` to the next commit of a prepared
//!   chain (each changing K files) at a random moment, and takes the time from just before
//!   `git update-ref` starts until the watch prints the `synced` event of that commit (the event
//!   comes after the sync finished, so the target equals the commit then). p50 / p99 / max over
//!   P pushes, event-driven vs `--poll --interval 5s`, for a target on tmpfs and one on the slow
//!   FUSE filesystem standing in for a NAS (its tree seeded through the backing directory).
//! - **Fan-out**: M mirrors of one repository (targets on tmpfs, F files each) followed by one
//!   `treesync watch --all` against M `treesync watch NAME` processes: time from `git
//!   update-ref` until every mirror printed its `synced` event, and the CPU time and the memory
//!   (sum of the processes' resident sets) of each approach.
//! - **Remote**: a watch of a `git://` URL served by a real `git daemon` on 127.0.0.1: the
//!   daemon's upload-pack requests while idle (per look and per minute) and per push.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use treesync_testkit::slowfs::{self, SlowFs};
use xtask::util::run_quiet;

use crate::measure::fmt_time;
use crate::repo::matches_git_archive;

/// What to measure.
pub struct Config {
    /// Files in the latency benchmark's tree.
    pub files: usize,
    /// Files changed per push.
    pub changed: usize,
    /// Pushes per latency row.
    pub pushes: usize,
    /// Pushes of the polling rows (each costs up to the interval).
    pub poll_pushes: usize,
    /// The polling rows' interval.
    pub poll_interval: Duration,
    /// Per-request latency of the NAS testbed.
    pub latency: Duration,
    /// Mirrors of the fan-out benchmark.
    pub mirrors: usize,
    /// Files of each fan-out mirror.
    pub fanout_files: usize,
    /// Pushes of the fan-out benchmark.
    pub fanout_pushes: usize,
    /// The remote benchmark's interval and idle time.
    pub remote_interval: Duration,
    pub remote_idle: Duration,
    /// Which parts run.
    pub latency_local: bool,
    pub latency_nas: bool,
    pub fanout: bool,
    pub remote: bool,
}

/// Run the benchmarks; returns the Markdown tables.
pub fn run(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    let mut out = String::new();
    if c.latency_local || c.latency_nas {
        let t = latency(c, dir, treesync)?;
        eprintln!("{t}");
        out.push_str(&t);
    }
    if c.fanout {
        let t = fanout(c, dir, treesync)?;
        eprintln!("{t}");
        out.push_str(&t);
    }
    if c.remote {
        let t = remote(c, dir, treesync)?;
        eprintln!("{t}");
        out.push_str(&t);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The repository: commit A of N files, and a chain of commits after it, each changing K files.

/// A bare repository at `repo` whose `main` is commit A of `files` files; returns A and a chain
/// of `count` commits after A, each modifying `changed` files (spread over the tree). `main`
/// stays at A.
pub(super) fn repo_with_chain(
    repo: &Path,
    files: usize,
    count: usize,
    changed: usize,
) -> Result<(String, Vec<String>), String> {
    crate::repo::make_repo(repo, files)?;
    let git = |args: &[&str]| run_quiet(Command::new("git").arg("--git-dir").arg(repo).args(args));
    let a = git(&["rev-parse", "A^{commit}"])?.trim().to_string();
    git(&["update-ref", "refs/heads/main", &a])?;
    let paths: Vec<String> = git(&["ls-tree", "-r", "--name-only", &a])?.lines().map(str::to_string).collect();
    let index = repo.join("bench-chain.index");
    let with_index = |args: &[&str]| {
        run_quiet(Command::new("git").env("GIT_INDEX_FILE", &index).arg("--git-dir").arg(repo).args(args))
    };
    with_index(&["read-tree", &a])?;
    let step = (paths.len() / changed.max(1)).max(1);
    let mut parent = a.clone();
    let mut chain = Vec::with_capacity(count);
    for i in 0..count {
        let mut cacheinfo = Vec::new();
        for j in 0..changed {
            let path = &paths[(j * step + i * 7) % paths.len()];
            let blob_src = repo.join("bench-chain.blob");
            std::fs::write(&blob_src, format!("push {i} file {j}\n{}\n", "x".repeat(100 + (i * 31 + j) % 900)))
                .map_err(|e| e.to_string())?;
            let blob = git(&["hash-object", "-w", &blob_src.display().to_string()])?.trim().to_string();
            cacheinfo.push(format!("100644,{blob},{path}"));
        }
        let mut args = vec!["update-index"];
        for ci in &cacheinfo {
            args.push("--cacheinfo");
            args.push(ci);
        }
        with_index(&args)?;
        let tree = with_index(&["write-tree"])?.trim().to_string();
        let commit = run_quiet(
            Command::new("git")
                .env("GIT_AUTHOR_NAME", "bench")
                .env("GIT_AUTHOR_EMAIL", "bench@example.com")
                .env("GIT_COMMITTER_NAME", "bench")
                .env("GIT_COMMITTER_EMAIL", "bench@example.com")
                .arg("--git-dir")
                .arg(repo)
                .args(["commit-tree", &tree, "-p", &parent, "-m", &format!("push {i}")]),
        )?
        .trim()
        .to_string();
        chain.push(commit.clone());
        parent = commit;
    }
    let _ = std::fs::remove_file(&index);
    let _ = std::fs::remove_file(repo.join("bench-chain.blob"));
    Ok((a, chain))
}

// ---------------------------------------------------------------------------------------------
// A running watch and its `synced` events.

/// A `treesync watch --json` process (or several mirrors in one), with the time each `synced`
/// event arrived.
struct Watch {
    child: Child,
    synced: Receiver<(Instant, Option<String>, String)>,
    /// Commits seen per mirror (`None`: no mirror name).
    seen: HashMap<Option<String>, String>,
}

impl Watch {
    fn start(mut cmd: Command) -> Result<Watch, String> {
        cmd.arg("--json").stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let now = Instant::now();
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                if v["event"] == "synced" {
                    let mirror = v["mirror"].as_str().map(str::to_string);
                    let commit = v["outcome"]["commit"].as_str().unwrap_or_default().to_string();
                    if tx.send((now, mirror, commit)).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Watch { child, synced: rx, seen: HashMap::new() })
    }

    /// Wait until `mirrors` (names; `[None]` for an unnamed watch) all printed `synced` for
    /// `commit`; returns the time the last of them did.
    fn wait_for(&mut self, mirrors: &[Option<String>], commit: &str, limit: Duration) -> Result<Instant, String> {
        let deadline = Instant::now() + limit;
        let mut last = None;
        loop {
            if mirrors.iter().all(|m| self.seen.get(m).is_some_and(|c| c == commit)) {
                return last.ok_or_else(|| "already synced before the push".to_string());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.synced.recv_timeout(left) {
                Ok((at, mirror, c)) => {
                    if c == commit {
                        last = Some(at);
                    }
                    self.seen.insert(mirror, c);
                }
                Err(_) => {
                    let missing: Vec<_> =
                        mirrors.iter().filter(|m| self.seen.get(*m).is_none_or(|c| c != commit)).take(3).collect();
                    return Err(format!("no synced event for {commit} within {limit:?} from {missing:?}"));
                }
            }
        }
    }

    fn pids(&self) -> Vec<u32> {
        vec![self.child.id()]
    }

    fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) of `pid` so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 =
        f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// CPU time a watch uses over two seconds of doing nothing (after its first sync).
fn idle_cpu(w: &Watch) -> Duration {
    let pid = w.pids()[0];
    let before = cpu(pid);
    std::thread::sleep(Duration::from_secs(2));
    cpu(pid).saturating_sub(before)
}

/// Resident set size of `pid` now (KiB).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A number from 0 to `n` - 1, from a small xorshift generator.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

// ---------------------------------------------------------------------------------------------
// Push to synced.

struct LatencyRow {
    bed: String,
    mode: String,
    pushes: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    idle_cpu: Duration,
}

fn latency(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    let repo = dir.join("watch-repo.git");
    let beds = usize::from(c.latency_local) + usize::from(c.latency_nas);
    // The local bed's `git push` row takes its commits from the same chain.
    let count = (c.pushes + c.poll_pushes) * beds + usize::from(c.latency_local) * c.pushes + 4;
    eprintln!("watch latency: a repository of {} files and a chain of {count} commits…", c.files);
    let (a, chain) = repo_with_chain(&repo, c.files, count, c.changed)?;
    let mut rows = Vec::new();
    // How long each `git update-ref` process took by itself (start to exit), per row.
    let mut own: Vec<(String, &str, Duration)> = Vec::new();
    let mut next = 0usize;
    let mut beds: Vec<(String, PathBuf, PathBuf, Option<SlowFs>)> = Vec::new();
    if c.latency_local {
        let t = dir.join("watch-local");
        beds.push(("local tmpfs".into(), t.clone(), t, None));
    }
    if c.latency_nas {
        slowfs::check().map_err(|m| format!("the NAS testbed needs FUSE: {m}"))?;
        let backing = dir.join("watch-nas-backing");
        let mnt = dir.join("watch-nas-mnt");
        for d in [&backing, &mnt] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let fs = SlowFs::mount(
            &backing,
            &mnt,
            slowfs::Config { meta_latency: c.latency, threads: 128, ..Default::default() },
        )
        .map_err(|e| format!("mounting the slow filesystem: {e}"))?;
        beds.push((format!("NAS (FUSE, {} per op)", fmt_time(c.latency)), fs.path().to_path_buf(), backing, Some(fs)));
    }
    for (bed, target, seed_at, _fs) in &beds {
        for (mode, polling) in [("events", false), ("poll 5s", true)] {
            // Seed the target at the chain's current commit through the backing directory (a
            // NAS initial sync is not what this measures), then watch the target itself.
            // Emptied, not removed: the NAS testbed serves this directory as its root.
            std::fs::create_dir_all(seed_at).map_err(|e| e.to_string())?;
            for entry in std::fs::read_dir(seed_at).map_err(|e| e.to_string())? {
                let path = entry.map_err(|e| e.to_string())?.path();
                if path.is_dir() && !path.is_symlink() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                }
                .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let at = if next == 0 { a.clone() } else { chain[next - 1].clone() };
            run_quiet(
                Command::new(treesync)
                    .arg("sync")
                    .arg("--repo")
                    .arg(&repo)
                    .args(["--ref", &at, "--target"])
                    .arg(seed_at),
            )?;
            run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args(["update-ref", "refs/heads/main", &at]))?;
            let mut cmd = Command::new(treesync);
            cmd.arg("watch").arg("--repo").arg(&repo).args(["--ref", "main", "--target"]).arg(target);
            if polling {
                cmd.args(["--poll", "--interval"]).arg(format!("{}ms", c.poll_interval.as_millis()));
            }
            let mut w = Watch::start(cmd)?;
            // The first look syncs nothing new (the target is at the ref) but reports it.
            w.wait_for(&[None], &at, Duration::from_secs(600))?;
            let idle_cpu = idle_cpu(&w);
            let pushes = if polling { c.poll_pushes } else { c.pushes };
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ next as u64);
            let spread = if polling { c.poll_interval } else { Duration::from_millis(300) };
            let mut times = Vec::with_capacity(pushes);
            eprintln!("watch latency: {bed}, {mode}: {pushes} pushes…");
            for _ in 0..pushes {
                std::thread::sleep(Duration::from_millis(50) + spread.mul_f64(rng.below(1000) as f64 / 1000.0));
                let commit = &chain[next];
                next += 1;
                let t0 = Instant::now();
                run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args([
                    "update-ref",
                    "refs/heads/main",
                    commit,
                ]))?;
                own.push((bed.clone(), mode, t0.elapsed()));
                let done = w.wait_for(&[None], commit, Duration::from_secs(120))?;
                times.push(done.duration_since(t0));
            }
            w.stop();
            let scratch = dir.join("watch-scratch");
            // Checked through the backing directory: a diff of 100,000 files through the NAS
            // testbed's 1 ms per request takes minutes.
            matches_git_archive(&repo, &chain[next - 1], seed_at, &scratch)?;
            times.sort();
            rows.push(LatencyRow {
                bed: bed.clone(),
                mode: mode.into(),
                pushes,
                p50: percentile(&times, 0.5),
                p99: percentile(&times, 0.99),
                max: *times.last().expect("pushes"),
                idle_cpu,
            });
        }
    }
    drop(beds);
    let mut push_note = String::from("`git update-ref` itself (start to exit, part of each time above):");
    for r in &rows {
        let mut mine: Vec<Duration> =
            own.iter().filter(|(b, m, _)| *b == r.bed && *m == r.mode).map(|(_, _, d)| *d).collect();
        mine.sort();
        if let Some(max) = mine.last() {
            push_note.push_str(&format!(
                " {}, {}: p50 {}, max {};",
                r.bed,
                r.mode,
                fmt_time(percentile(&mine, 0.5)),
                fmt_time(*max)
            ));
        }
    }
    push_note.pop();
    push_note.push_str(".\n\n");
    if c.latency_local {
        let (row, own) = push_latency(dir, treesync, &repo, &chain[next..next + c.pushes])?;
        push_note += &format!(
            "With `git push`: each push sends one commit of the chain ({} files changed) from a repository that has it to the bare repository the watch follows (on tmpfs, over the local transport); the time runs from just before `git push` starts. `git push` itself took p50 {} and max {} of it (start to exit; the ref moves before it exits).\n\n",
            c.changed,
            fmt_time(own.0),
            fmt_time(own.1)
        );
        rows.push(row);
    }
    let _ = std::fs::remove_dir_all(&repo);
    let mut t = format!(
        "**Push to synced** ({} files, {} files changed per push; from `git update-ref` until the watch reports the target at the commit)\n\n\
         | Target | Watch | Pushes | p50 | p99 | max | idle CPU (2 s) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
        c.files, c.changed
    );
    for r in &rows {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.bed,
            r.mode,
            r.pushes,
            fmt_time(r.p50),
            fmt_time(r.p99),
            fmt_time(r.max),
            fmt_time(r.idle_cpu)
        ));
    }
    t.push('\n');
    t.push_str(&push_note);
    Ok(t)
}

/// Push to synced with `git push`: `commits` (a chain whose objects are in `source`) are pushed
/// one by one to a bare repository that starts with the first one's parent, followed by an
/// event-driven watch on tmpfs. The row, and `git push`'s own p50 and max.
fn push_latency(
    dir: &Path,
    treesync: &Path,
    source: &Path,
    commits: &[String],
) -> Result<(LatencyRow, (Duration, Duration)), String> {
    let dest = dir.join("watch-push-dest.git");
    let target = dir.join("watch-push-target");
    for d in [&dest, &target] {
        let _ = std::fs::remove_dir_all(d);
    }
    run_quiet(Command::new("git").args(["init", "-q", "--bare"]).arg(&dest))?;
    let first = commits.first().ok_or("no commits to push")?;
    let start = format!("{first}~1");
    let push = |rev: &str| {
        let mut cmd = Command::new("git");
        cmd.arg("--git-dir").arg(source).arg("push").arg("-q").arg(&dest).arg(format!("{rev}:refs/heads/main"));
        cmd
    };
    run_quiet(&mut push(&start))?;
    let at = run_quiet(Command::new("git").arg("--git-dir").arg(&dest).args(["rev-parse", "main"]))?.trim().to_string();
    let mut cmd = Command::new(treesync);
    cmd.arg("watch").arg("--repo").arg(&dest).args(["--ref", "main", "--target"]).arg(&target);
    let mut w = Watch::start(cmd)?;
    w.wait_for(&[None], &at, Duration::from_secs(600))?;
    let idle_cpu = idle_cpu(&w);
    eprintln!("watch latency: local tmpfs, git push: {} pushes…", commits.len());
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut times, mut own) = (Vec::new(), Vec::new());
    for commit in commits {
        std::thread::sleep(Duration::from_millis(50 + rng.below(300)));
        let t0 = Instant::now();
        run_quiet(&mut push(commit))?;
        own.push(t0.elapsed());
        let done = w.wait_for(&[None], commit, Duration::from_secs(120))?;
        times.push(done.duration_since(t0));
    }
    w.stop();
    matches_git_archive(&dest, commits.last().expect("pushed"), &target, &dir.join("watch-scratch"))?;
    for d in [&dest, &target] {
        let _ = std::fs::remove_dir_all(d);
    }
    times.sort();
    own.sort();
    let row = LatencyRow {
        bed: "local tmpfs".into(),
        mode: "events, `git push`".into(),
        pushes: commits.len(),
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
        max: *times.last().expect("pushes"),
        idle_cpu,
    };
    Ok((row, (percentile(&own, 0.5), *own.last().expect("pushes"))))
}

// ---------------------------------------------------------------------------------------------
// Fan-out: one process for M mirrors vs M processes.

fn fanout(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    let repo = dir.join("fanout-repo.git");
    eprintln!("watch fan-out: {} mirrors of {} files…", c.mirrors, c.fanout_files);
    let (a, chain) = repo_with_chain(&repo, c.fanout_files, c.fanout_pushes * 2 + 1, 10)?;
    let config = dir.join("fanout.toml");
    let names: Vec<String> = (0..c.mirrors).map(|i| format!("m{i:03}")).collect();
    let mut toml = String::new();
    for n in &names {
        toml.push_str(&format!(
            "[mirror.{n}]\nrepo = {:?}\nref = \"main\"\ntarget = {:?}\n\n",
            repo.display().to_string(),
            dir.join("fanout").join(n).display().to_string()
        ));
    }
    std::fs::write(&config, toml).map_err(|e| e.to_string())?;
    let mirrors: Vec<Option<String>> = names.iter().cloned().map(Some).collect();
    let mut rows = Vec::new();
    let mut next = 0usize;
    for approach in ["one `watch --all`", "one `watch NAME` process per mirror"] {
        let _ = std::fs::remove_dir_all(dir.join("fanout"));
        // The targets' parent: treesync creates a target, never its parents.
        std::fs::create_dir_all(dir.join("fanout")).map_err(|e| e.to_string())?;
        let at = if next == 0 { a.clone() } else { chain[next - 1].clone() };
        run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args(["update-ref", "refs/heads/main", &at]))?;
        let mut watches = Vec::new();
        if approach.starts_with("one `watch --all`") {
            let mut cmd = Command::new(treesync);
            cmd.arg("--config").arg(&config).args(["watch", "--all"]);
            watches.push((Watch::start(cmd)?, mirrors.clone()));
        } else {
            for n in &names {
                let mut cmd = Command::new(treesync);
                cmd.arg("--config").arg(&config).args(["watch", n]);
                watches.push((Watch::start(cmd)?, vec![Some(n.clone())]));
            }
        }
        // Every mirror's first sync (initial checkouts).
        let t0 = Instant::now();
        for (w, ms) in &mut watches {
            w.wait_for(ms, &at, Duration::from_secs(900))?;
        }
        let initial = t0.elapsed();
        let pids: Vec<u32> = watches.iter().flat_map(|(w, _)| w.pids()).collect();
        let cpu0: Duration = pids.iter().map(|p| cpu(*p)).sum();
        let mut times = Vec::new();
        for _ in 0..c.fanout_pushes {
            std::thread::sleep(Duration::from_millis(300));
            let commit = chain[next].clone();
            next += 1;
            let t0 = Instant::now();
            run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args([
                "update-ref",
                "refs/heads/main",
                &commit,
            ]))?;
            let mut last = t0;
            for (w, ms) in &mut watches {
                last = last.max(w.wait_for(ms, &commit, Duration::from_secs(300))?);
            }
            times.push(last.duration_since(t0));
        }
        let cpu_pushes = pids.iter().map(|p| cpu(*p)).sum::<Duration>().saturating_sub(cpu0);
        let rss: u64 = pids.iter().map(|p| rss_kib(*p)).sum();
        for (w, _) in watches {
            w.stop();
        }
        let scratch = dir.join("fanout-scratch");
        for n in names.iter().step_by((names.len() / 5).max(1)) {
            matches_git_archive(&repo, &chain[next - 1], &dir.join("fanout").join(n), &scratch)?;
        }
        times.sort();
        rows.push((approach, initial, percentile(&times, 0.5), *times.last().expect("pushes"), cpu_pushes, rss));
    }
    let _ = std::fs::remove_dir_all(dir.join("fanout"));
    let _ = std::fs::remove_dir_all(&repo);
    let mut t = format!(
        "**Fan-out** ({} mirrors of one repository, {} files each, targets on tmpfs; {} pushes of 10 changed files)\n\n\
         | Approach | Processes | Initial checkouts (all) | Push → all synced, median | max | CPU for the pushes | Memory (sum of RSS) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        c.mirrors, c.fanout_files, c.fanout_pushes
    );
    for (approach, initial, p50, max, cpu, rss) in &rows {
        let procs = if approach.starts_with("one `watch --all`") { 1 } else { c.mirrors };
        t.push_str(&format!(
            "| {approach} | {procs} | {} | {} | {} | {} | {:.1} MiB |\n",
            fmt_time(*initial),
            fmt_time(*p50),
            fmt_time(*max),
            fmt_time(*cpu),
            *rss as f64 / 1024.0
        ));
    }
    t.push('\n');
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// Remote: requests to a git daemon.

fn remote(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    let base = dir.join("remote-served");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    let repo = base.join("site.git");
    let pushes = 5;
    let (a, chain) = repo_with_chain(&repo, 2_000, pushes, 10)?;
    let daemon = treesync_testkit::gitdaemon::GitDaemon::start(&base);
    let url = daemon.url("site.git");
    let target = dir.join("remote-target");
    let cache = dir.join("remote-cache");
    for d in [&target, &cache] {
        let _ = std::fs::remove_dir_all(d);
    }
    let mut cmd = Command::new(treesync);
    cmd.arg("watch").args(["--repo", &url, "--ref", "main", "--target"]).arg(&target);
    cmd.arg("--cache-dir").arg(&cache).arg("--interval").arg(format!("{}ms", c.remote_interval.as_millis()));
    let mut w = Watch::start(cmd)?;
    w.wait_for(&[None], &a, Duration::from_secs(120))?;
    std::thread::sleep(c.remote_interval / 2);
    let r0 = daemon.requests();
    std::thread::sleep(c.remote_idle);
    let idle = daemon.requests() - r0;
    let looks = c.remote_idle.as_secs_f64() / c.remote_interval.as_secs_f64();
    let r1 = daemon.requests();
    for commit in &chain {
        run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args(["update-ref", "refs/heads/main", commit]))?;
        w.wait_for(&[None], commit, Duration::from_secs(120))?;
    }
    let per_push_total = daemon.requests() - r1;
    w.stop();
    // What a push sends: the pack of the new objects, as git would send it.
    let pack = run_quiet(Command::new("sh").arg("-c").arg(format!(
        "git --git-dir '{}' rev-list --objects {}..{} | git --git-dir '{}' pack-objects --stdout -q | wc -c",
        repo.display(),
        a,
        chain[0],
        repo.display()
    )))?;
    let scratch = dir.join("remote-scratch");
    matches_git_archive(&repo, chain.last().expect("pushes"), &target, &scratch)?;
    drop(daemon);
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&cache);
    let per_min = idle as f64 * 60.0 / c.remote_idle.as_secs_f64();
    Ok(format!(
        "**Remote** (`git://` on a local `git daemon`, `--interval {}`; upload-pack requests counted in the daemon's log)\n\n\
         | What | Requests | Per look | Per minute per mirror |\n| --- | ---: | ---: | ---: |\n\
         | idle, {:.0} s ({:.0} looks) | {idle} | {:.2} | {per_min:.0} |\n\
         | {pushes} pushes of 10 files | {per_push_total} | {:.1} per push | — |\n\n\
         A push of 10 changed files moves a pack of {} bytes (`git pack-objects` of the new objects).\n\n",
        fmt_time(c.remote_interval),
        c.remote_idle.as_secs_f64(),
        looks,
        idle as f64 / looks,
        per_push_total as f64 / pushes as f64,
        pack.trim()
    ))
}
