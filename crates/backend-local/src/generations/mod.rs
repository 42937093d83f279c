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
//!
//! One file per concern: `home` (the handles, the lock, the record, the slots, removal),
//! `switch` (the link or the exchange, and the claim it checks), `clone` (reflinks, hard links,
//! copies) and `held` (the `/proc` scan for readers), each adding its calls to `inner`'s
//! `Inner` (the state they share, in `inner.rs`); this file holds [`FsHost`] itself.

mod clone;
mod held;
mod home;
mod inner;
mod switch;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use rustix::io::Errno;
use treesync_backend::backend::{Backend, Error, LockGuard};
use treesync_backend::generation::{At, AtTarget, Cloned, Host, Switch, Switched};
use treesync_backend::lock::Holder;

use inner::{Inner, io};

pub use clone::clone_dir;
pub use held::held_in;
pub use inner::Opener;

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
    /// other generation. Symlink mode has no such dependence. Every call of such a host goes to
    /// the blocking pool (a local one makes its lookups of the home on the caller's thread).
    pub fn without_exchange(self) -> FsHost {
        let _ = self.0.exchange.set(false);
        self.0.network.store(true, std::sync::atomic::Ordering::Relaxed);
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
        self.0.small(|h| h.at_target_blocking()).await
    }

    async fn home_exists(&self) -> Result<bool, Error> {
        self.0
            .small(|h| match h.parent_fd() {
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
        self.0.blocking(move |h| h.remove_slot_blocking(&slot)).await
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
