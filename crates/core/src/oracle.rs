//! `git` as the judge of a target's bytes (`verify --oracle git`): what git itself writes for
//! the synced tree, made by the `git` program in a scratch directory, independently of
//! treesync's conversion code.
//!
//! How: a temporary index of the synced tree (`git read-tree`), then `git checkout-index` of
//! the files to judge into a scratch work tree — git's own checkout code, streaming filters,
//! `ident` rules and all — or, for an `--export` target, `git archive` of the commit unpacked by
//! `tar`. git reads the repository's configuration as a checkout would, with the conversion
//! settings the target's state records laid over it (`core.autocrlf`, `core.eol`,
//! `core.attributesFile`, the filter drivers, the LFS mode), so a setting changed since the
//! sync does not count as drift. Each file git wrote is read back and remembered by its size
//! and blob id; the scratch directory is removed.
//!
//! Costs: git writes every judged file once into the system's temporary directory (its size
//! on disk), and treesync keeps a path, a size and an id per file.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gix_hash::ObjectId;

use crate::convert::Settings;

/// Asking git failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The `git` program is not there or does not run.
    #[error(
        "`--oracle git` runs the git program, which could not be started: {0}\n  hint: install git (`apt-get install git`) or verify without --oracle"
    )]
    NoGit(std::io::Error),
    /// LFS content is judged by git-lfs, which is not installed.
    #[error(
        "the target holds Git LFS content, which git writes through git-lfs, and `git lfs version` fails\n  hint: install git-lfs (`apt-get install git-lfs`) or verify without --oracle"
    )]
    NoGitLfs,
    /// git failed.
    #[error(
        "`git {what}` failed for the oracle: {stderr}\n  hint: run it by hand in {repo} to see why; verify without --oracle meanwhile"
    )]
    Git {
        /// The command.
        what: String,
        /// The repository.
        repo: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// The repository's `info/attributes` changed since the sync (git would read the new one).
    #[error(
        "the repository's info/attributes changed since the target was synced, so git would convert with other attributes than the sync did\n  hint: sync again (then verify), or verify without --oracle"
    )]
    InfoAttributesChanged,
    /// A target this oracle cannot judge.
    #[error("--oracle git cannot judge {0}\n  hint: verify without --oracle")]
    Unsupported(&'static str),
    /// The scratch directory.
    #[error(
        "the oracle's scratch directory {path}: {source}\n  hint: the system's temporary directory ($TMPDIR) must be writable and hold a copy of the tree"
    )]
    Scratch {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What git writes for each judged file: its size and the blob id of its bytes.
#[derive(Debug, Default)]
pub struct Written {
    /// By path (relative to the target, `/`-separated).
    pub files: HashMap<Vec<u8>, (u64, ObjectId)>,
    /// `git --version`.
    pub git: String,
}

/// A directory removed (with what it holds) when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the tree to judge is.
pub struct Tree<'a> {
    /// The repository's git directory.
    pub git_dir: &'a Path,
    /// The synced commit.
    pub commit: ObjectId,
    /// The synced tree (the commit's, or one of its directories').
    pub tree: ObjectId,
    /// The directory of a subtree sync.
    pub path: Option<&'a str>,
    /// The conversion settings the state records (`None`: files as blobs are).
    pub settings: Option<&'a Settings>,
    /// Whether some file to judge is Git LFS content ([`crate::lfs::LfsMode::Content`]).
    pub lfs_content: bool,
}

