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
mod home;
mod leave;
mod repair;
use treesync_backend::generation::{host, memory, record};

pub use function::{current, preview, sync};
pub use home::orphaned;
pub use host::{At, AtTarget, CloneHow, Cloned, Host, Switch, Switched};
pub use leave::{current_backend, has_home, kept, leave, status};
pub use memory::MemoryHost;
pub use record::{Record, SlotRecord};
pub use repair::repair;

use std::time::Duration;

use serde::Serialize;

use crate::{backend, sync};

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

/// How to sync a target kept in generations.
#[derive(Debug, Clone)]
pub struct Options {
    /// How each generation is synced (the lock wait and `dry_run` apply to the whole run).
    pub sync: sync::Options,
    /// How many generations to keep, the current one included (at least 1).
    pub keep: usize,
    /// A generation is neither reused nor removed until this long after it stopped being
    /// current.
    pub grace: Duration,
    /// How to switch; `None`: what the record says, else the best the filesystem offers
    /// ([`Switch::Exchange`] where it can, else [`Switch::Symlink`]).
    pub switch: Option<Switch>,
    /// The most generations the target may have, the current one included, however fast syncs
    /// come; `None`: [`Options::keep`] + [`GRACE_CAP`]. At the cap, with none past its
    /// grace period, a sync is refused ([`Error::AtCap`]) rather than reuse a generation a
    /// reader may still be in.
    pub max_generations: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: sync::Options::default(),
            keep: DEFAULT_KEEP,
            grace: DEFAULT_GRACE,
            switch: None,
            max_generations: None,
        }
    }
}

impl Options {
    /// The cap in force ([`Options::max_generations`]), never below [`Options::keep`].
    pub fn cap(&self) -> usize {
        self.max_generations.unwrap_or(self.keep.saturating_add(GRACE_CAP)).max(self.keep).max(1)
    }
}

/// Syncing a target kept in generations failed. The target still shows a complete generation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Syncing the generation being prepared (or the plan of a dry run).
    #[error(transparent)]
    Sync(#[from] sync::Error),
    /// The home, the record, the switch.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// The record file does not parse.
    #[error(
        "the record of the generations of {target} ({path}) is damaged: {detail}\n  hint: remove it (rm {path}); the next sync starts a new generation and removes the old ones after the grace period"
    )]
    Record {
        /// The target.
        target: String,
        /// The record file.
        path: String,
        /// What the parser said.
        detail: String,
    },
    /// The target path is a symlink treesync did not make.
    #[error(
        "refusing to keep {target} in generations: it is a symlink to {text} that treesync did not make\n  hint: remove the link (rm {target}) or sync into the directory it points to"
    )]
    ForeignLink {
        /// The target.
        target: String,
        /// The link's text (lossy).
        text: String,
    },
    /// Something that is not a directory is at the target path.
    #[error("refusing to keep {target} in generations: it is a {what}\n  hint: remove it or choose another target")]
    NotADirectory {
        /// The target.
        target: String,
        /// What is there.
        what: &'static str,
    },
    /// The target is not kept in generations (for `verify`, `status`).
    #[error("{target} is not kept in generations\n  hint: sync it with --atomic first")]
    NotAtomic {
        /// The target.
        target: String,
    },
    /// The target has as many generations as it may ([`Options::cap`]), none of them past its
    /// grace period and free: a new one would pass the cap, and reusing one could change a tree
    /// a reader is still in.
    #[error(
        "{target} has {generations} generations, the most it may (--max-generations {cap}), and none is past its grace period ({grace}s){}: a new one would pass the cap, and reusing one now could change a tree a reader is still in\n  hint: run the sync again {}; or raise --max-generations (config max_generations) or shorten --grace",
        retry_after.map(|s| format!("; the first will be in {s}s")).unwrap_or_default(),
        retry_after.map(|s| format!("in {s}s")).unwrap_or_else(|| "once the processes holding them open let go".into()),
    )]
    AtCap {
        /// The target.
        target: String,
        /// How many generations it has.
        generations: usize,
        /// The cap.
        cap: usize,
        /// The grace period, in seconds.
        grace: u64,
        /// Seconds until the first generation not held open is past its grace period.
        retry_after: Option<u64>,
    },
    /// The target is a generation (exchange mode: the target directory is the current one)
    /// whose home is gone: syncing it in place would silently stop keeping it in generations.
    #[error(
        "{target} is kept in generations ({switch} mode), but its home {home} is gone (removed by hand?)\n  hint: sync with --atomic to keep it in generations (a new home is made; the target stays the current generation), or with --no-atomic to sync it in place from now on"
    )]
    HomeGone {
        /// The target.
        target: String,
        /// The home that is missing.
        home: String,
        /// The mode the target was kept in.
        switch: String,
    },
}

