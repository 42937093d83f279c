//! [`RelPath`]: a validated path relative to the target root.
//!
//! Every component was checked with `gix-validate` the way git checks tree entries before
//! writing them (no `.`/`..`, no separators or NUL, no `.git` in any spelling that git rejects
//! with `core.protectNTFS` and `core.protectHFS`), so a value of this type cannot name anything
//! outside the target or inside a `.git` directory.

use std::fmt;

use bstr::{BStr, BString, ByteSlice};

/// Name of the folder at the target root where treesync keeps its state. Reserved: a tree
/// that has an entry of this name at its root is refused.
pub const STATE_DIR: &str = ".treesync";

/// Prefix of the temporary names backends write next to a file before renaming it into place.
/// Tree entries with this prefix are refused, like `.git`, so they can never collide.
pub const TMP_PREFIX: &str = ".treesync-tmp.";

/// The longest name (one path component) in bytes that treesync writes: what ext4, xfs, NFS,
/// APFS and NTFS take (a longer one fails there at write time; it is refused before any write).
pub const NAME_MAX: usize = 255;

/// Why a tree entry name was refused.
#[derive(Debug, thiserror::Error)]
#[error("unsafe tree entry {:?}: {reason}", shorten(path))]
pub struct UnsafeName {
    /// The full path of the offending entry, lossily decoded for display.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A path cut to fit an error line: its first and last 60 characters around a `…`.
fn shorten(path: &str) -> String {
    let chars: Vec<char> = path.chars().collect();
    if chars.len() <= 130 {
        return path.to_string();
    }
    let head: String = chars[..60].iter().collect();
    let tail: String = chars[chars.len() - 60..].iter().collect();
    format!("{head}…{tail}")
}

/// A non-empty, validated, `/`-separated path relative to the target root.
///
/// The root itself is represented by [`RelPath::root()`] (empty), which is only used as the
/// parent of top-level entries.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RelPath(BString);

/// What kind of entry a validated name will become; symlinks get an extra check (`.gitmodules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A symbolic link.
    Symlink,
    /// Anything else.
    Other,
}

fn validate_options() -> gix_validate::path::component::Options {
    gix_validate::path::component::Options {
        // Linux allows `:` and trailing dots in ordinary names; what matters is that no
        // spelling of `.git` gets through, which the NTFS and HFS checks below cover.
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    }
}

/// `name` folded for comparison on targets that do not tell case apart (Unicode lowercase for
/// UTF-8 names, ASCII lowercase otherwise).
pub fn fold_case(name: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(name) {
        Ok(s) => s.to_lowercase().into_bytes(),
        Err(_) => name.to_ascii_lowercase(),
    }
}

impl RelPath {
    /// The target root.
    pub fn root() -> Self {
        RelPath(BString::default())
    }

