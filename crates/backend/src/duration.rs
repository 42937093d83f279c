//! The one duration grammar of treesync (command-line flags, the config file, the xtask tools):
//! [humantime]'s — a sum of numbers with units, such as `500ms`, `5s`, `10m`, `1h30m`, `1.5h`,
//! `24h`, `2d`, `200us`, or `0`.

use std::time::{Duration, SystemTime};

/// Parse a duration such as `500ms`, `10m` or `1h30m`; the error says what is wrong and shows
/// the grammar.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    humantime::parse_duration(s).map_err(|e| {
        let why = match e {
            humantime::DurationError::Empty => "it is empty".to_string(),
            e => e.to_string(),
        };
        format!("{why}; a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m")
    })
}

/// `2026-11-30T00:25:36Z`: a time as RFC 3339 in UTC, to the second (log lines, status).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_takes_units_sums_and_fractions() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse(" 10m "), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(2 * 86400)));
        assert_eq!(parse("200us"), Ok(Duration::from_micros(200)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_bare_number_or_garbage_is_refused_with_the_grammar() {
        let e = parse("30").expect_err("no unit");
        assert!(e.contains("unit needed") && e.contains("30ms"), "{e}");
        assert!(parse("").expect_err("empty").contains("empty"));
        assert!(parse("5 parsecs").expect_err("unknown unit").contains("ms, s, m, h, d"));
        assert!(parse("1.2.3s").is_err());
    }

    #[test]
    fn rfc3339_is_utc_to_the_second() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        assert_eq!(rfc3339(t), "2026-11-30T00:53:20Z");
    }
}
