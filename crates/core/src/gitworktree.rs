//! Trees that git manages today: [`adopt()`] a clone without touching its files, and keep its
//! `.git/index` and `HEAD` consistent while treesync syncs it ([`update()`]), so `git status`
//! there stays clean and `git pull` keeps working for whoever still runs it.

use std::path::Path;

use gix_hash::ObjectId;

use crate::source::{Repo, Resolved};

mod delta;
mod error;
mod gitdir;
pub use error::Error;
use gitdir::GitDir;

/// Open the clone at `worktree`: its `.git` must be a real directory inside it (see [`GitDir`]).
fn open(worktree: &Path) -> Result<(gix::Repository, GitDir), Error> {
    let git = match GitDir::open(worktree) {
        Ok(g) => g,
        Err(Error::NotAWorktree { path, message }) => {
            // gix tells a bare repository or a missing directory apart.
            return Err(match gix::open(worktree) {
                Ok(r) if r.workdir().is_none() => {
                    Error::NotAWorktree { path, message: "it is a bare repository".into() }
                }
                Ok(_) => Error::NotAWorktree { path, message },
                Err(e) => Error::NotAWorktree { path, message: e.to_string() },
            });
        }
        Err(e) => return Err(e),
    };
    let repo =
        gix::open(worktree).map_err(|e| Error::NotAWorktree { path: worktree.into(), message: e.to_string() })?;
    if repo.workdir().is_none() {
        return Err(Error::NotAWorktree { path: worktree.into(), message: "it is a bare repository".into() });
    }
    Ok((repo, git))
}

fn io(what: &'static str, worktree: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io { what, worktree: worktree.into(), message: e.to_string() }
}

/// Read `.git/index` (a regular file, reached without symlinks).
fn read_index(git: &GitDir, hash: gix_hash::Kind, worktree: &Path) -> Result<Option<gix_index::File>, Error> {
    git.check_file(INDEX)?;
    match gix_index::File::at(git.path().join(INDEX), hash, false, Default::default()) {
        Ok(f) => Ok(Some(f)),
        Err(_) if git.read(INDEX)?.is_none() => Ok(None),
        Err(e) => Err(io("read the index", worktree, e)),
    }
}

/// Which commit a git working tree holds, from its `.git/index` and `HEAD`, without reading the
/// files: refused when the index has conflicts or differs from HEAD's tree (staged changes).
pub fn adopt(worktree: &Path) -> Result<(Resolved, usize), Error> {
    let (repo, git) = open(worktree)?;
    let commit = repo.head_commit().map_err(|e| io("read HEAD", worktree, e))?;
    let tree = commit.tree_id().map_err(|e| io("read HEAD's tree", worktree, e))?.detach();
    let index = read_index(&git, repo.object_hash(), worktree)?
        .ok_or_else(|| io("read the index", worktree, "there is no .git/index"))?;
    if let Some(e) = index.entries().iter().find(|e| e.stage() != gix_index::entry::Stage::Unconflicted) {
        return Err(Error::Unmerged { worktree: worktree.into(), path: e.path(&index).to_string() });
    }
    let head = gix_index::State::from_tree(&tree, &repo.objects, Default::default())
        .map_err(|e| io("read HEAD's tree", worktree, e))?;
    let key = |s: &gix_index::State, e: &gix_index::Entry| (e.path(s).to_owned(), e.id, e.mode);
    let ours: std::collections::BTreeSet<_> = index.entries().iter().map(|e| key(&index, e)).collect();
    let theirs: std::collections::BTreeSet<_> = head.entries().iter().map(|e| key(&head, e)).collect();
    let differ: Vec<_> = ours.symmetric_difference(&theirs).collect();
    if let Some(first) = differ.first() {
        return Err(Error::Staged { worktree: worktree.into(), count: differ.len(), path: first.0.to_string() });
    }
    // Refuse now a clone whose later updates would be refused.
    check_files(&git, worktree)?;
    Ok((Resolved { commit: commit.id, tree }, ours.len()))
}

/// `.git/info/exclude`, below `.git`.
const EXCLUDE: &str = "info/exclude";
/// `.git/index`, below `.git`.
const INDEX: &str = "index";

/// Make git ignore treesync's state folder in that clone (`.git/info/exclude`, local only).
pub fn exclude_state_dir(worktree: &Path) -> Result<(), Error> {
    let (_, git) = open(worktree)?;
    exclude_in(&git)
}

fn exclude_in(git: &GitDir) -> Result<(), Error> {
    let line = format!("/{}/", crate::path::STATE_DIR);
    let existing = String::from_utf8_lossy(&git.read(EXCLUDE)?.unwrap_or_default()).into_owned();
    if existing.lines().any(|l| l.trim() == line) {
        return Ok(());
    }
    let mut text = existing;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("# treesync's state (added by `treesync adopt`)\n{line}\n"));
    git.write(EXCLUDE, text.as_bytes())
}

