//! Trees that git manages today: [`adopt()`] a clone without touching its files, and keep its
//! `.git/index` and `HEAD` consistent while treesync syncs it ([`update()`]), so `git status`
//! there stays clean and `git pull` keeps working for whoever still runs it.

use std::path::{Path, PathBuf};

use gix_hash::ObjectId;

use crate::source::{Repo, Resolved};

/// Adopting or updating a git working tree failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not a git working tree.
    #[error("{path} is not a git working tree: {message}")]
    NotAWorktree {
        /// The target.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The index has conflicts.
    #[error(
        "the index of {worktree} has unmerged entries (e.g. {path})\n  hint: resolve the merge in that clone first; treesync only adopts a clean tree"
    )]
    Unmerged {
        /// The clone.
        worktree: PathBuf,
        /// A conflicted path.
        path: String,
    },
    /// The index records changes against HEAD.
    #[error(
        "the index of {worktree} records local changes against HEAD ({count} paths, e.g. {path})\n  hint: commit, stash or reset them in that clone first (git status shows them)"
    )]
    Staged {
        /// The clone.
        worktree: PathBuf,
        /// How many paths differ.
        count: usize,
        /// One of them.
        path: String,
    },
    /// Reading or writing the index or HEAD.
    #[error("cannot {what} in {worktree}: {message}")]
    Io {
        /// What.
        what: &'static str,
        /// The clone.
        worktree: PathBuf,
        /// Why.
        message: String,
    },
}

fn open(worktree: &Path) -> Result<gix::Repository, Error> {
    let repo =
        gix::open(worktree).map_err(|e| Error::NotAWorktree { path: worktree.into(), message: e.to_string() })?;
    if repo.workdir().is_none() {
        return Err(Error::NotAWorktree { path: worktree.into(), message: "it is a bare repository".into() });
    }
    Ok(repo)
}

fn io(what: &'static str, worktree: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io { what, worktree: worktree.into(), message: e.to_string() }
}

/// Which commit a git working tree holds, from its `.git/index` and `HEAD`, without reading the
/// files: refused when the index has conflicts or differs from HEAD's tree (staged changes).
pub fn adopt(worktree: &Path) -> Result<(Resolved, usize), Error> {
    let repo = open(worktree)?;
    let commit = repo.head_commit().map_err(|e| io("read HEAD", worktree, e))?;
    let tree = commit.tree_id().map_err(|e| io("read HEAD's tree", worktree, e))?.detach();
    let index = gix_index::File::at(repo.index_path(), repo.object_hash(), false, Default::default())
        .map_err(|e| io("read the index", worktree, e))?;
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
    Ok((Resolved { commit: commit.id, tree }, ours.len()))
}

/// Make git ignore treesync's state folder in that clone (`.git/info/exclude`, local only).
pub fn exclude_state_dir(worktree: &Path) -> Result<(), Error> {
    let clone = open(worktree)?;
    let exclude = clone.git_dir().join("info").join("exclude");
    let line = format!("/{}/", crate::path::STATE_DIR);
    let existing = std::fs::read_to_string(&exclude).unwrap_or_default();
    if existing.lines().any(|l| l.trim() == line) {
        return Ok(());
    }
    let mut text = existing;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("# treesync's state (added by `treesync adopt`)\n{line}\n"));
    std::fs::create_dir_all(exclude.parent().expect("info dir"))
        .map_err(|e| io("write .git/info/exclude", worktree, e))?;
    std::fs::write(&exclude, text).map_err(|e| io("write .git/info/exclude", worktree, e))
}

/// After a sync of `worktree` to `commit`/`tree` (objects from `repo`): rewrite its index for
/// that tree — keeping the stat data of unchanged entries, taking a fresh `lstat` of changed
/// ones — and move HEAD (its branch, if it has one) to `commit`.
pub fn update(worktree: &Path, repo: &Repo, commit: ObjectId, tree: ObjectId) -> Result<(), Error> {
    exclude_state_dir(worktree)?;
    let clone = open(worktree)?;
    let index_path = clone.index_path();
    let old = gix_index::File::at(&index_path, clone.object_hash(), false, Default::default()).ok();
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
                if e.mode == gix_index::entry::Mode::COMMIT {
                    continue;
                }
                let p = worktree.join(String::from_utf8_lossy(&path).as_ref());
                if let Ok(meta) = gix_index::fs::Metadata::from_path_no_follow(&p)
                    && let Ok(stat) = gix_index::entry::Stat::from_fs(&meta)
                {
                    e.stat = stat;
                }
            }
        }
    }
    let mut bytes = Vec::new();
    gix_index::File::from_state(state, &index_path)
        .write_to(&mut bytes, Default::default())
        .map_err(|e| io("write the index", worktree, e))?;
    write_atomically(&index_path, &bytes).map_err(|e| io("write the index", worktree, e))?;

    // HEAD: move the branch it names, or HEAD itself when detached.
    let git_dir = clone.git_dir().to_path_buf();
    let head = std::fs::read_to_string(git_dir.join("HEAD")).map_err(|e| io("read HEAD", worktree, e))?;
    let target = match head.trim().strip_prefix("ref: ") {
        Some(r) if r.starts_with("refs/heads/") && !r.contains("..") => git_dir.join(r),
        _ => git_dir.join("HEAD"),
    };
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io("move HEAD", worktree, e))?;
    }
    write_atomically(&target, format!("{commit}\n").as_bytes()).map_err(|e| io("move HEAD", worktree, e))
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

/// Write via `PATH.lock` and rename, as git does (and fail like git when the lock exists).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let lock = path.with_extension(match path.extension() {
        Some(e) => format!("{}.lock", e.to_string_lossy()),
        None => "lock".into(),
    });
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&lock)?;
    let r = f.write_all(bytes).and_then(|()| std::fs::rename(&lock, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&lock);
    }
    r
}
