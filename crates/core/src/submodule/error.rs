//! [`Error`]: a submodule's repository cannot be found or read.

use std::path::PathBuf;

use gix_hash::ObjectId;

use crate::source;

/// A submodule's repository cannot be found or read. Raised while planning: nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No repository holding the recorded commit was found.
    #[error(
        "cannot fill submodule {name} at {path}: no repository holding its commit {commit} was found; looked in:{looked}\n  hint: {hint}; or sync without --recurse-submodules (nothing was written)",
        name = name.as_deref().map_or_else(|| "(not named in .gitmodules)".to_string(), |n| format!("{n:?}")),
        path = crate::path::quote(path.as_bytes()),
        looked = looked.iter().map(|l| format!("\n    - {l}")).collect::<String>(),
    )]
    NotFound {
        /// The submodule's name in `.gitmodules`, if it has one there.
        name: Option<String>,
        /// Its path in the target.
        path: String,
        /// The commit the gitlink records.
        commit: ObjectId,
        /// Every place looked, each with what was found there.
        looked: Vec<String>,
        /// A command that makes the submodule available.
        hint: String,
    },
    /// The submodule's repository would be read at a local path taken from its URL, which
    /// git's `protocol.file.allow` (or `GIT_ALLOW_PROTOCOL`) does not allow.
    #[error(transparent)]
    LocalUrl(Box<LocalUrl>),
    /// Submodules nested deeper than [`MAX_NESTING`] (a chain of commits that hold gitlinks to
    /// each other, which no real project has).
    #[error(
        "refusing to fill submodule {}: it is nested {MAX_NESTING} submodules deep\n  hint: the repository's submodules nest in a chain no checkout needs (a hostile or broken history); sync without --recurse-submodules (nothing was written)",
        crate::path::quote(path.as_bytes())
    )]
    TooDeep {
        /// Its path in the target.
        path: String,
    },
    /// A `.gitmodules` file could not be read.
    #[error(
        "cannot read .gitmodules of tree {tree} in {}: {message}\n  hint: fix .gitmodules in the repository (`git config -f .gitmodules --list` shows what git makes of it), or sync without --recurse-submodules",
        repo.display()
    )]
    Gitmodules {
        /// The tree holding it.
        tree: ObjectId,
        /// The repository.
        repo: PathBuf,
        /// What gitoxide said.
        message: String,
    },
    /// An object of a submodule's repository could not be read.
    #[error(transparent)]
    Object(#[from] source::Error),
}

/// A submodule whose repository would be read at a local path taken from its URL, which git's
/// `protocol.file.allow` (or `GIT_ALLOW_PROTOCOL`) does not allow ([`Error::LocalUrl`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to read submodule {name:?} at {path} from {}: its URL {url} names a local repository, and {why}; looked in:{looked}\n  hint: {hint}; or sync without --recurse-submodules (nothing was written)",
    at.display(),
    path = crate::path::quote(path.as_bytes()),
    looked = looked.iter().map(|l| format!("\n    - {l}")).collect::<String>(),
)]
pub struct LocalUrl {
    /// The submodule's name in `.gitmodules`.
    pub name: String,
    /// Its path in the target.
    pub path: String,
    /// Its URL as `.gitmodules` writes it.
    pub url: String,
    /// The local path the URL resolves to.
    pub at: PathBuf,
    /// What refuses it (`protocol.file.allow is never`, …).
    pub why: String,
    /// Every place looked, each with what was found there.
    pub looked: Vec<String>,
    /// How to allow it, or to make the submodule the superproject's own.
    pub hint: String,
}

/// How deep submodules may nest in submodules (git has no limit; real projects stay within a
/// few levels).
pub const MAX_NESTING: usize = 64;
