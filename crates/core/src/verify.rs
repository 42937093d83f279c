//! [`verify()`]: prove that a target holds exactly the tree its state records, and
//! [`repair_plan()`]: turn what differs into the minimal ops.
//!
//! Levels: [`Level::Quick`] compares existence, type, exec bit and size; [`Level::Stat`] (the
//! default) also compares each file's stat data with what the last verify recorded in a real
//! git index (`.treesync/index`) and hashes only files whose stat differs or is unknown —
//! on object stores it compares the listing's ETag with the MD5 of the blob instead;
//! [`Level::Full`] hashes every file.
//!
//! Only `verify` writes the index, so a sync stays O(changed): a sync records the stat data of
//! the files it wrote in a small delta (`.treesync/index-delta`, [`crate::index_delta`]) that
//! the next stat-level verify merges over the index (a removal drops an entry), proves files by,
//! and folds into the index it writes. Files the delta does not know (written by a backend that
//! records nothing, or too young for the racy-timestamp rule) are hashed once. The index
//! is a real one, so `GIT_INDEX_FILE=T/.treesync/index git --git-dir=R --work-tree=T status -uno`
//! gives a second opinion right after a verify.
//!
//! # What a file is compared with
//!
//! With what a sync writes ([`Against`], from the state): a file with a `.gitattributes`
//! conversion (under the state's `conversions` settings, by the `.gitattributes` files of
//! its own repository's tree) is expected to hold the converted blob — its size (also at
//! [`Level::Quick`]), its bytes ([`Level::Full`], or when its stat does not prove it), the MD5
//! of those bytes (an object store's ETag). The converted bytes are made only for files with
//! a conversion and only when the stat index does not prove them; the others keep the fast
//! path through the blob id, its header's size, the stat index and the ETag. With the state's
//! `recurse_submodules`, each gitlink is expected to hold its recorded commit's tree, read from
//! the submodule's repository (found as a sync finds it, [`Submodules`]), and repairs read
//! blobs from there ([`Report::repos`]).
//!
//! # The stat index and conversions
//!
//! The index records the BLOB id of each path (as git's index does, so `git status` with it
//! works), not the id of the converted bytes. Rule: an entry is recorded only for a file this
//! verify proved — its bytes compared with the converted blob, or its ETag with their MD5, or
//! its stat matched an entry recorded that way. So a stat match proves that the file still
//! holds bytes once proven to be the blob converted as the state says. That holds across
//! later syncs: a sync that changes a file's conversion (its attributes or the settings)
//! rewrites the file, which gives it a new stat the index does not know (it is then hashed
//! once); a sync that leaves a file alone left its converted bytes equal. The entries of a
//! sync's delta meet the same rule: that sync wrote those bytes from the blob, converted as the
//! state records, and took the stat data once they were in place. [`Level::Quick`]
//! proves nothing and records nothing.

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::{FindExt, FindObjectOrHeader, tree::EntryKind};
use serde::Serialize;

use crate::backend::{self, Backend, FileStat, FoundKind};
use crate::convert::{Conversion, Converter};
use crate::op::{Op, Plan};
use crate::path::RelPath;
use crate::plan::Gitlinks;
use crate::slice::Slice;
use crate::source::{self, Repo};
use crate::submodule::Submodules;

/// How thoroughly to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Existence, type, exec bit, size.
    Quick,
    /// Also content, hashing only files whose stat data (or ETag) does not prove it.
    #[default]
    Stat,
    /// Hash every file.
    Full,
}

/// One difference between the target and its recorded tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Drift {
    /// In the tree, not in the target.
    Missing {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
    },
    /// In the target, not in the tree.
    Extra {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
        /// `true` for a directory.
        dir: bool,
    },
    /// A file where a directory should be, and the like.
    TypeChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
        /// What the tree has.
        expected: &'static str,
        /// What the target has.
        found: &'static str,
    },
    /// The exec bit differs.
    ModeChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
        /// Whether the tree says executable.
        executable: bool,
    },
    /// The content (or size) differs.
    ContentChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
    },
    /// A symlink points elsewhere.
    LinkChanged {
        /// Where (raw bytes; `--json` writes them losslessly, see [`crate::path::json_form`]).
        #[serde(serialize_with = "crate::path::ser_json")]
        #[schemars(with = "crate::json::schema::Path")]
        path: Vec<u8>,
    },
}

impl Drift {
    /// The path (`/`-separated bytes below the target root).
    pub fn path(&self) -> &[u8] {
        match self {
            Drift::Missing { path }
            | Drift::Extra { path, .. }
            | Drift::TypeChanged { path, .. }
            | Drift::ModeChanged { path, .. }
            | Drift::ContentChanged { path }
            | Drift::LinkChanged { path } => path,
        }
    }
}

