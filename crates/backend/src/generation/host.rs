//! The [`Host`] trait: the place next to a target where its generations live, and the one
//! step that switches the target from one generation to the next.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Error, LockGuard};
use crate::lock::Holder;

/// How the target path is switched to the next generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    /// The target is a symlink to the current generation, replaced by a `rename` of a new
    /// link over it.
    Symlink,
    /// The target is a real directory holding the current generation; the next one is swapped
    /// in with `renameat2(RENAME_EXCHANGE)`.
    Exchange,
}

impl fmt::Display for Switch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Switch::Symlink => "symlink",
            Switch::Exchange => "exchange",
        })
    }
}

/// What is at the target path, looked at without following it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtTarget {
    /// Nothing.
    Missing,
    /// A real directory; `managed` when it holds treesync's state folder.
    Dir {
        /// It holds a `.treesync` folder.
        managed: bool,
        /// It holds nothing at all.
        empty: bool,
    },
    /// A symlink. `slot` is the generation it points to when it is one of this host's links
    /// (its text is exactly the home's name, `/`, a slot name); `None` for any other link.
    Link {
        /// The link's text.
        text: Vec<u8>,
        /// The generation it points to, when it is treesync's link.
        slot: Option<String>,
    },
    /// Something else (a file, a device, …), named.
    Other(&'static str),
}

/// Where a generation is: the target path itself (the current generation of
/// [`Switch::Exchange`], or a target not yet kept in generations), or a slot of the home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// The target path (a real directory).
    Target,
    /// `HOME/NAME`.
    Slot(String),
}

/// How [`Host::clone_tree`] made the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CloneHow {
    /// Copy-on-write clones of each file (`FICLONE`): no data copied, no inode shared.
    Reflink,
    /// Hard links to each file: no data copied; the generations share inodes until one of
    /// them rewrites a file (which treesync always does by writing a temporary and renaming it).
    Hardlink,
    /// Byte copies (neither of the above is possible).
    Copy,
}

/// What [`Host::clone_tree`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Cloned {
    /// How files were copied.
    pub how: CloneHow,
    /// Directories made.
    pub dirs: u64,
    /// Files and symlinks made.
    pub entries: u64,
    /// Bytes of file content copied (0 for reflinks and hard links).
    pub bytes_copied: u64,
}

/// What [`Host::switch`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched {
    /// The slot that now holds the tree the target showed before (none: the target was
    /// missing).
    pub previous: Option<String>,
}

/// The place next to a target where its generations live (the *home*, `.NAME.treesync` in the
/// target's parent directory, for a target `PARENT/NAME`), and the switch of the target path.
///
/// The home holds a lock file, the record ([`Host::load_record`]), a `tmp` folder and one
/// directory per generation (a *slot*), each a complete target of its own with its own
/// `.treesync` state and journal. Every call resolves beneath the target's parent and the
/// home without following a symlink anyone planted there.
#[async_trait]
pub trait Host: Send + Sync + fmt::Display {
    /// The name of the home in the target's parent (`.NAME.treesync`).
    fn home_name(&self) -> String;

    /// Whether the filesystem can swap two directories atomically
    /// (`renameat2(RENAME_EXCHANGE)`), probed once (on local disks with two empty directories
    /// made in the home, which must exist). `false` where the protocol has no such call (NFS).
    async fn can_exchange(&self) -> Result<bool, Error>;

    /// What is at the target path.
    async fn at_target(&self) -> Result<AtTarget, Error>;

    /// Whether the home exists (as a real directory; anything else there is an error).
    async fn home_exists(&self) -> Result<bool, Error>;

    /// Create the home (and its `tmp` folder) if missing.
    async fn create_home(&self) -> Result<(), Error>;

    /// Take the home's lock (`HOME/lock`), or fail fast with [`Error::Locked`].
    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error>;

    /// Release the lock (see [`Backend::unlock`]).
    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        drop(guard);
        Ok(())
    }

    /// The record file `HOME/generations`, if there is one.
    async fn load_record(&self) -> Result<Option<Vec<u8>>, Error>;

    /// Replace the record atomically.
    async fn store_record(&self, bytes: &[u8]) -> Result<(), Error>;

    /// The names of the directories in the home (slots, and `trash-*` being removed); not
    /// `tmp`, the lock or the record.
    async fn slots(&self) -> Result<Vec<String>, Error>;

    /// A backend rooted at `at`, with the policy of the target's own backend.
    fn open(&self, at: &At) -> Arc<dyn Backend>;

    /// Make `HOME/slot` a directory of this host's own, created if missing, before a sync
    /// prepares a generation in it, and remember which directory it is: [`Host::switch`] then
    /// swaps in that directory or nothing (a slot replaced meanwhile — by a symlink, or by a
    /// directory someone else made — stops the switch). Hosts whose storage nobody else
    /// writes in (memory) do nothing.
    async fn claim_slot(&self, _slot: &str) -> Result<(), Error> {
        Ok(())
    }

    /// Make `HOME/to` (which must not exist) a copy of the tree at `from` as cheaply as the
    /// filesystem allows: reflinks, else hard links, else copies. Directories are made anew;
    /// of the state folder only the state file is copied (as a file of its own, last, so a
    /// copy cut short has no state); the lock, temporaries and auxiliary files are not.
    async fn clone_tree(&self, from: &At, to: &str) -> Result<Cloned, Error>;

    /// Switch the target path to the generation in `HOME/slot`, in one atomic step:
    ///
    /// * [`Switch::Symlink`]: a link `HOME_NAME/slot` is made in `HOME/tmp` and renamed over
    ///   the target. When the target is a real directory (a target becoming atomic), it is
    ///   swapped with the link by `RENAME_EXCHANGE` where possible, else renamed away first
    ///   (then the target is missing for a moment), and ends up as `HOME/displaced`.
    /// * [`Switch::Exchange`]: `HOME/slot` and the target are swapped with `RENAME_EXCHANGE`
    ///   (or renamed, when the target is missing): the tree the target showed is then at
    ///   `HOME/slot`. When the target was a symlink, that link is removed.
    async fn switch(&self, slot: &str, how: Switch, displaced: &str) -> Result<Switched, Error>;

    /// Make the target a real directory again with the generation in `HOME/slot` (a target
    /// leaving [`Switch::Symlink`] mode): swapped with the link by `RENAME_EXCHANGE` where
    /// possible, else the link is removed and the slot renamed (a moment without a target).
    async fn unlink_target(&self, slot: &str) -> Result<(), Error>;

    /// Rename `HOME/from` to `HOME/to` (to move a slot aside before removing it); fine if
    /// `from` is gone.
    async fn rename_slot(&self, from: &str, to: &str) -> Result<(), Error>;

    /// Remove `HOME/slot` and everything in it, never following a symlink; fine if it is gone.
    /// Answers how many entries were removed.
    async fn remove_slot(&self, slot: &str) -> Result<u64, Error>;

    /// Remove the home itself once it holds no slots (its lock, record and `tmp`).
    async fn remove_home(&self) -> Result<(), Error>;

    /// The slots some process on this machine holds open (a descriptor or its working
    /// directory in it, from `/proc/*/fd` and `/proc/*/cwd`), with the process ids; `None`
    /// where that cannot be known (a remote server).
    async fn held(&self) -> Result<Option<BTreeMap<String, Vec<u32>>>, Error> {
        Ok(None)
    }
}
