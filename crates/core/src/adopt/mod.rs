//! [`adopt()`]: take over a working tree that git manages today, without touching its files.
//!
//! The clone's `.git/index` and `HEAD` say which commit its files hold (a clean index proves it
//! without reading a file); that commit is recorded as synced in the target's state, under the
//! target's lock, so the first sync into the clone is incremental. Refused when the index has
//! conflicts or staged changes, or when treesync manages the target already.

use std::path::PathBuf;

use serde::Serialize;

use crate::{backend, gitworktree, state};

mod function;
pub use function::adopt;

/// How to adopt.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Check the clone and say what would be recorded, writing nothing (not even the lock).
    pub dry_run: bool,
    /// The backend recorded in the state (`state.backend`); empty: `local`.
    pub backend_name: String,
}

/// What was (or, with [`Options::dry_run`], would be) recorded as synced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Outcome {
    /// The commit the clone's HEAD names, now the target's synced commit.
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub commit: gix_hash::ObjectId,
    /// Its tree.
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub tree: gix_hash::ObjectId,
    /// Entries of the clone's index (none of their files was read).
    pub index_entries: usize,
    /// Nothing was written.
    pub dry_run: bool,
}

/// Adopting failed; nothing was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The clone: not a working tree, conflicts or staged changes, an unreadable index or HEAD.
    #[error(transparent)]
    GitWorktree(#[from] gitworktree::Error),
    /// The target's lock or state.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// The state file that is there cannot be read.
    #[error(transparent)]
    State(#[from] state::ParseError),
    /// treesync manages the target already.
    #[error(
        "{} is already managed by treesync (state in .treesync/state); nothing to adopt\n  hint: `treesync sync` updates it, `treesync verify` checks it", target.display()
    )]
    AlreadyManaged {
        /// The clone.
        target: PathBuf,
    },
}
