use std::collections::HashMap;

use gix::bstr::BStr;
use gix_hash::ObjectId;
use gix_object::{FindExt, FindObjectOrHeader, tree::EntryKind};

use super::Error;
use super::gitlinks::Recurse;
use crate::op::{Op, OpCounts, Phases, Plan};
use crate::path::{NameKind, RelPath};
use crate::source::Cause;

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
    /// How large a plan may get before it is refused ([`Error::TooLarge`]).
    pub limits: Limits,
}

pub use treesync_content::limits::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, Limits};

/// What a subtree expands to when it is written: ops, and bytes of content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    entries: u64,
    bytes: u64,
}

impl Size {
    /// Add a subdirectory of this size: its own mkdir and its content (nothing for a directory
    /// without content, which a checkout does not create).
    fn add_dir(&mut self, s: Size) {
        if s.entries > 0 {
            self.entries = self.entries.saturating_add(s.entries).saturating_add(1);
            self.bytes = self.bytes.saturating_add(s.bytes);
        }
    }
}

/// At most this much of a path is kept while walking a chain of trees, for messages: a chain
/// can be far longer than any path worth printing, and memory must not grow with it.
const SHOWN_MAX: usize = MAX_PATH_BYTES + 1;

/// The path of the tree a walk is in, for messages: its first [`SHOWN_MAX`] bytes.
struct Shown(Vec<u8>);

impl Shown {
    fn of(path: &RelPath) -> Self {
        Shown(path.as_bytes()[..path.as_bytes().len().min(SHOWN_MAX)].to_vec())
    }

    /// Step into `name`; the length to [`Self::truncate`] back to.
    fn push(&mut self, name: &[u8]) -> usize {
        let before = self.0.len();
        if !self.0.is_empty() {
            self.0.push(b'/');
        }
        let room = SHOWN_MAX.saturating_sub(self.0.len());
        self.0.extend_from_slice(&name[..name.len().min(room)]);
        self.0.truncate(SHOWN_MAX);
        before
    }

    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// `dir/name`, for an error about one entry of the current tree.
    fn child(&self, name: &[u8]) -> String {
        let mut s = Shown(self.0.clone());
        s.push(name);
        String::from_utf8_lossy(&s.0).into_owned()
    }
}

/// The error for a tree deeper than [`MAX_TREE_DEPTH`], naming the first components of `path`.
pub(crate) fn too_deep(path: &[u8]) -> Error {
    let path = String::from_utf8_lossy(path);
    let shown: String = path.chars().take(100).collect();
    Error::Unsafe(crate::path::UnsafeName {
        path: format!("{shown}…"),
        reason: format!("the tree is deeper than {MAX_TREE_DEPTH} levels (git's core.maxTreeDepth refuses it too)"),
    })
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

/// How the files on both sides of a plan are written: with the conversions of
/// [`crate::convert`].
#[derive(Clone, Copy)]
pub struct Conversions<'a> {
    /// What the target's files were written with; `None`: as their blobs are (written by a
    /// treesync that did not convert, or nothing written yet).
    pub old: Option<&'a crate::convert::Converter>,
    /// What to write with now.
    pub new: &'a crate::convert::Converter,
}

/// What a plan writes beyond the trees' entries, on both sides: conversions and
/// submodules. The default is neither (blobs as they are, gitlinks as empty directories).
#[derive(Clone, Copy, Default)]
pub struct Checkout<'a> {
    /// Write files as `git checkout` does ([`crate::convert`]).
    pub conversions: Option<Conversions<'a>>,
    /// Fill gitlinks with their submodules' trees.
    pub recurse: Option<Recurse<'a>>,
    /// Write only the paths these patterns select (`--include`/`--exclude`), on each side.
    pub select: Option<Selecting<'a>>,
    /// The files the target holds with `export-subst` placeholders expanded (`--export`),
    /// when the commit changes: they are written again wherever they still are `export-subst`
    /// (their bytes name the commit). Costs one lookup each, not a walk of the tree.
    pub resubst: Option<&'a [String]>,
}

