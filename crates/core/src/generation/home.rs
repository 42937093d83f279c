//! The home of the generations: its record, its lock, its slots and which one a sync takes,
//! and the mark each generation carries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::host::{At, AtTarget, Host, Switch};
use super::record::{Record, SlotRecord};
use super::{Error, Generation, Options};
use crate::backend::{self, Backend, LockGuard};
use crate::state::{SyncState, now_unix};
use crate::sync;

/// The name, in a generation's `.treesync` folder ([`Backend::store_aux`]), of the file saying
/// that it is a generation and in which switch mode; emptied when the target leaves
/// generations. A target directory holding it without a home lost its home ([`orphaned`]).
const GENERATION_MARK: &str = "generation";

/// Refuse a target that was kept in generations but whose home is gone
/// ([`Error::HomeGone`]): a sync without `--atomic` or `--no-atomic` must not turn it into
/// plain in-place syncs silently. For a target whose home the caller found missing
/// ([`has_home`](super::has_home)), read through `target`, the backend the plain sync uses (its lookups are
/// the sync's own: one more on a NAS, for the mark). Fine when the target never was a
/// generation, or is not there.
pub async fn orphaned(host: &dyn Host, target: &dyn Backend) -> Result<(), Error> {
    // No target (nor, say, its parent) is no generation: the sync says what it finds.
    match target.load_aux(GENERATION_MARK).await.ok().flatten() {
        Some(mode) if !mode.is_empty() => Err(Error::HomeGone {
            target: host.to_string(),
            home: host.home_name(),
            switch: String::from_utf8_lossy(&mode).into_owned(),
        }),
        _ => Ok(()),
    }
}

/// The target directory, when it is one treesync manages and is marked as a generation, is
/// not one any more (a target left, or whose home is gone). Nothing when there is no such
/// target (a first atomic sync cut short before its switch).
pub(super) async fn unmark(host: &dyn Host) -> Result<(), Error> {
    if !matches!(host.at_target().await, Ok(AtTarget::Dir { managed: true, .. })) {
        return Ok(());
    }
    let target = host.open(&At::Target);
    if target.load_aux(GENERATION_MARK).await?.is_some_and(|m| !m.is_empty()) {
        target.store_aux(GENERATION_MARK, b"").await?;
    }
    Ok(())
}

/// Mark `backend` (a generation about to be switched to) as a generation of `switch` mode.
pub(super) async fn mark(backend: &dyn Backend, switch: Switch) -> Result<(), Error> {
    Ok(backend.store_aux(GENERATION_MARK, switch.to_string().as_bytes()).await?)
}

fn record_error(host: &dyn Host, detail: String) -> Error {
    Error::Record { target: host.to_string(), path: format!("{}/generations", host.home_name()), detail }
}

pub(super) async fn load(host: &dyn Host) -> Result<Record, Error> {
    match host.load_record().await? {
        Some(bytes) => {
            let mut rec = Record::parse(&bytes).map_err(|d| record_error(host, d))?;
            rec.stored = Some(bytes);
            Ok(rec)
        }
        None => Ok(Record::new()),
    }
}

/// Write the record, unless its file holds it already.
pub(super) async fn store(host: &dyn Host, rec: &mut Record) -> Result<(), Error> {
    let bytes = rec.to_bytes();
    if rec.stored.as_ref() != Some(&bytes) {
        host.store_record(&bytes).await?;
        rec.stored = Some(bytes);
    }
    Ok(())
}

/// Take the home's lock, waiting up to `wait` for another writer.
pub(super) async fn lock(host: &dyn Host, wait: Option<Duration>) -> Result<LockGuard, Error> {
    let me = sync::holder();
    let deadline = wait.map(|w| Instant::now() + w);
    loop {
        match host.lock(&me).await {
            Err(backend::Error::Locked { .. }) if deadline.is_some_and(|d| Instant::now() < d) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            r => return Ok(r?),
        }
    }
}

/// Where the current generation is, per what is at the target path.
#[allow(clippy::result_large_err)] // the module's one error type; not a hot path
pub(super) fn current_of(host: &dyn Host, at: &AtTarget) -> Result<Option<At>, Error> {
    Ok(match at {
        AtTarget::Missing => None,
        AtTarget::Dir { managed: true, .. } => Some(At::Target),
        AtTarget::Dir { .. } => None,
        AtTarget::Link { slot: Some(s), .. } => Some(At::Slot(s.clone())),
        AtTarget::Link { text, slot: None } => {
            return Err(Error::ForeignLink {
                target: host.to_string(),
                text: String::from_utf8_lossy(text).into_owned(),
            });
        }
        AtTarget::Other(what) => return Err(Error::NotADirectory { target: host.to_string(), what }),
    })
}

fn is_trash(name: &str) -> bool {
    name.starts_with("trash-")
}

