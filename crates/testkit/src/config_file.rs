//! `treesync.toml` files for tests, written from their tables' keys and values instead of one
//! format string per test:
//!
//! ```ignore
//! use treesync_testkit::config_file::ConfigFile;
//! let config = ConfigFile::new()
//!     .defaults()
//!     .key("lfs", "pointers")
//!     .mirror("site", &bare.path, "main", &target)
//!     .key("keep", 3)
//!     .write_in(dir.path());
//! ```
//!
//! gives `dir/treesync.toml`:
//!
//! ```toml
//! [defaults]
//! lfs = "pointers"
//!
//! [mirror.site]
//! repo = "/tmp/.../repo.git"
//! ref = "main"
//! target = "/tmp/.../site"
//! keep = 3
//! ```

use std::path::{Path, PathBuf};

/// A value as TOML writes it: text and paths quoted, numbers and booleans bare.
pub trait TomlValue {
    /// The value's TOML text.
    fn toml(&self) -> String;
}

impl TomlValue for str {
    fn toml(&self) -> String {
        format!("{self:?}")
    }
}

impl TomlValue for String {
    fn toml(&self) -> String {
        self.as_str().toml()
    }
}

impl TomlValue for Path {
    fn toml(&self) -> String {
        crate::cli::s(self).toml()
    }
}

impl TomlValue for PathBuf {
    fn toml(&self) -> String {
        self.as_path().toml()
    }
}

impl<T: TomlValue + ?Sized> TomlValue for &T {
    fn toml(&self) -> String {
        (**self).toml()
    }
}

macro_rules! bare_toml_values {
    ($($t:ty),*) => {$(
        impl TomlValue for $t {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
bare_toml_values!(bool, i32, i64, u32, u64, usize);

/// The text of a config file, table by table; tables after the first are set off by a blank
/// line.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    text: String,
}

impl ConfigFile {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Start the table `[NAME]`; the keys that follow are its.
    pub fn table(mut self, name: &str) -> Self {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text += &format!("[{name}]\n");
        self
    }

    /// Start `[defaults]`.
    pub fn defaults(self) -> Self {
        self.table("defaults")
    }

    /// Start `[mirror.NAME]` with its `repo`, `ref` and `target`.
    pub fn mirror(self, name: &str, repo: impl TomlValue, rev: &str, target: impl TomlValue) -> Self {
        self.table(&format!("mirror.{name}")).key("repo", repo).key("ref", rev).key("target", target)
    }

    /// `KEY = VALUE` in the current table.
    pub fn key(self, key: &str, value: impl TomlValue) -> Self {
        let line = format!("{key} = {}", value.toml());
        self.line(&line)
    }

    /// A line as it is (a key whose value a test spells itself, or a mistake).
    pub fn line(mut self, line: &str) -> Self {
        self.text += line;
        self.text.push('\n');
        self
    }

    /// The file's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Write it to `path`; `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.text).expect("write config");
        path.to_path_buf()
    }

    /// Write it to `DIR/treesync.toml`; that path.
    pub fn write_in(&self, dir: &Path) -> PathBuf {
        self.write(&dir.join("treesync.toml"))
    }
}