/// The path selections of both sides of a plan.
#[derive(Clone, Copy)]
pub struct Selecting<'a> {
    /// What the target holds now was selected by these.
    pub old: &'a crate::select::Select,
    /// What it is to hold.
    pub new: &'a crate::select::Select,
}

/// [`plan_with`], writing what `checkout` says. With conversions, each written file gets its
/// [`Conversion`](crate::convert::Conversion), and when the attributes of a directory (or the
/// repository's settings) change between the two sides, the unchanged files below it whose
/// converted bytes change are written again (with a [`reason`](Op::Write::reason)) — the
/// files a fresh checkout would write differently. Attribute files are read only in the
/// directories the diff enters. With `recurse`, gitlinks are filled with (or emptied of)
/// their submodules' trees, each diffed in its own object database.
pub fn plan_checkout(
    odb: &dyn FindObjectOrHeader,
    from: Option<ObjectId>,
    to: ObjectId,
    options: Options,
    checkout: Checkout<'_>,
) -> Result<Plan, Error> {
    let mut p = Planner::new(odb, options);
    p.checkout(checkout, from.is_some());
    p.to = Some(to);
    p.diff_tree_contents(&RelPath::root(), from, Some(to))?;
    p.convert()?;
    Ok(p.finish(from, to))
}

/// What an initial checkout of tree `to` (files converted as `converter` says, `None`: as blobs
/// are) holds, found by planning it without holding its ops: each op is checked and counted as
/// [`plan_checkout`] would plan it, so whatever would refuse the plan (limits, unsafe names,
/// case collisions, broken trees) refuses this too, and nothing of the plan is kept but its
/// counts and the `.gitattributes` files the conversions of [`stream_checkout`] need. Only for
/// checkouts without a selection, `--export` or submodules (which need the whole plan).
pub fn measure_checkout(
    odb: &dyn FindObjectOrHeader,
    to: ObjectId,
    options: Options,
    converter: Option<&crate::convert::Converter>,
) -> Result<Measured, Error> {
    let mut p = Planner::new(odb, options);
    // With a limit on bytes, the measure of the tree reads every blob header once: not again.
    let sized = options.limits.max_bytes < u64::MAX;
    p.emit = Some(Emit { chunk: Vec::new(), size: 0, send: None, resolver: None, counts: OpCounts::default(), sized });
    if let Some(new) = converter {
        // Only to collect the `.gitattributes` files: nothing is converted here.
        p.attrs.enabled = true;
        p.conversions = Some(Conversions { old: None, new });
    }
    p.to = Some(to);
    p.diff_tree_contents(&RelPath::root(), None, Some(to))?;
    let mut counts = p.emit.take().expect("set above").counts;
    if sized {
        counts.bytes = p.sizes.get(&to).map_or(0, |s| s.bytes);
    }
    Ok(Measured { counts, attributes: std::mem::take(&mut p.attrs.new_files) })
}

/// What [`measure_checkout`] found.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The ops of the checkout, by kind, and its bytes.
    pub counts: OpCounts,
    /// Its `.gitattributes` files.
    pub attributes: crate::convert::AttributeFiles,
}

