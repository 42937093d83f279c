//! `treesync.toml`: many mirrors in one file, for `sync --all`, `sync NAME`, `watch --all` and
//! `status --all`.
//!
//! ```toml
//! [defaults]            # optional: any key of a mirror except repo, ref and target
//! backend = "auto"
//! interval = "5s"
//!
//! [mirror.site]
//! repo = "/srv/git/site.git"
//! ref = "main"
//! target = "/mnt/nas/site"
//! ```
//!
//! serde reads the file into typed tables (`#[serde(deny_unknown_fields)]`, values in
//! [`toml::Spanned`] for their positions); each value type says in its own `Deserialize` what
//! it accepts. Errors name the line and column they are about (`treesync.toml:7:1: unknown key
//! "tagret" in [mirror.site] …`) and, where it helps, carry a hint on a second line. Targets go
//! through the library's front door ([`treesync::Target::parse`], [`treesync::check`]), so a
//! mirror accepts exactly what `--target` and `--backend` accept. The format is documented in
//! docs/config.md.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The file's name in `$XDG_CONFIG_HOME/treesync/`.
pub const FILE_NAME: &str = "treesync.toml";

/// The watch interval of a mirror that sets none (the same as `watch --interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// Every mirror, in the order of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it was read from, as given.
    pub path: PathBuf,
    pub mirrors: Vec<Mirror>,
}

/// One `[mirror.NAME]` table with the `[defaults]` applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Mirror {
    /// The `NAME` of `[mirror.NAME]`: `[A-Za-z0-9._-]+`.
    pub name: String,
    /// The repository, absolute when the file gave a relative path (resolved against the file's
    /// directory), or a URL as written (`git://…`, `https://…`, `host:path`).
    pub repo: PathBuf,
    /// `cache_dir`: where a URL `repo` is mirrored (`--cache-dir`).
    pub cache_dir: Option<PathBuf>,
    /// The `ref` key: a branch, tag, commit id or revision expression, or `REV:PATH`.
    pub rev: String,
    /// The `path` key: sync only this directory of the tree, as the target's root (`--path`).
    pub path: Option<String>,
    /// A directory (resolved against the file's directory when relative) or a URL (nfs://,
    /// s3://, file://, memory://): whatever `--target` takes.
    pub target: String,
    pub backend: BackendName,
    pub jobs: Option<usize>,
    pub lookup_jobs: Option<usize>,
    pub write_jobs: Option<WriteJobs>,
    pub fsync: bool,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub allow_http: bool,
    /// How often `watch` looks at the ref ([`DEFAULT_INTERVAL`] unless set).
    pub interval: Duration,
    /// How often `watch` runs a verify (never unless set).
    pub verify_every: Option<Duration>,
    /// With `verify_every`: check one slice of N every `verify_every / N` (`--verify-slices`).
    pub verify_slices: Option<u32>,
    /// With `verify_every`: repair the drift verify finds.
    pub repair: bool,
    /// `watch` polls the ref every `interval` instead of being woken by changes (`--poll`).
    pub poll: bool,
    /// The most ops one plan may hold (`--max-entries`; the core's default unless set).
    pub max_entries: Option<u64>,
    /// The most bytes of content one plan may write (`--max-bytes`; the core's default unless set).
    pub max_bytes: Option<u64>,
    /// How long a filter driver may take on one file (`--filter-timeout`; the core's default
    /// unless set).
    pub filter_timeout: Option<Duration>,
    /// Fill gitlinks with their submodules' trees (`--recurse-submodules`).
    pub recurse_submodules: bool,
    /// Write only paths these patterns select (`--include`).
    pub include: Vec<String>,
    /// Leave out paths these patterns select (`--exclude`).
    pub exclude: Vec<String>,
    /// `git archive` semantics (`--export`).
    pub export: bool,
    /// What Git LFS pointer files are written as (`--lfs`); the core's default unless set.
    pub lfs: Option<treesync_core::lfs::LfsMode>,
    /// `atomic = true`: keep the target in generations (`--atomic`); `false`: stop
    /// (`--no-atomic`); unset: whatever the target is.
    pub atomic: Option<bool>,
    /// How many generations to keep (`--keep`).
    pub keep: Option<u64>,
    /// The grace period of retired generations (`--grace`).
    pub grace: Option<Duration>,
    /// The most generations a target may have (`--max-generations`).
    pub max_generations: Option<u64>,
    /// How the target is switched (`--switch`; `auto` is unset).
    pub switch: Option<treesync_core::generation::Switch>,
    /// Where `watch` serves metrics and /healthz (`metrics_addr` of `[defaults]`, the same for
    /// every mirror: `--metrics-addr`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// A command run by `sh -c` after each sync that changed the target (`--exec-after`).
    pub exec_after: Option<String>,
    /// A URL the sync's JSON outcome is POSTed to after each sync that changed the target (`--webhook`).
    pub webhook: Option<String>,
}

/// The `backend` key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendName {
    #[default]
    Auto,
    Local,
    Nfs,
    S3,
}

impl From<BackendName> for treesync::BackendKind {
    fn from(b: BackendName) -> Self {
        match b {
            BackendName::Auto => treesync::BackendKind::Auto,
            BackendName::Local => treesync::BackendKind::Local,
            BackendName::Nfs => treesync::BackendKind::Nfs,
            BackendName::S3 => treesync::BackendKind::S3,
        }
    }
}

impl BackendName {
    pub const ALL: [BackendName; 4] = [BackendName::Auto, BackendName::Local, BackendName::Nfs, BackendName::S3];

    pub fn as_str(self) -> &'static str {
        match self {
            BackendName::Auto => "auto",
            BackendName::Local => "local",
            BackendName::Nfs => "nfs",
            BackendName::S3 => "s3",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `write_jobs` key: `"auto"` or a number (the library's own type).
pub use treesync::WriteJobs;

/// What is wrong with the config file, and where: `treesync.toml:7:1: message`, then
/// `  hint: …` on a second line when there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// `path:line:col: `, `path: `, or nothing when the message names the file itself.
    origin: Option<String>,
    location: Option<(usize, usize)>,
    message: String,
    hint: Option<String>,
}

impl ConfigError {
    fn new(origin: Option<String>, message: impl Into<String>) -> Self {
        ConfigError { origin, location: None, message: message.into(), hint: None }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    fn maybe_hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }

    /// The line and column (both from 1) the error is about, if it is about a place in the file.
    #[cfg_attr(not(test), allow(dead_code))] // for library-style callers and the tests
    pub fn location(&self) -> Option<(usize, usize)> {
        self.location
    }

    /// The message without the `path:line:col: ` prefix and without the hint.
    #[cfg_attr(not(test), allow(dead_code))] // for library-style callers and the tests
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What to do about it, if there is something to say.
    #[cfg_attr(not(test), allow(dead_code))] // for library-style callers and the tests
    pub fn hint_text(&self) -> Option<&str> {
        self.hint.as_deref()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// `$XDG_CONFIG_HOME/treesync/treesync.toml`, else `$HOME/.config/treesync/treesync.toml`; `None`
/// when neither variable is set (to an absolute path).
pub fn default_path() -> Option<PathBuf> {
    default_path_from(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

fn default_path_from(xdg_config_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    // The XDG base directory spec: a relative $XDG_CONFIG_HOME is invalid and is ignored.
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    let dir = absolute(xdg_config_home).or_else(|| absolute(home).map(|h| h.join(".config")))?;
    Some(dir.join("treesync").join(FILE_NAME))
}

/// The largest config file read: a few hundred mirrors take some 100 KiB.
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// Read and validate the file at `path`: a regular file of at most [`MAX_FILE_SIZE`] bytes.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = read_bounded(path)?;
    parse(&text, path)
}

/// The text of the config file at `path`, refused unless it is a regular file (a device such
/// as /dev/zero never ends, a pipe may never open) of at most [`MAX_FILE_SIZE`] bytes.
fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let cannot = |e: std::io::Error| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => Some("create it or pass --config PATH".to_string()),
            std::io::ErrorKind::PermissionDenied => Some("check the file's permissions".to_string()),
            _ => None,
        };
        ConfigError::new(None, format!("cannot read {}: {}", path.display(), io_message(&e))).maybe_hint(hint)
    };
    // Without blocking: opening a FIFO for reading waits for a writer.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_fifo() {
            "a pipe (FIFO)"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(ConfigError::new(
            None,
            format!("cannot read {}: it is {what}, not a regular file", path.display()),
        )
        .hint("--config names a TOML file (see docs/config.md)"));
    }
    let too_large = || {
        ConfigError::new(
            None,
            format!(
                "cannot read {}: it is larger than 1 MiB ({MAX_FILE_SIZE} bytes), too large for a config file",
                path.display()
            ),
        )
        .hint("--config names a TOML file of mirrors (see docs/config.md); is it the right file?")
    };
    if meta.len() > MAX_FILE_SIZE {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or_default());
    // One byte more than allowed tells a file that grew since it was looked at.
    file.take(MAX_FILE_SIZE + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        ConfigError::new(None, format!("cannot read {}: it is not UTF-8 text (at byte {at})", path.display()))
            .hint("a config file is TOML, which is UTF-8 text")
    })
}

