//! [`Remote::fetch`]: fetch refs into the cache repository — one request.

use crate::{Error, Remote, git};

/// What a fetch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Each ref fetched: its full name, its value before (none: new) and after.
    pub refs: Vec<Fetched>,
}

/// One ref a fetch brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The full ref name (the same in the cache as on the server).
    pub name: String,
    /// Its value in the cache before the fetch.
    pub before: Option<String>,
    /// Its value now.
    pub after: Option<String>,
}

impl Remote {
    /// Fetch the refs `names` (full names: `refs/heads/main`) from the server into the cache
    /// repository under the same names, forced (a force-push is followed), without tags or
    /// anything else: one `git fetch` (one request), under the cache's lock.
    pub fn fetch(&self, names: &[String]) -> Result<Outcome, Error> {
        let _guard = self.lock()?;
        self.fetch_locked(names)
    }

    /// [`fetch`](Remote::fetch) with the lock held.
    pub(crate) fn fetch_locked(&self, names: &[String]) -> Result<Outcome, Error> {
        if names.is_empty() {
            return Ok(Outcome::default());
        }
        let before = self.local_refs(names)?;
        let refspecs: Vec<String> = names.iter().map(|n| format!("+{n}:{n}")).collect();
        let mut args =
            vec!["fetch", "--quiet", "--no-tags", "--prune", "--no-write-fetch-head", "--no-recurse-submodules"];
        args.push(&self.url);
        args.extend(refspecs.iter().map(String::as_str));
        git::network(self.path(), "fetching from", &self.url, &args)?;
        let after = self.local_refs(names)?;
        let value =
            |refs: &[(String, String)], n: &str| refs.iter().find(|(name, _)| name == n).map(|(_, id)| id.clone());
        Ok(Outcome {
            refs: names
                .iter()
                .map(|n| Fetched { name: n.clone(), before: value(&before, n), after: value(&after, n) })
                .collect(),
        })
    }

    /// The cache's values of the refs `names` that it has: (name, hex id). No network.
    pub(crate) fn local_refs(&self, names: &[String]) -> Result<Vec<(String, String)>, Error> {
        let mut args = vec!["for-each-ref", "--format=%(refname) %(objectname)"];
        args.extend(names.iter().map(String::as_str));
        let out = git::local(self.path(), &args).map_err(|e| e.in_cache(self.path()))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(name, _)| names.iter().any(|n| n == name))
            .map(|(n, id)| (n.to_string(), id.to_string()))
            .collect())
    }
}
