//! The conversions pass after the diff: each file its conversion, the selection and `--export` applied.

use std::collections::HashMap;
use std::sync::Arc;

use gix::bstr::BStr;
use gix_hash::ObjectId;
use gix_object::FindExt;

use super::Error;
use super::depth::{MAX_TREE_DEPTH, too_deep};
use super::function::{Conversions, Node, Planner, at};
use crate::convert::Conversion;
use crate::op::Op;
use crate::path::{NameKind, RelPath};
use crate::source::Cause;

impl<'a> Planner<'a> {
    /// The conversions pass, after the diff: give every file written its conversion, turn a
    /// mode change whose conversion changed into a write, and write the candidates
    /// ([`AttrsSeen::candidates`]) whose converted bytes change. With a selection
    /// ([`Checkout::select`]) or `--export`, also leave out what a side does not hold:
    /// see [`Self::shape`].
    pub(super) fn convert(&mut self) -> Result<(), Error> {
        use crate::convert::Resolver;
        let Some(conversions) = self.conversions else { return Ok(()) };
        let odb = self.odb;
        let find: &dyn gix_object::Find = odb;
        let mut new = Side {
            resolver: Some(Resolver::new(conversions.new.settings(), std::mem::take(&mut self.attrs.new_files))?),
            select: self.select.map(|s| s.new),
            ignored_dirs: HashMap::new(),
            empty: false,
        };
        let mut old = Side {
            resolver: match conversions.old {
                Some(c) => Some(Resolver::new(c.settings(), std::mem::take(&mut self.attrs.old_files))?),
                None => None,
            },
            select: self.select.map(|s| s.old),
            ignored_dirs: HashMap::new(),
            empty: !self.incremental,
        };
        let changes = Changes::of(conversions);
        // Settings that change what a conversion writes though its attributes stay the same
        // (`core.autocrlf`, drivers, the LFS mode, …): such files are compared by their bytes.
        let settings_changed = changes.settings;
        let reason_of = |before: &Option<Arc<Conversion>>, now: &Option<Arc<Conversion>>| changes.reason(before, now);
        let shaping = self.select.is_some()
            || conversions.new.settings().export
            || conversions.old.is_some_and(|c| c.settings().export);
        let mut ops = if shaping { std::mem::take(&mut self.ops).into_vec() } else { self.ops.take_writes() };
        ops.sort_by(|a, b| a.path().cmp(b.path()));
        let mut out = Vec::with_capacity(ops.len());
        for mut op in ops {
            // Not held any more where the old side had it: removed instead.
            let gone = |op: &Op, old: &mut Side<'_>| -> Result<Option<Op>, Error> {
                Ok(old.keeps(op.path(), false, find)?.then(|| Op::Unlink { path: op.path().clone() }))
            };
            match &mut op {
                Op::Write { path, conversion, .. } => {
                    if shaping && !new.keeps(path, false, find)? {
                        out.extend(gone(&op, &mut old)?);
                        continue;
                    }
                    *conversion = new.conversion(path, find)?;
                }
                Op::Chmod { path, blob, size, executable, conversion } => {
                    if shaping && !new.keeps(path, false, find)? {
                        out.extend(gone(&op, &mut old)?);
                        continue;
                    }
                    let now = new.conversion(path, find)?;
                    let kept = !shaping || old.keeps(path, false, find)?;
                    let before = if kept { old.conversion(path, find)? } else { None };
                    if now != before
                        || !kept
                        || (settings_changed
                            && now.is_some()
                            && self.output_differs(path, *blob, before.as_deref(), now.as_deref(), conversions)?)
                    {
                        let reason = Some(if kept { reason_of(&before, &now) } else { "newly selected".to_string() });
                        op = Op::Write {
                            path: path.clone(),
                            blob: *blob,
                            size: *size,
                            executable: *executable,
                            conversion: now,
                            reason,
                        };
                    } else {
                        *conversion = now;
                    }
                }
                Op::Symlink { path, .. } if !new.keeps(path, false, find)? => {
                    out.extend(gone(&op, &mut old)?);
                    continue;
                }
                // With patterns, a directory is made for what it holds (below); with
                // `--export` alone, as `git archive` makes it: unless it is `export-ignore`.
                Op::Mkdir { path } if self.select.is_some() || !new.keeps(path, true, find)? => continue,
                Op::Unlink { path } if !old.keeps(path, false, find)? => continue,
                // A directory the old side never made (nothing below it was selected).
                Op::Rmdir { path }
                    if self.select.is_some_and(|s| !s.old.may_include_below(path.as_bstr()))
                        || !old.keeps_dir(path, find)? =>
                {
                    continue;
                }
                _ => {}
            }
            out.push(op);
        }
        self.write_candidates(&mut out, (&mut old, &mut new), find, &changes, shaping)?;
        self.resubstitute(&mut out, &mut new, find)?;
        if shaping {
            self.shape(&mut out, &mut new, find)?;
        }
        for op in out {
            self.ops.push(op);
        }
        Ok(())
    }

    /// The candidates ([`AttrsSeen::candidates`]): files the diff left alone whose conversion
    /// may write other bytes now; written where it does, and, with a selection, removed or
    /// added where a side does not hold them.
    fn write_candidates(
        &mut self,
        out: &mut Vec<Op>,
        (old, new): (&mut Side<'_>, &mut Side<'_>),
        find: &dyn gix_object::Find,
        changes: &Changes,
        shaping: bool,
    ) -> Result<(), Error> {
        let Some(conversions) = self.conversions else { return Ok(()) };
        let settings_changed = changes.settings;
        let mut candidates = std::mem::take(&mut self.attrs.candidates);
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, blob, executable) in candidates {
            let (was, is) =
                if shaping { (old.keeps(&path, false, find)?, new.keeps(&path, false, find)?) } else { (true, true) };
            match (was, is, executable) {
                (false, false, _) => {}
                (true, false, _) => {
                    self.count(0)?;
                    out.push(Op::Unlink { path });
                }
                (false, true, None) => {
                    let target = self.link_target(&path, blob)?;
                    self.count(target.len() as u64)?;
                    out.push(Op::Symlink { path, target });
                }
                (true, true, None) => {}
                (was, true, Some(executable)) => {
                    let now = new.conversion(&path, find)?;
                    let before = if was { old.conversion(&path, find)? } else { None };
                    if was
                        && ((now == before && !(settings_changed && now.is_some()))
                            || !self.output_differs(&path, blob, before.as_deref(), now.as_deref(), conversions)?)
                    {
                        continue;
                    }
                    let size = self.blob_size(blob).map_err(|e| Self::object_error("blob", blob, &at(&path), e))?;
                    self.count(size)?;
                    let reason = Some(if was { changes.reason(&before, &now) } else { "newly selected".to_string() });
                    out.push(Op::Write { path, blob, size, executable, conversion: now, reason });
                }
            }
        }
        Ok(())
    }

    /// `export-subst` files expand the commit: written again when it changes.
    fn resubstitute(
        &mut self,
        out: &mut Vec<Op>,
        new: &mut Side<'_>,
        find: &dyn gix_object::Find,
    ) -> Result<(), Error> {
        if let Some(again) = self.resubst.take() {
            let written: std::collections::HashSet<RelPath> = out
                .iter()
                .filter(|op| matches!(op, Op::Write { .. } | Op::Unlink { .. }))
                .map(|op| op.path().clone())
                .collect();
            for path in again {
                let Ok(path) = RelPath::parse(path) else { continue };
                if written.contains(&path) || !new.keeps(&path, false, find)? {
                    continue;
                }
                let Some(dir) = self.tree_at(&path.parent())? else { continue };
                let mut buf = Vec::new();
                let found = self
                    .entries(dir, &path.parent(), &mut buf)?
                    .into_iter()
                    .find_map(|(n, node)| (<BStr as AsRef<[u8]>>::as_ref(n) == path.split_last().1).then_some(node));
                let Some(Node::File { id, executable }) = found else { continue };
                let conversion = new.conversion(&path, find)?;
                if !conversion.as_ref().is_some_and(|c| c.export_subst) {
                    continue;
                }
                let size = self.blob_size(id).map_err(|e| Self::object_error("blob", id, &at(&path), e))?;
                self.count(size)?;
                let reason = Some("export-subst: the commit changed".to_string());
                out.push(Op::Write { path, blob: id, size, executable, conversion, reason });
            }
        }
        Ok(())
    }

    /// With a selection or `--export`: make the directories of what is written (a directory
    /// is made only for what it holds), and remove the directories left without any selected
    /// content by what is removed.
    fn shape(&mut self, ops: &mut Vec<Op>, new: &mut Side<'_>, find: &dyn gix_object::Find) -> Result<(), Error> {
        let mut dirs: std::collections::BTreeSet<RelPath> = Default::default();
        let mut removed: std::collections::BTreeSet<RelPath> = Default::default();
        for op in ops.iter() {
            match op {
                Op::Write { path, .. } | Op::Symlink { path, .. } => {
                    let mut dir = up(path);
                    while let Some(d) = dir {
                        dir = up(&d);
                        if !dirs.insert(d) {
                            break;
                        }
                    }
                }
                Op::Unlink { path } | Op::Rmdir { path } => {
                    removed.insert(path.clone());
                }
                _ => {}
            }
        }
        for d in &dirs {
            self.count(0)?;
            ops.push(Op::Mkdir { path: d.clone() });
        }
        // Directories that hold nothing selected any more, deepest first (each checked once).
        let mut checked: HashMap<RelPath, bool> = HashMap::new();
        let mut queue: Vec<RelPath> = removed.iter().filter_map(up).collect();
        while let Some(d) = queue.pop() {
            if checked.contains_key(&d) || removed.contains(&d) || dirs.contains(&d) {
                continue;
            }
            let empty = match self.tree_at(&d)? {
                // With patterns, a directory stays for what it holds; with `--export` alone,
                // as `git archive` has it: unless it is `export-ignore`.
                Some(tree) if self.select.is_some() => !self.holds_selected(&d, tree, new, find)?,
                Some(_) => !new.keeps(&d, true, find)?,
                // Not in the new tree: the diff removes it.
                None => false,
            };
            checked.insert(d.clone(), empty);
            if empty {
                self.count(0)?;
                ops.push(Op::Rmdir { path: d.clone() });
                removed.insert(d.clone());
                if let Some(parent) = up(&d) {
                    queue.push(parent);
                }
            }
        }
        Ok(())
    }

    /// The tree of directory `dir` in the tree planned to, if it is one there.
    fn tree_at(&mut self, dir: &RelPath) -> Result<Option<ObjectId>, Error> {
        let Some(mut id) = self.to else { return Ok(None) };
        let mut at = RelPath::root();
        for name in dir.components() {
            let mut buf = Vec::new();
            let entries = self.entries(id, &at, &mut buf)?;
            match entries.iter().find(|(n, _)| <BStr as AsRef<[u8]>>::as_ref(n) == name) {
                Some((_, Node::Tree { id: child })) => id = *child,
                _ => return Ok(None),
            }
            at = at.join(name.into(), NameKind::Other)?;
        }
        Ok(Some(id))
    }

    /// Does tree `id` at `dir` hold anything the new side selects (walked as deep as needed)?
    fn holds_selected(
        &mut self,
        dir: &RelPath,
        id: ObjectId,
        new: &mut Side<'_>,
        find: &dyn gix_object::Find,
    ) -> Result<bool, Error> {
        let mut stack = vec![(dir.clone(), id)];
        while let Some((dir, id)) = stack.pop() {
            if dir.depth() > MAX_TREE_DEPTH {
                return Err(too_deep(dir.as_bytes()));
            }
            let mut buf = Vec::new();
            let entries: Vec<(gix::bstr::BString, Node)> =
                self.entries(id, &dir, &mut buf)?.into_iter().map(|(n, node)| (n.to_owned(), node)).collect();
            for (name, node) in entries {
                let kind = if matches!(node, Node::Link { .. }) { NameKind::Symlink } else { NameKind::Other };
                let path = dir.join(name.as_ref(), kind)?;
                match node {
                    Node::Tree { id } => {
                        if new.select.is_none_or(|s| s.may_include_below(path.as_bstr()))
                            && new.keeps_dir(&path, find)?
                        {
                            stack.push((path, id));
                        }
                    }
                    Node::Gitlink { .. } => {
                        if new.keeps(&path, true, find)? {
                            return Ok(true);
                        }
                    }
                    Node::File { .. } | Node::Link { .. } => {
                        if new.keeps(&path, false, find)? {
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Ok(false)
    }

    /// The target of symlink `id` at `path`, checked as the diff checks it.
    pub(super) fn link_target(&mut self, path: &RelPath, id: ObjectId) -> Result<Vec<u8>, Error> {
        let target = self
            .odb
            .find_blob(&id, &mut self.buf)
            .map_err(|e| Self::object_error("blob", id, &at(path), Cause::gix(e)))?;
        if target.data.is_empty() || target.data.contains(&0) {
            return Err(Error::Unsafe(crate::path::UnsafeName {
                path: path.display(),
                reason: "a symlink target must be non-empty and must not contain NUL".into(),
            }));
        }
        Ok(target.data.to_vec())
    }

    /// Would blob `blob` at `path` be written differently under `now` than under `before`?
    /// Filter drivers (and `export-subst`) are not run to find out: a change to or from one
    /// counts as a difference.
    fn output_differs(
        &mut self,
        path: &RelPath,
        blob: ObjectId,
        before: Option<&crate::convert::Conversion>,
        now: Option<&crate::convert::Conversion>,
        conversions: Conversions<'_>,
    ) -> Result<bool, Error> {
        let opaque = |c: Option<&crate::convert::Conversion>| c.is_some_and(|c| c.filter.is_some() || c.export_subst);
        // Written by older conversion rules: their bytes cannot be told here, so written again.
        let rules_changed = conversions.old.is_some_and(|c| c.settings().rules != conversions.new.settings().rules);
        if rules_changed || opaque(before) || opaque(now) {
            return Ok(true);
        }
        let data = self
            .odb
            .find_blob(&blob, &mut self.buf)
            .map_err(|e| Self::object_error("blob", blob, &at(path), Cause::gix(e)))?
            .data
            .to_vec();
        let render = |conv: Option<&crate::convert::Conversion>, converter: Option<&crate::convert::Converter>| match (
            conv, converter,
        ) {
            (Some(c), Some(converter)) => converter.converted(&data, path.as_bstr(), &blob, c).map_err(|e| match e {
                crate::convert::ConvertError::Convert(e) => Error::Attributes(e),
                crate::convert::ConvertError::Sink(e) => Error::Attributes(crate::convert::Error::Convert {
                    path: path.display(),
                    attributes: c.to_string(),
                    message: e.to_string(),
                }),
            }),
            _ => Ok(data.clone()),
        };
        Ok(render(before, conversions.old)? != render(now, Some(conversions.new))?)
    }

    /// An entry the same in both trees, below a change of attributes: a file is a candidate for
    /// rewriting ([`Self::convert`] decides), a directory is walked.
    pub(super) fn renormalize(&mut self, dir: &RelPath, name: &BStr, node: Option<Node>) -> Result<(), Error> {
        match node {
            Some(Node::File { id, executable }) => {
                let path = dir.join(name, NameKind::Other)?;
                self.attrs.candidates.push((path, id, Some(executable)));
            }
            Some(Node::Link { id }) => {
                let path = dir.join(name, NameKind::Symlink)?;
                self.attrs.candidates.push((path, id, None));
            }
            Some(Node::Tree { id }) => {
                let path = dir.join(name, NameKind::Other)?;
                if path.depth() > MAX_TREE_DEPTH {
                    return Err(too_deep(path.as_bytes()));
                }
                let mut buf = Vec::new();
                let entries = self.entries(id, &path, &mut buf)?;
                if self.has_content_of(id, &entries, &[], &path)? {
                    self.diff_entries(&path, &entries, &entries)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Plan the removal of tree `id` at `path`, content first.
    pub(super) fn remove_tree(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        let mut buf = Vec::new();
        let entries = self.entries(id, path, &mut buf)?;
        if !self.has_content_of(id, &entries, &[], path)? {
            return Ok(());
        }
        self.diff_entries(path, &entries, &[])?;
        self.rmdir(path)
    }
}

/// The directory holding `path`, unless that is the root.
pub(super) fn up(path: &RelPath) -> Option<RelPath> {
    (!path.is_root()).then(|| path.parent()).filter(|d| !d.is_root())
}

/// One side of a plan for the conversions pass: its attributes and what it selects.
struct Side<'s> {
    /// `None`: files as blobs are, nothing left out by attributes.
    pub(super) resolver: Option<crate::convert::Resolver>,
    pub(super) select: Option<&'s crate::select::Select>,
    /// Directories found `export-ignore` (or not).
    pub(super) ignored_dirs: HashMap<RelPath, bool>,
    /// The side holds nothing (the old side of an initial sync or a takeover).
    pub(super) empty: bool,
}

impl Side<'_> {
    pub(super) fn conversion(
        &mut self,
        path: &RelPath,
        find: &dyn gix_object::Find,
    ) -> Result<Option<std::sync::Arc<crate::convert::Conversion>>, Error> {
        Ok(match &mut self.resolver {
            Some(r) => r.at(path.as_bstr(), find)?.0,
            None => None,
        })
    }

    /// Does this side hold the entry at `path`: selected by the patterns, and neither it nor a
    /// directory above it `export-ignore`?
    pub(super) fn keeps(&mut self, path: &RelPath, is_dir: bool, find: &dyn gix_object::Find) -> Result<bool, Error> {
        if self.empty {
            return Ok(false);
        }
        if self.select.is_some_and(|s| !s.includes(path.as_bstr(), is_dir)) {
            return Ok(false);
        }
        let Some(resolver) = &mut self.resolver else { return Ok(true) };
        let mut dir = up(path);
        while let Some(d) = dir {
            let ignored = match self.ignored_dirs.get(&d) {
                Some(v) => *v,
                None => {
                    let v = resolver.export_ignored(d.as_bstr(), true, find)?;
                    self.ignored_dirs.insert(d.clone(), v);
                    v
                }
            };
            if ignored {
                return Ok(false);
            }
            dir = up(&d);
        }
        Ok(!resolver.export_ignored(path.as_bstr(), is_dir, find)?)
    }

    /// [`Self::keeps`] for a directory whose content may be selected (the patterns are
    /// checked per entry below it).
    fn keeps_dir(&mut self, path: &RelPath, find: &dyn gix_object::Find) -> Result<bool, Error> {
        let select = self.select.take();
        let r = self.keeps(path, true, find);
        self.select = select;
        r
    }
}

/// Why a file whose blob did not change is written again.
fn changed_reason(before: Option<&crate::convert::Conversion>, now: Option<&crate::convert::Conversion>) -> String {
    let show = |c: Option<&crate::convert::Conversion>| c.map_or_else(|| "none".to_string(), |c| c.to_string());
    format!("conversion changed: {} (was: {})", show(now), show(before))
}

/// What changed between the settings a target's files were written with and this sync's.
struct Changes {
    /// Anything: files with a conversion are compared by their converted bytes.
    settings: bool,
    /// The LFS mode, and the modes before and now.
    lfs: bool,
    lfs_modes: (String, crate::lfs::LfsMode),
    /// treesync's conversion rules (an upgrade).
    rules: bool,
}

impl Changes {
    fn of(conversions: Conversions<'_>) -> Changes {
        let old = conversions.old.map(|c| c.settings());
        let new = conversions.new.settings();
        Changes {
            settings: old != Some(new),
            lfs: old.map(|s| s.lfs) != Some(new.lfs),
            lfs_modes: (old.map_or_else(|| "none".to_string(), |s| s.lfs.to_string()), new.lfs),
            rules: old.is_some_and(|s| s.rules != new.rules),
        }
    }

    /// Why a file is written again whose conversion was `before` and is `now`.
    fn reason(&self, before: &Option<Arc<Conversion>>, now: &Option<Arc<Conversion>>) -> String {
        if self.rules {
            format!(
                "treesync's conversion rules changed since the target was written (an upgrade): written again once ({})",
                now.as_deref().map_or_else(|| "none".to_string(), |c| c.to_string())
            )
        } else if before != now {
            changed_reason(before.as_deref(), now.as_deref())
        } else if self.lfs && now.as_deref().is_some_and(|c| c.is_lfs()) {
            format!("LFS mode changed: {} (was: {})", self.lfs_modes.1, self.lfs_modes.0)
        } else {
            format!(
                "the repository's conversion settings changed ({})",
                now.as_deref().map_or_else(|| "none".to_string(), |c| c.to_string())
            )
        }
    }
}
