//! [`status()`]: what `treesync status` reports, read without changing the target.

use serde::Serialize;

use super::Error;
use super::function::holder;
use crate::backend::{self, Backend, TargetState};
use crate::state::SyncState;

/// What `treesync status` reports.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Status {
    /// The state file, if any.
    pub state: Option<SyncState>,
    /// What is at the target root: `empty` (nothing, or the directory does not exist yet),
    /// `managed` (treesync's state folder is there), `unmanaged` (files treesync did not write:
    /// `sync` needs `--force`).
    #[schemars(with = "TargetKind")]
    pub target: &'static str,
    /// When a sync holds the target's lock right now: the holder as written in the lock file,
    /// e.g. `pid 4242 on build-01, started at unix time 1796006406`; null otherwise. Always null
    /// on object stores, which have no lock: there a running sync shows as `state.in_progress`
    /// with a `holder`.
    pub running: Option<String>,
}

/// The values of [`Status::target`] (its schema).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // only its schema is used
enum TargetKind {
    Empty,
    Managed,
    Unmanaged,
}

/// Read a target's status without changing it (the lock is only probed).
pub async fn status(backend: &dyn Backend) -> Result<Status, Error> {
    let target = backend.prepare_target(false).await?;
    let state = match backend.load_state().await? {
        Some(bytes) => Some(SyncState::parse(&bytes)?),
        None => None,
    };
    let running = if target == TargetState::Managed && backend.capabilities().exclusive_lock {
        match backend.lock(&holder()).await {
            Ok(guard) => {
                backend.unlock(guard).await?;
                None
            }
            Err(backend::Error::Locked { holder }) => Some(holder),
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let target = match target {
        TargetState::Empty => "empty",
        TargetState::Managed => "managed",
        TargetState::Unmanaged => "unmanaged",
    };
    Ok(Status { state, target, running })
}
