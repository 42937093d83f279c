//! Where a watch learns that its refs may have moved: an [`Origin`].
//!
//! The watch loop asks its origin to [`refresh`](Origin::refresh) before every look at the refs
//! (a remote repository: ask the server, fetch what moved; a local one: nothing), and to
//! [`wait`](Origin::wait) between looks (polling: the whole interval; events: until the ref's
//! files change). [`Poll`] is the origin of a local repository that is looked at every interval.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An origin's error (a server that is down or refuses, a fetch that failed), kept whole with
/// its causes.
pub type OriginError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where a watch learns that the refs it follows may have moved, and how its repository gets
/// their newest commits.
#[async_trait::async_trait]
pub trait Origin: Send + Sync + fmt::Debug {
    /// Before each look at `revs`: make the repository hold their newest commits. A local
    /// repository has nothing to do (the default); a remote one asks its server and fetches
    /// what moved.
    async fn refresh(&self, revs: &[String]) -> Result<(), OriginError> {
        let _ = revs;
        Ok(())
    }

    /// Wait until the refs may have moved, `max` at most, or until `interrupt` is set (checked
    /// at least every 50 ms).
    async fn wait(&self, max: Duration, interrupt: &AtomicBool);

    /// How this origin learns of changes, for the log (e.g. `polling every 5s`).
    fn describe(&self, interval: Duration) -> String;

    /// Whether the refs must be looked at every interval (`true`, the default). An origin told
    /// of every change (events) answers `false`: the watch then waits only until the next
    /// scheduled thing (a retry, a verify), or until the origin wakes it.
    fn polls(&self) -> bool {
        true
    }
}

/// Look at the refs every interval: [`wait`](Origin::wait) sleeps the whole `max`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Poll;

#[async_trait::async_trait]
impl Origin for Poll {
    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        sleep(max, interrupt).await
    }

    fn describe(&self, interval: Duration) -> String {
        format!("polling every {interval:?}")
    }
}

/// Sleep `max`, in slices of 50 ms so that `interrupt` ends the wait at once.
pub async fn sleep(max: Duration, interrupt: &AtomicBool) {
    let deadline = tokio::time::Instant::now() + max;
    while tokio::time::Instant::now() < deadline && !interrupt.load(Ordering::SeqCst) {
        let left = deadline - tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(50).min(left)).await;
    }
}
