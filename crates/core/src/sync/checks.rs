//! What a sync checks before anything is written (sizes, filters, LFS objects, the base tree), and
//! the comparison that plans a repair or a takeover of a managed target.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::{Error, Replaced};
use crate::backend::Backend;
use crate::convert::Converter;
use crate::op::Plan;
use crate::path::RelPath;
use crate::plan::{self, ExistingEntry, ExistingKind};
use crate::select::Select;
use crate::source::{self, Repo, Resolved};
use crate::state::SyncState;
use crate::submodule;
use crate::verify;
use gix_hash::ObjectId;

/// Refuse plans of `planned` bytes whose LFS objects add `lfs` bytes when together they pass
/// `limits.max_bytes` (an LFS pointer of 130 bytes may stand for gigabytes).
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
pub(super) fn check_bytes(limits: plan::Limits, planned: u64, lfs: u64) -> Result<(), Error> {
    let bytes = planned.saturating_add(lfs);
    if lfs > 0 && bytes > limits.max_bytes {
        return Err(Error::Plan(plan::Error::TooLarge {
            limit: plan::Limit::Bytes,
            max: limits.max_bytes,
            planned: bytes,
        }));
    }
    Ok(())
}

/// Refuse a plan that uses a required filter driver without a command, before any write.
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
pub(super) fn check_filters(repo: &Repo, plan: &Plan, settings: &crate::convert::Settings) -> Result<(), Error> {
    let uses = plan.ops().filter_map(|op| match op {
        crate::Op::Write { path, conversion: Some(c), .. } | crate::Op::Chmod { path, conversion: Some(c), .. } => {
            c.filter.as_deref().map(|f| (f, path.display()))
        }
        _ => None,
    });
    let uses: Vec<(&str, String)> = uses.collect();
    crate::convert::Resolver::check_required(settings, repo.path(), uses.iter().map(|(f, p)| (*f, p.as_str())))?;
    Ok(())
}

/// `converter`, reading LFS objects from the stores of the submodule repositories too
/// (`repos`: the repository, then the submodules the plans read), after the repository's own.
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
pub(super) fn with_submodule_stores(
    repo: &Repo,
    converter: Arc<Converter>,
    repos: &[Repo],
) -> Result<Arc<Converter>, Error> {
    let Some(store) = converter.lfs_store() else { return Ok(converter) };
    if repos.len() < 2 {
        return Ok(converter);
    }
    let others = repos[1..].iter().map(crate::lfs::Store::open).collect::<Result<Vec<_>, _>>()?;
    let store = store.clone().with_fallbacks(&others);
    Ok(Arc::new(Converter::new(repo, converter.settings().clone())?.with_lfs_store(store)))
}

/// Refuse a plan whose LFS pointer files need objects that are not in the LFS store of
/// `converter` ([`crate::lfs::check`]), before any write: the pointer of every written file with
/// `filter=lfs` is read from `repos` (the repository, then submodules'). Nothing to check when
/// pointer files are written ([`crate::lfs::LfsMode::Pointers`]).
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
pub(super) fn check_lfs(repos: &[Repo], plan: &Plan, converter: &Converter) -> Result<u64, Error> {
    if converter.lfs_store().is_none() {
        return Ok(0);
    }
    let mut extra = 0u64;
    let blobs = submodule::Blobs::source(repos.to_vec());
    let mut wanted = Vec::new();
    for op in plan.ops() {
        let Some(content) = op.content() else { continue };
        let Some(conversion) = content.conversion.filter(|c| c.is_lfs()) else { continue };
        // Larger blobs are never pointers: not worth reading.
        if content.size > crate::lfs::MAX_POINTER_SIZE as u64 {
            continue;
        }
        let mut data = Vec::with_capacity(usize::try_from(content.size).unwrap_or(0));
        blobs
            .read_blob(content.blob, content.size, &mut |chunk| {
                data.extend_from_slice(chunk);
                Ok(())
            })
            .map_err(|e| match e {
                source::BlobError::Source(e) => Error::Source(e),
                source::BlobError::Convert(e) => Error::Convert(e.into()),
                source::BlobError::Sink(e) => Error::Lfs(crate::lfs::Error::Sink(e)),
            })?;
        if let Some(pointer) = converter.lfs_pointer(&data, conversion) {
            extra = extra.saturating_add(pointer.size.saturating_sub(content.size));
            wanted.push((pointer, content.path.display()));
        }
    }
    let store = converter.lfs_store().expect("checked above");
    crate::lfs::check(store, wanted)?;
    Ok(extra)
}