/// Plan an initial checkout of tree `to` in chunks of `chunk` ops, handing each to `send` as
/// soon as it is full (the last one may be smaller), so that memory holds one chunk, not the
/// plan. The tree is walked depth first and a directory is planned before its content, so each
/// chunk's directories are made by it or by an earlier chunk: applying the chunks in order,
/// each as [`Plan::from_ops`] orders it, writes the tree [`plan_checkout`] writes. `resolver`
/// gives each file its conversion (built from [`Measured::attributes`]); `send` returning
/// `false` stops the walk ([`Error::Stopped`]). Run [`measure_checkout`] first: this walk does
/// not check the limits, and whatever refuses a plan would refuse it only after the chunks
/// before were handed on.
pub fn stream_checkout(
    odb: &dyn FindObjectOrHeader,
    to: ObjectId,
    options: Options,
    resolver: Option<crate::convert::Resolver>,
    chunk: usize,
    send: &mut dyn FnMut(Vec<Op>) -> bool,
) -> Result<(), Error> {
    let chunk = chunk.max(1);
    // Measured by `measure_checkout` already: no blob header is read twice for the limits.
    let options =
        Options { limits: Limits { max_entries: u64::MAX, max_bytes: u64::MAX, ..options.limits }, ..options };
    let mut p = Planner::new(odb, options);
    p.emit = Some(Emit {
        chunk: Vec::with_capacity(chunk),
        size: chunk,
        send: Some(send),
        resolver,
        counts: OpCounts::default(),
        sized: false,
    });
    p.to = Some(to);
    p.diff_tree_contents(&RelPath::root(), None, Some(to))?;
    p.hand_on()
}

/// Refuse tree `tree` if writing it would exceed `limits` (`max_bytes: u64::MAX` reads no blob
/// header), without planning it: each distinct tree is read once, without recursion, and a
/// tree deeper than [`MAX_TREE_DEPTH`] is refused too. For walks that expand a whole tree
/// (verify) and must refuse a tree bomb before they expand it.
pub fn check_tree_size(odb: &dyn FindObjectOrHeader, tree: ObjectId, limits: Limits) -> Result<(), Error> {
    let mut p = Planner::new(odb, Options { limits, ..Options::default() });
    let size = p.subtree_size(tree, &RelPath::root())?;
    p.check_room(size)
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
    checkout: Checkout<'_>,
) -> Result<Plan, Error> {
    let mut p = Planner::new(odb, options);
    p.checkout(checkout, false);
    takeover(p, existing, to)
}

fn takeover(mut p: Planner<'_>, existing: &[ExistingEntry], to: ObjectId) -> Result<Plan, Error> {
    p.to = Some(to);
    p.diff_tree_contents(&RelPath::root(), None, Some(to))?;
    p.convert()?;
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
                ExistingKind::Dir => p.rmdir(&e.path)?,
                ExistingKind::NonDir => p.unlink(&e.path)?,
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
    Gitlink { commit: ObjectId },
}

struct Planner<'a> {
    odb: &'a dyn FindObjectOrHeader,
    options: Options,
    /// Gitlinks are filled with their submodules' trees ([`plan_recursive`]).
    recurse: Option<Recurse<'a>>,
    buf: Vec<u8>,
    /// Whether a tree holds anything git would write (a tree of only empty trees makes no
    /// directory in a checkout).
    has_content: HashMap<ObjectId, bool>,
    /// Trees read to learn whether they have content, kept for the diff that reads them next
    /// ([`KeptTrees`]).
    kept: std::cell::RefCell<KeptTrees>,
    /// What a tree expands to when written ([`Self::subtree_size`]).
    sizes: HashMap<ObjectId, Size>,
    /// What submodule commits expand to with their gitlinks filled, shared with the planners
    /// of submodules ([`super::expand`]).
    expansions: super::expand::Expansions,
    /// What the ops so far add up to, checked against [`Options::limits`] at every op.
    planned: Size,
    ops: Phases,
    /// Conversions: the `.gitattributes` files seen and the files to re-evaluate.
    attrs: AttrsSeen,
    /// What files are converted with ([`Checkout::conversions`]).
    conversions: Option<Conversions<'a>>,
    /// The ops of submodules, planned (and converted) by planners of their own.
    nested: Vec<Op>,
    /// Which paths each side holds ([`Checkout::select`]).
    select: Option<Selecting<'a>>,
    /// Files to expand again ([`Checkout::resubst`]), when the commit changed.
    resubst: Option<&'a [String]>,
    /// The target holds a tree already (the old side is not empty).
    incremental: bool,
    /// The tree planned to (for what a directory holds once the plan is done).
    to: Option<ObjectId>,
    /// Ops go here instead of [`Self::ops`]: counted, and handed on in chunks
    /// ([`stream_checkout`], [`measure_checkout`]).
    emit: Option<Emit<'a>>,
    /// Objects read so far by a streaming planner, to give back the pages of the mapped packs
    /// every [`RELEASE_EVERY`] reads ([`crate::source::release_mapped_packs`]): a walk that
    /// reads every blob header of a pack would otherwise keep all of it resident.
    reads: std::cell::Cell<u64>,
}

