//! One slice of the tree: the directories it lists, and what lies below drift in it.

use super::blobs::lookup;
use super::report::{Drift, Report};
use super::{Error, Want};
use crate::backend::{Backend, FoundKind};
use crate::path::RelPath;
use crate::slice::Slice;

/// The directories slice `s` lists: those of the tree (the root, directories, gitlinks) in it.
/// A name that is not a valid path cannot be in a target (a sync refuses it): not listed.
pub(super) fn slice_dirs(want: &[(Vec<u8>, Want)], s: Slice) -> Vec<RelPath> {
    let root = s.has_dir(b"").then(RelPath::root);
    let dirs = want
        .iter()
        .filter(|(p, w)| matches!(w, Want::Dir | Want::Gitlink { .. }) && s.has_dir(p))
        .filter_map(|(p, _)| RelPath::parse_bytes(p).ok());
    root.into_iter().chain(dirs).collect()
}

/// Everything below the directories that `drift` finds type-changed or extra (found as
/// directories in `found`), level by level.
pub(super) async fn below(
    backend: &dyn Backend,
    drift: &[Drift],
    found: &[(Vec<u8>, FoundKind)],
) -> Result<Vec<(Vec<u8>, FoundKind)>, Error> {
    let mut level: Vec<RelPath> = drift
        .iter()
        .filter(|d| matches!(d, Drift::TypeChanged { .. } | Drift::Extra { dir: true, .. }))
        .filter(|d| lookup(found, d.path()).is_some_and(|k| *k == FoundKind::Dir))
        .filter_map(|d| RelPath::parse_bytes(d.path()).ok())
        .collect();
    let mut out = Vec::new();
    while !level.is_empty() {
        let listed = backend.scan_dirs(&level, backend.policy().scans).await?;
        level = listed
            .iter()
            .filter(|f| f.kind == FoundKind::Dir)
            .filter_map(|f| RelPath::parse_bytes(&f.path).ok())
            .collect();
        out.extend(listed.into_iter().map(|f| (f.path, f.kind)));
    }
    Ok(out)
}

/// After a verify of one slice (`report.slice`; nothing to do for a whole tree): with
/// `advance` (a rolling run, [`crate::slice::Pick::Next`]), move the rolling position on — kept
/// in `position`'s `.treesync/`, or, with `None`, by the caller (then the slice after this one
/// is next) — and say in the report which slice is next; in any case say when the last full
/// cycle completed. Returns the position after it, as far as it is known.
pub async fn roll(
    report: &mut Report,
    position: Option<&dyn Backend>,
    advance: bool,
) -> Result<Option<crate::slice::Rolling>, crate::slice::Error> {
    let Some(r) = report.slice.as_mut() else { return Ok(None) };
    let slice = Slice::new(r.k, r.n)?;
    let rolling = match (position, advance) {
        (Some(b), true) => Some(crate::slice::finish(b, slice, crate::state::now_unix()).await?),
        (None, true) => Some(crate::slice::Rolling { n: slice.n, next: slice.k % slice.n + 1, ..Default::default() }),
        (Some(b), false) => crate::slice::position(b).await?,
        (None, false) => None,
    };
    if advance {
        r.next = rolling.as_ref().map(|p| p.next);
    }
    r.last_full_cycle_unix = rolling.as_ref().and_then(|p| p.last_full_cycle_unix);
    Ok(rolling)
}
