//! The entry points: what the target should hold, and the comparison with it.

use super::compare::verify_inner;
use super::report::Report;
use super::{Against, Error, Level};
use crate::backend::Backend;
use crate::slice::Slice;
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

pub(super) async fn recorded_state(backend: &dyn Backend) -> Result<(Against, bool, u64), Error> {
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

/// Compare `backend` with the tree its state records (see [`recorded`]), as a sync writes it
/// (conversions, submodules). Writes the stat index (where the backend keeps one) with what
/// was proven, so the next verify hashes less.
pub async fn verify(repo: &Repo, backend: &dyn Backend, level: Level) -> Result<Report, Error> {
    verify_with(repo, backend, level, crate::plan::Limits::default()).await
}

/// [`verify`] of a tree that may be larger than the default [`crate::plan::Limits`] (only
/// `max_entries` applies: verify writes nothing).
pub async fn verify_with(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    limits: crate::plan::Limits,
) -> Result<Report, Error> {
    let (against, interrupted) = recorded(backend).await?;
    let mut report = verify_against(repo, backend, level, &against, true, limits).await?;
    report.interrupted = interrupted;
    Ok(report)
}

/// [`verify_with`] at [`Level::Full`], with git as the judge of every file's bytes: what the
/// `git` program writes for the recorded tree on checkout (or in `git archive`, for an
/// `--export` target), made independently of treesync's conversions ([`crate::oracle`]). A
/// file treesync converted differently from git is [`Drift::ContentChanged`]. Records no stat
/// index.
pub async fn verify_by_git(repo: &Repo, backend: &dyn Backend, limits: crate::plan::Limits) -> Result<Report, Error> {
    let (against, interrupted) = recorded(backend).await?;
    let mut report = verify_inner(repo, backend, Level::Full, &against, false, limits, None, true).await?;
    report.interrupted = interrupted;
    Ok(report)
}

/// [`verify_with`] of one slice of the tree ([`crate::slice`]): the listings of the slice's
/// directories and the paths directly in them; `None`: the whole tree. Nothing else of the
/// target is listed or stat'ed. The stat index keeps what other slices proved.
pub async fn verify_slice(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    limits: crate::plan::Limits,
    slice: Option<Slice>,
) -> Result<Report, Error> {
    let (against, interrupted) = recorded(backend).await?;
    let mut report = verify_against_in(repo, backend, level, &against, true, limits, slice).await?;
    report.interrupted = interrupted;
    Ok(report)
}

/// Compare `backend` with `against` (a tree, written as a sync writes it). With `record`,
/// write the stat index with what was proven.
pub async fn verify_against(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    against: &Against,
    record: bool,
    limits: crate::plan::Limits,
) -> Result<Report, Error> {
    verify_against_in(repo, backend, level, against, record, limits, None).await
}

/// [`verify_against`] of one slice of the tree (`None`: all of it), see [`verify_slice`].
pub async fn verify_against_in(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    against: &Against,
    record: bool,
    limits: crate::plan::Limits,
    slice: Option<Slice>,
) -> Result<Report, Error> {
    verify_inner(repo, backend, level, against, record, limits, slice, false).await
}
