//! What a verify found: the drift, the counts, and what a repair needs of it.

use gix_hash::ObjectId;
use serde::Serialize;

use super::{Level, Want};
use crate::source::Repo;

/// One difference between the target and its recorded tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Drift {
    /// In the tree, not in the target.
    Missing {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
    },
    /// In the target, not in the tree.
    Extra {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
        /// `true` for a directory.
        dir: bool,
    },
    /// A file where a directory should be, and the like.
    TypeChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
        /// What the tree has.
        expected: &'static str,
        /// What the target has.
        found: &'static str,
    },
    /// The exec bit differs.
    ModeChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
        /// Whether the tree says executable.
        executable: bool,
    },
    /// The content (or size) differs.
    ContentChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
    },
    /// A symlink points elsewhere.
    LinkChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
    },
}

impl Drift {
    /// The path (`/`-separated bytes below the target root).
    pub fn path(&self) -> &[u8] {
        match self {
            Drift::Missing { path }
            | Drift::Extra { path, .. }
            | Drift::TypeChanged { path, .. }
            | Drift::ModeChanged { path, .. }
            | Drift::ContentChanged { path }
            | Drift::LinkChanged { path } => path,
        }
    }
}

/// What a verify found and did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// The commit the state records (or, with `interrupted`, the commit the interrupted sync
    /// was going to).
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub commit: ObjectId,
    /// The target's journal records a sync that did not finish: it was compared with that
    /// sync's destination, and differs from it where the sync did not get to.
    pub interrupted: bool,
    /// The level.
    pub level: Level,
    /// Entries the tree has (files, symlinks, directories).
    pub expected: u64,
    /// Entries the scan found.
    pub scanned: u64,
    /// Files whose content was hashed.
    pub hashed: u64,
    /// Files proven by their stat data or ETag without reading them.
    pub proven_by_stat: u64,
    /// The differences, by path.
    pub drift: Vec<Drift>,
    /// Who judged the files' bytes when that was git (`--oracle git`, see [`verify_by_git`](super::Oracle::Git));
    /// absent: treesync's own conversions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleReport>,
    /// A verify of one slice of the tree ([`verify_slice`](super::Options::slice)): which, and what it covered
    /// (`expected` and `scanned` are then the slice's); null: the whole tree.
    pub slice: Option<SliceReport>,
    /// What [`repair_plan`] needs, kept so that it neither walks the tree nor scans the target
    /// again: the recorded tree, what it wants at each drifted path, and what the scan found at
    /// and below type-changed and extra paths (sorted).
    #[serde(skip)]
    pub(super) tree: ObjectId,
    #[serde(skip)]
    pub(super) wanted: Vec<(Vec<u8>, Want)>,
    #[serde(skip)]
    pub(super) found_below: Vec<(Vec<u8>, bool)>,
    /// The repositories the tree's blobs are in: the repository, then the submodules entered.
    #[serde(skip)]
    pub(super) repos: Vec<Repo>,
}

/// What a verify of one slice ([`crate::slice`]) covered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SliceReport {
    /// Which slice, from 1.
    pub k: u32,
    /// Of how many.
    pub n: u32,
    /// Directories whose listing this slice checked (those of the tree in it; `expected`
    /// counts the paths directly in them).
    pub dirs: u64,
    /// A rolling run ([`crate::slice::Pick::Next`]): the slice the next one checks; null
    /// otherwise.
    pub next: Option<u32>,
    /// When a cycle of all slices, checked in order by rolling runs, last completed (Unix
    /// seconds, from the target's rolling position; this run, when it checked the last slice
    /// of a cycle); null: not yet, or not known (the caller keeps no position).
    pub last_full_cycle_unix: Option<u64>,
}

impl Report {
    /// No drift?
    pub fn is_clean(&self) -> bool {
        self.drift.is_empty()
    }

    /// The repositories the compared tree's blobs are in: the repository, then the
    /// submodules whose trees were compared. What a repair reads blobs from
    /// ([`crate::submodule::Blobs::source`]).
    pub fn repos(&self) -> &[Repo] {
        &self.repos
    }
}

/// How git judged a target ([`verify_by_git`](super::Oracle::Git)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct OracleReport {
    /// `git --version` of the git that judged.
    pub git: String,
    /// Files whose bytes were compared with what git writes.
    pub judged: u64,
    /// Files git did not write (a submodule's, or one `git archive` leaves out) and that were
    /// compared with treesync's own conversion instead.
    pub not_judged: u64,
}