/// `No such file or directory`, without the ` (os error 2)` that std appends.
fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

// ---- The file as serde reads it -------------------------------------------------------------

/// The whole file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    defaults: Option<Spanned<Defaults>>,
    mirror: Option<Spanned<BTreeMap<Spanned<String>, Spanned<MirrorTable>>>>,
}

/// Declares `[defaults]` and `[mirror.NAME]` with the settings they share, once.
macro_rules! tables {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// `[defaults]`: the settings, and those of the whole process.
        #[derive(Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        struct Defaults {
            metrics_addr: Option<Spanned<MetricsAddr>>,
            $($field: Option<Spanned<$ty>>,)*
        }

        /// `[mirror.NAME]`: repo, ref and target, and the settings.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct MirrorTable {
            repo: Option<Spanned<Text>>,
            #[serde(rename = "ref")]
            rev: Option<Spanned<Text>>,
            target: Option<Spanned<Text>>,
            path: Option<Spanned<Text>>,
            $($field: Option<Spanned<$ty>>,)*
        }

        /// A mirror's settings: its own, else those of `[defaults]`.
        struct Settings {
            $($field: Option<Setting<$ty>>,)*
        }

        impl Settings {
            fn merge(mirror: &MirrorTable, defaults: &Defaults, cx: &Cx<'_>) -> Settings {
                Settings {
                    $($field: Setting::pick(&mirror.$field, &defaults.$field, cx),)*
                }
            }
        }

        /// The settings' names, in the order of the docs.
        const SETTING_KEYS: &[&str] = &[$(tables!(@name $field)),*];
    };
    (@name $field:ident) => { stringify!($field) };
}

tables! {
    backend: BackendName,
    interval: Interval,
    verify_every: VerifyEvery,
    verify_slices: Count,
    jobs: Count,
    lookup_jobs: Count,
    write_jobs: WriteJobsValue,
    fsync: Flag,
    endpoint: Text,
    region: Text,
    allow_http: Flag,
    repair: Flag,
    poll: Flag,
    max_entries: Count,
    max_bytes: Size,
    filter_timeout: FilterTimeout,
    recurse_submodules: Flag,
    include: Patterns,
    exclude: Patterns,
    export: Flag,
    lfs: Lfs,
    atomic: Flag,
    keep: Count,
    grace: Grace,
    max_generations: Count,
    switch: SwitchValue,
    cache_dir: Text,
    exec_after: Text,
    webhook: Text,
}

const TOP_KEYS: &[&str] = &["defaults", "mirror"];
const REQUIRED_KEYS: &[&str] = &["repo", "ref", "target"];
/// Keys of a mirror that `[defaults]` does not take, besides the required ones.
const MIRROR_ONLY_KEYS: &[&str] = &["path"];
/// Keys of `[defaults]` only: settings of the whole `watch --all` process.
const DEFAULTS_ONLY_KEYS: &[&str] = &["metrics_addr"];

/// Every key of a `[mirror.NAME]` table: the required ones, the mirror's own, then the settings.
fn mirror_keys() -> Vec<&'static str> {
    [REQUIRED_KEYS, MIRROR_ONLY_KEYS, SETTING_KEYS].concat()
}

/// A setting with where it was written: `inherited` from `[defaults]` at `line`, or not.
#[derive(Clone)]
struct Setting<T> {
    value: T,
    span: Range<usize>,
    /// The line of `[defaults]`' value, when the mirror did not set it itself.
    inherited: Option<usize>,
}

impl<T> Setting<T> {
    /// ` from [defaults], line N` when the mirror took it from `[defaults]`, else nothing.
    fn inherited_note(&self) -> String {
        self.inherited.map(|line| format!(" from [defaults], line {line}")).unwrap_or_default()
    }
}

impl<T: Clone> Setting<T> {
    fn pick(own: &Option<Spanned<T>>, defaults: &Option<Spanned<T>>, cx: &Cx<'_>) -> Option<Setting<T>> {
        match (own, defaults) {
            (Some(v), _) => Some(Setting { value: v.get_ref().clone(), span: v.span(), inherited: None }),
            (None, Some(v)) => Some(Setting {
                value: v.get_ref().clone(),
                span: v.span(),
                inherited: Some(cx.position(v.span().start).0),
            }),
            (None, None) => None,
        }
    }
}

// ---- Values: each type says what it accepts ---------------------------------------------------

// Messages name the key and the table through these markers; `Cx::serde_error` fills them in
// (a value's `Deserialize` knows neither).
const KEY: &str = "\u{0}key\u{0}";
const SECTION: &str = "\u{0}section\u{0}";
const HINT: &str = "\u{0}hint\u{0}";

/// What a value is, whatever its type: for messages that say what was given.
enum Got {
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
    fn describe(&self) -> String {
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
    fn wrong(&self, expected: &str) -> String {
        format!("{KEY} in {SECTION} must be {expected}, not {}", self.describe())
    }
}

/// `message` with a hint, for [`Cx::serde_error`] to split.
fn with_hint(message: String, hint: impl fmt::Display) -> String {
    format!("{message}{HINT}{hint}")
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

/// Implements `Deserialize` for a value type by a function from [`Got`].
macro_rules! from_got {
    ($ty:ty, $f:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let got = Got::deserialize(d)?;
                let f: fn(Got) -> Result<$ty, String> = $f;
                f(got).map_err(de::Error::custom)
            }
        }
    };
}

/// gitignore-style patterns (`include`, `exclude`): one string or an array of strings.
#[derive(Clone, Debug)]
struct Patterns(Vec<String>);

impl<'de> Deserialize<'de> for Patterns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            Many(Vec<String>),
        }
        match Raw::deserialize(d) {
            Ok(Raw::One(p)) => Ok(Patterns(vec![p])),
            Ok(Raw::Many(ps)) => Ok(Patterns(ps)),
            Err(_) => Err(de::Error::custom(with_hint(
                format!("{KEY} in {SECTION} must be a pattern or an array of patterns"),
                format!("e.g. {KEY} = [\"docs/\", \"*.md\"] (gitignore-style patterns, see docs/select.md)"),
            ))),
        }
    }
}

/// A non-empty string.
#[derive(Clone, Debug)]
struct Text(String);
from_got!(Text, |got| match got {
    Got::Str(s) if s.trim().is_empty() => Err(format!("{KEY} in {SECTION} must not be empty")),
    Got::Str(s) => Ok(Text(s)),
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
});

/// `true` or `false`.
#[derive(Clone, Copy, Debug)]
struct Flag(bool);
from_got!(Flag, |got| match got {
    Got::Bool(b) => Ok(Flag(b)),
    Got::Str(s) if s == "true" || s == "false" => {
        let unquoted = s.clone();
        Err(quoted(s, "true or false", &unquoted))
    }
    got => Err(got.wrong("true or false")),
});

/// A number of operations or entries: an integer of at least 1.
#[derive(Clone, Copy, Debug)]
struct Count(u64);
from_got!(Count, count);

fn count(got: Got) -> Result<Count, String> {
    let too_large =
        |n: &dyn fmt::Display| format!("{KEY} in {SECTION} must be a number from 1 to {}, not {n}", usize::MAX);
    match got {
        Got::Int(n) if n < 1 => Err(format!("{KEY} in {SECTION} must be at least 1, not {n}")),
        Got::Int(n) => usize::try_from(n).map(|_| Count(n as u64)).map_err(|_| too_large(&n)),
        Got::Big(n) if n.starts_with('-') => Err(format!("{KEY} in {SECTION} must be at least 1, not {n}")),
        Got::Big(n) => Err(too_large(&n)),
        Got::Str(s) if s.trim().parse::<usize>().is_ok() => {
            let n = s.trim().to_string();
            Err(quoted(s, "a number", &n))
        }
        got => Err(got.wrong("a number (1, 8, 32, …)")),
    }
}

impl Count {
    fn usize(self) -> usize {
        usize::try_from(self.0).expect("checked when read")
    }
}

/// `write_jobs`: `"auto"` or a count.
#[derive(Clone, Copy, Debug)]
struct WriteJobsValue(WriteJobs);
from_got!(WriteJobsValue, |got| match got {
    Got::Str(s) if s == "auto" => Ok(WriteJobsValue(WriteJobs::Auto)),
    got @ Got::Str(_) => count(got).map(|c| WriteJobsValue(WriteJobs::Fixed(c.usize()))).map_err(|e| {
        let message = e.split(HINT).next().unwrap_or_default().to_string();
        with_hint(message, format!("{KEY} is \"auto\" or a number without quotes, e.g. {KEY} = 8"))
    }),
    got => count(got).map(|c| WriteJobsValue(WriteJobs::Fixed(c.usize()))),
});

