//! The generations host of a directory target (`sync --atomic` on a local disk or a mounted
//! NAS): [`FsHost`] implements [`Host`] with `*at` calls beneath the target's parent.
//!
//! * The parent `PARENT` of the target `PARENT/NAME` is opened once, following it if it is a
//!   symlink (as the target path itself is the user's choice); everything beneath it — the
//!   target, the home `PARENT/.NAME.treesync`, the slots, the lock and the record — is reached
//!   with `*at` calls that never follow a symlink (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`, one
//!   component at a time). A home that is a symlink or a file is refused
//!   ([`Error::StateFolder`]).
//! * The switch is one `rename` (a link made in `HOME/tmp`, renamed over the target) or one
//!   `renameat2(RENAME_EXCHANGE)`; see [`Host::switch`].
//! * A new generation is started by [`Host::clone_tree`]: reflinks (`FICLONE`) where the
//!   filesystem has them, else hard links, else byte copies; of `.treesync` only the state is
//!   copied, last.
//! * Removal of a slot never follows a symlink planted in it: links are unlinked, never
//!   traversed.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use treesync_core::backend::{Backend, Error, LockGuard};
use treesync_core::generation::{At, AtTarget, CloneHow, Cloned, Host, Switch, Switched};
use treesync_core::path::{STATE_DIR, TMP_PREFIX};
use treesync_core::state::Holder;

use crate::lockfile::{self, TakeError};

/// Makes the backend of a generation directory (a [`LocalBackend`](crate::LocalBackend), or
/// the mounted-NFS backend), with the policy of the target's own backend.
pub type Opener = Arc<dyn Fn(PathBuf) -> Arc<dyn Backend> + Send + Sync>;

/// The folder of the home where links, record temporaries and the exchange probe are made.
const TMP: &str = "tmp";
/// The record file of the home.
const RECORD: &str = "generations";
/// The slot name [`Host::held`] gives the target itself when it is a real directory.
const AT_TARGET: &str = "target";

/// The state of an [`FsHost`], shared with the blocking pool.
struct Inner {
    target: PathBuf,
    parent: PathBuf,
    /// `NAME` (empty when the target path has no last component: every call then fails).
    name: OsString,
    /// `.NAME.treesync`.
    home: OsString,
    open: Opener,
    parent_fd: OnceLock<OwnedFd>,
    exchange: OnceLock<bool>,
    counter: AtomicU64,
    /// The slots claimed for a generation being prepared ([`Host::claim_slot`]): the
    /// directory each name held then (device, inode). The switch swaps in that directory or
    /// nothing.
    claims: Mutex<BTreeMap<String, Identity>>,
    /// Tests: behave as a filesystem without `RENAME_EXCHANGE`.
    #[cfg(test)]
    no_exchange: bool,
}

/// A directory's device and inode: which directory a name held when it was looked at.
type Identity = (u64, u64);

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::Directory => "directory",
        FileType::RegularFile => "file",
        FileType::Symlink => "symlink",
        _ => "special file",
    }
}

/// The exchange is not supported by this kernel or filesystem (as opposed to failing).
fn unsupported(e: Errno) -> bool {
    matches!(e, Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP)
}

