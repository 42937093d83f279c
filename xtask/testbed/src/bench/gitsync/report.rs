//! The git-sync benchmark's tables: a summary (first sync, second sync, the later syncs'
//! medians and maxima, each with git-sync ÷ treesync), issue 32's goals checked, every sync's
//! figures, and notes.

use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use super::follow::Follow;
use super::{Sample, Side};
use crate::measure::fmt_time;

/// What the header says about the run.
pub(super) struct Facts {
    pub files: usize,
    pub pushes: usize,
    pub changed: usize,
    /// git-sync's version line (and commit and Go version when recorded).
    pub git_sync: String,
    /// `treesync --version`, when treesync was measured.
    pub treesync: Option<String>,
    pub on_tmpfs: bool,
    /// The loop devices of the roots, in the order of the sides.
    pub devices: Vec<String>,
    /// `git fetch --depth 1` alone after each push, in a scratch repository (written not
    /// measured): the part of every sync that neither tool can avoid.
    pub floor: Vec<Sample>,
    /// The long-running mode, per tool (empty: not run), and its `--period`.
    pub follows: Vec<Follow>,
    pub period: Duration,
}

/// The label of the floor rows.
const FLOOR: &str = "floor: the same `git fetch --depth 1` alone";

/// Bytes as the tables print them (binary units).
pub(super) fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.0} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

fn fmt_ratio(a: f64, b: f64) -> String {
    if b <= 0.0 {
        return "–".into();
    }
    let r = a / b;
    if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.2}×")
    }
}

/// One row's figures: a sample, or a median or maximum over samples (each column on its own).
#[derive(Clone, Copy)]
struct Figures {
    wall: Duration,
    cpu: Duration,
    user: Duration,
    sys: Duration,
    rss_kib: u64,
    written: u64,
    requests: usize,
    /// One sample's figures (CPU split into user + sys), not medians or maxima taken column
    /// by column (where user and sys need not add up to the CPU shown).
    single: bool,
}

impl Figures {
    fn of(s: &Sample) -> Figures {
        Figures {
            wall: s.usage.wall,
            cpu: s.usage.cpu(),
            user: s.usage.user,
            sys: s.usage.sys,
            rss_kib: s.usage.rss_kib,
            written: s.written,
            requests: s.requests,
            single: true,
        }
    }

    /// Column by column: the median (`max = false`) or the maximum of `samples` (not empty).
    fn over(samples: &[Sample], max: bool) -> Figures {
        fn pick<T: Ord + Copy>(mut v: Vec<T>, max: bool) -> T {
            v.sort();
            if max { v[v.len() - 1] } else { v[v.len() / 2] }
        }
        let all: Vec<Figures> = samples.iter().map(Figures::of).collect();
        Figures {
            wall: pick(all.iter().map(|f| f.wall).collect(), max),
            cpu: pick(all.iter().map(|f| f.cpu).collect(), max),
            user: pick(all.iter().map(|f| f.user).collect(), max),
            sys: pick(all.iter().map(|f| f.sys).collect(), max),
            rss_kib: pick(all.iter().map(|f| f.rss_kib).collect(), max),
            written: pick(all.iter().map(|f| f.written).collect(), max),
            requests: pick(all.iter().map(|f| f.requests).collect(), max),
            single: false,
        }
    }

    fn cells(&self) -> String {
        self.cells_with(true)
    }

    /// The cells; `written = false` for the floor, whose writes are not measured.
    fn cells_with(&self, written: bool) -> String {
        let cpu = if self.single {
            format!("{} ({} + {})", fmt_time(self.cpu), fmt_time(self.user), fmt_time(self.sys))
        } else {
            fmt_time(self.cpu)
        };
        format!(
            "{} | {cpu} | {:.1} MiB | {} | {}",
            fmt_time(self.wall),
            self.rss_kib as f64 / 1024.0,
            if written { fmt_bytes(self.written) } else { "–".into() },
            self.requests
        )
    }

