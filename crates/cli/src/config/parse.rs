//! Reading `treesync.toml`: the toml parser's tables, checked key by key, the settings read by
//! the library ([`treesync::Settings::from_table`]), then the rules a mirror must follow.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};
use treesync::Settings;
use treesync::settings::value::{self, Got, did_you_mean, expected, with_hint};

use super::{Config, ConfigError, MirrorSpec};

const TOP_KEYS: &[&str] = &["defaults", "mirror"];
const REQUIRED_KEYS: &[&str] = &["repo", "ref", "target"];
/// Keys of a mirror that `[defaults]` does not take, besides the required ones.
const MIRROR_ONLY_KEYS: &[&str] = &["path"];
/// Keys of `[defaults]` only: settings of the whole `watch --all` process.
const DEFAULTS_ONLY_KEYS: &[&str] = &["metrics_addr"];

/// A table of the file: its entries and its span.
type Table<'i> = Spanned<DeTable<'i>>;

/// Where a mirror's setting was written, and ` from [defaults], line N` when it was not the
/// mirror's own.
type Written = (Range<usize>, String);

/// Validate `text`, the contents of the file at `path` (used for messages and to resolve relative paths).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let cx = Cx { text, path, base: base_dir(path) };
    let doc = DeTable::parse(text).map_err(|e| cx.syntax_error(&e))?;
    let mut defaults = None;
    let mut mirror_tables = None;
    for (key, value) in doc.get_ref().iter() {
        let (name, got) = (key.get_ref().as_ref(), || describe(value));
        match (name, value.get_ref()) {
            ("defaults", DeValue::Table(t)) => defaults = Some(Spanned::new(value.span(), t.clone())),
            ("defaults", _) => {
                return Err(cx.err(key.span(), format!("defaults must be a table ([defaults]), not {}", got())));
            }
            ("mirror", DeValue::Table(t)) => mirror_tables = Some(Spanned::new(value.span(), t.clone())),
            ("mirror", DeValue::Array(_)) => {
                return Err(cx
                    .err(value.span(), "[[mirror]] is not a mirror: a mirror is a table with a name")
                    .hint("write [mirror.NAME], e.g. [mirror.site]"));
            }
            ("mirror", _) => {
                return Err(
                    cx.err(key.span(), format!("mirror must be a table of mirrors ([mirror.NAME]), not {}", got()))
                );
            }
            (other, _) => {
                let e = cx.err(key.span(), format!("unknown key {other:?} at the top level{}", expected(TOP_KEYS)));
                return Err(if mirror_keys().contains(&other) {
                    e.hint("the keys of a mirror go under a [mirror.NAME] header, shared settings under [defaults]")
                } else {
                    e.maybe_hint(did_you_mean(other, TOP_KEYS))
                });
            }
        }
    }
    let defaults = match &defaults {
        Some(t) => Some(Defaults::read(&cx, t)?),
        None => None,
    };
    let no_mirrors_hint = "add a [mirror.NAME] table with repo, ref and target (see docs/config.md)";
    let Some(tables) = mirror_tables else {
        return Err(ConfigError::new(Some(path.display().to_string()), "no mirrors defined").hint(no_mirrors_hint));
    };
    if tables.get_ref().is_empty() {
        return Err(cx.err(tables.span(), "no mirrors defined: [mirror] is empty").hint(no_mirrors_hint));
    }
    // The parser gives the mirrors sorted by name; keep the order of the file.
    let mut entries: Vec<_> = tables.get_ref().iter().collect();
    entries.sort_by_key(|(name, _)| name.span().start);
    let mut mirrors: Vec<MirrorSpec> = Vec::new();
    // The target of each mirror so far, normalized, with the mirror's index and the target's line.
    let mut targets: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (key, value) in entries {
        let m = Mirror::read(&cx, key, value, defaults.as_ref())?;
        let target_line = cx.position(m.target_span.start).0;
        let target = &m.spec.target;
        if let Some((other, line)) = targets.insert(normalize_target(target), (mirrors.len(), target_line)) {
            return Err(cx
                .err(
                    m.target_span,
                    format!(
                        "{} and [mirror.{}] (line {line}) have the same target {target:?}",
                        m.section, mirrors[other].name
                    ),
                )
                .hint(
                    "two mirrors writing one target would undo each other's syncs; give each mirror its own target",
                ));
        }
        mirrors.push(m.spec);
    }
    Ok(Config { path: path.to_path_buf(), mirrors })
}