/// A slot name is one plain path component.
fn valid_slot(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

impl Inner {
    fn new(target: PathBuf, open: Opener) -> Inner {
        let name = target.file_name().map(OsStr::to_os_string).unwrap_or_default();
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut home = OsString::from(".");
        home.push(&name);
        home.push(".treesync");
        Inner {
            target,
            parent,
            name,
            home,
            open,
            parent_fd: OnceLock::new(),
            exchange: OnceLock::new(),
            claims: Mutex::new(BTreeMap::new()),
            counter: AtomicU64::new(0),
            #[cfg(test)]
            no_exchange: false,
        }
    }

    fn home_path(&self) -> PathBuf {
        self.parent.join(&self.home)
    }

    fn shown(&self, rel: &str) -> String {
        self.home_path().join(rel).display().to_string()
    }

    /// Swap `a` in `a_dir` and `b` in `b_dir` (`renameat2(RENAME_EXCHANGE)`).
    fn exchange<P: rustix::path::Arg, Q: rustix::path::Arg>(
        &self,
        a_dir: impl AsFd,
        a: P,
        b_dir: impl AsFd,
        b: Q,
    ) -> Result<(), Errno> {
        #[cfg(test)]
        if self.no_exchange {
            return Err(Errno::INVAL);
        }
        rustix::fs::renameat_with(a_dir, a, b_dir, b, RenameFlags::EXCHANGE)
    }

    fn tmp_name(&self, what: &str) -> String {
        format!("{what}.{}.{}", std::process::id(), self.counter.fetch_add(1, Ordering::Relaxed))
    }

    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Inner) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let me = self.clone();
        treesync_core::backend::blocking(move || f(&me)).await
    }

    /// The parent directory, opened once (following it: the target path is the user's choice).
    fn parent_fd(&self) -> Result<BorrowedFd<'_>, Error> {
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
    fn not_a_dir(&self, at: BorrowedFd<'_>, name: &OsStr, shown: String, e: Errno) -> Error {
        if matches!(e, Errno::LOOP | Errno::NOTDIR)
            && let Ok(st) = rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
        {
            return Error::StateFolder { path: shown, found: type_name(FileType::from_raw_mode(st.st_mode)) };
        }
        Error::io("open", shown, io(e))
    }

    /// The home, opened without following a symlink; `None` when it does not exist.
    fn home_fd(&self) -> Result<Option<OwnedFd>, Error> {
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
    fn home(&self) -> Result<OwnedFd, Error> {
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
    fn tmp(&self, home: BorrowedFd<'_>) -> Result<OwnedFd, Error> {
        match rustix::fs::mkdirat(home, TMP, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.shown(TMP), io(e))),
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(home, TMP, flags, Mode::empty())
            .map_err(|e| self.not_a_dir(home, OsStr::new(TMP), self.shown(TMP), e))
    }

    fn slot_name<'a>(&self, slot: &'a str) -> Result<&'a str, Error> {
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
    fn open_at(&self, at: &At) -> Result<OwnedFd, Error> {
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

    /// The text of a link `switch` makes to `slot`: `.NAME.treesync/SLOT`.
    fn link_text(&self, slot: &str) -> Vec<u8> {
        let mut t = self.home.as_bytes().to_vec();
        t.push(b'/');
        t.extend_from_slice(slot.as_bytes());
        t
    }

    /// The slot a link text names, when it is exactly the form `switch` makes.
    fn slot_of_link(&self, text: &[u8]) -> Option<String> {
        let rest = text.strip_prefix(self.home.as_bytes())?.strip_prefix(b"/")?;
        (valid_slot(rest) && rest != TMP.as_bytes()).then(|| String::from_utf8(rest.to_vec()).ok()).flatten()
    }

    fn at_target_blocking(&self) -> Result<AtTarget, Error> {
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

    fn read_link(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Result<Vec<u8>, Error> {
        rustix::fs::readlinkat(dir, name, Vec::new())
            .map(|t| t.into_bytes())
            .map_err(|e| Error::io("read link", self.target.display(), io(e)))
    }

    fn create_home_blocking(&self) -> Result<(), Error> {
        let parent = self.parent_fd()?;
        match rustix::fs::mkdirat(parent, &self.home, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.home_path().display(), io(e))),
        }
        let home = self.home()?;
        self.tmp(home.as_fd())?;
        Ok(())
    }

    fn lock_blocking(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let home = self.home()?;
        let path = || self.shown(lockfile::NAME);
        let held = lockfile::take(home.as_fd(), holder).map_err(|e| match e {
            TakeError::Open(e) => self.not_a_dir(home.as_fd(), OsStr::new(lockfile::NAME), path(), e),
            TakeError::Locked(holder) => Error::Locked {
                holder: holder.map_or_else(
                    || format!("holder unknown: no holder line treesync wrote in {}", path()),
                    |h| h.to_string(),
                ),
            },
            TakeError::NotOwnFile => Error::not_own_file(path()),
            TakeError::Lock(e) => Error::io("lock", path(), io(e)),
            TakeError::Write(e) => Error::io("write lock file", path(), io(e)),
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

    fn load_record_blocking(&self) -> Result<Option<Vec<u8>>, Error> {
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

    fn store_record_blocking(&self, bytes: &[u8]) -> Result<(), Error> {
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

    fn slots_blocking(&self) -> Result<Vec<String>, Error> {
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

    fn probe_exchange(&self) -> Result<bool, Error> {
        let home = self.home()?;
        let tmp = self.tmp(home.as_fd())?;
        let (a, b) = (self.tmp_name("probe"), self.tmp_name("probe"));
        let shown = || self.shown(TMP);
        let mut last = Errno::NOENT;
        // A lock taken meanwhile clears tmp; try again then.
        for _ in 0..3 {
            for n in [&a, &b] {
                match rustix::fs::mkdirat(&tmp, n.as_str(), Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(Error::io("create", shown(), io(e))),
                }
            }
            let r = self.exchange(&tmp, a.as_str(), &tmp, b.as_str());
            for n in [&a, &b] {
                let _ = rustix::fs::unlinkat(&tmp, n.as_str(), AtFlags::REMOVEDIR);
            }
            match r {
                Ok(()) => return Ok(true),
                Err(e) if unsupported(e) => return Ok(false),
                Err(Errno::NOENT) => last = Errno::NOENT,
                Err(e) => return Err(Error::io("probe RENAME_EXCHANGE in", shown(), io(e))),
            }
        }
        Err(Error::io("probe RENAME_EXCHANGE in", shown(), io(last)))
    }

    /// The identity of `HOME/slot`, which must be a real directory of this user's own
    /// (opened without following a symlink).
    fn own_dir(&self, home: BorrowedFd<'_>, slot: &str) -> Result<Identity, Error> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(home, slot, flags, Mode::empty())
            .map_err(|e| self.not_a_dir(home, OsStr::new(slot), self.shown(slot), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("look at", self.shown(slot), io(e)))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(Error::io(
                "use",
                self.shown(slot),
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "it belongs to uid {}, not to this user (uid {me}): someone else made it, so treesync neither writes in it nor switches the target to it\n  hint: check who can write in {} (ls -ld), remove what was planted (rm -r {}) and run again",
                        st.st_uid,
                        self.home_path().display(),
                        self.shown(slot),
                    ),
                ),
            ));
        }
        Ok((st.st_dev, st.st_ino))
    }

    fn claim_blocking(&self, slot: &str) -> Result<(), Error> {
        let slot = self.slot_name(slot)?;
        let home = self.home()?;
        match rustix::fs::mkdirat(&home, slot, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.shown(slot), io(e))),
        }
        let id = self.own_dir(home.as_fd(), slot)?;
        self.claims.lock().expect("never poisoned").insert(slot.to_string(), id);
        Ok(())
    }

    /// What `HOME/slot` must be for a switch to it: the directory claimed for it, or (a slot
    /// not claimed by this process: leaving generations) the directory it holds now, if this
    /// user's own. A slot that is not what was claimed stops the switch before it is made.
    fn expected(&self, home: BorrowedFd<'_>, slot: &str) -> Result<Identity, Error> {
        let now = self.own_dir(home, slot)?;
        match self.claims.lock().expect("never poisoned").get(slot) {
            Some(claimed) if *claimed != now => Err(self.replaced(slot, false)),
            _ => Ok(now),
        }
    }

    /// The target path is now the directory `id` (checked right after a switch).
    fn target_is(&self, parent: BorrowedFd<'_>, id: Identity) -> bool {
        rustix::fs::statat(parent, &self.name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory && (st.st_dev, st.st_ino) == id)
    }

    /// The error of a slot replaced by someone else before or during the switch.
    fn replaced(&self, slot: &str, undone: bool) -> Error {
        let when = if undone {
            "during the switch; the switch was undone, so the target shows what it showed before"
        } else {
            "before the switch; the target was not switched"
        };
        Error::io(
            "switch",
            self.target.display(),
            std::io::Error::other(format!(
                "the generation prepared in {} was replaced {when} (by a symlink or a directory someone else put there)\n  hint: check who can write in {} (ls -ld); remove what was planted (ls -la {}) and run the sync again",
                self.shown(slot),
                self.home_path().display(),
                self.shown(slot),
            )),
        )
    }

    /// Swap `HOME/slot` (expected to be the directory `id`) with the target path, and check
    /// right after that the target is that directory; if it is not (the slot was replaced
    /// between the check and the swap), swap back and fail.
    fn exchange_checked(
        &self,
        home: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        slot: &str,
        id: Identity,
    ) -> Result<(), Error> {
        self.exchange(home, slot, parent, &self.name).map_err(|e| Error::io("switch", self.target.display(), io(e)))?;
        if self.target_is(parent, id) {
            return Ok(());
        }
        self.exchange(home, slot, parent, &self.name)
            .map_err(|e| Error::io("undo the switch of", self.target.display(), io(e)))?;
        Err(self.replaced(slot, true))
    }

    fn switch_blocking(&self, slot: &str, how: Switch, displaced: &str) -> Result<Switched, Error> {
        let slot = self.slot_name(slot)?;
        let displaced = self.slot_name(displaced)?;
        let parent = self.parent_fd()?;
        let home = self.home()?;
        let at = self.at_target_blocking()?;
        let id = self.expected(home.as_fd(), slot)?;
        let switched = self.switch_checked(slot, how, displaced, parent, home.as_fd(), at, id);
        if switched.is_ok() {
            self.claims.lock().expect("never poisoned").remove(slot);
        }
        switched
    }

    #[allow(clippy::too_many_arguments)]
    fn switch_checked(
        &self,
        slot: &str,
        how: Switch,
        displaced: &str,
        parent: BorrowedFd<'_>,
        home: BorrowedFd<'_>,
        at: AtTarget,
        id: Identity,
    ) -> Result<Switched, Error> {
        let fail = |what: &'static str, e: Errno| Error::io(what, self.target.display(), io(e));
        match how {
            // Readers resolve the link through the home at every open: symlink mode trusts
            // the home (docs/atomic.md); the slot is checked just before the link is made.
            Switch::Symlink => {
                let tmp = self.tmp(home)?;
                let link = self.tmp_name("link");
                rustix::fs::symlinkat(OsStr::from_bytes(&self.link_text(slot)), &tmp, link.as_str())
                    .map_err(|e| Error::io("create link in", self.shown(TMP), io(e)))?;
                let previous = match at {
                    AtTarget::Missing => {
                        rustix::fs::renameat(&tmp, link.as_str(), parent, &self.name).map_err(|e| fail("switch", e))?;
                        None
                    }
                    AtTarget::Link { slot: previous, .. } => {
                        rustix::fs::renameat(&tmp, link.as_str(), parent, &self.name).map_err(|e| fail("switch", e))?;
                        previous.filter(|p| p != slot)
                    }
                    AtTarget::Dir { .. } => {
                        match self.exchange(&tmp, link.as_str(), parent, &self.name) {
                            Ok(()) => {
                                // The directory is now at tmp/link.
                                rustix::fs::renameat(&tmp, link.as_str(), home, displaced)
                                    .map_err(|e| Error::io("move aside", self.shown(displaced), io(e)))?;
                            }
                            Err(e) if unsupported(e) => {
                                rustix::fs::renameat(parent, &self.name, home, displaced)
                                    .map_err(|e| Error::io("move aside", self.shown(displaced), io(e)))?;
                                rustix::fs::renameat(&tmp, link.as_str(), parent, &self.name)
                                    .map_err(|e| fail("switch", e))?;
                            }
                            Err(e) => return Err(fail("switch", e)),
                        }
                        Some(displaced.to_string())
                    }
                    AtTarget::Other(what) => return Err(self.not_switchable(what)),
                };
                Ok(Switched { previous })
            }
            Switch::Exchange => {
                let previous = match at {
                    AtTarget::Missing => {
                        rustix::fs::renameat(home, slot, parent, &self.name).map_err(|e| fail("switch", e))?;
                        if !self.target_is(parent, id) {
                            rustix::fs::renameat(parent, &self.name, home, slot)
                                .map_err(|e| fail("undo the switch of", e))?;
                            return Err(self.replaced(slot, true));
                        }
                        None
                    }
                    AtTarget::Dir { .. } => {
                        self.exchange_checked(home, parent, slot, id)?;
                        Some(slot.to_string())
                    }
                    AtTarget::Link { slot: previous, .. } => {
                        match self.exchange(home, slot, parent, &self.name) {
                            Ok(()) if !self.target_is(parent, id) => {
                                self.exchange(home, slot, parent, &self.name)
                                    .map_err(|e| fail("undo the switch of", e))?;
                                return Err(self.replaced(slot, true));
                            }
                            // The old link is now at HOME/slot: removed (unlink never follows).
                            Ok(()) => rustix::fs::unlinkat(home, slot, AtFlags::empty())
                                .map_err(|e| Error::io("remove link", self.shown(slot), io(e)))?,
                            Err(e) if unsupported(e) => {
                                rustix::fs::unlinkat(parent, &self.name, AtFlags::empty())
                                    .map_err(|e| fail("remove link", e))?;
                                rustix::fs::renameat(home, slot, parent, &self.name).map_err(|e| fail("switch", e))?;
                                if !self.target_is(parent, id) {
                                    rustix::fs::renameat(parent, &self.name, home, slot)
                                        .map_err(|e| fail("undo the switch of", e))?;
                                    return Err(self.replaced(slot, true));
                                }
                            }
                            Err(e) => return Err(fail("switch", e)),
                        }
                        previous.filter(|p| p != slot)
                    }
                    AtTarget::Other(what) => return Err(self.not_switchable(what)),
                };
                Ok(Switched { previous })
            }
        }
    }

    fn not_switchable(&self, what: &str) -> Error {
        Error::io(
            "switch",
            self.target.display(),
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("it is a {what}\n  hint: remove it or choose another target"),
            ),
        )
    }

    fn unlink_target_blocking(&self, slot: &str) -> Result<(), Error> {
        let slot = self.slot_name(slot)?;
        let parent = self.parent_fd()?;
        let home = self.home()?;
        let fail = |what: &'static str, e: Errno| Error::io(what, self.target.display(), io(e));
        let id = self.expected(home.as_fd(), slot)?;
        match self.exchange(&home, slot, parent, &self.name) {
            Ok(()) if !self.target_is(parent, id) => {
                self.exchange(&home, slot, parent, &self.name).map_err(|e| fail("undo the switch of", e))?;
                Err(self.replaced(slot, true))
            }
            Ok(()) => rustix::fs::unlinkat(&home, slot, AtFlags::empty())
                .map_err(|e| Error::io("remove link", self.shown(slot), io(e))),
            Err(e) if unsupported(e) => {
                rustix::fs::unlinkat(parent, &self.name, AtFlags::empty()).map_err(|e| fail("remove link", e))?;
                rustix::fs::renameat(&home, slot, parent, &self.name).map_err(|e| fail("move into place", e))?;
                if self.target_is(parent, id) {
                    return Ok(());
                }
                rustix::fs::renameat(parent, &self.name, &home, slot).map_err(|e| fail("undo the switch of", e))?;
                Err(self.replaced(slot, true))
            }
            Err(e) => Err(fail("move into place", e)),
        }
    }

    fn remove_home_blocking(&self) -> Result<(), Error> {
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

    fn held_blocking(&self) -> Result<BTreeMap<String, Vec<u32>>, Error> {
        let parent = self.parent_fd()?;
        // The parent as the kernel names it (what /proc shows for paths beneath it).
        let real = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&parent)))
            .map_err(|e| Error::io("resolve", self.parent.display(), e))?;
        let home = real.join(&self.home);
        let target = matches!(self.at_target_blocking()?, AtTarget::Dir { .. }).then(|| real.join(&self.name));
        Ok(held_under(&home, target.as_deref()))
    }
}