    fn ratio_cells(g: &Figures, t: &Figures) -> String {
        format!(
            "**{}** | {} | {} | {} | {}",
            fmt_ratio(g.wall.as_secs_f64(), t.wall.as_secs_f64()),
            fmt_ratio(g.cpu.as_secs_f64(), t.cpu.as_secs_f64()),
            fmt_ratio(g.rss_kib as f64, t.rss_kib as f64),
            fmt_ratio(g.written as f64, t.written as f64),
            fmt_ratio(g.requests as f64, t.requests as f64)
        )
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn first_line(cmd: &mut Command) -> String {
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_default()
}

/// The Markdown of a run.
pub(super) fn render(f: &Facts, sides: &[Side]) -> String {
    let mut md = String::new();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let git = first_line(Command::new("git").arg("--version"));
    let kernel = first_line(Command::new("uname").arg("-r"));
    let _ = writeln!(
        md,
        "Measured {}: git-sync: {}; treesync: {}. {git}, Linux {kernel}, {cores} cores.\n",
        first_line(Command::new("date").args(["-u", "+%Y-%m-%d"])),
        f.git_sync,
        f.treesync
            .as_deref()
            .map(|v| format!("`{v}`, its `git-sync` command"))
            .unwrap_or_else(|| "not measured".into()),
    );
    let _ = writeln!(
        md,
        "N = {} files (100–2,000 bytes) in {} directories, pushed to a bare repository served by `git daemon` on \
         127.0.0.1 (`git://`). Sync 1 is of that commit into an empty root; then {} pushes (`git push` through the \
         daemon) each modify {} files, and each is followed by one sync of each tool. Every sync is a separate \
         process with the same flags for both tools, `--repo git://127.0.0.1:PORT/repo --root ROOT --link current \
         --one-time`, git-sync's defaults otherwise (`--ref HEAD`, `--depth 1`, `--git-gc always`, \
         `--stale-worktree-timeout 0`); the tools take turns, which goes first alternating from sync to sync. \
         After every sync each root was checked: `current` a relative link to `.worktrees/<commit>`, the worktree \
         equal to `git archive` of the commit, its HEAD the commit, `git status` clean.\n",
        f.files,
        f.files.div_ceil(100),
        f.pushes,
        f.changed
    );
    let _ = writeln!(
        md,
        "How: wall time; CPU = user + system time of the tool and of every process it waited for (`wait4`); peak \
         RSS = the largest single process of the tree (`ru_maxrss` from `wait4`, not a sum of processes; cgroup \
         v2's `memory.peak` is not available on these machines, which run cgroups v1, whose memory counters \
         include the page cache); written = what the root's filesystem sent to its device: each tool's root is \
         on its own ext4 (a sparse image on {}, loop device, mounted `noatime`), and the device's written sectors \
         (`/sys/block/loopN/stat`) are read after a `syncfs` before and after the sync — data, metadata and \
         journal, written by the tool or by the git it runs; requests = `Request upload-pack` lines in the \
         daemon's `--verbose` log during the sync (`ls-remote`, `fetch`: one connection each). The floor rows \
         time the fetch both tools make, `git fetch URL HEAD --depth 1`, alone in a scratch repository on \
         the tmpfs (a branch moved to each commit fetched, as the tools do), after the tools' syncs of each \
         push: the server's and the transfer's share of a sync. \
         Medians and maxima are taken column by column.\n",
        if f.on_tmpfs { "a tmpfs" } else { "the local disk (not tmpfs)" }
    );
    summary(&mut md, f, sides);
    if sides.len() == 2 {
        goals(&mut md, sides);
    }
    detail(&mut md, sides, &f.floor);
    if !f.follows.is_empty() {
        follow_table(&mut md, f);
    }
    let _ = writeln!(md, "Notes:");
    for (side, dev) in sides.iter().zip(&f.devices) {
        let mut notes = side.notes.clone();
        notes.insert(0, format!("root on {dev}"));
        let outlived: Vec<String> = side
            .samples
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.outlived.is_empty())
            .map(|(i, s)| format!("sync {}: {}", i + 1, s.outlived.join(", ")))
            .collect();
        if outlived.is_empty() {
            notes.push("no process of a sync outlived it".into());
        } else {
            notes.push(format!(
                "processes outlived their sync (killed, their work not measured): {}",
                outlived.join("; ")
            ));
        }
        let _ = writeln!(md, "- {}: {}.", side.label, notes.join("; "));
    }
    md.push('\n');
    md
}

fn summary(md: &mut String, f: &Facts, sides: &[Side]) {
    let floor = |pick: &dyn Fn(&[Sample]) -> Figures| (!f.floor.is_empty()).then(|| pick(&f.floor));
    let _ = writeln!(md, "| sync | tool | wall time | CPU (user + sys) | peak RSS | written | git requests |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|");
    let later = if f.pushes == 2 {
        "3rd: after push 2".to_string()
    } else {
        format!("3rd–{}: after pushes 2–{}", ordinal(f.pushes + 1), f.pushes)
    };
    let groups: Vec<(String, Vec<Figures>, Option<Figures>)> = vec![
        (
            format!("1st: {} files into an empty root", f.files),
            sides.iter().map(|s| Figures::of(&s.samples[0])).collect(),
            floor(&|s| Figures::of(&s[0])),
        ),
        (
            "2nd: after push 1".into(),
            sides.iter().map(|s| Figures::of(&s.samples[1])).collect(),
            floor(&|s| Figures::of(&s[1])),
        ),
        (
            format!("{later}, median"),
            sides.iter().map(|s| Figures::over(&s.samples[2..], false)).collect(),
            floor(&|s| Figures::over(&s[2..], false)),
        ),
        (
            format!("{later}, max"),
            sides.iter().map(|s| Figures::over(&s.samples[2..], true)).collect(),
            floor(&|s| Figures::over(&s[2..], true)),
        ),
    ];
    for (what, figures, floor) in &groups {
        for (i, (side, fig)) in sides.iter().zip(figures).enumerate() {
            let case = if i == 0 { what.as_str() } else { "" };
            let _ = writeln!(md, "| {case} | {} | {} |", side.label, fig.cells());
        }
        if let [g, t] = &figures[..] {
            let _ = writeln!(md, "| | git-sync ÷ treesync | {} |", Figures::ratio_cells(g, t));
        }
        if let Some(fl) = floor {
            let _ = writeln!(md, "| | {FLOOR} | {} |", fl.cells_with(false));
        }
    }
    md.push('\n');
}

fn goals(md: &mut String, sides: &[Side]) {
    let (g, t) = (&sides[0].samples, &sides[1].samples);
    let met = |ok: bool| if ok { "**met**" } else { "**not met**" };
    let _ = writeln!(md, "Goals of issue 32:\n");

    let speed: Vec<(usize, f64)> = g
        .iter()
        .zip(t)
        .enumerate()
        .skip(2)
        .map(|(i, (g, t))| (i + 1, g.usage.wall.as_secs_f64() / t.usage.wall.as_secs_f64()))
        .collect();
    let worst = speed.iter().cloned().fold((0, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
    let _ = writeln!(
        md,
        "- each sync after the second ≥ 20× faster than git-sync's (wall time): {} — git-sync ÷ treesync per sync: {}; \
         the lowest {:.1}× (sync {}).",
        met(speed.iter().all(|&(_, r)| r >= 20.0)),
        speed.iter().map(|(i, r)| format!("{i}: {r:.1}×")).collect::<Vec<_>>().join(", "),
        worst.1,
        worst.0
    );

    let memory: Vec<(usize, f64)> = g
        .iter()
        .zip(t)
        .enumerate()
        .map(|(i, (g, t))| (i + 1, t.usage.rss_kib as f64 / g.usage.rss_kib.max(1) as f64))
        .collect();
    let over: Vec<String> =
        memory.iter().filter(|&&(_, r)| r > 0.25).map(|(i, r)| format!("sync {i}: {:.0}%", r * 100.0)).collect();
    let _ = writeln!(
        md,
        "- peak memory ≤ ¼ of git-sync's, every sync: {} — treesync's peak RSS as a share of git-sync's: {}{}.",
        met(over.is_empty()),
        memory.iter().map(|(i, r)| format!("{i}: {:.0}%", r * 100.0)).collect::<Vec<_>>().join(", "),
        if over.is_empty() { String::new() } else { format!(" (over ¼: {})", over.join(", ")) }
    );

    let more: Vec<String> = g
        .iter()
        .zip(t)
        .enumerate()
        .filter(|(_, (g, t))| t.requests > g.requests)
        .map(|(i, (g, t))| format!("sync {}: {} vs {}", i + 1, t.requests, g.requests))
        .collect();
    let total = |s: &[Sample]| s.iter().map(|s| s.requests).sum::<usize>();
    let _ = writeln!(
        md,
        "- no more git-server requests than git-sync, every sync: {} — {} in all for git-sync, {} for treesync{}.\n",
        met(more.is_empty()),
        total(g),
        total(t),
        if more.is_empty() { String::new() } else { format!(" (treesync more: {})", more.join(", ")) }
    );
}

fn detail(md: &mut String, sides: &[Side], floor: &[Sample]) {
    let _ = writeln!(md, "Every sync:\n");
    let _ = writeln!(
        md,
        "| sync | tool | wall time | CPU (user + sys) | peak RSS | written | git requests | load (1 min) |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|");
    let n = sides.iter().map(|s| s.samples.len()).min().unwrap_or(0);
    for i in 0..n {
        for side in sides {
            let s = &side.samples[i];
            let _ = writeln!(md, "| {} | {} | {} | {:.2} |", i + 1, side.label, Figures::of(s).cells(), s.load);
        }
        if let Some(s) = floor.get(i) {
            let _ = writeln!(md, "| {} | {FLOOR} | {} | {:.2} |", i + 1, Figures::of(s).cells_with(false), s.load);
        }
    }
    md.push('\n');
}

fn follow_table(md: &mut String, f: &Facts) {
    let _ = writeln!(
        md,
        "Long-running (`--period {}ms` instead of `--one-time`, same flags otherwise): each tool in turn, alone, on the \
         root its one-time syncs left. After the process's first sync, an idle window with nothing pushed; then \
         pushes of {} files, each timed from `git push` returning until `current` points at the pushed commit \
         (polled every 2 ms; pushes land at different points of the period); the final worktree checked as above. \
         CPU = user + system of the tool and the children it waited for (`/proc/PID/stat`).\n",
        f.period.as_millis(),
        f.changed
    );
    let _ = writeln!(
        md,
        "| tool | idle: git requests per minute | idle: CPU per minute | pushes | push → link switched, median | max |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
    for x in &f.follows {
        let per_min = 60.0 / x.idle.as_secs_f64();
        let mut l = x.latencies.clone();
        l.sort();
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {} | {} |",
            x.label,
            x.idle_requests as f64 * per_min,
            fmt_time(x.idle_cpu.mul_f64(per_min)),
            l.len(),
            l.get(l.len() / 2).map(|d| fmt_time(*d)).unwrap_or_else(|| "–".into()),
            l.last().map(|d| fmt_time(*d)).unwrap_or_else(|| "–".into()),
        );
    }
    md.push('\n');
}
