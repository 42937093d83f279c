use std::path::Path;

use super::{Error, Options, Outcome};
use crate::backend::Backend;
use crate::state::{self, SyncState, Synced};
use crate::{gitworktree, sync};

/// Adopt the git clone at `clone`, whose files `backend` serves (a local backend on `clone`).
/// See the [module docs](super).
///
/// Reads the clone's index and HEAD, then — under the target's lock, like every write of a
/// sync — refuses a target treesync manages already, keeps `.treesync` out of `git status`
/// (`.git/info/exclude`) and records HEAD's commit as synced.
pub async fn adopt(clone: &Path, backend: &dyn Backend, options: &Options) -> Result<Outcome, Error> {
    let (resolved, index_entries) = gitworktree::adopt(clone)?;
    let outcome = Outcome { commit: resolved.commit, tree: resolved.tree, index_entries, dry_run: options.dry_run };
    if options.dry_run {
        check_unmanaged(clone, backend).await?;
        return Ok(outcome);
    }
    let lock = backend.lock(&sync::holder()).await?;
    let result = async {
        check_unmanaged(clone, backend).await?;
        // The clone's files are written while the lock is held, like every write of a sync.
        gitworktree::exclude_state_dir(clone)?;
        let state = SyncState {
            version: state::VERSION,
            synced: Some(Synced { commit: resolved.commit, tree: resolved.tree, at_unix: state::now_unix() }),
            in_progress: None,
            path: None,
            // The clone's files were converted with the clone's settings. Unknown (unreadable
            // config): the next sync compares every file's conversion once.
            conversions: crate::Repo::open(clone).ok().and_then(|r| crate::convert::Settings::of(&r).ok()),
            select: None,
            export_subst: Vec::new(),
            recurse_submodules: false,
            backend: if options.backend_name.is_empty() { "local".into() } else { options.backend_name.clone() },
        };
        backend.store_state(&state.to_bytes()).await?;
        Ok::<_, Error>(())
    }
    .await;
    // A failure to release matters only when all else went well.
    let unlocked = backend.unlock(lock).await;
    result?;
    unlocked?;
    Ok(outcome)
}

/// Refuse a target whose state records a sync (done or unfinished).
async fn check_unmanaged(clone: &Path, backend: &dyn Backend) -> Result<(), Error> {
    if let Some(bytes) = backend.load_state().await? {
        let s = SyncState::parse(&bytes)?;
        if s.synced.is_some() || s.in_progress.is_some() {
            return Err(Error::AlreadyManaged { target: clone.to_path_buf() });
        }
    }
    Ok(())
}
