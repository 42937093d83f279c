use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::{Error, Event, Options, Outcome, one_line};
use crate::backend::Backend;
use crate::generation::{self, Host};
use crate::source::Repo;
use crate::{sync, verify};

/// How long "until the origin wakes us" is, when nothing else is scheduled (a year).
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a watch keeps following the ref: a target synced in place, or one kept in generations.
#[derive(Clone, Copy)]
enum Place<'a> {
    Plain(&'a dyn Backend),
    Generations(&'a dyn Host, &'a generation::Options),
}

/// Keep `backend` following `rev` of `repo` until `interrupt` is set. See the
/// [module docs](super).
///
/// Every `options.interval` the ref is resolved; when it names another commit than the one
/// synced last, the target is synced to it ([`sync::sync()`]). Every `options.verify_every`
/// the target is verified, and with `options.repair` repaired ([`sync::repair()`]). A failed
/// step is reported as [`Event::Error`] and tried again after a wait that starts at the interval
/// and doubles with every failure in a row, up to `options.max_backoff`; a success resets it.
/// An interrupt during a step lets the batches in flight finish (the journal records where it
/// stopped), is reported as [`Event::Stopping`], and ends the watch; the last event is always
/// [`Event::Stopped`].
pub async fn watch(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    options: &Options,
    on_event: &mut (dyn FnMut(&Event) + Send),
    interrupt: &AtomicBool,
) -> Outcome {
    watch_place(repo, rev, Place::Plain(backend), options, on_event, interrupt).await
}

/// [`watch()`] for a target kept in generations (`--atomic`): every sync prepares a generation
/// and switches the target to it ([`generation::sync()`]), verifies look at the current
/// generation, and repairs prepare the next one ([`generation::repair()`]). The generations'
/// `keep`, `grace` and `switch` come from `generations`; everything else of a sync from
/// `options.sync`.
pub async fn watch_generations(
    repo: &Repo,
    rev: &str,
    host: &dyn Host,
    generations: &generation::Options,
    options: &Options,
    on_event: &mut (dyn FnMut(&Event) + Send),
    interrupt: &AtomicBool,
) -> Outcome {
    let g = generation::Options { sync: options.sync.clone(), ..generations.clone() };
    watch_place(repo, rev, Place::Generations(host, &g), options, on_event, interrupt).await
}

async fn watch_place(
    repo: &Repo,
    rev: &str,
    place: Place<'_>,
    options: &Options,
    on_event: &mut (dyn FnMut(&Event) + Send),
    interrupt: &AtomicBool,
) -> Outcome {
    let interval = options.interval;
    let origin: Arc<dyn super::Origin> = options.origin.clone().unwrap_or_else(|| Arc::new(super::Poll));
    on_event(&Event::Watching {
        rev: rev.to_string(),
        repo: repo.path().display().to_string(),
        target: match place {
            Place::Plain(b) => b.to_string(),
            Place::Generations(h, _) => h.to_string(),
        },
        interval,
        waits: origin.describe(interval),
    });
    let mut outcome = Outcome::default();
    let mut last: Option<gix_hash::ObjectId> = None;
    // Since when the target has not held the ref's commit (see `Event::Error::behind_since`).
    let mut behind: Option<SystemTime> = None;
    let mut backoff = interval;
    let mut last_verify = Instant::now();
    while !interrupt.load(Ordering::SeqCst) {
        let step = step(
            repo,
            rev,
            place,
            &*origin,
            options,
            (&mut last, &mut behind),
            &mut last_verify,
            &mut outcome,
            on_event,
            interrupt,
        )
        .await;
        let wait = match step {
            Ok(()) => {
                backoff = interval;
                if origin.polls() {
                    interval
                } else {
                    // Told of every change: wake only for the next scheduled verify.
                    match options.verify_every {
                        Some(every) => every.saturating_sub(last_verify.elapsed()),
                        None => FOREVER,
                    }
                }
            }
            Err(e) if interrupt.load(Ordering::SeqCst) => {
                on_event(&Event::Stopping { message: one_line(&e), error: Arc::new(e) });
                break;
            }
            Err(e) => {
                outcome.errors += 1;
                on_event(&Event::Error {
                    message: one_line(&e),
                    retry_in: backoff,
                    behind_since: behind,
                    error: Arc::new(e),
                });
                let w = backoff;
                backoff = (backoff * 2).min(options.max_backoff.max(interval));
                w
            }
        };
        origin.wait(wait, interrupt).await;
    }
    on_event(&Event::Stopped);
    outcome
}

/// One look at the ref, and the sync and the scheduled verify it calls for.
#[allow(clippy::too_many_arguments)] // the loop's state, passed down once
async fn step(
    repo: &Repo,
    rev: &str,
    place: Place<'_>,
    origin: &dyn super::Origin,
    options: &Options,
    (last, behind): (&mut Option<gix_hash::ObjectId>, &mut Option<SystemTime>),
    last_verify: &mut Instant,
    outcome: &mut Outcome,
    on_event: &mut (dyn FnMut(&Event) + Send),
    interrupt: &AtomicBool,
) -> Result<(), Error> {
    let progress = &|p: &crate::apply::Progress<'_>| {
        if let Some(on) = &options.on_progress {
            (on.0)(p)
        }
    };
    origin.refresh(&[rev.to_string()]).await.map_err(Error::Origin)?;
    let to = repo.resolve(rev).map_err(sync::Error::from)?;
    if *last != Some(to.commit) {
        behind.get_or_insert_with(SystemTime::now);
        let out = match place {
            Place::Plain(backend) => sync::sync(repo, rev, backend, &options.sync, progress, interrupt).await?,
            Place::Generations(host, g) => generation::sync(repo, rev, host, g, progress, interrupt).await?.sync,
        };
        *behind = None;
        if out.applied.total() > 0 || out.resumed.is_some() || last.is_none() {
            outcome.synced += 1;
            *last = Some(out.commit);
            on_event(&Event::Synced { outcome: Box::new(out) });
        } else {
            *last = Some(out.commit);
        }
    }
    if let Some(every) = options.verify_every
        && last_verify.elapsed() >= every
    {
        *last_verify = Instant::now();
        // With repair, compare and repair under the target's lock and journal, like a sync:
        // never a repair planned against a tree that a sync replaced meanwhile.
        let repair = sync::RepairOptions { sync: options.sync.clone(), ..Default::default() };
        let (report, repaired) = match place {
            Place::Plain(backend) if options.repair => {
                let out = sync::repair(repo, backend, &repair, progress, interrupt).await?;
                (out.report, out.applied)
            }
            Place::Plain(backend) => {
                (verify::verify_with(repo, backend, verify::Level::Stat, options.sync.limits).await?, None)
            }
            Place::Generations(host, g) if options.repair => {
                let out = generation::repair(repo, host, g, &repair, progress, interrupt).await?;
                (out.repair.report, out.repair.applied)
            }
            Place::Generations(host, _) => {
                let Some(current) = generation::current_backend(host).await? else {
                    return Err(generation::Error::NotAtomic { target: host.to_string() }.into());
                };
                (verify::verify_with(repo, &*current, verify::Level::Stat, options.sync.limits).await?, None)
            }
        };
        outcome.verified += 1;
        let clean = report.is_clean();
        on_event(&Event::Verified { report: Box::new(report), clean });
        if let Some(done) = repaired {
            outcome.repaired += 1;
            on_event(&Event::Repaired { repaired: done });
        }
    }
    Ok(())
}
