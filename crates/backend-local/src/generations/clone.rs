//! [`Host::clone_tree`] on a filesystem: reflinks, else hard links, else byte copies; of the
//! state folder only the state, last.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use treesync_backend::backend::Error;
use treesync_backend::generation::{At, CloneHow, Cloned};
use treesync_backend::path::{STATE_DIR, TMP_PREFIX};

use super::home::list_typed;
use super::inner::*;
use crate::lockfile;

/// The copy of one tree by [`Host::clone_tree`]: the weakest method used so far, and counts.
struct Cloner {
    how: CloneHow,
    /// Regular files made (the method is only known once one was).
    files: u64,
    dirs: u64,
    entries: u64,
    bytes: u64,
}

impl Cloner {
    /// Copy the entries of `src` into `dst` (both directories opened without following); an
    /// error names the path (relative to `src`) where it happened. The type of each entry is
    /// taken from the directory listing where it tells it, so hard-linking a file costs no
    /// `stat`.
    fn dir(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>, root: bool) -> Result<(), (Errno, Vec<u8>)> {
        for (name, typ) in list_typed(src).map_err(|e| (e, Vec::new()))? {
            let name = name.as_os_str();
            let b = name.as_bytes();
            // The state folder is copied apart (last); temporaries are never tree content.
            if (root && b == STATE_DIR.as_bytes()) || b.starts_with(TMP_PREFIX.as_bytes()) {
                continue;
            }
            let typ = match typ {
                FileType::Unknown => match rustix::fs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(at(name)(e)),
                },
                t => t,
            };
            match typ {
                FileType::Directory => {
                    rustix::fs::mkdirat(dst, name, Mode::from_raw_mode(0o700)).map_err(at(name))?;
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    let s = rustix::fs::openat(src, name, flags, Mode::empty()).map_err(at(name))?;
                    let d = rustix::fs::openat(dst, name, flags, Mode::empty()).map_err(at(name))?;
                    self.dirs += 1;
                    self.dir(s.as_fd(), d.as_fd(), false).map_err(|(e, p)| {
                        let mut full = b.to_vec();
                        full.push(b'/');
                        full.extend_from_slice(&p);
                        (e, full)
                    })?;
                    // The mode last: a directory without write permission is filled first.
                    rustix::fs::fchmod(&d, mode_of(&s).map_err(at(name))?).map_err(at(name))?;
                }
                FileType::Symlink => {
                    let text = rustix::fs::readlinkat(src, name, Vec::new()).map_err(at(name))?;
                    rustix::fs::symlinkat(text.as_c_str(), dst, name).map_err(at(name))?;
                    self.entries += 1;
                }
                FileType::RegularFile => {
                    self.file(src, dst, name).map_err(at(name))?;
                    self.entries += 1;
                    self.files += 1;
                }
                // Nothing treesync writes; not part of any tree.
                _ => {}
            }
        }
        Ok(())
    }

    /// One file: a reflink, else a hard link, else a copy; the first two stop being tried once
    /// the filesystem says it has no such thing.
    fn file(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
        if self.how == CloneHow::Reflink {
            let s = rustix::fs::openat(src, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
            let mode = mode_of(&s)?;
            let d = create(dst, name, mode)?;
            match rustix::fs::ioctl_ficlone(&d, &s) {
                Ok(()) => return rustix::fs::fchmod(&d, mode),
                Err(_) => {
                    drop(d);
                    rustix::fs::unlinkat(dst, name, AtFlags::empty())?;
                    self.how = CloneHow::Hardlink;
                }
            }
        }
        if self.how == CloneHow::Hardlink {
            match rustix::fs::linkat(src, name, dst, name, AtFlags::empty()) {
                Ok(()) => return Ok(()),
                // Too many links to this one file: copy it alone.
                Err(Errno::MLINK) => return self.copy(src, dst, name),
                Err(Errno::XDEV | Errno::PERM | Errno::OPNOTSUPP | Errno::ACCESS) => self.how = CloneHow::Copy,
                Err(e) => return Err(e),
            }
        }
        self.copy(src, dst, name)
    }

    fn copy(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
        let s = rustix::fs::openat(src, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
        let mode = mode_of(&s)?;
        let d = create(dst, name, mode)?;
        let (mut s, mut d) = (std::fs::File::from(s), std::fs::File::from(d));
        let n = std::io::copy(&mut s, &mut d).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        self.bytes += n;
        rustix::fs::fchmod(&d, mode)
    }
}

/// The permission bits of an open file or directory.
fn mode_of(fd: &OwnedFd) -> Result<Mode, Errno> {
    Ok(Mode::from_raw_mode(rustix::fs::fstat(fd)?.st_mode & 0o7777))
}

/// The error of an entry `name`, for [`Cloner::dir`].
fn at(name: &OsStr) -> impl Fn(Errno) -> (Errno, Vec<u8>) + '_ {
    move |e| (e, name.as_bytes().to_vec())
}

