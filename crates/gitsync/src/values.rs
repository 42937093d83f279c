//! The value grammars git-sync's flags and environment use, as Go parses them: `ParseBool`,
//! `ParseInt(s, 0, 0)` (the base from the prefix), `time.ParseDuration`, and git-sync's own
//! `key:val,key:val` list of `--git-config`.

use std::time::Duration;

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`: an optional sign, then `0x`/`0o`/`0b` or a leading `0`
/// (octal) choose the base; `_` may separate digits when a prefix is given.
pub fn parse_int(s: &str) -> Result<i64, String> {
    let bad = || format!("strconv.ParseInt: parsing {s:?}: invalid syntax");
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower.clone(), false)
    };
    // An `_` may follow a base prefix (`0x_ff`), else it only separates digits.
    let digits = if prefixed && radix != 8 { digits.strip_prefix('_').unwrap_or(&digits).to_string() } else { digits };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return Err(bad());
    }
    if digits.contains('_') && !prefixed {
        return Err(bad());
    }
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    let v = i64::from_str_radix(&digits, radix).map_err(|_| bad())?;
    Ok(if negative { -v } else { v })
}

/// Go's `time.ParseDuration`: `[-+]` then one or more `NUMBER UNIT` (`ns us µs ms s m h`,
/// decimals allowed: `1.5s`, `1m30s`); a bare `0` is zero. Negative durations are refused
/// here (no flag of git-sync's takes one).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let body = s.strip_prefix('+').unwrap_or(s);
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if let Some(negative) = body.strip_prefix('-') {
        return if negative.trim_start_matches(['0', '.']).chars().all(|c| !c.is_ascii_digit() || c == '0') {
            Ok(Duration::ZERO)
        } else {
            Err(format!("time: negative duration {s:?} is not allowed here"))
        };
    }
    if body.is_empty() {
        return Err(bad());
    }
    let mut rest = body;
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(n);
        if number.is_empty() || number == "." {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let u = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, after) = tail.split_at(u);
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        total += value * nanos;
        rest = after;
    }
    if total > u64::MAX as f64 {
        return Err(format!("time: invalid duration {s:?}"));
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// `--git-config`: `key:val` pairs separated by `,`. A key with a `:` in it (a URL) is
/// `"quoted"`; a value may be quoted (then a `,` or the end must follow). Escapes `\n \t \" \, \\`
/// work in quoted keys and in all values; any other is an error, as is a key without a value.
pub fn parse_git_config(s: &str) -> Result<Vec<(String, String)>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let escape = |c: Option<&char>| -> Result<char, String> {
        match c {
            Some('n') => Ok('\n'),
            Some('t') => Ok('\t'),
            Some('"') => Ok('"'),
            Some(',') => Ok(','),
            Some('\\') => Ok('\\'),
            Some(c) => Err(format!("unsupported escape character: '{c}'")),
            None => Err("unexpected end of string after \\".into()),
        }
    };
    while i < chars.len() {
        // The key.
        let mut key = String::new();
        if chars[i] == '"' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unterminated quoted key in {s:?}")),
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        key.push(escape(chars.get(i + 1))?);
                        i += 2;
                    }
                    Some(c) => {
                        key.push(*c);
                        i += 1;
                    }
                }
            }
            if chars.get(i) != Some(&':') {
                return Err(format!("key {key:?} must be followed by ':' in {s:?}"));
            }
        } else {
            while let Some(c) = chars.get(i) {
                if *c == ':' {
                    break;
                }
                if *c == ',' {
                    return Err(format!("key {key:?} has no value in {s:?}"));
                }
                key.push(*c);
                i += 1;
            }
            if i >= chars.len() {
                return Err(format!("key {key:?} has no value in {s:?}"));
            }
        }
        i += 1; // the ':'
        if key.is_empty() {
            return Err(format!("empty key in {s:?}"));
        }
        // The value.
        let mut value = String::new();
        if chars.get(i) == Some(&'"') {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unterminated quoted value for {key:?}")),
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        value.push(escape(chars.get(i + 1))?);
                        i += 2;
                    }
                    Some(c) => {
                        value.push(*c);
                        i += 1;
                    }
                }
            }
            match chars.get(i) {
                None => {}
                Some(',') => i += 1,
                Some(c) => return Err(format!("unexpected character {c:?} after quoted value of {key:?}")),
            }
        } else {
            while let Some(c) = chars.get(i) {
                match c {
                    ',' => {
                        i += 1;
                        break;
                    }
                    '\\' => {
                        value.push(escape(chars.get(i + 1))?);
                        i += 2;
                    }
                    c => {
                        value.push(*c);
                        i += 1;
                    }
                }
            }
        }
        out.push((key, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_take_their_base_from_the_prefix() {
        assert_eq!(parse_int("10"), Ok(10));
        assert_eq!(parse_int("0x10"), Ok(16));
        assert_eq!(parse_int("010"), Ok(8));
        assert_eq!(parse_int("0b101"), Ok(5));
        assert_eq!(parse_int("-1"), Ok(-1));
        assert_eq!(parse_int("0"), Ok(0));
        assert!(parse_int("1_000").is_err());
        assert_eq!(parse_int("0x_ff"), Ok(255));
        assert_eq!(parse_int("0x"), Err("strconv.ParseInt: parsing \"0x\": invalid syntax".into()));
        assert!(parse_int("09").is_err());
        assert!(parse_int("").is_err());
    }

    #[test]
    fn durations_as_go_reads_them() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").unwrap_err().contains("missing unit"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn bools_as_go_reads_them() {
        assert_eq!(parse_bool("True"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("yes").is_err());
    }

    #[test]
    fn git_config_lists() {
        assert_eq!(
            parse_git_config(r#"a.b:1,"url.https://x/.insteadOf":git@x:,c.d:"v,w",e.f:x\,y"#),
            Ok(vec![
                ("a.b".into(), "1".into()),
                ("url.https://x/.insteadOf".into(), "git@x:".into()),
                ("c.d".into(), "v,w".into()),
                ("e.f".into(), "x,y".into()),
            ])
        );
        assert!(parse_git_config("a.b").unwrap_err().contains("no value"));
        assert!(parse_git_config(r"a.b:\q").unwrap_err().contains("unsupported escape"));
        assert!(parse_git_config(r#"a.b:"v"x"#).is_err());
        assert_eq!(parse_git_config(""), Ok(vec![]));
    }
}
