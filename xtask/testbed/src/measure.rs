//! Measuring commands: wall time, peak RSS and CPU time from a small parent process, medians,
//! and how times print in the tables.

use std::process::Command;
use std::time::{Duration, Instant};

/// Wall time and peak RSS (KiB) of one run of `cmd`, stdout and stderr discarded (see
/// [`measure_usage`]).
pub fn measure(cmd: &mut Command) -> Result<(Duration, u64), String> {
    let u = measure_usage(cmd)?;
    Ok((u.wall, u.rss_kib))
}

/// What one run of a command cost, as its parent saw it in `wait4`.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub wall: Duration,
    /// Peak RSS of the largest process of the tree, KiB.
    pub rss_kib: u64,
    /// User CPU time of the process and of every descendant it waited for.
    pub user: Duration,
    /// System CPU time, likewise.
    pub sys: Duration,
}

impl Usage {
    /// User + system CPU time.
    pub fn cpu(&self) -> Duration {
        self.user + self.sys
    }
}

/// Wall time, peak RSS and CPU time of one run of `cmd`, stdout and stderr discarded.
///
/// The command is started by a fresh, small process (this binary again, as
/// `__measure OUT PROGRAM ARGS…`, see [`measure_child`]), not by this one: Linux starts a
/// child's `ru_maxrss` at its parent's RSS (exec records the high-water mark of the memory it
/// replaces, and a forked or vforked child's is the parent's), so a command started by a
/// benchmark that holds a large generated tree reported at least the benchmark's own RSS. The
/// small parent's own RSS (~3 MiB) is the floor of what this can report.
pub fn measure_usage(cmd: &mut Command) -> Result<Usage, String> {
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
    let fields: Vec<u64> = report.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    match fields[..] {
        [nanos, kib, user, sys] => Ok(Usage {
            wall: Duration::from_nanos(nanos),
            rss_kib: kib,
            user: Duration::from_micros(user),
            sys: Duration::from_micros(sys),
        }),
        _ => Err(format!("no measurement of {cmd:?} (got {report:?}): {err}")),
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `xtask __measure OUT PROGRAM ARGS…`: run PROGRAM with the inherited stdio, write its wall
/// time in nanoseconds, its peak RSS in KiB and its user and system CPU time in microseconds
/// to OUT, exit like it (see [`measure_usage`]). Linux's `wait4` counts in a child's CPU time
/// that of every descendant the child waited for, so a tool that runs helpers is counted whole.
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
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    std::fs::write(
        out,
        format!("{} {} {} {}\n", elapsed.as_nanos(), usage.ru_maxrss, micros(usage.ru_utime), micros(usage.ru_stime)),
    )
    .map_err(|e| format!("cannot write {out}: {e}"))
}

/// CPU time (user + system, all threads) a running process has used so far, from
/// `/proc/PID/stat`: how busy a server was during a run is the difference of two readings.
/// `None` when the process is gone or the file cannot be parsed.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    stat_cpu(pid, false)
}

/// Like [`process_cpu`], plus the CPU time of the children the process has waited for
/// (cutime, cstime): a tool that runs `git` is counted with the gits that finished.
pub fn process_tree_cpu(pid: u32) -> Option<Duration> {
    stat_cpu(pid, true)
}

#[allow(unsafe_code)]
fn stat_cpu(pid: u32, children: bool) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its `)` are fixed.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime and cstime are fields 14 to 17 of the line, 12 to 15 after the name.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (mut utime, mut stime) = (field(11)?, field(12)?);
    if children {
        utime += field(13)?;
        stime += field(14)?;
    }
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|&t| t > 0)?;
    Some(Duration::from_nanos((utime + stime) * 1_000_000_000 / ticks))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_reads_the_cpu_time_a_busy_process_used() {
        let me = std::process::id();
        let before = process_cpu(me).expect("this process's /proc/PID/stat parses");
        // Burn CPU until the kernel's tick-granular counter moves; a parse of the wrong
        // fields (or of clock ticks as something else) never sees it move past `before`.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut x = 0u64;
        let after = loop {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let now = process_cpu(me).expect("parses");
            if now > before {
                break now;
            }
            assert!(Instant::now() < deadline, "the CPU time read from /proc never grew ({before:?})");
        };
        assert!(after - before < Duration::from_secs(60), "{before:?} → {after:?}: not in seconds");
        assert_eq!(process_cpu(u32::MAX), None, "no such process");
    }
}
