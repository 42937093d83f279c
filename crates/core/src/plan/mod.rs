//! Turn `old tree → new tree` into a [`Plan`](crate::Plan) without looking at the target.
//!
//! The diff walks both trees in the object database at once and never descends into a
//! subtree whose id is the same on both sides, so its cost grows with the number of changed
//! paths (times their depth), not with the size of the tree.

mod function;
pub(crate) use function::with_big_stack;
pub use function::{
    ExistingEntry, ExistingKind, MAX_PATH_BYTES, MAX_TREE_DEPTH, Options, plan, plan_takeover, plan_with,
};

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
    /// An object could not be read.
    #[error(transparent)]
    Object(#[from] crate::source::Error),
    /// A tree entry has a mode git does not write.
    #[error("tree {tree} has an entry {path:?} with unknown mode {mode:o}")]
    Mode {
        /// The tree.
        tree: ObjectId,
        /// The entry.
        path: String,
        /// Its mode.
        mode: u32,
    },
}
