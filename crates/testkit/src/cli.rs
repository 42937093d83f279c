//! Running the `treesync` binary in tests: one set of helpers instead of one per test file.
//! A test crate names its binary once (`env!("CARGO_BIN_EXE_treesync")` is only known there),
//! e.g. in `tests/it/main.rs`, and every module calls through that:
//!
//! ```ignore
//! let cli = treesync_testkit::cli::Cli::new(env!("CARGO_BIN_EXE_treesync"));
//! cli.ok(&["sync", "--repo", repo, "--ref", "main", "--target", target]);
//! let err = cli.fails(&["sync", "--target", "s3://b/p", "--atomic"], 2);
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `treesync` binary of the test crate (`env!("CARGO_BIN_EXE_treesync")`).
#[derive(Debug, Clone)]
pub struct Cli {
    bin: PathBuf,
}

/// A path as a command-line argument (test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

impl Cli {
    /// The binary at `bin`.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Cli { bin: bin.into() }
    }

    /// `treesync` as a command to add arguments, environment or redirections to.
    pub fn command(&self) -> Command {
        Command::new(&self.bin)
    }

    /// Run `treesync ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("treesync runs")
    }

    /// Run `treesync ARGS`, expect success, return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "treesync {args:?} exited with {:?}: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).expect("utf8 stdout")
    }

    /// Run `treesync ARGS`, expect exit `code` and one error on stderr; return stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let o = self.run(args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(code), "treesync {args:?}: {stderr}");
        assert!(stderr.contains("treesync: error: "), "{stderr}");
        stderr
    }

    /// `treesync sync` with no system or global git config (as the testkit's git runs).
    pub fn sync_without_git_config(&self, repo: &Path, rev: &str, target: &Path) -> Output {
        self.command()
            .args(["sync", "--repo", s(repo), "--ref", rev, "--target", s(target)])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("treesync runs")
    }

    /// `treesync verify --json` of `target` against `repo` with `extra` arguments: its exit code
    /// (0 clean, 1 drift; anything else fails the test) and report.
    pub fn verify(&self, repo: &Path, target: &Path, extra: &[&str]) -> (i32, Value) {
        let mut args = vec!["verify", "--repo", s(repo), "--target", s(target), "--json"];
        args.extend_from_slice(extra);
        let o = self.run(&args);
        let code = o.status.code().expect("exit code");
        assert!(code == 0 || code == 1, "verify failed: {}", stderr(&o));
        (code, serde_json::from_slice(&o.stdout).expect("JSON report"))
    }

    /// The `--json` document of `ARGS`, validated against the JSON schema `schema_text`.
    pub fn json(&self, args: &[&str], schema_text: &str) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let v: Value = serde_json::from_str(&self.ok(&all)).expect("one JSON document");
        let schema: Value = serde_json::from_str(schema_text).expect("schema is JSON");
        if let Err(errors) = crate::schema::validate(&schema, &v) {
            panic!("treesync {all:?}: output violates its schema:\n{}\n{v:#}", errors.join("\n"));
        }
        v
    }
}

/// A command's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A command's stdout and stderr as text.
pub fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(o))
}

/// The stdout of a finished command that must have succeeded.
pub fn succeeded(o: Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "treesync failed ({:?}): {}{out}", o.status.code(), stderr(&o));
    out
}

/// A new temporary directory and the path `name` in it, not created yet: where a test syncs to.
/// The directory is removed when the returned guard drops.
pub fn temp_target(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join(name);
    (dir, target)
}

/// The names in directory `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Wait until `f` holds, checking every 50 ms; panic naming `what` after a minute.
pub fn wait_for(what: &str, f: impl FnMut() -> bool) {
    wait_for_up_to(what, Duration::from_secs(60), f)
}

/// Wait until `f` holds, checking every 50 ms; panic naming `what` after `timeout`.
pub fn wait_for_up_to(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Peak RSS in MiB of one run of `cmd`, which must succeed (measured by the kernel: `wait4`'s
/// `ru_maxrss`).
#[allow(unsafe_code, clippy::zombie_processes)] // reaped by wait4, which also gives the peak RSS
pub fn peak_rss_mib(cmd: &mut Command) -> u64 {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("treesync runs");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; status and usage point to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let mut err = String::new();
    if let Some(mut e) = child.stderr {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(ok, "treesync failed ({status}): {err}");
    usage.ru_maxrss as u64 / 1024
}

/// The drift a `verify --json` report lists, as `kind:path`.
pub fn drift_of(report: &Value) -> Vec<String> {
    report["drift"]
        .as_array()
        .expect("drift")
        .iter()
        .map(|d| format!("{}:{}", d["kind"].as_str().expect("kind"), d["path"].as_str().expect("path")))
        .collect()
}