/// The slots as the home holds them, the record made to agree: leftovers of an interrupted
/// removal removed, slots cut short while being copied removed, slots the record does not
/// know or that may have been current a moment ago counted as retired now.
pub(super) async fn reconcile(
    host: &dyn Host,
    rec: &mut Record,
    current: Option<&At>,
    removed: &mut Vec<String>,
) -> Result<(), Error> {
    let now = now_unix();
    let mut names: BTreeSet<String> = BTreeSet::new();
    for name in host.slots().await? {
        if is_trash(&name) {
            host.remove_slot(&name).await?;
            removed.push(name);
        } else {
            names.insert(name);
        }
    }
    rec.slots.retain(|k, _| names.contains(k));
    // A slot the record does not number yet (a switch cut short after it moved the target's
    // tree into the slot it had named, before the record said so) is never named again.
    for name in &names {
        if let Some(n) = name.strip_prefix('g').and_then(|n| n.parse::<u64>().ok()) {
            rec.next = rec.next.max(n.saturating_add(1));
        }
    }
    let switching = rec.switching.take();
    let cur = match current {
        Some(At::Slot(s)) => Some(s.as_str()),
        _ => None,
    };
    for name in &names {
        let entry = rec.slots.entry(name.clone()).or_insert(SlotRecord { retired: Some(now), ..Default::default() });
        if Some(name.as_str()) == cur {
            *entry = SlotRecord::default();
            continue;
        }
        if entry.cloning {
            let trash = format!("trash-{name}");
            host.rename_slot(name, &trash).await?;
            rec.slots.remove(name);
            store(host, rec).await?;
            host.remove_slot(&trash).await?;
            removed.push(name.clone());
            continue;
        }
        if switching.as_deref() == Some(name.as_str()) || entry.retired.is_none() && !entry.preparing {
            // It may have been current until a moment ago.
            *entry = SlotRecord { retired: Some(now), ..Default::default() };
        } else if entry.preparing {
            // Cut short while being synced, never shown: its own journal finishes it.
            *entry = SlotRecord { retired: Some(entry.retired.unwrap_or(0)), preparing: true, cloning: false };
        }
    }
    Ok(())
}

/// The switch mode of this run, and a note when the one asked for is not available.
pub(super) async fn mode(
    host: &dyn Host,
    asked: Option<Switch>,
    rec: &Record,
) -> Result<(Switch, Option<String>), Error> {
    Ok(match asked.or(rec.switch) {
        // What the record says was probed when it was decided: no probe on every sync.
        Some(Switch::Exchange) if rec.switch == Some(Switch::Exchange) => (Switch::Exchange, None),
        Some(Switch::Symlink) => (Switch::Symlink, None),
        Some(Switch::Exchange) if host.can_exchange().await? => (Switch::Exchange, None),
        Some(Switch::Exchange) => (
            Switch::Symlink,
            Some(format!(
                "the filesystem of {host} cannot swap directories atomically (renameat2 RENAME_EXCHANGE): switching with a symlink instead"
            )),
        ),
        None if host.can_exchange().await? => (Switch::Exchange, None),
        None => (Switch::Symlink, None),
    })
}