/// A new file `name` in `dir` (never through a link, never over an existing one).
fn create(dir: BorrowedFd<'_>, name: &OsStr, mode: Mode) -> Result<OwnedFd, Errno> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, mode)
}

impl Inner {
    pub(super) fn clone_blocking(&self, from: &At, to: &str) -> Result<Cloned, Error> {
        let to = self.slot_name(to)?;
        let src = self.open_at(from)?;
        let home = self.home()?;
        rustix::fs::mkdirat(&home, to, Mode::from_raw_mode(0o700))
            .map_err(|e| Error::io("create", self.shown(to), io(e)))?;
        let dst = self.open_at(&At::Slot(to.to_string()))?;
        clone_open(&src, &dst, &self.target.display().to_string(), &self.shown(to))
    }
}

/// Start `to` (a new directory, which must not exist; its parent must) as a copy of the tree
/// `from` as [`Host::clone_tree`] makes one: reflinks, else hard links, else byte copies, and
/// of the state folder only the state, last. Neither path's last component is followed if it
/// is a symlink. For a tree kept outside a home (`treesync git-sync`'s worktrees); a hard-linked
/// copy shares its files' inodes with `from`, so it must be synced with
/// [`treesync_backend::policy::RewriteModes`], as generations are.
///
/// [`Host::clone_tree`]: treesync_backend::generation::Host::clone_tree
pub fn clone_dir(from: &Path, to: &Path) -> Result<Cloned, Error> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let src = rustix::fs::open(from, flags, Mode::empty()).map_err(|e| Error::io("open", from.display(), io(e)))?;
    rustix::fs::mkdir(to, Mode::from_raw_mode(0o700)).map_err(|e| Error::io("create", to.display(), io(e)))?;
    let dst = rustix::fs::open(to, flags, Mode::empty()).map_err(|e| Error::io("open", to.display(), io(e)))?;
    clone_open(&src, &dst, &from.display().to_string(), &to.display().to_string())
}

