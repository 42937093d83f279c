//! How deep a tree and how long a path may be, as git accepts them.

use super::Error;

/// The deepest tree accepted: git's default `core.maxTreeDepth`.
pub const MAX_TREE_DEPTH: usize = 4096;

/// The longest path accepted, in bytes (Linux's `PATH_MAX` less the terminating NUL).
pub const MAX_PATH_BYTES: usize = 4095;

/// The error for a tree deeper than [`MAX_TREE_DEPTH`], naming the first components of `path`.
pub(crate) fn too_deep(path: &[u8]) -> Error {
    let path = String::from_utf8_lossy(path);
    let shown: String = path.chars().take(100).collect();
    Error::Unsafe(crate::path::UnsafeName {
        path: format!("{shown}…"),
        reason: format!("the tree is deeper than {MAX_TREE_DEPTH} levels (git's core.maxTreeDepth refuses it too)"),
    })
}
