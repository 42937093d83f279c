//! [`Remote::ls_ref`]: ask the server what a ref points at — one `ls-refs` request.

use crate::{Error, Remote, RemoteRev, git};

/// A ref as the server has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The rev asked for, as given.
    pub rev: String,
    /// The full ref name it stands for on the server (`refs/heads/main`).
    pub name: String,
    /// Its value (hex): a commit, or an annotated tag.
    pub id: String,
}

impl Remote {
    /// What `rev` (a branch, tag or full ref name, optionally with `~N`, `^` or `:PATH`) points
    /// at on the server: one `git ls-remote` (protocol v2 `ls-refs`).
    pub fn ls_ref(&self, rev: &str) -> Result<Outcome, Error> {
        let mut out = self.ls_refs(&[rev.to_string()])?;
        Ok(out.pop().expect("one outcome per rev"))
    }

    /// [`ls_ref`](Remote::ls_ref) of several revs in one request.
    pub fn ls_refs(&self, revs: &[String]) -> Result<Vec<Outcome>, Error> {
        let parsed = revs.iter().map(|r| RemoteRev::parse(r)).collect::<Result<Vec<_>, _>>()?;
        let mut args = vec!["ls-remote", "--refs"];
        // With a ref prefix the server sends only branches and tags, not every ref it has; a
        // full branch name (`refs/heads/main`) only branches: no tag list on every look.
        let all = |prefix: &str| parsed.iter().all(|p| p.candidates.iter().all(|c| c.starts_with(prefix)));
        if all("refs/heads/") {
            args.push("--heads");
        } else if all("refs/tags/") {
            args.push("--tags");
        } else if parsed.iter().all(RemoteRev::heads_and_tags) {
            args.extend(["--heads", "--tags"]);
        }
        args.push(&self.url);
        let patterns: Vec<&str> = parsed.iter().flat_map(|p| p.candidates.iter().map(String::as_str)).collect();
        args.extend(&patterns);
        let listed = git::network(self.path(), "asking", &self.url, &args)?;
        let refs: Vec<(&str, &str)> = listed.lines().filter_map(|l| l.split_once('\t')).collect();
        parsed
            .into_iter()
            .map(|p| {
                // The first candidate the server has, in git's order (tags before branches).
                let found = p.candidates.iter().find_map(|c| refs.iter().find(|(_, name)| name == c));
                match found {
                    Some((id, name)) => Ok(Outcome { rev: p.rev, name: name.to_string(), id: id.to_string() }),
                    None => Err(Error::NotFound { url: self.url.clone(), tried: p.candidates }),
                }
            })
            .collect()
    }
}
