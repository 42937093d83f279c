//! Git LFS without the network: the content of files git stores as LFS pointers, read from the
//! repository's own LFS store.
//!
//! A file tracked with `filter=lfs` is stored in git as a small pointer (`version …`,
//! `oid sha256:…`, `size …`); on checkout `git lfs smudge` replaces it by the object kept in
//! `<git dir>/lfs/objects`, downloading it first when it is not there. treesync never downloads:
//! [`check`] looks for every object a sync needs before anything is written and reports all the
//! missing ones in one [`Error::Missing`] whose hint fetches them; [`Store::stream`] then reads
//! each object in chunks, checking its size and sha256 on the way.
//!
//! ```
//! use treesync_content::lfs::Pointer;
//! let blob = b"version https://git-lfs.github.com/spec/v1\n\
//!     oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
//!     size 12345\n";
//! let pointer = Pointer::parse(blob).expect("a pointer");
//! assert_eq!(pointer.size, 12345);
//! assert_eq!(Pointer::parse(b"fn main() {}\n"), None);
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::Repo;

/// Blobs longer than this are never pointers. git-lfs's smudge filter decodes a pointer from
/// at most this many bytes, and its scanners do not even try blobs of this size
/// (`lfs.BlobSizeCutoff`); a pointer it writes is about 130 bytes.
pub const MAX_POINTER_SIZE: usize = 1024;

/// The version lines git-lfs reads (`v1Aliases` in git-lfs's `lfs/pointer.go`): the public one,
/// the pre-release one and the alpha one. They are compared as plain strings, as the spec says.
const VERSIONS: [&str; 3] =
    ["https://git-lfs.github.com/spec/v1", "https://hawser.github.com/spec/v1", "http://git-media.io/v/2"];

/// The keys of a pointer, in the order they must appear.
const KEYS: [&str; 3] = ["version", "oid", "size"];

/// Objects are read and handed to the sink in pieces of this size, so memory stays bounded
/// whatever the object's size.
const CHUNK: usize = 1 << 20;

/// A Git LFS pointer: the object that replaces the blob's text in the working tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pointer {
    /// The object's sha256, 64 lowercase hex digits.
    pub oid: String,
    /// The object's size in bytes.
    pub size: u64,
}

impl Pointer {
    /// The pointer in `blob`, or `None` when `blob` is not a valid pointer (git-lfs then checks
    /// the blob out as it is, and so should the caller).
    ///
    /// This follows git-lfs's decoder (`lfs/pointer.go`, the reference the spec names) rather
    /// than only the spec's wording, so that the same blobs are pointers for both:
    /// * at most [`MAX_POINTER_SIZE`] bytes, valid UTF-8;
    /// * after trimming whitespace around the whole text, the lines `version V`, `oid
    ///   sha256:HEX`, `size N` in that order, each `key value` with one space; `V` one of
    ///   `https://git-lfs.github.com/spec/v1`, the legacy `https://hawser.github.com/spec/v1`
    ///   or `http://git-media.io/v/2`; `HEX` exactly 64 lowercase hex digits; `N` a
    ///   non-negative decimal number (git-lfs's `strconv.ParseInt` also takes a leading `+`);
    /// * blank lines are skipped and a line may end in CRLF; the last line needs no newline
    ///   (git-lfs is that lenient; the spec's "LF-terminated" is what it writes);
    /// * any other key or a further line makes it no pointer.
    ///
    /// Two deliberate differences: an empty blob is `None` (git-lfs calls it the pointer of an
    /// empty file, whose content is the same empty blob, so writing it as is gives the same
    /// file), and so is a pointer with extension lines (`ext-0-name sha256:…`): its content
    /// needs the extension's own smudge program, which treesync does not run.
    pub fn parse(blob: &[u8]) -> Option<Pointer> {
        if blob.is_empty() || blob.len() > MAX_POINTER_SIZE {
            return None;
        }
        let text = std::str::from_utf8(blob).ok()?.trim();
        let mut values = [""; 3];
        let mut next = 0;
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let (key, value) = line.split_once(' ')?;
            if next == KEYS.len() || key != KEYS[next] {
                return None;
            }
            values[next] = value;
            next += 1;
        }
        let [version, oid, size] = values;
        if !VERSIONS.contains(&version) {
            return None;
        }
        let oid = oid.strip_prefix("sha256:").filter(|hex| is_oid(hex))?;
        let size = u64::try_from(size.parse::<i64>().ok()?).ok()?;
        Some(Pointer { oid: oid.to_owned(), size })
    }

    /// Where the object lives below a store's `objects` directory: `OID[0:2]/OID[2:4]/OID`.
    fn relative_path(&self) -> PathBuf {
        [&self.oid[..2], &self.oid[2..4], &self.oid[..]].iter().collect()
    }
}

