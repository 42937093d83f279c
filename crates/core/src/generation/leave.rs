//! [`leave()`]: a target stops being kept in generations; and what a target's generations are
//! ([`status()`], [`kept`], [`has_home`], [`current_backend`]).

use std::sync::Arc;

use super::function::current;
use super::home::{cleanup, current_of, generations, held, load, lock, reconcile, store, unmark};
use super::host::{At, Host};
use super::{Error, LeaveOutcome, Options, Status};
use crate::backend::{self, Backend};
use crate::sync;

/// Stop keeping the target in generations (`sync --no-atomic`): a symlink target becomes the
/// real directory of its current generation, and retired generations are removed once past the
/// grace period and not held open (a later run removes the rest, then the home). The caller
/// then syncs the target in place as any other.
pub async fn leave(host: &dyn Host, options: &Options) -> Result<LeaveOutcome, Error> {
    if !host.home_exists().await? {
        // A generation whose home is gone ([`orphaned`]) is a plain target from now on.
        unmark(host).await?;
        return Ok(LeaveOutcome::default());
    }
    let guard = lock(host, options.sync.lock_wait).await?;
    let r = async {
        let mut out = LeaveOutcome::default();
        let mut rec = load(host).await?;
        let at = host.at_target().await?;
        let current = current_of(host, &at)?;
        reconcile(host, &mut rec, current.as_ref(), &mut out.removed).await?;
        if let Some(At::Slot(s)) = &current {
            rec.switching = Some(s.clone());
            store(host, &mut rec).await?;
            host.unlink_target(s).await?;
            rec.switching = None;
            rec.slots.remove(s);
            out.restored = true;
        }
        rec.switch = None;
        store(host, &mut rec).await?;
        // The target is no generation from now on.
        unmark(host).await?;
        let held = held(host).await?;
        let mut notes = Vec::new();
        out.removed.extend(cleanup(host, &mut rec, Some(&At::Target), 1, options.grace, &held, &mut notes).await?);
        out.kept = rec.slots.keys().cloned().collect();
        Ok::<_, Error>(out)
    }
    .await;
    let unlocked = host.unlock(guard).await;
    let mut out = r?;
    unlocked?;
    if out.kept.is_empty() {
        // A home that still holds what treesync did not make is reported and left: the target
        // is an ordinary one already (its record has no switch mode), so no later run depends
        // on it, and each tries again.
        match host.remove_home().await {
            Ok(()) => out.home_removed = true,
            Err(e) => out.notes.push(format!("the home was kept: {e}")),
        }
    }
    Ok(out)
}

/// The generations of the target of `host`, read without changing anything (the lock is only
/// probed). `None` when the target is not kept in generations.
pub async fn status(host: &dyn Host) -> Result<Option<Status>, Error> {
    if !host.home_exists().await? {
        return Ok(None);
    }
    let rec = load(host).await?;
    let at = host.at_target().await?;
    let current = current_of(host, &at)?;
    let running = match host.lock(&sync::holder()).await {
        Ok(guard) => {
            host.unlock(guard).await?;
            None
        }
        Err(backend::Error::Locked { holder }) => Some(holder),
        Err(e) => return Err(e.into()),
    };
    let held = held(host).await?;
    let generations = generations(host, &rec, current.as_ref(), &held, None).await?;
    Ok(Some(Status { home: host.home_name(), switch: rec.switch, generations, running }))
}

/// Whether the target of `host` is kept in generations: its home exists and its record has a
/// switch mode (a target left with `sync --no-atomic` keeps a home without one until its
/// retired generations are removed).
pub async fn kept(host: &dyn Host) -> Result<bool, Error> {
    Ok(host.home_exists().await? && load(host).await?.switch.is_some())
}

/// Whether the target of `host` has a home at all (kept in generations, or left with retired
/// generations still to remove).
pub async fn has_home(host: &dyn Host) -> Result<bool, Error> {
    Ok(host.home_exists().await?)
}

/// A backend of the current generation of `host`'s target (`None`: there is none).
pub async fn current_backend(host: &dyn Host) -> Result<Option<Arc<dyn Backend>>, Error> {
    Ok(current(host).await?.map(|at| host.open(&at)))
}