/// Every key of a `[mirror.NAME]` table: the required ones, the mirror's own, then the settings.
fn mirror_keys() -> Vec<&'static str> {
    [REQUIRED_KEYS, MIRROR_ONLY_KEYS, &Settings::keys()].concat()
}

/// `[defaults]`, read.
struct Defaults<'t, 'i> {
    table: &'t Table<'i>,
    settings: Settings,
    metrics_addr: Option<std::net::SocketAddr>,
}

impl<'t, 'i> Defaults<'t, 'i> {
    fn read(cx: &Cx<'_>, table: &'t Table<'i>) -> Result<Self, ConfigError> {
        let known = [Settings::keys(), DEFAULTS_ONLY_KEYS.to_vec()].concat();
        cx.check_keys(table, "[defaults]", &known, |key, _| {
            if REQUIRED_KEYS.contains(&key) {
                Some("repo, ref and target are set in each [mirror.NAME], not in [defaults]".into())
            } else if MIRROR_ONLY_KEYS.contains(&key) {
                Some("path names a directory of a mirror's ref: set it in each [mirror.NAME], not in [defaults]".into())
            } else {
                None
            }
        })?;
        let settings = cx.settings(table, "[defaults]", DEFAULTS_ONLY_KEYS)?;
        let metrics_addr = match entry(table, "metrics_addr") {
            Some(v) => Some(cx.value(v, "metrics_addr", "[defaults]", metrics_addr)?),
            None => None,
        };
        Ok(Defaults { table, settings, metrics_addr })
    }
}

/// `metrics_addr`: where `watch` serves its metrics, as `--metrics-addr` takes it.
fn metrics_addr(got: Got) -> Result<std::net::SocketAddr, String> {
    let bad = |why| format!("bad address for {} in {}: {why}", value::KEY, value::SECTION);
    match got {
        Got::Str(s) => crate::monitor::http::parse_addr(&s).map_err(bad),
        Got::Int(port) if (1..=i64::from(u16::MAX)).contains(&port) => {
            crate::monitor::http::parse_addr(&port.to_string()).map_err(bad)
        }
        got => Err(with_hint(got.wrong("a string"), "write e.g. metrics_addr = \"127.0.0.1:9273\"")),
    }
}

/// One `[mirror.NAME]`, read and checked, with where its target and settings were written.
struct Mirror {
    spec: MirrorSpec,
    section: String,
    target_span: Range<usize>,
}

