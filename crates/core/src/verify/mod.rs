//! [`verify()`]: prove that a target holds exactly the tree its state records, and
//! [`repair_plan()`]: turn what differs into the minimal ops.
//!
//! Levels: [`Level::Quick`] compares existence, type, exec bit and size; [`Level::Stat`] (the
//! default) also compares each file's stat data with what the last verify recorded in a real
//! git index (`.treesync/index`) and hashes only files whose stat differs or is unknown —
//! on object stores it compares the listing's ETag with the MD5 of the blob instead;
//! [`Level::Full`] hashes every file.
//!
//! Only `verify` writes the index, so a sync stays O(changed): a sync records the stat data of
//! the files it wrote in a small delta (`.treesync/index-delta`, [`crate::index_delta`]) that
//! the next stat-level verify merges over the index (a removal drops an entry), proves files by,
//! and folds into the index it writes. Files the delta does not know (written by a backend that
//! records nothing, or too young for the racy-timestamp rule) are hashed once. The index
//! is a real one, so `GIT_INDEX_FILE=T/.treesync/index git --git-dir=R --work-tree=T status -uno`
//! gives a second opinion right after a verify.
//!
//! # What a file is compared with
//!
//! With what a sync writes ([`Against`], from the state): a file with a `.gitattributes`
//! conversion (under the state's `conversions` settings, by the `.gitattributes` files of
//! its own repository's tree) is expected to hold the converted blob — its size (also at
//! [`Level::Quick`]), its bytes ([`Level::Full`], or when its stat does not prove it), the MD5
//! of those bytes (an object store's ETag). The converted bytes are made only for files with
//! a conversion and only when the stat index does not prove them; the others keep the fast
//! path through the blob id, its header's size, the stat index and the ETag. With the state's
//! `recurse_submodules`, each gitlink is expected to hold its recorded commit's tree, read from
//! the submodule's repository (found as a sync finds it, [`Submodules`](crate::submodule::Submodules)), and repairs read
//! blobs from there ([`Report::repos`]).
//!
//! # The stat index and conversions
//!
//! The index records the BLOB id of each path (as git's index does, so `git status` with it
//! works), not the id of the converted bytes. Rule: an entry is recorded only for a file this
//! verify proved — its bytes compared with the converted blob, or its ETag with their MD5, or
//! its stat matched an entry recorded that way. So a stat match proves that the file still
//! holds bytes once proven to be the blob converted as the state says. That holds across
//! later syncs: a sync that changes a file's conversion (its attributes or the settings)
//! rewrites the file, which gives it a new stat the index does not know (it is then hashed
//! once); a sync that leaves a file alone left its converted bytes equal. The entries of a
//! sync's delta meet the same rule: that sync wrote those bytes from the blob, converted as the
//! state records, and took the stat data once they were in place. [`Level::Quick`]
//! proves nothing and records nothing.

use gix_hash::ObjectId;
use serde::Serialize;

use crate::backend;
use crate::convert::{Conversion, Converter};
use crate::slice::Slice;
use crate::source;
use crate::source::Repo;

mod blobs;
mod compare;
mod function;
mod index;
mod repair;
mod report;
mod slices;
mod walk;

pub use function::{recorded, recorded_commit, verify};
pub use repair::repair_plan;
pub use report::{Drift, OracleReport, Report, SliceReport};
pub use slices::roll;

/// How to verify.
#[derive(Debug, Clone)]
pub struct Options {
    /// How thoroughly to compare.
    pub level: Level,
    /// How large the tree may be ([`crate::plan::Limits`]; only `max_entries` applies: verify
    /// writes nothing).
    pub limits: crate::plan::Limits,
    /// Compare one slice of the tree ([`crate::slice`]): the listings of the slice's
    /// directories and the paths directly in them; nothing else of the target is listed or
    /// stat'ed, and the stat index keeps what other slices proved. `None`: the whole tree.
    pub slice: Option<Slice>,
    /// Who judges the files' bytes: treesync's own conversions, or git ([`Oracle::Git`]).
    pub oracle: Oracle,
    /// What to compare with: `None` takes what the target's state records (see [`recorded`]),
    /// and [`Report::interrupted`] tells whether that was an interrupted sync's destination.
    pub against: Option<Against>,
    /// Write the stat index (where the backend keeps one) with what was proven, so the next
    /// verify hashes less. Off: the comparison writes nothing (a sync planning a repair).
    pub record: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            level: Level::default(),
            limits: crate::plan::Limits::default(),
            slice: None,
            oracle: Oracle::default(),
            against: None,
            record: true,
        }
    }
}

impl Options {
    /// The defaults at `level`: the whole tree its state records, judged by treesync, the
    /// stat index recorded.
    pub fn at(level: Level) -> Options {
        Options { level, ..Default::default() }
    }
}