/// How many objects a streaming planner reads between two releases of the packs' pages.
const RELEASE_EVERY: u64 = 4_096;

/// Where the ops of a streaming planner go.
struct Emit<'a> {
    /// Ops planned since the last chunk was handed on.
    chunk: Vec<Op>,
    /// How many ops a chunk holds.
    size: usize,
    /// Takes each chunk; `false`: stop planning. `None`: ops are only counted.
    send: Option<&'a mut dyn FnMut(Vec<Op>) -> bool>,
    /// Gives each file written its conversion as it is planned.
    resolver: Option<crate::convert::Resolver>,
    /// The ops so far.
    counts: OpCounts,
    /// The files' sizes are known from [`Planner::subtree_size`] (which read every blob header
    /// of the tree for the limits): a file's op is counted without reading its header again,
    /// and the bytes of the whole checkout are taken from the tree's size at the end.
    sized: bool,
}

/// What the diff learned for the conversions pass ([`Planner::convert`]).
#[derive(Default)]
struct AttrsSeen {
    /// Re-evaluate unchanged files: the repository-wide settings changed (at the root), or a
    /// `.gitattributes` of a directory being diffed changed (below it).
    renormalizing: bool,
    /// The repository-wide settings changed: every file is re-evaluated (submodules too).
    settings_changed: bool,
    /// Whether the diff looks for [`Self::candidates`] at all (only with conversions).
    enabled: bool,
    /// The `.gitattributes` of the old and the new tree, in the directories the diff entered.
    old_files: crate::convert::AttributeFiles,
    new_files: crate::convert::AttributeFiles,
    /// Files and symlinks the same in both trees, below a change of attributes (or of the
    /// selection): (path, blob, `Some(executable)` for a file, `None` for a symlink).
    candidates: Vec<(RelPath, ObjectId, Option<bool>)>,
}

/// One tree on the stack of a walk over a chain of trees (the walks below the diff do not
/// recurse: a chain of 100,000 trees costs a stack of frames on the heap, bounded by
/// [`MAX_TREE_DEPTH`], and one path of at most [`SHOWN_MAX`] bytes).
struct Frame<T> {
    id: ObjectId,
    /// Its subtrees, not yet visited past `next`.
    subtrees: Vec<(ObjectId, gix::bstr::BString)>,
    next: usize,
    /// What the walk learned about it so far.
    acc: T,
    /// The length of the shown path to return to when leaving it.
    shown_before: usize,
}

impl<'a> Planner<'a> {
    fn new(odb: &'a dyn FindObjectOrHeader, options: Options) -> Self {
        Planner {
            odb,
            options,
            recurse: None,
            buf: Vec::new(),
            has_content: HashMap::new(),
            kept: Default::default(),
            sizes: HashMap::new(),
            expansions: Default::default(),
            planned: Size::default(),
            ops: Phases::default(),
            attrs: AttrsSeen::default(),
            conversions: None,
            nested: Vec::new(),
            select: None,
            resubst: None,
            incremental: false,
            to: None,
            emit: None,
            reads: std::cell::Cell::new(0),
        }
    }