/// What a verify found and did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// The commit the state records (or, with `interrupted`, the commit the interrupted sync
    /// was going to).
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub commit: ObjectId,
    /// The target's journal records a sync that did not finish: it was compared with that
    /// sync's destination, and differs from it where the sync did not get to.
    pub interrupted: bool,
    /// The level.
    pub level: Level,
    /// Entries the tree has (files, symlinks, directories).
    pub expected: u64,
    /// Entries the scan found.
    pub scanned: u64,
    /// Files whose content was hashed.
    pub hashed: u64,
    /// Files proven by their stat data or ETag without reading them.
    pub proven_by_stat: u64,
    /// The differences, by path.
    pub drift: Vec<Drift>,
    /// Who judged the files' bytes when that was git (`--oracle git`, see [`verify_by_git`]);
    /// absent: treesync's own conversions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleReport>,
    /// A verify of one slice of the tree ([`verify_slice`]): which, and what it covered
    /// (`expected` and `scanned` are then the slice's); null: the whole tree.
    pub slice: Option<SliceReport>,
    /// What [`repair_plan`] needs, kept so that it neither walks the tree nor scans the target
    /// again: the recorded tree, what it wants at each drifted path, and what the scan found at
    /// and below type-changed and extra paths (sorted).
    #[serde(skip)]
    tree: ObjectId,
    #[serde(skip)]
    wanted: Vec<(Vec<u8>, Want)>,
    #[serde(skip)]
    found_below: Vec<(Vec<u8>, bool)>,
    /// The repositories the tree's blobs are in: the repository, then the submodules entered.
    #[serde(skip)]
    repos: Vec<Repo>,
}

/// What a verify of one slice ([`crate::slice`]) covered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SliceReport {
    /// Which slice, from 1.
    pub k: u32,
    /// Of how many.
    pub n: u32,
    /// Directories whose listing this slice checked (those of the tree in it; `expected`
    /// counts the paths directly in them).
    pub dirs: u64,
    /// A rolling run ([`crate::slice::Pick::Next`]): the slice the next one checks; null
    /// otherwise.
    pub next: Option<u32>,
    /// When a cycle of all slices, checked in order by rolling runs, last completed (Unix
    /// seconds, from the target's rolling position; this run, when it checked the last slice
    /// of a cycle); null: not yet, or not known (the caller keeps no position).
    pub last_full_cycle_unix: Option<u64>,
}

impl Report {
    /// No drift?
    pub fn is_clean(&self) -> bool {
        self.drift.is_empty()
    }

    /// The repositories the compared tree's blobs are in: the repository, then the
    /// submodules whose trees were compared. What a repair reads blobs from
    /// ([`crate::submodule::Blobs::source`]).
    pub fn repos(&self) -> &[Repo] {
        &self.repos
    }
}

