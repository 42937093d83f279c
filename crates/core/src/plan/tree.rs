//! Reading trees for the planner: entries, and what a subtree holds and weighs.

use gix::bstr::BStr;
use gix_hash::ObjectId;
use gix_object::{FindExt, tree::EntryKind};

use super::Error;
use super::depth::{MAX_TREE_DEPTH, too_deep};
use super::function::{Entries, Frame, Node, Planner, SHOWN_MAX, Shown, Size, at};
use crate::path::RelPath;
use crate::source::Cause;

impl<'a> Planner<'a> {
    pub(super) fn object_error(what: &'static str, id: ObjectId, at: &str, cause: Cause) -> Error {
        Error::Object(crate::source::Error::Object {
            what,
            id,
            at: if at.is_empty() { String::new() } else { format!(" (at {at})") },
            source: cause,
        })
    }

    /// The entries of a tree, sorted by name; the names point into `buf`, which holds the tree
    /// (one per tree level being diffed: a directory of N entries costs its raw tree plus
    /// N small entries, no allocation per name).
    pub(super) fn entries<'b>(&self, id: ObjectId, path: &RelPath, buf: &'b mut Vec<u8>) -> Result<Entries<'b>, Error> {
        let tree = match self.kept.borrow_mut().take(&id) {
            Some(bytes) => {
                *buf = bytes;
                gix_object::TreeRefIter::from_bytes(buf, id.kind())
            }
            None => self
                .odb
                .find_tree_iter(&id, buf)
                .map_err(|e| Self::object_error("tree", id, &at(path), Cause::gix(e)))?,
        };
        let mut out = Vec::new();
        for e in tree {
            let e = e.map_err(|e| Self::object_error("tree", id, &at(path), Cause::gix(e)))?;
            let oid = e.oid.to_owned();
            let node = match e.mode.kind() {
                EntryKind::Tree => Node::Tree { id: oid },
                EntryKind::Blob => Node::File { id: oid, executable: false },
                EntryKind::BlobExecutable => Node::File { id: oid, executable: true },
                EntryKind::Link => Node::Link { id: oid },
                EntryKind::Commit => {
                    if !e.mode.is_commit() {
                        return Err(Error::Mode {
                            tree: id,
                            path: if path.is_root() {
                                e.filename.to_string()
                            } else {
                                format!("{}/{}", path.as_bstr(), e.filename)
                            },
                            mode: u32::from(e.mode.value()),
                        });
                    }
                    Node::Gitlink { commit: oid }
                }
            };
            out.push((e.filename, node));
        }
        // In place (a stable sort would allocate half the listing again); equal names are refused.
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::Unsafe(crate::path::UnsafeName {
                path: if path.is_root() { w[0].0.to_string() } else { format!("{path}/{}", w[0].0) },
                reason: format!("tree {id} lists this name twice"),
            }));
        }
        Ok(out)
    }

    /// Read tree `id` (at `shown`) for a walk: its subtrees, and what its other entries add up
    /// to through `leaf` (called with the entry's kind, id and name).
    fn frame<T>(
        &self,
        id: ObjectId,
        shown: &Shown,
        shown_before: usize,
        mut acc: T,
        keep: bool,
        mut leaf: impl FnMut(&Self, &mut T, EntryKind, ObjectId, &BStr, &Shown) -> Result<(), Error>,
    ) -> Result<Frame<T>, Error> {
        let at = || String::from_utf8_lossy(&shown.0).into_owned();
        let mut buf = Vec::new();
        self.odb.find_tree_iter(&id, &mut buf).map_err(|e| Self::object_error("tree", id, &at(), Cause::gix(e)))?;
        if keep {
            self.kept.borrow_mut().keep(id, &buf);
        }
        let tree = gix_object::TreeRefIter::from_bytes(&buf, id.kind());
        let mut subtrees = Vec::new();
        for e in tree {
            let e = e.map_err(|e| Self::object_error("tree", id, &at(), Cause::gix(e)))?;
            match e.mode.kind() {
                EntryKind::Tree => subtrees.push((e.oid.to_owned(), e.filename.to_owned())),
                kind => leaf(self, &mut acc, kind, e.oid.to_owned(), e.filename, shown)?,
            }
        }
        Ok(Frame { id, subtrees, next: 0, acc, shown_before })
    }

    /// Would a checkout of tree `id` at `path` (`depth` levels down) create anything (and so
    /// the directory holding it)? Stops at the first entry that is not a tree; walks chains of
    /// trees without recursion, refusing them below [`MAX_TREE_DEPTH`] before reading deeper.
    pub(super) fn tree_has_content(&mut self, id: ObjectId, path: &[u8], depth: usize) -> Result<bool, Error> {
        if let Some(v) = self.has_content.get(&id) {
            return Ok(*v);
        }
        if depth > MAX_TREE_DEPTH {
            return Err(too_deep(path));
        }
        let mut shown = Shown(path[..path.len().min(SHOWN_MAX)].to_vec());
        let content = |_: &Self, found: &mut bool, _, _, _: &BStr, _: &Shown| {
            *found = true;
            Ok(())
        };
        let mut stack = vec![self.frame(id, &shown, shown.0.len(), false, true, content)?];
        loop {
            let top = stack.last_mut().expect("the walk ends when the stack is empty");
            if top.acc {
                // Content found: every tree on the way down to it has content too.
                for f in &stack {
                    self.has_content.insert(f.id, true);
                }
                return Ok(true);
            }
            if let Some((child, name)) = top.subtrees.get(top.next) {
                top.next += 1;
                match self.has_content.get(child) {
                    Some(true) => top.acc = true,
                    Some(false) => {}
                    None => {
                        let child = *child;
                        let before = shown.push(name);
                        if depth + stack.len() > MAX_TREE_DEPTH {
                            return Err(too_deep(&shown.0));
                        }
                        let frame = self.frame(child, &shown, before, false, true, content)?;
                        stack.push(frame);
                    }
                }
            } else {
                let done = stack.pop().expect("non-empty");
                self.has_content.insert(done.id, false);
                shown.truncate(done.shown_before);
                if stack.is_empty() {
                    return Ok(false);
                }
            }
        }
    }

    /// [`Self::tree_has_content`] of a tree whose entries were read already. `other`: the
    /// entries of the tree it is diffed against (empty if none), whose differing subtrees the
    /// diff reads anyway.
    pub(super) fn has_content_of(
        &mut self,
        id: ObjectId,
        entries: &[(&BStr, Node)],
        other: &[(&BStr, Node)],
        path: &RelPath,
    ) -> Result<bool, Error> {
        if let Some(v) = self.has_content.get(&id) {
            return Ok(*v);
        }
        let v = self.entries_have_content(entries, other, path)?;
        self.has_content.insert(id, v);
        Ok(v)
    }

    fn entries_have_content(
        &mut self,
        entries: &[(&BStr, Node)],
        other: &[(&BStr, Node)],
        path: &RelPath,
    ) -> Result<bool, Error> {
        if entries.iter().any(|(_, n)| !matches!(n, Node::Tree { .. })) {
            return Ok(true);
        }
        if entries.iter().any(|(_, n)| matches!(n, Node::Tree { id } if self.has_content.get(id) == Some(&true))) {
            return Ok(true);
        }
        // A directory of directories only: its subtrees that differ from the other side's are
        // looked at first, since the diff reads them next (and takes them from `kept` instead
        // of decoding them again); the others only if none of those has content.
        let differs = |name: &BStr, n: &Node| match other.binary_search_by(|(o, _)| o.cmp(&name)) {
            Ok(i) => other[i].1 != *n,
            Err(_) => true,
        };
        let (first, rest): (Vec<_>, Vec<_>) = entries.iter().partition(|(name, n)| differs(name, n));
        let mut shown = Shown::of(path);
        for &(name, n) in first.into_iter().chain(rest) {
            if let Node::Tree { id } = n {
                let before = shown.push(name);
                let has = self.tree_has_content(id, &shown.0, path.depth() + 1)?;
                shown.truncate(before);
                if has {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// What writing tree `id` at `path` takes: ops and bytes (nothing for a tree without
    /// content). Each distinct tree is read once per plan, so a tree bomb (2^N paths through N
    /// trees) is measured in N reads and refused before its ops are planned; chains of trees
    /// are walked without recursion and refused below [`MAX_TREE_DEPTH`].
    pub(super) fn subtree_size(&mut self, id: ObjectId, path: &RelPath) -> Result<Size, Error> {
        if let Some(s) = self.sizes.get(&id) {
            return Ok(*s);
        }
        let depth = path.depth();
        let leaf = |p: &Self, size: &mut Size, kind: EntryKind, oid: ObjectId, name: &BStr, shown: &Shown| {
            size.entries += 1;
            // Without a limit on bytes (verify), no header is read.
            if p.options.limits.max_bytes < u64::MAX
                && matches!(kind, EntryKind::Blob | EntryKind::BlobExecutable | EntryKind::Link)
            {
                let bytes = p.blob_size(oid).map_err(|e| Self::object_error("blob", oid, &shown.child(name), e))?;
                size.bytes = size.bytes.saturating_add(bytes);
            }
            Ok(())
        };
        let mut shown = Shown::of(path);
        let mut stack = vec![self.frame(id, &shown, shown.0.len(), Size::default(), false, leaf)?];
        loop {
            let top = stack.last_mut().expect("the walk ends when the stack is empty");
            if let Some((child, name)) = top.subtrees.get(top.next) {
                top.next += 1;
                match self.sizes.get(child) {
                    Some(s) => top.acc.add_dir(*s),
                    None => {
                        let child = *child;
                        let before = shown.push(name);
                        if depth + stack.len() > MAX_TREE_DEPTH {
                            return Err(too_deep(&shown.0));
                        }
                        let frame = self.frame(child, &shown, before, Size::default(), false, leaf)?;
                        stack.push(frame);
                    }
                }
            } else {
                let done = stack.pop().expect("non-empty");
                self.sizes.insert(done.id, done.acc);
                self.has_content.insert(done.id, done.acc.entries > 0);
                shown.truncate(done.shown_before);
                match stack.last_mut() {
                    Some(parent) => parent.acc.add_dir(done.acc),
                    None => return Ok(done.acc),
                }
            }
        }
    }

    /// What tree `id` at `path` expands to when written ([`Self::subtree_size`]); when gitlinks
    /// are filled, with what its submodules expand to, each distinct commit measured once
    /// ([`super::expand`]): a submodule bomb is refused here, before it is planned.
    pub(super) fn measured(&mut self, id: ObjectId, path: &RelPath) -> Result<Size, Error> {
        let size = self.subtree_size(id, path)?;
        let Some(recurse) = self.recurse.filter(|r| r.new) else { return Ok(size) };
        let entries = self.expansions.tree(self.odb, recurse.gitlinks, path, id, path.depth())?;
        Ok(Size { entries: entries.max(size.entries), bytes: size.bytes })
    }
}
