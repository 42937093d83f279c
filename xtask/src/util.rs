use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

pub fn run_status(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed with {status}")) }
}

/// Run quietly, fail with its stderr.
pub fn run_quiet(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Wall time and peak RSS (KiB) of one run of `cmd`, stdout and stderr discarded.
///
/// The command is started by a fresh, small process (this binary again, as
/// `__measure OUT PROGRAM ARGS…`, see [`measure_child`]), not by this one: Linux starts a
/// child's `ru_maxrss` at its parent's RSS (exec records the high-water mark of the memory it
/// replaces, and a forked or vforked child's is the parent's), so a command started by a
/// benchmark that holds a large generated tree reported at least the benchmark's own RSS. The
/// small parent's own RSS (~3 MiB) is the floor of what this can report.
pub fn measure(cmd: &mut Command) -> Result<(Duration, u64), String> {
    let tag = format!("{}-{}", std::process::id(), COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let errfile = std::env::temp_dir().join(format!("xtask-stderr-{tag}"));
    let outfile = std::env::temp_dir().join(format!("xtask-measure-{tag}"));
    let errout = std::fs::File::create(&errfile).map_err(|e| format!("cannot create {}: {e}", errfile.display()))?;
    let me = std::env::current_exe().map_err(|e| format!("cannot find the xtask binary: {e}"))?;
    let mut outer = Command::new(me);
    outer.arg("__measure").arg(&outfile).arg(cmd.get_program()).args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        outer.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => outer.env(k, v),
            None => outer.env_remove(k),
        };
    }
    outer.stdout(std::process::Stdio::null()).stderr(errout);
    let status = outer.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let report = std::fs::read_to_string(&outfile).unwrap_or_default();
    let _ = std::fs::remove_file(&outfile);
    let err = std::fs::read_to_string(&errfile).unwrap_or_default();
    let _ = std::fs::remove_file(&errfile);
    if !status.success() {
        return Err(format!("{cmd:?} failed ({status}): {err}"));
    }
    let mut fields = report.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(nanos)), Some(Ok(kib))) => Ok((Duration::from_nanos(nanos), kib)),
        _ => Err(format!("no measurement of {cmd:?} (got {report:?}): {err}")),
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `xtask __measure OUT PROGRAM ARGS…`: run PROGRAM with the inherited stdio, write its wall
/// time in nanoseconds and its peak RSS in KiB to OUT, exit like it (see [`measure`]).
#[allow(unsafe_code)]
#[allow(clippy::zombie_processes)] // reaped by wait4, which also gives the peak RSS
pub fn measure_child(args: &[String]) -> Result<(), String> {
    let [out, program, rest @ ..] = args else {
        return Err("usage: __measure OUT PROGRAM [ARGS…]".into());
    };
    let start = Instant::now();
    let child = Command::new(program).args(rest).spawn().map_err(|e| format!("cannot run {program}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child, status and usage point to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = start.elapsed();
    if r != pid {
        return Err(format!("wait4 failed for {program}"));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("{program} failed (wait status {status})"));
    }
    std::fs::write(out, format!("{} {}\n", elapsed.as_nanos(), usage.ru_maxrss))
        .map_err(|e| format!("cannot write {out}: {e}"))
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Check that `target` holds exactly `git archive REV` of `repo` (`.treesync` left out): the
/// archive is unpacked into `scratch` (removed afterwards) and compared with `diff -r`.
pub fn matches_git_archive(
    repo: &std::path::Path,
    rev: &str,
    target: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
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
