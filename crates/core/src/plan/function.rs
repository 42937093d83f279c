use std::collections::HashMap;

use gix::bstr::BStr;
use gix_hash::ObjectId;
use gix_object::FindObjectOrHeader;

use super::Error;
use super::depth::MAX_PATH_BYTES;
use super::gitlinks::Recurse;
use super::kept::KeptTrees;
use crate::op::{Op, OpCounts, Phases, Plan};
use crate::path::RelPath;

/// The stack the deepest tree we accept needs while it is walked (the walk recurses once per
/// tree level).
pub(crate) const BIG_STACK: usize = 32 << 20;

/// Run `f` with a stack large enough for the deepest tree we accept, whatever thread (an async
/// runtime's worker has 2 MiB, the main thread 8 MiB) the caller is on: on this thread, switched
/// to a fresh stack of [`BIG_STACK`] bytes when less is left (its pages are touched only as
/// deep as the walk goes). No thread is started: a sync of ten files pays one `mmap`, not a
/// thread's start and two context switches.
pub(crate) fn with_big_stack<T>(f: impl FnOnce() -> T) -> T {
    stacker::maybe_grow(BIG_STACK, BIG_STACK, f)
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
pub(super) struct Size {
    pub(super) entries: u64,
    pub(super) bytes: u64,
}

impl Size {
    /// Add a subdirectory of this size: its own mkdir and its content (nothing for a directory
    /// without content, which a checkout does not create).
    pub(super) fn add_dir(&mut self, s: Size) {
        if s.entries > 0 {
            self.entries = self.entries.saturating_add(s.entries).saturating_add(1);
            self.bytes = self.bytes.saturating_add(s.bytes);
        }
    }
}

/// At most this much of a path is kept while walking a chain of trees, for messages: a chain
/// can be far longer than any path worth printing, and memory must not grow with it.
pub(super) const SHOWN_MAX: usize = MAX_PATH_BYTES + 1;

/// The path of the tree a walk is in, for messages: its first [`SHOWN_MAX`] bytes.
pub(super) struct Shown(pub(super) Vec<u8>);

impl Shown {
    pub(super) fn of(path: &RelPath) -> Self {
        Shown(path.as_bytes()[..path.as_bytes().len().min(SHOWN_MAX)].to_vec())
    }

    /// Step into `name`; the length to [`Self::truncate`] back to.
    pub(super) fn push(&mut self, name: &[u8]) -> usize {
        let before = self.0.len();
        if !self.0.is_empty() {
            self.0.push(b'/');
        }
        let room = SHOWN_MAX.saturating_sub(self.0.len());
        self.0.extend_from_slice(&name[..name.len().min(room)]);
        self.0.truncate(SHOWN_MAX);
        before
    }

    pub(super) fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// `dir/name`, for an error about one entry of the current tree.
    pub(super) fn child(&self, name: &[u8]) -> String {
        let mut s = Shown(self.0.clone());
        s.push(name);
        String::from_utf8_lossy(&s.0).into_owned()
    }
}

/// Plan the ops that turn a target holding tree `from` (`None`: an empty target) into one
/// holding tree `to`. Reads only the trees and symlink blobs on changed paths.
///
/// The walk recurses once per tree level: for trees near [`MAX_TREE_DEPTH`](super::MAX_TREE_DEPTH) run it on a thread
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
/// tree deeper than [`MAX_TREE_DEPTH`](super::MAX_TREE_DEPTH) is refused too. For walks that expand a whole tree
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

pub(super) fn takeover(mut p: Planner<'_>, existing: &[ExistingEntry], to: ObjectId) -> Result<Plan, Error> {
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
pub(super) type Entries<'b> = Vec<(&'b BStr, Node)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    File { id: ObjectId, executable: bool },
    Link { id: ObjectId },
    Tree { id: ObjectId },
    Gitlink { commit: ObjectId },
}

pub(super) struct Planner<'a> {
    pub(super) odb: &'a dyn FindObjectOrHeader,
    pub(super) options: Options,
    /// Gitlinks are filled with their submodules' trees ([`plan_recursive`]).
    pub(super) recurse: Option<Recurse<'a>>,
    pub(super) buf: Vec<u8>,
    /// Whether a tree holds anything git would write (a tree of only empty trees makes no
    /// directory in a checkout).
    pub(super) has_content: HashMap<ObjectId, bool>,
    /// Trees read to learn whether they have content, kept for the diff that reads them next
    /// ([`KeptTrees`]).
    pub(super) kept: std::cell::RefCell<KeptTrees>,
    /// What a tree expands to when written ([`Self::subtree_size`]).
    pub(super) sizes: HashMap<ObjectId, Size>,
    /// What submodule commits expand to with their gitlinks filled, shared with the planners
    /// of submodules ([`super::expand`]).
    pub(super) expansions: super::expand::Expansions,
    /// What the ops so far add up to, checked against [`Options::limits`] at every op.
    pub(super) planned: Size,
    pub(super) ops: Phases,
    /// Conversions: the `.gitattributes` files seen and the files to re-evaluate.
    pub(super) attrs: AttrsSeen,
    /// What files are converted with ([`Checkout::conversions`]).
    pub(super) conversions: Option<Conversions<'a>>,
    /// The ops of submodules, planned (and converted) by planners of their own.
    pub(super) nested: Vec<Op>,
    /// Which paths each side holds ([`Checkout::select`]).
    pub(super) select: Option<Selecting<'a>>,
    /// Files to expand again ([`Checkout::resubst`]), when the commit changed.
    pub(super) resubst: Option<&'a [String]>,
    /// The target holds a tree already (the old side is not empty).
    pub(super) incremental: bool,
    /// The tree planned to (for what a directory holds once the plan is done).
    pub(super) to: Option<ObjectId>,
    /// Ops go here instead of [`Self::ops`]: counted, and handed on in chunks
    /// ([`stream_checkout`], [`measure_checkout`]).
    pub(super) emit: Option<Emit<'a>>,
    /// Objects read so far by a streaming planner, to give back the pages of the mapped packs
    /// every [`RELEASE_EVERY`] reads ([`crate::source::release_mapped_packs`]): a walk that
    /// reads every blob header of a pack would otherwise keep all of it resident.
    pub(super) reads: std::cell::Cell<u64>,
}

