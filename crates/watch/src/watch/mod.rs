//! [`watch()`]: keep a target following a ref — woken when the ref moves ([`Events`]) or polling
//! it ([`Poll`]; never the target), sync every new commit, verify (and repair) on a schedule,
//! retry failures with backoff, and stop when asked.
//!
//! Everything that happens is told to the caller as an [`Event`], one per thing: the `treesync
//! watch` command prints them as log lines or serializes them as they are (`--json`); a library
//! consumer handles them its own way. Failures of a step are events too (with the time until
//! the next try): the loop runs until the interrupt flag is set, and its [`Outcome`] counts what
//! it did.
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! use treesync_watch::watch::{self, Event};
//! use treesync_core::{MemoryBackend, Repo, sync};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let git = |args: &[&str]| std::process::Command::new("git").current_dir(dir.path()).args(args).output();
//! # git(&["init", "-q", "-b", "main"])?;
//! # std::fs::write(dir.path().join("hello.txt"), "hi\n")?;
//! # git(&["add", "."])?;
//! # git(&["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "one"])?;
//! let repo = Repo::open(dir.path())?;
//! let target = MemoryBackend::new();
//! let options = watch::Options {
//!     interval: Duration::from_millis(100),
//!     sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
//!     ..Default::default()
//! };
//! // Print every event, and stop once the target holds the commit.
//! let stop = AtomicBool::new(false);
//! let mut on_event = |event: &Event| {
//!     println!("{}", serde_json::to_string(event).expect("events serialize"));
//!     if let Event::Synced { outcome } = event {
//!         println!("now at {}", outcome.commit);
//!         stop.store(true, Ordering::SeqCst);
//!     }
//! };
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let outcome = runtime.block_on(watch::watch(&repo, "main", &target, &options, &mut on_event, &stop));
//! assert_eq!((outcome.synced, outcome.errors), (1, 0));
//! assert!(target.snapshot().contains_key(&b"hello.txt"[..]));
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use treesync_core::op::OpCounts;
use treesync_core::{sync, verify};

pub mod events;
mod function;
mod many;
pub mod origin;
pub use events::{Events, NoEvents};
pub use function::{watch, watch_generations};
pub use many::{Group, Mirror, MirrorOutcome, Place, watch_many};
pub use origin::{Origin, OriginError, Poll};

pub use crate::line::one_line;

/// How to watch.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often to look at the ref (a loose ref file and packed-refs; never the target) when
    /// the origin polls; with every origin, the first wait before a failed step is tried again.
    pub interval: Duration,
    /// Verify the target (stat level) this often; `None`: never.
    pub verify_every: Option<Duration>,
    /// With `verify_every`: spread each verify over this many slices of the tree
    /// ([`treesync_core::slice`]), one slice every `verify_every / n`, so a full cycle still takes
    /// `verify_every` without a burst of lookups; the position is kept in the target's
    /// `.treesync/verify-slice` (in memory on targets without auxiliary files). `None` or
    /// `Some(1)`: the whole tree each time.
    pub verify_slices: Option<u32>,
    /// With `verify_every`: repair the drift a verify finds, under the target's lock and journal
    /// ([`sync::repair()`]).
    pub repair: bool,
    /// The longest wait between two tries after failures (the wait starts at `interval` and
    /// doubles with every failure in a row).
    pub max_backoff: Duration,
    /// Lock, journal, executor and limits of every sync and repair.
    pub sync: sync::Options,
    /// Where the watch learns that the ref moved, and how the repository gets its commits
    /// ([`Origin`]); `None`: [`Poll`], a look every `interval`.
    pub origin: Option<Arc<dyn Origin>>,
    /// Told of the progress of every sync and repair (after each batch of ops): a sign of life
    /// for a watchdog while a long step runs; `None`: nobody listens.
    pub on_progress: Option<OnProgress>,
}

/// [`Options::on_progress`]: a function told of a step's progress.
#[derive(Clone)]
pub struct OnProgress(pub Arc<dyn Fn(&treesync_core::apply::Progress<'_>) + Send + Sync>);

impl std::fmt::Debug for OnProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnProgress(..)")
    }
}

/// [`Options::interval`] when none is given.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// [`Options::max_backoff`] when none is given.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Default for Options {
    fn default() -> Self {
        Options {
            interval: DEFAULT_INTERVAL,
            verify_every: None,
            verify_slices: None,
            repair: false,
            max_backoff: DEFAULT_MAX_BACKOFF,
            sync: sync::Options::default(),
            origin: None,
            on_progress: None,
        }
    }
}