/// 64 lowercase hex digits: a sha256 as git-lfs writes it.
fn is_oid(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A repository's Git LFS store: where `git lfs fetch` puts objects and `git lfs smudge` reads
/// them, found as git-lfs finds it, without the network.
#[derive(Debug, Clone)]
pub struct Store {
    /// `<lfs dir>/objects`.
    objects: PathBuf,
    /// The `lfs/objects` directories of the repository's alternates, looked at after `objects`.
    references: Vec<PathBuf>,
    /// The repository, for hints (`git -C <repo> lfs fetch …`).
    repo: PathBuf,
}

impl Store {
    /// The store of `repo`: `<git dir>/lfs/objects`, or `<lfs.storage>/objects` when the
    /// repository's config sets `lfs.storage` (a relative path is relative to the git dir; for a
    /// linked worktree the git dir is the main repository's). Like git-lfs, the `lfs/objects`
    /// directories next to the repository's alternate object directories (`objects/info/
    /// alternates`, `GIT_ALTERNATE_OBJECT_DIRECTORIES`; a `git clone --shared` or
    /// `--reference`) are read too, when an object is not in the repository's own store.
    ///
    /// Fails when the repository's directory is gone. A store that does not exist yet is not an
    /// error: it has no objects.
    pub fn open(repo: &Repo) -> Result<Store, Error> {
        let common = repo.common_dir();
        if let Err(source) = std::fs::metadata(&common) {
            return Err(Error::Io { path: common, source });
        }
        let lfs = match repo.config_path("lfs.storage") {
            Some(dir) if !dir.as_os_str().is_empty() => common.join(dir),
            _ => common.join("lfs"),
        };
        let env = std::env::var_os("GIT_ALTERNATE_OBJECT_DIRECTORIES");
        Ok(Store {
            objects: lfs.join("objects"),
            references: alternate_stores(&common.join("objects"), env.as_deref()),
            repo: repo.path().to_path_buf(),
        })
    }

    /// A store whose objects are in `objects` (the `objects` directory inside an LFS dir), with
    /// no alternates; `repo` is what hints tell to fetch into.
    pub fn at(objects: impl Into<PathBuf>, repo: impl Into<PathBuf>) -> Store {
        Store { objects: objects.into(), references: Vec::new(), repo: repo.into() }
    }

    /// This store, then `others` (their own objects, then their alternates') where an object
    /// is not found: a superproject's store followed by its submodules'. Objects are named by
    /// their sha256, so any store holding one holds the same content. Hints keep naming this
    /// store's repository.
    pub fn with_fallbacks<'a>(mut self, others: impl IntoIterator<Item = &'a Store>) -> Store {
        for other in others {
            for dir in std::iter::once(&other.objects).chain(&other.references) {
                if *dir != self.objects && !self.references.contains(dir) {
                    self.references.push(dir.clone());
                }
            }
        }
        self
    }

    /// The directory holding the repository's own objects (`…/lfs/objects`).
    pub fn dir(&self) -> &Path {
        &self.objects
    }

    /// The `lfs/objects` directories of the repository's alternates that exist.
    pub fn references(&self) -> &[PathBuf] {
        &self.references
    }

    /// The file holding `pointer`'s object when it is present with the pointer's size (in the
    /// repository's store, else in an alternate's); `None` otherwise, and for a pointer of size
    /// 0, whose content needs no object (see [`Store::contains`]).
    pub fn path_of(&self, pointer: &Pointer) -> Option<PathBuf> {
        if pointer.size == 0 || !is_oid(&pointer.oid) {
            return None;
        }
        let relative = pointer.relative_path();
        std::iter::once(&self.objects)
            .chain(&self.references)
            .map(|dir| dir.join(&relative))
            .find(|path| std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.len() == pointer.size))
    }

    /// Whether `pointer`'s content can be had: its object is present with the right size, or
    /// the size is 0 (git-lfs needs no object for an empty file either). Whether the content
    /// matches its sha256 shows only when it is read ([`Store::stream`]).
    pub fn contains(&self, pointer: &Pointer) -> bool {
        pointer.size == 0 || self.path_of(pointer).is_some()
    }

    /// Feed the content of `pointer`'s object to `sink` in chunks of 1 MiB, checking its size
    /// and sha256 as it goes: memory stays bounded for objects of any size.
    ///
    /// An object of the wrong size or content is [`Error::Corrupt`], naming the oid and the
    /// file; `sink` has then seen bytes of it (the caller writes to a temporary file and keeps
    /// it only on success). An absent object is [`Error::Missing`]; a failing sink is
    /// [`Error::Sink`].
    pub fn stream(&self, pointer: &Pointer, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> Result<(), Error> {
        if pointer.size == 0 {
            return Ok(());
        }
        if !is_oid(&pointer.oid) {
            return Err(Error::Corrupt {
                oid: pointer.oid.clone(),
                path: self.objects.clone(),
                what: "the pointer's oid is not 64 lowercase hex digits (a sha256)".into(),
            });
        }
        // A file of the wrong size is read all the same: the error then says what is wrong
        // with it instead of calling it missing.
        let Some(path) = self.path_of(pointer).or_else(|| self.any_file(pointer)) else {
            return Err(self.missing(vec![Missing {
                oid: pointer.oid.clone(),
                size: pointer.size,
                paths: Vec::new(),
            }]));
        };
        let corrupt = |what: String| Error::Corrupt { oid: pointer.oid.clone(), path: path.clone(), what };
        let io = |source: std::io::Error| Error::Io { path: path.clone(), source };
        let mut file = std::fs::File::open(&path).map_err(io)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut total = 0u64;
        loop {
            let n = fill(&mut file, &mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > pointer.size {
                return Err(corrupt(format!("it holds more than the pointer's {} bytes", pointer.size)));
            }
            hasher.update(&buf[..n]);
            sink(&buf[..n]).map_err(Error::Sink)?;
        }
        if total < pointer.size {
            return Err(corrupt(format!("it ends after {total} of the pointer's {} bytes (truncated?)", pointer.size)));
        }
        let got = hex(&hasher.finalize());
        if got != pointer.oid {
            return Err(corrupt(format!("its content hashes to sha256:{got}, not to the pointer's oid")));
        }
        Ok(())
    }

    /// The first file named like `pointer`'s object, whatever its size.
    fn any_file(&self, pointer: &Pointer) -> Option<PathBuf> {
        let relative = pointer.relative_path();
        std::iter::once(&self.objects)
            .chain(&self.references)
            .map(|dir| dir.join(&relative))
            .find(|path| std::fs::metadata(path).is_ok_and(|meta| meta.is_file()))
    }

    /// [`Error::Missing`] for this store.
    fn missing(&self, missing: Vec<Missing>) -> Error {
        Error::Missing { store: self.objects.clone(), missing, repo: self.repo.clone() }
    }
}

/// Read into `buf` until it is full or the file ends; the number of bytes read.
fn fill(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        write!(s, "{b:02x}").expect("writing to a String cannot fail");
        s
    })
}

