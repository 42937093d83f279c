//! [`sync()`]: a generation brought up to date and switched to; [`preview`] and [`current`] of the slot it takes.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use super::home::{choose, cleanup, current_of, generations, held, load, lock, mark, mode, reconcile, store};
use super::host::{At, AtTarget, Host, Switch};
use super::record::{Record, SlotRecord};
use super::{Error, Options, Outcome};
use crate::apply::Progress;
use crate::backend::Backend;
use crate::policy::RewriteModes;
use crate::source::Repo;
use crate::state::{SyncState, now_unix};
use crate::sync;

/// Sync `rev` into a new or reused generation of the target of `host` and switch the target to
/// it. See the [module docs](super).
pub async fn sync(
    repo: &Repo,
    rev: &str,
    host: &dyn Host,
    options: &Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<Outcome, Error> {
    let start = Instant::now();
    let job = Job { repo, rev, progress, interrupt };
    // A typo in the revision must not create the home.
    repo.resolve(rev).map_err(sync::Error::from)?;
    let at = host.at_target().await?;
    let current = current_of(host, &at)?;
    if let AtTarget::Dir { managed: false, empty: false } = at
        && !options.sync.force
    {
        return Err(sync::Error::Unmanaged { target: host.to_string() }.into());
    }
    if options.sync.dry_run {
        let rec = if host.home_exists().await? { load(host).await? } else { Record::new() };
        let from = preview_at(&rec, current.as_ref(), options, &held(host).await?);
        let b = host.open(&from.unwrap_or(At::Target));
        let outcome = job.sync(&*b, &options.sync).await?;
        let (switch, _) = mode(host, options.switch, &rec).await.unwrap_or((Switch::Symlink, None));
        return Ok(Outcome::unswitched(outcome, switch, start));
    }
    // What a sync refuses (a revision that names no tree, missing LFS objects, a required
    // filter without a command, the limits) is found by planning from the tree the target shows
    // now, before anything is written: a refused command writes nothing, not even a home.
    let check = sync::Options { dry_run: true, ..options.sync.clone() };
    let shown = current.clone().unwrap_or(At::Target);
    let checked = job.dry_run_in(host, &shown, &check).await?;
    host.create_home().await?;
    let guard = lock(host, options.sync.lock_wait).await?;
    let r = locked(job, host, options, start, (current, checked)).await;
    let unlocked = host.unlock(guard).await;
    let outcome = r?;
    unlocked?;
    Ok(outcome)
}

/// What every sync of one [`sync()`] shares: the repository, the revision, who is told of the
/// progress, and the interrupt flag.
#[derive(Clone, Copy)]
struct Job<'a> {
    repo: &'a Repo,
    rev: &'a str,
    progress: &'a (dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &'a AtomicBool,
}

impl Job<'_> {
    /// [`sync::sync`] of the revision into `backend`.
    async fn sync(&self, backend: &dyn Backend, options: &sync::Options) -> Result<sync::Outcome, sync::Error> {
        sync::sync(self.repo, self.rev, backend, options, self.progress, self.interrupt).await
    }

    /// A dry run of `options` (a dry run) in the generation at `at`. A slot holding what
    /// treesync did not write, or whose state is gone (the home is treesync's: nothing in a slot
    /// is kept), is planned as taken over, as [`sync()`] will take it over.
    async fn dry_run_in(&self, host: &dyn Host, at: &At, options: &sync::Options) -> Result<sync::Outcome, Error> {
        let backend = host.open(at);
        match at {
            At::Slot(_) => self.slot_sync(&*backend, options).await,
            At::Target => Ok(self.sync(&*backend, options).await?),
        }
    }

    /// [`sync::sync`] of a slot: a slot the sync refuses as not written by treesync (what a
    /// takeover displaced, or a slot whose state is gone; refused before anything is written) is
    /// taken over, as the home is treesync's and nothing in a slot is kept.
    async fn slot_sync(&self, backend: &dyn Backend, options: &sync::Options) -> Result<sync::Outcome, Error> {
        match self.sync(backend, options).await {
            Err(sync::Error::Unmanaged { .. }) => {
                let forced = sync::Options { force: true, ..options.clone() };
                Ok(self.sync(backend, &forced).await?)
            }
            r => Ok(r?),
        }
    }
}