const DURATION_HINT: &str = "write a number and a unit (ms, s, m, h or d): \"500ms\", \"5s\", \"10m\", \"24h\", \"1d\"";

/// A duration in the one grammar of treesync ([`treesync_core::duration::parse`]).
fn duration(got: Got) -> Result<Duration, String> {
    match got {
        Got::Str(s) => treesync_core::duration::parse(&s)
            .map_err(|why| with_hint(format!("bad duration {s:?} for {KEY} in {SECTION}: {why}"), DURATION_HINT)),
        got @ Got::Int(i) => Err(with_hint(got.wrong("a duration string"), format!("give the unit: {KEY} = \"{i}s\""))),
        got => Err(with_hint(got.wrong("a duration string"), DURATION_HINT)),
    }
}

/// A [`duration`] longer than 0; `hint` says what to write instead of 0.
fn positive_duration(got: Got, hint: &str) -> Result<Duration, String> {
    match duration(got)? {
        d if d.is_zero() => Err(with_hint(format!("{KEY} in {SECTION} must be longer than 0"), hint)),
        d => Ok(d),
    }
}

/// `interval`: a duration longer than 0.
#[derive(Clone, Copy, Debug)]
struct Interval(Duration);
from_got!(Interval, |got| positive_duration(got, "watch looks at the ref this often; e.g. interval = \"5s\"")
    .map(Interval));

/// `metrics_addr`: where `watch` serves its metrics, as `--metrics-addr` takes it.
#[derive(Clone, Copy, Debug)]
struct MetricsAddr(std::net::SocketAddr);
from_got!(MetricsAddr, |got| match got {
    Got::Str(s) => crate::monitor::http::parse_addr(&s)
        .map(MetricsAddr)
        .map_err(|why| format!("bad address for {KEY} in {SECTION}: {why}")),
    Got::Int(port) if (1..=i64::from(u16::MAX)).contains(&port) => crate::monitor::http::parse_addr(&port.to_string())
        .map(MetricsAddr)
        .map_err(|why| format!("bad address for {KEY} in {SECTION}: {why}")),
    got => Err(with_hint(got.wrong("a string"), "write e.g. metrics_addr = \"127.0.0.1:9273\"")),
});

/// `verify_every`: a duration longer than 0, or `"off"` (which turns off one of `[defaults]`).
#[derive(Clone, Copy, Debug)]
struct VerifyEvery(Option<Duration>);
from_got!(VerifyEvery, |got| match got {
    Got::Str(s) if s == "off" => Ok(VerifyEvery(None)),
    got => positive_duration(got, "to turn off a verify_every of [defaults], write verify_every = \"off\"")
        .map(|d| VerifyEvery(Some(d))),
});

/// A size in bytes: `"1TiB"`, `"500 GiB"`, `"2TB"`, or a number of bytes.
#[derive(Clone, Copy, Debug)]
struct Size(u64);
from_got!(Size, |got| {
    let hint = "write a number and a unit (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB), e.g. \"500GiB\" or \"2TiB\"";
    match got {
        Got::Str(s) => parse_size(&s)
            .map(Size)
            .map_err(|why| with_hint(format!("bad size {s:?} for {KEY} in {SECTION}: {why}"), hint)),
        Got::Int(n) if n >= 1 => Ok(Size(n as u64)),
        Got::Int(n) => Err(format!("{KEY} in {SECTION} must be at least 1 byte, not {n}")),
        Got::Big(n) if n.starts_with('-') => Err(format!("{KEY} in {SECTION} must be at least 1 byte, not {n}")),
        Got::Big(n) => Err(with_hint(format!("{KEY} in {SECTION} is too large: {n} bytes"), hint)),
        got => Err(with_hint(got.wrong("a size (\"2TiB\") or a number of bytes"), hint)),
    }
});

/// `filter_timeout`: a duration longer than 0.
#[derive(Clone, Copy, Debug)]
struct FilterTimeout(Duration);
from_got!(FilterTimeout, |got| positive_duration(
    got,
    "a filter driver gets this long per file; e.g. filter_timeout = \"30m\""
)
.map(FilterTimeout));

/// `grace`: a duration, 0 allowed.
#[derive(Clone, Copy, Debug)]
struct Grace(Duration);
from_got!(Grace, |got| duration(got).map(Grace));

/// The `switch` key: `auto`, `symlink` or `exchange`.
#[derive(Clone, Copy, Debug)]
struct SwitchValue(Option<treesync_core::generation::Switch>);
from_got!(SwitchValue, |got| match got {
    Got::Str(s) if s == "auto" => Ok(SwitchValue(None)),
    Got::Str(s) if s == "symlink" => Ok(SwitchValue(Some(treesync_core::generation::Switch::Symlink))),
    Got::Str(s) if s == "exchange" => Ok(SwitchValue(Some(treesync_core::generation::Switch::Exchange))),
    Got::Str(s) => Err(with_hint(
        format!("unknown switch mode {s:?} for {KEY} in {SECTION}{}", expected(&["auto", "symlink", "exchange"])),
        "exchange swaps two directories (local disks), symlink replaces a link (any filesystem), auto picks",
    )),
    got => Err(got.wrong("a string (\"auto\", \"symlink\" or \"exchange\")")),
});

/// The `lfs` key: `content` or `pointers`.
#[derive(Clone, Copy, Debug)]
struct Lfs(treesync_core::lfs::LfsMode);
const LFS_HINT: &str = "content writes the files' content from the repository's LFS store; \
                        pointers writes the pointer files as git stores them";
from_got!(Lfs, |got| match got {
    Got::Str(s) => s.parse().map(Lfs).map_err(|_| {
        let modes = expected(&["content", "pointers"]);
        with_hint(format!("unknown LFS mode {s:?} for {KEY} in {SECTION}{modes}"), LFS_HINT)
    }),
    got => Err(got.wrong("a string (\"content\" or \"pointers\")")),
});

from_got!(BackendName, |got| match got {
    Got::Str(s) => BackendName::from_name(&s).ok_or_else(|| {
        let names: Vec<&str> = BackendName::ALL.iter().map(|b| b.as_str()).collect();
        let message = format!("unknown backend {s:?} in {SECTION}{}", expected(&names));
        match did_you_mean(&s.to_ascii_lowercase(), &names) {
            Some(hint) => with_hint(message, hint),
            None => message,
        }
    }),
    got => Err(got.wrong("a string")),
});

// ---- From the typed file to mirrors -------------------------------------------------------------