/// What git writes for `paths` (regular files of `tree`) on checkout, or in `git archive` for
/// an `--export` target.
pub fn written(tree: &Tree<'_>, paths: &[&[u8]]) -> Result<Written, Error> {
    let version = Command::new("git").arg("--version").output().map_err(Error::NoGit)?;
    let git = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let export = tree.settings.is_some_and(|s| s.export);
    if export && tree.path.is_some() {
        return Err(Error::Unsupported("an --export target synced from a directory of the commit (REV:PATH)"));
    }
    if tree.lfs_content && !Command::new("git").args(["lfs", "version"]).output().is_ok_and(|o| o.status.success()) {
        return Err(Error::NoGitLfs);
    }
    if let Some(s) = tree.settings {
        let now = std::fs::read(tree.git_dir.join("info").join("attributes")).ok();
        if now.map(|b| String::from_utf8_lossy(&b).into_owned()) != s.info_attributes {
            return Err(Error::InfoAttributesChanged);
        }
    }
    let base = std::env::temp_dir().join(format!(
        "treesync-oracle-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    ));
    let scratch_err = |source| Error::Scratch { path: base.clone(), source };
    std::fs::create_dir(&base).map_err(scratch_err)?;
    let scratch = Scratch(base.clone());
    let work = scratch.0.join("tree");
    std::fs::create_dir(&work).map_err(scratch_err)?;
    let config = config_args(tree, &scratch.0).map_err(scratch_err)?;
    // git runs in the scratch tree: the repository by an absolute path.
    let git_dir = std::path::absolute(tree.git_dir).map_err(scratch_err)?;
    let git_cmd = |args: &[&str]| {
        let mut c = Command::new("git");
        c.args(&config)
            .args(args)
            .env("GIT_DIR", &git_dir)
            .env("GIT_WORK_TREE", &work)
            .env("GIT_INDEX_FILE", scratch.0.join("index"))
            .current_dir(&work)
            .stdin(Stdio::null());
        c
    };
    // git's messages go to a file: a pipe nobody reads while git works fills up (a tree of
    // thousands of files git cannot re-encode prints an error for each) and stops git.
    let messages = scratch.0.join("stderr");
    let stderr_file = || std::fs::File::create(&messages).map(Stdio::from).map_err(scratch_err);
    // The end says why it failed; the list of refusals before it is not read.
    let read_messages = || tail(&messages, 4096).unwrap_or_default();
    let fail = |what: &str, stderr: &[u8]| Error::Git {
        what: what.to_string(),
        repo: tree.git_dir.to_path_buf(),
        stderr: String::from_utf8_lossy(stderr).trim().to_string(),
    };
    if export {
        // `git archive` (its attributes from the commit), unpacked by tar.
        let mut archive = git_cmd(&["archive", "--format=tar", &tree.commit.to_string()]);
        let mut child = archive.stdout(Stdio::piped()).stderr(stderr_file()?).spawn().map_err(Error::NoGit)?;
        let out = child.stdout.take().expect("piped");
        let untar = Command::new("tar")
            .args(["-x", "-f", "-", "-C"])
            .arg(&work)
            .stdin(out)
            .output()
            .map_err(|e| fail("archive | tar -x", e.to_string().as_bytes()))?;
        let archived = child.wait().map_err(Error::NoGit)?;
        if !archived.success() {
            return Err(fail("archive", &read_messages()));
        }
        if !untar.status.success() {
            return Err(fail("archive | tar -x", &untar.stderr));
        }
    } else {
        let read = git_cmd(&["read-tree", &tree.tree.to_string()]).output().map_err(Error::NoGit)?;
        if !read.status.success() {
            return Err(fail("read-tree", &read.stderr));
        }
        let mut checkout = git_cmd(&["checkout-index", "-f", "-q", "-z", "--stdin"]);
        let mut child = checkout
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr_file()?)
            .spawn()
            .map_err(Error::NoGit)?;
        let mut stdin = std::io::BufWriter::new(child.stdin.take().expect("piped"));
        let feed = paths
            .iter()
            .try_for_each(|p| stdin.write_all(p).and_then(|()| stdin.write_all(b"\0")))
            .and_then(|()| stdin.flush());
        drop(stdin);
        let done = child.wait().map_err(Error::NoGit)?;
        if let Err(e) = feed {
            let said = String::from_utf8_lossy(&read_messages()).into_owned();
            return Err(fail("checkout-index", format!("{e}: {said}").as_bytes()));
        }
        if !done.success() {
            return Err(fail("checkout-index", &read_messages()));
        }
    }
    let mut files = HashMap::with_capacity(paths.len());
    for p in paths {
        let file = work.join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p));
        match std::fs::symlink_metadata(&file) {
            Ok(m) if m.is_file() => {
                files.insert(p.to_vec(), (m.len(), blob_id_of(&file, m.len()).map_err(scratch_err)?));
            }
            // Not written by git (left out of an archive): nothing to judge it by.
            _ => {}
        }
    }
    Ok(Written { files, git })
}

/// The blob id of the `len` bytes of `file`, read in pieces (an LFS object may not fit in
/// memory).
fn blob_id_of(file: &Path, len: u64) -> std::io::Result<ObjectId> {
    use std::io::Read as _;
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
    hasher.update(&gix_object::encode::loose_header(gix_object::Kind::Blob, len));
    let mut f = std::fs::File::open(file)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        hasher.update(&buf[..n]);
    }
    if read != len {
        return Err(std::io::Error::other(format!("{} changed size while it was read", file.display())));
    }
    hasher.try_finalize().map_err(std::io::Error::other)
}

/// The last `max` bytes of `file`.
fn tail(file: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _};
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    f.seek(std::io::SeekFrom::Start(len.saturating_sub(max)))?;
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// `-c key=value` arguments that make git convert with the state's settings.
fn config_args(tree: &Tree<'_>, scratch: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut set = |k: &str, v: &str| {
        out.push("-c".to_string());
        out.push(format!("{k}={v}"));
    };
    // The target's files are compared, never git's own repository state.
    set("core.bare", "false");
    let Some(s) = tree.settings else {
        // Written as blobs are: no conversion at all.
        set("core.autocrlf", "false");
        set("core.attributesFile", "/dev/null");
        return Ok(out);
    };
    set("core.autocrlf", s.autocrlf.as_deref().unwrap_or("false"));
    set("core.eol", s.eol.as_deref().unwrap_or("native"));
    let attributes = scratch.join("attributes");
    std::fs::write(&attributes, s.attributes_file.as_deref().unwrap_or_default())?;
    set("core.attributesFile", &attributes.to_string_lossy());
    for (name, d) in &s.drivers {
        if let Some(c) = &d.smudge {
            set(&format!("filter.{name}.smudge"), c);
        }
        if let Some(c) = &d.process {
            set(&format!("filter.{name}.process"), c);
        }
        set(&format!("filter.{name}.required"), if d.required { "true" } else { "false" });
    }
    match s.lfs {
        // Pointer files are written as they are.
        crate::lfs::LfsMode::Pointers => {
            set("filter.lfs.process", "");
            set("filter.lfs.smudge", "");
            set("filter.lfs.required", "false");
        }
        crate::lfs::LfsMode::Content if tree.lfs_content && !s.drivers.contains_key("lfs") => {
            set("filter.lfs.process", "git-lfs filter-process");
            set("filter.lfs.required", "true");
        }
        crate::lfs::LfsMode::Content => {}
    }
    Ok(out)
}