/// Verify failed (not: drift was found).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The target has no state to verify against.
    #[error(
        "{0} has no completed sync to verify against\n  hint: run `treesync sync` first (or finish the interrupted one)"
    )]
    NoState(String),
    /// The repository.
    #[error(transparent)]
    Source(#[from] source::Error),
    /// The target.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// The state file.
    #[error(transparent)]
    State(#[from] crate::state::ParseError),
    /// Planning the repair.
    #[error(transparent)]
    Plan(#[from] crate::plan::Error),
    /// The conversion settings or `.gitattributes` files could not be read.
    #[error(transparent)]
    Conversions(#[from] crate::convert::Error),
    /// A file's expected content could not be made (a filter driver failed).
    #[error(transparent)]
    Convert(#[from] crate::convert::ConvertError),
    /// The commit `export-subst` placeholders are expanded with could not be read.
    #[error(transparent)]
    Export(#[from] crate::export::Error),
    /// git, asked what the files must hold (`--oracle git`), could not answer.
    #[error(transparent)]
    Oracle(#[from] crate::oracle::Error),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Dir,
    /// A submodule: a directory in the target (empty unless its tree is filled in: then its
    /// paths are in the walk too), an entry in the index.
    Gitlink {
        id: ObjectId,
    },
    File {
        id: ObjectId,
        executable: bool,
        /// How a sync writes it (`None`: as the blob is).
        conversion: Option<std::sync::Arc<Conversion>>,
    },
    Link {
        id: ObjectId,
    },
}

/// How git judged a target ([`verify_by_git`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct OracleReport {
    /// `git --version` of the git that judged.
    pub git: String,
    /// Files whose bytes were compared with what git writes.
    pub judged: u64,
    /// Files git did not write (a submodule's, or one `git archive` leaves out) and that were
    /// compared with treesync's own conversion instead.
    pub not_judged: u64,
}

/// What a target is compared with: a tree, and how a sync writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Against {
    /// The commit (its `.gitmodules` find the submodules).
    pub commit: ObjectId,
    /// The tree: `commit`'s, or one of its directories' ([`Against::path`]).
    pub tree: ObjectId,
    /// The directory of `commit` whose tree `tree` is (a subtree sync); `None`: the root.
    pub path: Option<String>,
    /// The conversion settings the files are written with (the state's `conversions`);
    /// `None`: as blobs are.
    pub conversions: Option<crate::convert::Settings>,
    /// Gitlinks hold their submodules' trees (the state's `recurse_submodules`).
    pub recurse_submodules: bool,
    /// The paths selected (`--include`/`--exclude`, the state's `select`); `None`: all.
    pub select: Option<crate::select::Select>,
}

impl Against {
    /// `tree` of `commit`, files as blobs are, gitlinks empty.
    pub fn tree(commit: ObjectId, tree: ObjectId) -> Against {
        Against { commit, tree, path: None, conversions: None, recurse_submodules: false, select: None }
    }
}

/// The commit a target should hold: the one its state records, or, when a sync was
/// interrupted, the one that sync was going to (then `true`). An error if it has neither.
pub async fn recorded_commit(backend: &dyn Backend) -> Result<(crate::state::Synced, bool), Error> {
    let (against, interrupted, at_unix) = recorded_state(backend).await?;
    Ok((crate::state::Synced { commit: against.commit, tree: against.tree, at_unix }, interrupted))
}

/// What a target should hold, as [`recorded_commit`] finds it, with how its files were
/// written (conversions, submodules) per the state or the interrupted sync's journal.
pub async fn recorded(backend: &dyn Backend) -> Result<(Against, bool), Error> {
    let (against, interrupted, _) = recorded_state(backend).await?;
    Ok((against, interrupted))
}

async fn recorded_state(backend: &dyn Backend) -> Result<(Against, bool, u64), Error> {
    let state = match backend.load_state().await? {
        Some(b) => crate::state::SyncState::parse(&b)?,
        None => return Err(Error::NoState(backend.to_string())),
    };
    match (state.synced, state.in_progress) {
        (_, Some(p)) => Ok((
            Against {
                commit: p.to_commit,
                tree: p.to_tree,
                path: p.to_path,
                conversions: p.to_conversions,
                recurse_submodules: p.recurse_submodules,
                select: p.to_select,
            },
            true,
            p.started_unix,
        )),
        (Some(s), None) => Ok((
            Against {
                commit: s.commit,
                tree: s.tree,
                path: state.path,
                conversions: state.conversions,
                recurse_submodules: state.recurse_submodules,
                select: state.select,
            },
            false,
            s.at_unix,
        )),
        (None, None) => Err(Error::NoState(backend.to_string())),
    }
}

/// What [`walk_tree`] found: every path of the tree as a checkout makes it, and the
/// repositories its blobs are in (the repository, then the submodules entered).
struct Walked {
    want: Vec<(Vec<u8>, Want)>,
    repos: Vec<Repo>,
}

/// Every path of `against.tree` as a checkout would make it (directories only where they hold
/// something; with [`Against::recurse_submodules`], gitlinks filled with their submodules'
/// trees), each file with its conversion under `converter` (the `.gitattributes` files of its
/// own repository's tree), sorted by path bytes. Names are not validated again: verify never
/// writes, and repair validates the paths it writes.
fn walk_tree(
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
fn selected(
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
struct Walk<'a> {
    limits: crate::plan::Limits,
    /// The conversion settings, `None`: files are written as blobs are.
    settings: Option<&'a crate::convert::Settings>,
    out: &'a mut Vec<(Vec<u8>, Want)>,
    /// Paths `export-ignore` leaves out (with `--export`).
    ignored: Vec<Vec<u8>>,
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
        // Conversions: by this repository's own `.gitattributes` files, as a checkout of it.
        if let Some(settings) = self.settings {
            let mut resolver = crate::convert::Resolver::new(settings, attributes)?;
            let find: &dyn gix_object::Find = odb;
            for i in files {
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
                for i in dirs {
                    let at = in_repo(&out[i].0);
                    if resolver.export_ignored(at.as_bstr(), true, find)? {
                        self.ignored.push(out[i].0.clone());
                    }
                }
            }
        }
        // Submodules: each gitlink holds its recorded commit's tree, read from its repository.
        if let Some(gitlinks) = gitlinks {
            for (at, commit) in gitlinks_found {
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

/// The stat index as recorded by the last verify (entries sorted by path).
type StatIndex = gix_index::State;

fn read_index(bytes: &[u8]) -> Option<StatIndex> {
    let (state, _) = gix_index::State::from_bytes(
        bytes,
        std::time::SystemTime::UNIX_EPOCH.into(),
        gix_hash::Kind::Sha1,
        Default::default(),
    )
    .ok()?;
    Some(state)
}

fn index_stat(s: &FileStat, size: u64) -> gix_index::entry::Stat {
    use gix_index::entry::stat::Time;
    gix_index::entry::Stat {
        mtime: Time { secs: s.mtime_secs as u32, nsecs: s.mtime_nsecs },
        ctime: Time { secs: s.ctime_secs as u32, nsecs: s.ctime_nsecs },
        dev: s.dev as u32,
        ino: s.ino as u32,
        uid: s.uid,
        gid: s.gid,
        size: size as u32,
    }
}

fn write_index(
    want: &[(Vec<u8>, Want)],
    entries: &[(usize, ObjectId, gix_index::entry::Mode, gix_index::entry::Stat)],
) -> Vec<u8> {
    let mut state = gix_index::State::new(gix_hash::Kind::Sha1);
    for (i, id, mode, stat) in entries {
        state.dangerously_push_entry(*stat, *id, gix_index::entry::Flags::empty(), *mode, want[*i].0.as_bstr());
    }
    state.sort_entries();
    let mut out = Vec::new();
    gix_index::File::from_state(state, "index")
        .write_to(&mut out, Default::default())
        .expect("writing an index to memory cannot fail");
    out
}

/// A file of the tree whose stat data does not prove it: its content is read and hashed.
struct ToHash {
    /// Its position in the tree's list.
    wi: usize,
    rel: RelPath,
    /// The blob id of what it must hold (after conversions, which change it).
    content: ObjectId,
    /// The blob id the index records for it.
    id: ObjectId,
    mode: gix_index::entry::Mode,
    /// Its stat data from the scan, for the index.
    stat: Option<gix_index::entry::Stat>,
    /// Its size, as the scan found it.
    size: u64,
}

/// Read the files of `to_hash`, up to the backend's scan width at once (its budgets gate each
/// read further) and at most [`HASH_BYTES_IN_FLIGHT`] of them in memory, and compare each with
/// the blob it must hold: on a NAS or over `nfs://` every read is round trips, which one file at
/// a time would pay in series.
async fn hash_files(
    backend: &dyn Backend,
    to_hash: Vec<ToHash>,
    report: &mut Report,
    new_index: &mut Vec<(usize, ObjectId, gix_index::entry::Mode, gix_index::entry::Stat)>,
    show: impl Fn(usize) -> Vec<u8>,
) -> Result<(), Error> {
    use futures::StreamExt;
    const UNIT: u64 = 1 << 20;
    let units = (HASH_BYTES_IN_FLIGHT / UNIT) as u32;
    let bytes = tokio::sync::Semaphore::new(units as usize);
    let width = backend.policy().scans.max(1);
    let mut reads = futures::stream::iter(to_hash)
        .map(|job| {
            let bytes = &bytes;
            async move {
                // Reserved by the size the scan found (a file larger than the whole allowance
                // takes all of it).
                let need = job.size.div_ceil(UNIT).clamp(1, u64::from(units)) as u32;
                let _held = bytes.acquire_many(need).await.expect("never closed");
                let data = backend.read_file(&job.rel).await;
                (job, data.map(|d| blob_id(&d)))
            }
        })
        .buffer_unordered(width);
    while let Some((job, hashed)) = reads.next().await {
        report.hashed += 1;
        if hashed? != job.content {
            report.drift.push(Drift::ContentChanged { path: show(job.wi) });
        } else if let Some(st) = job.stat {
            new_index.push((job.wi, job.id, job.mode, st));
        }
    }
    Ok(())
}

/// Bytes of files being hashed that a verify holds at once, at most (plus one file larger).
const HASH_BYTES_IN_FLIGHT: u64 = 64 << 20;

fn blob_id(data: &[u8]) -> ObjectId {
    gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, data).expect("sha1 of memory")
}

fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    let d = md5::Md5::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A blob the tree names could not be read: the repository is damaged or incomplete. That is
/// an error of the repository, never drift of the target.
fn object_error(id: &ObjectId, path: &[u8], cause: source::Cause) -> Error {
    Error::Source(source::Error::Object {
        what: "blob",
        id: *id,
        at: format!(" (at {})", crate::path::quote(path)),
        source: cause,
    })
}

/// The repository of `repos` that holds blob `id` (the first one; blob ids are content
/// addresses), and its size; `repos` is the repository, then submodules.
fn holder<'r>(repos: &'r [Repo], id: &ObjectId, path: &[u8]) -> Result<(&'r Repo, u64), Error> {
    let mut first_error = None;
    for repo in repos {
        match repo.with_objects(|odb| odb.try_header(id)) {
            Ok(Some(h)) => return Ok((repo, h.size)),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(match first_error {
        Some(e) => object_error(id, path, source::Cause::gix(e)),
        None => object_error(id, path, source::Cause::found("it is not in the repository")),
    })
}

/// The size of blob `id` (at `path` in the tree), from its header.
fn blob_size(repos: &[Repo], id: &ObjectId, path: &[u8]) -> Result<u64, Error> {
    Ok(holder(repos, id, path)?.1)
}

/// The content of blob `id` (at `path` in the tree).
fn blob_data(repos: &[Repo], id: &ObjectId, path: &[u8], buf: &mut Vec<u8>) -> Result<Vec<u8>, Error> {
    let (repo, _) = holder(repos, id, path)?;
    repo.with_objects(|odb| odb.find_blob(id, buf).map(|b| b.data.to_vec()))
        .map_err(|e| object_error(id, path, source::Cause::gix(e)))
}

/// The bytes a sync writes for blob `id` at `path` under `conversion`.
fn converted_data(
    repos: &[Repo],
    converter: &Converter,
    id: &ObjectId,
    path: &[u8],
    conversion: &Conversion,
    buf: &mut Vec<u8>,
) -> Result<Vec<u8>, Error> {
    let data = blob_data(repos, id, path, buf)?;
    Ok(converter.converted(&data, path.as_bstr(), id, conversion)?)
}

fn kind_name(k: &FoundKind) -> &'static str {
    match k {
        FoundKind::Dir => "directory",
        FoundKind::File { .. } => "file",
        FoundKind::Link { .. } => "symlink",
        FoundKind::Other => "special file",
    }
}

fn lookup<'a, T>(v: &'a [(Vec<u8>, T)], path: &[u8]) -> Option<&'a T> {
    v.binary_search_by(|e| e.0.as_slice().cmp(path)).ok().map(|i| &v[i].1)
}

/// Compare `backend` with the tree its state records (see [`recorded`]), as a sync writes it
/// (conversions, submodules). Writes the stat index (where the backend keeps one) with what
/// was proven, so the next verify hashes less.
pub async fn verify(repo: &Repo, backend: &dyn Backend, level: Level) -> Result<Report, Error> {
    verify_with(repo, backend, level, crate::plan::Limits::default()).await
}

/// [`verify`] of a tree that may be larger than the default [`crate::plan::Limits`] (only
/// `max_entries` applies: verify writes nothing).
pub async fn verify_with(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    limits: crate::plan::Limits,
) -> Result<Report, Error> {
    let (against, interrupted) = recorded(backend).await?;
    let mut report = verify_against(repo, backend, level, &against, true, limits).await?;
    report.interrupted = interrupted;
    Ok(report)
}

/// [`verify_with`] at [`Level::Full`], with git as the judge of every file's bytes: what the
/// `git` program writes for the recorded tree on checkout (or in `git archive`, for an
/// `--export` target), made independently of treesync's conversions ([`crate::oracle`]). A
/// file treesync converted differently from git is [`Drift::ContentChanged`]. Records no stat
/// index.
pub async fn verify_by_git(repo: &Repo, backend: &dyn Backend, limits: crate::plan::Limits) -> Result<Report, Error> {
    let (against, interrupted) = recorded(backend).await?;
    let mut report = verify_inner(repo, backend, Level::Full, &against, false, limits, None, true).await?;
    report.interrupted = interrupted;
    Ok(report)
}

/// [`verify_with`] of one slice of the tree ([`crate::slice`]): the listings of the slice's
/// directories and the paths directly in them; `None`: the whole tree. Nothing else of the
/// target is listed or stat'ed. The stat index keeps what other slices proved.
pub async fn verify_slice(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    limits: crate::plan::Limits,
    slice: Option<Slice>,
) -> Result<Report, Error> {
    let (against, interrupted) = recorded(backend).await?;
    let mut report = verify_against_in(repo, backend, level, &against, true, limits, slice).await?;
    report.interrupted = interrupted;
    Ok(report)
}

/// Compare `backend` with `against` (a tree, written as a sync writes it). With `record`,
/// write the stat index with what was proven.
pub async fn verify_against(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    against: &Against,
    record: bool,
    limits: crate::plan::Limits,
) -> Result<Report, Error> {
    verify_against_in(repo, backend, level, against, record, limits, None).await
}

/// [`verify_against`] of one slice of the tree (`None`: all of it), see [`verify_slice`].
pub async fn verify_against_in(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    against: &Against,
    record: bool,
    limits: crate::plan::Limits,
    slice: Option<Slice>,
) -> Result<Report, Error> {
    verify_inner(repo, backend, level, against, record, limits, slice, false).await
}

#[allow(clippy::too_many_arguments)] // the public entry points' inputs, and who judges
async fn verify_inner(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    against: &Against,
    record: bool,
    limits: crate::plan::Limits,
    slice: Option<Slice>,
    by_git: bool,
) -> Result<Report, Error> {
    let converter = match &against.conversions {
        Some(settings) => {
            let mut c = Converter::new(repo, settings.clone())?;
            if settings.export {
                let commit = crate::export::CommitInfo::from_commit(repo, against.commit)?;
                let select = against.select.clone().unwrap_or_default();
                c = c.with_commit(commit.archive(against.tree, settings, &select));
            }
            Some(std::sync::Arc::new(c))
        }
        None => None,
    };
    // Walking the tree (CPU, in the object database) overlaps with scanning the target
    // (mostly waiting on the filesystem or the network).
    let walker = {
        let (repo, against, converter) = (repo.clone(), against.clone(), converter.clone());
        tokio::task::spawn_blocking(move || walk_tree(&repo, &against, converter.as_deref(), limits))
    };
    let caps = backend.capabilities();
    // The stat index and what syncs recorded since (merged over it, see `crate::index_delta`)
    // are read while the target is listed. Only backends with an auxiliary store keep them; on
    // the others, files are proven by their ETag or by hashing them.
    // Stat data recorded under older conversion rules vouches for bytes those rules made: not
    // trusted until a sync has rewritten the converted files (and recorded the rules of now).
    let older_rules = against.conversions.as_ref().is_some_and(|s| s.rules != crate::convert::RULES);
    let recorded = async {
        if !(level == Level::Stat && caps.aux_store) || older_rules {
            return Ok::<_, Error>((None, Default::default()));
        }
        let index = backend.load_aux("index").await?.and_then(|b| read_index(&b));
        Ok((index, crate::index_delta::load(backend).await?))
    };
    let (want, repos, scanned, recorded, slice_dirs) = match slice {
        None => {
            let (scanned, recorded) = tokio::join!(backend.scan(backend.policy().scans), recorded);
            let Walked { want, repos } =
                walker.await.map_err(|source| Error::Backend(backend::Error::Worker { source }))??;
            (want, repos, scanned, recorded, 0)
        }
        // A slice lists only its directories: which they are, the walk tells.
        Some(s) => {
            let Walked { want, repos } =
                walker.await.map_err(|source| Error::Backend(backend::Error::Worker { source }))??;
            let dirs = slice_dirs(&want, s);
            let (scanned, recorded) = tokio::join!(backend.scan_dirs(&dirs, backend.policy().scans), recorded);
            (want, repos, scanned, recorded, dirs.len() as u64)
        }
    };
    // git's bytes for every file, made before the comparison (`--oracle git`).
    let judged = if by_git {
        let files: Vec<Vec<u8>> =
            want.iter().filter(|(_, w)| matches!(w, Want::File { .. })).map(|(p, _)| p.clone()).collect();
        let lfs_content = against.conversions.as_ref().is_some_and(|s| s.lfs == crate::lfs::LfsMode::Content)
            && want.iter().any(|(_, w)| matches!(w, Want::File { conversion: Some(c), .. } if c.is_lfs()));
        let (git_dir, commit, tree, path, settings) =
            (repo.git_dir(), against.commit, against.tree, against.path.clone(), against.conversions.clone());
        let written = tokio::task::spawn_blocking(move || {
            let refs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
            let tree = crate::oracle::Tree {
                git_dir: &git_dir,
                commit,
                tree,
                path: path.as_deref(),
                settings: settings.as_ref(),
                lfs_content,
            };
            crate::oracle::written(&tree, &refs)
        })
        .await
        .map_err(|source| Error::Backend(backend::Error::Worker { source }))??;
        Some(written)
    } else {
        None
    };
    let in_slice = |p: &[u8]| slice.is_none_or(|s| s.has_path(p));
    let mut found: Vec<(Vec<u8>, FoundKind)> = scanned?.into_iter().map(|f| (f.path, f.kind)).collect();
    let (index, delta) = recorded?;
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let index = index.unwrap_or_else(|| gix_index::State::new(gix_hash::Kind::Sha1));
    let index_entries = index.entries();
    let mut report = Report {
        commit: against.commit,
        interrupted: false,
        level,
        expected: if slice.is_some() {
            want.iter().filter(|w| in_slice(&w.0)).count() as u64
        } else {
            want.len() as u64
        },
        scanned: found.len() as u64,
        hashed: 0,
        proven_by_stat: 0,
        drift: Vec::new(),
        slice: slice.map(|s| SliceReport { k: s.k, n: s.n, dirs: slice_dirs, next: None, last_full_cycle_unix: None }),
        oracle: judged.as_ref().map(|j| OracleReport { git: j.git.clone(), judged: 0, not_judged: 0 }),
        tree: against.tree,
        wanted: Vec::new(),
        found_below: Vec::new(),
        repos: Vec::new(),
    };
    // What the index will hold: (position in `want`, id, mode, stat) — no path copies.
    let mut new_index: Vec<(usize, ObjectId, gix_index::entry::Mode, gix_index::entry::Stat)> =
        Vec::with_capacity(want.len());
    let show = |p: &[u8]| p.to_vec();
    let mut buf = Vec::new();
    let mut extras: Vec<usize> = Vec::new();
    let mut to_hash: Vec<ToHash> = Vec::new();
    let (mut fi, mut ii) = (0, 0);
    // Both lists are sorted by path: one merge over them (and over the index) finds everything.
    for (wi, (path, w)) in want.iter().enumerate() {
        while fi < found.len() && found[fi].0 < *path {
            extras.push(fi);
            fi += 1;
        }
        let f = if fi < found.len() && found[fi].0 == *path {
            fi += 1;
            Some(&found[fi - 1].1)
        } else {
            None
        };
        while ii < index_entries.len() && index_entries[ii].path(&index).as_bytes() < path.as_slice() {
            ii += 1;
        }
        let entry = index_entries.get(ii).filter(|e| e.path(&index).as_bytes() == path.as_slice());
        // What the sync's delta says of the path wins over the index (see `index_delta`).
        let recorded = match delta.paths.get(path.as_slice()) {
            Some(synced) => synced.map(|e| (e.id, index_stat(&e.stat, e.size))),
            None => entry.map(|e| (e.id, e.stat)),
        };
        if !in_slice(path) {
            // Another slice's path: what the index (or the sync's delta, which this run empties)
            // knows of it stays.
            let mode = match (w, entry) {
                (Want::File { executable: true, .. }, _) => Some(gix_index::entry::Mode::FILE_EXECUTABLE),
                (Want::File { .. }, _) => Some(gix_index::entry::Mode::FILE),
                (_, Some(e)) => Some(e.mode),
                _ => None,
            };
            if let (Some((id, st)), Some(mode)) = (recorded, mode) {
                new_index.push((wi, id, mode, st));
            }
            continue;
        }
        if let Want::Gitlink { id } = w {
            new_index.push((wi, *id, gix_index::entry::Mode::COMMIT, gix_index::entry::Stat::default()));
        }
        let Some(f) = f else {
            if matches!(w, Want::Dir | Want::Gitlink { .. }) && !caps.empty_dirs {
                continue; // implicit directories: their content is checked one by one
            }
            report.drift.push(Drift::Missing { path: show(path) });
            continue;
        };
        match (w, f) {
            (Want::Dir | Want::Gitlink { .. }, FoundKind::Dir) => {}
            (Want::File { id, executable, conversion }, FoundKind::File { size, executable: x, stat, etag, .. }) => {
                if caps.exec_bit && x.is_some_and(|x| x != *executable) {
                    report.drift.push(Drift::ModeChanged { path: show(path), executable: *executable });
                }
                let mode =
                    if *executable { gix_index::entry::Mode::FILE_EXECUTABLE } else { gix_index::entry::Mode::FILE };
                // Judged by git: its bytes, nothing of treesync's conversions.
                if let (Some(judged), Some(o)) = (&judged, report.oracle.as_mut()) {
                    match judged.files.get(path.as_slice()) {
                        Some(&(want_size, content)) => {
                            o.judged += 1;
                            if want_size != *size {
                                report.drift.push(Drift::ContentChanged { path: show(path) });
                            } else {
                                let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                                to_hash.push(ToHash { wi, rel, content, id: *id, mode, stat: None, size: *size });
                            }
                            continue;
                        }
                        None => o.not_judged += 1,
                    }
                }
                // The common case first: the index proves the file (its stat includes the size).
                if let (Level::Stat, Some(st)) = (level, stat) {
                    let st = index_stat(st, *size);
                    if recorded == Some((*id, st)) {
                        report.proven_by_stat += 1;
                        new_index.push((wi, *id, mode, st));
                        continue;
                    }
                }
                // A converted file: what a sync writes is the converted blob (read and converted
                // here, as only a sync's conversion tells its size and content).
                let expected = match (conversion, &converter) {
                    (Some(c), Some(converter)) => Some(converted_data(&repos, converter, id, path, c, &mut buf)?),
                    _ => None,
                };
                let want_size = match &expected {
                    Some(data) => data.len() as u64,
                    None => blob_size(&repos, id, path)?,
                };
                if want_size != *size {
                    report.drift.push(Drift::ContentChanged { path: show(path) });
                    continue;
                }
                let proven = match (level, stat, etag) {
                    (Level::Quick, _, _) => true,
                    (Level::Stat, None, Some(etag)) => match &expected {
                        Some(data) => md5_hex(data) == *etag,
                        None => md5_hex(&blob_data(&repos, id, path, &mut buf)?) == *etag,
                    },
                    _ => false,
                };
                if !proven {
                    // Read once the merge is done, many at once (see `hash_files`).
                    let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                    let content = match &expected {
                        Some(data) => blob_id(data),
                        None => *id,
                    };
                    to_hash.push(ToHash {
                        wi,
                        rel,
                        content,
                        id: *id,
                        mode,
                        stat: stat.as_ref().map(|s| index_stat(s, *size)),
                        size: *size,
                    });
                    continue;
                }
                if level != Level::Quick {
                    report.proven_by_stat += 1;
                }
                if let Some(s) = stat {
                    new_index.push((wi, *id, mode, index_stat(s, *size)));
                }
            }
            (Want::Link { id }, FoundKind::Link { target, stat }) => {
                let ok = blob_data(&repos, id, path, &mut buf)? == target.as_slice();
                if !ok {
                    report.drift.push(Drift::LinkChanged { path: show(path) });
                } else if let Some(s) = stat {
                    new_index.push((wi, *id, gix_index::entry::Mode::SYMLINK, index_stat(s, target.len() as u64)));
                }
            }
            // Listings that cannot tell a symlink from a file: compare the link target as content.
            (Want::Link { id }, FoundKind::File { size, etag, typed: false, .. }) => {
                let target = blob_data(&repos, id, path, &mut buf)?;
                let mut same = *size == target.len() as u64;
                if same && level != Level::Quick && etag.as_deref().is_none_or(|e| e != md5_hex(&target)) {
                    // No ETag, or one that is not an MD5 (stores other than S3): read it.
                    let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                    same = backend.read_file(&rel).await? == target;
                    report.hashed += 1;
                }
                if !same {
                    report.drift.push(Drift::LinkChanged { path: show(path) });
                }
            }
            (w, f) => report.drift.push(Drift::TypeChanged {
                path: show(path),
                expected: match w {
                    Want::Dir | Want::Gitlink { .. } => "directory",
                    Want::File { .. } => "file",
                    Want::Link { .. } => "symlink",
                },
                found: kind_name(f),
            }),
        }
    }
    extras.extend(fi..found.len());
    if !to_hash.is_empty() {
        hash_files(backend, to_hash, &mut report, &mut new_index, |wi| show(&want[wi].0)).await?;
        // The index is written in path order.
        new_index.sort_by_key(|e| e.0);
    }
    // Extra entries; below an extra directory only the directory is reported, and below a
    // path the tree has as a file or link (found as a directory) the type change covers it.
    let mut extra_dirs: Vec<&[u8]> = Vec::new();
    for i in extras {
        let (path, f) = (&found[i].0, &found[i].1);
        let below = |d: &[u8]| path.starts_with(d) && path.get(d.len()) == Some(&b'/');
        if extra_dirs.iter().any(|d| below(d)) {
            continue;
        }
        let mut p = path.as_slice();
        let mut covered = false;
        while let Some(i) = p.rfind_byte(b'/') {
            p = &p[..i];
            if matches!(lookup(&want, p), Some(Want::File { .. } | Want::Link { .. })) {
                covered = true;
                break;
            }
        }
        if covered {
            continue;
        }
        if *f == FoundKind::Dir {
            extra_dirs.push(path);
        }
        report.drift.push(Drift::Extra { path: show(path), dir: *f == FoundKind::Dir });
    }
    report.drift.sort_by(|a, b| a.path().cmp(b.path()));
    if slice.is_some() {
        // A slice listed one level: what is below a type-changed or extra directory (which a
        // repair removes) is listed now, only where drift is.
        found.extend(below(backend, &report.drift, &found).await?);
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    for d in &report.drift {
        let key = d.path();
        if let Some(w) = lookup(&want, key) {
            report.wanted.push((key.to_vec(), w.clone()));
        }
        if matches!(d, Drift::TypeChanged { .. } | Drift::Extra { .. }) {
            let start = found.partition_point(|e| e.0.as_slice() < key);
            for (p, k) in &found[start..] {
                if !p.starts_with(key) {
                    break;
                }
                if p.as_slice() == key || p.get(key.len()) == Some(&b'/') {
                    report.found_below.push((p.clone(), *k == FoundKind::Dir));
                }
            }
        }
    }
    report.found_below.sort_unstable();
    report.found_below.dedup();
    report.repos = repos;
    // Rewrite the index only when it learned something (a steady tree costs no write).
    let unchanged = new_index.len() == index_entries.len()
        && new_index.iter().zip(index_entries).all(|(n, o)| {
            want[n.0].0.as_slice() == o.path(&index).as_bytes() && n.1 == o.id && n.2 == o.mode && n.3 == o.stat
        });
    let merged = record && !delta.is_empty();
    if record && caps.aux_store && level != Level::Quick && !new_index.is_empty() && (!unchanged || merged) {
        backend.store_aux("index", &write_index(&want, &new_index)).await?;
    }
    if merged {
        backend.store_aux(crate::index_delta::NAME, b"").await?;
    }
    Ok(report)
}

/// The directories slice `s` lists: those of the tree (the root, directories, gitlinks) in it.
/// A name that is not a valid path cannot be in a target (a sync refuses it): not listed.
fn slice_dirs(want: &[(Vec<u8>, Want)], s: Slice) -> Vec<RelPath> {
    let root = s.has_dir(b"").then(RelPath::root);
    let dirs = want
        .iter()
        .filter(|(p, w)| matches!(w, Want::Dir | Want::Gitlink { .. }) && s.has_dir(p))
        .filter_map(|(p, _)| RelPath::parse_bytes(p).ok());
    root.into_iter().chain(dirs).collect()
}

/// Everything below the directories that `drift` finds type-changed or extra (found as
/// directories in `found`), level by level.
async fn below(
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

/// The ops that turn the drift of `report` back into the recorded tree: rewrite what differs,
/// restore what is missing, fix modes; remove extra entries only with `delete_extra` (and
/// temporaries of killed runs always). Uses what
/// [`verify`] recorded in the report: no second walk of the tree, no second scan of the target.
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
