//! `TARGET/.git`, opened beneath the target without following any symlink. Every file treesync
//! writes there (`index`, `HEAD`, `refs/heads/…`, `info/exclude`, and their `.lock` files)
//! goes through a descriptor of its directory, reached one component at a time with
//! `O_NOFOLLOW`: a symlink anywhere on the way, or at the final name, is refused and nothing is
//! written — so a clone whose `.git/refs/heads` points elsewhere cannot make treesync (maybe
//! running as root) create or append to files outside the target.
//!
//! Files are written like git writes them: `NAME.lock` created exclusively in the same directory,
//! then renamed over `NAME` (an existing lock means another git is at work there).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::Error;

/// `TARGET/.git` as a directory descriptor. See the [module docs](self).
pub(crate) struct GitDir {
    fd: OwnedFd,
    /// `TARGET/.git`, for messages.
    path: PathBuf,
    worktree: PathBuf,
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// What is at a name, not following a symlink there.
fn kind_at(dir: BorrowedFd<'_>, name: &str) -> Result<Option<FileType>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

impl GitDir {
    /// Open `WORKTREE/.git`, which must be a real directory (not a symlink, and not a `gitdir:`
    /// file pointing elsewhere, as linked worktrees and submodules have).
    pub(crate) fn open(worktree: &Path) -> Result<Self, Error> {
        let path = worktree.join(".git");
        let not_a_clone = |message: String| Error::NotAWorktree { path: worktree.into(), message };
        // The target itself is the user's choice, symlink or not; below it nothing is followed.
        let root = rustix::fs::open(worktree, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| not_a_clone(io(e).to_string()))?;
        match kind_at(root.as_fd(), ".git").map_err(|e| not_a_clone(format!("{}: {}", path.display(), io(e))))? {
            None => return Err(not_a_clone(format!("{} does not exist", path.display()))),
            Some(FileType::Directory) => {}
            Some(FileType::Symlink) => return Err(Error::Unsafe { path, what: "a symlink", want: "a directory" }),
            Some(FileType::RegularFile) => {
                return Err(Error::Unsafe {
                    path,
                    what: "a file (a `gitdir:` pointer of a linked worktree or submodule, whose repository is outside the target)",
                    want: "a directory (a clone made by `git clone`)",
                });
            }
            Some(_) => return Err(Error::Unsafe { path, what: "not a directory", want: "a directory" }),
        }
        let fd = rustix::fs::openat(
            &root,
            ".git",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => {
                Error::Unsafe { path: path.clone(), what: "not a directory", want: "a directory" }
            }
            e => Error::Io { what: "open .git", worktree: worktree.into(), message: io(e).to_string() },
        })?;
        Ok(GitDir { fd, path, worktree: worktree.into() })
    }

    /// The administrative directory `admin` of a linked worktree `worktree` (`git worktree
    /// add`), which must be a real directory: a symlink at its last component is refused.
    pub(crate) fn open_admin(admin: &Path, worktree: &Path) -> Result<Self, Error> {
        let fd = rustix::fs::open(
            admin,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => {
                Error::Unsafe { path: admin.into(), what: "not a directory", want: "a directory" }
            }
            e => Error::NotAWorktree { path: worktree.into(), message: format!("{}: {}", admin.display(), io(e)) },
        })?;
        Ok(GitDir { fd, path: admin.into(), worktree: worktree.into() })
    }

