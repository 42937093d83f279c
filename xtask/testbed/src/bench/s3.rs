//! `cargo xtask bench s3`: treesync vs `rclone sync` and `aws s3 sync` against a local S3
//! server (moto), from a work tree of the same commits: initial upload and incremental update,
//! wall time, the client's CPU time (user + system of its process tree, from `wait4`), the
//! server's CPU time over the same run (from `/proc/PID/stat`: moto is single-threaded Python,
//! so a server busy most of the wall time is the bottleneck and the clients' wall times say
//! little — their CPU time per object is the fair comparison), and requests by method from the
//! server's log.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::s3::{Moto, Requests};

use crate::measure::{Usage, measure_usage, process_cpu};
use xtask::util::run_quiet;

pub struct Config {
    pub files: usize,
}

struct Row {
    case: &'static str,
    tool: String,
    usage: Usage,
    /// CPU time the server used during the run.
    server_cpu: Option<Duration>,
    /// 1-minute load average after the run (other work on the machine skews CPU figures less
    /// than wall times, but not nothing).
    load: f64,
    req: Requests,
}

/// The 1-minute load average.
fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn aws_bin() -> String {
    // A pip/pyenv shim may come first in PATH; prefer Debian's aws-cli.
    if Path::new("/usr/bin/aws").exists() { "/usr/bin/aws".into() } else { "aws".into() }
}

pub fn run(c: &Config, dir: &Path, treesync: &Path) -> Result<String, String> {
    treesync_testkit::s3::check().map_err(|m| format!("the S3 benchmark needs moto: {m}"))?;
    let moto = Moto::start();
    for b in ["bench-treesync", "bench-rclone", "bench-aws"] {
        moto.create_bucket(b);
    }
    let repo = dir.join("s3repo.git");
    let work = dir.join("s3work");
    let _ = std::fs::remove_dir_all(&repo);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&repo).map_err(|e| e.to_string())?;
    run_quiet(Command::new("git").arg("init").arg("-q").arg("--bare").arg(&repo))?;
    eprintln!("s3: generating {} files…", c.files);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = run_quiet(Command::new(exe).arg("bench-generate").arg(&repo).arg(c.files.to_string()))?;
    let ids: Vec<&str> = out.lines().collect();
    let (a, b) = (ids[0].to_string(), ids[1].to_string());
    run_quiet(Command::new("git").arg("-C").arg(&repo).args(["repack", "-adq"]))?;

    let env = |cmd: &mut Command| {
        for (k, v) in moto.env() {
            cmd.env(k, v);
        }
        cmd.env_remove("AWS_CA_BUNDLE");
        cmd.env("RCLONE_CONFIG_MOTO_TYPE", "s3")
            .env("RCLONE_CONFIG_MOTO_PROVIDER", "Other")
            .env("RCLONE_CONFIG_MOTO_ACCESS_KEY_ID", "testing")
            .env("RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY", "testing")
            .env("RCLONE_CONFIG_MOTO_REGION", "us-east-1")
            .env("RCLONE_CONFIG_MOTO_ENDPOINT", &moto.endpoint);
    };
    let ts_s3 = |rev: &str| {
        let mut cmd = Command::new(treesync);
        cmd.args(["sync", "-q", "--repo"]).arg(&repo).args([
            "--ref",
            rev,
            "--target",
            "s3://bench-treesync/site",
            "--allow-http",
        ]);
        env(&mut cmd);
        cmd
    };
    let ts_work = |rev: &str| {
        let mut cmd = Command::new(treesync);
        cmd.args(["sync", "-q", "--repo"]).arg(&repo).args(["--ref", rev, "--target"]).arg(&work);
        cmd
    };
    let rclone = |flags: &[&str]| {
        let mut cmd = Command::new("rclone");
        cmd.arg("sync").arg(&work).arg("moto:bench-rclone/site").args(["--exclude", "/.treesync/**"]).args(flags);
        env(&mut cmd);
        cmd
    };
    let aws = || {
        let mut cmd = Command::new(aws_bin());
        cmd.args([
            "--endpoint-url",
            &moto.endpoint,
            "s3",
            "sync",
            "--delete",
            "--no-progress",
            "--exclude",
            ".treesync/*",
        ])
        .arg(&work)
        .arg("s3://bench-aws/site");
        env(&mut cmd);
        cmd
    };
    let load_start = load();
    let mut rows = Vec::new();
    let mut timed = |case: &'static str, tool: &str, mut cmd: Command| -> Result<(), String> {
        let mark = moto.mark();
        let server_before = process_cpu(moto.pid());
        let usage = measure_usage(&mut cmd)?;
        let server_cpu = server_before.zip(process_cpu(moto.pid())).map(|(a, b)| b.saturating_sub(a));
        let req = moto.requests_since(mark);
        let load = load();
        eprintln!(
            "s3: {case:20} {tool:45} {:8.2} s  CPU {:7.2} s  server CPU {:7.2} s  load {load:.2}  {:6} requests",
            usage.wall.as_secs_f64(),
            usage.cpu().as_secs_f64(),
            server_cpu.unwrap_or_default().as_secs_f64(),
            req.total()
        );
        rows.push(Row { case, tool: tool.into(), usage, server_cpu, load, req });
        Ok(())
    };

    run_quiet(&mut ts_work(&a))?;
    eprintln!("s3: initial uploads (the server takes several ms per PUT)…");
    timed("initial upload of A", "treesync sync", ts_s3(&a))?;
    timed(
        "initial upload of A",
        "rclone sync --transfers 32 --s3-no-head",
        rclone(&["--transfers", "32", "--s3-no-head"]),
    )?;
    timed("initial upload of A", "aws s3 sync", aws())?;

    run_quiet(&mut ts_work(&b))?;
    timed("update A→B", "treesync sync", ts_s3(&b))?;
    let variants: [(&str, &[&str]); 4] = [
        ("rclone sync (default)", &[]),
        ("rclone sync --fast-list", &["--fast-list"]),
        ("rclone sync --checksum", &["--checksum"]),
        ("rclone sync --fast-list --checksum --s3-no-head", &["--fast-list", "--checksum", "--s3-no-head"]),
    ];
    for (i, (label, flags)) in variants.iter().enumerate() {
        if i > 0 {
            // Back to A on the server, untimed, then the work tree to B again.
            run_quiet(&mut ts_work(&a))?;
            run_quiet(&mut rclone(&["--fast-list", "--checksum", "--s3-no-head"]))?;
            run_quiet(&mut ts_work(&b))?;
        }
        timed("update A→B", label, rclone(flags))?;
    }
    timed("update A→B", "aws s3 sync", aws())?;

    // The three buckets must hold the same keys.
    let count = |bucket: &str| -> Result<usize, String> {
        let mut cmd = Command::new(aws_bin());
        cmd.args(["--endpoint-url", &moto.endpoint, "s3", "ls", "--recursive", &format!("s3://{bucket}/site/")]);
        env(&mut cmd);
        Ok(run_quiet(&mut cmd)?.lines().filter(|l| !l.contains(".treesync/")).count())
    };
    let counts = (count("bench-treesync")?, count("bench-rclone")?, count("bench-aws")?);
    if counts.0 != counts.1 || counts.0 != counts.2 {
        return Err(format!(
            "the buckets differ after the benchmark (objects: treesync {}, rclone {}, aws {})",
            counts.0, counts.1, counts.2
        ));
    }
    let _ = std::fs::remove_dir_all(&repo);
    let _ = std::fs::remove_dir_all(&work);
    Ok(render(&rows, c, counts.0, (load_start, load())))
}