/// The existing `lfs/objects` directories beside the alternate object directories of the
/// repository whose object directory is `objects` (as git-lfs's `resolveReferenceDirs`): those
/// in `env` (`GIT_ALTERNATE_OBJECT_DIRECTORIES`, `:`-separated), then those listed in
/// `objects/info/alternates` (relative ones are relative to `objects`, as git reads them).
fn alternate_stores(objects: &Path, env: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = env.map(|v| std::env::split_paths(v).collect()).unwrap_or_default();
    if let Ok(list) = std::fs::read_to_string(objects.join("info").join("alternates")) {
        for line in list.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(dir) = unquote(line) else { continue };
            dirs.push(objects.join(dir));
        }
    }
    dirs.into_iter()
        .filter_map(|alternate| {
            let store = alternate.parent()?.join("lfs").join("objects");
            store.is_dir().then_some(store)
        })
        .collect()
}

/// A line of `objects/info/alternates`: as is, or C-quoted when it starts with `"` (git quotes
/// paths with unusual characters that way); `None` when the quoting is broken.
fn unquote(line: &str) -> Option<String> {
    let Some(quoted) = line.strip_prefix('"') else {
        return Some(line.to_owned());
    };
    let mut out = Vec::new();
    let mut bytes = quoted.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'"' => return String::from_utf8(out).ok(),
            b'\\' => {
                let escaped = match bytes.next()? {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'r' => b'\r',
                    b'v' => 0x0b,
                    d @ b'0'..=b'7' => {
                        let (d2, d3) = (bytes.next()?, bytes.next()?);
                        let digit = |d: u8| d.is_ascii_digit().then(|| d - b'0').filter(|d| *d < 8);
                        (digit(d)? << 6) | (digit(d2)? << 3) | digit(d3)?
                    }
                    other => other,
                };
                out.push(escaped);
            }
            _ => out.push(b),
        }
    }
    None
}

