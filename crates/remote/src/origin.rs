//! A [`Remote`] as the [`Origin`] of a watch: every look asks the server, fetches what moved.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use treesync_watch::watch::{Origin, OriginError, origin::sleep};

use crate::Remote;

#[async_trait::async_trait]
impl Origin for Remote {
    /// [`Remote::update`], off the async threads.
    async fn refresh(&self, revs: &[String]) -> Result<(), OriginError> {
        let remote = self.clone();
        let revs = revs.to_vec();
        tokio::task::spawn_blocking(move || remote.update(&revs))
            .await
            .map_err(|e| OriginError::from(format!("the update from the server stopped: {e}")))??;
        Ok(())
    }

    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        sleep(max, interrupt).await
    }

    fn describe(&self, interval: Duration) -> String {
        format!("asking {} every {interval:?}", self.url)
    }
}
