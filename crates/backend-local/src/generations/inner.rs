//! The state every part of an [`FsHost`](super::FsHost) works on ([`Inner`]): the target, its
//! parent and home, the handles opened once, the claims; and the small helpers of `*at` calls
//! that every part uses.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::fs::FileType;
use rustix::io::Errno;
use treesync_backend::backend::{Backend, Error};

/// Makes the backend of a generation directory (a [`LocalBackend`](crate::LocalBackend), or
/// the mounted-NFS backend), with the policy of the target's own backend.
pub type Opener = Arc<dyn Fn(PathBuf) -> Arc<dyn Backend> + Send + Sync>;

/// The folder of the home where links, record temporaries and the exchange probe are made.
pub(super) const TMP: &str = "tmp";
/// The record file of the home.
pub(super) const RECORD: &str = "generations";
/// The slot name `Host::held` gives the target itself when it is a real directory.
pub(super) const AT_TARGET: &str = "target";

/// The state of an [`FsHost`](super::FsHost), shared with the blocking pool.
pub(super) struct Inner {
    pub(super) target: PathBuf,
    pub(super) parent: PathBuf,
    /// `NAME` (empty when the target path has no last component: every call then fails).
    pub(super) name: OsString,
    /// `.NAME.treesync`.
    pub(super) home: OsString,
    pub(super) open: Opener,
    pub(super) parent_fd: OnceLock<OwnedFd>,
    pub(super) exchange: OnceLock<bool>,
    /// The target is on a network mount ([`FsHost::without_exchange`](super::FsHost::without_exchange)):
    /// every call goes to the blocking pool, none is made on the caller's thread.
    pub(super) network: AtomicBool,
    pub(super) counter: AtomicU64,
    /// The slots claimed for a generation being prepared (`Host::claim_slot`): the
    /// directory each name held then (device, inode). The switch swaps in that directory or
    /// nothing.
    pub(super) claims: Mutex<BTreeMap<String, Identity>>,
    /// Tests: behave as a filesystem without `RENAME_EXCHANGE`.
    #[cfg(test)]
    pub(super) no_exchange: bool,
}

/// A directory's device and inode: which directory a name held when it was looked at.
pub(super) type Identity = (u64, u64);

pub(super) fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

pub(super) fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::Directory => "directory",
        FileType::RegularFile => "file",
        FileType::Symlink => "symlink",
        _ => "special file",
    }
}

/// The exchange is not supported by this kernel or filesystem (as opposed to failing).
pub(super) fn unsupported(e: Errno) -> bool {
    matches!(e, Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP)
}

/// A slot name is one plain path component.
pub(super) fn valid_slot(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

impl Inner {
    pub(super) fn new(target: PathBuf, open: Opener) -> Inner {
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
            network: AtomicBool::new(false),
            claims: Mutex::new(BTreeMap::new()),
            counter: AtomicU64::new(0),
            #[cfg(test)]
            no_exchange: false,
        }
    }

    pub(super) fn home_path(&self) -> PathBuf {
        self.parent.join(&self.home)
    }

    pub(super) fn shown(&self, rel: &str) -> String {
        self.home_path().join(rel).display().to_string()
    }
    pub(super) fn tmp_name(&self, what: &str) -> String {
        format!("{what}.{}.{}", std::process::id(), self.counter.fetch_add(1, Ordering::Relaxed))
    }

    pub(super) async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Inner) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let me = self.clone();
        treesync_backend::backend::blocking(move || f(&me)).await
    }

    /// A look at the home or the target (a lookup or two): made on the calling thread on a
    /// local disk, where it takes microseconds (less than a handoff to the blocking pool and
    /// back); on a network mount, in the blocking pool.
    pub(super) async fn small<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Inner) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if self.network.load(Ordering::Relaxed) { self.blocking(f).await } else { f(self) }
    }
}

/// The host of `DIR/site`, its generations opened as local backends.
#[cfg(test)]
pub(super) fn test_host(dir: &std::path::Path) -> Inner {
    Inner::new(dir.join("site"), Arc::new(|p| Arc::new(crate::LocalBackend::new(p, Default::default()))))
}