/// Validate `text`, the contents of the file at `path` (used for messages and to resolve relative paths).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let cx = Cx { text, path, base: base_dir(path) };
    let doc = DeTable::parse(text).map_err(|e| cx.syntax_error(&e))?;
    let file = File::deserialize(toml::de::Deserializer::from(doc.clone())).map_err(|e| cx.serde_error(&e, &doc))?;

    let no_mirrors_hint = "add a [mirror.NAME] table with repo, ref and target (see docs/config.md)";
    let Some(table) = file.mirror else {
        return Err(ConfigError::new(Some(path.display().to_string()), "no mirrors defined").hint(no_mirrors_hint));
    };
    if table.get_ref().is_empty() {
        return Err(cx.err(table.span(), "no mirrors defined: [mirror] is empty").hint(no_mirrors_hint));
    }
    let defaults = file.defaults.map(Spanned::into_inner).unwrap_or_default();
    // toml gives the mirrors sorted by name; keep the order of the file.
    let mut entries: Vec<_> = table.into_inner().into_iter().collect();
    entries.sort_by_key(|(name, _)| name.span().start);

    let mut mirrors: Vec<Mirror> = Vec::new();
    // The target of each mirror so far, normalized, with the mirror's index and the target's line.
    let mut targets: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (key, value) in entries {
        let name = key.get_ref().as_str();
        check_name(&cx, &key)?;
        let section = format!("[mirror.{name}]");
        let table_span = value.span();
        let table = value.into_inner();
        let settings = Settings::merge(&table, &defaults, &cx);
        let (Some(repo), Some(rev), Some(target)) = (&table.repo, &table.rev, &table.target) else {
            let missing: Vec<String> =
                [("repo", table.repo.is_none()), ("ref", table.rev.is_none()), ("target", table.target.is_none())]
                    .into_iter()
                    .filter(|(_, missing)| *missing)
                    .map(|(k, _)| format!("{k:?}"))
                    .collect();
            let s = if missing.len() == 1 { "" } else { "s" };
            return Err(cx
                .err(table_span, format!("missing key{s} {} in {section}", missing.join(", ")))
                .hint("every mirror needs repo (the git repository), ref (what to sync) and target (where to)"));
        };

        // A URL (git://, https://, host:path) is fetched into the cache, not resolved as a path.
        let repo = if treesync_remote::is_url(&repo.get_ref().0) {
            PathBuf::from(&repo.get_ref().0)
        } else {
            cx.resolve(&repo.get_ref().0, repo.span(), &section, "repo")?
        };
        // `path` composes with `ref` as REV:PATH, so `ref` must not name a directory already.
        let subtree_path = match &table.path {
            Some(p) => {
                let written = &p.get_ref().0;
                if let Some((base, inner)) = treesync_core::source::split_subtree(&rev.get_ref().0) {
                    return Err(cx
                        .err(
                            p.span(),
                            format!(
                                "path {written:?} of {section} and its ref {:?}, which names the directory {inner:?} already: give the directory once",
                                rev.get_ref().0
                            ),
                        )
                        .hint(format!("ref = \"{base}\" with path = {written:?}, or ref = \"{base}:{written}\" alone")));
                }
                Some(written.clone())
            }
            None => None,
        };
        let target_span = target.span();
        let written = target.get_ref().0.as_str();
        // A target is what `--target` takes: the library parses it and checks it against the backend.
        let target = if written.contains("://") {
            written.to_string()
        } else {
            let resolved = cx.resolve(written, target_span.clone(), &section, "target")?;
            resolved.into_os_string().into_string().map_err(|p| {
                cx.err(target_span.clone(), format!("target {} is not valid UTF-8", PathBuf::from(p).display()))
            })?
        };
        let backend = settings.backend.as_ref().map(|b| b.value).unwrap_or_default();
        let parsed = treesync::Target::parse(&target).map_err(treesync::OpenError::from);
        // Only a directory with backend auto would look at the mount table: nothing to check.
        let checked = parsed.and_then(|t| match (&t, backend) {
            (treesync::Target::Dir(_), BackendName::Auto) => Ok(t),
            _ => treesync::check(&t, backend.into()).map(|_| t),
        });
        let parsed = checked.map_err(|e| {
            cx.library_error(target_span.clone(), &e, |message| match &settings.backend {
                Some(b) if b.inherited.is_some() && message.starts_with("backend ") => {
                    format!(" (backend = \"{}\"{})", b.value, b.inherited_note())
                }
                _ => String::new(),
            })
        })?;

        // On nfs, jobs is the write budget: a different fixed write_jobs is refused as the
        // library refuses it, but here with the line.
        let on_nfs = matches!(parsed, treesync::Target::Nfs { .. }) || backend == BackendName::Nfs;
        if on_nfs
            && let (Some(jobs), Some(write_jobs)) = (&settings.jobs, &settings.write_jobs)
            && let WriteJobs::Fixed(n) = write_jobs.value.0
            && n != jobs.value.usize()
        {
            let e = treesync::OpenError::Budgets { jobs: jobs.value.usize(), write_jobs: n };
            let notes: Vec<String> = [("jobs", jobs.inherited_note()), ("write_jobs", write_jobs.inherited_note())]
                .into_iter()
                .filter(|(_, from)| !from.is_empty())
                .map(|(k, from)| format!("{k}{from}"))
                .collect();
            let note = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
            return Err(cx.library_error(write_jobs.span.clone(), &e, |_| note));
        }

        let allow_http = settings.allow_http.as_ref().is_some_and(|f| f.value.0);
        if let Some(endpoint) = &settings.endpoint
            && parsed.is_url()
            && endpoint.value.0.starts_with("http://")
            && !allow_http
        {
            return Err(cx
                .err(
                    endpoint.span.clone(),
                    format!(
                        "endpoint {:?} of {section} is plain HTTP, which is refused unless allow_http = true",
                        endpoint.value.0
                    ),
                )
                .hint(format!("add allow_http = true to {section} (meant for local test servers), or use https://")));
        }

        let target_line = cx.position(target_span.start).0;
        if let Some((other, line)) = targets.insert(normalize_target(&target), (mirrors.len(), target_line)) {
            return Err(cx
                .err(
                    target_span,
                    format!(
                        "{section} and [mirror.{}] (line {line}) have the same target {target:?}",
                        mirrors[other].name
                    ),
                )
                .hint(
                    "two mirrors writing one target would undo each other's syncs; give each mirror its own target",
                ));
        }

        let value = |s: &Option<Setting<Text>>| s.as_ref().map(|s| s.value.0.clone());
        mirrors.push(Mirror {
            name: name.to_string(),
            repo,
            rev: rev.get_ref().0.clone(),
            path: subtree_path,
            target,
            backend,
            jobs: settings.jobs.as_ref().map(|c| c.value.usize()),
            lookup_jobs: settings.lookup_jobs.as_ref().map(|c| c.value.usize()),
            write_jobs: settings.write_jobs.as_ref().map(|w| w.value.0),
            fsync: settings.fsync.as_ref().is_some_and(|f| f.value.0),
            endpoint: value(&settings.endpoint),
            region: value(&settings.region),
            allow_http,
            interval: settings.interval.as_ref().map_or(DEFAULT_INTERVAL, |i| i.value.0),
            verify_every: settings.verify_every.as_ref().and_then(|v| v.value.0),
            verify_slices: settings.verify_slices.as_ref().map(|c| u32::try_from(c.value.0).unwrap_or(u32::MAX)),
            repair: settings.repair.as_ref().is_some_and(|f| f.value.0),
            poll: settings.poll.as_ref().is_some_and(|f| f.value.0),
            max_entries: settings.max_entries.as_ref().map(|c| c.value.0),
            max_bytes: settings.max_bytes.as_ref().map(|s| s.value.0),
            filter_timeout: settings.filter_timeout.as_ref().map(|t| t.value.0),
            recurse_submodules: settings.recurse_submodules.as_ref().is_some_and(|f| f.value.0),
            include: settings.include.as_ref().map(|p| p.value.0.clone()).unwrap_or_default(),
            exclude: settings.exclude.as_ref().map(|p| p.value.0.clone()).unwrap_or_default(),
            export: settings.export.as_ref().is_some_and(|f| f.value.0),
            lfs: settings.lfs.as_ref().map(|l| l.value.0),
            atomic: settings.atomic.as_ref().map(|f| f.value.0),
            keep: settings.keep.as_ref().map(|c| c.value.0),
            grace: settings.grace.as_ref().map(|g| g.value.0),
            max_generations: settings.max_generations.as_ref().map(|c| c.value.0),
            switch: settings.switch.as_ref().and_then(|s| s.value.0),
            metrics_addr: defaults.metrics_addr.as_ref().map(|a| a.get_ref().0),
            cache_dir: match &settings.cache_dir {
                Some(dir) => Some(cx.resolve(&dir.value.0, dir.span.clone(), &section, "cache_dir")?),
                None => None,
            },
            exec_after: value(&settings.exec_after),
            webhook: value(&settings.webhook),
        });
    }
    Ok(Config { path: path.to_path_buf(), mirrors })
}

impl Config {
    /// The mirror called `name`.
    pub fn get(&self, name: &str) -> Result<&Mirror, ConfigError> {
        if let Some(m) = self.mirrors.iter().find(|m| m.name == name) {
            return Ok(m);
        }
        let names: Vec<&str> = self.mirrors.iter().map(|m| m.name.as_str()).collect();
        Err(ConfigError::new(
            None,
            format!("no mirror named {name:?} in {} (mirrors: {})", self.path.display(), names.join(", ")),
        )
        .maybe_hint(did_you_mean(name, &names)))
    }

    /// The names of the mirrors, in the order of the file.
    #[cfg_attr(not(test), allow(dead_code))] // for library-style callers and the tests
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.mirrors.iter().map(|m| m.name.as_str())
    }
}

/// The file being read: its text (for line numbers), its path (for messages) and its directory.
struct Cx<'a> {
    text: &'a str,
    path: &'a Path,
    base: PathBuf,
}

/// A key of the document on the way to an error: its name, where it is, and its value.
struct Step<'d, 'i> {
    name: &'d str,
    key: Range<usize>,
    value: &'d Spanned<DeValue<'i>>,
}