impl Outcome {
    /// A run that switched nothing (a dry run, or a sync that found nothing to do): `sync` is
    /// its dry run; nothing removed, no generations or notes told.
    fn unswitched(sync: sync::Outcome, switch: Switch, start: Instant) -> Outcome {
        Outcome {
            sync,
            switch,
            switched: false,
            prepared: None,
            reused: false,
            cloned: None,
            retired: None,
            removed: Vec::new(),
            generations: Vec::new(),
            notes: Vec::new(),
            elapsed: start.elapsed(),
        }
    }
}

fn preview_at(rec: &Record, current: Option<&At>, options: &Options, held: &BTreeMap<String, Vec<u32>>) -> Option<At> {
    match choose(rec, current, options, held, &"") {
        Ok((Some(slot), _)) => Some(At::Slot(slot)),
        // A new generation starts as a copy of the current one; at the cap the sync is refused.
        Ok((None, _)) | Err(_) => current.cloned(),
    }
}

/// Where a dry run or `plan` of an atomic sync plans from: the generation the next sync would
/// bring up to date (a reused one), else the current one (a new generation starts as its copy);
/// `None` for a target with nothing yet.
pub async fn preview(host: &dyn Host, options: &Options) -> Result<Option<At>, Error> {
    let at = host.at_target().await?;
    let current = current_of(host, &at)?;
    let rec = if host.home_exists().await? { load(host).await? } else { Record::new() };
    Ok(preview_at(&rec, current.as_ref(), options, &held(host).await?))
}

/// Where the current generation is (for `verify`, `status`): `None` when the target shows none.
pub async fn current(host: &dyn Host) -> Result<Option<At>, Error> {
    let at = host.at_target().await?;
    current_of(host, &at)
}

