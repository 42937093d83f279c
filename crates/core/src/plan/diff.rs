//! The diff of two trees, entry by entry, and the gitlinks on the way.

use gix::bstr::BStr;
use gix_hash::ObjectId;

use super::Error;
use super::depth::{MAX_PATH_BYTES, MAX_TREE_DEPTH, too_deep};
use super::function::{Node, Planner, RELEASE_EVERY, Size, at, refuse_case_collisions};
use super::gitlinks::Recurse;
use crate::op::Op;
use crate::path::{NameKind, RelPath};
use crate::source::Cause;

impl<'a> Planner<'a> {
    /// Diff the contents of two trees at `dir` (which exists, or is planned to).
    pub(super) fn diff_tree_contents(
        &mut self,
        dir: &RelPath,
        old: Option<ObjectId>,
        new: Option<ObjectId>,
    ) -> Result<(), Error> {
        if old == new && !self.attrs.renormalizing && !self.recurse_changes() {
            return Ok(());
        }
        let (mut old_buf, mut new_buf) = (Vec::new(), Vec::new());
        let old = match old {
            Some(id) => self.entries(id, dir, &mut old_buf)?,
            None => Vec::new(),
        };
        let new = match new {
            Some(id) => {
                if old.is_empty() {
                    // An initial checkout: measure the whole tree before planning any of it.
                    let size = self.measured(id, dir)?;
                    self.check_room(size)?;
                }
                self.entries(id, dir, &mut new_buf)?
            }
            None => Vec::new(),
        };
        self.diff_entries(dir, &old, &new)
    }

    /// Diff the entries of two trees at `dir` (which exists, or is planned to), merge-joined by name.
    pub(super) fn diff_entries(
        &mut self,
        dir: &RelPath,
        old: &[(&BStr, Node)],
        new: &[(&BStr, Node)],
    ) -> Result<(), Error> {
        let renormalizing = self.attrs.renormalizing;
        if self.attrs.enabled {
            let old_attrs = self.note_attributes(dir, old, false);
            let new_attrs = self.note_attributes(dir, new, true);
            if old_attrs != new_attrs {
                self.attrs.renormalizing = true;
            }
        }
        let r = self.diff_entries_inner(dir, old, new);
        self.attrs.renormalizing = renormalizing;
        r
    }

    /// Record the `.gitattributes` file of `dir` (of the old or the new tree); its blob.
    fn note_attributes(&mut self, dir: &RelPath, entries: &[(&BStr, Node)], new: bool) -> Option<ObjectId> {
        let i = entries
            .binary_search_by(|(name, _)| <BStr as AsRef<[u8]>>::as_ref(name).cmp(b".gitattributes".as_slice()))
            .ok()?;
        let Node::File { id, .. } = entries[i].1 else { return None };
        let path = if dir.is_root() {
            gix::bstr::BString::from(".gitattributes")
        } else {
            let mut p = dir.as_bstr().to_owned();
            p.extend_from_slice(b"/.gitattributes");
            p
        };
        if new { &mut self.attrs.new_files } else { &mut self.attrs.old_files }.push((path, id));
        Some(id)
    }

