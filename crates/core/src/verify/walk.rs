//! The walk over the recorded tree: every path as a sync writes it, with its conversion.

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::{FindExt, FindObjectOrHeader, tree::EntryKind};

use super::{Against, Error, Want};
use crate::convert::Converter;
use crate::path::RelPath;
use crate::plan::Gitlinks;
use crate::source::{self, Repo};
use crate::submodule::Submodules;

/// What [`walk_tree`] found: every path of the tree as a checkout makes it, and the
/// repositories its blobs are in (the repository, then the submodules entered).
pub(super) struct Walked {
    pub(super) want: Vec<(Vec<u8>, Want)>,
    pub(super) repos: Vec<Repo>,
}

/// Every path of `against.tree` as a checkout would make it (directories only where they hold
/// something; with [`Against::recurse_submodules`], gitlinks filled with their submodules'
/// trees), each file with its conversion under `converter` (the `.gitattributes` files of its
/// own repository's tree), sorted by path bytes. Names are not validated again: verify never
/// writes, and repair validates the paths it writes.
pub(super) fn walk_tree(
    repo: &Repo,
    against: &Against,
    converter: Option<&Converter>,
    limits: crate::plan::Limits,
) -> Result<Walked, Error> {
    let mut out = Vec::new();
    let mut walk = Walk { limits, settings: converter.map(Converter::settings), out: &mut out, ignored: Vec::new() };
    let repos = if against.recurse_submodules {
        let submodules = Submodules::new(repo, &[against.commit], against.path.as_deref());
        repo.with_objects(|odb| walk.tree(odb, against.tree, &[], Some(&submodules)))?;
        submodules.repos()
    } else {
        repo.with_objects(|odb| walk.tree(odb, against.tree, &[], None))?;
        vec![repo.clone()]
    };
    let ignored = std::mem::take(&mut walk.ignored);
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let out = selected(out, against.select.as_ref(), ignored);
    Ok(Walked { want: out, repos })
}

/// What a sync with `select` and `--export` (`ignored`: the `export-ignore` paths) writes of
/// `out` (sorted by path): the selected files and symlinks outside ignored directories, and
/// the directories holding them — with `--export` alone, every directory not ignored (as
/// `git archive` makes them).
pub(super) fn selected(
    out: Vec<(Vec<u8>, Want)>,
    select: Option<&crate::select::Select>,
    ignored: Vec<Vec<u8>>,
) -> Vec<(Vec<u8>, Want)> {
    let select = select.filter(|s| !s.is_all());
    if select.is_none() && ignored.is_empty() {
        return out;
    }
    let ignored: std::collections::HashSet<Vec<u8>> = ignored.into_iter().collect();
    let is_ignored = |p: &[u8]| {
        let mut p = p;
        loop {
            if ignored.contains(p) {
                return true;
            }
            match p.iter().rposition(|b| *b == b'/') {
                Some(i) => p = &p[..i],
                None => return false,
            }
        }
    };
    let keeps = |p: &[u8]| !is_ignored(p) && select.is_none_or(|s| s.includes(p.as_bstr(), false));
    let mut needed: std::collections::HashSet<Vec<u8>> = Default::default();
    if select.is_some() {
        for (p, w) in &out {
            if !matches!(w, Want::Dir) && keeps(p) {
                let mut p = p.as_slice();
                while let Some(i) = p.iter().rposition(|b| *b == b'/') {
                    p = &p[..i];
                    if !needed.insert(p.to_vec()) {
                        break;
                    }
                }
            }
        }
    }
    out.into_iter()
        .filter(|(p, w)| match w {
            Want::Dir if select.is_some() => needed.contains(p),
            Want::Dir => !is_ignored(p),
            _ => keeps(p),
        })
        .collect()
}

/// One walk over a tree and the submodule trees it enters.
pub(super) struct Walk<'a> {
    pub(super) limits: crate::plan::Limits,
    /// The conversion settings, `None`: files are written as blobs are.
    pub(super) settings: Option<&'a crate::convert::Settings>,
    pub(super) out: &'a mut Vec<(Vec<u8>, Want)>,
    /// Paths `export-ignore` leaves out (with `--export`).
    pub(super) ignored: Vec<Vec<u8>>,
}

