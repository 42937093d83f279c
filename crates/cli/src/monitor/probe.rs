//! [`Probe`]: the watch's origin, wrapped to tell a [`Mirror`] the loop's rhythm.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use treesync_watch::watch::{Origin, OriginError};

use super::Mirror;

/// How often a waiting loop shows a sign of life.
const SLICE: Duration = Duration::from_millis(50);

/// An [`Origin`] that forwards everything to the one it wraps and tells the mirror when a step
/// starts (the loop asks for a refresh first), when it ended (the loop waits), and that the
/// loop is alive while it waits (every 50 ms of the wait).
#[derive(Debug)]
pub(crate) struct Probe {
    inner: Arc<dyn Origin>,
    /// The mirrors of the loop (one group: one repository).
    mirrors: Vec<Mirror>,
}

impl Probe {
    pub(crate) fn new(inner: Arc<dyn Origin>, mirrors: Vec<Mirror>) -> Self {
        Probe { inner, mirrors }
    }
}

#[async_trait::async_trait]
impl Origin for Probe {
    async fn refresh(&self, revs: &[String]) -> Result<(), OriginError> {
        self.mirrors.iter().for_each(Mirror::step_started);
        self.inner.refresh(revs).await
    }

    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        self.mirrors.iter().for_each(Mirror::step_ended);
        let wait = self.inner.wait(max, interrupt);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                () = &mut wait => return,
                () = tokio::time::sleep(SLICE) => self.mirrors.iter().for_each(Mirror::beat),
            }
        }
    }

    fn describe(&self, interval: Duration) -> String {
        self.inner.describe(interval)
    }

    fn polls(&self) -> bool {
        self.inner.polls()
    }
}