impl Cx<'_> {
    /// Line and column (both from 1, the column in characters) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        (line, before[line_start..].chars().count() + 1)
    }

    fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let (line, col) = self.position(span.start);
        let mut e = ConfigError::new(Some(format!("{}:{line}:{col}", self.path.display())), message);
        e.location = Some((line, col));
        e
    }

    /// The library's error `e` (`message\n  hint: …`) about the value at `span`, with `note`
    /// (given the message) after the message.
    fn library_error(
        &self,
        span: Range<usize>,
        e: &treesync::OpenError,
        note: impl FnOnce(&str) -> String,
    ) -> ConfigError {
        let text = e.to_string();
        let (message, hint) = text.split_once("\n  hint: ").unwrap_or((&text, ""));
        let err = self.err(span, format!("{message}{}", note(message)));
        if hint.is_empty() { err } else { err.hint(hint.to_string()) }
    }

    fn syntax_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim();
        match self.text.get(span.clone()).filter(|_| message == "duplicate key") {
            Some(key) => self
                .err(span, format!("duplicate key {key:?}"))
                .hint("each key, and each [mirror.NAME], may appear only once"),
            None => self.err(span, format!("TOML syntax error: {message}")),
        }
    }

    /// The keys from the top of `doc` down to the one whose key or value holds `at` (a table's
    /// own span is only its header, so every branch is searched).
    fn path_to<'d, 'i>(&self, doc: &'d DeTable<'i>, at: usize) -> Vec<Step<'d, 'i>> {
        fn search<'d, 'i>(t: &'d DeTable<'i>, at: usize, path: &mut Vec<Step<'d, 'i>>) -> bool {
            for (k, v) in t.iter() {
                path.push(Step { name: k.get_ref().as_ref(), key: k.span(), value: v });
                if k.span().contains(&at) {
                    return true;
                }
                if let DeValue::Table(inner) = v.get_ref()
                    && search(inner, at, path)
                {
                    return true;
                }
                if v.span().contains(&at) || v.span().start == at {
                    return true;
                }
                path.pop();
            }
            false
        }
        let mut path = Vec::new();
        search(doc, at, &mut path);
        path
    }

    /// serde's error, said in the file's terms: the key and the table it is about, and a hint.
    fn serde_error(&self, e: &toml::de::Error, doc: &Spanned<DeTable<'_>>) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let steps = self.path_to(doc.get_ref(), span.start);
        let names: Vec<&str> = steps.iter().map(|s| s.name).collect();
        let section_of = |names: &[&str]| match names {
            [] => "the top level".to_string(),
            ["defaults"] => "[defaults]".to_string(),
            ["mirror", name, ..] => format!("[mirror.{name}]"),
            other => format!("[{}]", other.join(".")),
        };
        let message = e.message().trim();

        // An unknown key: serde names it; the table it is in says what is expected.
        if message.starts_with("unknown field") && !steps.is_empty() {
            let step = &steps[steps.len() - 1];
            let (key, parents) = (step.name, &names[..names.len() - 1]);
            let (known, place): (Vec<&str>, String) = match parents {
                [] => (TOP_KEYS.to_vec(), "at the top level".into()),
                ["defaults"] => ([SETTING_KEYS, DEFAULTS_ONLY_KEYS].concat(), "in [defaults]".into()),
                _ => (mirror_keys(), format!("in {}", section_of(parents))),
            };
            let err = self.err(step.key.clone(), format!("unknown key {key:?} {place}{}", expected(&known)));
            return match parents {
                [] if mirror_keys().contains(&key) => {
                    err.hint("the keys of a mirror go under a [mirror.NAME] header, shared settings under [defaults]")
                }
                ["defaults"] if REQUIRED_KEYS.contains(&key) => {
                    err.hint("repo, ref and target are set in each [mirror.NAME], not in [defaults]")
                }
                ["defaults"] if MIRROR_ONLY_KEYS.contains(&key) => err
                    .hint("path names a directory of a mirror's ref: set it in each [mirror.NAME], not in [defaults]"),
                ["mirror", _] if DEFAULTS_ONLY_KEYS.contains(&key) => {
                    err.hint(format!("one `watch --all` process serves every mirror: set {key} once, in [defaults]"))
                }
                ["mirror", name]
                    if step.value.get_ref().is_table()
                        && self.text.get(step.value.span()).is_some_and(|h| h.starts_with('[')) =>
                {
                    // `[mirror.v2.0]` is the key "0" of the mirror "v2".
                    err.hint(format!("a dot splits a table name; quote a name that has one: [mirror.\"{name}.{key}\"]"))
                }
                _ => err.maybe_hint(did_you_mean(key, &known)),
            };
        }

        // A table where a table belongs, but something else was written.
        if let Some(step) = steps.last()
            && !step.value.get_ref().is_table()
        {
            let got = describe(step.value.get_ref());
            match names.as_slice() {
                ["mirror"] if matches!(step.value.get_ref(), DeValue::Array(_)) => {
                    return self
                        .err(step.value.span(), "[[mirror]] is not a mirror: a mirror is a table with a name")
                        .hint("write [mirror.NAME], e.g. [mirror.site]");
                }
                ["mirror"] => {
                    return self.err(
                        step.key.clone(),
                        format!("mirror must be a table of mirrors ([mirror.NAME]), not {got}"),
                    );
                }
                ["defaults"] => {
                    return self.err(step.key.clone(), format!("defaults must be a table ([defaults]), not {got}"));
                }
                ["mirror", name] => {
                    return self.err(
                        step.key.clone(),
                        format!("[mirror.{name}] must be a table ([mirror.NAME] with repo, ref and target), not {got}"),
                    );
                }
                _ => {}
            }
        }

        // A value of a key: its type's own message, with the key and the table filled in.
        let key = names.last().copied().unwrap_or_default();
        let section = section_of(names.get(..names.len().saturating_sub(1)).unwrap_or_default());
        let fill = |s: &str| s.replace(KEY, key).replace(SECTION, &section);
        let (message, hint) = match message.split_once(HINT) {
            Some((m, h)) => (fill(m), Some(fill(h))),
            None => (fill(message), None),
        };
        self.err(span, message).maybe_hint(hint)
    }

    /// A repository or target path of the file, absolute: relative ones are taken from the file's directory.
    fn resolve(&self, s: &str, span: Range<usize>, section: &str, key: &str) -> Result<PathBuf, ConfigError> {
        if s == "~" || s.starts_with("~/") {
            return Err(self
                .err(span, format!("{key} {s:?} in {section} starts with ~, which is not expanded"))
                .hint("write the full path, e.g. /home/USER/…; relative paths start at the config file's directory"));
        }
        Ok(normalize(&self.base.join(s)))
    }
}

/// `[mirror.NAME]`: names are used on the command line (`treesync sync NAME`) and in file names.
fn check_name(cx: &Cx<'_>, key: &Spanned<String>) -> Result<(), ConfigError> {
    let name = key.get_ref().as_str();
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(valid) {
        let suggestion: String = name.chars().map(|c| if valid(c) { c } else { '-' }).collect();
        let hint = if suggestion.trim_matches('-').is_empty() {
            "name it with letters, digits, '.', '_' and '-', e.g. [mirror.site]".to_string()
        } else {
            format!("rename it, e.g. [mirror.{}]", suggestion.trim_matches('-'))
        };
        return Err(cx
            .err(key.span(), format!("bad mirror name {name:?}: use only letters, digits, '.', '_' and '-'"))
            .hint(hint));
    }
    if name == "." || name == ".." || name.starts_with('-') {
        return Err(cx
            .err(key.span(), format!("bad mirror name {name:?}: it must not be . or .. nor start with '-'"))
            .hint("names are used on the command line and in file names; start it with a letter or digit"));
    }
    Ok(())
}

/// `a string ("8")`, `an integer (8)`, `a table`, … for what was written where a table belongs.
fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("a string ({s:?})"),
        DeValue::Integer(i) => format!("an integer ({i})"),
        DeValue::Float(f) => format!("a float ({f})"),
        DeValue::Boolean(b) => format!("a boolean ({b})"),
        DeValue::Datetime(d) => format!("a date ({d})"),
        DeValue::Array(_) => "an array".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// A target as compared for duplicates: paths without `.` components and trailing slashes, URLs
/// without trailing slashes.
fn normalize_target(target: &str) -> String {
    if target.contains("://") {
        target.trim_end_matches('/').to_string()
    } else {
        normalize(Path::new(target)).to_string_lossy().into_owned()
    }
}

/// Drop `.` components (and with them trailing slashes); `..` stays, since a symlink may stand before it.
fn normalize(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

/// The file's directory, absolute (relative to the current directory when the path is relative).
fn base_dir(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new(""));
    let dir = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().map(|cwd| cwd.join(dir)).unwrap_or_else(|_| dir.to_path_buf())
    };
    normalize(&dir)
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

/// ` (expected one of: a, b, c)`.
fn expected(keys: &[&str]) -> String {
    format!(" (expected one of: {})", keys.join(", "))
}

