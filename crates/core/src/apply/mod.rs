//! Run a [`Plan`](crate::Plan) on a [`Backend`](crate::Backend), phase by phase, each phase as
//! wide as the backend's [`Policy`](crate::backend::Policy) allows.

mod function;
pub use function::{apply, apply_chunks};

use std::time::Duration;

use crate::op::OpCounts;

/// How to run a plan.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Batches in flight at once; `None` takes the backend's policy.
    pub jobs: Option<usize>,
    /// Ops per batch; `None` takes the backend's policy.
    pub batch: Option<usize>,
}

/// Where a running apply is, reported after every batch.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    /// Name of the current phase.
    pub phase: &'a str,
    /// Ops done so far, all phases.
    pub ops_done: u64,
    /// Ops in the plan.
    pub ops_total: u64,
    /// Bytes written so far.
    pub bytes_done: u64,
    /// Bytes the plan writes.
    pub bytes_total: u64,
}

/// What an apply did.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct Outcome {
    /// Ops done, by kind.
    pub counts: OpCounts,
    /// Ops that met drift on the target (a directory missing or replaced by a symlink or a
    /// file, a file replaced by a directory) and corrected it before they ran again.
    pub healed: u64,
    /// Directories that healing had to make on the way to an op (missing, or something else
    /// in their place): what else they held in the tree is not there, so the caller brings
    /// the target to the tree by comparing it once ([`crate::sync`] does).
    pub dirs_recreated: u64,
    /// Wall time.
    #[serde(serialize_with = "crate::json::secs")]
    #[schemars(with = "crate::json::schema::Seconds")]
    pub elapsed: Duration,
}

/// Applying stopped; ops before the failing batch are done, the journal still says "in progress".
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A backend op failed.
    #[error("{source}")]
    Backend {
        /// Phase name.
        phase: String,
        /// What went wrong.
        #[source]
        source: crate::backend::Error,
        /// What was done before it stopped.
        done: OpCounts,
    },
    /// The interrupt flag was raised; the current batches finished first.
    #[error("interrupted after {done} ops", done = done.total())]
    Interrupted {
        /// What was done.
        done: OpCounts,
    },
}