    /// Is this the root?
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// Append a single entry `name` after validating it.
    pub fn join(&self, name: &BStr, kind: NameKind) -> Result<RelPath, UnsafeName> {
        let mode = match kind {
            NameKind::Symlink => Some(gix_validate::path::component::Mode::Symlink),
            NameKind::Other => None,
        };
        let mut reason = gix_validate::path::component(name, mode, validate_options()).err().map(|e| e.to_string());
        if reason.is_none() && kind == NameKind::Symlink {
            // git checks every component of a symlink's path as if it were the link (so a
            // symlink below a directory named .gitmodules is refused); so does treesync.
            let symlink = Some(gix_validate::path::component::Mode::Symlink);
            if let Some(c) = self
                .components()
                .find(|c| gix_validate::path::component(c.as_bstr(), symlink, validate_options()).is_err())
            {
                reason = Some(format!(
                    "a symlink below a directory named {:?} (git refuses this tree too)",
                    c.as_bstr().to_str_lossy()
                ));
            }
        }
        if reason.is_none() && name.find_byte(0).is_some() {
            reason = Some("NUL bytes are not allowed in names".into());
        }
        if reason.is_none() && name.len() > NAME_MAX {
            reason =
                Some(format!("the name is {} bytes long; filesystems take at most {NAME_MAX} (NAME_MAX)", name.len()));
        }
        if reason.is_none() && name.starts_with(TMP_PREFIX.as_bytes()) {
            reason = Some(format!("names starting with {TMP_PREFIX} are reserved for treesync's temporary files"));
        }
        if reason.is_none() && self.is_root() && name == STATE_DIR {
            reason = Some(format!("{STATE_DIR} at the top of the tree is reserved for treesync's state"));
        }
        let mut path = self.0.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name);
        match reason {
            Some(reason) => Err(UnsafeName { path: path.to_str_lossy().into_owned(), reason }),
            None => Ok(RelPath(path)),
        }
    }

    /// The path of a temporary treesync left in this directory (a name starting with
    /// [`TMP_PREFIX`], which no tree may have): only to remove it.
    pub fn leftover(&self, name: &BStr) -> Option<RelPath> {
        let plain =
            name.starts_with(TMP_PREFIX.as_bytes()) && name.len() <= NAME_MAX && name.find_byteset(b"/\0").is_none();
        plain.then(|| {
            let mut path = self.0.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            RelPath(path)
        })
    }

    /// Parse a `/`-separated path of bytes, validating every component.
    pub fn parse_bytes(path: &[u8]) -> Result<RelPath, UnsafeName> {
        let mut out = RelPath::root();
        for c in path.split(|b| *b == b'/') {
            out = out.join(c.as_bstr(), NameKind::Other)?;
        }
        Ok(out)
    }

    /// Parse a `/`-separated path, validating every component.
    pub fn parse(path: &str) -> Result<RelPath, UnsafeName> {
        let mut out = RelPath::root();
        for c in path.split('/') {
            out = out.join(c.into(), NameKind::Other)?;
        }
        Ok(out)
    }

    /// The raw bytes, `/`-separated.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path as a `BStr`.
    pub fn as_bstr(&self) -> &BStr {
        self.0.as_bstr()
    }

    /// Number of components (`a/b` has depth 2, the root 0).
    pub fn depth(&self) -> usize {
        if self.0.is_empty() { 0 } else { self.0.iter().filter(|b| **b == b'/').count() + 1 }
    }

    /// The parent directory (the root for top-level entries) and the last component.
    pub fn split_last(&self) -> (&[u8], &[u8]) {
        match self.0.rfind_byte(b'/') {
            Some(i) => (&self.0[..i], &self.0[i + 1..]),
            None => (&[], &self.0[..]),
        }
    }

    /// A path respelled from the components of existing validated paths (case folding).
    pub(crate) fn respelled(bytes: Vec<u8>) -> RelPath {
        RelPath(bytes.into())
    }

    /// The parent directory (the root for top-level entries and the root itself).
    pub fn parent(&self) -> RelPath {
        // A prefix of a validated path is made of validated components.
        RelPath(self.split_last().0.into())
    }

    /// The components, in order.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|b| *b == b'/').filter(|c| !c.is_empty())
    }

    /// Convert to an OS path relative to the root.
    pub fn to_path(&self) -> &std::path::Path {
        use std::os::unix::ffi::OsStrExt;
        std::path::Path::new(std::ffi::OsStr::from_bytes(&self.0))
    }

    /// The form for people: [`quote`]d like git quotes paths when a name holds control
    /// characters, quotes, backslashes or bytes outside ASCII, so that no name can fake a line
    /// of output or a terminal escape.
    pub fn display(&self) -> String {
        if self.is_root() { ".".into() } else { quote(&self.0).into_owned() }
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display())
    }
}

impl serde::Serialize for RelPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_root() { s.serialize_str(".") } else { ser_json(&self.0, s) }
    }
}

/// `path` as `--json` writes it, losing nothing: as it is when it is UTF-8 holding neither `"`
/// nor `\\` (JSON escapes the rest); otherwise C-quoted like git does (in `"…"`, with `\\t \\n
/// \\" \\\\` and three octal digits for every other byte that is not printable ASCII or part of
/// UTF-8 text, so bytes that are not UTF-8 too). A plain name never starts with `"`, so a
/// string that does is always the quoted form.
pub fn json_form(path: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(path) {
        Ok(s) if !s.contains(['"', '\\']) => std::borrow::Cow::Borrowed(s),
        _ => std::borrow::Cow::Owned(c_quote(path, true)),
    }
}

