//! The target root and the `.treesync` folder, handled with as few round trips as possible.
//!
//! On a network filesystem the journal is most of the fixed cost of a sync: the local
//! backend's write-a-temporary-then-rename costs ~9 requests per state write. Here the state
//! file is opened once per run, next to the lock, and the two journal writes of a sync
//! (`in progress` before the first op, `synced` after the last) are each one `pwrite` at offset
//! 0, padded with spaces to the length it had (JSON ignores trailing whitespace), so it never
//! needs a truncate. A process killed between writes leaves one whole version (a write of a few
//! hundred bytes is one request); the file stays readable by the local backend.
//!
//! Nothing is written in place through a file that is not treesync's own: the state file only
//! when `fstat` says it is a regular file with one link (else its first write goes to a new
//! file renamed over it), and a lock file that is a hard link (or not a regular file) stops the
//! sync with the path and what to do, before anything is written to it.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use treesync_backend::backend::{Error, LockGuard, TargetState};
use treesync_backend::path::STATE_DIR;
use treesync_backend_local::fs::Target;
use treesync_backend_local::lockfile::{self, Flock, own_file, write_all_at};

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

pub(crate) struct Meta {
    root: PathBuf,
    fsync: bool,
    root_fd: Mutex<Option<Arc<OwnedFd>>>,
    dir: Mutex<Option<Arc<OwnedFd>>>,
    /// The state file of the run holding the lock, and the length it has.
    run: Arc<Mutex<Option<Run>>>,
}

struct Run {
    state: Option<OwnedFd>,
    /// The index delta, opened for appending while the state file was being opened (when it
    /// exists and is a file of its own): its append at the end of the run is then a write, not
    /// a lookup and an open more on the way out.
    delta: Option<OwnedFd>,
    /// The state file is a regular file of its own (one link), so it may be written in place.
    own: bool,
    len: usize,
}

impl Meta {
    pub(crate) fn new(root: PathBuf, fsync: bool) -> Self {
        Meta { root, fsync, root_fd: Mutex::new(None), dir: Mutex::new(None), run: Arc::new(Mutex::new(None)) }
    }