/// The names in a directory, but `.` and `..`.
fn list(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    Ok(list_typed(dir)?.into_iter().map(|(n, _)| n).collect())
}

/// The names in a directory with their types as the directory tells them (`Unknown` on
/// filesystems that do not), but `.` and `..`.
fn list_typed(dir: BorrowedFd<'_>) -> Result<Vec<(OsString, FileType)>, Errno> {
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
fn remove_tree(dir: BorrowedFd<'_>, name: &OsStr) -> Result<u64, Errno> {
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

/// The slots under `home` (and `target`, as [`AT_TARGET`]) some process holds open, from
/// `/proc/*/fd/*` and `/proc/*/cwd`; processes that cannot be read are skipped. Of this
/// process, `O_PATH` descriptors and descriptors in a generation's `.treesync` are left out:
/// they are the roots and state folders treesync's own backends keep open, not readers.
fn held_under(home: &Path, target: Option<&Path>) -> BTreeMap<String, Vec<u32>> {
    let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let me = std::process::id();
    let my_exe = std::fs::read_link("/proc/self/exe").ok();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    // The slot a path is in, and whether it is in that generation's state folder.
    let slot_of = |p: &Path| -> Option<(String, bool)> {
        // A name the kernel dropped from its cache (FUSE and NFS revalidate names: a directory
        // held across a RENAME_EXCHANGE can read `HOME/gK (deleted)`) still says where it is.
        let text = p.as_os_str().as_bytes();
        let p = Path::new(OsStr::from_bytes(text.strip_suffix(b" (deleted)").unwrap_or(text)));
        let state = |rest: &Path| rest.components().next().is_some_and(|c| c.as_os_str() == STATE_DIR);
        if let Ok(rest) = p.strip_prefix(home) {
            let mut parts = rest.components();
            let first = parts.next()?.as_os_str().to_str()?.to_string();
            return (first != TMP).then(|| (first, state(parts.as_path())));
        }
        let t = target?;
        p.strip_prefix(t).ok().map(|rest| (AT_TARGET.to_string(), state(rest)))
    };
    // The slots' roots and the target by inode: a directory held across a RENAME_EXCHANGE on a
    // filesystem that revalidates names (FUSE, NFS) can show the other one's name in /proc.
    use std::os::unix::fs::MetadataExt;
    let mut roots: Vec<((u64, u64), String)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(home) {
        for e in entries.flatten() {
            if let (Ok(m), Some(n)) = (std::fs::symlink_metadata(e.path()), e.file_name().to_str())
                && m.is_dir()
                && n != TMP
            {
                roots.push(((m.dev(), m.ino()), n.to_string()));
            }
        }
    }
    if let Some(t) = target
        && let Ok(m) = std::fs::symlink_metadata(t)
        && m.is_dir()
    {
        roots.push(((m.dev(), m.ino()), AT_TARGET.to_string()));
    }
    let by_inode = |fd: &Path| -> Option<String> {
        let m = std::fs::metadata(fd).ok()?;
        roots.iter().find(|(id, _)| *id == (m.dev(), m.ino())).map(|(_, n)| n.clone())
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let base = p.path();
        // A child of this process that still runs this program is a fork on its way to an
        // exec (a filter driver, git): it holds copies of this process's descriptors for a
        // moment, which are this process's, not a reader's.
        let mine = pid == me
            || (my_exe.is_some()
                && parent_of(&base) == Some(me)
                && std::fs::read_link(base.join("exe")).ok() == my_exe);
        let mut found = Vec::new();
        if let Ok(cwd) = std::fs::read_link(base.join("cwd")) {
            found.extend(slot_of(&cwd).map(|(slot, _)| by_inode(&base.join("cwd")).unwrap_or(slot)));
        }
        if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
            for fd in fds.flatten() {
                let Ok(path) = std::fs::read_link(fd.path()) else { continue };
                let Some((slot, in_state)) = slot_of(&path) else { continue };
                if mine && (in_state || is_o_path(&base, &fd.file_name())) {
                    continue;
                }
                found.push(by_inode(&fd.path()).unwrap_or(slot));
            }
        }
        for slot in found {
            let pids = out.entry(slot).or_default();
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    out
}

/// The parent process id of the process at `/proc/PID`.
fn parent_of(proc: &Path) -> Option<u32> {
    let status = std::fs::read_to_string(proc.join("status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|v| v.trim().parse().ok())
}

/// Whether descriptor `fd` of the process at `/proc/PID` was opened with `O_PATH`.
fn is_o_path(proc: &Path, fd: &OsStr) -> bool {
    let Ok(info) = std::fs::read_to_string(proc.join("fdinfo").join(fd)) else { return false };
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|f| f & OFlags::PATH.bits() != 0)
}

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
    fn clone_blocking(&self, from: &At, to: &str) -> Result<Cloned, Error> {
        let to = self.slot_name(to)?;
        let src = self.open_at(from)?;
        let home = self.home()?;
        let root_mode = mode_of(&src).map_err(|e| Error::io("stat", self.target.display(), io(e)))?;
        rustix::fs::mkdirat(&home, to, Mode::from_raw_mode(0o700))
            .map_err(|e| Error::io("create", self.shown(to), io(e)))?;
        let dst = self.open_at(&At::Slot(to.to_string()))?;
        let mut c = Cloner { how: CloneHow::Reflink, files: 0, dirs: 0, entries: 0, bytes: 0 };
        c.dir(src.as_fd(), dst.as_fd(), true).map_err(|(e, p)| {
            Error::io("copy", Path::new(&self.shown(to)).join(OsStr::from_bytes(&p)).display(), io(e))
        })?;
        // Last: the state, as a file of its own (a copy cut short has none).
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let state_dir = rustix::fs::openat(&src, STATE_DIR, flags | OFlags::DIRECTORY, Mode::empty());
        let state = state_dir.as_ref().ok().map(|d| rustix::fs::openat(d, "state", flags, Mode::empty()));
        match state {
            None | Some(Err(Errno::NOENT)) => {}
            Some(Err(e)) => return Err(Error::io("read the state of", self.target.display(), io(e))),
            Some(Ok(fd)) => {
                let shown = || format!("{}/{STATE_DIR}/state", self.shown(to));
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes)
                    .map_err(|e| Error::io("read the state of", self.target.display(), e))?;
                rustix::fs::mkdirat(&dst, STATE_DIR, Mode::from_raw_mode(0o777))
                    .map_err(|e| Error::io("create", shown(), io(e)))?;
                let d = rustix::fs::openat(&dst, STATE_DIR, flags | OFlags::DIRECTORY, Mode::empty())
                    .map_err(|e| Error::io("open", shown(), io(e)))?;
                let f = create(d.as_fd(), OsStr::new("state"), Mode::from_raw_mode(0o666))
                    .map_err(|e| Error::io("write", shown(), io(e)))?;
                lockfile::write_all_at(&f, &bytes).map_err(|e| Error::io("write", shown(), io(e)))?;
            }
        }
        rustix::fs::fchmod(&dst, root_mode).map_err(|e| Error::io("change mode of", self.shown(to), io(e)))?;
        // Without a file, no method was tried: say the one that would have been (hard links).
        let how = if c.files == 0 { CloneHow::Hardlink } else { c.how };
        Ok(Cloned { how, dirs: c.dirs, entries: c.entries, bytes_copied: c.bytes })
    }
}

/// The generations host of a directory target `PARENT/NAME`: its home is
/// `PARENT/.NAME.treesync`. Cheap to clone. See the [module docs](self).
#[derive(Clone)]
pub struct FsHost(Arc<Inner>);

impl FsHost {
    /// The host of the directory target `target`, whose generations are opened with `open`
    /// (a backend rooted at the path it is given). Nothing is touched until the first call.
    pub fn new(target: PathBuf, open: Opener) -> FsHost {
        FsHost(Arc::new(Inner::new(target, open)))
    }

    /// Never switch by `RENAME_EXCHANGE` ([`Host::can_exchange`] answers `false`): for network
    /// filesystems, where a reader's open directory keeps its meaning across an exchange only
    /// if the server names files by handle. Many FUSE servers name them by path (the NAS
    /// testbed here does): after an exchange, a reader's directory handle resolves names in the
    /// other generation. Symlink mode has no such dependence.
    pub fn without_exchange(self) -> FsHost {
        let _ = self.0.exchange.set(false);
        self
    }

    /// The target path.
    pub fn target(&self) -> &Path {
        &self.0.target
    }

    /// The home directory `PARENT/.NAME.treesync`.
    pub fn home_path(&self) -> PathBuf {
        self.0.home_path()
    }
}

impl fmt::Display for FsHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.target.display())
    }
}

