use std::collections::{BTreeMap, HashMap};

use gix::bstr::BStr;
use gix_hash::ObjectId;
use gix_object::{FindExt, FindObjectOrHeader, tree::EntryKind};

use super::Error;
use crate::op::{Op, Plan};
use crate::path::{NameKind, RelPath};

/// The deepest tree accepted: git's default `core.maxTreeDepth`.
pub const MAX_TREE_DEPTH: usize = 4096;

/// The longest path accepted, in bytes (Linux's `PATH_MAX` less the terminating NUL).
pub const MAX_PATH_BYTES: usize = 4095;

/// Run `f` on a thread with a stack large enough for the deepest tree we accept, whatever
/// thread (an async runtime's worker has 2 MiB) the caller is on.
pub(crate) fn with_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("treesync-tree-walk".into())
            .stack_size(32 << 20)
            .spawn_scoped(s, f)
            .expect("a thread can be started")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// How to plan: what the target needs beyond git's rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// The target does not tell names apart by case: refuse ([`Error::CaseCollision`]) when two
    /// entries of a directory whose entries the plan changes differ only by case (one would
    /// overwrite the other). Costs nothing more than the diff: those directories are read anyway.
    pub case_insensitive: bool,
}

/// Plan the ops that turn a target holding tree `from` (`None`: an empty target) into one
/// holding tree `to`. Reads only the trees and symlink blobs on changed paths.
///
/// The walk recurses once per tree level: for trees near [`MAX_TREE_DEPTH`] run it on a thread
/// with a large stack (as `sync` does).
pub fn plan(odb: &dyn FindObjectOrHeader, from: Option<ObjectId>, to: ObjectId) -> Result<Plan, Error> {
    plan_with(odb, from, to, Options::default())
}

/// [`plan`] for a target with the needs `options` names.
pub fn plan_with(
    odb: &dyn FindObjectOrHeader,
    from: Option<ObjectId>,
    to: ObjectId,
    options: Options,
) -> Result<Plan, Error> {
    let mut p = Planner::new(odb, options);
    p.diff_tree_contents(&RelPath::root(), from, Some(to))?;
    Ok(p.finish(from, to))
}

/// What a target that treesync does not manage yet holds at one path (for `--force`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExistingKind {
    /// A directory.
    Dir,
    /// A file, symlink or anything else that is not a directory.
    NonDir,
}

/// One entry found by scanning an unmanaged target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingEntry {
    /// Where.
    pub path: RelPath,
    /// What.
    pub kind: ExistingKind,
}

/// Plan the takeover of a target that holds `existing` entries (a full scan of it, parents
/// before children) but no state: remove everything the tree `to` does not have (or has with
/// another type), then write the whole tree.
pub fn plan_takeover(
    odb: &dyn FindObjectOrHeader,
    existing: &[ExistingEntry],
    to: ObjectId,
    options: Options,
) -> Result<Plan, Error> {
    let mut p = Planner::new(odb, options);
    p.diff_tree_contents(&RelPath::root(), None, Some(to))?;
    let mut wanted: HashMap<RelPath, ExistingKind> = HashMap::new();
    for op in p.ops_so_far() {
        match op {
            Op::Mkdir { path } => {
                wanted.insert(path.clone(), ExistingKind::Dir);
            }
            Op::Write { path, .. } | Op::Symlink { path, .. } => {
                wanted.insert(path.clone(), ExistingKind::NonDir);
            }
            _ => {}
        }
    }
    for e in existing {
        let keep = wanted.get(&e.path) == Some(&e.kind);
        // A directory that goes away takes its content with it; the scan lists that content
        // too, and it is removed because its own path is not wanted either.
        if !keep {
            match e.kind {
                ExistingKind::Dir => p.rmdir(&e.path),
                ExistingKind::NonDir => p.unlink(&e.path),
            }
        }
    }
    Ok(p.finish(None, to))
}

/// A tree's entries, sorted by name, the names borrowed from the tree's buffer.
type Entries<'b> = Vec<(&'b BStr, Node)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    File { id: ObjectId, executable: bool },
    Link { id: ObjectId },
    Tree { id: ObjectId },
    Gitlink,
}

struct Planner<'a> {
    odb: &'a dyn FindObjectOrHeader,
    options: Options,
    buf: Vec<u8>,
    /// Whether a tree holds anything git would write (a tree of only empty trees makes no
    /// directory in a checkout).
    has_content: HashMap<ObjectId, bool>,
    unlinks: Vec<Op>,
    rmdirs: BTreeMap<usize, Vec<Op>>,
    mkdirs: BTreeMap<usize, Vec<Op>>,
    writes: Vec<Op>,
    symlinks: Vec<Op>,
}

impl<'a> Planner<'a> {
    fn new(odb: &'a dyn FindObjectOrHeader, options: Options) -> Self {
        Planner {
            odb,
            options,
            buf: Vec::new(),
            has_content: HashMap::new(),
            unlinks: Vec::new(),
            rmdirs: BTreeMap::new(),
            mkdirs: BTreeMap::new(),
            writes: Vec::new(),
            symlinks: Vec::new(),
        }
    }