    fn shown(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    /// The target directory's handle (opened by `prepare`, or here on first use).
    pub(crate) fn root_fd(&self) -> Result<Arc<OwnedFd>, Errno> {
        let mut slot = self.root_fd.lock().expect("never poisoned");
        if let Some(fd) = &*slot {
            return Ok(fd.clone());
        }
        // Not through a symlink at the target's own path: the local backend and `nfs://`
        // refuse one too (the tree and `.treesync` would land wherever it points).
        let fd = Arc::new(rustix::fs::open(
            &self.root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?);
        *slot = Some(fd.clone());
        Ok(fd)
    }

    /// One lookup of the root and one of `.treesync` tell an unmanaged, empty or managed target.
    /// What the target holds. With `probe_case`, `.TREESYNC` is looked up in the target while
    /// `.treesync` is (two round trips at once), and the second value says whether it was
    /// found, for a target found managed (see [`Target::probe_case_in`]).
    pub(crate) fn prepare_probing(&self, create: bool, probe_case: bool) -> Result<(TargetState, Option<bool>), Error> {
        *self.dir.lock().expect("never poisoned") = None;
        let root = self.fresh_root_fd();
        let (Ok(fd), true) = (&root, probe_case) else { return self.prepare_from(create, root).map(|s| (s, None)) };
        let fd = fd.clone();
        let (found, state) =
            at_once(|| Target::finds_state_dir_upper_case(fd.as_fd()), || self.prepare_from(create, root));
        state.map(|s| (s, (s == TargetState::Managed).then_some(found)))
    }

    /// The root handle, opened again (a new run: the directory may have been replaced).
    fn fresh_root_fd(&self) -> Result<Arc<OwnedFd>, Errno> {
        *self.root_fd.lock().expect("never poisoned") = None;
        self.root_fd()
    }

    pub(crate) fn prepare(&self, create: bool) -> Result<TargetState, Error> {
        *self.dir.lock().expect("never poisoned") = None;
        let root = self.fresh_root_fd();
        self.prepare_from(create, root)
    }

    /// [`Meta::prepare`] with the root handle just opened again (or why it could not be).
    fn prepare_from(&self, create: bool, root: Result<Arc<OwnedFd>, Errno>) -> Result<TargetState, Error> {
        let root = match root {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                if create {
                    match std::fs::create_dir(&self.root) {
                        Ok(()) => {}
                        // Another sync made it a moment ago: look at it like any existing one.
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return self.prepare(false),
                        Err(e) => return Err(Error::io("create target directory", self.root.display(), e)),
                    }
                }
                return Ok(TargetState::Empty);
            }
            // O_NOFOLLOW | O_DIRECTORY on a symlink says ENOTDIR (or ELOOP): tell them apart.
            Err(Errno::NOTDIR | Errno::LOOP)
                if std::fs::symlink_metadata(&self.root).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                return Err(treesync_backend_local::fs::target_is_a_symlink(&self.root));
            }
            Err(Errno::NOTDIR | Errno::LOOP) => {
                return Err(Error::io(
                    "use target",
                    self.root.display(),
                    std::io::Error::new(std::io::ErrorKind::NotADirectory, "it exists and is not a directory"),
                ));
            }
            Err(e) => return Err(Error::io("open target directory", self.root.display(), io(e))),
        };
        match self.open_dir(&root) {
            Ok(fd) => {
                *self.dir.lock().expect("never poisoned") = Some(fd);
                Ok(TargetState::Managed)
            }
            Err(Errno::NOENT) => {
                let fd = rustix::fs::openat(
                    &*root,
                    ".",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| Error::io("read target directory", self.root.display(), io(e)))?;
                let dir = rustix::fs::Dir::read_from(&fd)
                    .map_err(|e| Error::io("read target directory", self.root.display(), io(e)))?;
                let mut state = TargetState::Empty;
                for e in dir {
                    let e = e.map_err(|e| Error::io("read target directory", self.root.display(), io(e)))?;
                    match e.file_name().to_bytes() {
                        b"." | b".." => {}
                        // Made a moment ago by a sync starting at the same time as this one:
                        // whatever else is there is its work (the state, read under the lock,
                        // will tell).
                        name if name == STATE_DIR.as_bytes() => return Ok(TargetState::Managed),
                        _ => state = TargetState::Unmanaged,
                    }
                }
                Ok(state)
            }
            Err(e) => Err(self.state_dir_error(&root, "read", e)),
        }
    }

    /// `.treesync` could not be opened: name a symlink or a file in its place as such.
    fn state_dir_error(&self, root: &OwnedFd, op: &'static str, e: Errno) -> Error {
        if matches!(e, Errno::NOTDIR | Errno::LOOP)
            && let Ok(st) = rustix::fs::statat(root, STATE_DIR, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        {
            let found = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::Symlink => "symlink",
                rustix::fs::FileType::RegularFile => "file",
                rustix::fs::FileType::Directory => "directory",
                _ => "special file",
            };
            return Error::StateFolder { path: self.shown(STATE_DIR), found };
        }
        Error::io(op, self.shown(STATE_DIR), io(e))
    }

    fn open_dir(&self, root: &OwnedFd) -> Result<Arc<OwnedFd>, Errno> {
        let fd = rustix::fs::openat(
            root,
            STATE_DIR,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Arc::new(fd))
    }

