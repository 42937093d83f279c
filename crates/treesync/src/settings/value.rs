//! How each setting's value is read: from a flag (a `fn(&str) -> Result<T, String>` for clap)
//! and from a config file (a serde `deserialize_with` function), side by side so both accept
//! the same values.
//!
//! A config file's messages name the key and the table they are about through the markers
//! `{key}` and `{section}`, which the reader of the file fills in (a value's `Deserialize`
//! knows neither); a hint follows the message after `\n  hint: `, as in every error of treesync.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::decide::SwitchMode;
use crate::open::{BackendKind, WriteJobs};

/// The marker a config reader replaces by the key's name.
pub const KEY: &str = "{key}";
/// The marker a config reader replaces by the table's name (`[defaults]`, `[mirror.site]`).
pub const SECTION: &str = "{section}";

/// What a value is, whatever its type: for messages that say what was given.
#[allow(missing_docs)]
pub enum Got {
    Str(String),
    Int(i64),
    /// An integer beyond `i64`, as written.
    Big(String),
    Float(f64),
    Bool(bool),
    Date(String),
    Array,
    Table,
}

impl Got {
    /// `a string ("8")`, `an integer (8)`, `a table`, … for wrong-type messages.
    pub fn describe(&self) -> String {
        match self {
            Got::Str(s) => format!("a string ({s:?})"),
            Got::Int(i) => format!("an integer ({i})"),
            Got::Big(i) => format!("an integer ({i})"),
            Got::Float(f) => format!("a float ({f})"),
            Got::Bool(b) => format!("a boolean ({b})"),
            Got::Date(d) => format!("a date ({d})"),
            Got::Array => "an array".into(),
            Got::Table => "a table".into(),
        }
    }

    /// `KEY in SECTION must be EXPECTED, not GOT`.
    pub fn wrong(&self, expected: &str) -> String {
        format!("{KEY} in {SECTION} must be {expected}, not {}", self.describe())
    }
}

/// `message` with a hint on a second line.
pub fn with_hint(message: String, hint: impl fmt::Display) -> String {
    format!("{message}\n  hint: {hint}")
}

/// A quoted string where `expected` was wanted, with what to write instead: `unquoted`
/// without the quotes.
fn quoted(s: String, expected: &str, unquoted: &str) -> String {
    with_hint(Got::Str(s).wrong(expected), format!("write {KEY} = {unquoted}, without quotes"))
}

