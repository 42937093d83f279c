use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::host::{At, AtTarget, Cloned, Host, Switch};
use super::record::{Record, SlotRecord};
use crate::apply::Progress;
use crate::backend::{self, Backend, LockGuard};
use crate::policy::RewriteModes;
use crate::source::Repo;
use crate::state::{SyncState, now_unix};
use crate::sync;

/// How to sync a target kept in generations.
#[derive(Debug, Clone)]
pub struct Options {
    /// How each generation is synced (the lock wait and `dry_run` apply to the whole run).
    pub sync: sync::Options,
    /// How many generations to keep, the current one included (at least 1).
    pub keep: usize,
    /// A generation is neither reused nor removed until this long after it stopped being
    /// current.
    pub grace: Duration,
    /// How to switch; `None`: what the record says, else the best the filesystem offers
    /// ([`Switch::Exchange`] where it can, else [`Switch::Symlink`]).
    pub switch: Option<Switch>,
    /// The most generations the target may have, the current one included, however fast syncs
    /// come; `None`: [`Options::keep`] + [`super::GRACE_CAP`]. At the cap, with none past its
    /// grace period, a sync is refused ([`Error::AtCap`]) rather than reuse a generation a
    /// reader may still be in.
    pub max_generations: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: sync::Options::default(),
            keep: super::DEFAULT_KEEP,
            grace: super::DEFAULT_GRACE,
            switch: None,
            max_generations: None,
        }
    }
}

impl Options {
    /// The cap in force ([`Options::max_generations`]), never below [`Options::keep`].
    pub fn cap(&self) -> usize {
        self.max_generations.unwrap_or(self.keep.saturating_add(super::GRACE_CAP)).max(self.keep).max(1)
    }
}

/// Syncing a target kept in generations failed. The target still shows a complete generation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Syncing the generation being prepared (or the plan of a dry run).
    #[error(transparent)]
    Sync(#[from] sync::Error),
    /// The home, the record, the switch.
    #[error(transparent)]
    Backend(#[from] backend::Error),
    /// The record file does not parse.
    #[error(
        "the record of the generations of {target} ({path}) is damaged: {detail}\n  hint: remove it (rm {path}); the next sync starts a new generation and removes the old ones after the grace period"
    )]
    Record {
        /// The target.
        target: String,
        /// The record file.
        path: String,
        /// What the parser said.
        detail: String,
    },
    /// The target path is a symlink treesync did not make.
    #[error(
        "refusing to keep {target} in generations: it is a symlink to {text} that treesync did not make\n  hint: remove the link (rm {target}) or sync into the directory it points to"
    )]
    ForeignLink {
        /// The target.
        target: String,
        /// The link's text (lossy).
        text: String,
    },
    /// Something that is not a directory is at the target path.
    #[error("refusing to keep {target} in generations: it is a {what}\n  hint: remove it or choose another target")]
    NotADirectory {
        /// The target.
        target: String,
        /// What is there.
        what: &'static str,
    },
    /// The target is not kept in generations (for `verify`, `status`).
    #[error("{target} is not kept in generations\n  hint: sync it with --atomic first")]
    NotAtomic {
        /// The target.
        target: String,
    },
    /// The target has as many generations as it may ([`Options::cap`]), none of them past its
    /// grace period and free: a new one would pass the cap, and reusing one could change a tree
    /// a reader is still in.
    #[error(
        "{target} has {generations} generations, the most it may (--max-generations {cap}), and none is past its grace period ({grace}s){}: a new one would pass the cap, and reusing one now could change a tree a reader is still in\n  hint: run the sync again {}; or raise --max-generations (config max_generations) or shorten --grace",
        retry_after.map(|s| format!("; the first will be in {s}s")).unwrap_or_default(),
        retry_after.map(|s| format!("in {s}s")).unwrap_or_else(|| "once the processes holding them open let go".into()),
    )]
    AtCap {
        /// The target.
        target: String,
        /// How many generations it has.
        generations: usize,
        /// The cap.
        cap: usize,
        /// The grace period, in seconds.
        grace: u64,
        /// Seconds until the first generation not held open is past its grace period.
        retry_after: Option<u64>,
    },
    /// The target is a generation (exchange mode: the target directory is the current one)
    /// whose home is gone: syncing it in place would silently stop keeping it in generations.
    #[error(
        "{target} is kept in generations ({switch} mode), but its home {home} is gone (removed by hand?)\n  hint: sync with --atomic to keep it in generations (a new home is made; the target stays the current generation), or with --no-atomic to sync it in place from now on"
    )]
    HomeGone {
        /// The target.
        target: String,
        /// The home that is missing.
        home: String,
        /// The mode the target was kept in.
        switch: String,
    },
}

