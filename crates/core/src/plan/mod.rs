//! Turn `old tree → new tree` into a [`Plan`](crate::Plan) without looking at the target.
//!
//! The diff walks both trees in the object database at once and never descends into a
//! subtree whose id is the same on both sides, so its cost grows with the number of changed
//! paths (times their depth), not with the size of the tree.

mod cache;
mod conversions;
mod depth;
mod diff;
mod expand;
mod function;
mod gitlinks;
mod kept;
mod tree;
pub(crate) use depth::too_deep;
pub(crate) use function::{BIG_STACK, with_big_stack};
pub use function::{
    Checkout, Conversions, DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, ExistingEntry, ExistingKind, Limits, Measured,
    Options, Selecting, check_tree_size, measure_checkout, plan, plan_checkout, plan_takeover, plan_with,
    stream_checkout,
};

pub use depth::{MAX_PATH_BYTES, MAX_TREE_DEPTH};
pub use gitlinks::{Gitlinks, Recurse, Visit};

pub(crate) use cache::Key;
pub use cache::{Cache, Counts};

use gix_hash::ObjectId;

/// Planning failed; nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The new tree holds an entry that must never be written.
    #[error(
        "refusing to sync: {0}\n  hint: the repository contains a hostile or broken tree entry; nothing was written"
    )]
    Unsafe(#[from] crate::path::UnsafeName),
    /// Two entries of one directory differ only by case, and the target does not tell them
    /// apart.
    #[error(
        "refusing to sync: {a} and {b} differ only by case, and the target does not tell such names apart (one would overwrite the other)\n  hint: rename one of them in the repository, or sync to a case-sensitive target; nothing was written"
    )]
    CaseCollision {
        /// One entry.
        a: String,
        /// The other.
        b: String,
    },
    /// The plan would hold more than [`Limits`] allow: a tree bomb, or a tree larger than
    /// the limits were set for.
    #[error(
        "refusing to sync: the tree needs {planned_shown} {what}, more than the limit of {max_shown} ({key})\n  hint: a tree this large is most likely a tree bomb (subtrees shared many times over); if it is legitimate, raise the limit with --{flag} (or {key} in treesync.toml); nothing was written",
        planned_shown = limit.show(*planned),
        max_shown = limit.show(*max),
        what = limit.what(),
        key = limit.key(),
        flag = limit.flag(),
    )]
    TooLarge {
        /// Which limit.
        limit: Limit,
        /// Its value.
        max: u64,
        /// What the plan reached when it was refused (at least this much).
        planned: u64,
    },
    /// An object could not be read.
    #[error(transparent)]
    Object(#[from] crate::source::Error),
    /// Attributes could not be read, or a conversion needed to compare could not be made.
    #[error(transparent)]
    Attributes(#[from] crate::convert::Error),
    /// A submodule whose tree is needed (`--recurse-submodules`) cannot be read.
    #[error(transparent)]
    Submodule(#[from] Box<crate::submodule::Error>),
    /// A plan handed on in chunks ([`stream_checkout`]) was stopped by its taker (the sync
    /// applying it failed or was interrupted).
    #[error("planning stopped: the sync applying the plan stopped\n  hint: run sync again to finish it")]
    Stopped,
    /// A tree entry has a mode git does not write.
    #[error(
        "tree {tree} has an entry {} with mode {mode:o}, which git does not write\n  hint: the repository holds a tree git itself would refuse; `git fsck` names it", crate::path::quote(path.as_bytes())
    )]
    Mode {
        /// The tree.
        tree: ObjectId,
        /// The entry.
        path: String,
        /// Its mode.
        mode: u32,
    },
}

/// One of the [`Limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`Limits::max_entries`].
    Entries,
    /// [`Limits::max_bytes`].
    Bytes,
}

impl Limit {
    fn what(self) -> &'static str {
        match self {
            Limit::Entries => "ops (directories, files and symlinks to create, change or remove)",
            Limit::Bytes => "of file content",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Limit::Entries => "max_entries",
            Limit::Bytes => "max_bytes",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Limit::Entries => "max-entries N",
            Limit::Bytes => "max-bytes SIZE",
        }
    }

    /// `at least 50,331,646`, or bytes as `1.5 TiB (1649267441664 bytes)`.
    fn show(self, n: u64) -> String {
        match self {
            Limit::Entries => n.to_string(),
            Limit::Bytes => {
                const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
                let (mut v, mut u) = (n as f64, 0);
                while v >= 1024.0 && u + 1 < UNITS.len() {
                    v /= 1024.0;
                    u += 1;
                }
                if u == 0 { format!("{n} bytes") } else { format!("{v:.1} {} ({n} bytes)", UNITS[u]) }
            }
        }
    }
}
