//! The document `sync --json` prints, which a webhook also posts after each sync.

use std::collections::BTreeMap;

use serde::Serialize;
use treesync_core::{generation, sync};

use crate::render::BackendInfo;

/// `sync --json`: the sync's outcome, the backend that ran it and what it cost.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct SyncOutput<'a> {
    #[serde(flatten)]
    pub(crate) outcome: &'a sync::Outcome,
    #[serde(flatten)]
    pub(crate) backend: BackendInfo,
    /// The backend's cost in the storage's own terms (requests by method, lookups).
    pub(crate) cost: BTreeMap<&'static str, u64>,
    /// The NFS budgets; absent for other backends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) budgets: Option<treesync::BudgetsReport>,
    /// For a target kept in generations (`--atomic`): which generation was prepared and
    /// switched to, how, and the generations kept. The fields above describe the sync of that
    /// generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) atomic: Option<&'a generation::Outcome>,
    /// With `--no-atomic` on a target kept in generations: what leaving them did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) left_generations: Option<&'a generation::LeaveOutcome>,
}