async fn locked(
    job: Job<'_>,
    host: &dyn Host,
    options: &Options,
    start: Instant,
    checked: (Option<At>, sync::Outcome),
) -> Result<Outcome, Error> {
    let mut rec = load(host).await?;
    let mut removed = Vec::new();
    let mut notes = Vec::new();
    // Look again under the lock: another run may have switched meanwhile.
    let at = host.at_target().await?;
    let mut current = current_of(host, &at)?;
    reconcile(host, &mut rec, current.as_ref(), &mut removed).await?;
    let (switch, note) = mode(host, options.switch, &rec).await?;
    notes.extend(note);
    rec.switch = Some(switch);
    store(host, &mut rec).await?;
    let held = held(host).await?;

    // Nothing to do when the current generation holds the commit already, in the layout of
    // the switch mode.
    let layout_ok =
        matches!((switch, &current), (Switch::Symlink, Some(At::Slot(_))) | (Switch::Exchange, Some(At::Target)));
    if let Some(cur) = current.as_ref().filter(|_| layout_ok) {
        // Planned before the lock, against the same generation holding the same sync (its state's
        // `synced`, which carries the time of the sync)? Else plan again.
        let cur_backend = host.open(cur);
        let state = match cur_backend.load_state().await? {
            Some(bytes) => Some(SyncState::parse(&bytes).map_err(sync::Error::from)?),
            None => None,
        };
        let same = |planned: &sync::Outcome| {
            state.as_ref().is_some_and(|s| s.in_progress.is_none() && s.synced.is_some() && s.synced == planned.from)
        };
        // And for the commit the revision names now (a run that waited for the lock).
        let now = job.repo.resolve(job.rev).map_err(sync::Error::from)?.commit;
        let planned = match checked {
            (Some(before), planned) if before == *cur && same(&planned) && planned.commit == now => planned,
            _ => {
                let dry = sync::Options { dry_run: true, ..options.sync.clone() };
                job.dry_run_in(host, cur, &dry).await?
            }
        };
        if planned.planned.total() == 0 && planned.resumed.is_none() && !planned.takeover {
            // Planned as a dry run, but this sync is none: it found nothing to do.
            let planned = sync::Outcome { dry_run: false, ..planned };
            removed.extend(cleanup(host, &mut rec, Some(cur), options.keep, options.grace, &held, &mut notes).await?);
            let generations = generations(host, &rec, Some(cur), &held, Some(planned.commit)).await?;
            return Ok(Outcome { removed, generations, notes, ..Outcome::unswitched(planned, switch, start) });
        }
    }

    // The generation to prepare.
    let (chosen, note) = choose(&rec, current.as_ref(), options, &held, host)?;
    notes.extend(note);
    let reused =
        chosen.as_ref().is_some_and(|s| rec.slots.get(s).is_some_and(|r| r.retired != Some(0) || !r.preparing));
    let unmanaged = matches!(at, AtTarget::Dir { managed: false, empty: false });
    let (slot, clone_from) = match chosen {
        Some(s) => (s, None),
        None => (rec.new_slot(), current.clone().filter(|_| !unmanaged)),
    };
    rec.slots.insert(slot.clone(), SlotRecord { retired: None, preparing: true, cloning: clone_from.is_some() });
    store(host, &mut rec).await?;
    let mut cloned = None;
    if let Some(from) = &clone_from {
        cloned = Some(host.clone_tree(from, &slot).await?);
        rec.slots.insert(slot.clone(), SlotRecord { retired: None, preparing: true, cloning: false });
        store(host, &mut rec).await?;
    }
    host.claim_slot(&slot).await?;
    let backend = RewriteModes::new(host.open(&At::Slot(slot.clone())));
    let synced = job.slot_sync(&backend, &options.sync).await?;
    // A reused generation was marked when it was made.
    if !reused {
        mark(&backend, switch).await?;
    }

    let (now_current, previous) = switch_to(host, &mut rec, &slot, switch).await?;
    current = Some(now_current);

    // Who holds what now that the trees moved.
    let held = self::held(host).await?;
    removed.extend(cleanup(host, &mut rec, current.as_ref(), options.keep, options.grace, &held, &mut notes).await?);
    let generations = generations(host, &rec, current.as_ref(), &held, Some(synced.commit)).await?;
    Ok(Outcome {
        sync: synced,
        switch,
        switched: true,
        prepared: Some(slot),
        reused,
        cloned,
        retired: previous,
        removed,
        generations,
        notes,
        elapsed: start.elapsed(),
    })
}

/// Switch the target to the prepared `slot`, journaled in the record (`switching` before, the
/// slots after): answers where the current generation is now, and the slot that holds the tree
/// the target showed before (retired now).
pub(super) async fn switch_to(
    host: &dyn Host,
    rec: &mut Record,
    slot: &str,
    switch: Switch,
) -> Result<(At, Option<String>), Error> {
    rec.switching = Some(slot.to_string());
    store(host, rec).await?;
    let mut spare = rec.clone();
    let displaced = spare.new_slot();
    let switched = host.switch(slot, switch, &displaced).await?;
    rec.switching = None;
    let current = match switch {
        Switch::Symlink => {
            rec.slots.insert(slot.to_string(), SlotRecord::default());
            At::Slot(slot.to_string())
        }
        Switch::Exchange => {
            rec.slots.remove(slot);
            At::Target
        }
    };
    if let Some(prev) = &switched.previous {
        if *prev == displaced {
            rec.next = spare.next;
        }
        rec.slots.insert(prev.clone(), SlotRecord { retired: Some(now_unix()), ..Default::default() });
    }
    store(host, rec).await?;
    Ok((current, switched.previous))
}