#[async_trait]
impl Host for FsHost {
    fn home_name(&self) -> String {
        self.0.home.to_string_lossy().into_owned()
    }

    async fn can_exchange(&self) -> Result<bool, Error> {
        if let Some(b) = self.0.exchange.get() {
            return Ok(*b);
        }
        let b = self.0.blocking(|h| h.probe_exchange()).await?;
        let _ = self.0.exchange.set(b);
        Ok(b)
    }

    async fn at_target(&self) -> Result<AtTarget, Error> {
        self.0.blocking(|h| h.at_target_blocking()).await
    }

    async fn home_exists(&self) -> Result<bool, Error> {
        self.0
            .blocking(|h| match h.parent_fd() {
                // A target with no last component (`/`) has no home (a plain sync says why
                // it cannot be the target).
                Err(_) if h.name.is_empty() || h.name == ".." => Ok(false),
                // No parent, no home (a plain sync then says why it cannot create the target).
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e),
                Ok(_) => Ok(h.home_fd()?.is_some()),
            })
            .await
    }

    async fn create_home(&self) -> Result<(), Error> {
        self.0.blocking(|h| h.create_home_blocking()).await
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let holder = holder.clone();
        self.0.blocking(move |h| h.lock_blocking(&holder)).await
    }

    async fn load_record(&self) -> Result<Option<Vec<u8>>, Error> {
        self.0.blocking(|h| h.load_record_blocking()).await
    }

    async fn store_record(&self, bytes: &[u8]) -> Result<(), Error> {
        let bytes = bytes.to_vec();
        self.0.blocking(move |h| h.store_record_blocking(&bytes)).await
    }

    async fn slots(&self) -> Result<Vec<String>, Error> {
        self.0.blocking(|h| h.slots_blocking()).await
    }

    fn open(&self, at: &At) -> Arc<dyn Backend> {
        let path = match at {
            At::Target => self.0.target.clone(),
            At::Slot(s) => self.0.home_path().join(s),
        };
        (self.0.open)(path)
    }

    async fn claim_slot(&self, slot: &str) -> Result<(), Error> {
        let slot = slot.to_string();
        self.0.blocking(move |h| h.claim_blocking(&slot)).await
    }

    async fn clone_tree(&self, from: &At, to: &str) -> Result<Cloned, Error> {
        let (from, to) = (from.clone(), to.to_string());
        self.0.blocking(move |h| h.clone_blocking(&from, &to)).await
    }

    async fn switch(&self, slot: &str, how: Switch, displaced: &str) -> Result<Switched, Error> {
        let (slot, displaced) = (slot.to_string(), displaced.to_string());
        self.0.blocking(move |h| h.switch_blocking(&slot, how, &displaced)).await
    }

    async fn unlink_target(&self, slot: &str) -> Result<(), Error> {
        let slot = slot.to_string();
        self.0.blocking(move |h| h.unlink_target_blocking(&slot)).await
    }

    async fn rename_slot(&self, from: &str, to: &str) -> Result<(), Error> {
        let (from, to) = (from.to_string(), to.to_string());
        self.0
            .blocking(move |h| {
                let (from, to) = (h.slot_name(&from)?, h.slot_name(&to)?);
                let home = h.home()?;
                h.claims.lock().expect("never poisoned").remove(from);
                match rustix::fs::renameat(&home, from, &home, to) {
                    // Gone already (removed by hand, or by someone who can write in the home):
                    // what the rename was for, removing it, is done.
                    Ok(()) | Err(Errno::NOENT) => Ok(()),
                    Err(e) => Err(Error::io("rename", h.shown(from), io(e))),
                }
            })
            .await
    }

    async fn remove_slot(&self, slot: &str) -> Result<u64, Error> {
        let slot = slot.to_string();
        self.0
            .blocking(move |h| {
                let slot = h.slot_name(&slot)?;
                h.claims.lock().expect("never poisoned").remove(slot);
                let Some(home) = h.home_fd()? else { return Ok(0) };
                remove_tree(home.as_fd(), OsStr::new(slot)).map_err(|e| Error::io("remove", h.shown(slot), io(e)))
            })
            .await
    }

    async fn remove_home(&self) -> Result<(), Error> {
        self.0.blocking(|h| h.remove_home_blocking()).await
    }

    /// The slots processes on this machine hold open: every `/proc/PID/fd/*` and
    /// `/proc/PID/cwd` is read (`readlink`), and a path in `HOME/SLOT` counts for `SLOT` (a
    /// path in the target, when it is a real directory, for `target`). Best effort: processes
    /// of other users cannot be read without privileges and are skipped, as are processes that
    /// exit meanwhile; this process's `O_PATH` descriptors and descriptors in a generation's
    /// `.treesync` (the roots and state folders treesync's own backends keep open) are not
    /// counted.
    async fn held(&self) -> Result<Option<BTreeMap<String, Vec<u32>>>, Error> {
        self.0.blocking(|h| h.held_blocking().map(Some)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(dir: &Path) -> Inner {
        Inner::new(dir.join("site"), Arc::new(|p| Arc::new(crate::LocalBackend::new(p, Default::default()))))
    }

    #[test]
    fn only_the_exact_link_text_switch_makes_names_a_slot() {
        let h = host(Path::new("/srv"));
        assert_eq!(h.link_text("g1"), b".site.treesync/g1");
        assert_eq!(h.slot_of_link(b".site.treesync/g1").as_deref(), Some("g1"));
        for other in [
            &b"./.site.treesync/g1"[..],
            b"/srv/.site.treesync/g1",
            b".site.treesync/g1/",
            b".site.treesync/tmp",
            b".site.treesync/..",
            b".site.treesync/",
            b".other.treesync/g1",
            b".site.treesync/g1/x",
        ] {
            assert_eq!(h.slot_of_link(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

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

    /// The slots and the target as they are: `(target is a link to, target's marker file,
    /// slots)`.
    fn layout(dir: &Path) -> (Option<PathBuf>, Option<String>, Vec<String>) {
        let t = dir.join("site");
        let mut slots: Vec<String> = std::fs::read_dir(dir.join(".site.treesync"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        slots.retain(|s| s != "tmp");
        slots.sort();
        (std::fs::read_link(&t).ok(), std::fs::read_to_string(t.join("marker")).ok(), slots)
    }

    #[test]
    fn every_switch_works_with_and_without_rename_exchange() {
        for no_exchange in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut h = host(dir.path());
            h.no_exchange = no_exchange;
            h.create_home_blocking().expect("home");
            assert_eq!(h.probe_exchange().expect("probe"), !no_exchange);
            let slot = |name: &str| {
                let p = dir.path().join(".site.treesync").join(name);
                std::fs::create_dir(&p).expect("slot");
                std::fs::write(p.join("marker"), name).expect("marker");
            };
            let plain = dir.path().join("site");
            std::fs::create_dir(&plain).expect("plain target");
            std::fs::write(plain.join("marker"), "plain").expect("marker");

            // A real directory becomes a link; it is displaced into the home.
            slot("g1");
            let s = h.switch_blocking("g1", Switch::Symlink, "g2").expect("switch");
            assert_eq!(s.previous.as_deref(), Some("g2"));
            let l = layout(dir.path());
            assert_eq!(l, (Some(".site.treesync/g1".into()), Some("g1".into()), vec!["g1".into(), "g2".into()]));
            assert_eq!(
                std::fs::read_to_string(dir.path().join(".site.treesync/g2/marker")).expect("displaced"),
                "plain"
            );
            assert!(matches!(h.at_target_blocking().expect("at"), AtTarget::Link { slot: Some(s), .. } if s == "g1"));

            // Link to link.
            slot("g3");
            let s = h.switch_blocking("g3", Switch::Symlink, "unused").expect("switch");
            assert_eq!(s.previous.as_deref(), Some("g1"));
            assert_eq!(layout(dir.path()).0, Some(".site.treesync/g3".into()));

            // A link becomes the real directory of a slot (exchange mode); the link is gone.
            slot("g4");
            let s = h.switch_blocking("g4", Switch::Exchange, "unused").expect("switch");
            assert_eq!(s.previous.as_deref(), Some("g3"));
            assert_eq!(layout(dir.path()), (None, Some("g4".into()), vec!["g1".into(), "g2".into(), "g3".into()]));

            // Directory to directory needs the exchange.
            slot("g5");
            let r = h.switch_blocking("g5", Switch::Exchange, "unused");
            if no_exchange {
                assert!(r.is_err(), "exchange mode is never chosen without RENAME_EXCHANGE");
                std::fs::remove_dir_all(dir.path().join(".site.treesync/g5")).expect("rm");
            } else {
                assert_eq!(r.expect("exchange").previous.as_deref(), Some("g5"));
                assert_eq!(layout(dir.path()).1, Some("g5".into()));
                assert_eq!(std::fs::read_to_string(dir.path().join(".site.treesync/g5/marker")).expect("old"), "g4");
            }

            // Back to a link, then leave: the slot becomes the target directory again.
            h.switch_blocking("g1", Switch::Symlink, "g6").expect("to a link");
            h.unlink_target_blocking("g1").expect("unlink target");
            let (link, marker, slots) = layout(dir.path());
            assert_eq!((link, marker), (None, Some("g1".into())), "no_exchange {no_exchange}");
            assert!(!slots.contains(&"g1".to_string()) && slots.contains(&"g6".to_string()), "{slots:?}");
            assert!(
                std::fs::read_dir(dir.path().join(".site.treesync/tmp")).expect("tmp").next().is_none(),
                "no link left"
            );
        }
    }
}
