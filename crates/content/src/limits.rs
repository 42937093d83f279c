//! [`Limits`]: how much one plan may hold and one sync may write, so that a tree bomb or a
//! runaway filter is refused instead of filling the memory or the target.

/// The default of [`Limits::max_entries`]: 10 million ops, about three times the largest git
/// working tree described in public (Windows, ~3.5 million files) and 100 times Linux
/// (~90,000 files). A 22-level tree bomb (a 2 KB pack) plans 12.6 million and is refused.
pub const DEFAULT_MAX_ENTRIES: u64 = 10_000_000;

/// The default of [`Limits::max_bytes`]: 1 TiB of file content written by one plan.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 40;

/// The most a plan may hold, so that a tree that expands to more than any real repository
/// (a tree bomb: a few KB of trees whose entries point at the same subtree, 2^N files) is
/// refused while planning, before anything is written and before its ops fill the memory.
///
/// A subtree about to be written is measured first (each distinct tree read once), so a bomb
/// is refused after reading a few trees, not after planning millions of ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Ops (directories, files and symlinks to create, change or remove) in one plan.
    pub max_entries: u64,
    /// Bytes of file content and link targets one plan writes: counted when planned (an LFS
    /// pointer by its object's size) and again as they are written (what a filter driver, line
    /// ends or an encoding make of a blob; [`crate::source::Converting`]).
    pub max_bytes: u64,
    /// How long a filter driver may take on one file ([`crate::smudge`]).
    pub filter_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: DEFAULT_MAX_ENTRIES,
            max_bytes: DEFAULT_MAX_BYTES,
            filter_timeout: crate::smudge::DEFAULT_TIMEOUT,
        }
    }
}
