//! `export-subst`: expanding `$Format:…$` in files as `git archive` does (`--export`).
//!
//! A file with the `export-subst` attribute has every `$Format:PLACEHOLDERS$` replaced by the
//! commit's data, formatted as `git log --format=PLACEHOLDERS` would format it (git's
//! `archive.c` hands the text between `$Format:` and the next `$` to `format_commit_message`).
//! [`CommitInfo`] holds what the placeholders need; [`expand`] does the replacing. The
//! placeholders, and where treesync departs from git, are listed in `docs/export.md`.

mod commit;
mod describe;
mod format;
mod person;
pub use person::civil_from_days;
#[cfg(test)]
mod tests;

pub use commit::CommitInfo;
pub use format::expand;

use gix_hash::ObjectId;

use crate::source::Cause;

/// Reading what the placeholders of a commit need failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The commit or its refs could not be read.
    #[error(
        "cannot read the {what} of commit {id} for export-subst: {source}\n  hint: the repository may be corrupt or incomplete; `git fsck` and `git log -1 --format=%d {id}` tell more"
    )]
    Read {
        /// `commit object` or `refs`.
        what: &'static str,
        /// The commit.
        id: ObjectId,
        /// Why: gitoxide's error, or what treesync found.
        #[source]
        source: Cause,
    },
    /// A file holds a placeholder `git archive` expands and treesync cannot expand as git does:
    /// the file is not written rather than written differently.
    #[error(
        "cannot expand `{placeholder}` in {path} (export-subst) as `git archive` does: {why}\n  hint: remove the placeholder from the file, or take `export-subst` off it in .gitattributes; `git archive` is the way to get this expansion"
    )]
    Unsupported {
        /// The file.
        path: String,
        /// The placeholder, as it is in the file (`%w(72)`).
        placeholder: String,
        /// What it needs that treesync does not do.
        why: &'static str,
    },
}
