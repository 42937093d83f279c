//! What the atomic benchmark works with: its configuration, the bed a tool runs on, the cases,
//! samples, rows and figures, and the small helpers the tools share (request kinds, disk use,
//! removal).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use treesync_testkit::slowfs::{SlowFs, Stats};

/// What to run.
pub struct Config {
    /// Files in the generated tree (N).
    pub files: usize,
    /// Paths changed by each commit of the chain (K).
    pub changed: usize,
    /// Steady-state updates per tool (the median is reported).
    pub runs: usize,
    /// Steady-state updates of the git-sync way on the NAS testbed (each a full checkout).
    pub nas_git_runs: usize,
    /// Latency of each metadata request on the NAS testbed.
    pub latency: Duration,
    /// The `--switch` modes measured on the local tmpfs (`auto`, `symlink`, `exchange`); an
    /// explicit mode equal to what `auto` picked there is measured once.
    pub switches: Vec<String>,
    /// The same on the NAS testbed (where the second sync of each mode clones the whole tree
    /// through the latency: minutes at N = 100,000).
    pub nas_switches: Vec<String>,
    /// Run on the local tmpfs.
    pub local: bool,
    /// Run on the NAS testbed.
    pub nas: bool,
}

/// Where the commands of one testbed run.
pub(super) struct Bed<'a> {
    /// As the tables name it.
    pub(super) name: String,
    /// The directory the measured commands work in.
    pub(super) work: PathBuf,
    /// The same directory without the latency (the FUSE backing directory on the NAS bed):
    /// preparation and `du` go here.
    pub(super) backing: PathBuf,
    /// The slow filesystem, whose counters give the requests of each run.
    pub(super) fs: Option<&'a SlowFs>,
    /// Steady-state updates of the git-sync way.
    pub(super) git_runs: usize,
    /// The `--switch` modes measured here.
    pub(super) switches: Vec<String>,
}

/// One measured run: wall time, the filesystem requests it made, its standard output.
pub(super) struct Sample {
    pub(super) time: Duration,
    pub(super) stats: Option<Stats>,
    pub(super) stdout: String,
}

impl Bed<'_> {
    /// Run `cmd` once, timed, counting its filesystem requests; fail with its stderr.
    pub(super) fn run(&self, cmd: &mut Command) -> Result<Sample, String> {
        if let Some(fs) = self.fs {
            let _ = fs.settled_stats();
            fs.reset();
        }
        let start = Instant::now();
        let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
        let time = start.elapsed();
        if !out.status.success() {
            return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let stats = self.fs.map(SlowFs::settled_stats);
        Ok(Sample { time, stats, stdout: String::from_utf8_lossy(&out.stdout).into_owned() })
    }
}

/// Which measurement a row gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Case {
    /// Sync of C0 into nothing.
    First,
    /// Sync C0 → C1.
    Second,
    /// The median of the steady-state updates.
    Update,
}

/// A row of the time table.
pub(super) struct Row {
    pub(super) bed: String,
    pub(super) case: Case,
    pub(super) tool: String,
    /// The row the ratio is taken against (the non-atomic treesync row of the same case).
    pub(super) anchor: bool,
    pub(super) time: Duration,
    /// FUSE requests (median run).
    pub(super) requests: Option<u64>,
    /// The most frequent request kinds of the median run.
    pub(super) kinds: String,
    /// Ops treesync applied (`applied` of `--json`, median run).
    pub(super) applied: Option<u64>,
    pub(super) note: String,
}

/// A row of the disk table.
pub(super) struct DiskRow {
    pub(super) bed: String,
    pub(super) what: String,
    /// `du -sk` (hard links counted once).
    pub(super) kib: u64,
    /// `du -sk --count-links`.
    pub(super) kib_all_links: u64,
    /// The two-full-checkouts row the ratio is taken against.
    pub(super) reference: bool,
}

/// The figures of one tool on one testbed.
#[derive(Default)]
pub(super) struct Figures {
    pub(super) rows: Vec<Row>,
    pub(super) disk: Vec<DiskRow>,
}

/// The request kinds of `s`, most frequent first (at most 8).
pub(super) fn kinds(s: &Stats) -> String {
    let mut v: Vec<(u64, String)> = s.ops.iter().map(|(op, st)| (st.count, op.name().to_string())).collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    v.iter().take(8).map(|(n, k)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
}

/// `du -sck` and `du -sck --count-links` of `paths` together (a hard link shared between two
/// of them is counted once by the first): the totals in KiB.
pub(super) fn du(paths: &[&Path]) -> Result<(u64, u64), String> {
    let total = |extra: &[&str]| -> Result<u64, String> {
        let out = xtask::util::run_quiet(Command::new("du").args(["-sck"]).args(extra).args(paths))?;
        out.lines()
            .last()
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("du printed {out:?}"))
    };
    Ok((total(&[])?, total(&["--count-links"])?))
}
