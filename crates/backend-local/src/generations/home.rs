//! The home and its files: the handles of the parent, the home, `tmp` and the slots, what is at
//! the target, the lock, the record, the list of slots, and removal without following links.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use treesync_backend::backend::{Error, LockGuard};
use treesync_backend::generation::{At, AtTarget};
use treesync_backend::lock::Holder;
use treesync_backend::path::STATE_DIR;

use super::inner::*;
use crate::lockfile;

impl Inner {
    /// The parent directory, opened once (following it: the target path is the user's choice).
    pub(super) fn parent_fd(&self) -> Result<BorrowedFd<'_>, Error> {
        if let Some(fd) = self.parent_fd.get() {
            return Ok(fd.as_fd());
        }
        if self.name.is_empty() || self.name == ".." {
            return Err(Error::io(
                "keep generations of",
                self.target.display(),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the target path has no last component to switch\n  hint: give the target as PARENT/NAME",
                ),
            ));
        }
        let fd = rustix::fs::open(&self.parent, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| Error::io("open the parent directory of", self.target.display(), io(e)))?;
        let _ = self.parent_fd.set(fd);
        Ok(self.parent_fd.get().expect("just set").as_fd())
    }

    /// The error for `rel` (beneath the parent) that is not the directory it should be.
    pub(super) fn not_a_dir(&self, at: BorrowedFd<'_>, name: &OsStr, shown: String, e: Errno) -> Error {
        if matches!(e, Errno::LOOP | Errno::NOTDIR)
            && let Ok(st) = rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
        {
            return Error::StateFolder { path: shown, found: type_name(FileType::from_raw_mode(st.st_mode)) };
        }
        Error::io("open", shown, io(e))
    }

    /// The home, opened without following a symlink; `None` when it does not exist.
    pub(super) fn home_fd(&self) -> Result<Option<OwnedFd>, Error> {
        let parent = self.parent_fd()?;
        // O_PATH: a handle for the *at calls, not an open directory (on a NAS mount an open
        // directory is an OPENDIR and a RELEASEDIR more per call). O_DIRECTORY with O_NOFOLLOW
        // still refuses a symlink (ENOTDIR).
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(parent, &self.home, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.not_a_dir(parent, &self.home, self.home_path().display().to_string(), e)),
        }
    }

    /// The home, which must exist.
    pub(super) fn home(&self) -> Result<OwnedFd, Error> {
        self.home_fd()?.ok_or_else(|| {
            Error::io(
                "open",
                self.home_path().display(),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the home of the generations is missing\n  hint: run sync --atomic to create it",
                ),
            )
        })
    }

    /// `HOME/tmp`, made if missing.
    pub(super) fn tmp(&self, home: BorrowedFd<'_>) -> Result<OwnedFd, Error> {
        match rustix::fs::mkdirat(home, TMP, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.shown(TMP), io(e))),
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(home, TMP, flags, Mode::empty())
            .map_err(|e| self.not_a_dir(home, OsStr::new(TMP), self.shown(TMP), e))
    }

    pub(super) fn slot_name<'a>(&self, slot: &'a str) -> Result<&'a str, Error> {
        if valid_slot(slot.as_bytes()) && slot != TMP {
            Ok(slot)
        } else {
            Err(Error::io(
                "use slot",
                self.shown(slot),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a slot name (one plain path component)"),
            ))
        }
    }

    /// A generation directory (`HOME/slot`, or the target), opened without following a symlink.
    pub(super) fn open_at(&self, at: &At) -> Result<OwnedFd, Error> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match at {
            At::Target => {
                let parent = self.parent_fd()?;
                rustix::fs::openat(parent, &self.name, flags, Mode::empty())
                    .map_err(|e| Error::io("open", self.target.display(), io(e)))
            }
            At::Slot(s) => {
                let s = self.slot_name(s)?;
                let home = self.home()?;
                rustix::fs::openat(&home, s, flags, Mode::empty()).map_err(|e| Error::io("open", self.shown(s), io(e)))
            }
        }
    }

    pub(super) fn at_target_blocking(&self) -> Result<AtTarget, Error> {
        let parent = self.parent_fd()?;
        let st = match rustix::fs::statat(parent, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(AtTarget::Missing),
            Err(e) => return Err(Error::io("look at", self.target.display(), io(e))),
        };
        Ok(match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                // A handle, not an open directory; listed only when treesync does not manage
                // it (a managed target answers with one lookup, whatever it holds).
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(parent, &self.name, flags, Mode::empty())
                    .map_err(|e| Error::io("open", self.target.display(), io(e)))?;
                let managed = rustix::fs::statat(&fd, STATE_DIR, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
                let empty = !managed
                    && list(fd.as_fd()).map_err(|e| Error::io("list", self.target.display(), io(e)))?.is_empty();
                AtTarget::Dir { managed, empty }
            }
            FileType::Symlink => {
                let text = self.read_link(parent, &self.name)?;
                let slot = self.slot_of_link(&text);
                AtTarget::Link { text, slot }
            }
            t => AtTarget::Other(type_name(t)),
        })
    }

    pub(super) fn read_link(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Result<Vec<u8>, Error> {
        rustix::fs::readlinkat(dir, name, Vec::new())
            .map(|t| t.into_bytes())
            .map_err(|e| Error::io("read link", self.target.display(), io(e)))
    }

    pub(super) fn create_home_blocking(&self) -> Result<(), Error> {
        let parent = self.parent_fd()?;
        match rustix::fs::mkdirat(parent, &self.home, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.home_path().display(), io(e))),
        }
        let home = self.home()?;
        self.tmp(home.as_fd())?;
        Ok(())
    }

    pub(super) fn lock_blocking(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let home = self.home()?;
        let held = lockfile::take(home.as_fd(), holder).map_err(|e| {
            let path = self.shown(lockfile::NAME);
            e.into_error(&path, |e| self.not_a_dir(home.as_fd(), OsStr::new(lockfile::NAME), path.clone(), e))
        })?;
        // A symlink in the home is never a generation nor its tmp: the target's old link that
        // an exchange moved to HOME/SLOT (a run killed before it removed it), or one planted
        // there. It would block the slot's name, tmp and the home's removal for good; unlinked
        // (never followed), first.
        for (name, t) in list_typed(home.as_fd()).map_err(|e| Error::io("list", self.home_path().display(), io(e)))? {
            let t = match t {
                FileType::Unknown => rustix::fs::statat(&home, &name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_or(t, |st| FileType::from_raw_mode(st.st_mode)),
                t => t,
            };
            if t == FileType::Symlink {
                rustix::fs::unlinkat(&home, &name, AtFlags::empty())
                    .map_err(|e| Error::io("remove link", self.home_path().join(&name).display(), io(e)))?;
            }
        }
        // What killed runs left in tmp (links, record temporaries, a tree displaced by a switch
        // cut short) is ours alone now that we hold the lock.
        let tmp = self.tmp(home.as_fd())?;
        for name in list(tmp.as_fd()).map_err(|e| Error::io("list", self.shown(TMP), io(e)))? {
            remove_tree(tmp.as_fd(), &name).map_err(|e| Error::io("remove", self.shown(TMP), io(e)))?;
        }
        Ok(held.into_guard())
    }

    pub(super) fn load_record_blocking(&self) -> Result<Option<Vec<u8>>, Error> {
        let Some(home) = self.home_fd()? else { return Ok(None) };
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&home, RECORD, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.not_a_dir(home.as_fd(), OsStr::new(RECORD), self.shown(RECORD), e)),
        };
        // Only a file of its own: the record is replaced by rename, so another name for it is
        // not treesync's, and its bytes would be shown in the parse error.
        if !lockfile::own_file(&fd).map_err(|e| Error::io("read", self.shown(RECORD), io(e)))? {
            return Err(Error::not_own_file(self.shown(RECORD)));
        }
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut buf)
            .map_err(|e| Error::io("read", self.shown(RECORD), e))?;
        Ok(Some(buf))
    }

    pub(super) fn store_record_blocking(&self, bytes: &[u8]) -> Result<(), Error> {
        let home = self.home()?;
        let tmp = self.tmp(home.as_fd())?;
        let name = self.tmp_name(RECORD);
        let result = (|| {
            let fd = rustix::fs::openat(
                &tmp,
                name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )?;
            lockfile::write_all_at(&fd, bytes)?;
            rustix::fs::renameat(&tmp, name.as_str(), &home, RECORD)
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(&tmp, name.as_str(), AtFlags::empty());
            return Err(Error::io("write", self.shown(RECORD), io(e)));
        }
        Ok(())
    }

    pub(super) fn slots_blocking(&self) -> Result<Vec<String>, Error> {
        let Some(home) = self.home_fd()? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for name in list(home.as_fd()).map_err(|e| Error::io("list", self.home_path().display(), io(e)))? {
            let bytes = name.as_bytes();
            if bytes == TMP.as_bytes() || !valid_slot(bytes) {
                continue;
            }
            let is_dir = rustix::fs::statat(&home, &name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
            if let (true, Ok(s)) = (is_dir, name.into_string()) {
                out.push(s);
            }
        }
        out.sort();
        Ok(out)
    }

    pub(super) fn remove_slot_blocking(&self, slot: &str) -> Result<u64, Error> {
        let slot = self.slot_name(slot)?;
        self.claims.lock().expect("never poisoned").remove(slot);
        let Some(home) = self.home_fd()? else { return Ok(0) };
        remove_tree(home.as_fd(), OsStr::new(slot)).map_err(|e| Error::io("remove", self.shown(slot), io(e)))
    }

    pub(super) fn remove_home_blocking(&self) -> Result<(), Error> {
        let parent = self.parent_fd()?;
        let Some(home) = self.home_fd()? else { return Ok(()) };
        for f in [lockfile::NAME, RECORD] {
            match rustix::fs::unlinkat(&home, f, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(Error::io("remove", self.shown(f), io(e))),
            }
        }
        remove_tree(home.as_fd(), OsStr::new(TMP)).map_err(|e| Error::io("remove", self.shown(TMP), io(e)))?;
        match rustix::fs::unlinkat(parent, &self.home, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(Errno::NOTEMPTY | Errno::EXIST) => {
                let left: Vec<String> =
                    list(home.as_fd()).unwrap_or_default().iter().map(|n| n.to_string_lossy().into_owned()).collect();
                let first = left.first().map_or_else(|| "it".into(), |n| self.shown(n));
                Err(Error::io(
                    "remove",
                    self.home_path().display(),
                    std::io::Error::new(
                        std::io::ErrorKind::DirectoryNotEmpty,
                        format!(
                            "it still holds {}, which treesync did not make there; the target is an ordinary directory already\n  hint: look at it and remove it (rm -r {first}); the next sync removes the home",
                            left.join(", ")
                        ),
                    ),
                ))
            }
            Err(e) => Err(Error::io("remove", self.home_path().display(), io(e))),
        }
    }
}

/// The names in a directory, but `.` and `..`.
pub(super) fn list(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    Ok(list_typed(dir)?.into_iter().map(|(n, _)| n).collect())
}

/// The names in a directory with their types as the directory tells them (`Unknown` on
/// filesystems that do not), but `.` and `..`.
pub(super) fn list_typed(dir: BorrowedFd<'_>) -> Result<Vec<(OsString, FileType)>, Errno> {
    let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push((OsString::from_vec(n.to_vec()), e.file_type()));
        }
    }
    Ok(out)
}