    /// `.treesync`, created if `create` and missing.
    fn dir(&self, create: bool) -> Result<Option<Arc<OwnedFd>>, Error> {
        if let Some(fd) = &*self.dir.lock().expect("never poisoned") {
            return Ok(Some(fd.clone()));
        }
        let root = match self.root_fd() {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(Error::io("open target directory", self.root.display(), io(e))),
        };
        let fd = match self.open_dir(&root) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&*root, STATE_DIR, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(Error::io("create", self.shown(STATE_DIR), io(e))),
                }
                self.open_dir(&root).map_err(|e| self.state_dir_error(&root, "open", e))?
            }
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.state_dir_error(&root, "open", e)),
        };
        *self.dir.lock().expect("never poisoned") = Some(fd.clone());
        Ok(Some(fd))
    }

    /// Take the target's lock for `holder` (the local backend's [`lockfile`], shared) and open
    /// the run's state file next to it.
    pub(crate) fn lock(&self, holder: &treesync_backend::lock::Holder) -> Result<LockGuard, Error> {
        let dir = self.dir(true)?.expect("created");
        let lock = lockfile::take(dir.as_fd(), holder).map_err(|e| {
            let lock_path = self.shown(&format!("{STATE_DIR}/{}", lockfile::NAME));
            e.into_error(&lock_path, |e| Error::io("open lock file", &lock_path, io(e)))
        })?;
        // The index delta is opened while the state file is: two round trips at once. Any
        // trouble with it (absent, a planted link) is left to the append, which reports it.
        let (delta, state) = at_once(
            || lockfile::open_own_for_append(dir.as_fd(), treesync_backend::backend::INDEX_DELTA, false).ok().flatten(),
            || rustix::fs::openat(&*dir, "state", OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()),
        );
        let state = match state {
            Ok(fd) => Some(fd),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(Error::io("open", self.shown(&format!("{STATE_DIR}/state")), io(e))),
        };
        let own = match &state {
            Some(fd) => {
                own_file(fd).map_err(|e| Error::io("open", self.shown(&format!("{STATE_DIR}/state")), io(e)))?
            }
            None => false,
        };
        *self.run.lock().expect("never poisoned") = Some(Run { state, delta, own, len: 0 });
        Ok(LockGuard(Box::new(Held { _lock: lock, run: self.run.clone() })))
    }

    pub(crate) fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        let shown = || self.shown(&format!("{STATE_DIR}/state"));
        let mut run = self.run.lock().expect("never poisoned");
        if let Some(run) = run.as_mut() {
            let Some(fd) = &run.state else { return Ok(None) };
            let bytes = read_all(fd).map_err(|e| Error::io("read", shown(), io(e)))?;
            run.len = bytes.len();
            return Ok(Some(bytes));
        }
        drop(run);
        // Not under the lock (status): open, read, close.
        let Some(dir) = self.dir(false)? else { return Ok(None) };
        match rustix::fs::openat(&*dir, "state", OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => read_all(&fd).map(Some).map_err(|e| Error::io("read", shown(), io(e))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::io("read", shown(), io(e))),
        }
    }

    /// Write the state in place (see the module docs). Only under the lock.
    pub(crate) fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        let shown = || self.shown(&format!("{STATE_DIR}/state"));
        let mut guard = self.run.lock().expect("never poisoned");
        let Some(run) = guard.as_mut() else {
            return Err(Error::NotLocked { backend: self.shown("") });
        };
        if !run.own {
            // No state file of our own (none yet, or a hard link to another file, or not a
            // regular file): a new file renamed over it; later writes go in place.
            let dir = self.dir(true)?.expect("created");
            let fd = replace(&dir, "state", bytes, self.fsync).map_err(|e| Error::io("write", shown(), io(e)))?;
            run.len = bytes.len();
            run.state = Some(fd);
            run.own = true;
            return Ok(());
        }
        let fd = run.state.as_ref().expect("opened above");
        let mut padded = bytes.to_vec();
        if padded.len() < run.len {
            padded.resize(run.len, b' ');
        }
        write_all_at(fd, &padded).map_err(|e| Error::io("write", shown(), io(e)))?;
        if self.fsync {
            rustix::fs::fdatasync(fd).map_err(|e| Error::io("fsync", shown(), io(e)))?;
        }
        run.len = padded.len();
        Ok(())
    }
}

