//! One slice of the tree: the directories it lists, and what lies below drift in it.

use super::blobs::lookup;
use super::report::Drift;
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
