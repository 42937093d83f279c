//! Identities and dates as git's `--format` shows them (`%an`, `%ad`, `%ar`, …).

use gix::bstr::ByteSlice;

/// An identity line split as git's `split_ident_line` splits it.
pub(super) struct Ident<'a> {
    pub(super) name: &'a [u8],
    pub(super) mail: &'a [u8],
    /// The digits of the timestamp and the zone (`+0100`), when the line has both.
    pub(super) date: Option<(&'a [u8], &'a [u8])>,
}

pub(super) fn split_ident(line: &[u8]) -> Option<Ident<'_>> {
    let line = line.split(|b| *b == 0).next().unwrap_or_default();
    let lt = line.find_byte(b'<')?;
    let name = trim_end(&line[..lt]);
    let mail_len = line[lt + 1..].find_byte(b'>')?;
    let mail = &line[lt + 1..lt + 1 + mail_len];
    let last_gt = line.rfind_byte(b'>')?;
    let after = &line[last_gt + 1..];
    let after = &after[after.iter().take_while(|b| is_space(**b)).count()..];
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let date = (|| {
        let date_len = digits(after);
        if date_len == 0 {
            return None;
        }
        let rest = &after[date_len..];
        let rest = &rest[rest.iter().take_while(|b| is_space(**b)).count()..];
        let sign = *rest.first()?;
        if sign != b'+' && sign != b'-' {
            return None;
        }
        let tz_len = digits(&rest[1..]);
        (tz_len > 0).then(|| (&after[..date_len], &rest[..1 + tz_len]))
    })();
    Some(Ident { name, mail, date })
}

/// `%a?` and `%c?` (git's `format_person_part`). Returns 2 when `part` is a placeholder, 0
/// otherwise — and, as in git, also when it needs a part the line lacks, except for the
/// parts git then expands to nothing.
pub(super) fn person(out: &mut Vec<u8>, part: Option<u8>, line: &[u8], now: i64) -> usize {
    let Some(part) = part else { return 0 };
    let skip = || if b"netdDri".contains(&part) { 2 } else { 0 };
    let Some(ident) = split_ident(line) else { return skip() };
    match part {
        // The mailmap is not read: %aN, %aE and %aL are %an, %ae and %al.
        b'n' | b'N' => out.extend_from_slice(ident.name),
        b'e' | b'E' => out.extend_from_slice(ident.mail),
        b'l' | b'L' => out.extend_from_slice(ident.mail.split(|b| *b == b'@').next().unwrap_or_default()),
        b't' | b'd' | b'D' | b'r' | b'i' | b'I' | b's' => {
            let Some((digits, zone)) = ident.date else { return skip() };
            if part == b't' {
                out.extend_from_slice(digits);
                return 2;
            }
            // git's show_ident_date: a timestamp that overflows is 0 (in UTC), an absurd zone 0.
            let zone = || {
                zone.to_str()
                    .ok()
                    .and_then(|z| z.parse::<i64>().ok())
                    .and_then(|z| i32::try_from(z).ok())
                    .filter(|z| *z != i32::MAX && *z != i32::MIN)
                    .unwrap_or(0)
            };
            let (time, zone) = match digits.to_str().ok().and_then(|d| d.parse::<i64>().ok()) {
                Some(time) => (time, zone()),
                None => (0, 0),
            };
            out.extend_from_slice(show_date(time, zone, part, now).as_bytes());
        }
        _ => return 0,
    }
    2
}

pub(super) const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
pub(super) const MONTHS: [&str; 12] =
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// A date as git's `show_date` shows it in the commit's own zone: `zone` is the zone as git
/// reads it (`-0130` is -130), `mode` the placeholder letter (`d` git's default format, `D`
/// RFC 2822, `i` ISO 8601-like, `I` strict ISO 8601, `s` short, `r` relative to `now`).
pub(super) fn show_date(time: i64, zone: i32, mode: u8, now: i64) -> String {
    if mode == b'r' {
        return relative(time, now);
    }
    let minutes = i64::from(zone.signum()) * (i64::from(zone.abs() / 100) * 60 + i64::from(zone.abs() % 100));
    let (local, zone) = match time.checked_add(minutes * 60) {
        Some(local) if local >= 0 => (local, zone),
        // git refuses a time before the epoch here; the epoch in UTC is what it falls back to.
        _ => (0, 0),
    };
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let (y, mo, d) = civil_from_days(days);
    let weekday = WEEKDAYS[(days + 4).rem_euclid(7) as usize];
    let month = MONTHS[(mo - 1) as usize];
    match mode {
        b's' => format!("{y:04}-{mo:02}-{d:02}"),
        b'i' => format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} {zone:+05}"),
        b'I' if zone == 0 => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        b'I' => {
            let sign = if zone >= 0 { '+' } else { '-' };
            let abs = zone.abs();
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{sign}{:02}:{:02}", abs / 100, abs % 100)
        }
        b'D' => format!("{weekday}, {d} {month} {y} {h:02}:{mi:02}:{s:02} {zone:+05}"),
        // git's default format hides the zone when it equals the "human" zone, which it
        // leaves at -1 outside --date=human.
        _ if zone == -1 => format!("{weekday} {month} {d} {h:02}:{mi:02}:{s:02} {y}"),
        _ => format!("{weekday} {month} {d} {h:02}:{mi:02}:{s:02} {y} {zone:+05}"),
    }
}

/// Year, month (1-12) and day (1-31) of a day counted from 1970-01-01 (the proleptic Gregorian
/// calendar, as `gmtime` computes it).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// git's `show_date_relative` (in English).
pub(super) fn relative(time: i64, now: i64) -> String {
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if now < time {
        return "in the future".into();
    }
    let mut diff = now - time;
    if diff < 90 {
        return format!("{} ago", plural(diff, "second"));
    }
    diff = (diff + 30) / 60;
    if diff < 90 {
        return format!("{} ago", plural(diff, "minute"));
    }
    diff = (diff + 30) / 60;
    if diff < 36 {
        return format!("{} ago", plural(diff, "hour"));
    }
    diff = (diff + 12) / 24;
    if diff < 14 {
        return format!("{} ago", plural(diff, "day"));
    }
    if diff < 70 {
        return format!("{} ago", plural((diff + 3) / 7, "week"));
    }
    if diff < 365 {
        return format!("{} ago", plural((diff + 15) / 30, "month"));
    }
    if diff < 1825 {
        let total = (diff * 12 * 2 + 365) / (365 * 2);
        let (years, months) = (total / 12, total % 12);
        if months > 0 {
            return format!("{}, {} ago", plural(years, "year"), plural(months, "month"));
        }
        return format!("{} ago", plural(years, "year"));
    }
    format!("{} ago", plural((diff + 183) / 365, "year"))
}

/// git's `isspace` (its own ctype table: space, tab, line feed, carriage return).
pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `line` without its trailing whitespace (git's `isspace`).
pub(super) fn trim_end(line: &[u8]) -> &[u8] {
    let end = line.iter().rposition(|b| !is_space(*b)).map_or(0, |i| i + 1);
    &line[..end]
}
