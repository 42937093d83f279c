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
//! A mirror's settings are the library's [`treesync::Settings`]: the keys are its fields, each
//! value is read by the field's own `deserialize_with` (the same rules as its flag), and a
//! mirror's own settings go over those of `[defaults]` by [`treesync::Settings::or`]. Errors name
//! the line and column of the toml parser's span (`treesync.toml:7:1: unknown key "tagret" in
//! [mirror.site] …`) and, where it helps, carry a hint on a second line. Targets go through the
//! library's front door ([`treesync::Target::parse`], [`treesync::check`]), so a mirror accepts
//! exactly what `--target` and `--backend` accept. The format is documented in docs/config.md.

mod parse;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

pub use parse::parse;
use treesync::settings::value::did_you_mean;

/// The file's name in `$XDG_CONFIG_HOME/treesync/`.
pub const FILE_NAME: &str = "treesync.toml";

/// Every mirror, in the order of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it was read from, as given.
    pub path: PathBuf,
    pub mirrors: Vec<MirrorSpec>,
}

/// One `[mirror.NAME]` table with the `[defaults]` applied: what to sync where, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct MirrorSpec {
    /// The `NAME` of `[mirror.NAME]`: `[A-Za-z0-9._-]+`.
    pub name: String,
    /// The repository, absolute when the file gave a relative path (resolved against the file's
    /// directory), or a URL as written (`git://…`, `https://…`, `host:path`).
    pub repo: PathBuf,
    /// The `ref` key: a branch, tag, commit id or revision expression, or `REV:PATH`.
    pub rev: String,
    /// The `path` key: sync only this directory of the tree, as the target's root (`--path`).
    pub path: Option<String>,
    /// A directory (resolved against the file's directory when relative) or a URL (nfs://,
    /// s3://, file://, memory://): whatever `--target` takes.
    pub target: String,
    /// The mirror's settings over those of `[defaults]` (`cache_dir` resolved against the
    /// file's directory).
    pub settings: treesync::Settings,
    /// Where `watch` serves metrics and /healthz (`metrics_addr` of `[defaults]`, the same for
    /// every mirror: `--metrics-addr`).
    pub metrics_addr: Option<std::net::SocketAddr>,
}

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

impl Config {
    /// The mirror called `name`.
    pub fn get(&self, name: &str) -> Result<&MirrorSpec, ConfigError> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
