//! [`repair()`]: a drifted target repaired into a new generation, then switched to.

use std::sync::atomic::AtomicBool;

use super::function::switch_to;
use super::home::{cleanup, current_of, held, load, lock, mark, mode, reconcile, store};
use super::host::{At, Host};
use super::record::{Record, SlotRecord};
use super::{Error, Options, RepairOutcome};
use crate::apply::Progress;
use crate::policy::RewriteModes;
use crate::source::Repo;
use crate::sync;

/// Repair a target kept in generations without writing into the current generation: a new
/// generation is started as a copy of the current one, repaired to the tree the current one
/// records, and switched to. With `dry_run` the current generation is compared only.
pub async fn repair(
    repo: &Repo,
    host: &dyn Host,
    options: &Options,
    repair: &sync::RepairOptions,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<RepairOutcome, Error> {
    let at = host.at_target().await?;
    let Some(cur) = current_of(host, &at)? else {
        return Err(Error::NotAtomic { target: host.to_string() });
    };
    let rec0 = if host.home_exists().await? { load(host).await? } else { Record::new() };
    let (switch, note) = mode(host, options.switch, &rec0).await?;
    let mut notes: Vec<String> = note.into_iter().collect();
    if repair.dry_run {
        let out = sync::repair(repo, &*host.open(&cur), repair, progress, interrupt).await?;
        return Ok(RepairOutcome { repair: out, prepared: None, switch, removed: Vec::new(), notes });
    }
    host.create_home().await?;
    let guard = lock(host, repair.sync.lock_wait).await?;
    let r = async {
        let mut rec = load(host).await?;
        let mut removed = Vec::new();
        let at = host.at_target().await?;
        let cur = current_of(host, &at)?.ok_or_else(|| Error::NotAtomic { target: host.to_string() })?;
        reconcile(host, &mut rec, Some(&cur), &mut removed).await?;
        rec.switch = Some(switch);
        // Compare first: a generation that is fine is left alone.
        let check = sync::RepairOptions { dry_run: true, ..repair.clone() };
        let found = sync::repair(repo, &*host.open(&cur), &check, progress, interrupt).await?;
        if found.planned.total() == 0 && found.finished.is_none() {
            return Ok(RepairOutcome { repair: found, prepared: None, switch, removed, notes: Vec::new() });
        }
        let slot = rec.new_slot();
        rec.slots.insert(slot.clone(), SlotRecord { retired: None, preparing: true, cloning: true });
        store(host, &mut rec).await?;
        host.clone_tree(&cur, &slot).await?;
        rec.slots.insert(slot.clone(), SlotRecord { retired: None, preparing: true, cloning: false });
        store(host, &mut rec).await?;
        host.claim_slot(&slot).await?;
        let backend = RewriteModes::new(host.open(&At::Slot(slot.clone())));
        let out = sync::repair(repo, &backend, repair, progress, interrupt).await?;
        mark(&backend, switch).await?;
        let (current, _) = switch_to(host, &mut rec, &slot, switch).await?;
        let held = held(host).await?;
        let mut more = Vec::new();
        removed.extend(cleanup(host, &mut rec, Some(&current), options.keep, options.grace, &held, &mut more).await?);
        Ok::<_, Error>(RepairOutcome { repair: out, prepared: Some(slot), switch, removed, notes: more })
    }
    .await;
    let unlocked = host.unlock(guard).await;
    let mut out = r?;
    unlocked?;
    notes.append(&mut out.notes);
    out.notes = notes;
    Ok(out)
}