/// Who judges whether a file holds the right bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Oracle {
    /// treesync's own conversions of the recorded tree, as a sync writes them.
    #[default]
    Treesync,
    /// What the `git` program writes for the recorded tree on checkout (or in `git archive`,
    /// for an `--export` target), made independently of treesync's conversions
    /// ([`crate::oracle`]): a file treesync converted differently from git is
    /// [`Drift::ContentChanged`]. Records no stat index (whatever [`Options::record`] says);
    /// `--oracle git` compares at [`Level::Full`].
    Git,
}

/// Where a running verify is: reported once the tree is walked and the target listed, then
/// after every file read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Entries the tree has (the slice's, for a slice).
    pub expected: u64,
    /// Entries the listing found.
    pub scanned: u64,
    /// Files read and hashed so far.
    pub hashed: u64,
    /// Files to read and hash: those whose stat data (or ETag) does not prove them.
    pub to_hash: u64,
}

/// How thoroughly to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Existence, type, exec bit, size.
    Quick,
    /// Also content, hashing only files whose stat data (or ETag) does not prove it.
    #[default]
    Stat,
    /// Hash every file.
    Full,
}

/// Verify failed (not: drift was found).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The target has no state to verify against.
    #[error(
        "{0} has no completed sync to verify against\n  hint: run `treesync sync` first (or finish the interrupted one)"
    )]
    NoState(String),
    /// The repository.
    #[error(transparent)]
    Source(#[from] source::Error),
    /// The target.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// The state file.
    #[error(transparent)]
    State(#[from] crate::state::ParseError),
    /// Planning the repair.
    #[error(transparent)]
    Plan(#[from] crate::plan::Error),
    /// The conversion settings or `.gitattributes` files could not be read.
    #[error(transparent)]
    Conversions(#[from] crate::convert::Error),
    /// A file's expected content could not be made (a filter driver failed).
    #[error(transparent)]
    Convert(#[from] crate::convert::ConvertError),
    /// The commit `export-subst` placeholders are expanded with could not be read.
    #[error(transparent)]
    Export(#[from] crate::export::Error),
    /// git, asked what the files must hold (`--oracle git`), could not answer.
    #[error(transparent)]
    Oracle(#[from] crate::oracle::Error),
    /// The interrupt flag was raised: the verify stopped between files, recording nothing.
    #[error("verify interrupted after hashing {hashed} files; nothing was recorded")]
    Interrupted {
        /// Files hashed before it stopped.
        hashed: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Dir,
    /// A submodule: a directory in the target (empty unless its tree is filled in: then its
    /// paths are in the walk too), an entry in the index.
    Gitlink {
        id: ObjectId,
    },
    File {
        id: ObjectId,
        executable: bool,
        /// How a sync writes it (`None`: as the blob is).
        conversion: Option<std::sync::Arc<Conversion>>,
    },
    Link {
        id: ObjectId,
    },
}

/// What a target is compared with: a tree, and how a sync writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Against {
    /// The commit (its `.gitmodules` find the submodules).
    pub commit: ObjectId,
    /// The tree: `commit`'s, or one of its directories' ([`Against::path`]).
    pub tree: ObjectId,
    /// The directory of `commit` whose tree `tree` is (a subtree sync); `None`: the root.
    pub path: Option<String>,
    /// The conversion settings the files are written with (the state's `conversions`);
    /// `None`: as blobs are.
    pub conversions: Option<crate::convert::Settings>,
    /// Gitlinks hold their submodules' trees (the state's `recurse_submodules`).
    pub recurse_submodules: bool,
    /// The paths selected (`--include`/`--exclude`, the state's `select`); `None`: all.
    pub select: Option<crate::select::Select>,
}

impl Against {
    /// `tree` of `commit`, files as blobs are, gitlinks empty.
    pub fn tree(commit: ObjectId, tree: ObjectId) -> Against {
        Against { commit, tree, path: None, conversions: None, recurse_submodules: false, select: None }
    }

    /// What the files are converted with when a sync writes them as `self` says (`None`: as
    /// blobs are); with `--export`, `%(describe)` expanded in the archive of this tree.
    pub(crate) fn converter(&self, repo: &Repo) -> Result<Option<Converter>, Error> {
        let Some(settings) = &self.conversions else { return Ok(None) };
        let mut c = Converter::new(repo, settings.clone())?;
        if settings.export {
            let commit = crate::export::CommitInfo::from_commit(repo, self.commit)?;
            let select = self.select.clone().unwrap_or_default();
            c = c.with_commit(commit.archive(self.tree, settings, &select));
        }
        Ok(Some(c))
    }
}

/// Stop with [`Error::Interrupted`] when the flag is raised.
pub(super) fn stop_if(interrupt: &std::sync::atomic::AtomicBool, hashed: u64) -> Result<(), Error> {
    match interrupt.load(std::sync::atomic::Ordering::SeqCst) {
        true => Err(Error::Interrupted { hashed }),
        false => Ok(()),
    }
}