/// An object that is not in the store, with the files that need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The object's sha256.
    pub oid: String,
    /// Its size in bytes.
    pub size: u64,
    /// The files (tree paths) whose pointer names it, in the order they were asked for.
    pub paths: Vec<String>,
}

/// Reading Git LFS objects failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Objects the files need are not in the store (all of them, found before writing).
    #[error("{}", missing_message(store, missing, repo))]
    Missing {
        /// The store looked in (its `objects` directory).
        store: PathBuf,
        /// The missing objects.
        missing: Vec<Missing>,
        /// The repository (where `git lfs fetch` puts them).
        repo: PathBuf,
    },
    /// An object in the store does not have its pointer's size or sha256.
    #[error(
        "Git LFS object {oid} at {} is corrupt: {what}\n  hint: `git lfs fsck --objects` in the repository moves corrupt objects aside (to lfs/bad); `git lfs fetch` then downloads them again",
        path.display()
    )]
    Corrupt {
        /// The object's sha256 (as the pointer says).
        oid: String,
        /// The file read (or the store, when the pointer itself is wrong).
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The store or an object in it could not be read.
    #[error("cannot read {}: {source}\n  hint: check that the repository and its lfs directory are there and readable", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The sink (the backend writing the file) failed.
    #[error("{0}")]
    Sink(#[source] std::io::Error),
}

/// How many missing objects [`Error::Missing`] lists; it counts the rest.
const LISTED: usize = 10;

/// The text of [`Error::Missing`].
fn missing_message(store: &Path, missing: &[Missing], repo: &Path) -> String {
    use std::fmt::Write;
    let plural = if missing.len() == 1 { "" } else { "s" };
    let mut s = format!("{} Git LFS object{plural} missing from {}:", missing.len(), store.display());
    for m in missing.iter().take(LISTED) {
        let unit = if m.size == 1 { "byte" } else { "bytes" };
        write!(s, "\n  {} ({} {unit})", m.oid, m.size).expect("writing to a String cannot fail");
        if let Some(first) = m.paths.first() {
            write!(s, " for {first}").expect("writing to a String cannot fail");
            if m.paths.len() > 1 {
                write!(s, " and {} more file{}", m.paths.len() - 1, if m.paths.len() == 2 { "" } else { "s" })
                    .expect("writing to a String cannot fail");
            }
        }
    }
    if missing.len() > LISTED {
        write!(s, "\n  … and {} more", missing.len() - LISTED).expect("writing to a String cannot fail");
    }
    write!(
        s,
        "\n  hint: fetch them into the repository with `git -C {} lfs fetch <remote> <rev>` (or `--all`), or sync the pointer files with --lfs=pointers",
        repo.display()
    )
    .expect("writing to a String cannot fail");
    s
}

/// The check before any write: every pointer's object is in `store` (see [`Store::contains`]).
/// `wanted` holds each pointer with the path of the file that needs it; all missing objects
/// are reported together in one [`Error::Missing`], each once with all its paths.
pub fn check(store: &Store, wanted: impl IntoIterator<Item = (Pointer, String)>) -> Result<(), Error> {
    let mut missing: Vec<Missing> = Vec::new();
    // By oid and size: two pointers to one oid with different sizes cannot both be right, and
    // the object is looked at for each (it is present only with the pointer's size).
    let mut index: std::collections::HashMap<(String, u64), usize> = std::collections::HashMap::new();
    let mut present: std::collections::HashSet<(String, u64)> = std::collections::HashSet::new();
    for (pointer, path) in wanted {
        let key = (pointer.oid.clone(), pointer.size);
        if let Some(&i) = index.get(&key) {
            missing[i].paths.push(path);
            continue;
        }
        if present.contains(&key) {
            continue;
        }
        if store.contains(&pointer) {
            present.insert(key);
        } else {
            index.insert(key, missing.len());
            missing.push(Missing { oid: pointer.oid, size: pointer.size, paths: vec![path] });
        }
    }
    if missing.is_empty() { Ok(()) } else { Err(store.missing(missing)) }
}

/// What a sync writes for a file that git stores as an LFS pointer (config key `lfs`, flag
/// `--lfs`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LfsMode {
    /// `content`: the file's real content, from the repository's LFS store (what `git
    /// checkout` with git-lfs installed writes). Every object must be there before the sync
    /// writes anything.
    #[default]
    Content,
    /// `pointers`: the pointer files as git stores them (what `git checkout` writes without
    /// git-lfs, or with `GIT_LFS_SKIP_SMUDGE=1`); needs no LFS store.
    Pointers,
}

