//! `cargo xtask bench`: treesync vs git on a generated repository, side by side in one run.
//!
//! Repository: N files (100–2,000 bytes) in N/100 directories, commit A, and commit B = A with
//! 10 files modified, 2 added, 2 deleted. All work trees live on a tmpfs (local-disk creation
//! times on these VMs are erratic); every figure is the median of R runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod atomic;
mod attributes;
mod gitsync;
mod jump;
mod nfs;
mod nfs_client;
mod oneshot;
mod output;
mod s3;
mod trace;
mod watch;

use crate::measure::{fmt_time, measure, median};
use crate::repo::{GIT_CHECKOUTS, fresh_checkout, git, git_checkout, make_repo, rm, rm_all, settle};
pub(crate) use output::treesync_binary;
use output::{bench_md, treesync_flag};
use trace::{stat_calls, timed};
use xtask::util::{project_root, run_quiet};

struct Config {
    files: usize,
    runs: usize,
    dir: PathBuf,
    write: bool,
    local: bool,
    s3: bool,
    nfs: bool,
    s3_files: Vec<usize>,
    nfs_files: Vec<usize>,
    nfs_initial: usize,
    nfs_verify: usize,
    nfs_latency: Duration,
    nfs_runs: usize,
    nfs_git_runs: usize,
    nfs_slow_git: bool,
    nfs_client: bool,
    client_initial: usize,
    client_files: usize,
    client_verify: usize,
    client_delay: Duration,
    client_runs: usize,
    attributes: bool,
    attr_files: usize,
    atomic: bool,
    changed: usize,
    switches: Vec<String>,
    nas_switches: Vec<String>,
    atomic_where: (bool, bool),
    treesync: Option<PathBuf>,
    watch: bool,
    watch_parts: Vec<String>,
    pushes: usize,
    poll_pushes: usize,
    mirrors: usize,
    fanout_files: usize,
    fanout_pushes: usize,
    oneshot: bool,
    oneshot_files: Vec<usize>,
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config {
        files: 100_000,
        runs: 5,
        dir: PathBuf::from("/tmp/treesync-bench"),
        write: true,
        local: true,
        s3: true,
        nfs: true,
        s3_files: vec![20_000],
        nfs_files: vec![20_000, 100_000],
        nfs_initial: 2_000,
        nfs_verify: 0,
        nfs_latency: Duration::from_millis(1),
        nfs_runs: 3,
        nfs_git_runs: 1,
        nfs_slow_git: true,
        nfs_client: true,
        client_initial: 5_000,
        client_files: 20_000,
        client_verify: 20_000,
        client_delay: Duration::from_millis(2),
        client_runs: 3,
        attributes: true,
        attr_files: 10_000,
        atomic: true,
        changed: 14,
        switches: vec!["auto".into(), "symlink".into()],
        nas_switches: vec!["auto".into()],
        atomic_where: (true, true),
        treesync: None,
        watch: true,
        watch_parts: vec!["local".into(), "nas".into(), "fanout".into(), "remote".into()],
        pushes: 60,
        poll_pushes: 50,
        mirrors: 100,
        fanout_files: 2_000,
        fanout_pushes: 10,
        oneshot: true,
        oneshot_files: vec![100_000],
    };
    let mut args = args;
    // `cargo xtask bench PART …`: that part alone.
    const PARTS: [&str; 8] = ["local", "s3", "nfs", "nfs-client", "attributes", "atomic", "watch", "oneshot"];
    if let Some(part) = args.first().filter(|a| PARTS.contains(&a.as_str())) {
        let on = |name: &str| part == name;
        (c.local, c.s3, c.nfs, c.nfs_client) = (on("local"), on("s3"), on("nfs"), on("nfs-client"));
        (c.attributes, c.atomic, c.watch) = (on("attributes"), on("atomic"), on("watch"));
        c.oneshot = on("oneshot");
        args = &args[1..];
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--files" => c.files = value()?.parse().map_err(|e| format!("--files: {e}"))?,
            "--runs" => c.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--dir" => c.dir = PathBuf::from(value()?),
            "--no-write" => c.write = false,
            "--s3-files" => {
                c.s3_files = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--s3-files: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--nfs-files" => {
                c.nfs_files = value()?
                    .split(',')
                    .filter(|n| !n.trim().is_empty())
                    .map(|n| n.trim().parse().map_err(|e| format!("--nfs-files: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--nfs-initial" => c.nfs_initial = value()?.parse().map_err(|e| format!("--nfs-initial: {e}"))?,
            "--nfs-verify" => c.nfs_verify = value()?.parse().map_err(|e| format!("--nfs-verify: {e}"))?,
            "--nfs-runs" => c.nfs_runs = value()?.parse().map_err(|e| format!("--nfs-runs: {e}"))?,
            "--nfs-git-runs" => c.nfs_git_runs = value()?.parse().map_err(|e| format!("--nfs-git-runs: {e}"))?,
            "--nfs-no-slow-git" => c.nfs_slow_git = false,
            "--client-initial" => c.client_initial = value()?.parse().map_err(|e| format!("--client-initial: {e}"))?,
            "--client-files" => c.client_files = value()?.parse().map_err(|e| format!("--client-files: {e}"))?,
            "--client-verify" => c.client_verify = value()?.parse().map_err(|e| format!("--client-verify: {e}"))?,
            "--attr-files" => c.attr_files = value()?.parse().map_err(|e| format!("--attr-files: {e}"))?,
            "--treesync" => c.treesync = Some(PathBuf::from(value()?)),
            "--oneshot-files" => {
                c.oneshot_files = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--oneshot-files: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--changed" => c.changed = value()?.parse().map_err(|e| format!("--changed: {e}"))?,
            "--pushes" => c.pushes = value()?.parse().map_err(|e| format!("--pushes: {e}"))?,
            "--poll-pushes" => c.poll_pushes = value()?.parse().map_err(|e| format!("--poll-pushes: {e}"))?,
            "--mirrors" => c.mirrors = value()?.parse().map_err(|e| format!("--mirrors: {e}"))?,
            "--fanout-files" => c.fanout_files = value()?.parse().map_err(|e| format!("--fanout-files: {e}"))?,
            "--fanout-pushes" => c.fanout_pushes = value()?.parse().map_err(|e| format!("--fanout-pushes: {e}"))?,
            "--watch-parts" => {
                c.watch_parts =
                    value()?.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_string).collect();
                if let Some(bad) =
                    c.watch_parts.iter().find(|p| !["local", "nas", "fanout", "remote"].contains(&p.as_str()))
                {
                    return Err(format!("--watch-parts: unknown part {bad:?} (local, nas, fanout, remote)"));
                }
            }
            "--switch" => {
                c.switches = value()?.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_string).collect()
            }
            "--nas-switch" => {
                c.nas_switches =
                    value()?.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_string).collect()
            }
            "--atomic-on" => {
                c.atomic_where = match value()?.as_str() {
                    "local" => (true, false),
                    "nas" => (false, true),
                    "both" => (true, true),
                    v => return Err(format!("--atomic-on {v:?}: give local, nas or both")),
                }
            }
            "--client-runs" => c.client_runs = value()?.parse().map_err(|e| format!("--client-runs: {e}"))?,
            "--client-delay-ms" => {
                let ms: f64 = value()?.parse().map_err(|e| format!("--client-delay-ms: {e}"))?;
                c.client_delay = Duration::from_secs_f64(ms / 1000.0);
            }
            "--latency" => {
                let v = value()?;
                let ms: f64 = v
                    .strip_suffix("ms")
                    .ok_or_else(|| format!("--latency {v:?}: give milliseconds, e.g. 1ms or 0.5ms"))?
                    .parse()
                    .map_err(|e| format!("--latency: {e}"))?;
                c.nfs_latency = Duration::from_secs_f64(ms / 1000.0);
            }
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    if c.runs == 0 || c.files < 100 {
        return Err("--runs must be ≥ 1 and --files ≥ 100".into());
    }
    Ok(c)
}

struct Row {
    what: String,
    tool: String,
    time: Duration,
    rss_kib: u64,
    stats: Option<(u64, u64)>,
}

pub fn run(args: &[String]) -> Result<(), String> {
    // `bench git-sync` has its own options and is not part of a run of all (it needs a git-sync
    // binary built beforehand).
    if args.first().is_some_and(|a| a == "git-sync") {
        return gitsync::run(&args[1..]);
    }
    // `bench jump` needs a real repository the caller has (and the local disk, not the tmpfs
    // the other parts mount): not part of a run of all either.
    if args.first().is_some_and(|a| a == "jump") {
        return jump::run(&args[1..]);
    }
    let c = parse(args)?;
    let root = project_root();
    // `--treesync PATH`: measure that binary (e.g. a debug build where a release build is too
    // costly); by default a release build of this checkout.
    let treesync = treesync_binary(&root, c.treesync.clone())?;
    let has_strace = Command::new("strace").arg("-V").output().is_ok();

    std::fs::create_dir_all(&c.dir).map_err(|e| format!("{}: {e}", c.dir.display()))?;
    let mounted_here = !is_mountpoint(&c.dir)
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8g", "tmpfs"])
            .arg(&c.dir)
            .status()
            .is_ok_and(|s| s.success());
    let on_tmpfs = mounted_here || is_tmpfs(&c.dir);
    let result = (|| -> Result<(), String> {
        if c.local {
            let (table, _) = bench(&c, &treesync, has_strace, on_tmpfs)?;
            println!("{table}");
            if c.write {
                let block = format!(
                    "Reproduce: `cargo xtask bench local --files {} --runs {}` (root, for the tmpfs mount).\n\n{table}",
                    c.files, c.runs
                );
                bench_md(&root, "local", "Local disk: treesync vs git", &block)?;
            }
        }
        if c.attributes {
            let ac = attributes::Config { files: c.attr_files, runs: c.runs };
            let table = attributes::run(&ac, &c.dir, &treesync, has_strace)?;
            println!("{table}");
            if c.write {
                let build = treesync_flag(&c.treesync, &root);
                let block = format!(
                    "Reproduce: `cargo xtask bench attributes --attr-files {} --runs {}{build}` (root, for the tmpfs mount).\n\n{table}",
                    c.attr_files, c.runs
                );
                bench_md(
                    &root,
                    "attributes",
                    "Conversions (.gitattributes): incremental syncs with and without attributes, vs git checkout",
                    &block,
                )?;
            }
        }
        if c.atomic {
            let ac = atomic::Config {
                files: c.files,
                changed: c.changed,
                runs: c.runs,
                nas_git_runs: c.nfs_git_runs.max(1),
                latency: c.nfs_latency,
                switches: c.switches.clone(),
                nas_switches: c.nas_switches.clone(),
                local: c.atomic_where.0,
                nas: c.atomic_where.1,
            };
            let table = atomic::run(&ac, &c.dir, &treesync)?;
            println!("{table}");
            if c.write {
                let build = treesync_flag(&c.treesync, &root);
                let on = match c.atomic_where {
                    (true, false) => " --atomic-on local",
                    (false, true) => " --atomic-on nas",
                    _ => "",
                };
                let block = format!(
                    "Reproduce: `cargo xtask bench atomic --files {} --changed {} --runs {} --nfs-git-runs {} --latency {}ms --switch {} --nas-switch {}{on}{build}` (root: FUSE and the tmpfs mount).\n\n{table}",
                    c.files,
                    c.changed,
                    c.runs,
                    c.nfs_git_runs.max(1),
                    c.nfs_latency.as_secs_f64() * 1000.0,
                    c.switches.join(","),
                    c.nas_switches.join(",")
                );
                bench_md(
                    &root,
                    "atomic",
                    "Whole-tree switches (`sync --atomic`): treesync vs the git-sync way",
                    &block,
                )?;
            }
        }
        if c.watch {
            let has = |p: &str| c.watch_parts.iter().any(|x| x == p);
            let wc = watch::Config {
                files: c.files,
                changed: c.changed,
                pushes: c.pushes,
                poll_pushes: c.poll_pushes,
                poll_interval: Duration::from_secs(5),
                latency: c.nfs_latency,
                mirrors: c.mirrors,
                fanout_files: c.fanout_files,
                fanout_pushes: c.fanout_pushes,
                remote_interval: Duration::from_secs(1),
                remote_idle: Duration::from_secs(30),
                latency_local: has("local"),
                latency_nas: has("nas"),
                fanout: has("fanout"),
                remote: has("remote"),
            };
            let table = watch::run(&wc, &c.dir, &treesync)?;
            println!("{table}");
            if c.write {
                let build = treesync_flag(&c.treesync, &root);
                let block = format!(
                    "Reproduce: `cargo xtask bench watch --files {} --changed {} --pushes {} --poll-pushes {} --latency {}ms --mirrors {} --fanout-files {} --fanout-pushes {} --watch-parts {}{build}` (root: FUSE and the tmpfs mount).\n\n{table}",
                    c.files,
                    c.changed,
                    c.pushes,
                    c.poll_pushes,
                    c.nfs_latency.as_secs_f64() * 1000.0,
                    c.mirrors,
                    c.fanout_files,
                    c.fanout_pushes,
                    c.watch_parts.join(",")
                );
                bench_md(&root, "watch", "Following a ref: push to synced, fan-out, remote requests", &block)?;
            }
        }
        if c.oneshot {
            let oc = oneshot::Config { files: c.oneshot_files.clone(), runs: c.runs };
            let table = oneshot::run(&oc, &c.dir, &treesync)?;
            println!("{table}");
            if c.write {
                let build = treesync_flag(&c.treesync, &root);
                let sizes = c.oneshot_files.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
                let block = format!(
                    "Reproduce: `cargo xtask bench oneshot --oneshot-files {sizes} --runs {}{build}` (root, for the tmpfs mount).\n\n{table}",
                    c.runs
                );
                bench_md(
                    &root,
                    "oneshot",
                    "One-shot syncs: a whole process next to git checkout and git rev-parse",
                    &block,
                )?;
            }
        }
        if c.nfs {
            let nc = nfs::Config {
                sizes: c.nfs_files.clone(),
                initial_files: c.nfs_initial,
                latency: c.nfs_latency,
                runs: c.nfs_runs.max(1),
                git_runs: c.nfs_git_runs.max(1),
                slow_git: c.nfs_slow_git,
                verify_files: c.nfs_verify,
            };
            let tables = nfs::run(&nc, &c.dir, &treesync)?;
            for table in tables.sync.iter().chain(&tables.verify) {
                println!("{table}");
            }
            if c.write {
                let sizes: Vec<String> = c.nfs_files.iter().map(|n| n.to_string()).collect();
                if let Some(table) = &tables.sync {
                    let block = format!(
                        "Reproduce: `cargo xtask bench nfs --nfs-files {} --nfs-initial {} --nfs-verify 0 --latency {}ms --nfs-runs {} --nfs-git-runs {}{}` (root: FUSE and the tmpfs mount).\n\n{table}",
                        sizes.join(","),
                        c.nfs_initial,
                        c.nfs_latency.as_secs_f64() * 1000.0,
                        c.nfs_runs,
                        c.nfs_git_runs,
                        if c.nfs_slow_git { "" } else { " --nfs-no-slow-git" }
                    );
                    bench_md(&root, "nfs", "NAS (slow FUSE filesystem): treesync vs git", &block)?;
                }
                if let Some(table) = &tables.verify {
                    let block = format!(
                        "Reproduce: `cargo xtask bench nfs --nfs-files '' --nfs-initial 0 --nfs-verify {} --latency {}ms{}` (root: FUSE and the tmpfs mount).\n\n{table}",
                        c.nfs_verify,
                        c.nfs_latency.as_secs_f64() * 1000.0,
                        treesync_flag(&c.treesync, &root),
                    );
                    bench_md(&root, "nfs-verify", "NAS (slow FUSE filesystem): treesync verify vs git status", &block)?;
                }
            }
        }
        if c.nfs_client {
            let cc = nfs_client::Config {
                initial_files: c.client_initial,
                update_files: c.client_files,
                verify_files: c.client_verify,
                one_way: c.client_delay,
                runs: c.client_runs.max(1),
            };
            let tables = nfs_client::run(&cc, &c.dir, &treesync)?;
            for table in tables.sync.iter().chain(&tables.verify) {
                println!("{table}");
            }
            if c.write {
                if let Some(table) = &tables.sync {
                    let block = format!(
                        "Reproduce: `cargo xtask bench nfs-client --client-initial {} --client-files {} --client-verify 0 --client-delay-ms {} --client-runs {}` (root; needs nfs-ganesha: `cargo xtask test` installs it).\n\n{table}",
                        c.client_initial,
                        c.client_files,
                        c.client_delay.as_secs_f64() * 1000.0,
                        c.client_runs
                    );
                    bench_md(
                        &root,
                        "nfs-client",
                        "NFS without a mount: the built-in client, pipelined vs one call in flight",
                        &block,
                    )?;
                }
                if let Some(table) = &tables.verify {
                    let block = format!(
                        "Reproduce: `cargo xtask bench nfs-client --client-initial 0 --client-files 0 --client-verify {} --client-delay-ms {} --client-runs {}{}` (root; needs nfs-ganesha: `cargo xtask test` installs it).\n\n{table}",
                        c.client_verify,
                        c.client_delay.as_secs_f64() * 1000.0,
                        c.client_runs,
                        treesync_flag(&c.treesync, &root),
                    );
                    bench_md(
                        &root,
                        "nfs-client-verify",
                        "NFS without a mount: verify, pipelined READDIRPLUS vs one call in flight",
                        &block,
                    )?;
                }
            }
        }
        if c.s3 {
            let mut tables = Vec::new();
            for &files in &c.s3_files {
                let table = s3::run(&s3::Config { files }, &c.dir, &treesync)?;
                println!("{table}");
                tables.push(table);
            }
            if c.write {
                let build = treesync_flag(&c.treesync, &root);
                let sizes = c.s3_files.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
                let block = format!(
                    "Reproduce: `cargo xtask bench s3 --s3-files {sizes}{build}` (needs moto, which `cargo xtask test` installs, and rclone and awscli from the Debian packages).\n\n{}",
                    tables.join("\n")
                );
                bench_md(&root, "s3", "Object storage: treesync vs rclone and aws s3 sync", &block)?;
            }
        }
        Ok(())
    })();
    if mounted_here {
        let _ = Command::new("umount").arg("-l").arg(&c.dir).status();
    }
    result?;
    if c.write {
        eprintln!("BENCHMARKS.md updated");
    }
    Ok(())
}

fn is_mountpoint(p: &Path) -> bool {
    Command::new("mountpoint").arg("-q").arg(p).status().is_ok_and(|s| s.success())
}

fn is_tmpfs(p: &Path) -> bool {
    run_quiet(Command::new("stat").args(["-f", "-c", "%T"]).arg(p)).is_ok_and(|t| t.trim() == "tmpfs")
}

fn bench(c: &Config, treesync: &Path, has_strace: bool, on_tmpfs: bool) -> Result<(String, String), String> {
    let d = &c.dir;
    let repo = d.join("repo.git");
    make_repo(&repo, c.files)?;

    let ts_target = d.join("ts");
    let git_work = d.join("gitwork");
    let git_index = d.join("git.index");
    let ts = |rev: &str| {
        let mut cmd = Command::new(treesync);
        cmd.args(["sync", "-q", "--repo"]).arg(&repo).args(["--ref", rev, "--target"]).arg(&ts_target);
        cmd
    };
    let mut rows = Vec::new();

    eprintln!("initial checkout…");
    let (t, r) = timed(
        c.runs,
        || {
            rm(&ts_target);
            Ok(())
        },
        || ts("A"),
    )?;
    rows.push(Row {
        what: "initial checkout of A".into(),
        tool: "treesync sync".into(),
        time: t,
        rss_kib: r,
        stats: None,
    });
    for (label, workers) in GIT_CHECKOUTS {
        let (t, r) = timed(
            c.runs,
            || fresh_checkout(&git_work, &git_index),
            || git_checkout(&repo, &git_work, &git_index, workers, "A"),
        )?;
        rows.push(Row { what: "initial checkout of A".into(), tool: label.into(), time: t, rss_kib: r, stats: None });
    }
    // The git work tree now holds A with its index; ts_target holds A too.
    settle(&repo, &git_work, &git_index)?;

    // The update A→B: treesync, `git read-tree -m -u A B` and `git checkout B` take turns, run
    // after run, so that what else the machine does weighs on all three alike (the figures are
    // medians). Each git command has its own work tree and index: read-tree leaves HEAD where it
    // was, which checkout would then see as local changes.
    eprintln!("update A→B…");
    let co_work = d.join("gitco");
    let co_index = d.join("gitco.index");
    rm_all(&[&co_work, &co_index]);
    std::fs::create_dir(&co_work).map_err(|e| e.to_string())?;
    let read_tree = |from: &str, to: &str| {
        let mut g = git(&repo, &git_work, &git_index);
        g.args(["read-tree", "-m", "-u", from, to]);
        g
    };
    run_quiet(git(&repo, &co_work, &co_index).args(["checkout", "-q", "-f", "--detach", "A"]))?;
    run_quiet(&mut ts("A"))?;
    let settle_both = || {
        settle(&repo, &git_work, &git_index)?;
        run_quiet(git(&repo, &co_work, &co_index).args(["update-index", "-q", "--refresh"])).map(|_| ())
    };
    settle_both()?;
    let (mut ts_times, mut rt_times, mut co_times) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ts_rss, mut rt_rss, mut co_rss) = (0, 0, 0);
    for _ in 0..c.runs {
        let (t, r) = measure(&mut ts("B"))?;
        ts_times.push(t);
        ts_rss = ts_rss.max(r);
        let (t, r) = measure(&mut read_tree("A", "B"))?;
        rt_times.push(t);
        rt_rss = rt_rss.max(r);
        let (t, r) = measure(git(&repo, &co_work, &co_index).args(["checkout", "-q", "--detach", "B"]))?;
        co_times.push(t);
        co_rss = co_rss.max(r);
        run_quiet(&mut ts("A"))?;
        run_quiet(&mut read_tree("B", "A"))?;
        run_quiet(git(&repo, &co_work, &co_index).args(["checkout", "-q", "--detach", "A"]))?;
        settle_both()?;
    }
    let stats = if has_strace { Some(stat_calls(&ts("B"), &ts_target)?) } else { None };
    run_quiet(&mut ts("A"))?;
    rows.push(Row {
        what: "update A→B".into(),
        tool: "treesync sync".into(),
        time: median(ts_times),
        rss_kib: ts_rss,
        stats,
    });
    let stats = if has_strace { Some(stat_calls(&read_tree("A", "B"), &git_work)?) } else { None };
    run_quiet(&mut read_tree("B", "A"))?;
    settle(&repo, &git_work, &git_index)?;
    rows.push(Row {
        what: "update A→B".into(),
        tool: "git read-tree -m -u A B".into(),
        time: median(rt_times),
        rss_kib: rt_rss,
        stats,
    });
    let stats = if has_strace {
        let mut g = git(&repo, &co_work, &co_index);
        g.args(["checkout", "-q", "--detach", "B"]);
        Some(stat_calls(&g, &co_work)?)
    } else {
        None
    };
    rows.push(Row {
        what: "update A→B".into(),
        tool: "git checkout B".into(),
        time: median(co_times),
        rss_kib: co_rss,
        stats,
    });
    rm_all(&[&co_work, &co_index]);

    // Both trees must be the same in the end.
    run_quiet(&mut ts("B"))?;
    // -f: HEAD is the repository's, shared with the checkout work tree and already B there.
    run_quiet(git(&repo, &git_work, &git_index).args(["checkout", "-q", "-f", "--detach", "B"]))?;
    settle(&repo, &git_work, &git_index)?;

    eprintln!("verify…");
    let verify = || {
        let mut cmd = Command::new(treesync);
        cmd.args(["verify", "--repo"]).arg(&repo).arg("--target").arg(&ts_target);
        cmd
    };
    // The first verify hashes everything and writes the stat index; the steady state is measured.
    let (t_first, r_first) = measure(&mut verify())?;
    rows.push(Row {
        what: "verify (first run, no stat index)".into(),
        tool: "treesync verify".into(),
        time: t_first,
        rss_kib: r_first,
        stats: None,
    });
    let (t, r) = timed(c.runs, || Ok(()), verify)?;
    let stats = if has_strace { Some(stat_calls(&verify(), &ts_target)?) } else { None };
    rows.push(Row { what: "verify (warm)".into(), tool: "treesync verify".into(), time: t, rss_kib: r, stats });
    for (label, args) in
        [("git status", &["status", "--porcelain"][..]), ("git diff-files", &["diff-files", "--quiet"][..])]
    {
        let cmd = || {
            let mut g = git(&repo, &git_work, &git_index);
            g.args(args);
            g
        };
        let (t, r) = timed(c.runs, || Ok(()), cmd)?;
        let stats = if has_strace { Some(stat_calls(&cmd(), &git_work)?) } else { None };
        rows.push(Row { what: "verify (warm)".into(), tool: label.into(), time: t, rss_kib: r, stats });
    }
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference", "-x", ".treesync"])
        .arg(&ts_target)
        .arg(&git_work)
        .output();
    let same = diff.as_ref().is_ok_and(|o| o.status.success());
    if !same {
        return Err(format!(
            "treesync's tree and git's differ after the benchmark: {}",
            diff.map(|o| String::from_utf8_lossy(&o.stdout).chars().take(2000).collect::<String>()).unwrap_or_default()
        ));
    }
    rm_all(&[&ts_target, &git_work, &git_index, &repo]);
    Ok(render(&rows, c, on_tmpfs))
}

fn render(rows: &[Row], c: &Config, on_tmpfs: bool) -> (String, String) {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "N = {} files in {} directories, K = 10 modified + 2 added + 2 deleted; medians of {} runs (the three updates A→B take turns run by run); work trees on {}; {} cores.\n",
        c.files,
        c.files / 100,
        c.runs,
        if on_tmpfs { "tmpfs" } else { "the local disk (not tmpfs)" },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let _ = writeln!(
        md,
        "Stat-family syscalls count every `stat`/`lstat`/`fstat`/`newfstatat`/`statx` of the process (repository included); \
         syscalls on the work tree count every syscall of any kind whose path or descriptor lies in the work tree (`strace -f -y`).\n"
    );
    let _ = writeln!(
        md,
        "| case | tool | wall time | time ÷ treesync's | peak RSS | stat-family syscalls (process) | syscalls on the work tree |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|");
    for what in ["initial checkout of A", "update A→B", "verify (first run, no stat index)", "verify (warm)"] {
        let ours = rows.iter().find(|r| r.what == what && r.tool.starts_with("treesync")).expect("treesync row");
        for r in rows.iter().filter(|r| r.what == what) {
            let ratio = if r.tool.starts_with("treesync") {
                "1.00".to_string()
            } else {
                format!("{:.2}", r.time.as_secs_f64() / ours.time.as_secs_f64())
            };
            let _ = writeln!(
                md,
                "| {what} | `{}` | {} | {ratio} | {:.1} MiB | {} | {} |",
                r.tool,
                fmt_time(r.time),
                r.rss_kib as f64 / 1024.0,
                r.stats.map(|s| s.0.to_string()).unwrap_or_else(|| "–".into()),
                r.stats.map(|s| s.1.to_string()).unwrap_or_else(|| "–".into())
            );
        }
    }
    (md.clone(), md)
}
