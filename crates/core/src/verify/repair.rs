//! [`repair_plan()`]: the ops that turn drift back into the recorded tree.

use gix::bstr::ByteSlice;

use super::blobs::{blob_data, blob_size, lookup};
use super::report::{Drift, Report};
use super::{Error, Want};
use crate::op::{Op, Plan};
use crate::path::RelPath;
use crate::source::Repo;

/// The ops that turn the drift of `report` back into the recorded tree: rewrite what differs,
/// restore what is missing, fix modes; remove extra entries only with `delete_extra` (and
/// temporaries of killed runs always). Uses what
/// [`verify()`](super::verify()) recorded in the report: no second walk of the tree, no second scan of the target.
pub fn repair_plan(repo: &Repo, report: &Report, delete_extra: bool) -> Result<Plan, Error> {
    let want = &report.wanted;
    let found = &report.found_below;
    let mut ops = Vec::new();
    let mut buf = Vec::new();
    let rel = |p: &[u8]| RelPath::parse_bytes(p).map_err(crate::plan::Error::from);
    let repos = if report.repos.is_empty() { std::slice::from_ref(repo) } else { &report.repos[..] };
    let create = |ops: &mut Vec<Op>, path: RelPath, w: &Want, buf: &mut Vec<u8>| -> Result<(), Error> {
        match w {
            Want::Dir | Want::Gitlink { .. } => ops.push(Op::Mkdir { path }),
            Want::File { id, executable, conversion } => {
                let size = blob_size(repos, id, path.as_bytes())?;
                ops.push(Op::Write {
                    path,
                    blob: *id,
                    size,
                    executable: *executable,
                    conversion: conversion.clone(),
                    reason: None,
                })
            }
            Want::Link { id } => {
                let target = blob_data(repos, id, path.as_bytes(), buf)?;
                ops.push(Op::Symlink { path, target });
            }
        }
        Ok(())
    };
    // Remove everything at and below `path` that the scan found.
    let remove_found = |ops: &mut Vec<Op>, path: &[u8]| {
        let start = found.partition_point(|e| e.0.as_slice() < path);
        for (p, is_dir) in &found[start..] {
            if !p.starts_with(path) {
                break;
            }
            if p.as_slice() != path && p.get(path.len()) != Some(&b'/') {
                continue;
            }
            let (parent, name) = p.rsplit_once_str(b"/").unwrap_or((b"", p));
            let r = RelPath::parse_bytes(p).ok().or_else(|| {
                let parent = if parent.is_empty() { Some(RelPath::root()) } else { RelPath::parse_bytes(parent).ok() };
                parent.and_then(|d| d.leftover(name.as_bstr())).filter(|_| !*is_dir)
            });
            if let Some(r) = r {
                ops.push(if *is_dir { Op::Rmdir { path: r } } else { Op::Unlink { path: r } });
            }
        }
    };
    for d in &report.drift {
        let key = d.path();
        match d {
            Drift::Missing { path } | Drift::ContentChanged { path } | Drift::LinkChanged { path } => {
                // A missing file's parents may be missing too; their own Missing entries make them.
                if let Some(w) = lookup(want, key) {
                    create(&mut ops, rel(path)?, w, &mut buf)?;
                }
            }
            Drift::ModeChanged { path, executable } => {
                if let Some(Want::File { id, conversion, .. }) = lookup(want, key) {
                    let size = blob_size(repos, id, path)?;
                    ops.push(Op::Chmod {
                        path: rel(path)?,
                        executable: *executable,
                        blob: *id,
                        size,
                        conversion: conversion.clone(),
                    });
                }
            }
            Drift::TypeChanged { path, .. } => {
                remove_found(&mut ops, key);
                if let Some(w) = lookup(want, key) {
                    create(&mut ops, rel(path)?, w, &mut buf)?;
                }
            }
            Drift::Extra { .. } if delete_extra => remove_found(&mut ops, key),
            // A temporary of a run that was killed (the planner refuses tree entries with this
            // prefix): always ours to remove.
            Drift::Extra { path, dir: false }
                if path
                    .rsplit(|b| *b == b'/')
                    .next()
                    .is_some_and(|n| n.starts_with(crate::path::TMP_PREFIX.as_bytes())) =>
            {
                remove_found(&mut ops, key)
            }
            Drift::Extra { .. } => {}
        }
    }
    Ok(Plan::from_ops(Some(report.tree), report.tree, ops))
}