    /// Plan what `checkout` says; `incremental`: the target holds a tree already.
    fn checkout(&mut self, checkout: Checkout<'a>, incremental: bool) {
        self.recurse = checkout.recurse;
        self.conversions = checkout.conversions;
        self.incremental = incremental;
        self.select = checkout.select.filter(|s| !(s.old.is_all() && s.new.is_all()));
        self.resubst = checkout.resubst.filter(|r| !r.is_empty());
        let select_changed = self.select.is_some_and(|s| s.old != s.new);
        if let Some(c) = checkout.conversions {
            self.attrs.enabled = true;
            self.attrs.settings_changed =
                incremental && (c.old.map(|c| c.settings()) != Some(c.new.settings()) || select_changed);
            self.attrs.renormalizing = self.attrs.settings_changed;
        }
    }

    fn ops_so_far(&self) -> impl Iterator<Item = &Op> {
        self.ops.iter().chain(self.nested.iter())
    }

    fn finish(mut self, from: Option<ObjectId>, to: ObjectId) -> Plan {
        for op in std::mem::take(&mut self.nested) {
            self.ops.push(op);
        }
        self.ops.into_plan(from, to)
    }

    /// Add `op` to the plan, or (streaming) count it and hand it on with its chunk.
    fn push(&mut self, mut op: Op) -> Result<(), Error> {
        let odb = self.odb;
        let Some(emit) = &mut self.emit else {
            self.ops.push(op);
            return Ok(());
        };
        if let (Some(resolver), Op::Write { path, conversion, .. }) = (&mut emit.resolver, &mut op) {
            let find: &dyn gix_object::Find = odb;
            *conversion = resolver.at(path.as_bstr(), find)?.0;
        }
        emit.counts.add(&op);
        if emit.send.is_some() {
            emit.chunk.push(op);
            if emit.chunk.len() >= emit.size {
                self.hand_on()?;
            }
        }
        Ok(())
    }

    /// Hand the ops planned since the last chunk on ([`Emit::send`]).
    fn hand_on(&mut self) -> Result<(), Error> {
        let Some(Emit { chunk, size, send: Some(send), .. }) = &mut self.emit else { return Ok(()) };
        if chunk.is_empty() {
            return Ok(());
        }
        let ops = std::mem::replace(chunk, Vec::with_capacity(*size));
        if send(ops) { Ok(()) } else { Err(Error::Stopped) }
    }

    /// Refuse if the plan so far plus `more` exceeds a limit.
    fn check_room(&self, more: Size) -> Result<(), Error> {
        let limits = self.options.limits;
        let entries = self.planned.entries.saturating_add(more.entries);
        if entries > limits.max_entries {
            return Err(Error::TooLarge { limit: super::Limit::Entries, max: limits.max_entries, planned: entries });
        }
        let bytes = self.planned.bytes.saturating_add(more.bytes);
        if bytes > limits.max_bytes {
            return Err(Error::TooLarge { limit: super::Limit::Bytes, max: limits.max_bytes, planned: bytes });
        }
        Ok(())
    }

    /// Count one op of `bytes` against the limits.
    fn count(&mut self, bytes: u64) -> Result<(), Error> {
        let one = Size { entries: 1, bytes };
        self.check_room(one)?;
        self.planned.entries += 1;
        self.planned.bytes += bytes;
        Ok(())
    }

    fn unlink(&mut self, path: &RelPath) -> Result<(), Error> {
        self.count(0)?;
        self.push(Op::Unlink { path: path.clone() })
    }

    fn rmdir(&mut self, path: &RelPath) -> Result<(), Error> {
        self.count(0)?;
        self.push(Op::Rmdir { path: path.clone() })
    }

    fn mkdir(&mut self, path: &RelPath) -> Result<(), Error> {
        self.count(0)?;
        self.push(Op::Mkdir { path: path.clone() })
    }