/// How many objects a streaming planner reads between two releases of the packs' pages.
pub(super) const RELEASE_EVERY: u64 = 4_096;

/// Where the ops of a streaming planner go.
pub(super) struct Emit<'a> {
    /// Ops planned since the last chunk was handed on.
    pub(super) chunk: Vec<Op>,
    /// How many ops a chunk holds.
    pub(super) size: usize,
    /// Takes each chunk; `false`: stop planning. `None`: ops are only counted.
    pub(super) send: Option<&'a mut dyn FnMut(Vec<Op>) -> bool>,
    /// Gives each file written its conversion as it is planned.
    pub(super) resolver: Option<crate::convert::Resolver>,
    /// The ops so far.
    pub(super) counts: OpCounts,
    /// The files' sizes are known from [`Planner::subtree_size`] (which read every blob header
    /// of the tree for the limits): a file's op is counted without reading its header again,
    /// and the bytes of the whole checkout are taken from the tree's size at the end.
    pub(super) sized: bool,
}

/// What the diff learned for the conversions pass ([`Planner::convert`]).
#[derive(Default)]
pub(super) struct AttrsSeen {
    /// Re-evaluate unchanged files: the repository-wide settings changed (at the root), or a
    /// `.gitattributes` of a directory being diffed changed (below it).
    pub(super) renormalizing: bool,
    /// The repository-wide settings changed: every file is re-evaluated (submodules too).
    pub(super) settings_changed: bool,
    /// Whether the diff looks for [`Self::candidates`] at all (only with conversions).
    pub(super) enabled: bool,
    /// The `.gitattributes` of the old and the new tree, in the directories the diff entered.
    pub(super) old_files: crate::convert::AttributeFiles,
    pub(super) new_files: crate::convert::AttributeFiles,
    /// Files and symlinks the same in both trees, below a change of attributes (or of the
    /// selection): (path, blob, `Some(executable)` for a file, `None` for a symlink).
    pub(super) candidates: Vec<(RelPath, ObjectId, Option<bool>)>,
}

/// One tree on the stack of a walk over a chain of trees (the walks below the diff do not
/// recurse: a chain of 100,000 trees costs a stack of frames on the heap, bounded by
/// [`MAX_TREE_DEPTH`](super::MAX_TREE_DEPTH), and one path of at most [`SHOWN_MAX`] bytes).
pub(super) struct Frame<T> {
    pub(super) id: ObjectId,
    /// Its subtrees, not yet visited past `next`.
    pub(super) subtrees: Vec<(ObjectId, gix::bstr::BString)>,
    pub(super) next: usize,
    /// What the walk learned about it so far.
    pub(super) acc: T,
    /// The length of the shown path to return to when leaving it.
    pub(super) shown_before: usize,
}

impl<'a> Planner<'a> {
    pub(super) fn new(odb: &'a dyn FindObjectOrHeader, options: Options) -> Self {
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
    pub(super) fn checkout(&mut self, checkout: Checkout<'a>, incremental: bool) {
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

    pub(super) fn finish(mut self, from: Option<ObjectId>, to: ObjectId) -> Plan {
        for op in std::mem::take(&mut self.nested) {
            self.ops.push(op);
        }
        self.ops.into_plan(from, to)
    }

    /// Add `op` to the plan, or (streaming) count it and hand it on with its chunk.
    pub(super) fn push(&mut self, mut op: Op) -> Result<(), Error> {
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
    pub(super) fn check_room(&self, more: Size) -> Result<(), Error> {
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
    pub(super) fn count(&mut self, bytes: u64) -> Result<(), Error> {
        let one = Size { entries: 1, bytes };
        self.check_room(one)?;
        self.planned.entries += 1;
        self.planned.bytes += bytes;
        Ok(())
    }

    pub(super) fn unlink(&mut self, path: &RelPath) -> Result<(), Error> {
        self.count(0)?;
        self.push(Op::Unlink { path: path.clone() })
    }

    pub(super) fn rmdir(&mut self, path: &RelPath) -> Result<(), Error> {
        self.count(0)?;
        self.push(Op::Rmdir { path: path.clone() })
    }

    pub(super) fn mkdir(&mut self, path: &RelPath) -> Result<(), Error> {
        self.count(0)?;
        self.push(Op::Mkdir { path: path.clone() })
    }
}

/// `path` for an error message (empty at the root).
pub(super) fn at(path: &RelPath) -> String {
    if path.is_root() { String::new() } else { path.display() }
}

/// On a target that does not tell case apart: two entries of `dir` that differ only by case
/// would be one file there.
pub(super) fn refuse_case_collisions(dir: &RelPath, entries: &[(&BStr, Node)]) -> Result<(), Error> {
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
    use crate::plan::MAX_TREE_DEPTH;

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
