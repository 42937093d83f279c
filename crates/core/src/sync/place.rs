//! Where a sync may go: directory targets it would wreck, and what a takeover must never remove.

use std::path::{Path, PathBuf};

use super::Error;
use crate::backend::{self, Backend};
use crate::path::RelPath;
use crate::plan::{ExistingEntry, ExistingKind};

/// List everything in the target (parents before children), for a takeover; refuse
/// ([`Error::Precious`]) a target holding what a takeover must never remove, whatever backend
/// serves it and however the target was spelled ([`precious`]).
pub(super) async fn scan(backend: &dyn Backend) -> Result<Vec<ExistingEntry>, Error> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([RelPath::root()]);
    while let Some(dir) = queue.pop_front() {
        let entries = backend.read_dir(&dir).await?;
        if let Some((found, what)) = precious(&dir, &entries) {
            return Err(Error::Precious { target: backend.to_string(), found, what });
        }
        for e in entries {
            let path = dir.join(e.name.as_slice().into(), crate::path::NameKind::Other);
            // Names no tree could have are still foreign entries to remove; we cannot
            // represent them as a RelPath, so refuse clearly instead.
            let path = path.map_err(|e| {
                Error::Backend(backend::Error::Unrepresentable {
                    path: e.path.to_string(),
                    reason: e.reason.to_string(),
                })
            })?;
            if e.is_dir {
                queue.push_back(path.clone());
                out.push(ExistingEntry { path, kind: ExistingKind::Dir });
            } else {
                out.push(ExistingEntry { path, kind: ExistingKind::NonDir });
            }
        }
    }
    Ok(out)
}

/// What in the listing of `dir` a takeover must never remove, and what it is: a `.git` (a
/// clone, or a repository's git directory), the layout of a git directory (`HEAD`, `objects/`,
/// `refs/`: a bare repository), another target's state folder (`.treesync` below the root) or
/// generations home (`.NAME.treesync/`), and at the root a home directory's `.ssh/`.
fn precious(dir: &RelPath, entries: &[backend::DirEntry]) -> Option<(String, &'static str)> {
    let has = |name: &[u8], is_dir: bool| entries.iter().any(|e| e.name == name && e.is_dir == is_dir);
    let at = |name: &[u8]| {
        let mut p = dir.as_bytes().to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        String::from_utf8_lossy(&p).into_owned()
    };
    for e in entries {
        let n = e.name.as_slice();
        if n.eq_ignore_ascii_case(b".git") {
            return Some((at(n), "a git repository"));
        }
        if e.is_dir && n == crate::path::STATE_DIR.as_bytes() && !dir.is_root() {
            return Some((at(n), "another target that treesync manages"));
        }
        if e.is_dir && n.len() > ".treesync".len() + 1 && n.starts_with(b".") && n.ends_with(b".treesync") {
            return Some((at(n), "the generations of another target"));
        }
        if e.is_dir && dir.is_root() && n == b".ssh" {
            return Some((at(n), "a home directory"));
        }
    }
    if has(b"HEAD", false) && has(b"objects", true) && has(b"refs", true) {
        let found = match dir.is_root() {
            true => "HEAD, objects/, refs/".to_string(),
            false => format!("HEAD, objects/, refs/ in {}", String::from_utf8_lossy(dir.as_bytes())),
        };
        return Some((found, "a git repository"));
    }
    None
}

/// Where a directory target is, for [`check_place()`]: every path absolute, with its symlinks
/// resolved as far as it exists (a target about to be created keeps its missing tail).
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The target directory.
    pub target: &'a Path,
    /// The repository's git directory ([`Repo::git_dir()`](crate::Repo::git_dir)).
    pub git_dir: &'a Path,
    /// The repository's working tree, if it has one ([`Repo::work_dir()`](crate::Repo::work_dir)).
    pub work_dir: Option<&'a Path>,
    /// The user's home directory, if known.
    pub home: Option<&'a Path>,
}

/// Refuse directory targets where a sync would wreck something: inside the repository's git
/// directory (always: the tree's files would mix with git's own), and with `force` (which
/// removes everything the tree does not have) the filesystem root, the home directory, the
/// repository's working tree or a directory holding the repository.
#[allow(clippy::result_large_err)] // the crate's one error type; called once per run
pub fn check_place(place: &Place<'_>, force: bool) -> Result<(), Error> {
    let Place { target, git_dir, work_dir, home } = *place;
    if target.starts_with(git_dir) {
        return Err(Error::InsideGitDir { target: target.to_path_buf(), git_dir: git_dir.to_path_buf() });
    }
    // A state folder (`.treesync`) or a generations home (`.NAME.treesync`) on the way.
    let mut dir = PathBuf::new();
    for c in target.components() {
        dir.push(c);
        let name = c.as_os_str().as_encoded_bytes();
        if name.starts_with(b".") && name.ends_with(crate::path::STATE_DIR.as_bytes()) {
            return Err(Error::InsideTreesync { target: target.to_path_buf(), dir });
        }
    }
    if !force {
        return Ok(());
    }
    let what = if target.parent().is_none() {
        Some("the filesystem root")
    } else if home == Some(target) {
        Some("your home directory")
    } else if home.is_some_and(|h| h.starts_with(target)) {
        Some("a directory holding your home directory")
    } else if work_dir.is_some_and(|w| target == w || w.starts_with(target)) {
        Some("the repository's working tree (or a directory holding it)")
    } else if git_dir.starts_with(target) {
        Some("a directory holding the repository")
    } else {
        None
    };
    match what {
        Some(what) => Err(Error::WouldWreck { target: target.to_path_buf(), what }),
        None => Ok(()),
    }
}
