//! [`Holder`]: who holds a target's lock — the one line every lock file and journal names.

use serde::{Deserialize, Serialize};

/// Who runs a sync: a process on a host, since a time. Written into lock files (as its
/// [`Display`](std::fmt::Display) line) and into the journal (core's `state::InProgress::holder`, as the
/// `holder`, `host` and `pid` fields); read back with [`Holder::parse`], so that stale-lock
/// detection compares fields instead of searching free text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The process id.
    pub pid: u32,
    /// The host's name (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// When the process took the lock (seconds since the epoch).
    pub started: u64,
}

impl Holder {
    /// This process, now.
    pub fn this_process() -> Holder {
        Holder { pid: std::process::id(), host: hostname(), started: now_unix() }
    }

    /// Read a holder line as [`Display`](std::fmt::Display) writes it (`pid 42 on host, started
    /// at unix time 1796000000`; earlier versions wrote the same line). `None` for anything else.
    pub fn parse(line: &str) -> Option<Holder> {
        let rest = line.trim().strip_prefix("pid ")?;
        let (pid, rest) = rest.split_once(" on ")?;
        let (host, started) = rest.rsplit_once(", started at unix time ")?;
        Some(Holder {
            pid: pid.trim().parse().ok()?,
            host: host.trim().to_string(),
            started: started.trim().parse().ok()?,
        })
    }

    /// The holder a lock file names, if it holds a holder line treesync wrote (padding and a
    /// final newline allowed); `None` for anything else (empty, binary, someone else's file),
    /// which is then never shown. The one reader of lock files, for all three locks (the local
    /// and the mounted NFS backend's `.treesync/lock`, the `nfs://` client's `lock.nfs`).
    pub fn from_lock_file(bytes: &[u8]) -> Option<Holder> {
        let text = std::str::from_utf8(bytes).ok()?.trim();
        if text.chars().any(|c| c.is_control()) {
            return None;
        }
        Holder::parse(text)
    }

    /// Is this holder a process of this host that no longer runs? (A holder on another host
    /// cannot be checked: `false`.)
    pub fn is_gone_here(&self) -> bool {
        self.host == hostname() && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {}, started at unix time {}", self.pid, self.host, self.started)
    }
}

/// This machine's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown host".into())
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
