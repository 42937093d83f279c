//! Where a target may be: the one check every command that writes runs before it touches the
//! target, whatever the target's spelling (a directory, a NAS mount, `file:///DIR`).
//!
//! Two layers decide, so that no spelling walks around them:
//!
//! * by path ([`check_place`], here): a target that resolves (the symlinks and `..` of its
//!   parent followed, as the mount detection follows them) into the repository's git directory or into a treesync state
//!   folder or generations home is refused always; with `force`, the filesystem root, the home
//!   directory (or a directory holding it), the repository's working tree or a directory
//!   holding the repository, and a directory holding a `.git` that treesync did not write;
//! * by content (in the core's takeover, for every backend, `nfs://` and `s3://` too): a
//!   takeover refuses a target holding a git repository, another target's state or
//!   generations, or a home's `.ssh` ([`sync::Error::Precious`]).

use std::path::{Path, PathBuf};

use treesync_backend_nfs::detect::resolved;
use treesync_core::{Repo, sync};

use crate::Target;

/// Refuse a target where a sync would wreck something, whatever its spelling (a directory, a
/// NAS mount, `file:///DIR`): by path ([`sync::check_place`], with the parent's symlinks
/// resolved) and, with `force`, a directory holding a `.git` treesync did not write. Targets
/// that are not local paths (`nfs://`, `s3://`, `memory://`) pass here and are checked by
/// content when taken over ([`sync::Error::Precious`]).
#[allow(clippy::result_large_err)] // the core's error type, as `sync` returns it
pub fn check_place(target: &Target, repo: &Repo, force: bool) -> Result<(), sync::Error> {
    let Some(dir) = target.local_dir() else { return Ok(()) };
    let target = resolved_but_last(&dir);
    let git_dir = resolved(&repo.git_dir());
    let work_dir = repo.work_dir().map(|w| resolved(&w));
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| resolved(h.as_ref()));
    let place =
        sync::Place { target: &target, git_dir: &git_dir, work_dir: work_dir.as_deref(), home: home.as_deref() };
    sync::check_place(&place, force)?;
    if force && holds_foreign_git(&target) {
        return Err(sync::Error::Precious {
            target: target.display().to_string(),
            found: ".git".into(),
            what: "a git repository that treesync did not write",
        });
    }
    Ok(())
}

/// `dir` with the symlinks of its parent resolved, not its own: a target kept in generations
/// in symlink mode is a link into its home, and is the link (the backends refuse any other
/// target that is a symlink).
fn resolved_but_last(dir: &Path) -> PathBuf {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => resolved(parent).join(name),
        _ => resolved(&abs),
    }
}

/// The target directory holds a `.git` (a clone's, or a link to a git directory) and no
/// `.treesync` (a clone treesync keeps with `--git-worktree` has both). Backends do not list
/// a `.git` at the root, so the takeover's scan cannot see it: looked at here.
fn holds_foreign_git(dir: &Path) -> bool {
    dir.join(".git").symlink_metadata().is_ok() && dir.join(treesync_core::path::STATE_DIR).symlink_metadata().is_err()
}

/// The refusal to show instead of [`sync::Error::Unmanaged`] (whose hint offers `--force`) for
/// a target where `--force` would be refused too: a hint that works.
pub fn unmanaged_hint(target: &Target, repo: &Repo) -> Option<sync::Error> {
    check_place(target, repo, true).err()
}