impl LfsMode {
    /// The mode's name: `content` or `pointers`.
    pub fn as_str(self) -> &'static str {
        match self {
            LfsMode::Content => "content",
            LfsMode::Pointers => "pointers",
        }
    }
}

impl std::fmt::Display for LfsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`LfsMode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown LFS mode {given:?}\n  hint: use content (the files' content from the repository's LFS store) or pointers (the pointer files as git stores them)"
)]
pub struct ParseLfsModeError {
    /// What was given.
    pub given: String,
}

impl std::str::FromStr for LfsMode {
    type Err = ParseLfsModeError;

    fn from_str(s: &str) -> Result<LfsMode, ParseLfsModeError> {
        match s {
            "content" => Ok(LfsMode::Content),
            "pointers" => Ok(LfsMode::Pointers),
            _ => Err(ParseLfsModeError { given: s.to_owned() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OID: &str = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";

    fn pointer_text(version: &str, oid: &str, size: &str) -> String {
        format!("version {version}\noid sha256:{oid}\nsize {size}\n")
    }

    fn parse(text: &str) -> Option<Pointer> {
        Pointer::parse(text.as_bytes())
    }

    #[test]
    fn a_canonical_pointer_parses() {
        let p = parse(&pointer_text("https://git-lfs.github.com/spec/v1", OID, "12345")).expect("a pointer");
        assert_eq!(p, Pointer { oid: OID.into(), size: 12345 });
    }

    #[test]
    fn legacy_versions_parse_and_others_do_not() {
        for version in ["https://hawser.github.com/spec/v1", "http://git-media.io/v/2"] {
            assert!(parse(&pointer_text(version, OID, "1")).is_some(), "{version}");
        }
        for version in ["https://git-lfs.github.com/spec/v2", "https://GIT-LFS.github.com/spec/v1", "", "x"] {
            assert_eq!(parse(&pointer_text(version, OID, "1")), None, "{version:?}");
        }
    }

    #[test]
    fn the_oid_is_64_lowercase_hex_digits_of_sha256() {
        assert_eq!(parse(&pointer_text("https://git-lfs.github.com/spec/v1", &OID[1..], "1")), None, "63 digits");
        assert_eq!(parse(&pointer_text("https://git-lfs.github.com/spec/v1", &format!("{OID}0"), "1")), None);
        assert_eq!(parse(&pointer_text("https://git-lfs.github.com/spec/v1", &OID.to_uppercase(), "1")), None);
        let not_hex = format!("g{}", &OID[1..]);
        assert_eq!(parse(&pointer_text("https://git-lfs.github.com/spec/v1", &not_hex, "1")), None);
        let sha1 = format!("version https://git-lfs.github.com/spec/v1\noid sha1:{OID}\nsize 1\n");
        assert_eq!(parse(&sha1), None);
        let no_method = format!("version https://git-lfs.github.com/spec/v1\noid {OID}\nsize 1\n");
        assert_eq!(parse(&no_method), None);
    }

    #[test]
    fn the_size_is_a_non_negative_decimal_as_git_lfs_reads_it() {
        let v = "https://git-lfs.github.com/spec/v1";
        assert_eq!(parse(&pointer_text(v, OID, "0")).map(|p| p.size), Some(0));
        assert_eq!(parse(&pointer_text(v, OID, "+7")).map(|p| p.size), Some(7), "strconv.ParseInt takes a + sign");
        assert_eq!(parse(&pointer_text(v, OID, "9223372036854775807")).map(|p| p.size), Some(i64::MAX as u64));
        for bad in ["-1", "", "12a", " 1", "0x10", "9223372036854775808", "1_000"] {
            assert_eq!(parse(&pointer_text(v, OID, bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_come_in_order_with_one_space_and_nothing_else() {
        let v = "https://git-lfs.github.com/spec/v1";
        let swapped = format!("version {v}\nsize 1\noid sha256:{OID}\n");
        assert_eq!(parse(&swapped), None);
        let extra = format!("{}x y\n", pointer_text(v, OID, "1"));
        assert_eq!(parse(&extra), None);
        let unknown = format!("version {v}\nname a\noid sha256:{OID}\nsize 1\n");
        assert_eq!(parse(&unknown), None);
        let two_spaces = format!("version  {v}\noid sha256:{OID}\nsize 1\n");
        assert_eq!(parse(&two_spaces), None);
        let no_size = format!("version {v}\noid sha256:{OID}\n");
        assert_eq!(parse(&no_size), None);
        let blank_key = format!("version {v}\n \noid sha256:{OID}\nsize 1\n");
        assert_eq!(parse(&blank_key), None, "a line of one space is a line with an empty key");
    }

    #[test]
    fn pointers_with_extensions_are_not_read() {
        let v = "https://git-lfs.github.com/spec/v1";
        let ext = format!("version {v}\next-0-foo sha256:{OID}\noid sha256:{OID}\nsize 1\n");
        assert_eq!(parse(&ext), None);
    }

    #[test]
    fn whitespace_is_read_as_leniently_as_git_lfs_does() {
        let v = "https://git-lfs.github.com/spec/v1";
        let want = Some(Pointer { oid: OID.into(), size: 3 });
        assert_eq!(parse(&format!("version {v}\noid sha256:{OID}\nsize 3")), want, "no final newline");
        assert_eq!(parse(&format!("version {v}\noid sha256:{OID}\nsize 3 \t\n")), want, "the whole text is trimmed");
        assert_eq!(parse(&format!("version {v}\r\noid sha256:{OID}\r\nsize 3\r\n")), want, "CRLF");
        assert_eq!(parse(&format!("\n  version {v}\n\noid sha256:{OID}\nsize 3\n\n\n")), want, "blank lines");
    }

    #[test]
    fn empty_large_and_binary_blobs_are_not_pointers() {
        assert_eq!(Pointer::parse(b""), None);
        assert_eq!(Pointer::parse(b"hello\n"), None);
        assert_eq!(Pointer::parse(&[0xff, 0xfe, 0x00]), None);
        let v = "https://git-lfs.github.com/spec/v1";
        let text = pointer_text(v, OID, "1");
        let fits = format!("{text}{}", "\n".repeat(MAX_POINTER_SIZE - text.len()));
        assert!(parse(&fits).is_some(), "{} bytes may be a pointer", fits.len());
        let over = format!("{fits}\n");
        assert_eq!(parse(&over), None, "{} bytes are too many", over.len());
    }

    #[test]
    fn objects_are_sharded_by_their_first_four_digits() {
        let p = Pointer { oid: OID.into(), size: 1 };
        assert_eq!(p.relative_path(), Path::new("4d/7a").join(OID));
    }

    #[test]
    fn the_missing_error_lists_ten_objects_counts_the_rest_and_hints() {
        let missing: Vec<Missing> = (0..12)
            .map(|i| Missing {
                oid: format!("{i:064x}"),
                size: i,
                paths: (0..=i).map(|j| format!("dir/f{i}-{j}.bin")).collect(),
            })
            .collect();
        let err = Error::Missing { store: "/r/.git/lfs/objects".into(), missing, repo: "/r".into() };
        let text = err.to_string();
        assert!(text.starts_with("12 Git LFS objects missing from /r/.git/lfs/objects:"), "{text}");
        assert!(text.contains(&format!("{:064x} (0 bytes) for dir/f0-0.bin\n", 0)), "{text}");
        assert!(text.contains(&format!("{:064x} (1 byte) for dir/f1-0.bin and 1 more file\n", 1)), "{text}");
        assert!(text.contains(&format!("{:064x} (2 bytes) for dir/f2-0.bin and 2 more files", 2)), "{text}");
        assert!(text.contains(&format!("{:064x}", 9)), "{text}");
        assert!(!text.contains(&format!("{:064x}", 10)), "the 11th is not listed: {text}");
        assert!(text.contains("… and 2 more"), "{text}");
        assert!(text.ends_with(
            "hint: fetch them into the repository with `git -C /r lfs fetch <remote> <rev>` (or `--all`), or sync the pointer files with --lfs=pointers"
        ));
    }

    #[test]
    fn check_reports_each_missing_object_once_with_all_its_paths() {
        let dir = std::env::temp_dir().join(format!("treesync-lfs-unit-{}", std::process::id()));
        let store = Store::at(dir.join("objects"), &dir);
        let a = Pointer { oid: OID.into(), size: 5 };
        let b = Pointer { oid: "b".repeat(64), size: 6 };
        let empty = Pointer { oid: "e".repeat(64), size: 0 };
        let wanted = [(a.clone(), "x".into()), (b, "y".into()), (a, "z".into()), (empty, "e".into())];
        let Err(Error::Missing { missing, .. }) = check(&store, wanted) else { panic!("missing objects") };
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert_eq!(missing[0].paths, ["x", "z"]);
        assert_eq!(missing[1].paths, ["y"]);
        assert!(check(&store, []).is_ok());
    }

    #[test]
    fn alternates_lines_may_be_c_quoted() {
        assert_eq!(unquote("/srv/a.git/objects").as_deref(), Some("/srv/a.git/objects"));
        assert_eq!(unquote(r#""/srv/a\"b\\c\303\251/objects""#).as_deref(), Some("/srv/a\"b\\cé/objects"));
        assert_eq!(unquote(r#""/srv/unterminated"#), None);
    }

    #[test]
    fn lfs_mode_reads_and_prints_its_names() {
        for mode in [LfsMode::Content, LfsMode::Pointers] {
            assert_eq!(mode.to_string().parse::<LfsMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).expect("serializes");
            assert_eq!(json, format!("\"{mode}\""));
            assert_eq!(serde_json::from_str::<LfsMode>(&json).expect("deserializes"), mode);
        }
        assert_eq!(LfsMode::default(), LfsMode::Content);
        let err = "pointer".parse::<LfsMode>().expect_err("not a mode");
        assert!(err.to_string().contains("hint: use content"), "{err}");
    }
}
