//! Measuring commands: wall time and peak RSS from a small parent process, medians, and how
//! times print in the tables.

use std::process::Command;
use std::time::{Duration, Instant};

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

/// The median of `v` (not empty).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A time as the tables print it: seconds from 1 s, milliseconds below.
pub fn fmt_time(d: Duration) -> String {
    if d.as_secs_f64() >= 1.0 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}
