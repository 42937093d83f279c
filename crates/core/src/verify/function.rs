//! The entry points: what the target should hold, and the comparison with it.

use std::sync::atomic::AtomicBool;

use super::compare::compare;
use super::report::Report;
use super::{Against, Error, Options, Progress};
use crate::backend::Backend;
use crate::source::Repo;

/// The commit a target should hold: the one its state records, or, when a sync was
/// interrupted, the one that sync was going to (then `true`). An error if it has neither.
pub async fn recorded_commit(backend: &dyn Backend) -> Result<(crate::state::Synced, bool), Error> {
    let (against, interrupted, at_unix) = recorded_state(backend).await?;
    Ok((crate::state::Synced { commit: against.commit, tree: against.tree, at_unix }, interrupted))
}

/// What a target should hold, as [`recorded_commit`] finds it, with how its files were
/// written (conversions, submodules) per the state or the interrupted sync's journal.
pub async fn recorded(backend: &dyn Backend) -> Result<(Against, bool), Error> {
    let (against, interrupted, _) = recorded_state(backend).await?;
    Ok((against, interrupted))
}

async fn recorded_state(backend: &dyn Backend) -> Result<(Against, bool, u64), Error> {
    let state = match backend.load_state().await? {
        Some(b) => crate::state::SyncState::parse(&b)?,
        None => return Err(Error::NoState(backend.to_string())),
    };
    match (state.synced, state.in_progress) {
        (_, Some(p)) => Ok((
            Against {
                commit: p.to_commit,
                tree: p.to_tree,
                path: p.to_path,
                conversions: p.to_conversions,
                recurse_submodules: p.recurse_submodules,
                select: p.to_select,
            },
            true,
            p.started_unix,
        )),
        (Some(s), None) => Ok((
            Against {
                commit: s.commit,
                tree: s.tree,
                path: state.path,
                conversions: state.conversions,
                recurse_submodules: state.recurse_submodules,
                select: state.select,
            },
            false,
            s.at_unix,
        )),
        (None, None) => Err(Error::NoState(backend.to_string())),
    }
}

/// Compare `backend` with the tree its state records (see [`recorded`]), or with
/// [`Options::against`], as a sync writes it (conversions, submodules), as `options` say:
/// the whole tree or one slice, judged by treesync or by git, the stat index recorded or not.
/// `progress` hears where it is; `interrupt` stops it between files ([`Error::Interrupted`]),
/// recording nothing.
pub async fn verify(
    repo: &Repo,
    backend: &dyn Backend,
    options: &Options,
    progress: &(dyn Fn(&Progress) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<Report, Error> {
    let (against, interrupted) = match &options.against {
        Some(against) => (std::borrow::Cow::Borrowed(against), false),
        None => {
            let (against, interrupted) = recorded(backend).await?;
            (std::borrow::Cow::Owned(against), interrupted)
        }
    };
    let mut report = compare(repo, backend, &against, options, progress, interrupt).await?;
    report.interrupted = interrupted;
    Ok(report)
}