impl Walk<'_> {
    /// Add the paths of `tree` (of the repository `odb` reads), which is at `prefix` in the
    /// target; gitlinks are entered through `gitlinks` when there are.
    ///
    /// No recursion within a tree and one path buffer: a chain of trees costs one small frame
    /// per level, and is refused below [`crate::plan::MAX_TREE_DEPTH`] before anything deeper
    /// is read; a tree that expands to more than `limits.max_entries` paths (a tree bomb) is
    /// refused as soon as the walk gets there. Submodules nest through [`Gitlinks::enter`],
    /// which bounds their depth.
    ///
    /// (About 120 lines: the frame stack, the one path buffer and the closure that reads a tree
    /// share the walk's locals; cut apart, they would travel as one more struct.)
    fn tree(
        &mut self,
        odb: &dyn FindObjectOrHeader,
        tree: ObjectId,
        prefix: &[u8],
        gitlinks: Option<&dyn Gitlinks>,
    ) -> Result<(), Error> {
        struct Frame {
            subtrees: Vec<(ObjectId, gix::bstr::BString)>,
            next: usize,
            /// Something below it will exist, so its directory does.
            any: bool,
            /// The length of `path` to return to when leaving it.
            path_before: usize,
        }
        let limits = self.limits;
        let max_depth = crate::plan::MAX_TREE_DEPTH;
        let mut path: Vec<u8> = prefix.to_vec();
        let mut buf = Vec::new();
        // This repository's `.gitattributes` files (paths in its tree), and its files (by
        // position in `out`) whose conversions they decide.
        let mut attributes: crate::convert::AttributeFiles = Vec::new();
        let mut files: Vec<usize> = Vec::new();
        let mut dirs: Vec<usize> = Vec::new();
        let mut gitlinks_found: Vec<(Vec<u8>, ObjectId)> = Vec::new();
        let key = |path: &[u8], name: &[u8]| {
            let mut key = Vec::with_capacity(path.len() + 1 + name.len());
            key.extend_from_slice(path);
            if !path.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(name);
            key
        };
        // Where a tree is, for messages: nothing for the root tree (not " (at )").
        let at = |path: &[u8]| {
            if path.is_empty() { String::new() } else { format!(" (at {})", crate::path::quote(path)) }
        };
        // A tree bomb is refused after reading its few trees, before it is expanded below.
        let room = limits.max_entries.saturating_sub(self.out.len() as u64);
        crate::plan::check_tree_size(
            odb,
            tree,
            crate::plan::Limits { max_bytes: u64::MAX, max_entries: room, ..Default::default() },
        )?;
        let in_repo =
            |p: &[u8]| -> Vec<u8> { if prefix.is_empty() { p.to_vec() } else { p[prefix.len() + 1..].to_vec() } };
        let out = &mut *self.out;
        let mut read = |id: ObjectId, path: &[u8], path_before: usize, out: &mut Vec<(Vec<u8>, Want)>| {
            let tree = odb.find_tree_iter(&id, &mut buf).map_err(|e| source::Error::Object {
                what: "tree",
                id,
                at: at(path),
                source: source::Cause::gix(e),
            })?;
            let mut frame = Frame { subtrees: Vec::new(), next: 0, any: false, path_before };
            for e in tree {
                let e = e.map_err(|e| source::Error::Object {
                    what: "tree",
                    id,
                    at: at(path),
                    source: source::Cause::gix(e),
                })?;
                let (kind, oid) = (e.mode.kind(), e.oid.to_owned());
                let want = match kind {
                    EntryKind::Tree => {
                        frame.subtrees.push((oid, e.filename.to_owned()));
                        continue;
                    }
                    EntryKind::Blob | EntryKind::BlobExecutable => {
                        if e.filename == ".gitattributes" {
                            attributes.push((in_repo(&key(path, e.filename)).into(), oid));
                        }
                        files.push(out.len());
                        Want::File { id: oid, executable: kind == EntryKind::BlobExecutable, conversion: None }
                    }
                    EntryKind::Link => Want::Link { id: oid },
                    EntryKind::Commit => {
                        gitlinks_found.push((key(path, e.filename), oid));
                        Want::Gitlink { id: oid }
                    }
                };
                out.push((key(path, e.filename), want));
                frame.any = true;
            }
            if out.len() as u64 > limits.max_entries {
                return Err(Error::Plan(crate::plan::Error::TooLarge {
                    limit: crate::plan::Limit::Entries,
                    max: limits.max_entries,
                    planned: out.len() as u64,
                }));
            }
            Ok::<_, Error>(frame)
        };
        let mut stack = vec![read(tree, &path, prefix.len(), out)?];
        while let Some(top) = stack.last_mut() {
            if let Some((child, name)) = top.subtrees.get(top.next) {
                top.next += 1;
                let child = *child;
                let before = path.len();
                path = key(&path, name);
                if stack.len() > max_depth {
                    return Err(Error::Plan(crate::plan::too_deep(&path)));
                }
                let frame = read(child, &path, before, out)?;
                stack.push(frame);
            } else {
                let done = stack.pop().expect("non-empty");
                if done.any && !stack.is_empty() {
                    dirs.push(out.len());
                    out.push((path.clone(), Want::Dir));
                    if let Some(parent) = stack.last_mut() {
                        parent.any = true;
                    }
                }
                path.truncate(done.path_before);
            }
        }
        self.convert(odb, prefix, attributes, &files, &dirs)?;
        if let Some(gitlinks) = gitlinks {
            self.enter(gitlinks, gitlinks_found)?;
        }
        Ok(())
    }

    /// Conversions: by this repository's own `.gitattributes` files (`attributes`), as a
    /// checkout of it, for its `files` (and, with `--export`, what `export-ignore` leaves out
    /// of them and of its `dirs`); positions in `out`, paths below `prefix`.
    fn convert(
        &mut self,
        odb: &dyn FindObjectOrHeader,
        prefix: &[u8],
        attributes: crate::convert::AttributeFiles,
        files: &[usize],
        dirs: &[usize],
    ) -> Result<(), Error> {
        let in_repo =
            |p: &[u8]| -> Vec<u8> { if prefix.is_empty() { p.to_vec() } else { p[prefix.len() + 1..].to_vec() } };
        let out = &mut *self.out;
        let Some(settings) = self.settings else { return Ok(()) };
        {
            let mut resolver = crate::convert::Resolver::new(settings, attributes)?;
            let find: &dyn gix_object::Find = odb;
            for &i in files {
                let at = in_repo(&out[i].0);
                let (conversion, ignored) = resolver.at(at.as_bstr(), find)?;
                if ignored {
                    self.ignored.push(out[i].0.clone());
                }
                if let Want::File { conversion: c, .. } = &mut out[i].1 {
                    *c = conversion;
                }
            }
            if settings.export {
                for &i in dirs {
                    let at = in_repo(&out[i].0);
                    if resolver.export_ignored(at.as_bstr(), true, find)? {
                        self.ignored.push(out[i].0.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// Submodules: each gitlink (`found`: where, which commit) holds its recorded commit's
    /// tree, read from its repository.
    fn enter(&mut self, gitlinks: &dyn Gitlinks, found: Vec<(Vec<u8>, ObjectId)>) -> Result<(), Error> {
        {
            for (at, commit) in found {
                let rel = RelPath::parse_bytes(&at).map_err(crate::plan::Error::from)?;
                let mut failed = None;
                gitlinks.enter(&rel, None, Some(commit), &mut |odb, _, tree, nested| {
                    let Some(tree) = tree else { return Ok(()) };
                    if let Err(e) = self.tree(odb, tree, &at, Some(nested)) {
                        failed = Some(e);
                    }
                    Ok(())
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}
