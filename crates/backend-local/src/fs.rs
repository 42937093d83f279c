//! The blocking POSIX work of the local backend, public so that other backends for mounted
//! filesystems (the NFS backend) reuse the same atomic write, state, lock and scan code and
//! only change how directories are found and how much runs at once.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use treesync_backend::backend::{DirEntry, Error, FileStat, Found, FoundKind, LockGuard, TargetState, Written};
use treesync_backend::lock::Holder;
use treesync_backend::path::{STATE_DIR, TMP_PREFIX};
use treesync_backend::source::{BlobSource, Content};
use treesync_backend::{Op, RelPath};

use crate::lockfile;

const TMP_DIR: &str = ".treesync/tmp";
const LOCK_FILE: &str = ".treesync/lock";

/// A target directory and how files are written there.
pub struct Target {
    pub root: PathBuf,
    fsync: bool,
    umask: u32,
    root_fd: OnceLock<OwnedFd>,
    state_fd: OnceLock<OwnedFd>,
    tmp_fd: OnceLock<OwnedFd>,
    counter: AtomicU64,
    /// Whether the filesystem tells names apart by case (probed once `.treesync` exists).
    case_sensitive: OnceLock<bool>,
    /// Files written from blobs since [`Target::take_written`] last took them.
    written: std::sync::Mutex<Vec<Written>>,
    /// Whether files written are noted in `written` ([`Target::record_written`]).
    recording: std::sync::atomic::AtomicBool,
}

/// The error for a target path that is a symlink, on every backend for mounted filesystems:
/// it is not followed (so that nobody can redirect the writes by swapping the link), and a
/// trailing slash follows it on purpose.
pub fn target_is_a_symlink(root: &std::path::Path) -> Error {
    let to = std::fs::read_link(root).map(|t| t.display().to_string()).unwrap_or_default();
    Error::io(
        "use target",
        root.display(),
        std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!(
                "it is a symlink (to {to}); treesync does not follow it, so that nobody can redirect the writes by swapping the link\n  hint: pass the directory it points to, or end the target with a slash ({}/) to follow the link on purpose",
                root.display()
            ),
        ),
    )
}

/// What a file type is called in messages.
fn file_type_name(t: FileType) -> &'static str {
    match t {
        FileType::Directory => "directory",
        FileType::RegularFile => "file",
        FileType::Symlink => "symlink",
        _ => "special file",
    }
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// The process umask, read without changing it where the kernel tells it; once per process
/// (a sync opens more than one target: the generations of one, the target to look at its
/// marks).
fn read_umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        if let Ok(status) = std::fs::read_to_string("/proc/self/status")
            && let Some(line) = status.lines().find(|l| l.starts_with("Umask:"))
            && let Ok(m) = u32::from_str_radix(line["Umask:".len()..].trim(), 8)
        {
            return m;
        }
        0o022
    })
}

/// The stat data verify compares, from an lstat.
fn file_stat(st: &rustix::fs::Stat) -> FileStat {
    FileStat {
        mtime_secs: st.st_mtime,
        mtime_nsecs: st.st_mtime_nsec as u32,
        ctime_secs: st.st_ctime,
        ctime_nsecs: st.st_ctime_nsec as u32,
        dev: st.st_dev,
        ino: st.st_ino,
        uid: st.st_uid,
        gid: st.st_gid,
    }
}

/// A file to write: its content (which names its path), its exec bit, and where its blob is read.
struct NewFile<'a> {
    content: Content<'a>,
    executable: bool,
    blobs: &'a dyn BlobSource,
}

