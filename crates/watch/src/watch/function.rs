use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::many::{Group, Mirror, Place, watch_many};
use super::{Event, Options, Outcome};
use treesync_core::backend::Backend;
use treesync_core::generation::{self, Host};
use treesync_core::source::Repo;

/// Keep `backend` following `rev` of `repo` until `interrupt` is set. See the
/// [module docs](super).
///
/// Every `options.interval` the ref is resolved; when it names another commit than the one
/// synced last, the target is synced to it ([`treesync_core::sync::sync()`]). Every
/// `options.verify_every` the target is verified, and with `options.repair` repaired
/// ([`treesync_core::sync::repair()`]). A failed step is reported as [`Event::Error`] and tried again after a wait that starts at the interval
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
    watch_place(repo, rev, Place::Generations(host, generations), options, on_event, interrupt).await
}

/// One group of one mirror: the engine of [`watch_many()`](super::watch_many()).
async fn watch_place(
    repo: &Repo,
    rev: &str,
    place: Place<'_>,
    options: &Options,
    on_event: &mut (dyn FnMut(&Event) + Send),
    interrupt: &AtomicBool,
) -> Outcome {
    let origin: Arc<dyn super::Origin> = options.origin.clone().unwrap_or_else(|| Arc::new(super::Poll));
    let mirror = Mirror { name: String::new(), rev: rev.to_string(), place, options: options.clone() };
    let group = Group { repo, origin, mirrors: vec![mirror] };
    let mut handler = |_: &str, event: &Event| on_event(event);
    let mut outcomes = watch_many(std::slice::from_ref(&group), &mut handler, interrupt).await;
    outcomes.pop().map(|m| m.outcome).expect("one mirror, one outcome")
}