    /// `TARGET/.git`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn io_error(&self, what: &'static str, rel: &str, e: Errno) -> Error {
        Error::Io {
            what,
            worktree: self.worktree.clone(),
            message: format!("{}: {}", self.path.join(rel).display(), io(e)),
        }
    }

    /// The directory `rel` below `.git` (`""`: `.git` itself), one component at a time without
    /// following symlinks; missing directories are created when `create` is set, else `None`.
    fn dir(&self, rel: &str, create: bool) -> Result<Option<OwnedFd>, Error> {
        let mut fd = rustix::io::fcntl_dupfd_cloexec(&self.fd, 0).map_err(|e| self.io_error("open", "", e))?;
        let mut walked = String::new();
        for c in rel.split('/').filter(|c| !c.is_empty()) {
            if c == "." || c == ".." {
                return Err(Error::Unsafe {
                    path: self.path.join(rel),
                    what: "not a plain path",
                    want: "a plain path",
                });
            }
            if !walked.is_empty() {
                walked.push('/');
            }
            walked.push_str(c);
            let shown = || self.path.join(&walked);
            match kind_at(fd.as_fd(), c).map_err(|e| self.io_error("look up", &walked, e))? {
                Some(FileType::Directory) => {}
                Some(FileType::Symlink) => {
                    return Err(Error::Unsafe { path: shown(), what: "a symlink", want: "a directory" });
                }
                Some(_) => return Err(Error::Unsafe { path: shown(), what: "not a directory", want: "a directory" }),
                None if !create => return Ok(None),
                None => match rustix::fs::mkdirat(&fd, c, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(self.io_error("create directory", &walked, e)),
                },
            }
            // O_NOFOLLOW: if the directory was swapped for a symlink since the look-up, this fails.
            fd = rustix::fs::openat(
                &fd,
                c,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| match e {
                Errno::LOOP | Errno::NOTDIR => {
                    Error::Unsafe { path: shown(), what: "not a directory", want: "a directory" }
                }
                e => self.io_error("open", &walked, e),
            })?;
        }
        Ok(Some(fd))
    }

    /// The file `rel` below `.git` must be a regular file or missing (no symlink on the way).
    pub(crate) fn check_file(&self, rel: &str) -> Result<(), Error> {
        let (parent, name) = split(rel);
        let Some(dir) = self.dir(parent, false)? else { return Ok(()) };
        match kind_at(dir.as_fd(), name).map_err(|e| self.io_error("look up", rel, e))? {
            None | Some(FileType::RegularFile) => Ok(()),
            Some(FileType::Symlink) => {
                Err(Error::Unsafe { path: self.path.join(rel), what: "a symlink", want: "a file" })
            }
            Some(_) => Err(Error::Unsafe { path: self.path.join(rel), what: "not a regular file", want: "a file" }),
        }
    }

    /// Read the file `rel` below `.git`; `None` if it (or its directory) does not exist.
    pub(crate) fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, Error> {
        let (parent, name) = split(rel);
        let Some(dir) = self.dir(parent, false)? else { return Ok(None) };
        let fd =
            match rustix::fs::openat(&dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => {
                    return Err(Error::Unsafe { path: self.path.join(rel), what: "a symlink", want: "a file" });
                }
                Err(e) => return Err(self.io_error("read", rel, e)),
            };
        let mut f = std::fs::File::from(fd);
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut buf).map_err(|e| Error::Io {
            what: "read",
            worktree: self.worktree.clone(),
            message: e.to_string(),
        })?;
        Ok(Some(buf))
    }

    /// Replace the file `rel` below `.git` with `bytes` via `rel.lock`, creating missing
    /// directories on the way. A symlink on the way or at `rel` itself is refused.
    pub(crate) fn write(&self, rel: &str, bytes: &[u8]) -> Result<(), Error> {
        let (parent, name) = split(rel);
        let dir = self.dir(parent, true)?.expect("created");
        match kind_at(dir.as_fd(), name).map_err(|e| self.io_error("look up", rel, e))? {
            None | Some(FileType::RegularFile) => {}
            Some(FileType::Symlink) => {
                return Err(Error::Unsafe { path: self.path.join(rel), what: "a symlink", want: "a file" });
            }
            Some(_) => {
                return Err(Error::Unsafe { path: self.path.join(rel), what: "not a regular file", want: "a file" });
            }
        }
        let lock = format!("{name}.lock");
        let lock_rel = format!("{rel}.lock");
        let fd = rustix::fs::openat(
            &dir,
            lock.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map_err(|e| match e {
            Errno::EXIST => Error::Locked { path: self.path.join(&lock_rel) },
            e => self.io_error("create", &lock_rel, e),
        })?;
        let written = (|| {
            let mut rest = bytes;
            while !rest.is_empty() {
                let n = rustix::io::write(&fd, rest)?;
                rest = &rest[n..];
            }
            drop(fd);
            // Within one directory descriptor: the rename cannot land anywhere else, and a
            // symlink planted at `name` since the check would be replaced, not followed.
            rustix::fs::renameat(&dir, lock.as_str(), &dir, name)
        })();
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&dir, lock.as_str(), AtFlags::empty());
            return Err(self.io_error("write", rel, e));
        }
        Ok(())
    }
}