    fn ops_so_far(&self) -> impl Iterator<Item = &Op> {
        self.unlinks
            .iter()
            .chain(self.rmdirs.values().flatten())
            .chain(self.mkdirs.values().flatten())
            .chain(self.writes.iter())
            .chain(self.symlinks.iter())
    }

    fn finish(self, from: Option<ObjectId>, to: ObjectId) -> Plan {
        let ops = self
            .unlinks
            .into_iter()
            .chain(self.rmdirs.into_values().flatten())
            .chain(self.mkdirs.into_values().flatten())
            .chain(self.writes)
            .chain(self.symlinks);
        Plan::from_ops(from, to, ops)
    }

    fn unlink(&mut self, path: &RelPath) {
        self.unlinks.push(Op::Unlink { path: path.clone() });
    }

    fn rmdir(&mut self, path: &RelPath) {
        self.rmdirs.entry(path.depth()).or_default().push(Op::Rmdir { path: path.clone() });
    }

    fn mkdir(&mut self, path: &RelPath) {
        self.mkdirs.entry(path.depth()).or_default().push(Op::Mkdir { path: path.clone() });
    }

    fn object_error(what: &'static str, id: ObjectId, path: &RelPath, e: impl std::fmt::Display) -> Error {
        Error::Object(crate::source::Error::Object {
            what,
            id,
            at: if path.is_root() { String::new() } else { format!(" (at {path})") },
            message: e.to_string(),
        })
    }

