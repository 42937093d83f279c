//! git-sync's Prometheus metrics under its names, and treesync's own beside them, rendered in
//! the text exposition format for `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The counters. Shared between the loop, the hooks and the HTTP endpoint.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    ready: AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    /// `git_sync_duration_seconds{status}`: (sum, count).
    duration: BTreeMap<&'static str, (f64, u64)>,
    /// `git_sync_count_total{status}`.
    count: BTreeMap<&'static str, u64>,
    /// `git_fetch_count_total`.
    fetch: u64,
    /// `git_sync_askpass_calls{status}`.
    askpass: BTreeMap<&'static str, u64>,
    /// `git_sync_hook_run_count_total{name,status}`.
    hooks: BTreeMap<(&'static str, &'static str), u64>,
    /// `treesync_gitsync_worktrees_total{how}`.
    worktrees: BTreeMap<&'static str, u64>,
    /// `treesync_gitsync_paths_changed_total`.
    changed: u64,
}

/// How a sync iteration ended (the `status` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A new hash (or the first sync of the process).
    Success,
    /// Nothing changed.
    Noop,
    /// It failed.
    Error,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Noop => "noop",
            Status::Error => "error",
        }
    }
}

fn status(ok: bool) -> &'static str {
    if ok { "success" } else { "error" }
}

impl Metrics {
    /// One sync iteration.
    pub fn sync(&self, s: Status, took: Duration) {
        let mut i = self.inner.lock().expect("never poisoned");
        let d = i.duration.entry(s.label()).or_default();
        d.0 += took.as_secs_f64();
        d.1 += 1;
        *i.count.entry(s.label()).or_default() += 1;
    }

    /// An update was needed (git-sync counts this as a fetch).
    pub fn fetch(&self) {
        self.inner.lock().expect("never poisoned").fetch += 1;
    }

    /// One `--askpass-url` call.
    pub fn askpass(&self, ok: bool) {
        *self.inner.lock().expect("never poisoned").askpass.entry(status(ok)).or_default() += 1;
    }

    /// One hook try.
    pub fn hook(&self, name: &'static str, ok: bool) {
        *self.inner.lock().expect("never poisoned").hooks.entry((name, status(ok))).or_default() += 1;
    }

    /// A worktree made, and the paths its sync changed.
    pub fn worktree(&self, how: &'static str, changed: u64) {
        let mut i = self.inner.lock().expect("never poisoned");
        *i.worktrees.entry(how).or_default() += 1;
        i.changed += changed;
    }

    /// The first sync succeeded: `/` answers 200 from now on.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether a sync has succeeded.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let i = self.inner.lock().expect("never poisoned");
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family("git_sync_duration_seconds", "summary", "Summary of git_sync durations");
        let mut body = String::new();
        for (s, (sum, count)) in &i.duration {
            let _ = writeln!(body, "git_sync_duration_seconds_sum{{status=\"{s}\"}} {sum}");
            let _ = writeln!(body, "git_sync_duration_seconds_count{{status=\"{s}\"}} {count}");
        }
        out.push_str(&body);
        let counter = |out: &mut String, name: &str, help: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in rows {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        let labelled = |m: &BTreeMap<&'static str, u64>, key: &str| -> Vec<(String, u64)> {
            m.iter().map(|(l, v)| (format!("{{{key}=\"{l}\"}}"), *v)).collect()
        };
        counter(
            &mut out,
            "git_sync_count_total",
            "How many git syncs completed, partitioned by state (success, error, noop)",
            labelled(&i.count, "status"),
        );
        counter(&mut out, "git_fetch_count_total", "How many git fetches were run", vec![(String::new(), i.fetch)]);
        if !i.askpass.is_empty() {
            counter(
                &mut out,
                "git_sync_askpass_calls",
                "How many git askpass calls completed, partitioned by state (success, error)",
                labelled(&i.askpass, "status"),
            );
        }
        if !i.hooks.is_empty() {
            let rows = i.hooks.iter().map(|((n, s), v)| (format!("{{name=\"{n}\",status=\"{s}\"}}"), *v)).collect();
            counter(
                &mut out,
                "git_sync_hook_run_count_total",
                "How many hook runs completed, partitioned by name and state (success, error)",
                rows,
            );
        }
        counter(
            &mut out,
            "treesync_gitsync_worktrees_total",
            "Worktrees made, by how (full, clone, reuse, resume, check, git)",
            labelled(&i.worktrees, "how"),
        );
        counter(
            &mut out,
            "treesync_gitsync_paths_changed_total",
            "Paths written, removed or changed by the syncs of worktrees",
            vec![(String::new(), i.changed)],
        );
        out
    }
}
