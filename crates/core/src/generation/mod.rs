//! Generations (`sync --atomic`): readers see one whole commit, switched atomically, at the cost
//! of the diff.
//!
//! A target kept in generations is switched from one complete tree to the next in one atomic
//! step, so a reader that resolves the target once (opens a directory handle, `cd`s into it,
//! resolves the link) reads one commit for as long as that generation is kept. The generations
//! live next to the target, in its *home* `PARENT/.NAME.treesync` ([`Host`]):
//!
//! ```text
//! PARENT/NAME                  the target: a symlink to .NAME.treesync/gK (symlink mode),
//!                              or a real directory holding the current tree (exchange mode)
//! PARENT/.NAME.treesync/lock   the one lock of every command that writes
//! PARENT/.NAME.treesync/generations   the record: switch mode, slots, when each was retired
//! PARENT/.NAME.treesync/gK/    a generation: a complete target with its own .treesync state
//! ```
//!
//! [`sync()`] brings a generation up to date by applying the difference between the tree *it*
//! holds (its own state) and the requested commit — the one retired longest ago once it is past
//! the grace period and no process holds it open, else a new one started as a cheap copy of the
//! current ([`Host::clone_tree`]: reflinks, else a hardlink farm) — and switches the target to
//! it ([`Host::switch`]). The hardlink farm shares inodes between generations, so a generation's
//! modes are changed by rewriting files ([`crate::policy::RewriteModes`]), never in place.
//!
//! Crash safety: the record names the slot being prepared and the slot being switched to
//! before each step; the target only ever points at a complete generation (a slot is switched
//! to after its sync finished), and the next run finishes or discards a half-written one (a
//! slot cut short while being copied is removed; one cut short while syncing is finished by its
//! own journal when it is next used).

mod function;
use treesync_backend::generation::{host, memory, record};

pub use function::{
    Error, Generation, LeaveOutcome, Options, Outcome, RepairOutcome, Status, current, current_backend, has_home, kept,
    leave, orphaned, preview, repair, status, sync,
};
pub use host::{At, AtTarget, CloneHow, Cloned, Host, Switch, Switched};
pub use memory::MemoryHost;
pub use record::{Record, SlotRecord};

/// The default of [`Options::keep`].
pub const DEFAULT_KEEP: usize = 2;

/// The default of [`Options::grace`]: how long a generation is left alone after it stopped
/// being current.
pub const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(300);

/// How many generations past [`Options::keep`] a target may have by default
/// ([`Options::max_generations`]). Syncs faster than the grace period would otherwise add a
/// generation each, without bound; at the cap a sync is refused until the first generation is
/// past its grace period ([`Error::AtCap`]): a generation a reader may be in is never reused.
pub const GRACE_CAP: usize = 8;
