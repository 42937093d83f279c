//! The long-running mode: each tool in turn (never both at once) runs as a daemon with
//! `--period P` on the root the one-time syncs left; what it costs while nothing changes
//! (git-server requests and CPU per minute), and how long a push takes to reach readers: from
//! `git push` returning until the link points at the pushed commit (polled every 2 ms).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use treesync_testkit::gitdaemon::GitDaemon;

use super::{Side, outlived};
use crate::measure::process_tree_cpu;

/// What one tool did in the long-running mode.
pub(super) struct Follow {
    pub label: String,
    /// The idle window, and the requests and CPU time in it.
    pub idle: Duration,
    pub idle_requests: usize,
    pub idle_cpu: Duration,
    /// From each `git push` returning to the link switched.
    pub latencies: Vec<Duration>,
}

/// A running tool, stopped (SIGTERM, then SIGKILL) with its leftovers on drop.
struct Running {
    child: Child,
    tag: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // git children of a tool that died on SIGTERM mid-sync (git-sync has no handler).
        let _ = outlived(&self.tag);
    }
}

/// The link's commit (the last element of its target), if there is a link.
fn linked(root: &Path) -> Option<String> {
    std::fs::read_link(root.join("current")).ok()?.file_name()?.to_str().map(str::to_string)
}

/// Run `side` with `--period period` from a root at `current`; after an idle window, push
/// each of `commits` and time it to the link switch.
#[allow(clippy::too_many_arguments)]
pub(super) fn follow(
    side: &Side,
    daemon: &GitDaemon,
    url: &str,
    push: &dyn Fn(&str) -> Result<String, String>,
    current: &str,
    commits: &[String],
    period: Duration,
    idle: Duration,
) -> Result<Follow, String> {
    let tag = format!("{}-follow", side.name);
    let log = side.tmp.with_extension("follow.log");
    let mut cmd = side.command(url, &tag, &["--period", &format!("{}ms", period.as_millis())]);
    let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdout(Stdio::null()).stderr(stderr);
    let child = cmd.spawn().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let mut running = Running { child, tag };
    let pid = running.child.id();
    let failed = |what: String| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        format!("{} (long-running): {what}; its last log lines: {}", side.label, tail.join(" | "))
    };
    // Settled: two fetches seen, so the process's first sync (which redoes some work even when
    // nothing changed) is over.
    let r0 = daemon.requests();
    let deadline = Instant::now() + Duration::from_secs(600);
    while daemon.requests() < r0 + 2 {
        if Instant::now() > deadline || !matches!(running.child.try_wait(), Ok(None)) {
            return Err(failed("never settled (no second fetch within 600 s, or it exited)".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if linked(&side.root()).as_deref() != Some(current) {
        return Err(failed(format!("the link does not point at {current}")));
    }
    let (r1, c1) = (daemon.requests(), process_tree_cpu(pid).unwrap_or_default());
    std::thread::sleep(idle);
    let (r2, c2) = (daemon.requests(), process_tree_cpu(pid).unwrap_or_default());
    let mut latencies = Vec::new();
    for (i, commit) in commits.iter().enumerate() {
        // Pushes land at different points of the tool's period.
        std::thread::sleep(Duration::from_millis(300) + period * (i as u32 % 4) / 4);
        push(commit)?;
        let pushed = Instant::now();
        let deadline = pushed + Duration::from_secs(600);
        while linked(&side.root()).as_deref() != Some(commit.as_str()) {
            if Instant::now() > deadline {
                return Err(failed(format!("the link did not reach {commit} within 600 s of the push")));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        latencies.push(pushed.elapsed());
        eprintln!("  push {}: link switched after {}", i + 1, crate::measure::fmt_time(pushed.elapsed()));
    }
    // Let the iteration of the last push finish (its cleanup comes after the switch): the next
    // fetch starts after it.
    let r = daemon.requests();
    let deadline = Instant::now() + Duration::from_secs(600);
    while daemon.requests() == r && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(running);
    Ok(Follow { label: side.label.clone(), idle, idle_requests: r2 - r1, idle_cpu: c2.saturating_sub(c1), latencies })
}