/// `a/b/c` → (`a/b`, `c`); `c` → (``, `c`).
fn split(rel: &str) -> (&str, &str) {
    match rel.rsplit_once('/') {
        Some((p, n)) => (p, n),
        None => ("", rel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clone() -> (tempfile::TempDir, GitDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".git")).expect("mkdir");
        let git = GitDir::open(dir.path()).expect("open");
        (dir, git)
    }

    #[test]
    fn writes_create_missing_directories_and_leave_no_lock_behind() {
        let (dir, git) = clone();
        git.write("refs/heads/topic/x", b"1\n").expect("write");
        git.write("refs/heads/topic/x", b"2\n").expect("rewrite");
        let heads = dir.path().join(".git/refs/heads/topic");
        assert_eq!(std::fs::read(heads.join("x")).expect("read"), b"2\n");
        assert!(!heads.join("x.lock").exists());
        assert_eq!(git.read("refs/heads/topic/x").expect("read"), Some(b"2\n".to_vec()));
        assert_eq!(git.read("refs/heads/none").expect("read"), None);
    }

    #[test]
    fn an_existing_lock_is_refused_like_git_and_left_alone() {
        let (dir, git) = clone();
        git.write("index", b"old").expect("write");
        std::fs::write(dir.path().join(".git/index.lock"), b"someone").expect("lock");
        let err = git.write("index", b"new").expect_err("locked");
        assert!(matches!(err, Error::Locked { .. }), "{err}");
        assert_eq!(std::fs::read(dir.path().join(".git/index")).expect("read"), b"old");
        assert_eq!(std::fs::read(dir.path().join(".git/index.lock")).expect("read"), b"someone");
    }

    #[test]
    fn symlinks_are_refused_at_every_level_and_nothing_is_written_through_them() {
        let (dir, git) = clone();
        let outside = tempfile::tempdir().expect("tempdir");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").expect("write");
        std::os::unix::fs::symlink(&victim, dir.path().join(".git/HEAD")).expect("symlink");
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".git/refs")).expect("symlink");
        for rel in ["HEAD", "refs/heads/main"] {
            let err = git.write(rel, b"x").expect_err("refused");
            assert!(matches!(err, Error::Unsafe { what: "a symlink", .. }), "{rel}: {err}");
            assert!(matches!(git.check_file(rel), Err(Error::Unsafe { .. })), "{rel}");
        }
        assert!(matches!(git.read("HEAD"), Err(Error::Unsafe { .. })));
        assert_eq!(std::fs::read(&victim).expect("read"), b"precious");
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 1, "nothing created outside");
        // A `.git` that is itself a symlink, or a `gitdir:` file, is refused when opened.
        let other = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(dir.path().join(".git"), other.path().join(".git")).expect("symlink");
        assert!(matches!(GitDir::open(other.path()), Err(Error::Unsafe { what: "a symlink", .. })));
        std::fs::remove_file(other.path().join(".git")).expect("rm");
        std::fs::write(other.path().join(".git"), "gitdir: /elsewhere\n").expect("write");
        assert!(matches!(GitDir::open(other.path()), Err(Error::Unsafe { .. })));
    }
}
