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
#[allow(unsafe_code)]
pub fn measure(cmd: &mut Command) -> Result<(Duration, u64), String> {
    let errfile = std::env::temp_dir().join(format!("xtask-stderr-{}", std::process::id()));
    let errout = std::fs::File::create(&errfile).map_err(|e| format!("cannot create {}: {e}", errfile.display()))?;
    cmd.stdout(std::process::Stdio::null()).stderr(errout);
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child, status and usage point to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = start.elapsed();
    drop(child);
    if r != pid {
        return Err(format!("wait4 failed for {cmd:?}"));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let err = std::fs::read_to_string(&errfile).unwrap_or_default();
        return Err(format!("{cmd:?} failed (status {status}): {err}"));
    }
    Ok((elapsed, usage.ru_maxrss as u64))
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