impl Mirror {
    /// One mirror, its rules in the order a reader meets them: its name, its keys, their
    /// values, what is missing, then how they fit together (ref and path; the target and its
    /// settings: [`check_target`]), each error with the line it is about.
    fn read(
        cx: &Cx<'_>,
        key: &Spanned<toml::de::DeString<'_>>,
        value: &Spanned<DeValue<'_>>,
        defaults: Option<&Defaults<'_, '_>>,
    ) -> Result<Mirror, ConfigError> {
        let name = key.get_ref().as_ref();
        check_name(cx, name, key.span())?;
        let section = format!("[mirror.{name}]");
        let DeValue::Table(t) = value.get_ref() else {
            return Err(cx.err(
                key.span(),
                format!("{section} must be a table ([mirror.NAME] with repo, ref and target), not {}", describe(value)),
            ));
        };
        let table = Spanned::new(value.span(), t.clone());
        cx.check_keys(&table, &section, &mirror_keys(), |k, v| {
            if DEFAULTS_ONLY_KEYS.contains(&k) {
                Some(format!("one `watch --all` process serves every mirror: set {k} once, in [defaults]"))
            } else if v.get_ref().is_table() && cx.text.get(v.span()).is_some_and(|h| h.starts_with('[')) {
                // `[mirror.v2.0]` is the key "0" of the mirror "v2".
                Some(format!("a dot splits a table name; quote a name that has one: [mirror.\"{name}.{k}\"]"))
            } else {
                None
            }
        })?;
        let text = |k: &str| -> Result<Option<(String, Range<usize>)>, ConfigError> {
            match entry(&table, k) {
                Some(v) => Ok(Some((cx.value(v, k, &section, value::text_of)?, v.span()))),
                None => Ok(None),
            }
        };
        let (repo, rev, target, path) = (text("repo")?, text("ref")?, text("target")?, text("path")?);
        let own = cx.settings(&table, &section, &[REQUIRED_KEYS, MIRROR_ONLY_KEYS].concat())?;
        let (Some((repo, repo_span)), Some((rev, _)), Some((target, target_span))) = (repo, rev, target) else {
            let missing: Vec<String> =
                REQUIRED_KEYS.iter().filter(|k| entry(&table, k).is_none()).map(|k| format!("{k:?}")).collect();
            let s = if missing.len() == 1 { "" } else { "s" };
            return Err(cx
                .err(value.span(), format!("missing key{s} {} in {section}", missing.join(", ")))
                .hint("every mirror needs repo (the git repository), ref (what to sync) and target (where to)"));
        };
        let mut settings = own.or(defaults.map(|d| d.settings.clone()).unwrap_or_default());
        // Where a setting was written: the mirror's own line, or `[defaults]`' (and which line).
        let at = |k: &str| -> Option<Written> {
            match (entry(&table, k), defaults.and_then(|d| entry(d.table, k))) {
                (Some(v), _) => Some((v.span(), String::new())),
                (None, Some(v)) => {
                    Some((v.span(), format!(" from [defaults], line {}", cx.position(v.span().start).0)))
                }
                (None, None) => None,
            }
        };

        // A URL (git://, https://, host:path) is fetched into the cache, not resolved as a path.
        let repo = if treesync_remote::is_url(&repo) {
            PathBuf::from(&repo)
        } else {
            cx.resolve(&repo, repo_span, &section, "repo")?
        };
        // `path` composes with `ref` as REV:PATH, so `ref` must not name a directory already.
        if let Some((written, span)) = &path
            && let Some((base, inner)) = treesync_core::source::split_subtree(&rev)
        {
            return Err(cx
                .err(
                    span.clone(),
                    format!(
                        "path {written:?} of {section} and its ref {rev:?}, which names the directory {inner:?} already: give the directory once"
                    ),
                )
                .hint(format!("ref = \"{base}\" with path = {written:?}, or ref = \"{base}:{written}\" alone")));
        }
        let target = check_target(cx, &section, target, target_span.clone(), &settings, &at)?;
        if let (Some(dir), Some((span, _))) = (&settings.cache.cache_dir, at("cache_dir")) {
            let written = dir.to_string_lossy().into_owned();
            settings.cache.cache_dir = Some(cx.resolve(&written, span, &section, "cache_dir")?);
        }
        let spec = MirrorSpec {
            name: name.to_string(),
            repo,
            rev,
            path: path.map(|(p, _)| p),
            target,
            settings,
            metrics_addr: defaults.and_then(|d| d.metrics_addr),
        };
        Ok(Mirror { spec, section, target_span })
    }
}

