//! Which remote ref a rev follows.

use crate::Error;

/// The ref of the remote repository a rev depends on: `main~2:docs` follows `main`, which is
/// `refs/tags/main` or else `refs/heads/main` (git's order), fetched under the same name, so
/// the rev resolves in the cache repository as it would in a clone's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRev {
    /// The rev, as given.
    pub rev: String,
    /// The full ref names it may stand for, in the order git tries them.
    pub candidates: Vec<String>,
}

impl RemoteRev {
    /// Parse `rev`: a branch, tag or full ref name (`refs/…`), optionally followed by `~N`,
    /// `^…` or `:PATH`. Commit ids, `HEAD` and `@{…}` are refused ([`Error::BadRev`]): a
    /// server is asked for refs.
    pub fn parse(rev: &str) -> Result<RemoteRev, Error> {
        let bad = |why| Error::BadRev { rev: rev.to_string(), why };
        let base = treesync_core::source::split_subtree(rev).map_or(rev, |(base, _)| base);
        let base = &base[..base.find(['~', '^']).unwrap_or(base.len())];
        if base.is_empty() {
            return Err(bad("it names no ref"));
        }
        if base.contains("@{") || base == "@" {
            return Err(bad("reflog expressions (@{…}) are local to a repository"));
        }
        if base == "HEAD" || base.ends_with("_HEAD") {
            return Err(bad("HEAD is not followed; name the branch"));
        }
        if base.len() >= 7 && base.len() <= 64 && base.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("a commit id never moves, and servers are asked for refs"));
        }
        if base.starts_with('-')
            || base.contains("..")
            || base.bytes().any(|b| b.is_ascii_control() || b" *?[\\:".contains(&b))
        {
            return Err(bad("not a valid ref name"));
        }
        let candidates = if base.starts_with("refs/") {
            vec![base.to_string()]
        } else {
            vec![format!("refs/tags/{base}"), format!("refs/heads/{base}")]
        };
        Ok(RemoteRev { rev: rev.to_string(), candidates })
    }

    /// Whether every candidate is a branch or a tag: `ls-refs` can then be limited to those
    /// prefixes (a server with many other refs, e.g. pull requests, sends only these).
    pub(crate) fn heads_and_tags(&self) -> bool {
        self.candidates.iter().all(|c| c.starts_with("refs/heads/") || c.starts_with("refs/tags/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revs_follow_their_ref() {
        let c = |rev| RemoteRev::parse(rev).expect(rev).candidates;
        assert_eq!(c("main"), ["refs/tags/main", "refs/heads/main"]);
        assert_eq!(c("main~2:docs"), ["refs/tags/main", "refs/heads/main"]);
        assert_eq!(c("release/1.x^"), ["refs/tags/release/1.x", "refs/heads/release/1.x"]);
        assert_eq!(c("refs/pull/7/head"), ["refs/pull/7/head"]);
        for bad in ["HEAD", "0123abcd", "main@{1}", "", ":docs", "a..b", "-x"] {
            assert!(matches!(RemoteRev::parse(bad), Err(Error::BadRev { .. })), "{bad}");
        }
    }
}
