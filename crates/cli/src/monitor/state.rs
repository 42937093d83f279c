//! What the monitor knows of each mirror of a `watch` process: its counters, its last step and
//! the buckets of its sync durations (read by [`super::metrics`] and the probe).

use std::time::{Instant, SystemTime};

use treesync_core::op::OpCounts;

/// Upper bounds (seconds) of the buckets of `treesync_sync_duration_seconds`.
pub(super) const DURATION_BUCKETS: [f64; 12] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0, 600.0];

/// How the last step of a mirror's loop ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    /// No step has finished yet.
    Starting,
    /// It succeeded (and a verify, if one ran, found no drift or it was repaired).
    Ok,
    /// It failed (the message), or its verify found drift that was not repaired.
    Failed(String),
}

/// What is known of one mirror.
pub(super) struct State {
    pub(super) mirror: String,
    pub(super) target: String,
    pub(super) syncs: u64,
    pub(super) failures: u64,
    pub(super) verifies: u64,
    pub(super) ops: OpCounts,
    /// Counts of `treesync_sync_duration_seconds` per bucket (not cumulative), then the sum.
    pub(super) durations: [u64; DURATION_BUCKETS.len()],
    pub(super) durations_over: u64,
    pub(super) durations_sum: f64,
    pub(super) drift: Option<u64>,
    pub(super) last_sync: Option<SystemTime>,
    pub(super) commit_time: Option<i64>,
    pub(super) behind_since: Option<SystemTime>,
    pub(super) step: Step,
    /// An `error` event came since the step started (the probe's refresh).
    pub(super) step_failed: bool,
    /// The last sign of life of the loop: a step started or ended, progress, an event, a
    /// slice of its wait.
    pub(super) beat: Instant,
    /// The watch ended (stopped, or could not start): no longer waited for.
    pub(super) ended: bool,
}