/// One generation, as [`status()`] and [`Outcome::generations`] show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Generation {
    /// Where it is: `HOME/NAME` (`NAME`), or `target` for the current generation in exchange mode.
    pub slot: String,
    /// The target shows it.
    pub current: bool,
    /// The commit its state records (absent: none, or being prepared).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::json::opt_id")]
    #[schemars(with = "Option<crate::json::schema::ObjectId>")]
    pub commit: Option<gix_hash::ObjectId>,
    /// When it stopped being current (RFC 3339); absent while current or never current.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired: Option<String>,
    /// A sync was preparing it and did not finish; the next sync that uses it finishes it.
    pub preparing: bool,
    /// Processes on this machine holding it open (best effort, local filesystems only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<u32>,
}

/// What an atomic sync did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "atomicOutcome")]
pub struct Outcome {
    /// The sync of the generation that was prepared (or, when nothing changed, the dry run
    /// on the current one). Not serialized: callers show it as they show a sync.
    #[serde(skip)]
    pub sync: sync::Outcome,
    /// How the target is switched.
    pub switch: Switch,
    /// The target was switched to a new generation (`false`: it held the commit already).
    pub switched: bool,
    /// The slot that was prepared (in exchange mode it then moved to the target path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepared: Option<String>,
    /// The prepared slot was a retired generation brought up to date by its diff.
    pub reused: bool,
    /// How a new generation was started from the current one (absent: reused, or the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloned: Option<Cloned>,
    /// The slot that now holds the tree the target showed before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired: Option<String>,
    /// Retired generations removed (past `keep` and the grace period, not held open).
    pub removed: Vec<String>,
    /// The generations after the run.
    pub generations: Vec<Generation>,
    /// What the run decided that a person should know (a fallback, why no generation could be
    /// reused, why one was kept past `keep`).
    pub notes: Vec<String>,
    /// Wall time.
    #[serde(serialize_with = "crate::json::secs")]
    #[schemars(with = "crate::json::schema::Seconds")]
    pub elapsed: Duration,
}

/// What [`repair()`] did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RepairOutcome {
    /// The repair of the new generation (a copy of the current one).
    pub repair: sync::RepairOutcome,
    /// The slot that was prepared and switched to (none: nothing differed).
    pub prepared: Option<String>,
    /// How the target is switched.
    pub switch: Switch,
    /// Retired generations removed.
    pub removed: Vec<String>,
    /// What a person should know.
    pub notes: Vec<String>,
}

/// What [`leave()`] did.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct LeaveOutcome {
    /// The target was a symlink and is now the real directory of its generation.
    pub restored: bool,
    /// Retired generations removed.
    pub removed: Vec<String>,
    /// Generations left for a later run (within the grace period or held open).
    pub kept: Vec<String>,
    /// The home is gone: the target is an ordinary one again.
    pub home_removed: bool,
    /// What kept the home (entries treesync did not make there), and what to do about it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What [`status()`] shows of a target's generations.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "generationsStatus")]
pub struct Status {
    /// The home (`PARENT/.NAME.treesync`).
    pub home: String,
    /// How the target is switched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch: Option<Switch>,
    /// Every generation, the current first.
    pub generations: Vec<Generation>,
    /// Who holds the home's lock right now.
    pub running: Option<String>,
}