/// Remove `name` in `dir` and everything below it without following a symlink (a link is
/// unlinked, never traversed); fine if it is gone. Answers how many entries were removed.
pub(super) fn remove_tree(dir: BorrowedFd<'_>, name: &OsStr) -> Result<u64, Errno> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => return Ok(1),
        Err(Errno::NOENT) => return Ok(0),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let sub = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(0),
        // Replaced by a link or a file meanwhile: remove that, never follow it.
        Err(Errno::LOOP | Errno::NOTDIR) => {
            return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) => Ok(1),
                Err(Errno::NOENT) => Ok(0),
                Err(e) => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for entry in list(sub.as_fd())? {
        n += remove_tree(sub.as_fd(), &entry)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(n + 1),
        Err(Errno::NOENT) => Ok(n),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_removed_without_following_links_in_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("d")).expect("outside");
        std::fs::write(outside.join("d/f"), "x").expect("f");
        let t = dir.path().join("t");
        std::fs::create_dir_all(t.join("a/b")).expect("t");
        std::fs::write(t.join("a/b/file"), "y").expect("file");
        std::os::unix::fs::symlink(&outside, t.join("a/link")).expect("link");
        std::os::unix::fs::symlink(&outside, dir.path().join("top")).expect("top link");
        let d = rustix::fs::open(dir.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open");
        assert_eq!(remove_tree(d.as_fd(), OsStr::new("t")), Ok(5));
        assert_eq!(remove_tree(d.as_fd(), OsStr::new("top")), Ok(1));
        assert_eq!(remove_tree(d.as_fd(), OsStr::new("t")), Ok(0), "fine if gone");
        assert!(outside.join("d/f").exists());
    }
}