/// The ops that bring the target to `to`'s tree (directory `path` of its commit, gitlinks
/// filled with `recurse`) from whatever it holds: compare once, repair what differs (foreign
/// entries too with `delete_extra`), and what that replaces; the plan's files are converted
/// by `converter`, its blobs are in the repositories returned. Writes nothing, not even the
/// index.
#[allow(clippy::too_many_arguments)] // private: the inputs of a comparison and its repair
pub(super) async fn repair_plan_to(
    repo: &Repo,
    backend: &dyn Backend,
    to: Resolved,
    (path, recurse, select): (&Option<String>, bool, &Option<Select>),
    delete_extra: bool,
    limits: plan::Limits,
    converter: &Converter,
) -> Result<(Plan, Replaced, Vec<Repo>), Error> {
    let against = verify::Against {
        commit: to.commit,
        tree: to.tree,
        path: path.clone(),
        conversions: Some(converter.settings().clone()),
        recurse_submodules: recurse,
        select: select.clone(),
    };
    let compare = verify::Options { limits, against: Some(against), record: false, ..Default::default() };
    // A comparison writes nothing: planning it is not interrupted, as no planning is.
    let report = verify::verify(repo, backend, &compare, &|_| {}, &AtomicBool::new(false)).await?;
    let mut replaced = Replaced::default();
    for d in &report.drift {
        match d {
            verify::Drift::Missing { .. } => {}
            verify::Drift::Extra { path, .. } if delete_extra => replaced.note(true, path.clone()),
            verify::Drift::Extra { .. } => {}
            verify::Drift::TypeChanged { path, .. } => replaced.note(true, path.clone()),
            d => replaced.note(false, d.path().to_vec()),
        }
    }
    // Its writes carry the conversions the comparison expected (each submodule's files by
    // its own `.gitattributes`).
    let plan = verify::repair_plan(repo, &report, delete_extra)?;
    Ok((plan, replaced, report.repos().to_vec()))
}

/// What the takeover `plan` removes and writes over of the `existing` entries.
pub(super) fn replaced_by(plan: &Plan, existing: &[ExistingEntry]) -> Replaced {
    let present: std::collections::HashSet<&RelPath> =
        existing.iter().filter(|e| e.kind == ExistingKind::NonDir).map(|e| &e.path).collect();
    let mut replaced = Replaced::default();
    let mut removed_dirs: Vec<&RelPath> = Vec::new();
    for op in plan.ops() {
        match op {
            crate::Op::Rmdir { path } => removed_dirs.push(path),
            crate::Op::Write { path, .. } | crate::Op::Symlink { path, .. } if present.contains(path) => {
                replaced.note(false, path.as_bytes().to_vec())
            }
            _ => {}
        }
    }
    let below = |p: &RelPath, d: &RelPath| {
        p.as_bytes().starts_with(d.as_bytes()) && p.as_bytes().get(d.as_bytes().len()) == Some(&b'/')
    };
    let mut removed: Vec<&RelPath> = plan
        .ops()
        .filter_map(|op| match op {
            crate::Op::Unlink { path } | crate::Op::Rmdir { path } => Some(path),
            _ => None,
        })
        .filter(|p| !removed_dirs.iter().any(|d| below(p, d)))
        .collect();
    removed.sort();
    for p in removed {
        replaced.note(true, p.as_bytes().to_vec());
    }
    replaced
}

/// The tree a diff starts from must still be in the repository: a commit that was amended
/// and garbage-collected is not corruption, and gets its own message.
#[allow(clippy::result_large_err)] // the crate's one error type; not a hot path
pub(super) fn check_base(repo: &Repo, tree: Option<ObjectId>, state: Option<&SyncState>) -> Result<(), Error> {
    let Some(tree) = tree else { return Ok(()) };
    if repo.with_objects(|odb| odb.try_header(&tree).ok().flatten().is_some()) {
        return Ok(());
    }
    let what = match state.and_then(|s| s.synced).filter(|s| s.tree == tree) {
        Some(s) => format!("commit {} (tree {tree})", s.commit),
        None => format!("tree {tree}"),
    };
    Err(Error::BaseGone { what })
}