impl Meta {
    /// The modification time of `name` in `.treesync`, as the storage's clock stamped it.
    ///
    /// The sync asks for the state file's right after its last journal write (the clock of the
    /// stat delta): under the lock that file is open, so it is one `fstat` (one GETATTR) instead
    /// of a lookup of the root, of `.treesync` and of the file before it. Anything else is one
    /// lookup relative to the handle of `.treesync`.
    pub(crate) fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        let shown = || self.shown(&format!("{STATE_DIR}/{name}"));
        if name == "state"
            && let Some(Run { state: Some(fd), .. }) = &*self.run.lock().expect("never poisoned")
        {
            let st = rustix::fs::fstat(fd).map_err(|e| Error::io("read the time of", shown(), io(e)))?;
            return Ok(Some((st.st_mtime, st.st_mtime_nsec as u32)));
        }
        let Some(dir) = self.dir(false)? else { return Ok(None) };
        match rustix::fs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some((st.st_mtime, st.st_mtime_nsec as u32))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::io("read the time of", shown(), io(e))),
        }
    }

    /// Append `bytes` to `name` in `.treesync` (created if absent), opened relative to the
    /// handle of `.treesync` the lock already holds: one lookup and one open, none for the root
    /// or the folder. Only into a regular file of its own (one link): a hard link or symlink
    /// planted there would take the bytes elsewhere.
    pub(crate) fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let shown = || self.shown(&format!("{STATE_DIR}/{name}"));
        if name == treesync_backend::backend::INDEX_DELTA
            && let Some(Run { delta: Some(fd), .. }) = &*self.run.lock().expect("never poisoned")
        {
            return lockfile::append_to(fd, bytes, self.fsync).map_err(|e| match e {
                lockfile::AppendError::Io(what, e) => Error::io(what, shown(), io(e)),
                lockfile::AppendError::NotOwn => Error::not_own_file(shown()),
            });
        }
        let dir = self.dir(true)?.expect("created");
        lockfile::append_own(dir.as_fd(), name, bytes, self.fsync).map_err(|e| match e {
            lockfile::AppendError::NotOwn => Error::not_own_file(shown()),
            // O_NOFOLLOW on a symlink: name it as what it is.
            lockfile::AppendError::Io("open", Errno::LOOP) => Error::StateFolder { path: shown(), found: "symlink" },
            lockfile::AppendError::Io(what, e) => Error::io(what, shown(), io(e)),
        })
    }
}

/// Write `bytes` to a new file `.treesync-tmp.NAME` in `dir` (`O_EXCL`: never through what is
/// there; a leftover is removed first) and rename it over `name`: the new file, open.
fn replace(dir: &OwnedFd, name: &str, bytes: &[u8], fsync: bool) -> Result<OwnedFd, Errno> {
    let tmp = Target::sibling_tmp(name.as_bytes());
    let tmp = std::ffi::OsStr::from_bytes(&tmp);
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, tmp, flags, Mode::from_raw_mode(0o666)) {
        Err(Errno::EXIST) => {
            rustix::fs::unlinkat(dir, tmp, AtFlags::empty())?;
            rustix::fs::openat(dir, tmp, flags, Mode::from_raw_mode(0o666))
        }
        r => r,
    }?;
    let result = write_all_at(&fd, bytes)
        .and_then(|()| if fsync { rustix::fs::fdatasync(&fd) } else { Ok(()) })
        .and_then(|()| rustix::fs::renameat(dir, tmp, dir, name));
    if let Err(e) = result {
        let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
        return Err(e);
    }
    Ok(fd)
}

/// The whole file. A short read of a regular file is its end (nobody else writes these files
/// while we hold the lock), so a state file of ordinary size costs one request.
fn read_all(fd: &OwnedFd) -> Result<Vec<u8>, Errno> {
    const CHUNK: usize = 64 * 1024;
    let mut out = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match rustix::io::pread(fd, &mut buf, out.len() as u64) {
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if n < CHUNK {
                    return Ok(out);
                }
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// The lock of one run; the run's state file is closed with it.
struct Held {
    /// Unlocks when dropped, after the state file is closed.
    _lock: Flock,
    run: Arc<Mutex<Option<Run>>>,
}

impl Drop for Held {
    /// The state file and the delta are closed at once (each close is a round trip on a
    /// network filesystem, which flushes what was written), then the lock.
    fn drop(&mut self) {
        let run = self.run.lock().expect("never poisoned").take();
        if let Some(Run { state, delta: Some(delta), .. }) = run {
            at_once(move || drop(delta), move || drop(state));
        }
    }
}

/// Run `a` on a thread of its own while `b` runs on this one (two requests of a network
/// filesystem in flight at once); both are done on return. If no thread can be started, `a`
/// runs here after `b`.
fn at_once<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    RA: Send,
    B: FnOnce() -> RB,
{
    let a = Mutex::new(Some(a));
    let run_a = || a.lock().expect("never poisoned").take().map(|a| a());
    std::thread::scope(|s| {
        let other = std::thread::Builder::new().spawn_scoped(s, run_a);
        let rb = b();
        let ra = match other {
            Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => None,
        };
        // Not run on a thread of its own (none could be started): run it here.
        let ra = ra.or_else(run_a).expect("run once, on one thread or the other");
        (ra, rb)
    })
}
