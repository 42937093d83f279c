//! [`watch_many()`]: many mirrors in one loop per repository.
//!
//! A hundred mirrors of one repository watched one by one would look at the same ref a hundred
//! times per interval (and a remote origin would ask its server a hundred times). Here the
//! mirrors come in [`Group`]s, one per repository with one [`Origin`]: each group has one loop
//! that refreshes the origin once for all its refs, resolves each distinct ref once, and then
//! runs the due steps of all its mirrors at once, each with its own target, options, verify
//! schedule and backoff. A mirror whose step fails is reported (its [`Event::Error`]) and left
//! out of the looks until its retry time; the others go on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::{Error, Event, Options, Origin, Outcome};
use crate::line::one_line;
use treesync_core::backend::Backend;
use treesync_core::generation::{self, Host};
use treesync_core::source::{self, Repo, Resolved};
use treesync_core::{sync, verify};

/// How long "until the origin wakes us" is, when nothing else is scheduled (a year).
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a mirror keeps following its ref: a target synced in place, or one kept in generations.
#[derive(Clone, Copy)]
pub enum Place<'a> {
    /// Synced in place ([`sync::sync()`]).
    Plain(&'a dyn Backend),
    /// Kept in generations ([`generation::sync()`], `--atomic`): `keep`, `grace` and `switch`
    /// from these options, everything else of a sync from the mirror's [`Options::sync`].
    Generations(&'a dyn Host, &'a generation::Options),
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Plain(b) => b.fmt(f),
            Place::Generations(h, _) => h.fmt(f),
        }
    }
}

/// One target following one ref of its group's repository.
pub struct Mirror<'a> {
    /// Its name, given to the event handler with each of its events.
    pub name: String,
    /// The ref it follows (`main`, `v2`, `main:docs`, …).
    pub rev: String,
    /// Its target.
    pub place: Place<'a>,
    /// Its interval, verify schedule, repair, backoff and sync options (one sync options value
    /// per mirror, passed to each of its syncs as it is). [`Options::origin`] is not used: the
    /// group's origin is.
    pub options: Options,
}

/// The mirrors of one repository, and where their loop learns that the refs moved.
pub struct Group<'a> {
    /// The repository (one per group: group mirrors by their repository's git directory).
    pub repo: &'a Repo,
    /// Refreshed once per look for all the group's refs, and waited on between looks.
    pub origin: Arc<dyn Origin>,
    /// Its mirrors.
    pub mirrors: Vec<Mirror<'a>>,
}

/// What one mirror of a [`watch_many()`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorOutcome {
    /// The mirror's name ([`Mirror::name`]).
    pub name: String,
    /// What its watch did.
    pub outcome: Outcome,
}

/// Keep every mirror of every group following its ref until `interrupt` is set; `on_event`
/// gets each event with the name of its mirror. The outcomes come in the order of the groups
/// and their mirrors.
///
/// The groups run at once, each in a loop of its own: [`Origin::refresh`] with the group's
/// distinct refs, each ref resolved once, then — at once — the step of every mirror that is
/// due: whose ref names another commit than the one it synced last (it is synced to exactly
/// the commit of this look), whose verify is due, or whose last step failed; a mirror whose
/// last step failed waits for its retry time (its interval, doubling with every failure in a
/// row up to its [`Options::max_backoff`]) and is left out of the looks until then. Between
/// looks the group waits on its origin: until the earliest retry or verify, and, when the
/// origin [polls](Origin::polls), at most the shortest interval of its mirrors.
///
/// Each mirror's events are those of [`watch()`](super::watch()), in the same order; an
/// origin or a ref that fails is an [`Event::Error`] of each mirror it concerns.
pub async fn watch_many(
    groups: &[Group<'_>],
    on_event: &mut (dyn FnMut(&str, &Event) + Send),
    interrupt: &AtomicBool,
) -> Vec<MirrorOutcome> {
    let emit = Emit(Mutex::new(on_event));
    let looks = groups.iter().map(|g| watch_group(g, &emit, interrupt));
    futures::future::join_all(looks).await.into_iter().flatten().collect()
}

/// The event handler, shared by the mirrors' steps that run at once (it is called, never held
/// across an await).
#[allow(clippy::type_complexity)] // the handler as watch_many() takes it, behind a mutex
struct Emit<'a>(Mutex<&'a mut (dyn FnMut(&str, &Event) + Send)>);

