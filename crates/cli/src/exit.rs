//! The process's exit code for an error: what kind of failure it is, from its chain of causes.

use treesync_core::{adopt, backend, sync, verify};
use treesync_watch::watch;

use crate::cmd::hooks::HookFailed;

/// The exit code of a failed command (see `treesync --help`): 3 when another treesync holds
/// the target's lock, 4 when the target or the tree is refused, 5 when `sync` synced but a
/// hook gave up, else 2.
pub(crate) fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.is::<HookFailed>() {
            return 5;
        }
        // A selection that selects no path of the commit: refused before anything is removed.
        if matches!(cause.downcast_ref(), Some(treesync_core::select::Error::SelectsNothing { .. })) {
            return 4;
        }
        // A target at its cap of generations: try again later, as for a held lock.
        if matches!(cause.downcast_ref(), Some(treesync_core::generation::Error::AtCap { .. })) {
            return 3;
        }
        // A sync of a generation (`--atomic`) is refused as a plain one is.
        let synced = cause.downcast_ref::<sync::Error>().or_else(|| match cause.downcast_ref() {
            Some(treesync_core::generation::Error::Sync(e)) => Some(e),
            _ => None,
        });
        let target = if let Some(e) = synced {
            match e {
                sync::Error::Unmanaged { .. }
                | sync::Error::Precious { .. }
                | sync::Error::WouldWreck { .. }
                | sync::Error::InsideGitDir { .. }
                | sync::Error::InsideTreesync { .. } => return 4,
                sync::Error::Plan(e) | sync::Error::Verify(verify::Error::Plan(e)) if refused(e) => return 4,
                sync::Error::Backend(b) | sync::Error::Verify(verify::Error::Backend(b)) => b,
                _ => return 2,
            }
        } else if let Some(e) = cause.downcast_ref::<verify::Error>() {
            match e {
                verify::Error::Plan(e) if refused(e) => return 4,
                verify::Error::Backend(b) => b,
                _ => return 2,
            }
        } else if let Some(e) = cause.downcast_ref::<adopt::Error>() {
            match e {
                adopt::Error::Backend(b) => b,
                _ => return 2,
            }
        } else if let Some(e) = cause.downcast_ref::<watch::Error>() {
            match e {
                watch::Error::Sync(sync::Error::Backend(b)) | watch::Error::Verify(verify::Error::Backend(b)) => b,
                _ => return 2,
            }
        } else if let Some(b) = cause.downcast_ref::<backend::Error>() {
            b
        } else {
            continue;
        };
        return match target {
            backend::Error::Locked { .. } | backend::Error::Conflict { .. } => 3,
            backend::Error::StateFolder { .. } => 4,
            _ => 2,
        };
    }
    2
}

/// A tree refused before anything is written: an entry that must never be written, names
/// that collide on the target, a tree too deep or too large.
fn refused(e: &treesync_core::plan::Error) -> bool {
    use treesync_core::plan::Error;
    use treesync_core::submodule::Error as Sub;
    match e {
        Error::Unsafe(_) | Error::CaseCollision { .. } | Error::TooLarge { .. } => true,
        // A submodule URL git would not read, submodules nested past any real project's.
        Error::Submodule(s) => matches!(**s, Sub::LocalUrl(_) | Sub::TooDeep { .. }),
        _ => false,
    }
}