/// The file HEAD moves: the branch it names (`refs/heads/…`), or HEAD itself when detached.
fn head_target(git: &GitDir, worktree: &Path) -> Result<String, Error> {
    let head = git.read("HEAD")?.ok_or_else(|| io("read HEAD", worktree, "there is no .git/HEAD"))?;
    let head = String::from_utf8_lossy(&head);
    Ok(match head.trim().strip_prefix("ref: ") {
        Some(r) if r.starts_with("refs/heads/") && gix_validate::reference::name(r.as_bytes().into()).is_ok() => {
            r.to_string()
        }
        _ => "HEAD".into(),
    })
}

/// Every file [`update()`] writes (`info/exclude`, `index`, HEAD's branch or HEAD) is reached
/// without a symlink and is a regular file or missing; the branch HEAD names, below `.git`.
fn check_files(git: &GitDir, worktree: &Path) -> Result<String, Error> {
    let head = head_target(git, worktree)?;
    for file in [EXCLUDE, INDEX, head.as_str()] {
        git.check_file(file)?;
    }
    Ok(head)
}

/// Check, before a sync touches its files, that [`update()`] will be able to write the clone's
/// index and HEAD without going through a symlink.
pub fn check(worktree: &Path) -> Result<(), Error> {
    let (_, git) = open(worktree)?;
    check_files(&git, worktree).map(drop)
}

/// After a sync of `worktree` to `commit`/`tree` (objects from `repo`): rewrite its index for
/// that tree — keeping the stat data of unchanged entries, taking a fresh `lstat` of changed
/// ones — and move HEAD (its branch, if it has one) to `commit`. Every file it writes is
/// checked first (its directory is opened without following symlinks): a symlink on the way
/// refuses the update before anything is written.
pub fn update(worktree: &Path, repo: &Repo, commit: ObjectId, tree: ObjectId) -> Result<(), Error> {
    let (clone, git) = open(worktree)?;
    let head = check_files(&git, worktree)?;
    exclude_in(&git)?;
    write_index_and_head(&git, clone.object_hash(), worktree, &head, repo, commit, tree)
}

/// [`update()`] for a linked worktree (`git worktree add`): its files are in `worktree`, its
/// own git files (`HEAD`, detached, and `index`) in its administrative directory `admin`
/// (`REPO/.git/worktrees/NAME`), which must be a real directory (its last component is not
/// followed). The stat data of entries whose blob and mode did not change are kept from the
/// index already there (a copy of another worktree's, for a worktree started as a copy of
/// it); the others are taken with `lstat` — work in proportion to the paths that changed.
pub fn update_linked(
    worktree: &Path,
    admin: &Path,
    repo: &Repo,
    commit: ObjectId,
    tree: ObjectId,
) -> Result<(), Error> {
    let git = open_linked(worktree, admin)?;
    write_index_and_head(&git, commit.kind(), worktree, "HEAD", repo, commit, tree)
}

/// A linked worktree's administrative directory, with its `index` and `HEAD` checked to be
/// regular files or missing (no symlink on the way).
fn open_linked(worktree: &Path, admin: &Path) -> Result<GitDir, Error> {
    let git = GitDir::open_admin(admin, worktree)?;
    for file in [INDEX, "HEAD"] {
        git.check_file(file)?;
    }
    Ok(git)
}

/// The stat data of `path` in `worktree` as it is now (`lstat`), if it can be read.
fn stat_now(worktree: &Path, path: &[u8]) -> Option<gix_index::entry::Stat> {
    let meta =
        gix_index::fs::Metadata::from_path_no_follow(&worktree.join(String::from_utf8_lossy(path).as_ref())).ok()?;
    gix_index::entry::Stat::from_fs(&meta).ok()
}

/// Write `state` as `git`'s index, then point `head` (a file below it) at `commit`.
fn write_index(
    git: &GitDir,
    worktree: &Path,
    state: gix_index::State,
    options: gix_index::write::Options,
    head: &str,
    commit: ObjectId,
) -> Result<(), Error> {
    let mut bytes = Vec::new();
    gix_index::File::from_state(state, git.path().join(INDEX))
        .write_to(&mut bytes, options)
        .map_err(|e| io("write the index", worktree, e))?;
    git.write(INDEX, &bytes)?;
    git.write(head, format!("{commit}\n").as_bytes())
}