    fn diff_entries_inner(&mut self, dir: &RelPath, old: &[(&BStr, Node)], new: &[(&BStr, Node)]) -> Result<(), Error> {
        let mut changed = false;
        let depth = dir.depth() + 1;
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let ord = match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) => a.0.cmp(b.0),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, _) => std::cmp::Ordering::Greater,
            };
            let (name, o, n) = match ord {
                std::cmp::Ordering::Less => {
                    i += 1;
                    (old[i - 1].0, Some(old[i - 1].1), None)
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    (new[j - 1].0, None, Some(new[j - 1].1))
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    (new[j - 1].0, Some(old[i - 1].1), Some(new[j - 1].1))
                }
            };
            if o == n && !(self.recurse_changes() && matches!(n, Some(Node::Tree { .. } | Node::Gitlink { .. }))) {
                if self.attrs.renormalizing {
                    self.renormalize(dir, name, n)?;
                }
                continue;
            }
            changed |= n.is_some();
            let kind = if matches!(n, Some(Node::Link { .. })) { NameKind::Symlink } else { NameKind::Other };
            let path = dir.join(name, kind)?;
            // Before going any deeper, on either side: the walk below is bounded by the depth.
            if depth > MAX_TREE_DEPTH {
                return Err(too_deep(path.as_bytes()));
            }
            if n.is_some() && path.as_bytes().len() > MAX_PATH_BYTES {
                let shown: String = path.display().chars().take(120).collect();
                return Err(Error::Unsafe(crate::path::UnsafeName {
                    path: format!("{shown}…"),
                    reason: format!("the path is longer than PATH_MAX ({} bytes)", MAX_PATH_BYTES + 1),
                }));
            }
            self.diff_entry(&path, o, n)?;
        }
        if changed && self.options.case_insensitive {
            refuse_case_collisions(dir, new)?;
        }
        Ok(())
    }

    fn diff_entry(&mut self, path: &RelPath, old: Option<Node>, new: Option<Node>) -> Result<(), Error> {
        use Node::*;
        // First take away what the old entry was, where the new one cannot simply replace it.
        match (old, new) {
            (Some(Tree { id: a }), Some(Tree { id: b })) => {
                // Each tree is read once: for whether it has content and for the diff.
                let (mut old_buf, mut new_buf) = (Vec::new(), Vec::new());
                let old = self.entries(a, path, &mut old_buf)?;
                let new = self.entries(b, path, &mut new_buf)?;
                let had = self.has_content_of(a, &old, &new, path)?;
                let has = self.has_content_of(b, &new, &old, path)?;
                return match (had, has) {
                    (true, true) => self.diff_entries(path, &old, &new),
                    (true, false) => {
                        self.diff_entries(path, &old, &[])?;
                        self.rmdir(path)
                    }
                    (false, true) => {
                        let size = self.measured(b, path)?;
                        self.check_room(size)?;
                        self.mkdir(path)?;
                        self.diff_entries(path, &[], &new)
                    }
                    (false, false) => Ok(()),
                };
            }
            (Some(Tree { id }), _) => self.remove_tree(path, id)?,
            (Some(Gitlink { commit: a }), Some(Gitlink { commit: b })) => {
                let (old, new) = self.recursed();
                let old = old.then_some(a);
                let new = new.then_some(b);
                return if old == new { Ok(()) } else { self.diff_gitlink(path, old, new) };
            }
            (Some(Gitlink { commit }), _) => {
                if self.recursed().0 {
                    self.diff_gitlink(path, Some(commit), None)?;
                }
                self.rmdir(path)?
            }
            (Some(File { .. } | Link { .. }), Some(Tree { .. } | Gitlink { .. }) | None) => self.unlink(path)?,
            (Some(File { .. } | Link { .. }), Some(File { .. } | Link { .. })) | (None, _) => {}
        }
        // Then create the new one.
        match new {
            None => {}
            Some(Tree { id }) => self.add_tree(path, id)?,
            Some(Gitlink { commit }) => {
                self.mkdir(path)?;
                if self.recursed().1 {
                    self.diff_gitlink(path, None, Some(commit))?;
                }
            }
            Some(File { id, executable }) => match old {
                Some(File { id: old_id, executable: was }) if old_id == id => {
                    if was != executable {
                        let size = self.blob_size(id).map_err(|e| Self::object_error("blob", id, &at(path), e))?;
                        self.count(0)?;
                        self.push(Op::Chmod { path: path.clone(), executable, blob: id, size, conversion: None })?;
                    } else if self.attrs.renormalizing {
                        self.attrs.candidates.push((path.clone(), id, Some(executable)));
                    }
                }
                _ => self.write(path, id, executable)?,
            },
            Some(Link { id }) => self.symlink(path, id)?,
        }
        Ok(())
    }

    /// Do the two sides differ in whether gitlinks hold their submodules' trees (so that equal
    /// trees must be walked too, to find the gitlinks in them)?
    fn recurse_changes(&self) -> bool {
        self.recurse.is_some_and(|r| r.old != r.new)
    }

    /// Whether the old and the new side have gitlinks filled with their submodules' trees.
    pub(super) fn recursed(&self) -> (bool, bool) {
        self.recurse.map_or((false, false), |r| (r.old, r.new))
    }

    /// Plan the content of the gitlink at `path` (its directory exists, or is planned to):
    /// from submodule commit `old`'s tree to `new`'s, in the submodule's object database.
    fn diff_gitlink(&mut self, path: &RelPath, old: Option<ObjectId>, new: Option<ObjectId>) -> Result<(), Error> {
        let gitlinks = self.recurse.expect("only called when recursing").gitlinks;
        // A submodule filled anew is measured first, its own submodules filled, each distinct
        // commit once: a submodule bomb is refused before it is planned.
        if let (None, Some(commit)) = (old, new) {
            let entries = self.expansions.commit(gitlinks, path, commit)?;
            self.check_room(Size { entries, bytes: 0 })?;
        }
        let options = self.options;
        let conversions = self.conversions;
        let select = self.select;
        let settings_changed = self.attrs.settings_changed;
        let expansions = self.expansions.clone();
        gitlinks.enter(path, old, new, &mut |odb, old_tree, new_tree, nested| {
            // The submodule's plan goes on from this one, against the same limits; its files
            // are converted by the submodule's own `.gitattributes`.
            let mut sub = Planner::new(odb, options);
            sub.expansions = expansions.clone();
            sub.recurse = Some(Recurse { old: true, new: true, gitlinks: nested });
            sub.conversions = conversions;
            sub.select = select;
            sub.incremental = old_tree.is_some();
            sub.to = new_tree;
            sub.attrs.enabled = conversions.is_some();
            sub.attrs.settings_changed = settings_changed;
            sub.attrs.renormalizing = settings_changed;
            sub.planned = self.planned;
            sub.diff_tree_contents(path, old_tree, new_tree)?;
            sub.convert()?;
            self.planned = sub.planned;
            self.nested.extend(sub.ops.into_vec());
            self.nested.append(&mut sub.nested);
            Ok(())
        })
    }

    pub(super) fn write(&mut self, path: &RelPath, blob: ObjectId, executable: bool) -> Result<(), Error> {
        let size = if self.emit.as_ref().is_some_and(|e| e.sized) {
            // Counted already ([`Emit::sized`]).
            0
        } else {
            self.blob_size(blob).map_err(|e| Self::object_error("blob", blob, &at(path), e))?
        };
        self.count(size)?;
        self.push(Op::Write { path: path.clone(), blob, size, executable, conversion: None, reason: None })
    }

    /// The size of a blob, from its header only: the content is read once, when the executor
    /// writes the file.
    pub(super) fn blob_size(&self, blob: ObjectId) -> Result<u64, Cause> {
        if blob.is_empty_blob() {
            return Ok(0);
        }
        if self.emit.is_some() {
            let n = self.reads.get() + 1;
            self.reads.set(n);
            if n.is_multiple_of(RELEASE_EVERY) {
                crate::source::release_mapped_packs();
            }
        }
        match self.odb.try_header(&blob) {
            Err(e) => Err(Cause::gix(e)),
            Ok(None) => Err(Cause::found("object not found")),
            Ok(Some(h)) if h.kind == gix_object::Kind::Blob => Ok(h.size),
            Ok(Some(h)) => Err(Cause::found(format!("it is a {}, not a blob", h.kind))),
        }
    }

    pub(super) fn symlink(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        let target = self.link_target(path, id)?;
        self.count(target.len() as u64)?;
        self.push(Op::Symlink { path: path.clone(), target })
    }

    /// Plan the creation of tree `id` at `path` (and its directory, if a checkout would make one).
    fn add_tree(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        // Measured before anything of it is planned (each distinct tree once per plan).
        let size = self.measured(id, path)?;
        if size.entries == 0 {
            return Ok(());
        }
        self.check_room(size)?;
        let mut buf = Vec::new();
        let entries = self.entries(id, path, &mut buf)?;
        self.mkdir(path)?;
        self.diff_entries(path, &[], &entries)
    }
}
