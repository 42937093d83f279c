//! How a slow filesystem behaves: latencies, threads, limits, recording, case.

use std::path::PathBuf;
use std::time::Duration;

/// How the slow filesystem behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Sleep before serving each metadata request (lookup, getattr, create, rename, readdir…):
    /// the round trip of one NFS call.
    pub meta_latency: Duration,
    /// Sleep before serving each read or write request.
    pub data_latency: Duration,
    /// Worker threads serving requests; bounds how many requests overlap (default 64).
    pub threads: usize,
    /// At most this many requests served at once, latency included (a NAS with few server
    /// threads, or one lock); `None` for no limit beyond `threads`.
    pub max_concurrent: Option<usize>,
    /// Record `(kind, path)` for every request (see [`Stats::paths`](super::Stats::paths)); can be switched later
    /// with [`SlowFs::set_recording`](super::SlowFs::set_recording).
    pub record_paths: bool,
    /// Serve [`Stats`](super::Stats) to other processes on this unix socket (see [`query`](super::query)).
    pub control: Option<PathBuf>,
    /// Names that differ only by case are the same entry, like on APFS, NTFS or an SMB share
    /// (case-preserving: an entry keeps the spelling it was created with).
    pub case_insensitive: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            meta_latency: Duration::ZERO,
            data_latency: Duration::ZERO,
            threads: 64,
            max_concurrent: None,
            record_paths: false,
            control: None,
            case_insensitive: false,
        }
    }
}
