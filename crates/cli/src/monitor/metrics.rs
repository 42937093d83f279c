//! The Prometheus text exposition format (version 0.0.4) of the mirrors' state: one small
//! encoder here rather than the `prometheus-client` crate, which writes only the OpenMetrics
//! format (`# EOF`, `_created` series) and would keep a second copy of the state.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use treesync_core::op::OpKind;

use super::state::{DURATION_BUCKETS, State, Step};

/// The `Content-Type` of [`render`]'s text.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric of every mirror, `now` being the time of the scrape (for the lag).
pub(super) fn render(mirrors: &[State], now: SystemTime) -> String {
    let mut out = String::new();
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let mut family = |name: &str, kind: &str, help: &str, value: &dyn Fn(&State, &str, &mut String)| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for m in mirrors {
            let labels = format!("mirror=\"{}\",target=\"{}\"", escape(&m.mirror), escape(&m.target));
            value(m, &labels, &mut out);
        }
    };
    let line = |out: &mut String, name: &str, labels: &str, v: f64| {
        let _ = writeln!(out, "{name}{{{labels}}} {}", number(v));
    };
    family(
        "treesync_last_sync_timestamp_seconds",
        "gauge",
        "When the last sync that changed the target finished (Unix time; 0: none yet).",
        &|m, l, o| line(o, "treesync_last_sync_timestamp_seconds", l, m.last_sync.map_or(0.0, secs)),
    );
    family(
        "treesync_synced_commit_timestamp_seconds",
        "gauge",
        "The commit time of the commit the target holds (Unix time; 0: none yet).",
        &|m, l, o| line(o, "treesync_synced_commit_timestamp_seconds", l, m.commit_time.unwrap_or(0) as f64),
    );
    family(
        "treesync_lag_seconds",
        "gauge",
        "Seconds since the watch first saw the ref at a commit the target does not hold, while syncing it fails; 0 at the ref.",
        &|m, l, o| {
            let lag = m.behind_since.map_or(0.0, |t| now.duration_since(t).map_or(0.0, |d| d.as_secs_f64()));
            line(o, "treesync_lag_seconds", l, lag)
        },
    );
    family(
        "treesync_healthy",
        "gauge",
        "1 when the mirror's last step succeeded (as /healthz), else 0.",
        &|m, l, o| line(o, "treesync_healthy", l, if m.step == Step::Ok { 1.0 } else { 0.0 }),
    );
    family(
        "treesync_syncs_total",
        "counter",
        "Syncs that changed the target, and the first of the watch.",
        &|m, l, o| line(o, "treesync_syncs_total", l, m.syncs as f64),
    );
    family(
        "treesync_failures_total",
        "counter",
        "Steps that failed (a sync, verify, repair or refresh; retried after a backoff).",
        &|m, l, o| line(o, "treesync_failures_total", l, m.failures as f64),
    );
    family("treesync_ops_total", "counter", "Ops the syncs applied, by kind.", &|m, l, o| {
        for k in OpKind::ALL {
            line(o, "treesync_ops_total", &format!("{l},kind=\"{}\"", k.name()), m.ops.get(k) as f64)
        }
    });
    family("treesync_bytes_total", "counter", "Bytes of file content and link targets the syncs wrote.", &|m, l, o| {
        line(o, "treesync_bytes_total", l, m.ops.bytes as f64)
    });
    family(
        "treesync_sync_duration_seconds",
        "histogram",
        "How long the syncs that changed the target took.",
        &|m, l, o| {
            let mut cumulative = 0;
            for (le, n) in DURATION_BUCKETS.iter().zip(m.durations) {
                cumulative += n;
                line(
                    o,
                    "treesync_sync_duration_seconds_bucket",
                    &format!("{l},le=\"{}\"", number(*le)),
                    cumulative as f64,
                );
            }
            cumulative += m.durations_over;
            line(o, "treesync_sync_duration_seconds_bucket", &format!("{l},le=\"+Inf\""), cumulative as f64);
            line(o, "treesync_sync_duration_seconds_sum", l, m.durations_sum);
            line(o, "treesync_sync_duration_seconds_count", l, cumulative as f64);
        },
    );
    family("treesync_verifies_total", "counter", "Scheduled verifies (--verify-every).", &|m, l, o| {
        line(o, "treesync_verifies_total", l, m.verifies as f64)
    });
    family(
        "treesync_verify_drift",
        "gauge",
        "Paths the last verify found drifted (0 after a repair); absent before the first verify.",
        &|m, l, o| {
            if let Some(d) = m.drift {
                line(o, "treesync_verify_drift", l, d as f64)
            }
        },
    );
    out
}

/// A label value in the text format: backslash, double quote and newline escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample value: integers without a fraction, others as Rust prints them (both parse as
/// Go's `ParseFloat`).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_quotes_backslashes_and_newlines() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn numbers_are_integers_when_whole() {
        assert_eq!((number(3.0), number(0.25), number(1.7e9)), ("3".into(), "0.25".into(), "1700000000".into()));
    }
}