fn rfc3339(secs: u64) -> String {
    crate::duration::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// The generations as the record and the home hold them, with the commits their states record.
pub(super) async fn generations(
    host: &dyn Host,
    rec: &Record,
    current: Option<&At>,
    held: &BTreeMap<String, Vec<u32>>,
    current_commit: Option<gix_hash::ObjectId>,
) -> Result<Vec<Generation>, Error> {
    let mut out = Vec::new();
    let commit_of = async |at: &At| -> Result<Option<gix_hash::ObjectId>, Error> {
        Ok(match host.open(at).load_state().await? {
            Some(bytes) => SyncState::parse(&bytes).ok().and_then(|s| s.synced.map(|s| s.commit)),
            None => None,
        })
    };
    if let Some(c) = current {
        let slot = match c {
            At::Target => "target".to_string(),
            At::Slot(s) => s.clone(),
        };
        out.push(Generation {
            commit: match current_commit {
                Some(id) => Some(id),
                None => commit_of(c).await?,
            },
            held_by: held.get(&slot).cloned().unwrap_or_default(),
            slot,
            current: true,
            retired: None,
            preparing: false,
        });
    }
    let mut rest: Vec<_> =
        rec.slots.iter().filter(|(name, _)| !matches!(current, Some(At::Slot(c)) if c == *name)).collect();
    rest.sort_by_key(|(name, r)| (std::cmp::Reverse(r.retired.unwrap_or(u64::MAX)), (*name).clone()));
    for (name, r) in rest {
        out.push(Generation {
            slot: name.clone(),
            current: false,
            commit: if r.preparing { None } else { commit_of(&At::Slot(name.clone())).await? },
            retired: r.retired.filter(|&t| t > 0).map(rfc3339),
            preparing: r.preparing,
            held_by: held.get(name).cloned().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// Remove retired generations past `keep` (oldest first) that are past the grace period and
/// not held open; each is renamed to `trash-NAME` (recorded) before it is removed, so a removal
/// cut short is finished by the next run.
pub(super) async fn cleanup(
    host: &dyn Host,
    rec: &mut Record,
    current: Option<&At>,
    keep: usize,
    grace: Duration,
    held: &BTreeMap<String, Vec<u32>>,
    notes: &mut Vec<String>,
) -> Result<Vec<String>, Error> {
    let now = now_unix();
    let cur = match current {
        Some(At::Slot(s)) => Some(s.clone()),
        _ => None,
    };
    let mut retired: Vec<(String, u64)> = rec
        .slots
        .iter()
        .filter(|(n, r)| Some(*n) != cur.as_ref() && !r.preparing)
        .map(|(n, r)| (n.clone(), r.retired.unwrap_or(now)))
        .collect();
    // Slots being prepared by an earlier run that was cut short count too, as the oldest.
    retired.extend(rec.slots.iter().filter(|(_, r)| r.preparing).map(|(n, r)| (n.clone(), r.retired.unwrap_or(0))));
    retired.sort_by_key(|(n, t)| (std::cmp::Reverse(*t), n.clone()));
    let keep_retired = keep.saturating_sub(usize::from(current.is_some()));
    let mut removed = Vec::new();
    for (name, at) in retired.into_iter().skip(keep_retired) {
        if at + grace.as_secs() > now {
            notes.push(format!(
                "kept {name} past --keep {keep}: it stopped being current {}s ago, within the grace period of {}s",
                now.saturating_sub(at),
                grace.as_secs()
            ));
            continue;
        }
        if let Some(pids) = held.get(&name) {
            notes.push(format!("kept {name} past --keep {keep}: held open by process {pids:?}"));
            continue;
        }
        let trash = format!("trash-{name}");
        host.rename_slot(&name, &trash).await?;
        rec.slots.remove(&name);
        store(host, rec).await?;
        host.remove_slot(&trash).await?;
        removed.push(name);
    }
    Ok(removed)
}

/// Which slot a run prepares: a retired one past the grace period and not held (the one retired
/// longest ago), or a new one (`None`), with a note when one had to be started because none
/// could be reused.
#[allow(clippy::result_large_err)] // the module's one error type; once per sync
pub(super) fn choose(
    rec: &Record,
    current: Option<&At>,
    options: &Options,
    held: &BTreeMap<String, Vec<u32>>,
    target: &dyn std::fmt::Display,
) -> Result<(Option<String>, Option<String>), Error> {
    let (keep, grace) = (options.keep, options.grace);
    let now = now_unix();
    let cur = match current {
        Some(At::Slot(s)) => Some(s.as_str()),
        _ => None,
    };
    let others: Vec<(&String, &SlotRecord)> = rec.slots.iter().filter(|(n, _)| Some(n.as_str()) != cur).collect();
    let total = others.len() + usize::from(current.is_some());
    if current.is_none() || total < keep {
        // The first generations: start one (from the current one, when there is one).
        if let Some((n, _)) = others.iter().find(|(_, r)| r.preparing && r.retired == Some(0)) {
            return Ok((Some((*n).clone()), None));
        }
        return Ok((None, None));
    }
    let mut eligible: Vec<_> = others
        .iter()
        .filter(|(n, r)| r.retired.unwrap_or(now) + grace.as_secs() <= now && !held.contains_key(*n))
        .collect();
    eligible.sort_by_key(|(n, r)| (r.retired.unwrap_or(now), (*n).clone()));
    if let Some((n, _)) = eligible.first() {
        return Ok((Some((*n).clone()), None));
    }
    let cap = options.cap();
    if total >= cap {
        let retry_after = others
            .iter()
            .filter(|(n, _)| !held.contains_key(*n))
            .map(|(_, r)| (r.retired.unwrap_or(now) + grace.as_secs()).saturating_sub(now).max(1))
            .min();
        return Err(Error::AtCap {
            target: target.to_string(),
            generations: total,
            cap,
            grace: grace.as_secs(),
            retry_after,
        });
    }
    let why: Vec<String> = others
        .iter()
        .map(|(n, r)| match held.get(*n) {
            Some(pids) => format!("{n} is held open by process {pids:?}"),
            None => format!(
                "{n} stopped being current {}s ago (grace period {}s)",
                now.saturating_sub(r.retired.unwrap_or(now)),
                grace.as_secs()
            ),
        })
        .collect();
    Ok((None, Some(format!("no generation can be reused yet ({}): starting a new one", why.join(", ")))))
}

pub(super) async fn held(host: &dyn Host) -> Result<BTreeMap<String, Vec<u32>>, Error> {
    Ok(host.held().await?.unwrap_or_default())
}