impl Target {
    /// The directory `root`; with `fsync`, files and state are synced before being renamed.
    pub fn new(root: PathBuf, fsync: bool) -> Self {
        Target {
            root,
            fsync,
            umask: read_umask(),
            root_fd: OnceLock::new(),
            state_fd: OnceLock::new(),
            tmp_fd: OnceLock::new(),
            counter: AtomicU64::new(0),
            case_sensitive: OnceLock::new(),
            written: Default::default(),
            recording: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Does the target's filesystem tell names apart by case? Probed once, with one `lstat` of
    /// `.TREESYNC` once `.treesync` exists (APFS, NTFS, SMB shares, ext4 casefold directories
    /// find it); `true` until then.
    pub fn case_sensitive(&self) -> bool {
        *self.case_sensitive.get().unwrap_or(&true)
    }

    /// Run the probe of [`Target::case_sensitive`] if it has not run; only once `.treesync`
    /// exists (a managed target, or under the lock).
    pub fn probe_case(&self) {
        if self.case_sensitive.get().is_some() {
            return;
        }
        let upper = STATE_DIR.to_ascii_uppercase();
        let insensitive = std::fs::symlink_metadata(self.root.join(upper)).is_ok();
        let _ = self.case_sensitive.set(!insensitive);
    }

    /// Record what a caller's own probe found: `.TREESYNC` looked up relative to the target
    /// (`insensitive`: it was found) while `.treesync` was known to exist. Only the first answer
    /// counts, as with [`Target::probe_case`].
    pub fn note_case_probe(&self, insensitive: bool) {
        let _ = self.case_sensitive.set(!insensitive);
    }

    /// Whether [`Target::case_sensitive`] has been probed.
    pub fn case_probed(&self) -> bool {
        self.case_sensitive.get().is_some()
    }

    /// [`Target::probe_case`] relative to a handle of the target directory the caller holds:
    /// one lookup of `.TREESYNC` instead of resolving the target's path again (on a network
    /// filesystem with the attribute cache off, a lookup of the root too).
    pub fn probe_case_in(&self, root: BorrowedFd<'_>) {
        if self.case_sensitive.get().is_some() {
            return;
        }
        let _ = self.case_sensitive.set(!Self::finds_state_dir_upper_case(root));
    }

    /// The probe itself: one lookup of `.TREESYNC` in the target directory `root`, whose
    /// `.treesync` exists; found means names that differ by case are one name here.
    pub fn finds_state_dir_upper_case(root: BorrowedFd<'_>) -> bool {
        let upper = STATE_DIR.to_ascii_uppercase();
        rustix::fs::statat(root, upper.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    fn root_display(&self) -> String {
        self.root.display().to_string()
    }

    /// A descriptor of the target directory, opened on first use, never through a symlink
    /// at the target path itself ([`Target::prepare`] refuses one; a link planted after that
    /// look, e.g. in a generations home, must not redirect the writes either).
    pub fn root_fd(&self) -> Result<BorrowedFd<'_>, Error> {
        if let Some(fd) = self.root_fd.get() {
            return Ok(fd.as_fd());
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(&self.root, flags, Mode::empty())
            .map_err(|e| Error::io("open target directory", self.root_display(), io(e)))?;
        let _ = self.root_fd.set(fd);
        Ok(self.root_fd.get().expect("just set").as_fd())
    }

    /// The state folder `.treesync`, created when `create` and missing, opened without
    /// following a symlink: a `.treesync` that is not a real directory is refused, so nothing
    /// treesync writes there (lock, state, temporaries) can land outside the target. `None`
    /// when it does not exist (and `create` is false).
    fn state_fd(&self, create: bool) -> Result<Option<BorrowedFd<'_>>, Error> {
        if let Some(fd) = self.state_fd.get() {
            return Ok(Some(fd.as_fd()));
        }
        let root = self.root_fd()?;
        if create {
            match rustix::fs::mkdirat(root, STATE_DIR, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(Error::io("create", self.root.join(STATE_DIR).display(), io(e))),
            }
        }
        let fd = match self.open_beneath(root, STATE_DIR.as_bytes(), OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(self.state_path_error(STATE_DIR, e)),
        };
        let _ = self.state_fd.set(fd);
        Ok(Some(self.state_fd.get().expect("just set").as_fd()))
    }

    /// The error for a path of the state folder that could not be opened: the first component
    /// that is a symlink or not a directory is named as such.
    fn state_path_error(&self, rel: &str, e: Errno) -> Error {
        if matches!(e, Errno::LOOP | Errno::XDEV | Errno::NOTDIR)
            && let Ok(root) = self.root_fd()
        {
            let parts: Vec<&str> = rel.split('/').collect();
            for n in 1..=parts.len() {
                let prefix = parts[..n].join("/");
                let last = n == parts.len();
                let found = match rustix::fs::statat(root, prefix.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(_) => break,
                };
                let bad = match found {
                    FileType::Directory => false,
                    FileType::RegularFile => !last,
                    _ => true,
                };
                if bad {
                    return Error::StateFolder {
                        path: self.root.join(&prefix).display().to_string(),
                        found: file_type_name(found),
                    };
                }
            }
        }
        Error::io("open", self.root.join(rel).display(), io(e))
    }

    fn tmp_fd(&self) -> Result<BorrowedFd<'_>, Error> {
        if let Some(fd) = self.tmp_fd.get() {
            return Ok(fd.as_fd());
        }
        let state = self.state_fd(true)?.expect("created");
        match rustix::fs::mkdirat(state, "tmp", Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.root.join(TMP_DIR).display(), io(e))),
        }
        let fd = self
            .open_beneath(state, b"tmp", OFlags::DIRECTORY | OFlags::RDONLY)
            .map_err(|e| self.state_path_error(TMP_DIR, e))?;
        let _ = self.tmp_fd.set(fd);
        Ok(self.tmp_fd.get().expect("just set").as_fd())
    }