    fn object_error(what: &'static str, id: ObjectId, at: &str, cause: Cause) -> Error {
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
    fn entries<'b>(&self, id: ObjectId, path: &RelPath, buf: &'b mut Vec<u8>) -> Result<Entries<'b>, Error> {
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
    fn tree_has_content(&mut self, id: ObjectId, path: &[u8], depth: usize) -> Result<bool, Error> {
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
    fn has_content_of(
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
    fn subtree_size(&mut self, id: ObjectId, path: &RelPath) -> Result<Size, Error> {
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
    fn measured(&mut self, id: ObjectId, path: &RelPath) -> Result<Size, Error> {
        let size = self.subtree_size(id, path)?;
        let Some(recurse) = self.recurse.filter(|r| r.new) else { return Ok(size) };
        let entries = self.expansions.tree(self.odb, recurse.gitlinks, path, id, path.depth())?;
        Ok(Size { entries: entries.max(size.entries), bytes: size.bytes })
    }

    /// Diff the contents of two trees at `dir` (which exists, or is planned to).
    fn diff_tree_contents(&mut self, dir: &RelPath, old: Option<ObjectId>, new: Option<ObjectId>) -> Result<(), Error> {
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
    fn diff_entries(&mut self, dir: &RelPath, old: &[(&BStr, Node)], new: &[(&BStr, Node)]) -> Result<(), Error> {
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
    fn recursed(&self) -> (bool, bool) {
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

    fn write(&mut self, path: &RelPath, blob: ObjectId, executable: bool) -> Result<(), Error> {
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
    fn blob_size(&self, blob: ObjectId) -> Result<u64, Cause> {
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

    fn symlink(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
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
        let target = target.data.to_vec();
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

    /// The conversions pass, after the diff: give every file written its conversion, turn a
    /// mode change whose conversion changed into a write, and write the candidates
    /// ([`AttrsSeen::candidates`]) whose converted bytes change. With a selection
    /// ([`Checkout::select`]) or `--export`, also leave out what a side does not hold:
    /// see [`Self::shape`].
    fn convert(&mut self) -> Result<(), Error> {
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
        // Settings that change what a conversion writes though its attributes stay the same
        // (`core.autocrlf`, drivers, the LFS mode, …): such files are compared by their bytes.
        let settings_changed = conversions.old.map(|c| c.settings()) != Some(conversions.new.settings());
        let lfs_modes = (
            conversions.old.map_or_else(|| "none".to_string(), |c| c.settings().lfs.to_string()),
            conversions.new.settings().lfs,
        );
        let lfs_changed = conversions.old.map(|c| c.settings().lfs) != Some(conversions.new.settings().lfs);
        let rules_changed = conversions.old.is_some_and(|c| c.settings().rules != conversions.new.settings().rules);
        let reason_of = |before: &Option<std::sync::Arc<crate::convert::Conversion>>,
                         now: &Option<std::sync::Arc<crate::convert::Conversion>>| {
            if rules_changed {
                format!(
                    "treesync's conversion rules changed since the target was written (an upgrade): written again once ({})",
                    now.as_deref().map_or_else(|| "none".to_string(), |c| c.to_string())
                )
            } else if before != now {
                changed_reason(before.as_deref(), now.as_deref())
            } else if lfs_changed && now.as_deref().is_some_and(|c| c.is_lfs()) {
                format!("LFS mode changed: {} (was: {})", lfs_modes.1, lfs_modes.0)
            } else {
                format!(
                    "the repository's conversion settings changed ({})",
                    now.as_deref().map_or_else(|| "none".to_string(), |c| c.to_string())
                )
            }
        };
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
                    let reason = Some(if was { reason_of(&before, &now) } else { "newly selected".to_string() });
                    out.push(Op::Write { path, blob, size, executable, conversion: now, reason });
                }
            }
        }
        // `export-subst` files expand the commit: written again when it changes.
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
        if shaping {
            self.shape(&mut out, &mut new, find)?;
        }
        for op in out {
            self.ops.push(op);
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
    fn link_target(&mut self, path: &RelPath, id: ObjectId) -> Result<Vec<u8>, Error> {
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
    fn renormalize(&mut self, dir: &RelPath, name: &BStr, node: Option<Node>) -> Result<(), Error> {
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
    fn remove_tree(&mut self, path: &RelPath, id: ObjectId) -> Result<(), Error> {
        let mut buf = Vec::new();
        let entries = self.entries(id, path, &mut buf)?;
        if !self.has_content_of(id, &entries, &[], path)? {
            return Ok(());
        }
        self.diff_entries(path, &entries, &[])?;
        self.rmdir(path)
    }
}

/// Trees read by [`Planner::tree_has_content`], kept for the one read that usually follows:
/// the diff of that very tree. Taken out when read, so the cache holds only trees whose diff
/// is still to come, bounded in count and bytes (past the bound nothing more is kept and the
/// diff decodes the tree again, as it would without the cache).
#[derive(Default)]
struct KeptTrees {
    trees: HashMap<ObjectId, Vec<u8>>,
    bytes: usize,
}

impl KeptTrees {
    const MAX_TREES: usize = 256;
    const MAX_BYTES: usize = 4 << 20;

    fn keep(&mut self, id: ObjectId, bytes: &[u8]) {
        if self.trees.len() < Self::MAX_TREES
            && self.bytes + bytes.len() <= Self::MAX_BYTES
            && !self.trees.contains_key(&id)
        {
            self.bytes += bytes.len();
            self.trees.insert(id, bytes.to_vec());
        }
    }

    fn take(&mut self, id: &ObjectId) -> Option<Vec<u8>> {
        let bytes = self.trees.remove(id)?;
        self.bytes -= bytes.len();
        Some(bytes)
    }
}

/// The directory holding `path`, unless that is the root.
fn up(path: &RelPath) -> Option<RelPath> {
    (!path.is_root()).then(|| path.parent()).filter(|d| !d.is_root())
}

/// One side of a plan for the conversions pass: its attributes and what it selects.
struct Side<'s> {
    /// `None`: files as blobs are, nothing left out by attributes.
    resolver: Option<crate::convert::Resolver>,
    select: Option<&'s crate::select::Select>,
    /// Directories found `export-ignore` (or not).
    ignored_dirs: HashMap<RelPath, bool>,
    /// The side holds nothing (the old side of an initial sync or a takeover).
    empty: bool,
}

impl Side<'_> {
    fn conversion(
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
    fn keeps(&mut self, path: &RelPath, is_dir: bool, find: &dyn gix_object::Find) -> Result<bool, Error> {
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

/// `path` for an error message (empty at the root).
fn at(path: &RelPath) -> String {
    if path.is_root() { String::new() } else { path.display() }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit per `paths` list (each path a file holding its own name,
    /// `big` files 100 bytes long), made with `git fast-import`; the trees, in order.
    fn repo(commits: &[&[&str]]) -> (tempfile::TempDir, crate::Repo, Vec<ObjectId>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let git = |args: &[&str]| {
            std::process::Command::new("git").current_dir(dir.path()).args(args).output().expect("git runs")
        };
        assert!(git(&["init", "-q", "--bare", "-b", "main"]).status.success());
        let mut script = String::new();
        for (i, paths) in commits.iter().enumerate() {
            script.push_str(&format!("commit refs/heads/main\ncommitter T <t@t> {i} +0000\ndata 1\nx\n"));
            script.push_str("deleteall\n");
            for p in paths.iter() {
                let content = if p.starts_with("big") { "x".repeat(100) } else { p.to_string() };
                script.push_str(&format!("M 100644 inline {p}\ndata {}\n{content}\n", content.len()));
            }
            script.push('\n');
        }
        let mut child = std::process::Command::new("git")
            .current_dir(dir.path())
            .args(["fast-import", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("git fast-import runs");
        std::io::Write::write_all(&mut child.stdin.take().expect("piped"), script.as_bytes()).expect("script");
        assert!(child.wait().expect("fast-import ends").success());
        let repo = crate::Repo::open(dir.path()).expect("open");
        let trees =
            (0..commits.len()).map(|i| repo.resolve(&format!("main~{}", commits.len() - 1 - i)).expect("rev").tree);
        let trees = trees.collect();
        (dir, repo, trees)
    }

    fn limits(max_entries: u64, max_bytes: u64) -> Options {
        Options { limits: Limits { max_entries, max_bytes, ..Limits::default() }, ..Options::default() }
    }

    fn too_large(r: Result<Plan, Error>) -> (super::super::Limit, u64, u64) {
        match r {
            Err(Error::TooLarge { limit, max, planned }) => (limit, max, planned),
            other => panic!("expected a refusal, got {:?}", other.map(|p| p.counts)),
        }
    }

    #[test]
    fn a_new_tree_over_the_limit_is_refused_before_any_op_is_planned() {
        // 2 mkdir + 4 writes.
        let (_d, repo, trees) = repo(&[&["a/1", "a/2", "a/b/3", "top"]]);
        let ok = repo.with_objects(|odb| plan_with(odb, None, trees[0], limits(6, u64::MAX))).expect("fits");
        assert_eq!(ok.counts.total(), 6);
        let r = repo.with_objects(|odb| plan_with(odb, None, trees[0], limits(5, u64::MAX)));
        assert_eq!(too_large(r), (super::super::Limit::Entries, 5, 6), "measured before planning: all 6");
    }

    #[test]
    fn ops_of_an_incremental_diff_count_against_the_limit_as_they_are_planned() {
        let (_d, repo, trees) = repo(&[&["keep", "gone1", "gone2"], &["keep", "new1", "new2", "new3"]]);
        let from = Some(trees[0]);
        let ok = repo.with_objects(|odb| plan_with(odb, from, trees[1], limits(5, u64::MAX))).expect("fits");
        assert_eq!((ok.counts.unlink, ok.counts.write), (2, 3));
        let r = repo.with_objects(|odb| plan_with(odb, from, trees[1], limits(4, u64::MAX)));
        assert_eq!(too_large(r), (super::super::Limit::Entries, 4, 5), "refused at the op past the limit");
    }

    #[test]
    fn bytes_over_the_limit_are_refused_naming_the_limit() {
        let (_d, repo, trees) = repo(&[&["big1", "bigdir/2"]]);
        let ok = repo.with_objects(|odb| plan_with(odb, None, trees[0], limits(100, 200))).expect("fits");
        assert_eq!(ok.counts.bytes, 200);
        let r = repo.with_objects(|odb| plan_with(odb, None, trees[0], limits(100, 199)));
        assert_eq!(too_large(r), (super::super::Limit::Bytes, 199, 200));
        let e = repo.with_objects(|odb| plan_with(odb, None, trees[0], limits(100, 199))).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("more than the limit of 199 bytes (max_bytes)") && text.contains("--max-bytes"),
            "{text}"
        );
    }

    #[test]
    fn a_chain_deeper_than_the_limit_is_refused_naming_its_first_components() {
        let deep = format!("{}/leaf", vec!["d"; MAX_TREE_DEPTH + 1].join("/"));
        let (_d, repo, trees) = repo(&[&["a"], &["a", deep.as_str()]]);
        for from in [None, Some(trees[0])] {
            let e = with_big_stack(|| repo.with_objects(|odb| plan_with(odb, from, trees[1], Options::default())));
            let text = e.expect_err("refused").to_string();
            assert!(text.contains("deeper than 4096 levels") && text.contains("\"d/d/d/d/"), "{text}");
            assert!(text.len() < 400, "short: {text}");
        }
        let e = repo.with_objects(|odb| check_tree_size(odb, trees[1], Limits::default())).expect_err("refused");
        assert!(e.to_string().contains("deeper than 4096 levels"), "{e}");
    }
}