/// `did you mean "target"?` for a near miss (a typo, or `-` for `_`).
fn did_you_mean(word: &str, candidates: &[&str]) -> Option<String> {
    let folded = word.replace('-', "_").to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&folded, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4) && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| format!("did you mean {c:?}?"))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + usize::from(ca != *cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const PATH: &str = "/etc/treesync/treesync.toml";

    fn ok(text: &str) -> Config {
        parse(text, Path::new(PATH)).unwrap_or_else(|e| panic!("expected a valid config, got:\n{e}"))
    }

    /// The full message of the error `text` gives.
    fn err(text: &str) -> String {
        match parse(text, Path::new(PATH)) {
            Ok(c) => panic!("expected an error, got {c:#?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Asserts the message starts with `PATH:line:col: ` followed by `start`, and contains each of `parts`.
    fn assert_err(text: &str, at: (usize, usize), start: &str, parts: &[&str]) {
        let e = err(text);
        let prefix = format!("{PATH}:{}:{}: {start}", at.0, at.1);
        assert!(e.starts_with(&prefix), "expected\n  {prefix}…\ngot\n  {e}");
        for p in parts {
            assert!(e.contains(p), "expected {p:?} in\n  {e}");
        }
    }

    const GOOD: &str = r#"# defaults for every mirror
[defaults]
backend = "auto"
interval = "10s"
verify_every = "24h"
jobs = 8
fsync = true

[mirror.site]
repo = "/srv/git/site.git"
ref = "main"
target = "/mnt/nas/site"
backend = "nfs"
write_jobs = "auto"
lookup_jobs = 2
verify_slices = 24

[mirror.docs]
repo = "/srv/git/docs.git"
ref = "refs/heads/release"
target = "s3://bucket/docs"
endpoint = "http://127.0.0.1:9000"
allow_http = true
region = "eu-west-1"
jobs = 32
verify_every = "off"

[mirror.alpha]
repo = "repos/alpha.git"
ref = "v2.1"
target = "./out/alpha/"
interval = "500ms"
write_jobs = 4
repair = true
"#;

    #[test]
    fn config_good_file() {
        let c = ok(GOOD);
        assert_eq!(c.path, Path::new(PATH));
        let names: Vec<&str> = c.names().collect();
        assert_eq!(names, ["site", "docs", "alpha"], "mirrors keep the order of the file");

        let site = c.get("site").unwrap();
        assert_eq!(site.repo, Path::new("/srv/git/site.git"));
        assert_eq!(site.rev, "main");
        assert_eq!(site.target, "/mnt/nas/site");
        assert_eq!(site.backend, BackendName::Nfs, "overridden");
        assert_eq!(site.interval, Duration::from_secs(10), "inherited");
        assert_eq!(site.verify_every, Some(Duration::from_secs(86400)), "inherited");
        assert_eq!(site.verify_slices, Some(24));
        assert_eq!(site.jobs, Some(8), "inherited");
        assert_eq!(site.lookup_jobs, Some(2));
        assert_eq!(site.write_jobs, Some(WriteJobs::Auto));
        assert!(site.fsync);
        assert!(!site.allow_http && !site.repair);
        assert_eq!((site.endpoint.as_deref(), site.region.as_deref()), (None, None));

        let docs = c.get("docs").unwrap();
        assert_eq!(docs.target, "s3://bucket/docs", "URLs are kept as written");
        assert_eq!(docs.backend, BackendName::Auto);
        assert_eq!(docs.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(docs.region.as_deref(), Some("eu-west-1"));
        assert!(docs.allow_http);
        assert_eq!(docs.jobs, Some(32), "overridden");
        assert_eq!(docs.verify_every, None, "\"off\" turns off the default");
        assert_eq!(docs.verify_slices, None, "the whole tree each verify unless set");

        let alpha = c.get("alpha").unwrap();
        assert_eq!(alpha.repo, Path::new("/etc/treesync/repos/alpha.git"), "relative to the file's directory");
        assert_eq!(alpha.target, "/etc/treesync/out/alpha", "relative to the file's directory, normalized");
        assert_eq!(alpha.interval, Duration::from_millis(500));
        assert_eq!(alpha.write_jobs, Some(WriteJobs::Fixed(4)));
        assert!(alpha.repair);
    }

    #[test]
    fn config_minimal_file_takes_the_builtin_defaults() {
        let c = ok("[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n");
        let m = &c.mirrors[0];
        assert_eq!(m.backend, BackendName::Auto);
        assert_eq!(m.interval, DEFAULT_INTERVAL);
        assert_eq!((m.jobs, m.lookup_jobs, m.write_jobs, m.verify_every), (None, None, None, None));
        assert!(!m.fsync && !m.allow_http && !m.repair);
    }

    #[test]
    fn config_plan_limits() {
        let c = ok("[defaults]\nmax_entries = 50_000_000\nmax_bytes = \"2TiB\"\n\
             [mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n\
             [mirror.b]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/b\"\nmax_bytes = 1000\n");
        assert_eq!((c.mirrors[0].max_entries, c.mirrors[0].max_bytes), (Some(50_000_000), Some(2 << 40)));
        assert_eq!((c.mirrors[1].max_entries, c.mirrors[1].max_bytes), (Some(50_000_000), Some(1000)));
        let m = &ok("[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n").mirrors[0];
        assert_eq!((m.max_entries, m.max_bytes), (None, None), "the core's defaults");
        let base = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n";
        assert_err(&format!("{base}max_entries = 0\n"), (5, 15), "max_entries in [mirror.a] must be at least 1", &[]);
        assert_err(
            &format!("{base}verify_slices = 0\n"),
            (5, 17),
            "verify_slices in [mirror.a] must be at least 1",
            &[],
        );
        assert_err(
            &format!("{base}max_bytes = \"2 parsecs\"\n"),
            (5, 13),
            "bad size \"2 parsecs\" for max_bytes in [mirror.a]: unknown unit \"parsecs\"",
            &["hint: write a number and a unit"],
        );
        assert_err(
            &format!("{base}max_byte = 1\n"),
            (5, 1),
            "unknown key \"max_byte\"",
            &["did you mean \"max_bytes\"?"],
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("500 GiB"), Ok(500 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("2TB"), Ok(2_000_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err() && parse_size("GiB").is_err() && parse_size("1 XB").is_err());
        assert!(parse_size("99999999PiB").is_err());
    }

    #[test]
    fn config_inline_and_dotted_mirrors() {
        let c = ok("[mirror]\nb = { repo = \"/r\", ref = \"main\", target = \"/b\" }\n\
             a.repo = \"/r\"\na.ref = \"x\"\na.target = \"/a\"\n");
        assert_eq!(c.names().collect::<Vec<_>>(), ["b", "a"]);
    }

    #[test]
    fn config_relative_file_path_resolves_against_the_current_directory() {
        let c = parse("[mirror.a]\nrepo = \"r.git\"\nref = \"main\"\ntarget = \"t\"\n", Path::new("treesync.toml"))
            .unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(c.mirrors[0].repo, cwd.join("r.git"));
        assert_eq!(c.mirrors[0].target, cwd.join("t").to_str().unwrap());
    }

    #[test]
    fn config_syntax_error_has_line_and_column() {
        assert_err("[mirror.a]\nrepo = \"x\nref = 1\n", (2, 10), "TOML syntax error: invalid basic string", &[]);
        assert_err("[mirror.a\n", (1, 10), "TOML syntax error: unclosed table", &[]);
    }

    #[test]
    fn config_duplicate_key_or_mirror() {
        assert_err("[mirror.a]\nrepo = \"x\"\nrepo = \"y\"\n", (3, 1), "duplicate key \"repo\"", &["hint: each key"]);
        assert_err(
            "[mirror.a]\nrepo = \"x\"\n\n[mirror.a]\nref = \"y\"\n",
            (4, 9),
            "duplicate key \"a\"",
            &["each [mirror.NAME], may appear only once"],
        );
    }

    #[test]
    fn config_unknown_key_in_mirror() {
        let text = "[defaults]\njobs = 4\n\n[mirror.site]\nrepo = \"/r\"\nref = \"main\"\ntagret = \"/t\"\n";
        assert_err(
            text,
            (7, 1),
            "unknown key \"tagret\" in [mirror.site] (expected one of: repo, ref, target, path, backend, interval, \
             verify_every, verify_slices, jobs, lookup_jobs, write_jobs, fsync, endpoint, region, allow_http, repair, poll, max_entries, max_bytes, \
             filter_timeout, recurse_submodules, include, exclude, export, lfs, atomic, keep, grace, max_generations, switch, cache_dir, exec_after, webhook)",
            &["\n  hint: did you mean \"target\"?"],
        );
        assert_err(
            "[mirror.site]\n  lookup-jobs = 2\n",
            (2, 3),
            "unknown key \"lookup-jobs\" in [mirror.site]",
            &["did you mean \"lookup_jobs\"?"],
        );
    }

    #[test]
    fn config_lfs_takes_content_or_pointers_from_defaults_or_the_mirror() {
        use treesync_core::lfs::LfsMode;
        let base = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t/a\"\n";
        assert_eq!(ok(base).mirrors[0].lfs, None, "unset: the core's default");
        let c = ok(&format!("[defaults]\nlfs = \"pointers\"\n{base}"));
        assert_eq!(c.mirrors[0].lfs, Some(LfsMode::Pointers));
        let c = ok(&format!("[defaults]\nlfs = \"pointers\"\n{base}lfs = \"content\"\n"));
        assert_eq!(c.mirrors[0].lfs, Some(LfsMode::Content), "the mirror's own wins");
        assert_err(
            &format!("{base}lfs = \"pointer\"\n"),
            (5, 7),
            "unknown LFS mode \"pointer\" for lfs in [mirror.a] (expected one of: content, pointers)",
            &["hint: content writes"],
        );
        assert_err(&format!("{base}lfs = true\n"), (5, 7), "lfs in [mirror.a] must be a string", &[]);
    }

    #[test]
    fn config_metrics_addr_is_one_for_the_process_in_defaults() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n";
        let c = ok(&format!("[defaults]\nmetrics_addr = \"127.0.0.1:9273\"\n{m}"));
        assert_eq!(c.mirrors[0].metrics_addr, Some("127.0.0.1:9273".parse().expect("addr")));
        assert_eq!(ok(m).mirrors[0].metrics_addr, None);
        assert_err(
            &format!("{m}metrics_addr = \"127.0.0.1:9273\"\n"),
            (5, 1),
            "unknown key \"metrics_addr\" in [mirror.a]",
            &["hint: one `watch --all` process serves every mirror: set metrics_addr once, in [defaults]"],
        );
        // A port alone is this host's, written as a string or a number.
        for port in ["\"9273\"", "9273"] {
            let c = ok(&format!("[defaults]\nmetrics_addr = {port}\n{m}"));
            assert_eq!(c.mirrors[0].metrics_addr, Some("127.0.0.1:9273".parse().expect("addr")));
        }
        assert_err(
            &format!("[defaults]\nmetrics_addr = \":9273\"\n{m}"),
            (2, 16),
            "bad address for metrics_addr in [defaults]: \":9273\" names a port but no host: write 127.0.0.1:9273 (this host only; 9273 alone means the same) or 0.0.0.0:9273 (every interface)",
            &[],
        );
        assert_err(
            &format!("[defaults]\nmetrics_addr = \"localhost\"\n{m}"),
            (2, 16),
            "bad address for metrics_addr in [defaults]: \"localhost\" names no port: write HOST:PORT",
            &[],
        );
        assert_err(
            &format!("[defaults]\nmetrics_addr = 99999\n{m}"),
            (2, 16),
            "metrics_addr in [defaults] must be a string, not an integer (99999)",
            &["hint: write e.g. metrics_addr = \"127.0.0.1:9273\""],
        );
    }

    #[test]
    fn config_unknown_key_in_defaults_and_top_level() {
        assert_err(
            "[defaults]\nref = \"main\"\n",
            (2, 1),
            "unknown key \"ref\" in [defaults] (expected one of: backend, interval,",
            &["hint: repo, ref and target are set in each [mirror.NAME]"],
        );
        assert_err(
            "[defaults]\nintervall = \"5s\"\n",
            (2, 1),
            "unknown key \"intervall\" in [defaults]",
            &["did you mean \"interval\"?"],
        );
        assert_err(
            "[mirrors.a]\nrepo = \"/r\"\n",
            (1, 2),
            "unknown key \"mirrors\" at the top level (expected one of: defaults, mirror)",
            &["did you mean \"mirror\"?"],
        );
        assert_err(
            "repo = \"/r\"\n",
            (1, 1),
            "unknown key \"repo\" at the top level",
            &["hint: the keys of a mirror go under a [mirror.NAME] header"],
        );
    }

    #[test]
    fn config_missing_required_keys_point_at_the_header() {
        let text = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n\n\
                    [mirror.site]\nrepo = \"/r\"\nref = \"main\"\n";
        assert_err(text, (6, 1), "missing key \"target\" in [mirror.site]", &["hint: every mirror needs repo"]);
        assert_err("\n[mirror.site]\n", (2, 1), "missing keys \"repo\", \"ref\", \"target\" in [mirror.site]", &[]);
    }

    #[test]
    fn config_wrong_types() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n";
        assert_err(
            &format!("{m}jobs = \"8\"\n"),
            (5, 8),
            "jobs in [mirror.a] must be a number, not a string (\"8\")",
            &["hint: write jobs = 8, without quotes"],
        );
        assert_err(&format!("{m}jobs = 0\n"), (5, 8), "jobs in [mirror.a] must be at least 1, not 0", &[]);
        assert_err(
            &format!("{m}lookup_jobs = -2\n"),
            (5, 15),
            "lookup_jobs in [mirror.a] must be at least 1, not -2",
            &[],
        );
        assert_err(
            &format!("{m}allow_http = \"true\"\n"),
            (5, 14),
            "allow_http in [mirror.a] must be true or false, not a string (\"true\")",
            &["write allow_http = true, without quotes"],
        );
        assert_err(
            &format!("{m}write_jobs = \"many\"\n"),
            (5, 14),
            "write_jobs in [mirror.a] must be a number (1, 8, 32, …), not a string (\"many\")",
            &["\"auto\" or a number"],
        );
        assert_err(
            "[mirror.a]\nrepo = 7\n",
            (2, 8),
            "repo in [mirror.a] must be a string, not an integer (7)",
            &["hint: quote it: repo = \"7\""],
        );
        assert_err("[mirror.a]\nref = \"\"\n", (2, 7), "ref in [mirror.a] must not be empty", &[]);
        assert_err(
            "[defaults]\nfsync = 1\n",
            (2, 9),
            "fsync in [defaults] must be true or false, not an integer (1)",
            &[],
        );
        assert_err(
            "mirror = \"a\"\n",
            (1, 1),
            "mirror must be a table of mirrors ([mirror.NAME]), not a string (\"a\")",
            &[],
        );
        assert_err("[[mirror]]\nrepo = \"/r\"\n", (1, 1), "[[mirror]] is not a mirror", &["hint: write [mirror.NAME]"]);
        assert_err("[mirror]\nsite = \"/r\"\n", (2, 1), "[mirror.site] must be a table", &[]);
    }

    #[test]
    fn config_bad_backend() {
        assert_err(
            "[defaults]\nbackend = \"NFS\"\n",
            (2, 11),
            "unknown backend \"NFS\" in [defaults] (expected one of: auto, local, nfs, s3)",
            &["hint: did you mean \"nfs\"?"],
        );
    }

    #[test]
    fn config_bad_duration() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n";
        assert_err(
            &format!("{m}interval = \"5 parsecs\"\n"),
            (5, 12),
            "bad duration \"5 parsecs\" for interval in [mirror.a]: unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations); a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m",
            &["hint: write a number and a unit"],
        );
        assert_err(
            &format!("{m}interval = \"5\"\n"),
            (5, 12),
            "bad duration \"5\" for interval in [mirror.a]: time unit needed, for example 5sec or 5ms; a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m",
            &[],
        );
        assert_err(
            &format!("{m}interval = 5\n"),
            (5, 12),
            "interval in [mirror.a] must be a duration string, not an integer (5)",
            &["hint: give the unit: interval = \"5s\""],
        );
        assert_err(&format!("{m}interval = \"0s\"\n"), (5, 12), "interval in [mirror.a] must be longer than 0", &[]);
        assert_err(
            "[defaults]\nverify_every = \"daily\"\n",
            (2, 16),
            "bad duration \"daily\" for verify_every in [defaults]: expected number at 0; a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m",
            &[],
        );
    }

    #[test]
    fn config_backend_and_target_disagree() {
        // The library's rules and words, as `--backend` and `--target` give them.
        assert_err(
            "[mirror.docs]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"s3://bucket/docs\"\nbackend = \"nfs\"\n",
            (4, 10),
            "backend nfs needs a directory, got \"s3://bucket/docs\"",
            &["hint: use backend auto or s3 for object-storage URLs"],
        );
        assert_err(
            "[defaults]\nbackend = \"local\"\n\n[mirror.docs]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"memory://\"\n",
            (7, 10),
            "backend local needs a directory, got \"memory://\" (backend = \"local\" from [defaults], line 2)",
            &[],
        );
        assert_err(
            "[mirror.site]\nrepo = \"/r\"\nref = \"main\"\nbackend = \"s3\"\ntarget = \"/mnt/nas/site\"\n",
            (5, 10),
            "backend s3 needs a URL such as s3://BUCKET/PREFIX, got \"/mnt/nas/site\"",
            &["hint: use backend auto, local or nfs for a directory"],
        );
    }

    #[test]
    fn config_takes_nfs_urls_by_the_rules_of_the_binary() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\n";
        let c = ok(&format!("{m}target = \"nfs://127.0.0.1:2049/export/site?mountport=20048\"\n"));
        assert_eq!(c.get("a").unwrap().target, "nfs://127.0.0.1:2049/export/site?mountport=20048");
        ok(&format!("{m}backend = \"nfs\"\ntarget = \"nfs://nas/export/site\"\n"));
        assert_err(
            &format!("{m}backend = \"s3\"\ntarget = \"nfs://nas/export/site\"\n"),
            (5, 10),
            "backend s3 cannot use an NFS URL, got \"nfs://nas/export/site\"",
            &["hint: use backend auto or nfs for nfs:// targets"],
        );
        assert_err(
            &format!("{m}target = \"nfs://[::1/x\"\n"),
            (4, 10),
            "bad NFS URL \"nfs://[::1/x\": an IPv6 address in [ ] is not closed with ]",
            &["hint: the form is nfs://HOST[:PORT]/EXPORT"],
        );
    }

    #[test]
    fn config_mirrors_take_every_target_the_cli_takes() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\n";
        for target in [
            "nfs://nas/export/site",
            "nfs://[::1]:2049/export/site?mountport=20048&uid=1000",
            "s3://bucket/site",
            "s3a://bucket",
            "file:///srv/export",
            "memory://",
        ] {
            let c = ok(&format!("{m}target = {target:?}\n"));
            assert_eq!(c.mirrors[0].target, target, "URLs are kept as written");
        }
        ok(&format!("{m}backend = \"s3\"\ntarget = \"s3://bucket/site\"\nendpoint = \"https://s3.example\"\n"));
        ok(&format!("{m}backend = \"nfs\"\ntarget = \"nfs://nas/export/site\"\njobs = 4\nwrite_jobs = \"auto\"\n"));
        ok(&format!("{m}target = \"nfs://nas/export/site\"\njobs = 4\nwrite_jobs = 4\n"));
        assert_err(
            &format!("{m}target = \"nfs://nas\"\n"),
            (4, 10),
            "bad NFS URL \"nfs://nas\": the export path is missing",
            &["hint: the form is nfs://HOST[:PORT]/EXPORT"],
        );
        assert_err(
            &format!("{m}target = \"nfs://nas:x/e\"\n"),
            (4, 10),
            "bad NFS URL \"nfs://nas:x/e\": \"x\" is not a port number",
            &[],
        );
    }

    #[test]
    fn config_jobs_and_write_jobs_on_nfs_must_agree() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"nfs://nas/export/site\"\n";
        assert_err(
            &format!("{m}jobs = 4\nwrite_jobs = 16\n"),
            (6, 14),
            "jobs 4 and write_jobs 16 disagree: on nfs every operation in flight is a write",
            &["hint: give one of them"],
        );
        assert_err(
            &format!("[defaults]\njobs = 8\n{m}write_jobs = 2\n"),
            (7, 14),
            "jobs 8 and write_jobs 2 disagree",
            &["(jobs from [defaults], line 2)"],
        );
        // A directory with backend auto may be local (write_jobs unused): decided when opened.
        ok("[defaults]\njobs = 8\n[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\nwrite_jobs = 2\n");
    }

    #[test]
    fn config_dates_and_tables_where_values_belong() {
        let m = "[mirror.a]\nrepo = \"/r\"\ntarget = \"/t\"\n";
        assert_err(
            &format!("{m}ref = 1979-05-27\n"),
            (4, 7),
            "ref in [mirror.a] must be a string, not a date (1979-05-27)",
            &["hint: quote it: ref = \"1979-05-27\""],
        );
        assert_err(
            &format!("{m}ref = \"main\"\njobs = [1]\n"),
            (5, 8),
            "jobs in [mirror.a] must be a number (1, 8, 32, …), not an array",
            &[],
        );
        assert_err("defaults = 1\n", (1, 1), "defaults must be a table ([defaults]), not an integer (1)", &[]);
    }

    #[test]
    fn config_bad_url_target_or_endpoint() {
        let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\n";
        assert_err(
            &format!("{m}target = \"sftp://host/dir\"\n"),
            (4, 10),
            "unsupported target scheme \"sftp\"",
            &["s3://BUCKET/PREFIX, file:///DIR"],
        );
        assert_err(&format!("{m}target = \"s3:///docs\"\n"), (4, 10), "target \"s3:///docs\" has no bucket name", &[]);
        assert_err(
            &format!("[defaults]\nendpoint = \"http://127.0.0.1:9000\"\n{m}target = \"s3://b/p\"\n"),
            (2, 12),
            "endpoint \"http://127.0.0.1:9000\" of [mirror.a] is plain HTTP",
            &["hint: add allow_http = true to [mirror.a]"],
        );
        // Not an error for a directory target: the endpoint of [defaults] does not apply to it.
        ok(&format!("[defaults]\nendpoint = \"http://127.0.0.1:9000\"\n{m}target = \"/t\"\n"));
        assert_err(
            &format!("{m}target = \"~/site\"\n"),
            (4, 10),
            "target \"~/site\" in [mirror.a] starts with ~",
            &["hint: write the full path"],
        );
    }

    #[test]
    fn config_bad_mirror_names() {
        assert_err(
            "[mirror.\"my site\"]\nrepo = \"/r\"\n",
            (1, 9),
            "bad mirror name \"my site\": use only letters, digits, '.', '_' and '-'",
            &["hint: rename it, e.g. [mirror.my-site]"],
        );
        assert_err(
            "[mirror.\"..\"]\n",
            (1, 9),
            "bad mirror name \"..\": it must not be . or .. nor start with '-'",
            &[],
        );
        assert_err("[mirror.-x]\n", (1, 9), "bad mirror name \"-x\"", &[]);
        assert_err("[mirror.\"\"]\n", (1, 9), "bad mirror name \"\"", &[]);
        ok("[mirror.\"Site_2.0-x\"]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n");
        assert_err(
            "[mirror.v2.0]\nrepo = \"/r\"\n",
            (1, 12),
            "unknown key \"0\" in [mirror.v2]",
            &["hint: a dot splits a table name; quote a name that has one: [mirror.\"v2.0\"]"],
        );
    }

    #[test]
    fn config_no_mirrors() {
        let e = err("# nothing yet\n[defaults]\njobs = 4\n");
        assert_eq!(
            e,
            format!(
                "{PATH}: no mirrors defined\n  \
                 hint: add a [mirror.NAME] table with repo, ref and target (see docs/config.md)"
            )
        );
        assert_eq!(err(""), e);
        assert_err("[defaults]\n\n[mirror]\n", (3, 1), "no mirrors defined: [mirror] is empty", &[]);
    }

    #[test]
    fn config_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("treesync.toml");
        let e = load(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read {}: No such file or directory\n  hint: create it or pass --config PATH",
                path.display()
            )
        );
        assert_eq!(e.location(), None);

        std::fs::write(&path, "[mirror.a]\nrepo = \"a.git\"\nref = \"main\"\ntarget = \"out\"\n").unwrap();
        let c = load(&path).unwrap();
        assert_eq!(c.mirrors[0].repo, dir.path().join("a.git"));
        assert_eq!(c.mirrors[0].target, dir.path().join("out").to_str().unwrap());
    }

    #[test]
    fn config_duplicate_targets() {
        let text = "[mirror.site]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/etc/treesync/out\"\n\n\
                    [mirror.docs]\nrepo = \"/d\"\nref = \"main\"\ntarget = \"./out/\"\n";
        assert_err(
            text,
            (9, 10),
            "[mirror.docs] and [mirror.site] (line 4) have the same target \"/etc/treesync/out\"",
            &["hint: two mirrors writing one target would undo each other's syncs"],
        );
        let urls = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"s3://b/p\"\n\
                    [mirror.b]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"s3://b/p/\"\n";
        assert_err(urls, (8, 10), "[mirror.b] and [mirror.a] (line 4) have the same target", &[]);
        // Two mirrors of one repository into different targets are fine.
        ok("[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n\
             [mirror.b]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/b\"\n");
    }

    #[test]
    fn config_get_unknown_name_lists_the_mirrors() {
        let c = ok(GOOD);
        let e = c.get("dosc").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no mirror named \"dosc\" in {PATH} (mirrors: site, docs, alpha)\n  hint: did you mean \"docs\"?")
        );
        let e = c.get("zzz").unwrap_err();
        assert_eq!(e.to_string(), format!("no mirror named \"zzz\" in {PATH} (mirrors: site, docs, alpha)"));
    }

    #[test]
    fn config_default_path() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            default_path_from(os("/x/cfg"), os("/home/u")),
            Some(PathBuf::from("/x/cfg/treesync/treesync.toml"))
        );
        assert_eq!(
            default_path_from(None, os("/home/u")),
            Some(PathBuf::from("/home/u/.config/treesync/treesync.toml"))
        );
        assert_eq!(
            default_path_from(os(""), os("/home/u")),
            Some(PathBuf::from("/home/u/.config/treesync/treesync.toml"))
        );
        assert_eq!(
            default_path_from(os("rel"), os("/home/u")),
            Some(PathBuf::from("/home/u/.config/treesync/treesync.toml"))
        );
        assert_eq!(default_path_from(None, None), None);
    }

    #[test]
    fn config_docs_examples_are_valid() {
        let doc = include_str!("../../../docs/config.md");
        let blocks: Vec<&str> =
            doc.split("```toml\n").skip(1).map(|b| b.split("```").next().unwrap_or_default()).collect();
        assert!(blocks.len() >= 3, "docs/config.md has the format and two examples");
        for b in blocks {
            let c = parse(b, Path::new("/etc/treesync/treesync.toml")).unwrap_or_else(|e| panic!("{e}\nin\n{b}"));
            assert!(!c.mirrors.is_empty());
        }
    }

    #[test]
    fn config_error_location() {
        let e = parse("[mirror.a]\n  bogus = 1\n", Path::new("treesync.toml")).unwrap_err();
        assert_eq!(e.location(), Some((2, 3)));
        assert!(e.to_string().starts_with("treesync.toml:2:3: unknown key \"bogus\" in [mirror.a]"), "{e}");
        assert!(e.message().starts_with("unknown key"));
        assert_eq!(e.hint_text(), None);
    }
}