    /// Open `rel` below `dir` without following any symlink and without leaving `dir`.
    fn open_beneath(&self, dir: BorrowedFd<'_>, rel: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        match rustix::fs::openat2(
            dir,
            OsStr::from_bytes(rel),
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::NOSYS) => {
                // Kernels before 5.6: walk component by component with O_NOFOLLOW.
                let mut fd = rustix::io::fcntl_dupfd_cloexec(dir, 0)?;
                let parts: Vec<&[u8]> = rel.split(|b| *b == b'/').filter(|c| !c.is_empty()).collect();
                for (i, c) in parts.iter().enumerate() {
                    if *c == b".." {
                        return Err(Errno::XDEV);
                    }
                    let last = i + 1 == parts.len();
                    let f = if last {
                        flags
                    } else {
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
                    };
                    fd = rustix::fs::openat(&fd, OsStr::from_bytes(c), f, Mode::empty())?;
                }
                Ok(fd)
            }
            r => r,
        }
    }

    fn open_dir(&self, rel: &[u8]) -> Result<OwnedFd, Errno> {
        let root = self.root_fd().map_err(|_| Errno::NOENT)?;
        if rel.is_empty() {
            return rustix::io::fcntl_dupfd_cloexec(root, 0);
        }
        self.open_beneath(root, rel, OFlags::PATH | OFlags::DIRECTORY)
    }

    fn file_mode(&self, executable: bool) -> u32 {
        (if executable { 0o777 } else { 0o666 }) & !self.umask
    }

    fn tmp_name(&self) -> String {
        format!("{}.{}", std::process::id(), self.counter.fetch_add(1, Ordering::Relaxed))
    }

    /// The temporary name a file is written under, next to its final name. It is the same on
    /// every run, so replaying an interrupted plan reuses (and so removes) what a killed run
    /// left; the planner refuses tree entries with this prefix.
    pub fn sibling_tmp(name: &[u8]) -> Vec<u8> {
        let mut tmp = TMP_PREFIX.as_bytes().to_vec();
        if name.len() + tmp.len() <= 255 {
            tmp.extend_from_slice(name);
        } else {
            // Keep within NAME_MAX: a stable hash of the name instead.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in name {
                h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
            tmp.extend_from_slice(format!("long-{h:016x}").as_bytes());
        }
        tmp
    }

    /// Create `tmp` in `dir` exclusively with `mode` (masked by the umask), replacing a leftover.
    fn create_tmp(dir: BorrowedFd<'_>, tmp: &OsStr, mode: u32) -> Result<OwnedFd, Errno> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dir, tmp, flags, Mode::from_raw_mode(mode)) {
            Err(Errno::EXIST) => {
                rustix::fs::unlinkat(dir, tmp, AtFlags::empty())?;
                rustix::fs::openat(dir, tmp, flags, Mode::from_raw_mode(mode))
            }
            r => r,
        }
    }

    /// Run ops of one phase, resolving each parent directory from the root (cached while
    /// neighbours share it).
    pub fn run_batch(&self, ops: &[Op], blobs: &dyn BlobSource) -> Result<(), Error> {
        // Ops of a batch are sorted by path, so neighbours mostly share their directory.
        let mut cached: Option<(Vec<u8>, Result<OwnedFd, Errno>)> = None;
        for op in ops {
            let path = op.path();
            let (parent, name) = path.split_last();
            if cached.as_ref().is_none_or(|(p, _)| p.as_slice() != parent) {
                cached = Some((parent.to_vec(), self.open_dir(parent)));
            }
            let dir = &cached.as_ref().expect("set above").1;
            let dir = match (dir, op) {
                (Ok(fd), _) => fd.as_fd(),
                // The parent is gone: so is what we should remove. (A parent that is a symlink
                // or a file now is drift, healed by the executor: never removed through.)
                (Err(Errno::NOENT), Op::Unlink { .. } | Op::Rmdir { .. }) => continue,
                (Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR), _) => {
                    return Err(Error::NotBeneath { path: path.display() });
                }
                (Err(e), _) => return Err(Error::io("open the directory of", path, io(*e))),
            };
            self.run_op(dir, name, op, blobs)?;
        }
        Ok(())
    }

    /// Run `op` on the entry `name` of the directory `dir` (which the caller opened without
    /// following symlinks).
    pub fn run_op(&self, dir: BorrowedFd<'_>, name: &[u8], op: &Op, blobs: &dyn BlobSource) -> Result<(), Error> {
        let name = OsStr::from_bytes(name);
        let path = op.path();
        match op {
            Op::Mkdir { .. } => match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) => Ok(()),
                Err(Errno::EXIST) => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(()),
                    Ok(_) => Err(Error::not_a_directory_in_the_way(path)),
                    Err(e) => Err(Error::io("create directory", path, io(e))),
                },
                Err(e) => Err(Error::io("create directory", path, io(e))),
            },
            Op::Write { executable, .. } => {
                let content = op.content().expect("a write has content");
                self.write_file(dir, name, &NewFile { content, executable: *executable, blobs })
            }
            Op::Symlink { target, .. } => {
                let tmp = Self::sibling_tmp(name.as_bytes());
                let tmp = OsStr::from_bytes(&tmp);
                let make = || rustix::fs::symlinkat(OsStr::from_bytes(target), dir, tmp);
                let result = match make() {
                    Err(Errno::EXIST) => rustix::fs::unlinkat(dir, tmp, AtFlags::empty()).and_then(|()| make()),
                    r => r,
                }
                .and_then(|()| rustix::fs::renameat(dir, tmp, dir, name))
                .map_err(|e| Error::io("create symlink", path, io(e)));
                if result.is_err() {
                    let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
                }
                result
            }
            Op::Chmod { executable, .. } => {
                // Only a regular file with no other name is changed in place: through a hard
                // link, fchmod would change a file outside the target too. Anything else (a
                // shared inode, a symlink or nothing in its place) gets the file written anew.
                let fd = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                let alone = match &fd {
                    Ok(fd) => rustix::fs::fstat(fd)
                        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && st.st_nlink == 1)
                        .map_err(|e| Error::io("change mode of", path, io(e)))?,
                    Err(Errno::LOOP | Errno::NOENT) => false,
                    Err(e) => return Err(Error::io("change mode of", path, io(*e))),
                };
                match fd {
                    Ok(fd) if alone => rustix::fs::fchmod(&fd, Mode::from_raw_mode(self.file_mode(*executable)))
                        .map_err(|e| Error::io("change mode of", path, io(e))),
                    _ => {
                        let content = op.content().expect("a mode change has content");
                        self.write_file(dir, name, &NewFile { content, executable: *executable, blobs })
                    }
                }
            }
            Op::Unlink { .. } => match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                // Gone already, or a directory took its place (an interrupted sync made it).
                Ok(()) | Err(Errno::NOENT | Errno::ISDIR) => Ok(()),
                Err(e) => Err(Error::io("remove", path, io(e))),
            },
            Op::Rmdir { .. } => match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT | Errno::NOTDIR) => Ok(()),
                Err(Errno::NOTEMPTY | Errno::EXIST) => Err(Error::NotEmpty { path: path.display() }),
                Err(e) => Err(Error::io("remove directory", path, io(e))),
            },
        }
    }

    /// Write `file` as the entry `name` of `dir`: a temporary next to it, renamed over it.
    fn write_file(&self, dir: BorrowedFd<'_>, name: &OsStr, file: &NewFile<'_>) -> Result<(), Error> {
        let path = file.content.path;
        let tmp = Self::sibling_tmp(name.as_bytes());
        let tmp = OsStr::from_bytes(&tmp);
        let result = self.write_tmp(dir, tmp, file).and_then(|fd| {
            rustix::fs::renameat(dir, tmp, dir, name).map(|()| fd).map_err(|e| Error::io("write", path, io(e)))
        });
        let fd = match result {
            Ok(fd) => fd,
            Err(e) => {
                // Never leave a temporary behind (a full disk must not fill up further).
                let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
                return Err(e);
            }
        };
        // The stat data a later lstat of the untouched file returns, for the next verify: taken
        // once it is in place (a rename moves ctime on most filesystems) through the descriptor
        // still open, one GETATTR on a network filesystem instead of a lookup and a GETATTR
        // (an NFS client flushes a file's cached writes before answering a stat of it, so
        // closing it afterwards moves no time). Without it the file is simply hashed once.
        // Beyond what a sync records (treesync_backend::backend::RECORD_AT_MOST), not even that.
        let room = self.recording.load(std::sync::atomic::Ordering::Relaxed)
            && self.written.lock().expect("never poisoned").len() < treesync_backend::backend::RECORD_AT_MOST;
        if room && let Ok(st) = rustix::fs::fstat(&fd) {
            let written = Written { path: path.as_bytes().to_vec(), size: st.st_size as u64, stat: file_stat(&st) };
            self.written.lock().expect("never poisoned").push(written);
        }
        drop(fd);
        Ok(())
    }

    /// The files written from blobs since the last call (see [`Backend::take_written`]).
    ///
    /// [`Backend::take_written`]: treesync_backend::Backend::take_written
    pub fn take_written(&self) -> Vec<Written> {
        std::mem::take(&mut *self.written.lock().expect("never poisoned"))
    }

    /// Whether to note the files written from now on (see [`Backend::record_written`]).
    ///
    /// [`Backend::record_written`]: treesync_backend::Backend::record_written
    pub fn record_written(&self, on: bool) {
        self.recording.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Append `bytes` to `name` of the state folder (created if absent; opened without
    /// following symlinks), in one `write` where the kernel allows.
    pub fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let rel = format!("{STATE_DIR}/{name}");
        let dir = self.state_fd(true)?.expect("created");
        // Appended to in place, so only a file of its own: a hard link a local user planted
        // there would take the bytes into another file.
        lockfile::append_own(dir, name, bytes, self.fsync).map_err(|e| match e {
            lockfile::AppendError::NotOwn => Error::not_own_file(self.root.join(&rel).display().to_string()),
            lockfile::AppendError::Io("open", e) => self.state_path_error(&rel, e),
            lockfile::AppendError::Io(what, e) => Error::io(what, &rel, io(e)),
        })
    }

    /// The modification time of `name` in the state folder; `None` if absent.
    pub fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        if self.root_fd().is_err() {
            return Ok(None);
        }
        let Some(dir) = self.state_fd(false)? else { return Ok(None) };
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some((st.st_mtime, st.st_mtime_nsec as u32))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.state_path_error(&format!("{STATE_DIR}/{name}"), e)),
        }
    }

    /// Write `file` into the new temporary `tmp` of `dir` (synced with `fsync`); its descriptor.
    fn write_tmp(&self, dir: BorrowedFd<'_>, tmp: &OsStr, file: &NewFile<'_>) -> Result<OwnedFd, Error> {
        let path = file.content.path;
        let fd = Self::create_tmp(dir, tmp, if file.executable { 0o777 } else { 0o666 })
            .map_err(|e| Error::io("write", path, io(e)))?;
        file.blobs
            .read_content(&file.content, &mut |mut chunk| {
                while !chunk.is_empty() {
                    match rustix::io::write(&fd, chunk) {
                        Ok(n) => chunk = &chunk[n..],
                        Err(Errno::INTR) => {}
                        Err(e) => return Err(io(e)),
                    }
                }
                Ok(())
            })
            .map_err(|e| Error::from_blob("write", path, e))?;
        if self.fsync {
            rustix::fs::fsync(&fd).map_err(|e| Error::io("fsync", path, io(e)))?;
        }
        Ok(fd)
    }

    pub fn prepare(&self, create: bool) -> Result<TargetState, Error> {
        match std::fs::symlink_metadata(&self.root) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if create {
                    match std::fs::create_dir(&self.root) {
                        Ok(()) => {}
                        // Another sync made it a moment ago: look again (its lock decides).
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return self.prepare(false),
                        Err(e) => return Err(Error::io("create target directory", self.root_display(), e)),
                    }
                }
                return Ok(TargetState::Empty);
            }
            Err(e) => return Err(Error::io("read target directory", self.root_display(), e)),
            Ok(m) if m.is_symlink() => return Err(target_is_a_symlink(&self.root)),
            Ok(m) if !m.is_dir() => {
                return Err(Error::io(
                    "use target",
                    self.root_display(),
                    std::io::Error::new(std::io::ErrorKind::NotADirectory, "it exists and is not a directory"),
                ));
            }
            Ok(_) => {}
        }
        // A managed target answers with one lookup; only an unmanaged one is listed (and only
        // until its first entry).
        match std::fs::symlink_metadata(self.root.join(STATE_DIR)) {
            Ok(m) if m.is_dir() => return Ok(TargetState::Managed),
            Ok(m) => {
                return Err(Error::StateFolder {
                    path: self.root.join(STATE_DIR).display().to_string(),
                    found: if m.is_symlink() {
                        "symlink"
                    } else if m.is_file() {
                        "file"
                    } else {
                        "special file"
                    },
                });
            }
            Err(_) => {}
        }
        let mut entries =
            std::fs::read_dir(&self.root).map_err(|e| Error::io("read target directory", self.root_display(), e))?;
        match entries.next() {
            None => Ok(TargetState::Empty),
            // `.treesync` made a moment ago by a sync starting at the same time as this one (its
            // lock): whatever else is there is its work (the state, read under the lock, will tell).
            Some(Ok(_)) if std::fs::symlink_metadata(self.root.join(STATE_DIR)).is_ok_and(|m| m.is_dir()) => {
                Ok(TargetState::Managed)
            }
            Some(Ok(_)) => Ok(TargetState::Unmanaged),
            Some(Err(e)) => Err(Error::io("read target directory", self.root_display(), e)),
        }
    }

    pub fn read_dir(&self, rel: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let fd = self
            .open_dir(rel.as_bytes())
            .and_then(|fd| self.open_beneath(fd.as_fd(), b".", OFlags::RDONLY | OFlags::DIRECTORY))
            .map_err(|e| Error::io("list", self.root.join(rel.to_path()).display(), io(e)))?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| Error::io("list", rel, io(e)))?;
        let mut out = Vec::new();
        for e in dir {
            let e = e.map_err(|e| Error::io("list", rel, io(e)))?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." || (rel.is_root() && (name == STATE_DIR.as_bytes() || name == b".git")) {
                continue;
            }
            let is_dir = match e.file_type() {
                FileType::Unknown => rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
                    .map_err(|e| Error::io("list", rel, io(e)))?,
                t => t == FileType::Directory,
            };
            out.push(DirEntry { name: name.to_vec(), is_dir });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.load_file("state")
    }

    pub fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        self.load_file(name)
    }

    pub fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.store_file(name, bytes)
    }

    /// Walk the whole target with `jobs` threads: one readdir per directory, one lstat per
    /// entry that is not a directory (a directory's `d_type` says all verify needs of it; a file's
    /// stat data is what verify compares). `jobs` is not capped by the cores: on a network
    /// filesystem the threads wait on round trips, and the caller knows which storage it is.
    pub fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        use std::sync::{Condvar, Mutex};
        struct Queue {
            dirs: Vec<Vec<u8>>,
            busy: usize,
            failed: bool,
        }
        let root = self.root_fd()?;
        let queue = Mutex::new(Queue { dirs: vec![Vec::new()], busy: 0, failed: false });
        let wake = Condvar::new();
        let out = Mutex::new(Vec::new());
        let error = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..jobs.max(1) {
                s.spawn(|| {
                    loop {
                        let dir = {
                            let mut q = queue.lock().expect("never poisoned");
                            loop {
                                if q.failed {
                                    return;
                                }
                                if let Some(d) = q.dirs.pop() {
                                    q.busy += 1;
                                    break d;
                                }
                                if q.busy == 0 {
                                    wake.notify_all();
                                    return;
                                }
                                q = wake.wait(q).expect("never poisoned");
                            }
                        };
                        let result = self.scan_dir(root, &dir, false);
                        let mut q = queue.lock().expect("never poisoned");
                        q.busy -= 1;
                        match result {
                            Ok((found, subdirs)) => {
                                q.dirs.extend(subdirs);
                                drop(q);
                                out.lock().expect("never poisoned").extend(found);
                            }
                            Err(e) => {
                                q.failed = true;
                                drop(q);
                                *error.lock().expect("never poisoned") = Some(e);
                            }
                        }
                        wake.notify_all();
                    }
                });
            }
        });
        if let Some(e) = error.into_inner().expect("never poisoned") {
            return Err(e);
        }
        Ok(out.into_inner().expect("never poisoned"))
    }

    /// What is directly in each of `dirs` (one readdir each, one lstat per entry that is not a
    /// directory), with `jobs` threads (not capped, as for [`Target::scan`]); a directory that
    /// is missing, or is not one, is skipped.
    pub fn scan_dirs(&self, dirs: &[Vec<u8>], jobs: usize) -> Result<Vec<Found>, Error> {
        let root = self.root_fd()?;
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<Result<Vec<Found>, Error>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..jobs.min(dirs.len()).max(1))
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(dir) = dirs.get(i) else { return Ok(out) };
                            match self.scan_dir(root, dir, true) {
                                Ok((found, _)) => out.extend(found),
                                Err(e) => return Err(e),
                            }
                        }
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().expect("a scan thread does not panic")).collect()
        });
        let mut out = Vec::new();
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }

    /// One directory: what is in it, and its subdirectories. With `missing_ok`, a directory
    /// that is not there (or is not a directory, or is a symlink) lists as empty.
    fn scan_dir(
        &self,
        root: BorrowedFd<'_>,
        rel: &[u8],
        missing_ok: bool,
    ) -> Result<(Vec<Found>, Vec<Vec<u8>>), Error> {
        let shown = || String::from_utf8_lossy(rel).into_owned();
        let fd = match if rel.is_empty() {
            self.open_beneath(root, b".", OFlags::RDONLY | OFlags::DIRECTORY)
        } else {
            self.open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY)
        } {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) if missing_ok => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(Error::io("list", shown(), io(e))),
        };
        // One getdents64 call returns a whole directory of ordinary size.
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 64 * 1024];
        let mut dir = rustix::fs::RawDir::new(&fd, &mut buf);
        let mut found = Vec::new();
        let mut subdirs = Vec::new();
        while let Some(e) = dir.next() {
            let e = e.map_err(|e| Error::io("list", shown(), io(e)))?;
            let name = e.file_name().to_bytes();
            // `.git` at the root is the clone of an adopted tree (`--git-worktree`): never ours.
            if name == b"." || name == b".." || (rel.is_empty() && (name == STATE_DIR.as_bytes() || name == b".git")) {
                continue;
            }
            let mut path = rel.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            // A directory needs no stat: verify compares no stat data of directories, and on a
            // network filesystem each stat is a LOOKUP and a GETATTR round trip.
            if e.file_type() == FileType::Directory {
                subdirs.push(path.clone());
                found.push(Found { path, kind: FoundKind::Dir });
                continue;
            }
            let st = match rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(err) => return Err(Error::io("stat", String::from_utf8_lossy(&path), io(err))),
            };
            let stat = file_stat(&st);
            let kind = match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    subdirs.push(path.clone());
                    FoundKind::Dir
                }
                FileType::RegularFile => FoundKind::File {
                    size: st.st_size as u64,
                    executable: Some(st.st_mode & 0o100 != 0),
                    stat: Some(stat),
                    etag: None,
                    typed: true,
                },
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(&fd, e.file_name(), Vec::new())
                        .map_err(|err| Error::io("read link", String::from_utf8_lossy(&path), io(err)))?;
                    FoundKind::Link { target: target.into_bytes(), stat: Some(stat) }
                }
                _ => FoundKind::Other,
            };
            found.push(Found { path, kind });
        }
        Ok((found, subdirs))
    }

    pub fn read_file(&self, rel: &RelPath) -> Result<Vec<u8>, Error> {
        let root = self.root_fd()?;
        let fd = self.open_beneath(root, rel.as_bytes(), OFlags::RDONLY).map_err(|e| Error::io("read", rel, io(e)))?;
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut buf).map_err(|e| Error::io("read", rel, e))?;
        Ok(buf)
    }

    /// Read `name` of the state folder; `None` if it (or the folder) does not exist.
    fn load_file(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        if self.root_fd().is_err() {
            return Ok(None);
        }
        let Some(dir) = self.state_fd(false)? else { return Ok(None) };
        let rel = format!("{STATE_DIR}/{name}");
        match self.open_beneath(dir, name.as_bytes(), OFlags::RDONLY) {
            Ok(fd) => {
                let mut f = std::fs::File::from(fd);
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut buf).map_err(|e| Error::io("read", &rel, e))?;
                Ok(Some(buf))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.state_path_error(&rel, e)),
        }
    }

    pub fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.store_file("state", bytes)
    }

    /// Replace `name` of the state folder atomically (a temporary in `.treesync/tmp`, renamed
    /// into the folder, both opened without following symlinks).
    fn store_file(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let tmp_dir = self.tmp_fd()?;
        let dir = self.state_fd(true)?.expect("created");
        let tmp = format!("state.{}", self.tmp_name());
        let result = (|| {
            let fd = rustix::fs::openat(
                tmp_dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )?;
            let mut rest = bytes;
            while !rest.is_empty() {
                let n = rustix::io::write(&fd, rest)?;
                rest = &rest[n..];
            }
            if self.fsync {
                rustix::fs::fsync(&fd)?;
            }
            rustix::fs::renameat(tmp_dir, tmp.as_str(), dir, name)
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(tmp_dir, tmp.as_str(), AtFlags::empty());
            return Err(Error::io("write", self.root.join(STATE_DIR).join(name).display(), io(e)));
        }
        Ok(())
    }

    /// Take the target's lock for `holder` (see [`crate::lockfile`]) and clear the temporaries
    /// of runs that were killed.
    pub fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let dir = self.state_fd(true)?.expect("created");
        let held = lockfile::take(dir, holder).map_err(|e| {
            let lock_path = self.root.join(LOCK_FILE).display().to_string();
            e.into_error(&lock_path, |e| match e {
                Errno::LOOP => self.state_path_error(LOCK_FILE, e),
                e => Error::io("open lock file", &lock_path, io(e)),
            })
        })?;
        // Temporaries of runs that were killed: they are ours alone now that we hold the lock.
        // (The folder is made by the first state write, not here: `status` probes the lock.)
        if let Ok(tmp_dir) = self.open_beneath(dir, b"tmp", OFlags::PATH | OFlags::DIRECTORY)
            && let Ok(dfd) = self.open_beneath(tmp_dir.as_fd(), b".", OFlags::RDONLY | OFlags::DIRECTORY)
            && let Ok(mut dir) = rustix::fs::Dir::read_from(&dfd)
        {
            while let Some(Ok(e)) = dir.next() {
                let n = e.file_name();
                if n.to_bytes() != b"." && n.to_bytes() != b".." {
                    let _ = rustix::fs::unlinkat(&dfd, n, AtFlags::empty());
                }
            }
        }
        Ok(held.into_guard())
    }
}
