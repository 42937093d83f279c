//! What `treesync watch` tells the world besides its log lines: Prometheus metrics and a health
//! check over HTTP (`--metrics-addr`, [`http`]), and systemd's notify protocol ([`notify`]).
//!
//! One [`Monitor`] per process holds the state of every mirror it watches. Each mirror's
//! [`Mirror`] handle is fed with the watch's events ([`Mirror::observe`]), with its steps'
//! progress ([`Mirror::on_progress`]) and with the loop's rhythm ([`probe::Probe`], which wraps
//! the watch's origin: a step starts when the loop asks the origin to refresh, it succeeded when
//! the loop then waits without an `error` event in between). Health and the watchdog are
//! derived from these signs of life, never from a timer of their own.

pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod notify;
pub(crate) mod probe;
mod state;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use treesync_core::Repo;
use treesync_core::op::OpCounts;
use treesync_watch::watch::{Event, OnProgress};

use state::{DURATION_BUCKETS, State, Step};

/// Every mirror of one `watch` process.
#[derive(Default)]
pub(crate) struct Monitor {
    mirrors: Mutex<Vec<State>>,
}

/// One mirror's handle on the [`Monitor`].
#[derive(Clone)]
pub(crate) struct Mirror {
    monitor: Arc<Monitor>,
    index: usize,
}

impl Monitor {
    pub(crate) fn new() -> Arc<Monitor> {
        Arc::new(Monitor::default())
    }

