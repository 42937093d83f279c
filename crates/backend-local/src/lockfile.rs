//! The target's lock file `.treesync/lock`, one implementation for the backends that reach the
//! target through the kernel: the [`LocalBackend`](crate::LocalBackend) and the mounted NFS
//! backend of `treesync-backend-nfs` (the `nfs://` client keeps its own lease file, as an
//! `flock` cannot be taken through the NFS protocol).
//!
//! * The file is opened beneath the state folder's handle without following a symlink
//!   (`O_NOFOLLOW`; the folder itself was opened with `RESOLVE_NO_SYMLINKS` by the caller).
//! * The lock is an `flock`, taken without waiting; the OS releases it when a holder dies. Over
//!   NFS (v3 with NLM, or v4) the kernel turns it into a byte-range lock held by the server,
//!   so the same call serves both backends.
//! * On contention the holder line is read (512 bytes at most) and parsed with
//!   [`Holder::from_lock_file`]; nothing else of the file is ever shown.
//! * The holder line is written only into a regular file with one link: a hard link planted at
//!   `.treesync/lock` would otherwise have its target's first bytes overwritten.
//! * The line is padded to a fixed length and written with one `pwrite` at offset 0, so it is
//!   never truncated (a truncate is one more request on a network filesystem).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use treesync_backend::backend::{Error, LockGuard};
use treesync_backend::lock::Holder;

/// The name of the lock file in the state folder.
pub const NAME: &str = "lock";

/// The holder line is padded to this length, so that it is rewritten in place.
pub const HOLDER_LEN: usize = 255;

/// Why the lock was not taken. The caller turns it into its `backend::Error` with the path it
/// shows.
#[derive(Debug)]
pub enum TakeError {
    /// The lock file could not be opened (`ELOOP`: it is a symlink).
    Open(Errno),
    /// Another process holds the lock; who, if its file holds a holder line treesync wrote
    /// (read only when the file is a file of its own).
    Locked(Option<Holder>),
    /// The lock file is a hard link to another file, or not a regular file: nothing was written.
    NotOwnFile,
    /// `flock` or `statx` failed otherwise.
    Lock(Errno),
    /// The holder line could not be written.
    Write(Errno),
}

impl TakeError {
    /// The `backend::Error` of the lock file shown as `path` not taken; `open` makes the error
    /// of a failed open (which the caller knows best: a symlink planted there, a folder that is
    /// not one).
    pub fn into_error(self, path: &str, open: impl FnOnce(Errno) -> Error) -> Error {
        let io = |e: Errno| std::io::Error::from_raw_os_error(e.raw_os_error());
        match self {
            TakeError::Open(e) => open(e),
            TakeError::Locked(holder) => {
                locked_by(holder.as_ref(), || format!("holder unknown: no holder line treesync wrote in {path}"))
            }
            TakeError::NotOwnFile => Error::not_own_file(path),
            TakeError::Lock(e) => Error::io("lock", path, io(e)),
            TakeError::Write(e) => Error::io("write lock file", path, io(e)),
        }
    }
}

/// [`Error::Locked`] naming `holder`, or saying what is known without one (`unknown`).
pub fn locked_by(holder: Option<&Holder>, unknown: impl FnOnce() -> String) -> Error {
    Error::Locked { holder: holder.map_or_else(unknown, |h| h.to_string()) }
}

/// Take the lock in the state folder `dir` for `holder`: open (creating) `lock` beneath it,
/// `flock` it without waiting, and write the holder line. The returned guard unlocks when
/// dropped. See the [module docs](self).
pub fn take(dir: BorrowedFd<'_>, holder: &Holder) -> Result<Flock, TakeError> {
    let fd = rustix::fs::openat(
        dir,
        NAME,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )
    .map_err(TakeError::Open)?;
    let own = own_file(&fd).map_err(TakeError::Lock)?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Err(TakeError::Locked(if own { holder_of(&fd) } else { None })),
        Err(e) => return Err(TakeError::Lock(e)),
    }
    let held = Flock(fd);
    if !own {
        return Err(TakeError::NotOwnFile);
    }
    // Padded as a string: `Holder`'s `Display` ignores the width.
    let mut line = format!("{:<HOLDER_LEN$}", holder.to_string()).into_bytes();
    line.truncate(HOLDER_LEN);
    line.push(b'\n');
    write_all_at(&held.0, &line).map_err(TakeError::Write)?;
    Ok(held)
}