impl<'de> Deserialize<'de> for Got {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Got;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Got, E> {
                Ok(Got::Str(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Got, E> {
                Ok(Got::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Got, E> {
                Ok(i64::try_from(v).map_or_else(|_| Got::Big(v.to_string()), Got::Int))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Got, E> {
                Ok(i64::try_from(v).map_or_else(|_| Got::Big(v.to_string()), Got::Int))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Got, E> {
                Ok(i64::try_from(v).map_or_else(|_| Got::Big(v.to_string()), Got::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Got, E> {
                Ok(Got::Float(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Got, E> {
                Ok(Got::Bool(v))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Got, A::Error> {
                Ok(Got::Array)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Got, A::Error> {
                // toml hands a date to serde as a one-entry table with a private key.
                match map.next_key::<String>()? {
                    Some(k) if k.contains("toml_private_datetime") => Ok(Got::Date(map.next_value::<String>()?)),
                    _ => Ok(Got::Table),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Read a value as [`Got`] and turn it into `T` with `f`: the body of every `deserialize_with`
/// function here.
pub fn read<'de, D: Deserializer<'de>, T>(
    d: D,
    f: impl FnOnce(Got) -> Result<T, String>,
) -> Result<Option<T>, D::Error> {
    f(Got::deserialize(d)?).map(Some).map_err(de::Error::custom)
}

// ---- Flags (clap's value parsers) ------------------------------------------------------------

/// A count of operations (`--jobs`, `--batch`, `--lookup-jobs`): a whole number of at least 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (0 would run nothing)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: give a whole number of at least 1, e.g. 8")),
    }
}

/// A duration longer than 0 (`--filter-timeout`).
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    match treesync_core::duration::parse(s)? {
        d if d.is_zero() => Err("it must be longer than 0".into()),
        d => Ok(d),
    }
}

/// `--verify-every`: a duration, or `off` (which turns off a mirror's).
pub fn every(s: &str) -> Result<Duration, String> {
    if s == "off" { Ok(Duration::ZERO) } else { treesync_core::duration::parse(s) }
}

/// A size in bytes, for `max_bytes` and `--max-bytes`: a number of bytes, or a number and a
/// unit — `B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`, `P`/`PiB` (powers of 1024), `KB`,
/// `MB`, `GB`, `TB`, `PB` (powers of 1000); `1.5TiB` and `500 GiB` too. At least 1 byte.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(format!("{s:?} is not a size like 500GiB, 2TiB or 1000000 (bytes)"));
    }
    let n: f64 = number.parse().map_err(|_| format!("{number:?} is not a number"))?;
    let unit_bytes: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "K" | "KiB" => 1024.0,
        "M" | "MiB" => 1024f64.powi(2),
        "G" | "GiB" => 1024f64.powi(3),
        "T" | "TiB" => 1024f64.powi(4),
        "P" | "PiB" => 1024f64.powi(5),
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "PB" => 1e15,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use B, KiB, MiB, GiB, TiB, PiB, or KB, MB, GB, TB, PB)"
            ));
        }
    };
    let bytes = (n * unit_bytes).round();
    if bytes < 1.0 {
        return Err(format!("{s:?} is less than 1 byte"));
    }
    if bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// A size as `--max-bytes` takes it: the largest binary unit that divides it (`1TiB`).
pub fn size_text(n: u64) -> String {
    let units = [(1u64 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match units.iter().find(|(unit, _)| n >= *unit && n.is_multiple_of(*unit)) {
        Some((unit, name)) => format!("{}{name}", n / unit),
        None => format!("{n}B"),
    }
}

/// ` (expected one of: a, b, c)`.
pub fn expected(keys: &[&str]) -> String {
    format!(" (expected one of: {})", keys.join(", "))
}

/// `did you mean "target"?` for a near miss (a typo, or `-` for `_`).
pub fn did_you_mean(word: &str, candidates: &[&str]) -> Option<String> {
    let folded = word.replace('-', "_").to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(&folded, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4) && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| format!("did you mean {c:?}?"))
}

// ---- Config files (serde's `deserialize_with`) --------------------------------------------------

/// `true` or `false`.
pub(crate) fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    read(d, |got| match got {
        Got::Bool(b) => Ok(b),
        Got::Str(s) if s == "true" || s == "false" => {
            let unquoted = s.clone();
            Err(quoted(s, "true or false", &unquoted))
        }
        got => Err(got.wrong("true or false")),
    })
}

/// A non-empty string.
pub fn text_of(got: Got) -> Result<String, String> {
    match got {
        Got::Str(s) if s.trim().is_empty() => Err(format!("{KEY} in {SECTION} must not be empty")),
        Got::Str(s) => Ok(s),
        got @ (Got::Int(_) | Got::Big(_) | Got::Float(_) | Got::Bool(_) | Got::Date(_)) => {
            let written = match &got {
                Got::Int(i) => i.to_string(),
                Got::Big(i) => i.clone(),
                Got::Float(f) => f.to_string(),
                Got::Bool(b) => b.to_string(),
                Got::Date(d) => d.clone(),
                _ => String::new(),
            };
            Err(with_hint(got.wrong("a string"), format!("quote it: {KEY} = \"{written}\"")))
        }
        got => Err(got.wrong("a string")),
    }
}

/// A non-empty string (also the `repo`, `ref`, `target` and `path` of a mirror).
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, text_of)
}

/// A path: a non-empty string.
pub(crate) fn path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::path::PathBuf>, D::Error> {
    read(d, |got| text_of(got).map(Into::into))
}

/// gitignore-style patterns (`include`, `exclude`): one string or an array of strings.
pub(crate) fn patterns<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    match Raw::deserialize(d) {
        Ok(Raw::One(p)) => Ok(Some(vec![p])),
        Ok(Raw::Many(ps)) => Ok(Some(ps)),
        Err(_) => Err(de::Error::custom(with_hint(
            format!("{KEY} in {SECTION} must be a pattern or an array of patterns"),
            format!("e.g. {KEY} = [\"docs/\", \"*.md\"] (gitignore-style patterns, see docs/select.md)"),
        ))),
    }
}

/// A number of operations or entries: an integer of at least 1 (at most `usize::MAX`).
fn count_of(got: Got) -> Result<u64, String> {
    let too_large =
        |n: &dyn fmt::Display| format!("{KEY} in {SECTION} must be a number from 1 to {}, not {n}", usize::MAX);
    match got {
        Got::Int(n) if n < 1 => Err(format!("{KEY} in {SECTION} must be at least 1, not {n}")),
        Got::Int(n) => usize::try_from(n).map(|_| n as u64).map_err(|_| too_large(&n)),
        Got::Big(n) if n.starts_with('-') => Err(format!("{KEY} in {SECTION} must be at least 1, not {n}")),
        Got::Big(n) => Err(too_large(&n)),
        Got::Str(s) if s.trim().parse::<usize>().is_ok() => {
            let n = s.trim().to_string();
            Err(quoted(s, "a number", &n))
        }
        got => Err(got.wrong("a number (1, 8, 32, …)")),
    }
}

/// A count ([`count_of`]) as `T`; one too large for `T` is `T`'s largest.
pub(crate) fn count<'de, D: Deserializer<'de>, T: TryFrom<u64> + Bounded>(d: D) -> Result<Option<T>, D::Error> {
    read(d, |got| count_of(got).map(|n| T::try_from(n).unwrap_or(T::MAX)))
}

/// An integer type's largest value, for [`count`].
pub(crate) trait Bounded {
    const MAX: Self;
}
impl Bounded for usize {
    const MAX: Self = usize::MAX;
}
impl Bounded for u64 {
    const MAX: Self = u64::MAX;
}
impl Bounded for u32 {
    const MAX: Self = u32::MAX;
}

/// A number of tries: an integer of at least 0.
pub(crate) fn tries<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    read(d, |got| match got {
        Got::Int(0) => Ok(0),
        got => count_of(got).map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
    })
}

/// `write_jobs`: `"auto"` or a count.
pub(crate) fn write_jobs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<WriteJobs>, D::Error> {
    read(d, |got| match got {
        Got::Str(s) if s == "auto" => Ok(WriteJobs::Auto),
        got @ Got::Str(_) => count_of(got).map(|c| WriteJobs::Fixed(c as usize)).map_err(|e| {
            let message = e.split("\n  hint: ").next().unwrap_or_default().to_string();
            with_hint(message, format!("{KEY} is \"auto\" or a number without quotes, e.g. {KEY} = 8"))
        }),
        got => count_of(got).map(|c| WriteJobs::Fixed(c as usize)),
    })
}

const DURATION_HINT: &str = "write a number and a unit (ms, s, m, h or d): \"500ms\", \"5s\", \"10m\", \"24h\", \"1d\"";

/// A duration in the one grammar of treesync ([`treesync_core::duration::parse`]).
fn duration_of(got: Got) -> Result<Duration, String> {
    match got {
        Got::Str(s) => treesync_core::duration::parse(&s)
            .map_err(|why| with_hint(format!("bad duration {s:?} for {KEY} in {SECTION}: {why}"), DURATION_HINT)),
        got @ Got::Int(i) => Err(with_hint(got.wrong("a duration string"), format!("give the unit: {KEY} = \"{i}s\""))),
        got => Err(with_hint(got.wrong("a duration string"), DURATION_HINT)),
    }
}

/// A [`duration_of`] longer than 0; `hint` says what to write instead of 0.
fn positive_of(got: Got, hint: &str) -> Result<Duration, String> {
    match duration_of(got)? {
        d if d.is_zero() => Err(with_hint(format!("{KEY} in {SECTION} must be longer than 0"), hint)),
        d => Ok(d),
    }
}

/// A duration, 0 allowed (`grace`, `hook_timeout`).
pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    read(d, duration_of)
}

/// `interval`: a duration longer than 0.
pub(crate) fn interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    read(d, |got| positive_of(got, "watch looks at the ref this often; e.g. interval = \"5s\""))
}

/// `filter_timeout`: a duration longer than 0.
pub(crate) fn filter_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    read(d, |got| positive_of(got, "a filter driver gets this long per file; e.g. filter_timeout = \"30m\""))
}

/// `verify_every`: a duration longer than 0, or `"off"` (0: turns off one of `[defaults]`).
pub(crate) fn verify_every<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    read(d, |got| match got {
        Got::Str(s) if s == "off" => Ok(Duration::ZERO),
        got => positive_of(got, "to turn off a verify_every of [defaults], write verify_every = \"off\""),
    })
}

/// A size in bytes: `"1TiB"`, `"500 GiB"`, `"2TB"`, or a number of bytes.
pub(crate) fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    read(d, |got| {
        let hint = "write a number and a unit (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB), e.g. \"500GiB\" or \"2TiB\"";
        match got {
            Got::Str(s) => {
                parse_size(&s).map_err(|why| with_hint(format!("bad size {s:?} for {KEY} in {SECTION}: {why}"), hint))
            }
            Got::Int(n) if n >= 1 => Ok(n as u64),
            Got::Int(n) => Err(format!("{KEY} in {SECTION} must be at least 1 byte, not {n}")),
            Got::Big(n) if n.starts_with('-') => Err(format!("{KEY} in {SECTION} must be at least 1 byte, not {n}")),
            Got::Big(n) => Err(with_hint(format!("{KEY} in {SECTION} is too large: {n} bytes"), hint)),
            got => Err(with_hint(got.wrong("a size (\"2TiB\") or a number of bytes"), hint)),
        }
    })
}