impl Emit<'_> {
    fn emit(&self, mirror: &str, event: &Event) {
        let mut handler = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        handler(mirror, event)
    }
}

/// A mirror's target as its steps use it.
enum Target<'a> {
    Plain(&'a dyn Backend),
    /// With the generations' options and the mirror's sync options (boxed: they are large).
    Generations(&'a dyn Host, Box<generation::Options>),
}

/// A mirror's loop state.
struct State<'m, 'a> {
    mirror: &'m Mirror<'a>,
    target: Target<'a>,
    outcome: Outcome,
    /// The commit synced last.
    last: Option<treesync_core::ObjectId>,
    /// The wait after the next failure.
    backoff: Duration,
    /// After a failure: when to try again.
    retry_at: Option<Instant>,
    last_verify: Instant,
    /// With [`super::Options::verify_slices`] on a target without auxiliary files: the slice
    /// the next verify checks.
    next_slice: u32,
    /// Since when the target has not held the ref's commit (see `Event::Error::behind_since`).
    behind: Option<SystemTime>,
}

impl State<'_, '_> {
    /// When its next verify is due, if it verifies.
    fn next_verify(&self) -> Option<Instant> {
        self.verify_period().map(|every| self.last_verify + every)
    }

    /// The time between two verifies: `verify_every`, divided among the slices.
    fn verify_period(&self) -> Option<std::time::Duration> {
        let options = &self.mirror.options;
        options.verify_every.map(|every| every / options.verify_slices.unwrap_or(1).max(1))
    }

    /// Whether this look runs its step, given what its ref resolved to.
    fn due(&self, now: Instant, to: &Resolved) -> bool {
        match self.retry_at {
            Some(at) => now >= at,
            None => self.last != Some(to.commit) || self.next_verify().is_some_and(|at| now >= at),
        }
    }

    /// A failed step (also of the origin or the ref): tell it, and wait before the next try.
    fn failed(&mut self, error: Arc<Error>, emit: &Emit<'_>, interrupt: &AtomicBool) -> bool {
        let name = &self.mirror.name;
        if interrupt.load(Ordering::SeqCst) {
            emit.emit(name, &Event::Stopping { message: one_line(&*error), error });
            return true;
        }
        self.outcome.errors += 1;
        emit.emit(
            name,
            &Event::Error { message: one_line(&*error), retry_in: self.backoff, behind_since: self.behind, error },
        );
        self.retry_at = Some(Instant::now() + self.backoff);
        let options = &self.mirror.options;
        self.backoff = (self.backoff * 2).min(options.max_backoff.max(options.interval));
        false
    }

    fn succeeded(&mut self) {
        self.retry_at = None;
        self.backoff = self.mirror.options.interval;
    }
}

async fn watch_group(group: &Group<'_>, emit: &Emit<'_>, interrupt: &AtomicBool) -> Vec<MirrorOutcome> {
    let origin = &*group.origin;
    let mut states: Vec<State<'_, '_>> = group
        .mirrors
        .iter()
        .map(|m| State {
            mirror: m,
            target: match m.place {
                Place::Plain(backend) => Target::Plain(backend),
                Place::Generations(host, g) => Target::Generations(
                    host,
                    Box::new(generation::Options { sync: m.options.sync.clone(), ..g.clone() }),
                ),
            },
            outcome: Outcome::default(),
            last: None,
            backoff: m.options.interval,
            retry_at: None,
            last_verify: Instant::now(),
            next_slice: 1,
            behind: None,
        })
        .collect();
    for m in &group.mirrors {
        let watching = Event::Watching {
            rev: m.rev.clone(),
            repo: group.repo.path().display().to_string(),
            target: m.place.to_string(),
            interval: m.options.interval,
            waits: origin.describe(m.options.interval),
        };
        emit.emit(&m.name, &watching);
    }
    let mut revs: Vec<String> = group.mirrors.iter().map(|m| m.rev.clone()).collect();
    revs.sort();
    revs.dedup();
    while !interrupt.load(Ordering::SeqCst) && !states.is_empty() {
        if look(group, &revs, &mut states, emit, interrupt).await {
            break;
        }
        let wait = next_wait(&states, origin.polls());
        let deadline = Instant::now() + wait;
        origin.wait(wait, interrupt).await;
        // Woken early by an origin told of every change (events): the refs moved, which is a
        // reason to try the failed mirrors again now (a ref that did not exist, a target that
        // failed); their backoff keeps growing if they fail again.
        if !origin.polls() && Instant::now() < deadline {
            for s in &mut states {
                s.retry_at = None;
            }
        }
    }
    for s in &states {
        emit.emit(&s.mirror.name, &Event::Stopped);
    }
    states.into_iter().map(|s| MirrorOutcome { name: s.mirror.name.clone(), outcome: s.outcome }).collect()
}

/// One look at the group's refs, and the steps it calls for. `true`: the interrupt stopped a
/// step (the watch ends).
async fn look(
    group: &Group<'_>,
    revs: &[String],
    states: &mut [State<'_, '_>],
    emit: &Emit<'_>,
    interrupt: &AtomicBool,
) -> bool {
    let now = Instant::now();
    // Mirrors waiting for their retry time are left out of this look, also of its errors.
    let waiting = |s: &State<'_, '_>| s.retry_at.is_some_and(|at| now < at);
    if let Err(e) = group.origin.refresh(revs).await {
        let error = Arc::new(Error::Origin(e));
        let mut stopping = false;
        for s in states.iter_mut().filter(|s| !waiting(s)) {
            stopping |= s.failed(error.clone(), emit, interrupt);
        }
        return stopping;
    }
    let resolved: BTreeMap<&str, Result<Resolved, Arc<Error>>> = revs
        .iter()
        .map(|rev| (rev.as_str(), group.repo.resolve(rev).map_err(|e| Arc::new(Error::Sync(e.into())))))
        .collect();
    let mut stopping = false;
    let mut steps = Vec::new();
    for s in states.iter_mut().filter(|s| !waiting(s)) {
        match &resolved[s.mirror.rev.as_str()] {
            Err(error) => stopping |= s.failed(error.clone(), emit, interrupt),
            Ok(to) if s.due(now, to) => steps.push(step_of(group.repo, s, *to, emit, interrupt)),
            Ok(_) => {}
        }
    }
    for stopped in futures::future::join_all(steps).await {
        stopping |= stopped;
    }
    stopping
}

/// A mirror's step, and what follows from its result. `true`: the interrupt stopped it.
async fn step_of(repo: &Repo, s: &mut State<'_, '_>, to: Resolved, emit: &Emit<'_>, interrupt: &AtomicBool) -> bool {
    match step(repo, s, to, emit, interrupt).await {
        Ok(()) => {
            s.succeeded();
            false
        }
        Err(e) => s.failed(Arc::new(e), emit, interrupt),
    }
}

/// How long the group waits on its origin after a look.
fn next_wait(states: &[State<'_, '_>], polls: bool) -> Duration {
    let now = Instant::now();
    let mut wait = FOREVER;
    for s in states {
        let until = |at: Instant| at.saturating_duration_since(now);
        wait = wait.min(match s.retry_at {
            Some(at) => until(at),
            None => {
                let verify = s.next_verify().map_or(FOREVER, until);
                // Told of every change (events): wake only for the next scheduled verify.
                if polls { verify.min(s.mirror.options.interval) } else { verify }
            }
        });
    }
    wait
}

/// Where a mirror's rolling verify position is kept: the target's (current generation's)
/// `.treesync/`, or `None` when it keeps no auxiliary files (then the watch keeps it).
async fn position_backend<'a>(s: &State<'_, 'a>) -> Result<Option<Held<'a>>, Error> {
    let held = match &s.target {
        Target::Plain(backend) => Held::Borrowed(*backend),
        Target::Generations(host, _) => match generation::current_backend(*host).await? {
            Some(current) => Held::Owned(current),
            None => return Err(generation::Error::NotAtomic { target: host.to_string() }.into()),
        },
    };
    Ok(held.get().capabilities().aux_store.then_some(held))
}

/// A backend borrowed from the mirror, or opened for the current generation.
enum Held<'a> {
    Borrowed(&'a dyn treesync_core::Backend),
    Owned(Arc<dyn treesync_core::Backend>),
}

impl Held<'_> {
    fn get(&self) -> &dyn treesync_core::Backend {
        match self {
            Held::Borrowed(b) => *b,
            Held::Owned(b) => &**b,
        }
    }
}