    /// Register a mirror (`mirror` is its name, or the ref of a single watch). Every mirror is
    /// registered before the first watch starts, so that readiness waits for all of them.
    pub(crate) fn mirror(self: &Arc<Self>, mirror: &str) -> Mirror {
        let mut all = self.lock();
        all.push(State {
            mirror: mirror.to_string(),
            target: String::new(),
            syncs: 0,
            failures: 0,
            verifies: 0,
            ops: OpCounts::default(),
            durations: [0; DURATION_BUCKETS.len()],
            durations_over: 0,
            durations_sum: 0.0,
            drift: None,
            last_sync: None,
            commit_time: None,
            behind_since: None,
            step: Step::Starting,
            step_failed: false,
            beat: Instant::now(),
            ended: false,
        });
        Mirror { monitor: self.clone(), index: all.len() - 1 }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<State>> {
        // A panic while holding the lock leaves counters, nothing that breaks an invariant.
        self.mirrors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Prometheus text exposition (format 0.0.4) of every mirror, at `now`.
    pub(crate) fn render(&self, now: SystemTime) -> String {
        metrics::render(&self.lock(), now)
    }

    /// `Ok(text)` when the last step of every running mirror succeeded, else `Err(text)`
    /// naming the mirrors that are starting or failing, one line each.
    pub(crate) fn health(&self) -> Result<String, String> {
        let all = self.lock();
        let bad: Vec<String> = all
            .iter()
            .filter_map(|m| match &m.step {
                Step::Ok => None,
                Step::Starting => Some(format!("{}: no sync finished yet", m.mirror)),
                Step::Failed(message) => Some(format!("{}: {message}", m.mirror)),
            })
            .collect();
        if bad.is_empty() { Ok("ok\n".into()) } else { Err(bad.join("\n") + "\n") }
    }

    /// Whether every mirror has finished its first step (or ended): systemd's `READY=1`.
    pub(crate) fn looked_at_all(&self) -> bool {
        self.lock().iter().all(|m| m.step != Step::Starting || m.ended)
    }

    /// Whether every mirror still running showed a sign of life after `since`.
    pub(crate) fn alive_since(&self, since: Instant) -> bool {
        self.lock().iter().all(|m| m.ended || m.beat > since)
    }

    /// Whether every mirror ended.
    pub(crate) fn all_ended(&self) -> bool {
        self.lock().iter().all(|m| m.ended)
    }

    /// One line for systemd's `STATUS=`: `2 mirrors: 1 ok, 1 failing (docs); last sync
    /// 2026-12-02T03:04:05Z`.
    pub(crate) fn status_line(&self) -> String {
        let all = self.lock();
        let ok = all.iter().filter(|m| m.step == Step::Ok).count();
        let failing: Vec<&str> =
            all.iter().filter(|m| matches!(m.step, Step::Failed(_))).map(|m| m.mirror.as_str()).collect();
        let starting = all.iter().filter(|m| m.step == Step::Starting && !m.ended).count();
        let mut line = format!("{} mirror{}: {ok} ok", all.len(), if all.len() == 1 { "" } else { "s" });
        if !failing.is_empty() {
            line += &format!(", {} failing ({})", failing.len(), failing.join(", "));
        }
        if starting > 0 {
            line += &format!(", {starting} starting");
        }
        if let Some(last) = all.iter().filter_map(|m| m.last_sync).max() {
            line += &format!("; last sync {}", treesync_core::duration::rfc3339(last));
        }
        line
    }
}

impl Mirror {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut all = self.monitor.lock();
        let m = &mut all[self.index];
        m.beat = Instant::now();
        f(m)
    }

    /// Take in one event of the watch; `repo` is read for the commit time of a synced commit.
    pub(crate) fn observe(&self, event: &Event, repo: &Repo) {
        let commit_time = match event {
            Event::Synced { outcome } => {
                repo.thread_local().find_commit(outcome.commit).ok().and_then(|c| c.time().ok()).map(|t| t.seconds)
            }
            _ => None,
        };
        self.with(|m| match event {
            Event::Watching { target, .. } => m.target = target.clone(),
            Event::Synced { outcome } => {
                m.syncs += 1;
                m.ops.merge(&outcome.applied);
                let secs = outcome.elapsed.as_secs_f64();
                match DURATION_BUCKETS.iter().position(|&le| secs <= le) {
                    Some(i) => m.durations[i] += 1,
                    None => m.durations_over += 1,
                }
                m.durations_sum += secs;
                m.last_sync = Some(SystemTime::now());
                m.commit_time = commit_time.or(m.commit_time);
                m.behind_since = None;
            }
            Event::Verified { report, clean } => {
                m.verifies += 1;
                m.drift = Some(report.drift.len() as u64);
                if !clean {
                    m.step_failed = true;
                    m.step = Step::Failed(format!("verify found drift in {} paths", report.drift.len()));
                }
            }
            Event::Repaired { .. } => {
                m.drift = Some(0);
                m.step_failed = false;
            }
            Event::Error { message, behind_since, .. } => {
                m.failures += 1;
                m.step_failed = true;
                m.step = Step::Failed(message.clone());
                if behind_since.is_some() {
                    m.behind_since = *behind_since;
                }
            }
            _ => {}
        })
    }

    /// A step of the loop starts (the probe's refresh).
    pub(crate) fn step_started(&self) {
        self.with(|m| m.step_failed = false)
    }

    /// The loop waits: the step before succeeded unless an error or drift was told meanwhile.
    pub(crate) fn step_ended(&self) {
        self.with(|m| {
            if !m.step_failed {
                m.step = Step::Ok;
                // The loop only waits after a good step once the target holds the ref's commit.
                m.behind_since = None;
            }
        })
    }

    /// A sign of life (a slice of the loop's wait).
    pub(crate) fn beat(&self) {
        self.with(|_| {})
    }

    /// For [`treesync_watch::watch::Options::on_progress`]: every batch of a step is a sign of
    /// life.
    pub(crate) fn on_progress(&self) -> OnProgress {
        let me = self.clone();
        OnProgress(Arc::new(move |_| me.beat()))
    }

    /// The watch ended: stopped (`None`), or could not start (the error, on one line).
    pub(crate) fn ended(&self, error: Option<String>) {
        self.with(|m| {
            m.ended = true;
            if let Some(e) = error {
                m.step = Step::Failed(e);
            }
        })
    }
}

impl fmt::Debug for Mirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mirror").field("index", &self.index).finish_non_exhaustive()
    }
}
