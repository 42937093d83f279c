//! What a submodule commit expands to when its gitlinks are filled, measured before it is
//! planned: a repository whose commits hold gitlinks to earlier commits of itself (a submodule
//! bomb) doubles or worse at every level, so the entries of each commit (and of each tree) are
//! counted once and the sums reused, and a bomb is refused after reading its few distinct
//! objects, as a plain tree bomb is ([`super::Error::TooLarge`]).
//!
//! Trees and commits are content-addressed: a tree expands to the same entries wherever it
//! is, and a commit to the same entries whichever repository holds it, so one table serves
//! the whole plan, submodules included.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use gix_hash::ObjectId;
use gix_object::{FindExt, FindObjectOrHeader};

use super::Error;
use super::gitlinks::Gitlinks;
use crate::path::{NameKind, RelPath};

/// Entries each tree and each submodule commit expands to (saturating at `u64::MAX`), shared
/// by the planners of one plan.
#[derive(Default, Clone)]
pub(crate) struct Expansions(Rc<RefCell<Tables>>);

#[derive(Default)]
struct Tables {
    trees: HashMap<ObjectId, u64>,
    commits: HashMap<ObjectId, u64>,
}

impl Expansions {
    /// The entries the tree of submodule commit `commit` at `path` expands to, its own gitlinks
    /// filled (through `gitlinks`). Each distinct commit and tree is read once, so the count
    /// is exact however large (saturating), and the caller compares it with the limit.
    pub(crate) fn commit(&self, gitlinks: &dyn Gitlinks, path: &RelPath, commit: ObjectId) -> Result<u64, Error> {
        if let Some(n) = self.0.borrow().commits.get(&commit) {
            return Ok(*n);
        }
        let mut total = 0;
        gitlinks.enter(path, None, Some(commit), &mut |odb, _, tree, nested| {
            if let Some(tree) = tree {
                total = self.tree(odb, nested, path, tree, 0)?;
            }
            Ok(())
        })?;
        self.0.borrow_mut().commits.insert(commit, total);
        Ok(total)
    }

    /// The entries tree `tree` (at `path`, in `odb`) expands to with its gitlinks filled
    /// (`depth`: how deep `path` is).
    pub(crate) fn tree(
        &self,
        odb: &dyn FindObjectOrHeader,
        gitlinks: &dyn Gitlinks,
        path: &RelPath,
        tree: ObjectId,
        depth: usize,
    ) -> Result<u64, Error> {
        if let Some(n) = self.0.borrow().trees.get(&tree) {
            return Ok(*n);
        }
        if depth > super::MAX_TREE_DEPTH {
            return Err(super::too_deep(path.as_bytes()));
        }
        let mut buf = Vec::new();
        let entries: Vec<(gix_object::tree::EntryKind, ObjectId, Vec<u8>)> = odb
            .find_tree_iter(&tree, &mut buf)
            .map_err(|e| object_error(tree, e))?
            .map(|e| e.map(|e| (e.mode.kind(), e.oid.to_owned(), e.filename.to_vec())))
            .collect::<Result<_, _>>()
            .map_err(|e| object_error(tree, e))?;
        let mut total: u64 = 0;
        for (kind, oid, name) in entries {
            total = total.saturating_add(1);
            let child = || path.join(name.as_slice().into(), NameKind::Other).map_err(Error::Unsafe);
            let more = match kind {
                gix_object::tree::EntryKind::Tree => self.tree(odb, gitlinks, &child()?, oid, depth + 1)?,
                gix_object::tree::EntryKind::Commit => self.commit(gitlinks, &child()?, oid)?,
                _ => 0,
            };
            total = total.saturating_add(more);
        }
        self.0.borrow_mut().trees.insert(tree, total);
        Ok(total)
    }
}

fn object_error(id: ObjectId, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Object(crate::source::Error::Object {
        what: "tree",
        id,
        at: String::new(),
        source: crate::source::Cause::gix(e),
    })
}
