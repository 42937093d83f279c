//! Making `ROOT/.worktrees/HASH` for a new commit at the cost of the diff.
//!
//! git-sync makes every worktree from nothing (`git worktree add` and `git reset --hard`: every
//! file written, the whole index hashed). Here a new worktree starts as a tree that already
//! holds a nearby commit, and treesync's sync brings it to the new one by the tree diff, with its
//! journal and its state (`.treesync/`, excluded from git):
//!
//! 1. **reuse**: a worktree retired longer ago than `--stale-worktree-timeout`, that no process
//!    holds open, renamed to the new hash (its git administrative directory with it);
//! 2. else **clone** the current worktree (reflinks, else hard links; the sync rewrites rather
//!    than changes in place any file it touches, so the current worktree never changes);
//! 3. else (the first sync) write the whole tree.
//!
//! The worktree's git files are then made as `git worktree add` makes them (`.git` pointing at
//! `../../.git/worktrees/HASH`, `gitdir`, `commondir`, a detached `HEAD`) and its index written for
//! the new tree, keeping the stat data of unchanged entries from the source's index (a copy):
//! `git status` there is clean and `git log`, `git rev-parse HEAD` work, as in git-sync.
//!
//! A commit with submodules (when `--submodules` is not `off`) or a `--sparse-checkout-file`
//! is made git's way, as git-sync makes it.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use treesync::core::ObjectId;
use treesync::{Intent, Place, Repo, Settings, Target};
use treesync_core::policy::RewriteModes;

use crate::config::{Config, Submodules};
use crate::git::{Git, GitError};
use crate::layout::{Layout, remove_any};

/// How a worktree was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The whole tree written (no worktree to start from).
    Full,
    /// A copy of the current worktree brought to the commit by the diff.
    Clone,
    /// A retired worktree brought to the commit by the diff.
    Reuse,
    /// A worktree left by an interrupted attempt, finished from its journal.
    Resume,
    /// The current worktree checked (nothing to do, or a drift repaired).
    Check,
    /// git's way: `git worktree add`, `git reset --hard` (submodules, sparse checkout).
    Git,
}

impl How {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            How::Full => "full",
            How::Clone => "clone",
            How::Reuse => "reuse",
            How::Resume => "resume",
            How::Check => "check",
            How::Git => "git",
        }
    }
}

/// What making a worktree did.
#[derive(Debug, Clone)]
pub struct Made {
    /// How.
    pub how: How,
    /// Paths written, removed or changed by the sync (0 for [`How::Git`]).
    pub changed: u64,
    /// The retired worktree reused, for [`How::Reuse`].
    pub from: Option<String>,
}

