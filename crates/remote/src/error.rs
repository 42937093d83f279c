use std::path::PathBuf;

/// What went wrong with a remote repository or its cache. Every message names the URL or the
/// path, keeps git's own words, and ends with what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `git` itself could not be started.
    #[error(
        "cannot run git: {source}\n  hint: treesync fetches remote repositories with the git binary: install git (e.g. apt-get install git) and put it on PATH"
    )]
    Spawn {
        /// Why it could not start.
        #[source]
        source: std::io::Error,
    },
    /// Asking the server or fetching from it failed (server down, refusing, no such
    /// repository, credentials missing).
    #[error("{what} {url} failed: {stderr}\n  hint: {}", net_hint(url, stderr))]
    Network {
        /// `asking` (ls-remote) or `fetching from`.
        what: &'static str,
        /// The URL, as given.
        url: String,
        /// git's stderr, on one line.
        stderr: String,
    },
    /// The server has no ref of that name.
    #[error("{url} has no {}\n  hint: `git ls-remote --heads --tags {url}` lists the branches and tags it has", tried.join(" or "))]
    NotFound {
        /// The URL, as given.
        url: String,
        /// The ref names asked for.
        tried: Vec<String>,
    },
    /// The rev does not start with a ref name (a commit id, `HEAD`, `@{…}`).
    #[error(
        "cannot follow {rev:?} of a remote repository: {why}\n  hint: name a branch, a tag or a full ref (main, v2.1, refs/heads/main), optionally followed by ~N, ^ or :PATH (main~1, main:docs)"
    )]
    BadRev {
        /// The rev, as given.
        rev: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A git command on the cache repository failed.
    #[error("git {args} in the cache repository {} failed: {stderr}\n  hint: the cache can be removed (rm -r {}); treesync fetches again", path.display(), path.display())]
    Cache {
        /// The cache repository.
        path: PathBuf,
        /// The git command's arguments.
        args: String,
        /// git's stderr, on one line.
        stderr: String,
    },
    /// The cache directory cannot be created or written.
    #[error("cannot create the cache directory {}: {source}\n  hint: pass --cache-dir DIR (or cache_dir in treesync.toml, or $TREESYNC_CACHE_DIR) naming a directory treesync may write", path.display())]
    CacheDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No cache directory is known.
    #[error(
        "no cache directory for remote repositories: neither $TREESYNC_CACHE_DIR, $XDG_CACHE_HOME nor $HOME is set\n  hint: pass --cache-dir DIR (or set $TREESYNC_CACHE_DIR)"
    )]
    NoCacheDir,
    /// The cache repository records another URL (a hash collision, or a directory made by hand).
    #[error("the cache repository {} mirrors {recorded:?}, not {url:?}\n  hint: remove it (rm -r {}) or pass another --cache-dir", path.display(), path.display())]
    OtherUrl {
        /// The cache repository.
        path: PathBuf,
        /// Its `remote.origin.url`.
        recorded: String,
        /// The URL asked for.
        url: String,
    },
    /// The cache repository's lock could not be taken.
    #[error("cannot lock {}: {source}\n  hint: the cache directory must be writable and on a filesystem with flock (not NFS without lock support)", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What to do after a network failure, from git's words.
fn net_hint(url: &str, stderr: &str) -> String {
    let s = stderr.to_ascii_lowercase();
    let check = format!("`git ls-remote {url}` shows what treesync sees");
    if ["could not read username", "authentication failed", "permission denied", "terminal prompts disabled"]
        .iter()
        .any(|w| s.contains(w))
    {
        format!(
            "git needs credentials it may not ask for: set up a credential helper or an ssh key so that {check} without a prompt"
        )
    } else if [
        "not found",
        "does not appear to be a git repository",
        "not exported",
        "no such repository",
        "access denied",
    ]
    .iter()
    .any(|w| s.contains(w))
    {
        format!("check the URL (is the repository there?); {check}")
    } else {
        format!("is the server up? {check}")
    }
}

impl Error {
    /// A git failure on the cache repository at `path` (a [`Error::Network`] stays one).
    pub(crate) fn in_cache(self, path: &std::path::Path) -> Error {
        match self {
            Error::Cache { args, stderr, .. } => Error::Cache { path: path.to_path_buf(), args, stderr },
            other => other,
        }
    }
}