/// [`update_linked()`] for a worktree whose index in `admin` is one of `from` (the tree of the
/// worktree it was copied from, or the tree it held before it was reused): only the entries
/// that differ between the two trees are changed (their stat data taken with `lstat`), found by
/// a walk that descends only into subtrees whose ids differ — no tree of the whole commit is
/// built. Without an index there, the whole index is written as [`update_linked()`] does.
pub fn update_linked_from(
    worktree: &Path,
    admin: &Path,
    repo: &Repo,
    from: ObjectId,
    commit: ObjectId,
    tree: ObjectId,
) -> Result<(), Error> {
    let git = open_linked(worktree, admin)?;
    let Some(index) = read_index(&git, commit.kind(), worktree)? else {
        return write_index_and_head(&git, commit.kind(), worktree, "HEAD", repo, commit, tree);
    };
    let changes =
        repo.with_objects(|odb| delta::diff(odb, &from, &tree)).map_err(|e| io("read the trees", worktree, e))?;
    let (mut state, _) = index.into_parts();
    let mut set: std::collections::HashMap<Vec<u8>, (ObjectId, gix_index::entry::Mode)> = Default::default();
    let mut removed: std::collections::HashSet<Vec<u8>> = Default::default();
    for change in changes {
        match change {
            delta::Change::Set(path, id, mode) => {
                set.insert(path, (id, mode));
            }
            delta::Change::Remove(path) => {
                removed.insert(path);
            }
        }
    }
    state.remove_entries(|_, path, _| {
        removed.contains(path.as_ref() as &[u8]) && !set.contains_key(path.as_ref() as &[u8])
    });
    let stat_of = |path: &[u8], mode: gix_index::entry::Mode| match mode {
        gix_index::entry::Mode::COMMIT => gix_index::entry::Stat::default(),
        _ => stat_now(worktree, path).unwrap_or_default(),
    };
    // Entries that exist are changed in place while the entries are still sorted (lookups are
    // binary searches); new ones are appended afterwards, then everything is sorted once.
    let mut added = Vec::new();
    for (path, (id, mode)) in &set {
        let stat = stat_of(path, *mode);
        match state.entry_mut_by_path_and_stage(path.as_slice().into(), gix_index::entry::Stage::Unconflicted) {
            Some(e) => {
                e.id = *id;
                e.mode = *mode;
                e.stat = stat;
            }
            None => added.push((path, *id, *mode, stat)),
        }
    }
    for (path, id, mode, stat) in added {
        state.dangerously_push_entry(stat, id, gix_index::entry::Flags::empty(), mode, path.as_slice().into());
    }
    state.sort_entries();
    // The tree cache and the other optional extensions described the old entries.
    state.remove_tree();
    state.remove_resolve_undo();
    let options = gix_index::write::Options { extensions: gix_index::write::Extensions::None, ..Default::default() };
    write_index(&git, worktree, state, options, "HEAD", commit)
}

/// Rewrite the index of `git` for `tree` (keeping the stat data of unchanged entries) and
/// point `head` (a file below it) at `commit`.
fn write_index_and_head(
    git: &GitDir,
    hash: gix_hash::Kind,
    worktree: &Path,
    head: &str,
    repo: &Repo,
    commit: ObjectId,
    tree: ObjectId,
) -> Result<(), Error> {
    let old = read_index(git, hash, worktree).ok().flatten();
    let mut state = repo
        .with_objects(|odb| gix_index::State::from_tree(&tree, Objects(odb), Default::default()))
        .map_err(|e| io("build the index", worktree, e))?;
    let old_entries: std::collections::HashMap<Vec<u8>, (ObjectId, gix_index::entry::Mode, gix_index::entry::Stat)> =
        old.as_ref()
            .map(|f| f.entries().iter().map(|e| (e.path(f).to_vec(), (e.id, e.mode, e.stat))).collect())
            .unwrap_or_default();
    let (entries, backing) = state.entries_mut_and_pathbacking();
    for e in entries.iter_mut() {
        let path = e.path_in(backing).to_vec();
        match old_entries.get(&path) {
            Some((id, mode, stat)) if *id == e.id && *mode == e.mode => e.stat = *stat,
            _ => {
                if e.mode != gix_index::entry::Mode::COMMIT
                    && let Some(stat) = stat_now(worktree, &path)
                {
                    e.stat = stat;
                }
            }
        }
    }
    write_index(git, worktree, state, Default::default(), head, commit)
}

/// Lends a `dyn` object finder to APIs that take `impl Find`.
struct Objects<'a>(&'a dyn gix_object::FindObjectOrHeader);

impl gix_object::Find for Objects<'_> {
    fn try_find<'b>(
        &self,
        id: &gix_hash::oid,
        buffer: &'b mut Vec<u8>,
    ) -> gix::error::Result<Option<gix_object::Data<'b>>> {
        self.0.try_find(id, buffer)
    }
}