/// A mirror's target, as `--target` takes it (a relative directory resolved against the file's
/// directory), checked with the settings it is opened with: the backend, `jobs` and
/// `write_jobs` on nfs, a plain-HTTP `endpoint`. `at` says where a setting was written.
fn check_target(
    cx: &Cx<'_>,
    section: &str,
    target: String,
    target_span: Range<usize>,
    settings: &Settings,
    at: &dyn Fn(&str) -> Option<Written>,
) -> Result<String, ConfigError> {
    // A target is what `--target` takes: the library parses it and checks it against the backend.
    let target = if target.contains("://") {
        target
    } else {
        let resolved = cx.resolve(&target, target_span.clone(), section, "target")?;
        resolved.into_os_string().into_string().map_err(|p| {
            cx.err(target_span.clone(), format!("target {} is not valid UTF-8", PathBuf::from(p).display()))
        })?
    };
    let backend = settings.target.backend.unwrap_or_default();
    let parsed = treesync::Target::parse(&target).map_err(treesync::OpenError::from);
    // Only a directory with backend auto would look at the mount table: nothing to check.
    let checked = parsed.and_then(|t| match (&t, backend) {
        (treesync::Target::Dir(_), treesync::BackendKind::Auto) => Ok(t),
        _ => treesync::check(&t, backend).map(|_| t),
    });
    let parsed = checked.map_err(|e| {
        cx.library_error(target_span.clone(), &e, |message| match at("backend") {
            Some((_, from)) if !from.is_empty() && message.starts_with("backend ") => {
                format!(" (backend = \"{backend}\"{from})")
            }
            _ => String::new(),
        })
    })?;

    // On nfs, jobs is the write budget: a different fixed write_jobs is refused as the
    // library refuses it, but here with the line.
    let on_nfs = matches!(parsed, treesync::Target::Nfs { .. }) || backend == treesync::BackendKind::Nfs;
    if on_nfs
        && let (Some(jobs), Some(treesync::WriteJobs::Fixed(n))) = (settings.target.jobs, settings.target.write_jobs)
        && n != jobs
        && let (Some((_, jobs_from)), Some((span, write_jobs_from))) = (at("jobs"), at("write_jobs"))
    {
        let e = treesync::OpenError::Budgets { jobs, write_jobs: n };
        let notes: Vec<String> = [("jobs", jobs_from), ("write_jobs", write_jobs_from)]
            .into_iter()
            .filter(|(_, from)| !from.is_empty())
            .map(|(k, from)| format!("{k}{from}"))
            .collect();
        let note = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
        return Err(cx.library_error(span, &e, |_| note));
    }

    let allow_http = settings.target.allow_http.unwrap_or_default();
    if let Some(endpoint) = &settings.target.endpoint
        && parsed.is_url()
        && endpoint.starts_with("http://")
        && !allow_http
        && let Some((span, _)) = at("endpoint")
    {
        return Err(cx
            .err(
                span,
                format!("endpoint {endpoint:?} of {section} is plain HTTP, which is refused unless allow_http = true"),
            )
            .hint(format!("add allow_http = true to {section} (meant for local test servers), or use https://")));
    }
    Ok(target)
}

/// The entry `key` of `table`.
fn entry<'t, 'i>(table: &'t Table<'i>, key: &str) -> Option<&'t Spanned<DeValue<'i>>> {
    table.get_ref().iter().find(|(k, _)| k.get_ref().as_ref() == key).map(|(_, v)| v)
}

/// The file being read: its text (for line numbers), its path (for messages) and its directory.
struct Cx<'a> {
    text: &'a str,
    path: &'a Path,
    base: PathBuf,
}