/// Making a worktree failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// git.
    #[error(transparent)]
    Git(#[from] GitError),
    /// Opening the worktree as a target.
    #[error("can't open worktree {path}: {message}")]
    Open {
        /// The worktree.
        path: String,
        /// Why.
        message: String,
    },
    /// The sync of the worktree.
    #[error("can't sync worktree {path}: {source}")]
    Sync {
        /// The worktree.
        path: String,
        /// Why.
        source: Box<treesync_core::sync::Error>,
    },
    /// Its index and HEAD.
    #[error(transparent)]
    Index(#[from] treesync_core::gitworktree::Error),
    /// A file operation.
    #[error("{what} {path}: {source}")]
    Io {
        /// What.
        what: &'static str,
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { what, path: path.display().to_string(), source }
}

/// Whether `hash`'s commit has to be checked out git's way (submodules, sparse checkout); git
/// is killed at `deadline`.
pub async fn needs_git(
    config: &Config,
    git: &Git,
    layout: &Layout,
    hash: &str,
    deadline: Option<std::time::Instant>,
) -> bool {
    if config.sparse_checkout_file.is_some() {
        return true;
    }
    config.submodules != Submodules::Off
        && git.run(&layout.root, &["cat-file", "-e", &format!("{hash}:.gitmodules")], deadline).await.is_ok()
}

/// Make `ROOT/.worktrees/HASH` hold `commit` (see the [module docs](self)); `current` is the
/// worktree LINK points at.
pub async fn make(
    layout: &Layout,
    repo: &Repo,
    commit: ObjectId,
    current: Option<&str>,
    stale: Duration,
    interrupt: &AtomicBool,
) -> Result<Made, Error> {
    let hash = commit.to_string();
    let path = layout.worktree(&hash);
    real_dirs(layout)?;
    std::fs::create_dir_all(layout.worktrees()).map_err(io("create", &layout.worktrees()))?;
    std::fs::create_dir_all(layout.root.join(".git/worktrees")).map_err(io("create", &layout.root))?;
    let has_state = |p: &Path| p.join(".treesync/state").is_file();
    let (how, from) = if current == Some(hash.as_str()) {
        // Made again if it is gone (a link in its place, or at its administrative directory,
        // is removed as a link, never written through).
        for dir in [&path, &layout.admin(&hash)] {
            if !is_real_dir(dir) {
                remove_any(dir).map_err(io("remove", dir))?;
            }
        }
        if !is_real_dir(&path) {
            std::fs::create_dir(&path).map_err(io("create", &path))?;
        }
        (How::Check, None)
    } else if is_real_dir(&path) && has_state(&path) && is_real_dir(&layout.admin(&hash)) {
        (How::Resume, None)
    } else {
        remove_any(&path).map_err(io("remove", &path))?;
        remove_any(&layout.admin(&hash)).map_err(io("remove", &layout.admin(&hash)))?;
        if let Some(old) = spare(layout, current, &hash, stale) {
            // The git files first: a crash in between leaves a worktree without them, which is
            // never reused (and removed once stale), and an administrative directory without a
            // worktree, which is made again.
            std::fs::rename(layout.admin(&old), layout.admin(&hash)).map_err(io("rename", &layout.admin(&old)))?;
            std::fs::rename(layout.worktree(&old), &path).map_err(io("rename", &layout.worktree(&old)))?;
            (How::Reuse, Some(old))
        } else if let Some(cur) = current.filter(|c| has_state(&layout.worktree(c))) {
            treesync_backend_local::generations::clone_dir(&layout.worktree(cur), &path)
                .map_err(|e| Error::Open { path: path.display().to_string(), message: e.to_string() })?;
            std::fs::create_dir_all(layout.admin(&hash)).map_err(io("create", &layout.admin(&hash)))?;
            // The index and the marker naming its commit; without the marker, the index is
            // written whole.
            let (index, marker) = (layout.admin(cur).join("index"), layout.admin(cur).join(INDEX_OF));
            if index.is_file() && marker.is_file() {
                std::fs::copy(&index, layout.admin(&hash).join("index")).map_err(io("copy", &index))?;
                std::fs::copy(&marker, layout.admin(&hash).join(INDEX_OF)).map_err(io("copy", &marker))?;
            }
            (How::Clone, Some(cur.to_string()))
        } else {
            std::fs::create_dir(&path).map_err(io("create", &path))?;
            std::fs::create_dir_all(layout.admin(&hash)).map_err(io("create", &layout.admin(&hash)))?;
            (How::Full, None)
        }
    };
    // LINK's worktree too: it may have lost its git files (deleted by hand or by a cleaner, and
    // written again below); those that are as they should be are left alone.
    let no_index = !layout.admin(&hash).join("index").is_file();
    write_git_files(layout, &hash, how == How::Check)?;
    // A worktree without treesync's state (one git-sync made, or one cut short before its
    // first state was written) is taken over: written whole, extras removed — a full pass,
    // once. With a state, only the difference.
    let take_over = !has_state(&path);
    let changed = sync_into(&path, repo, &hash, take_over, interrupt).await?;
    if how != How::Check || changed > 0 || no_index {
        let tree_of = |rev: &str| {
            repo.resolve(rev).map(|r| r.tree).map_err(|e| Error::Open { path: rev.to_string(), message: e.to_string() })
        };
        let (tree, admin) = (tree_of(&hash)?, layout.admin(&hash));
        // The commit the index there describes, if known for sure (see `INDEX_OF`); the marker
        // is removed before the index is written and written after it.
        let marker = admin.join(INDEX_OF);
        let index_of = std::fs::read_to_string(&marker).ok().map(|s| s.trim().to_string()).filter(|s| is_hash(s));
        let _ = std::fs::remove_file(&marker);
        match index_of {
            // The index is another commit's: change only what differs between the two trees.
            Some(source) if source != hash => {
                treesync_core::gitworktree::update_linked_from(&path, &admin, repo, tree_of(&source)?, commit, tree)?
            }
            // Unknown, or this commit's already (a drift repaired: the stat data of what changed).
            _ => treesync_core::gitworktree::update_linked(&path, &admin, repo, commit, tree)?,
        }
        std::fs::write(&marker, format!("{hash}\n")).map_err(io("write", &marker))?;
    }
    let from = if how == How::Reuse { from } else { None };
    Ok(Made { how, changed, from })
}

/// The directories everything goes through are real ones, not links a local user planted to
/// send the writes (and removals) elsewhere (a worktree itself is opened without following).
fn real_dirs(layout: &Layout) -> Result<(), Error> {
    for dir in [layout.worktrees(), layout.root.join(".git"), layout.root.join(".git/worktrees")] {
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
            return Err(Error::Io {
                what: "refusing to use",
                path: dir.display().to_string(),
                source: std::io::Error::other(
                    "it is not a directory (a symlink or a file): remove it; git-sync's root must be writable only by the user git-sync runs as",
                ),
            });
        }
    }
    Ok(())
}

/// The retired worktree to reuse: past the stale timeout, not held open, with treesync's state
/// and its git files; the most recently retired of them.
fn spare(layout: &Layout, current: Option<&str>, hash: &str, stale: Duration) -> Option<String> {
    let now = SystemTime::now();
    let mut candidates: Vec<(String, SystemTime)> = layout
        .others(current.unwrap_or(""))
        .into_iter()
        .filter(|(name, mtime)| {
            name != hash && now.duration_since(*mtime).unwrap_or_default() >= stale && reusable(layout, name)
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let held = treesync_backend_local::generations::held_in(&layout.worktrees());
    candidates.retain(|(name, _)| !held.contains_key(name));
    candidates.sort_by_key(|(_, mtime)| *mtime);
    candidates.pop().map(|(name, _)| name)
}

/// Whether the entry `name` of `.worktrees` can be brought to another commit by the diff: a
/// worktree named by its hash (a real directory) with treesync's state and its git files.
pub fn reusable(layout: &Layout, name: &str) -> bool {
    is_hash(name)
        && is_real_dir(&layout.worktree(name))
        && layout.worktree(name).join(".treesync/state").is_file()
        && is_real_dir(&layout.admin(name))
}

/// A directory, not a symlink to one.
fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// In a worktree's administrative directory: the commit its index was last written for,
/// removed before each write of the index and written after it, so that an index found
/// without it (a write cut short) is written whole rather than patched.
const INDEX_OF: &str = "treesync-index-of";

/// A commit hash (SHA-1 or SHA-256), as worktrees are named.
pub fn is_hash(name: &str) -> bool {
    (name.len() == 40 || name.len() == 64) && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The git files of a linked worktree, as `git worktree add` writes them but with a relative
/// `.git` pointer (as git-sync rewrites it, so the volume can be mounted elsewhere). Each file
/// that differs is replaced (a temporary renamed over it): a hard-linked copy's `.git` is
/// another inode's. `current`: the worktree LINK names, where git may be at work.
fn write_git_files(layout: &Layout, hash: &str, current: bool) -> Result<(), Error> {
    let path = layout.worktree(hash);
    let admin = layout.admin(hash);
    std::fs::create_dir_all(&admin).map_err(io("create", &admin))?;
    // A kill while its index or HEAD was written leaves their lock: no git works in a worktree
    // LINK does not name yet (and only this process, holding the root's lock, writes it).
    for lock in ["index.lock", "HEAD.lock"].into_iter().filter(|_| !current) {
        remove_any(&admin.join(lock)).map_err(io("remove", &admin.join(lock)))?;
    }
    replace(&path.join(".git"), format!("gitdir: ../../.git/worktrees/{hash}\n").as_bytes())?;
    replace(&admin.join("gitdir"), format!("{}\n", path.join(".git").display()).as_bytes())?;
    replace(&admin.join("commondir"), b"../..\n")?;
    replace(&admin.join("HEAD"), format!("{hash}\n").as_bytes())
}

fn replace(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) && std::fs::read(path).is_ok_and(|b| b == bytes) {
        return Ok(());
    }
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    ));
    let _ = std::fs::remove_file(&tmp);
    std::fs::write(&tmp, bytes).map_err(io("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("rename", path))
}

/// Sync `path` to `rev` with treesync (the backend its filesystem calls for), rewriting rather
/// than changing in place what it touches; how many paths changed. `take_over`: the directory
/// has no state of treesync's, and whatever it holds is replaced by the tree.
async fn sync_into(path: &Path, repo: &Repo, rev: &str, take_over: bool, interrupt: &AtomicBool) -> Result<u64, Error> {
    let shown = path.display().to_string();
    let open = |message: String| Error::Open { path: shown.clone(), message };
    let target = Target::parse(&shown).map_err(|e| open(e.to_string()))?;
    let settings = Settings::default();
    let place =
        Place::open(&target, &settings.target.options(), Intent::Write(None)).await.map_err(|e| open(e.to_string()))?;
    let mut options = settings.sync_options(&place.opened).map_err(|e| open(e.to_string()))?;
    // Its own directory under .worktrees: whatever is there without a state is taken over.
    options.force = take_over;
    // A file stored with Git LFS is what git's checkout writes: its `lfs` filter when the
    // config git reads sets one (git-lfs then fetches the object), else the pointer. git-sync
    // never fetches LFS objects itself, so the repository's LFS store is no source.
    options.lfs = treesync_core::lfs::LfsMode::Pointers;
    let backend = RewriteModes::new(place.opened.backend.clone());
    let outcome = treesync_core::sync::sync(repo, rev, &backend, &options, &|_| {}, interrupt)
        .await
        .map_err(|source| Error::Sync { path: shown.clone(), source: Box::new(source) })?;
    // The stat data the sync appended for a next verify: none verifies a worktree here, and
    // worktrees are reused in turn for ever, so it would only grow.
    let state_dir = path.join(treesync_core::path::STATE_DIR);
    if is_real_dir(&state_dir) {
        let delta = state_dir.join(treesync_core::index_delta::NAME);
        remove_any(&delta).map_err(io("remove", &delta))?;
    }
    Ok(outcome.applied.total())
}

/// git's way (git-sync's `configureWorktree`): `git worktree add --no-checkout`, the relative
/// `.git`, the sparse-checkout file, `git reset --hard`, then the submodules.
pub async fn make_with_git(
    layout: &Layout,
    git: &Git,
    config: &Config,
    hash: &str,
    deadline: Option<std::time::Instant>,
) -> Result<Made, Error> {
    real_dirs(layout)?;
    let path = layout.worktree(hash);
    remove_any(&path).map_err(io("remove", &path))?;
    // Its record too: one a killed `git worktree add` left locked ("initializing") is kept by
    // `git worktree prune` and refused by `git worktree add --force`.
    remove_any(&layout.admin(hash)).map_err(io("remove", &layout.admin(hash)))?;
    git.run(&layout.root, &["worktree", "prune", "--verbose"], deadline).await?;
    let shown = path.display().to_string();
    git.run(&layout.root, &["worktree", "add", "--force", "--detach", &shown, hash, "--no-checkout"], deadline).await?;
    replace(&path.join(".git"), format!("gitdir: ../../.git/worktrees/{hash}\n").as_bytes())?;
    let sparse = layout.admin(hash).join("info/sparse-checkout");
    if let Some(file) = &config.sparse_checkout_file {
        std::fs::create_dir_all(layout.admin(hash).join("info")).map_err(io("create", &sparse))?;
        std::fs::copy(file, &sparse).map_err(io("copy", file))?;
        git.run(&path, &["sparse-checkout", "init"], deadline).await?;
    }
    git.run(&path, &["reset", "--hard", hash, "--"], deadline).await?;
    if config.submodules != Submodules::Off {
        let depth = config.depth.to_string();
        let mut args = vec!["submodule", "update", "--init"];
        if config.submodules == Submodules::Recursive {
            args.push("--recursive");
        }
        if config.depth != 0 {
            args.extend(["--depth", &depth]);
        }
        git.run(&path, &args, deadline).await?;
    }
    Ok(Made { how: How::Git, changed: 0, from: None })
}