/// The `switch` key: `auto`, `symlink` or `exchange`.
pub(crate) fn switch<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SwitchMode>, D::Error> {
    read(d, |got| match got {
        Got::Str(s) if s == "auto" => Ok(SwitchMode::Auto),
        Got::Str(s) if s == "symlink" => Ok(SwitchMode::Symlink),
        Got::Str(s) if s == "exchange" => Ok(SwitchMode::Exchange),
        Got::Str(s) => Err(with_hint(
            format!("unknown switch mode {s:?} for {KEY} in {SECTION}{}", expected(&["auto", "symlink", "exchange"])),
            "exchange swaps two directories (local disks), symlink replaces a link (any filesystem), auto picks",
        )),
        got => Err(got.wrong("a string (\"auto\", \"symlink\" or \"exchange\")")),
    })
}

/// The `lfs` key: `content` or `pointers`.
pub(crate) fn lfs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<treesync_core::lfs::LfsMode>, D::Error> {
    read(d, |got| match got {
        Got::Str(s) => s.parse().map_err(|_| {
            let modes = expected(&["content", "pointers"]);
            with_hint(
                format!("unknown LFS mode {s:?} for {KEY} in {SECTION}{modes}"),
                "content writes the files' content from the repository's LFS store; \
                 pointers writes the pointer files as git stores them",
            )
        }),
        got => Err(got.wrong("a string (\"content\" or \"pointers\")")),
    })
}

/// The `backend` key: the names `--backend` takes.
pub(crate) fn backend<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BackendKind>, D::Error> {
    read(d, |got| match got {
        Got::Str(s) => s.parse().map_err(|_| {
            let names: Vec<&str> = BackendKind::LISTED.iter().map(|b| b.name()).collect();
            let message = format!("unknown backend {s:?} in {SECTION}{}", expected(&names));
            match did_you_mean(&s.to_ascii_lowercase(), &names) {
                Some(hint) => with_hint(message, hint),
                None => message,
            }
        }),
        got => Err(got.wrong("a string")),
    })
}