impl Cx<'_> {
    /// Refuse a key of `table` that is not `known`, saying what is expected; `hint` may say more
    /// about a key and its value than "did you mean".
    fn check_keys(
        &self,
        table: &Table<'_>,
        section: &str,
        known: &[&str],
        hint: impl Fn(&str, &Spanned<DeValue<'_>>) -> Option<String>,
    ) -> Result<(), ConfigError> {
        for (k, v) in table.get_ref().iter() {
            let key = k.get_ref().as_ref();
            if !known.contains(&key) {
                let e = self.err(k.span(), format!("unknown key {key:?} in {section}{}", expected(known)));
                return Err(e.maybe_hint(hint(key, v).or_else(|| did_you_mean(key, known))));
            }
        }
        Ok(())
    }

    /// The settings of `table` (without its keys `other`), read by the library.
    fn settings(&self, table: &Table<'_>, section: &str, other: &[&str]) -> Result<Settings, ConfigError> {
        let mut settings = DeTable::new();
        for (k, v) in table.get_ref().iter().filter(|(k, _)| !other.contains(&k.get_ref().as_ref())) {
            settings.insert(k.clone(), v.clone());
        }
        let settings = Spanned::new(table.span(), settings);
        Settings::from_table(|| toml::de::Deserializer::from(settings.clone()))
            .map_err(|e| self.value_error(&e, &settings, section))
    }

    /// The value `v` of `key` read by `f` (a function of [`value`]'s kind).
    fn value<T>(
        &self,
        v: &Spanned<DeValue<'_>>,
        key: &str,
        section: &str,
        f: impl FnOnce(Got) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let got = given(v).map_err(|e| self.message(v.span(), e.message(), key, section))?;
        f(got).map_err(|m| self.message(v.span(), &m, key, section))
    }

    /// A value's error from serde: its message with the key and the table filled in, where the
    /// parser says it is.
    fn value_error(&self, e: &toml::de::Error, table: &Table<'_>, section: &str) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let key = table
            .get_ref()
            .iter()
            .find(|(k, v)| {
                k.span().contains(&span.start) || v.span().contains(&span.start) || v.span().start == span.start
            })
            .map(|(k, _)| k.get_ref().as_ref().to_string())
            .unwrap_or_default();
        self.message(span, e.message().trim(), &key, section)
    }

    /// `message` about `key` in `section` at `span`, and its hint.
    fn message(&self, span: Range<usize>, message: &str, key: &str, section: &str) -> ConfigError {
        let fill = |s: &str| s.replace(value::KEY, key).replace(value::SECTION, section);
        let (message, hint) = match message.split_once("\n  hint: ") {
            Some((m, h)) => (fill(m), Some(fill(h))),
            None => (fill(message), None),
        };
        self.err(span, message).maybe_hint(hint)
    }

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
fn check_name(cx: &Cx<'_>, name: &str, span: Range<usize>) -> Result<(), ConfigError> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(valid) {
        let suggestion: String = name.chars().map(|c| if valid(c) { c } else { '-' }).collect();
        let hint = if suggestion.trim_matches('-').is_empty() {
            "name it with letters, digits, '.', '_' and '-', e.g. [mirror.site]".to_string()
        } else {
            format!("rename it, e.g. [mirror.{}]", suggestion.trim_matches('-'))
        };
        return Err(cx
            .err(span.clone(), format!("bad mirror name {name:?}: use only letters, digits, '.', '_' and '-'"))
            .hint(hint));
    }
    if name == "." || name == ".." || name.starts_with('-') {
        return Err(cx
            .err(span.clone(), format!("bad mirror name {name:?}: it must not be . or .. nor start with '-'"))
            .hint("names are used on the command line and in file names; start it with a letter or digit"));
    }
    Ok(())
}

/// What `v` is, as the library's messages describe values.
fn given(v: &Spanned<DeValue<'_>>) -> Result<Got, toml::de::Error> {
    let mut table = DeTable::new();
    table.insert(Spanned::new(v.span(), "value".into()), v.clone());
    let got: BTreeMap<String, Got> =
        serde::Deserialize::deserialize(toml::de::Deserializer::from(Spanned::new(v.span(), table)))?;
    Ok(got.into_values().next().expect("one entry"))
}

/// `a string ("8")`, `an integer (8)`, `a table`, … for what was written where a table belongs.
fn describe(v: &Spanned<DeValue<'_>>) -> String {
    given(v).map(|g| g.describe()).unwrap_or_default()
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