/// The name, in a generation's `.treesync` folder ([`Backend::store_aux`]), of the file saying
/// that it is a generation and in which switch mode; emptied when the target leaves
/// generations. A target directory holding it without a home lost its home ([`orphaned`]).
const GENERATION_MARK: &str = "generation";

/// Refuse a target that was kept in generations but whose home is gone
/// ([`Error::HomeGone`]): a sync without `--atomic` or `--no-atomic` must not turn it into
/// plain in-place syncs silently. For a target whose home the caller found missing
/// ([`has_home`]), read through `target`, the backend the plain sync uses (its lookups are
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
async fn unmark(host: &dyn Host) -> Result<(), Error> {
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
async fn mark(backend: &dyn Backend, switch: Switch) -> Result<(), Error> {
    Ok(backend.store_aux(GENERATION_MARK, switch.to_string().as_bytes()).await?)
}

/// One generation, as [`status()`] and [`Outcome::generations`] show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Generation {
    /// Where it is: `HOME/NAME` (`NAME`), or `target` for the current generation in exchange mode.
    pub slot: String,
    /// The target shows it.
    pub current: bool,
    /// The commit its state records (absent: none, or being prepared).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::json::opt_id")]
    #[schemars(with = "Option<crate::json::schema::ObjectId>")]
    pub commit: Option<gix_hash::ObjectId>,
    /// When it stopped being current (RFC 3339); absent while current or never current.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired: Option<String>,
    /// A sync was preparing it and did not finish; the next sync that uses it finishes it.
    pub preparing: bool,
    /// Processes on this machine holding it open (best effort, local filesystems only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<u32>,
}

/// What an atomic sync did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "atomicOutcome")]
pub struct Outcome {
    /// The sync of the generation that was prepared (or, when nothing changed, the dry run
    /// on the current one). Not serialized: callers show it as they show a sync.
    #[serde(skip)]
    pub sync: sync::Outcome,
    /// How the target is switched.
    pub switch: Switch,
    /// The target was switched to a new generation (`false`: it held the commit already).
    pub switched: bool,
    /// The slot that was prepared (in exchange mode it then moved to the target path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepared: Option<String>,
    /// The prepared slot was a retired generation brought up to date by its diff.
    pub reused: bool,
    /// How a new generation was started from the current one (absent: reused, or the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloned: Option<Cloned>,
    /// The slot that now holds the tree the target showed before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired: Option<String>,
    /// Retired generations removed (past `keep` and the grace period, not held open).
    pub removed: Vec<String>,
    /// The generations after the run.
    pub generations: Vec<Generation>,
    /// What the run decided that a person should know (a fallback, why no generation could be
    /// reused, why one was kept past `keep`).
    pub notes: Vec<String>,
    /// Wall time.
    #[serde(serialize_with = "crate::json::secs")]
    #[schemars(with = "crate::json::schema::Seconds")]
    pub elapsed: Duration,
}

/// What [`repair()`] did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RepairOutcome {
    /// The repair of the new generation (a copy of the current one).
    pub repair: sync::RepairOutcome,
    /// The slot that was prepared and switched to (none: nothing differed).
    pub prepared: Option<String>,
    /// How the target is switched.
    pub switch: Switch,
    /// Retired generations removed.
    pub removed: Vec<String>,
    /// What a person should know.
    pub notes: Vec<String>,
}

/// What [`leave()`] did.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct LeaveOutcome {
    /// The target was a symlink and is now the real directory of its generation.
    pub restored: bool,
    /// Retired generations removed.
    pub removed: Vec<String>,
    /// Generations left for a later run (within the grace period or held open).
    pub kept: Vec<String>,
    /// The home is gone: the target is an ordinary one again.
    pub home_removed: bool,
    /// What kept the home (entries treesync did not make there), and what to do about it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What [`status()`] shows of a target's generations.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "generationsStatus")]
pub struct Status {
    /// The home (`PARENT/.NAME.treesync`).
    pub home: String,
    /// How the target is switched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch: Option<Switch>,
    /// Every generation, the current first.
    pub generations: Vec<Generation>,
    /// Who holds the home's lock right now.
    pub running: Option<String>,
}

fn record_error(host: &dyn Host, detail: String) -> Error {
    Error::Record { target: host.to_string(), path: format!("{}/generations", host.home_name()), detail }
}