    /// The entries of a tree, sorted by name; the names point into `buf`, which holds the tree
    /// (one per tree level being diffed: a directory of N entries costs its raw tree plus
    /// N small entries, no allocation per name).
    fn entries<'b>(&self, id: ObjectId, path: &RelPath, buf: &'b mut Vec<u8>) -> Result<Entries<'b>, Error> {
        let tree = self.odb.find_tree_iter(&id, buf).map_err(|e| Self::object_error("tree", id, path, e))?;
        let mut out = Vec::new();
        for e in tree {
            let e = e.map_err(|e| Self::object_error("tree", id, path, e))?;
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
                            path: format!("{path}/{}", e.filename),
                            mode: u32::from(e.mode.value()),
                        });
                    }
                    Node::Gitlink
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

    /// Would a checkout of this tree create anything (and so the directory holding it)?
    fn tree_has_content(&mut self, id: ObjectId, path: &RelPath) -> Result<bool, Error> {
        if let Some(v) = self.has_content.get(&id) {
            return Ok(*v);
        }
        let mut buf = Vec::new();
        let entries = self.entries(id, path, &mut buf)?;
        self.has_content_of(id, &entries, path)
    }

    /// [`Self::tree_has_content`] of a tree whose entries were read already.
    fn has_content_of(&mut self, id: ObjectId, entries: &[(&BStr, Node)], path: &RelPath) -> Result<bool, Error> {
        if let Some(v) = self.has_content.get(&id) {
            return Ok(*v);
        }
        let v = self.entries_have_content(entries, path)?;
        self.has_content.insert(id, v);
        Ok(v)
    }

    fn entries_have_content(&mut self, entries: &[(&BStr, Node)], path: &RelPath) -> Result<bool, Error> {
        if entries.iter().any(|(_, n)| !matches!(n, Node::Tree { .. })) {
            return Ok(true);
        }
        for (name, n) in entries {
            if let Node::Tree { id } = n {
                let child = path.join(name, NameKind::Other)?;
                if self.tree_has_content(*id, &child)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Diff the contents of two trees at `dir` (which exists, or is planned to).
    fn diff_tree_contents(&mut self, dir: &RelPath, old: Option<ObjectId>, new: Option<ObjectId>) -> Result<(), Error> {
        if old == new {
            return Ok(());
        }
        let (mut old_buf, mut new_buf) = (Vec::new(), Vec::new());
        let old = match old {
            Some(id) => self.entries(id, dir, &mut old_buf)?,
            None => Vec::new(),
        };
        let new = match new {
            Some(id) => self.entries(id, dir, &mut new_buf)?,
            None => Vec::new(),
        };
        self.diff_entries(dir, &old, &new)
    }

    /// Diff the entries of two trees at `dir` (which exists, or is planned to), merge-joined by name.
    fn diff_entries(&mut self, dir: &RelPath, old: &[(&BStr, Node)], new: &[(&BStr, Node)]) -> Result<(), Error> {
        let mut changed = false;
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
            if o == n {
                continue;
            }
            changed |= n.is_some();
            let kind = if matches!(n, Some(Node::Link { .. })) { NameKind::Symlink } else { NameKind::Other };
            let path = dir.join(name, kind)?;
            if n.is_some() {
                let reason = if path.depth() > MAX_TREE_DEPTH {
                    Some(format!(
                        "the tree is deeper than {MAX_TREE_DEPTH} levels (git's core.maxTreeDepth refuses it too)"
                    ))
                } else if path.as_bytes().len() > MAX_PATH_BYTES {
                    Some(format!("the path is longer than PATH_MAX ({} bytes)", MAX_PATH_BYTES + 1))
                } else {
                    None
                };
                if let Some(reason) = reason {
                    let shown: String = path.display().chars().take(120).collect();
                    return Err(Error::Unsafe(crate::path::UnsafeName { path: format!("{shown}…"), reason }));
                }
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
                let had = self.has_content_of(a, &old, path)?;
                let has = self.has_content_of(b, &new, path)?;
                return match (had, has) {
                    (true, true) => self.diff_entries(path, &old, &new),
                    (true, false) => {
                        self.diff_entries(path, &old, &[])?;
                        self.rmdir(path);
                        Ok(())
                    }
                    (false, true) => {
                        self.mkdir(path);
                        self.diff_entries(path, &[], &new)
                    }
                    (false, false) => Ok(()),
                };
            }
            (Some(Tree { id }), _) => self.remove_tree(path, id)?,
            (Some(Gitlink), Some(Gitlink)) => return Ok(()),
            (Some(Gitlink), _) => self.rmdir(path),
            (Some(File { .. } | Link { .. }), Some(Tree { .. } | Gitlink) | None) => self.unlink(path),
            (Some(File { .. } | Link { .. }), Some(File { .. } | Link { .. })) | (None, _) => {}
        }
        // Then create the new one.
        match new {
            None => {}
            Some(Tree { id }) => self.add_tree(path, id)?,
            Some(Gitlink) => self.mkdir(path),
            Some(File { id, executable }) => match old {
                Some(File { id: old_id, executable: was }) if old_id == id => {
                    if was != executable {
                        let size = self.blob_size(path, id)?;
                        self.writes.push(Op::Chmod { path: path.clone(), executable, blob: id, size });
                    }
                }
                _ => self.write(path, id, executable)?,
            },
            Some(Link { id }) => self.symlink(path, id)?,
        }
        Ok(())
    }

    fn write(&mut self, path: &RelPath, blob: ObjectId, executable: bool) -> Result<(), Error> {
        let size = self.blob_size(path, blob)?;
        self.writes.push(Op::Write { path: path.clone(), blob, size, executable });
        Ok(())
    }

    fn blob_size(&mut self, path: &RelPath, blob: ObjectId) -> Result<u64, Error> {
        Ok(if blob.is_empty_blob() {
            0
        } else {
            // Only the header: the content is read once, when the executor writes the file.
            self.odb
                .try_header(&blob)
                .map_err(|e| Self::object_error("blob", blob, path, e))?
                .ok_or_else(|| Self::object_error("blob", blob, path, "object not found"))
                .and_then(|h| {
                    if h.kind == gix_object::Kind::Blob {
                        Ok(h.size)
                    } else {
                        Err(Self::object_error("blob", blob, path, format!("it is a {}, not a blob", h.kind)))
                    }
                })?
        })
    }

    fn symlink(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        let target = self.odb.find_blob(&id, &mut self.buf).map_err(|e| Self::object_error("blob", id, path, e))?;
        if target.data.is_empty() || target.data.contains(&0) {
            return Err(Error::Unsafe(crate::path::UnsafeName {
                path: path.display(),
                reason: "a symlink target must be non-empty and must not contain NUL".into(),
            }));
        }
        let target = target.data.to_vec();
        self.symlinks.push(Op::Symlink { path: path.clone(), target });
        Ok(())
    }

    /// Plan the creation of tree `id` at `path` (and its directory, if a checkout would make one).
    fn add_tree(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        let mut buf = Vec::new();
        let entries = self.entries(id, path, &mut buf)?;
        if !self.has_content_of(id, &entries, path)? {
            return Ok(());
        }
        self.mkdir(path);
        self.diff_entries(path, &[], &entries)
    }

    /// Plan the removal of tree `id` at `path`, content first.
    fn remove_tree(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        let mut buf = Vec::new();
        let entries = self.entries(id, path, &mut buf)?;
        if !self.has_content_of(id, &entries, path)? {
            return Ok(());
        }
        self.diff_entries(path, &entries, &[])?;
        self.rmdir(path);
        Ok(())
    }
}

/// On a target that does not tell case apart: two entries of `dir` that differ only by case
/// would be one file there.
fn refuse_case_collisions(dir: &RelPath, entries: &[(&BStr, Node)]) -> Result<(), Error> {
    let mut seen: HashMap<Vec<u8>, &BStr> = HashMap::with_capacity(entries.len());
    for (name, _) in entries {
        if let Some(other) = seen.insert(crate::path::fold_case(name), name) {
            let at = |n: &BStr| if dir.is_root() { n.to_string() } else { format!("{dir}/{n}") };
            return Err(Error::CaseCollision { a: at(other), b: at(name) });
        }
    }
    Ok(())
}
