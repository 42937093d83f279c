//! What can go wrong adopting or updating a git working tree.

use std::path::PathBuf;

/// Adopting or updating a git working tree failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not a git working tree.
    #[error("{path} is not a git working tree: {message}")]
    NotAWorktree {
        /// The target.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The index has conflicts.
    #[error(
        "the index of {worktree} has unmerged entries (e.g. {path})\n  hint: resolve the merge in that clone first; treesync only adopts a clean tree"
    )]
    Unmerged {
        /// The clone.
        worktree: PathBuf,
        /// A conflicted path.
        path: String,
    },
    /// The index records changes against HEAD.
    #[error(
        "the index of {worktree} records local changes against HEAD ({count} paths, e.g. {path})\n  hint: commit, stash or reset them in that clone first (git status shows them)"
    )]
    Staged {
        /// The clone.
        worktree: PathBuf,
        /// How many paths differ.
        count: usize,
        /// One of them.
        path: String,
    },
    /// Something under `.git` that treesync writes is a symlink, or not what git makes there.
    #[error(
        "{path} is {what}; treesync never writes through symlinks, and wrote nothing there\n  hint: replace it with {want} (or re-clone the target), then run again"
    )]
    Unsafe {
        /// The offending path.
        path: PathBuf,
        /// What it is (`a symlink`, `not a directory`, …).
        what: &'static str,
        /// What git makes there (`a directory`, `a file`).
        want: &'static str,
    },
    /// A git lock file exists.
    #[error(
        "{path} exists: another git process seems to be working in this clone\n  hint: wait for it; if no git is running there, remove {path} and run again"
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// Reading or writing the index or HEAD.
    #[error("cannot {what} in {worktree}: {message}")]
    Io {
        /// What.
        what: &'static str,
        /// The clone.
        worktree: PathBuf,
        /// Why.
        message: String,
    },
}