/// A held `flock` on the lock file. Unlocks explicitly on drop: closing alone is not enough
/// when another thread of this process is spawning a child at that moment, since the child
/// briefly holds a duplicate of the descriptor (until its exec closes it) and with it the lock.
#[derive(Debug)]
pub struct Flock(OwnedFd);

impl Flock {
    /// As the guard [`Backend::lock`](treesync_backend::Backend::lock) returns.
    pub fn into_guard(self) -> LockGuard {
        LockGuard(Box::new(self))
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0.as_fd(), FlockOperation::Unlock);
    }
}

/// Why [`append_own`] wrote nothing (or not all).
#[derive(Debug)]
pub enum AppendError {
    /// What is there is not a regular file of its own: a hard link or another kind of file
    /// planted there would take the bytes elsewhere.
    NotOwn,
    /// The call that failed (`open`, `read`, `write`, `fsync`) and its error.
    Io(&'static str, Errno),
}

/// Append `bytes` to `name` in `dir` (created if absent, opened without following a symlink:
/// `ELOOP` comes back as `Io("open", LOOP)`), only into a regular file of its own, and `fsync`
/// it if asked. One open relative to `dir`: no path is resolved from the root. What the local
/// and the NFS backends append to `.treesync` (the index delta) goes through here.
pub fn append_own(dir: BorrowedFd<'_>, name: &str, bytes: &[u8], fsync: bool) -> Result<(), AppendError> {
    let fd = open_own_for_append(dir, name, true)?.expect("created if absent");
    append_to(&fd, bytes, fsync)
}

/// The first half of [`append_own`]: `name` in `dir` opened for appending without following a
/// symlink (created if absent when `create`, else `None` if absent), only if it is a regular
/// file of its own. What a backend opens ahead, while other requests are out, to append later.
pub fn open_own_for_append(dir: BorrowedFd<'_>, name: &str, create: bool) -> Result<Option<OwnedFd>, AppendError> {
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(
        dir,
        name,
        if create { flags | OFlags::CREATE } else { flags },
        Mode::from_raw_mode(0o666),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if !create => return Ok(None),
        Err(e) => return Err(AppendError::Io("open", e)),
    };
    if !own_file(&fd).map_err(|e| AppendError::Io("read", e))? {
        return Err(AppendError::NotOwn);
    }
    Ok(Some(fd))
}

/// The second half of [`append_own`]: write all of `bytes` to `fd` (opened by
/// [`open_own_for_append`]) and `fsync` it if asked.
pub fn append_to(fd: &OwnedFd, bytes: &[u8], fsync: bool) -> Result<(), AppendError> {
    let mut rest = bytes;
    while !rest.is_empty() {
        match rustix::io::write(fd, rest) {
            Ok(n) => rest = &rest[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(AppendError::Io("write", e)),
        }
    }
    if fsync {
        rustix::fs::fsync(fd).map_err(|e| AppendError::Io("fsync", e))?;
    }
    Ok(())
}

/// A regular file with no other name (a hard link elsewhere would share every write). Asked
/// with `AT_STATX_DONT_SYNC`: the attributes the open's own LOOKUP brought are enough, so on a
/// network filesystem this costs no request (an `fstat` would be a GETATTR).
pub fn own_file(fd: &OwnedFd) -> Result<bool, Errno> {
    let (mode, nlink) = match rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        rustix::fs::StatxFlags::TYPE | rustix::fs::StatxFlags::NLINK,
    ) {
        Ok(st) => (u32::from(st.stx_mode), u64::from(st.stx_nlink)),
        Err(Errno::NOSYS) => {
            let st = rustix::fs::fstat(fd)?;
            (st.st_mode, st.st_nlink)
        }
        Err(e) => return Err(e),
    };
    Ok(FileType::from_raw_mode(mode) == FileType::RegularFile && nlink == 1)
}

/// The holder a lock file names, if it holds a line treesync wrote (read at most 512 bytes;
/// nothing else is shown).
fn holder_of(fd: &OwnedFd) -> Option<Holder> {
    let mut buf = [0u8; 512];
    let n = rustix::io::pread(fd, &mut buf, 0).ok()?;
    Holder::from_lock_file(&buf[..n])
}

/// Write all of `bytes` at offset 0 onwards (retrying short writes and `EINTR`).
pub fn write_all_at(fd: &OwnedFd, mut bytes: &[u8]) -> Result<(), Errno> {
    let mut at = 0u64;
    while !bytes.is_empty() {
        match rustix::io::pwrite(fd, bytes, at) {
            Ok(n) => {
                bytes = &bytes[n..];
                at += n as u64;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
