//! [`Remote::update`]: ask the server (one request), fetch only what moved (one more).

use crate::{Error, Remote};

/// What an update did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Each rev asked for, in order.
    pub refs: Vec<Updated>,
    /// Requests made to the server: 1 (the ask), 2 when something was fetched.
    pub requests: u32,
}

/// One rev an update looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    /// The rev, as given.
    pub rev: String,
    /// The full ref name it stands for (`refs/heads/main`).
    pub name: String,
    /// The ref's value on the server, and now in the cache (hex).
    pub id: String,
    /// Whether this update fetched it (it moved, or was not in the cache).
    pub fetched: bool,
}

impl Remote {
    /// Bring the cache up to date for `revs`: one `ls-remote` for all of them; when a ref's
    /// value differs from the cache's, one `fetch` of the refs that moved (under the lock;
    /// refs another process fetched meanwhile are not fetched again).
    pub fn update(&self, revs: &[String]) -> Result<Outcome, Error> {
        let listed = self.ls_refs(revs)?;
        let mut requests = 1;
        let names: Vec<String> = listed.iter().map(|l| l.name.clone()).collect();
        let stale = |cached: &[(String, String)]| -> Vec<String> {
            let mut stale: Vec<String> = listed
                .iter()
                .filter(|l| !cached.iter().any(|(n, id)| *n == l.name && *id == l.id))
                .map(|l| l.name.clone())
                .collect();
            stale.dedup();
            stale
        };
        let mut fetched = Vec::new();
        if !stale(&self.local_refs(&names)?).is_empty() {
            let _guard = self.lock()?;
            // Another process may have fetched while this one waited for the lock.
            let stale = stale(&self.local_refs(&names)?);
            if !stale.is_empty() {
                self.fetch_locked(&stale)?;
                requests += 1;
                fetched = stale;
            }
        }
        Ok(Outcome {
            refs: listed
                .into_iter()
                .map(|l| Updated { fetched: fetched.contains(&l.name), rev: l.rev, name: l.name, id: l.id })
                .collect(),
            requests,
        })
    }
}