/// What a watch did, from its start until it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Outcome {
    /// Syncs that changed something (or were the first), each told as [`Event::Synced`].
    pub synced: u64,
    /// Scheduled verifies ([`Event::Verified`]).
    pub verified: u64,
    /// Repairs that ran ops ([`Event::Repaired`]).
    pub repaired: u64,
    /// Steps that failed and were retried ([`Event::Error`]).
    pub errors: u64,
}

/// A step of the watch failed (it is retried after [`Event::Error::retry_in`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Resolving the ref, or syncing the target to it (also: repairing it).
    #[error(transparent)]
    Sync(#[from] sync::Error),
    /// The scheduled verify.
    #[error(transparent)]
    Verify(#[from] verify::Error),
    /// Keeping the rolling verify's position ([`Options::verify_slices`]).
    #[error(transparent)]
    Slice(#[from] treesync_core::slice::Error),
    /// Preparing, switching or repairing a generation (`--atomic`).
    #[error(transparent)]
    Generation(#[from] treesync_core::generation::Error),
    /// Bringing the repository up to date with its origin ([`Origin::refresh`]).
    #[error("updating the repository from its origin")]
    Origin(#[source] OriginError),
}

/// One thing that happened while watching, in the order it happened. Serialized as an object
/// tagged by `event` (`watching`, `synced`, `verified`, `repaired`, `error`, `stopping`,
/// `stopped`, `hook`), with the fields below (see docs/json.md).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// Watching started.
    Watching {
        /// The ref followed.
        rev: String,
        /// The repository, as it was opened.
        repo: String,
        /// The target, as the backend names it.
        target: String,
        /// Time between looks at the ref when polling, and the first wait before a retry.
        #[serde(rename = "interval_secs", serialize_with = "treesync_core::json::secs")]
        #[schemars(with = "treesync_core::json::schema::Seconds")]
        interval: Duration,
        /// How the watch learns that the ref moved ([`Origin::describe`]): `woken by changes to
        /// the refs (inotify)`, `polling every 5s`, or polling with the reason events are not
        /// used (`polling every 5s: the repository is on nfs (…)`).
        waits: String,
    },
    /// A sync ran: the first one, and every one that changed something or finished an
    /// interrupted sync.
    Synced {
        /// What it did.
        outcome: Box<sync::Outcome>,
    },
    /// A scheduled verify ran (with [`Options::repair`]: the comparison that planned the repair).
    Verified {
        /// What it found.
        report: Box<verify::Report>,
        /// No drift.
        clean: bool,
    },
    /// With [`Options::repair`]: the drift a verify found was repaired.
    Repaired {
        /// The ops the repair ran.
        repaired: OpCounts,
    },
    /// A step failed; the next try is in `retry_in` (doubling with every failure in a row, up
    /// to [`Options::max_backoff`]).
    Error {
        /// The error on one line, with its causes.
        message: String,
        /// Time until the next try.
        #[serde(rename = "retry_in_secs", serialize_with = "treesync_core::json::secs")]
        #[schemars(with = "treesync_core::json::schema::Seconds")]
        retry_in: Duration,
        /// When the watch first saw the ref at a commit the target does not hold, if it does not
        /// hold the ref's commit now (the failed step was that sync); `None` when the target is
        /// at the ref (a verify or repair failed) or the ref could not be read. Lag monitors
        /// (`--metrics-addr`) take it from here; not part of the JSON line.
        #[serde(skip)]
        behind_since: Option<SystemTime>,
        /// The error itself.
        #[serde(skip)]
        error: Arc<Error>,
    },
    /// The interrupt arrived during a step: the batches in flight finished and the journal
    /// records where the step stopped (the next sync finishes it).
    Stopping {
        /// What the interrupted step reported, on one line.
        message: String,
        /// The error itself.
        #[serde(skip)]
        error: Arc<Error>,
    },
    /// The watch stopped (the interrupt flag was set); the last event.
    Stopped,
    /// A try of a hook after a sync ended ([`crate::hook`]): told by the caller that runs the
    /// hooks (`treesync watch --exec-after/--webhook`), not by [`watch()`] itself.
    Hook {
        /// The try and how it ended.
        #[serde(flatten)]
        report: crate::hook::Report,
    },
}

impl Event {
    /// The event's name, as in its JSON `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Watching { .. } => "watching",
            Event::Synced { .. } => "synced",
            Event::Verified { .. } => "verified",
            Event::Repaired { .. } => "repaired",
            Event::Error { .. } => "error",
            Event::Stopping { .. } => "stopping",
            Event::Stopped => "stopped",
            Event::Hook { .. } => "hook",
        }
    }
}
