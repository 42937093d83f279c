//! git-sync's on-disk contract: ROOT is a git repository (branch `git-sync`, no files checked
//! out), each synced commit a linked worktree `ROOT/.worktrees/HASH`, and LINK a relative
//! symlink to the current one, switched with one `rename`.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Instant, SystemTime};

use crate::git::{Git, GitError};
use crate::log::Log;

/// `ROOT/.worktrees`.
pub const WORKTREES: &str = ".worktrees";
/// The temporary link made next to LINK and renamed over it.
const TMP_LINK: &str = "tmp-link";

/// The root and the link, resolved.
#[derive(Debug, Clone)]
pub struct Layout {
    /// ROOT, symlinks resolved.
    pub root: PathBuf,
    /// LINK, absolute.
    pub link: PathBuf,
}

/// Something about the root went wrong.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A git command.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A file operation.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// LINK exists and is not a symlink.
    #[error("{path} is not a symlink (it must be git-sync's link to the current worktree): remove or rename it")]
    NotALink {
        /// LINK.
        path: PathBuf,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LayoutError + 'a {
    move |source| LayoutError::Io { what, path: path.to_path_buf(), source }
}

impl Layout {
    /// Create ROOT if missing (0775, umask applies) and resolve its symlinks; LINK against it.
    pub fn open(root: &Path, link: &str) -> Result<Layout, LayoutError> {
        std::fs::DirBuilder::new().recursive(true).mode(0o775).create(root).map_err(io("create", root))?;
        let root = std::fs::canonicalize(root).map_err(io("resolve", root))?;
        let link = clean(&root.join(link));
        Ok(Layout { root, link })
    }

    /// `ROOT/.worktrees`.
    pub fn worktrees(&self) -> PathBuf {
        self.root.join(WORKTREES)
    }

    /// `ROOT/.worktrees/HASH`.
    pub fn worktree(&self, hash: &str) -> PathBuf {
        self.worktrees().join(hash)
    }

    /// `ROOT/.git/worktrees/HASH`: the worktree's administrative directory.
    pub fn admin(&self, hash: &str) -> PathBuf {
        self.root.join(".git/worktrees").join(hash)
    }