/// The slice of `n` the next verify of `s` checks.
async fn pick_slice(s: &State<'_, '_>, n: u32) -> Result<treesync_core::slice::Slice, Error> {
    match position_backend(s).await? {
        Some(b) => Ok(treesync_core::slice::start(b.get(), treesync_core::slice::Pick::Next { n }).await?),
        None => Ok(treesync_core::slice::Slice::new(s.next_slice.clamp(1, n), n)?),
    }
}

/// The sync to the commit of this look, and the scheduled verify, that one mirror calls for.
async fn step(
    repo: &Repo,
    s: &mut State<'_, '_>,
    to: Resolved,
    emit: &Emit<'_>,
    interrupt: &AtomicBool,
) -> Result<(), Error> {
    let (rev, options) = (&s.mirror.rev, &s.mirror.options);
    let progress = &|p: &treesync_core::apply::Progress<'_>| {
        if let Some(on) = &options.on_progress {
            (on.0)(p)
        }
    };
    if s.last != Some(to.commit) {
        s.behind.get_or_insert_with(SystemTime::now);
        // Every mirror of the ref syncs the commit this look resolved, even if the ref moves
        // while they run: the ref by its commit id (with its `:PATH`).
        if options.sync.git_worktree.is_some() && source::subtree_path(rev).is_some() {
            return Err(sync::Error::GitWorktreeSubtree { rev: rev.clone() }.into());
        }
        let pinned = match source::split_subtree(rev) {
            Some((_, path)) => format!("{}:{path}", to.commit),
            None => to.commit.to_string(),
        };
        let out = match &s.target {
            Target::Plain(backend) => sync::sync(repo, &pinned, *backend, &options.sync, progress, interrupt).await?,
            Target::Generations(host, g) => generation::sync(repo, &pinned, *host, g, progress, interrupt).await?.sync,
        };
        s.behind = None;
        if out.applied.total() > 0 || out.resumed.is_some() || s.last.is_none() {
            s.outcome.synced += 1;
            s.last = Some(out.commit);
            emit.emit(&s.mirror.name, &Event::Synced { outcome: Box::new(out) });
        } else {
            s.last = Some(out.commit);
        }
    }
    if let Some(every) = s.verify_period()
        && s.last_verify.elapsed() >= every
    {
        s.last_verify = Instant::now();
        // The slice this verify checks: the next one of the rolling position.
        let slices = options.verify_slices.filter(|n| *n > 1);
        let slice = match slices {
            Some(n) => Some(pick_slice(s, n).await?),
            None => None,
        };
        // With repair, compare and repair under the target's lock and journal, like a sync:
        // never a repair planned against a tree that a sync replaced meanwhile.
        let repair = sync::RepairOptions { sync: options.sync.clone(), slice, ..Default::default() };
        let compare = verify::Options { limits: options.sync.limits, slice, ..Default::default() };
        let (mut report, repaired) = match &s.target {
            Target::Plain(backend) if options.repair => {
                let out = sync::repair(repo, *backend, &repair, progress, interrupt).await?;
                (out.report, out.applied)
            }
            Target::Plain(backend) => (verify::verify(repo, *backend, &compare, &|_| {}, interrupt).await?, None),
            Target::Generations(host, g) if options.repair => {
                let out = generation::repair(repo, *host, g, &repair, progress, interrupt).await?;
                (out.repair.report, out.repair.applied)
            }
            Target::Generations(host, _) => {
                let Some(current) = generation::current_backend(*host).await? else {
                    return Err(generation::Error::NotAtomic { target: host.to_string() }.into());
                };
                (verify::verify(repo, &*current, &compare, &|_| {}, interrupt).await?, None)
            }
        };
        if slice.is_some() {
            let position = position_backend(s).await?;
            if let Some(rolling) = verify::roll(&mut report, position.as_ref().map(Held::get), true).await? {
                s.next_slice = rolling.next;
            }
        }
        s.outcome.verified += 1;
        let clean = report.is_clean();
        emit.emit(&s.mirror.name, &Event::Verified { report: Box::new(report), clean });
        if let Some(done) = repaired {
            s.outcome.repaired += 1;
            emit.emit(&s.mirror.name, &Event::Repaired { repaired: done });
        }
    }
    Ok(())
}