fn render(rows: &[Row], c: &Config, objects: usize, loads: (f64, f64)) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "N = {} files, K = 10 modified + 2 added, D = 2 deleted; moto (single-threaded Python) on 127.0.0.1; one run each; {} objects in every bucket afterwards; load average (1 min) {:.2} at the start, {:.2} at the end (2 cores).\n",
        c.files, objects, loads.0, loads.1
    );
    let _ = writeln!(
        md,
        "Client CPU is user + system time of the client's whole process tree (`wait4`); per object it is divided by N (the objects uploaded in the initial upload; the objects in the tree for an update). Server CPU is moto's over the same run (`/proc/PID/stat`), busy = server CPU ÷ wall time: near 100% the single-threaded server is the bottleneck.\n"
    );
    let _ = writeln!(
        md,
        "| case | tool | wall time | time ÷ treesync's | client CPU (user + sys) | client CPU per object | CPU ÷ treesync's | server CPU (busy) | load | requests | PUT | GET | HEAD | LIST | bulk DELETE | DELETE | other |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for case in ["initial upload of A", "update A→B"] {
        let ours = rows.iter().find(|r| r.case == case && r.tool == "treesync sync").expect("treesync row");
        for r in rows.iter().filter(|r| r.case == case) {
            let q = &r.req;
            let u = &r.usage;
            let server = match r.server_cpu {
                Some(t) => format!("{:.2} s ({:.0}%)", t.as_secs_f64(), 100.0 * t.as_secs_f64() / u.wall.as_secs_f64()),
                None => "–".into(),
            };
            let _ = writeln!(
                md,
                "| {case} | `{}` | {:.2} s | {:.2} | {:.2} s ({:.2} + {:.2}) | {:.0} µs | {:.2} | {server} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.tool,
                u.wall.as_secs_f64(),
                u.wall.as_secs_f64() / ours.usage.wall.as_secs_f64(),
                u.cpu().as_secs_f64(),
                u.user.as_secs_f64(),
                u.sys.as_secs_f64(),
                u.cpu().as_secs_f64() * 1e6 / c.files as f64,
                u.cpu().as_secs_f64() / ours.usage.cpu().as_secs_f64(),
                r.load,
                q.total(),
                q.put,
                q.get,
                q.head,
                q.list,
                q.bulk_delete,
                q.delete,
                q.post + q.other
            );
        }
    }
    md
}