/// The copy of the open tree `src` into the open, empty directory `dst` (shown as `from` and
/// `to` in errors).
fn clone_open(src: &OwnedFd, dst: &OwnedFd, from: &str, to: &str) -> Result<Cloned, Error> {
    let root_mode = mode_of(src).map_err(|e| Error::io("stat", from, io(e)))?;
    let mut c = Cloner { how: CloneHow::Reflink, files: 0, dirs: 0, entries: 0, bytes: 0 };
    c.dir(src.as_fd(), dst.as_fd(), true)
        .map_err(|(e, p)| Error::io("copy", Path::new(to).join(OsStr::from_bytes(&p)).display(), io(e)))?;
    // Last: the state, as a file of its own (a copy cut short has none).
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let state_dir = rustix::fs::openat(src, STATE_DIR, flags | OFlags::DIRECTORY, Mode::empty());
    let state = state_dir.as_ref().ok().map(|d| rustix::fs::openat(d, "state", flags, Mode::empty()));
    match state {
        None | Some(Err(Errno::NOENT)) => {}
        Some(Err(e)) => return Err(Error::io("read the state of", from, io(e))),
        Some(Ok(fd)) => {
            let shown = || format!("{to}/{STATE_DIR}/state");
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes)
                .map_err(|e| Error::io("read the state of", from, e))?;
            rustix::fs::mkdirat(dst, STATE_DIR, Mode::from_raw_mode(0o777))
                .map_err(|e| Error::io("create", shown(), io(e)))?;
            let d = rustix::fs::openat(dst, STATE_DIR, flags | OFlags::DIRECTORY, Mode::empty())
                .map_err(|e| Error::io("open", shown(), io(e)))?;
            let f = create(d.as_fd(), OsStr::new("state"), Mode::from_raw_mode(0o666))
                .map_err(|e| Error::io("write", shown(), io(e)))?;
            lockfile::write_all_at(&f, &bytes).map_err(|e| Error::io("write", shown(), io(e)))?;
        }
    }
    rustix::fs::fchmod(dst, root_mode).map_err(|e| Error::io("change mode of", to, io(e)))?;
    // Without a file, no method was tried: say the one that would have been (hard links).
    let how = if c.files == 0 { CloneHow::Hardlink } else { c.how };
    Ok(Cloned { how, dirs: c.dirs, entries: c.entries, bytes_copied: c.bytes })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::generations::inner::test_host as host;

    fn tree_for_clone(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let src = dir.join("site");
        std::fs::create_dir_all(src.join("ro/sub")).expect("dirs");
        std::fs::create_dir_all(src.join(".treesync/tmp")).expect("state folder");
        std::fs::write(src.join("ro/sub/f"), "f").expect("f");
        std::fs::write(src.join("run"), "#!/bin/sh\n").expect("run");
        std::fs::set_permissions(src.join("run"), std::fs::Permissions::from_mode(0o751)).expect("chmod");
        std::os::unix::fs::symlink("ro/sub/f", src.join("link")).expect("link");
        std::fs::write(src.join(format!("{TMP_PREFIX}run")), "leftover").expect("leftover");
        // The stat index and the sync's delta describe this tree's inodes: a clone (reflinks:
        // other inodes; hard links: a ctime moved by the link) must not inherit them.
        for (f, c) in
            [("state", "{}"), ("lock", "pid"), ("index", "idx"), ("index-delta", "- 61 ;\n"), ("tmp/x", "tmp")]
        {
            std::fs::write(src.join(".treesync").join(f), c).expect("state file");
        }
        std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o555)).expect("chmod ro");
        src
    }

    #[test]
    fn a_clone_keeps_modes_and_links_and_takes_only_the_state_of_the_state_folder() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let src = tree_for_clone(dir.path());
        let h = host(dir.path());
        h.create_home_blocking().expect("home");
        let c = h.clone_blocking(&At::Target, "g1").expect("clone");
        let g1 = dir.path().join(".site.treesync/g1");
        assert_eq!((c.dirs, c.entries), (2, 3), "{c:?}");
        assert!(matches!(c.how, CloneHow::Reflink | CloneHow::Hardlink), "{c:?}");
        let mode = |p: &Path| std::fs::symlink_metadata(p).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode(&g1.join("ro")), 0o555);
        assert_eq!(mode(&g1.join("run")), 0o751);
        assert_eq!(std::fs::read_link(g1.join("link")).expect("link"), Path::new("ro/sub/f"));
        assert_eq!(std::fs::read_to_string(g1.join("ro/sub/f")).expect("f"), "f");
        assert!(!g1.join(format!("{TMP_PREFIX}run")).exists(), "leftover temporaries are not tree content");
        let state: Vec<_> =
            std::fs::read_dir(g1.join(".treesync")).expect("state folder").flatten().map(|e| e.file_name()).collect();
        assert_eq!(state, vec![OsString::from("state")], "only the state");
        assert_eq!(std::fs::read_to_string(g1.join(".treesync/state")).expect("state"), "{}");
        let meta = std::fs::metadata(g1.join(".treesync/state")).expect("state");
        assert_eq!(meta.nlink(), 1, "the state is a file of its own");
        if c.how == CloneHow::Hardlink {
            assert_ne!(meta.ino(), std::fs::metadata(src.join(".treesync/state")).expect("src").ino());
            assert_eq!(
                std::fs::metadata(g1.join("run")).expect("run").ino(),
                std::fs::metadata(src.join("run")).expect("run").ino()
            );
        }

        // Where neither reflinks nor hard links work, bytes are copied.
        let mut copy = Cloner { how: CloneHow::Copy, files: 0, dirs: 0, entries: 0, bytes: 0 };
        let g2 = dir.path().join("g2");
        std::fs::create_dir(&g2).expect("g2");
        let open = |p: &Path| rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open");
        copy.dir(open(&src).as_fd(), open(&g2).as_fd(), true).expect("copy");
        assert_eq!((copy.how, copy.files, copy.bytes), (CloneHow::Copy, 2, 11));
        assert_ne!(
            std::fs::metadata(g2.join("run")).expect("run").ino(),
            std::fs::metadata(src.join("run")).expect("run").ino()
        );
        assert_eq!(mode(&g2.join("run")), 0o751);
    }
}