/// Serialize a path in its [`json_form`] (for `#[serde(serialize_with)]`).
pub fn ser_json<S: serde::Serializer>(path: &impl AsRef<[u8]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&json_form(path.as_ref()))
}

/// Serialize a list of paths in their [`json_form`] (for `#[serde(serialize_with)]`).
pub fn ser_json_list<S: serde::Serializer, P: AsRef<[u8]>>(paths: &[P], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| json_form(p.as_ref())))
}

/// `path` as git shows it with `core.quotePath` (the default): unchanged when every byte is
/// printable ASCII other than `"` and `\`; otherwise in double quotes, with C escapes for
/// `\a \b \t \n \v \f \r \" \\` and three octal digits for every other such byte.
pub fn quote(path: &[u8]) -> std::borrow::Cow<'_, str> {
    let plain = |b: u8| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\';
    if path.iter().all(|b| plain(*b)) {
        return String::from_utf8_lossy(path);
    }
    std::borrow::Cow::Owned(c_quote(path, false))
}

/// `path` in double quotes with C escapes; with `keep_utf8`, UTF-8 text outside ASCII is kept
/// as it is (git's `core.quotePath=false`), else every byte outside printable ASCII is octal.
fn c_quote(path: &[u8], keep_utf8: bool) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    out.push('"');
    let mut rest = path;
    while !rest.is_empty() {
        let b = rest[0];
        let text = if keep_utf8 && b >= 0x80 {
            let len = match b {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => 1,
            };
            rest.get(..len).and_then(|c| std::str::from_utf8(c).ok())
        } else {
            None
        };
        if let Some(t) = text {
            out.push_str(t);
            rest = &rest[t.len()..];
            continue;
        }
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..0x7f => out.push(b as char),
            b => out.push_str(&format!("\\{b:03o}")),
        }
        rest = &rest[1..];
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(name: &str) -> bool {
        RelPath::root().join(name.into(), NameKind::Other).is_err()
    }

    #[test]
    fn json_paths_lose_nothing_and_plain_ones_stay_plain() {
        assert_eq!(json_form(b"plain/caf\xc3\xa9 n\na.txt"), "plain/caf\u{e9} n\na.txt");
        assert_eq!(json_form(b"caf\xe9"), "\"caf\\351\"");
        assert_eq!(json_form(b"a\"b"), "\"a\\\"b\"");
        assert_eq!(json_form(b"back\\slash\xff\xc3\xa9"), "\"back\\\\slash\\377\u{e9}\"");
    }

    #[test]
    fn unusual_names_are_quoted_like_git() {
        assert_eq!(quote(b"plain/name.txt"), "plain/name.txt");
        assert_eq!(quote(b"a\nb"), "\"a\\nb\"");
        assert_eq!(quote(b"\x1b[31mred"), "\"\\033[31mred\"");
        assert_eq!(quote("caf\u{e9}".as_bytes()), "\"caf\\303\\251\"");
        assert_eq!(quote(b"q\"b\\"), "\"q\\\"b\\\\\"");
        assert_eq!(quote(b"\xff"), "\"\\377\"");
    }

    #[test]
    fn git_spellings_and_relative_names_are_refused() {
        for name in [
            "..",
            ".",
            ".git",
            ".GIT",
            ".Git",
            ".git.",
            ".git ",
            "git~1",
            "GIT~1",
            ".git\u{200c}",
            "a/b",
            "",
            "a\0b",
            ".treesync",
            ".treesync-tmp.x",
        ] {
            assert!(bad(name), "{name:?} must be refused");
        }
    }

    #[test]
    fn ordinary_names_pass() {
        for name in ["a", ".gitignore", "foo.", "x:y", "with space", ".github", "..foo"] {
            assert!(!bad(name), "{name:?} must pass");
        }
        let p = RelPath::parse("a/b/.treesync").expect("nested .treesync is an ordinary name");
        assert_eq!(p.depth(), 3);
        assert_eq!(p.split_last(), (&b"a/b"[..], &b".treesync"[..]));
    }

    #[test]
    fn gitmodules_may_not_be_a_symlink() {
        assert!(RelPath::root().join(".gitmodules".into(), NameKind::Symlink).is_err());
        assert!(RelPath::root().join(".gitmodules".into(), NameKind::Other).is_ok());
    }
}