async fn load(host: &dyn Host) -> Result<Record, Error> {
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
async fn store(host: &dyn Host, rec: &mut Record) -> Result<(), Error> {
    let bytes = rec.to_bytes();
    if rec.stored.as_ref() != Some(&bytes) {
        host.store_record(&bytes).await?;
        rec.stored = Some(bytes);
    }
    Ok(())
}

/// Take the home's lock, waiting up to `wait` for another writer.
async fn lock(host: &dyn Host, wait: Option<Duration>) -> Result<LockGuard, Error> {
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
fn current_of(host: &dyn Host, at: &AtTarget) -> Result<Option<At>, Error> {
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
async fn reconcile(
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
async fn mode(host: &dyn Host, asked: Option<Switch>, rec: &Record) -> Result<(Switch, Option<String>), Error> {
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
async fn generations(
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
async fn cleanup(
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
fn choose(
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

async fn held(host: &dyn Host) -> Result<BTreeMap<String, Vec<u32>>, Error> {
    Ok(host.held().await?.unwrap_or_default())
}

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
        let outcome = sync::sync(repo, rev, &*b, &options.sync, progress, interrupt).await?;
        let (switch, _) = mode(host, options.switch, &rec).await.unwrap_or((Switch::Symlink, None));
        return Ok(Outcome {
            sync: outcome,
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
        });
    }
    // What a sync refuses (a revision that names no tree, missing LFS objects, a required
    // filter without a command, the limits) is found by planning from the tree the target shows
    // now, before anything is written: a refused command writes nothing, not even a home.
    let check = sync::Options { dry_run: true, ..options.sync.clone() };
    let shown = current.clone().unwrap_or(At::Target);
    let checked = dry_run_in(repo, rev, host, &shown, &check, progress, interrupt).await?;
    host.create_home().await?;
    let guard = lock(host, options.sync.lock_wait).await?;
    let r = locked(repo, rev, host, options, progress, interrupt, start, (current, checked)).await;
    let unlocked = host.unlock(guard).await;
    let outcome = r?;
    unlocked?;
    Ok(outcome)
}

/// A dry run of `options` (a dry run) in the generation at `at`. A slot holding what treesync
/// did not write, or whose state is gone (the home is treesync's: nothing in a slot is kept), is
/// planned as taken over, as [`sync()`] will take it over.
async fn dry_run_in(
    repo: &Repo,
    rev: &str,
    host: &dyn Host,
    at: &At,
    options: &sync::Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<sync::Outcome, Error> {
    let backend = host.open(at);
    match at {
        At::Slot(_) => slot_sync(repo, rev, &*backend, options, progress, interrupt).await,
        At::Target => Ok(sync::sync(repo, rev, &*backend, options, progress, interrupt).await?),
    }
}

/// [`sync::sync`] of a slot: a slot the sync refuses as not written by treesync (what a
/// takeover displaced, or a slot whose state is gone; refused before anything is written) is
/// taken over, as the home is treesync's and nothing in a slot is kept.
async fn slot_sync(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    options: &sync::Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<sync::Outcome, Error> {
    match sync::sync(repo, rev, backend, options, progress, interrupt).await {
        Err(sync::Error::Unmanaged { .. }) => {
            let forced = sync::Options { force: true, ..options.clone() };
            Ok(sync::sync(repo, rev, backend, &forced, progress, interrupt).await?)
        }
        r => Ok(r?),
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

#[allow(clippy::too_many_arguments)]
async fn locked(
    repo: &Repo,
    rev: &str,
    host: &dyn Host,
    options: &Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
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
        let now = repo.resolve(rev).map_err(sync::Error::from)?.commit;
        let planned = match checked {
            (Some(before), planned) if before == *cur && same(&planned) && planned.commit == now => planned,
            _ => {
                let dry = sync::Options { dry_run: true, ..options.sync.clone() };
                dry_run_in(repo, rev, host, cur, &dry, progress, interrupt).await?
            }
        };
        if planned.planned.total() == 0 && planned.resumed.is_none() && !planned.takeover {
            // Planned as a dry run, but this sync is none: it found nothing to do.
            let planned = sync::Outcome { dry_run: false, ..planned };
            removed.extend(cleanup(host, &mut rec, Some(cur), options.keep, options.grace, &held, &mut notes).await?);
            let generations = generations(host, &rec, Some(cur), &held, Some(planned.commit)).await?;
            return Ok(Outcome {
                sync: planned,
                switch,
                switched: false,
                prepared: None,
                reused: false,
                cloned: None,
                retired: None,
                removed,
                generations,
                notes,
                elapsed: start.elapsed(),
            });
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
    let synced = slot_sync(repo, rev, &backend, &options.sync, progress, interrupt).await?;
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
async fn switch_to(
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