    /// Make sure ROOT holds a usable repository, as git-sync's `initRepo` does: an empty or
    /// missing root is initialized; one that is not the top of its own repository (inside
    /// another one, or not a repository), whose repository fails `git fsck --connectivity-only`
    /// (when `fsck`), or with a `shallow.lock` left behind, is emptied (the root directory itself
    /// is kept: it may be a mount point) and initialized. Then (when `setup`, or after an
    /// initialization) the repository's settings and the `origin` remote.
    pub async fn ensure_repo(
        &self,
        git: &Git,
        repo_url: &str,
        fsck: bool,
        setup: bool,
        deadline: Option<Instant>,
        log: &Log,
    ) -> Result<(), LayoutError> {
        let empty = std::fs::read_dir(&self.root).map_err(io("read", &self.root))?.next().is_none();
        let mut init = empty;
        if !empty && let Some(problem) = self.sanity(git, fsck, deadline).await {
            log.error(
                "repo directory failed checks or was empty",
                &problem,
                &[("path", self.root.display().to_string())],
            );
            log.info(0, "wiping unusable root directory", &[("path", self.root.display().to_string())]);
            self.wipe().map_err(io("can't wipe unusable root directory", &self.root))?;
            init = true;
        }
        if init {
            log.info(0, "initializing repo directory", &[("path", self.root.display().to_string())]);
            git.run(&self.root, &["init", "-q", "-b", "git-sync"], deadline).await?;
            if let Some(problem) = self.sanity(git, false, deadline).await {
                return Err(LayoutError::Io {
                    what: "can't initialize",
                    path: self.root.clone(),
                    source: std::io::Error::other(problem),
                });
            }
        }
        if !init && !setup {
            return Ok(());
        }
        // Linked worktrees made by hard links share inodes (a link moves a file's ctime) and,
        // made by reflinks, are new inodes: git compares what a copy keeps (mtime, size, mode).
        for (k, v) in [("core.trustctime", "false"), ("core.checkStat", "minimal")] {
            git.run(&self.root, &["config", "--local", k, v], deadline).await?;
        }
        // Each worktree's .treesync (treesync's state) is not git's business.
        let exclude = self.root.join(".git/info/exclude");
        let text = std::fs::read_to_string(&exclude).unwrap_or_default();
        if !text.lines().any(|l| l.trim() == "/.treesync/") {
            std::fs::create_dir_all(self.root.join(".git/info")).map_err(io("create", &exclude))?;
            let mut text = text;
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("# treesync's state in each worktree (treesync git-sync)\n/.treesync/\n");
            std::fs::write(&exclude, text).map_err(io("write", &exclude))?;
        }
        match git.run(&self.root, &["remote", "get-url", "origin"], deadline).await {
            Ok(url) if url == repo_url => {}
            Ok(_) => drop(git.run(&self.root, &["remote", "set-url", "origin", repo_url], deadline).await?),
            Err(e) if e.stderr.contains("No such remote") => {
                git.run(&self.root, &["remote", "add", "origin", repo_url], deadline).await?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// `ROOT/.git/treesync-clean`: present while the repository is known whole (after a
    /// successful sync, until the next command that writes it).
    fn clean_marker(&self) -> PathBuf {
        self.root.join(".git/treesync-clean")
    }

    /// Whether the last process left the repository whole (its last git command that writes the
    /// repository finished and a sync succeeded after it): then `git fsck` at start is skipped.
    pub fn was_left_clean(&self) -> bool {
        self.clean_marker().is_file()
    }

    /// Say the repository is whole (after a successful sync).
    pub fn mark_clean(&self) {
        let _ = std::fs::write(self.clean_marker(), b"");
    }

    /// Before a git command that writes the repository: no longer known whole.
    pub fn unmark_clean(&self) {
        let _ = std::fs::remove_file(self.clean_marker());
    }

    /// What is wrong with ROOT's repository, if anything.
    async fn sanity(&self, git: &Git, fsck: bool, deadline: Option<Instant>) -> Option<String> {
        match git.run(&self.root, &["rev-parse", "--show-toplevel"], deadline).await {
            Ok(top) if Path::new(&top) == self.root => {}
            Ok(top) => return Some(format!("repo directory is under another repo ({top})")),
            Err(e) => return Some(e.to_string()),
        }
        if fsck && let Err(e) = git.run(&self.root, &["fsck", "--no-progress", "--connectivity-only"], deadline).await {
            return Some(e.to_string());
        }
        if self.root.join(".git/shallow.lock").exists() {
            return Some("repo directory has a leftover .git/shallow.lock".into());
        }
        None
    }

    /// Remove every entry of ROOT (never following a symlink), keeping ROOT itself.
    fn wipe(&self) -> std::io::Result<()> {
        for e in std::fs::read_dir(&self.root)? {
            let p = e?.path();
            remove_any(&p)?;
        }
        Ok(())
    }

    /// The commit LINK points at (the last component of its target), `None` if there is no
    /// LINK.
    pub fn current(&self) -> Result<Option<String>, LayoutError> {
        match std::fs::read_link(&self.link) {
            Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(LayoutError::NotALink { path: self.link.clone() }),
            Err(e) => Err(LayoutError::Io { what: "read the link", path: self.link.clone(), source: e }),
        }
    }

    /// Whether LINK points at `ROOT/.worktrees/HASH` itself (not an older layout).
    pub fn points_at(&self, hash: &str) -> bool {
        let Ok(target) = std::fs::read_link(&self.link) else { return false };
        let dir = self.link.parent().unwrap_or(Path::new("/"));
        clean(&dir.join(target)) == self.worktree(hash)
    }

    /// Point LINK at `ROOT/.worktrees/HASH`: a relative symlink made as `tmp-link` next to it
    /// (a stale one removed first) and renamed over it.
    pub fn publish(&self, hash: &str) -> Result<(), LayoutError> {
        let dir = self.link.parent().unwrap_or(Path::new("/"));
        std::fs::DirBuilder::new().recursive(true).mode(0o775).create(dir).map_err(io("create", dir))?;
        let target = relative(dir, &self.worktree(hash));
        let tmp = dir.join(TMP_LINK);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LayoutError::Io { what: "remove", path: tmp, source: e }),
        }
        std::os::unix::fs::symlink(&target, &tmp).map_err(io("create", &tmp))?;
        std::fs::rename(&tmp, &self.link).map_err(io("rename", &self.link))
    }

    /// Set the mtime of `ROOT/.worktrees/HASH` to now (the stale timer starts), not following
    /// a symlink.
    pub fn touch_worktree(&self, hash: &str) {
        let now = rustix::fs::Timespec { tv_sec: unix_now(), tv_nsec: 0 };
        let times = rustix::fs::Timestamps { last_access: now, last_modification: now };
        let _ =
            rustix::fs::utimensat(rustix::fs::CWD, self.worktree(hash), &times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
    }

    /// The entries of `ROOT/.worktrees` other than `keep`, with their mtimes.
    pub fn others(&self, keep: &str) -> Vec<(String, SystemTime)> {
        let Ok(entries) = std::fs::read_dir(self.worktrees()) else { return vec![] };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let mtime = std::fs::symlink_metadata(e.path()).and_then(|m| m.modified()).ok()?;
                (name != keep).then_some((name, mtime))
            })
            .collect()
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Remove `p` whatever it is, never following a symlink (`remove_dir_all` removes a link, not
/// what it points at, and walks with `openat`).
pub fn remove_any(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// `p` with `.` and `..` resolved lexically.
fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The path of `to` relative to the directory `from` (both absolute and clean).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (f, t): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links() {
        assert_eq!(relative(Path::new("/r"), Path::new("/r/.worktrees/h")), Path::new(".worktrees/h"));
        assert_eq!(relative(Path::new("/r/sub"), Path::new("/r/.worktrees/h")), Path::new("../.worktrees/h"));
        assert_eq!(relative(Path::new("/x"), Path::new("/r/.worktrees/h")), Path::new("../r/.worktrees/h"));
    }

    #[test]
    fn publish_and_read_the_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let l = Layout::open(&dir.path().join("root"), "sub/link").expect("layout");
        assert_eq!(l.current().expect("no link"), None);
        std::fs::write(l.link.parent().map(|d| d.join(TMP_LINK)).unwrap_or_default(), "").ok();
        l.publish("abc").expect("publish");
        assert_eq!(l.current().expect("link"), Some("abc".into()));
        assert_eq!(std::fs::read_link(&l.link).expect("link"), Path::new("../.worktrees/abc"));
        assert!(l.points_at("abc"));
        std::fs::remove_file(&l.link).expect("rm");
        std::fs::create_dir(&l.link).expect("dir");
        assert!(matches!(l.current(), Err(LayoutError::NotALink { .. })));
    }
}
