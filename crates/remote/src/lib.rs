//! treesync's own mirror of a remote git repository, so that `--repo` may be a URL.
//!
//! treesync reads commits from a local object database. For a repository reached by URL
//! (`https://`, `ssh://`, `git://`, `file://`, scp-like `host:path`), a [`Remote`] keeps a bare
//! repository of its own under a cache directory (`CACHE/repos/<name>-<hash of the URL>.git`)
//! holding only the refs that are followed. Each look at a ref costs one small request: `git
//! ls-remote` (protocol v2 `ls-refs`, restricted to `refs/heads/` and `refs/tags/` for a plain
//! name); only when the ref's value differs from the cached one does a `git fetch` of that one
//! ref follow ([`Remote::update`]). The cache repository is then opened like any bare
//! repository, and the rev resolved there is the rev the user gave: refs keep their names.
//!
//! The network is the `git` binary's: it honours the user's credential helpers, ssh config,
//! proxies and `url.<base>.insteadOf` exactly as their own git does, speaks protocol v2 with
//! ref prefixes, and keeps a network client and a TLS stack out of treesync's build. It runs
//! with `GIT_TERMINAL_PROMPT=0`, `protocol.version=2` and no stdin: never a prompt; its stderr
//! is kept in the [`Error`].
//!
//! ```no_run
//! use treesync_remote::{Remote, OpenOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let remote = Remote::open("git://git.example.org/site.git", &OpenOptions::default())?;
//! let outcome = remote.update(&["main".to_string()])?;
//! println!("{} is at {} (fetched: {})", outcome.refs[0].name, outcome.refs[0].id, outcome.refs[0].fetched);
//! let repo = treesync_core::Repo::open(remote.path())?;
//! let commit = repo.resolve("main")?;
//! # let _ = commit; Ok(()) }
//! ```

mod error;
pub mod fetch;
mod git;
pub mod ls_ref;
mod origin;
mod rev;
pub mod update;
mod url;

use std::fs::File;
use std::path::{Path, PathBuf};

pub use error::Error;
pub use rev::RemoteRev;
pub use url::{is_url, readable_name};

/// A remote repository (a URL) and the bare repository that mirrors the refs followed, in a
/// cache directory it owns. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Remote {
    url: String,
    path: PathBuf,
    lock: PathBuf,
}

/// How to [`Remote::open`] a remote.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The cache directory (its `repos/` holds one bare repository per URL); `None`:
    /// [`default_cache_dir()`].
    pub cache_dir: Option<PathBuf>,
}

impl Remote {
    /// The remote at `url`, with its cache repository (created on first use, under the lock;
    /// an existing one must record the same URL as `remote.origin.url`). Does not touch the
    /// network.
    pub fn open(url: &str, options: &OpenOptions) -> Result<Remote, Error> {
        let cache = match &options.cache_dir {
            Some(dir) => dir.clone(),
            None => default_cache_dir()?,
        };
        let repos = cache.join("repos");
        std::fs::create_dir_all(&repos).map_err(|source| Error::CacheDir { path: repos.clone(), source })?;
        let name = readable_name(url);
        let path = repos.join(format!("{name}.git"));
        let lock = repos.join(format!("{name}.lock"));
        let remote = Remote { url: url.to_string(), path, lock };
        if !remote.path.join("config").exists() {
            let _guard = remote.lock()?;
            if !remote.path.join("config").exists() {
                remote.init()?;
            }
        }
        let recorded = git::local(&remote.path, &["config", "--get", "remote.origin.url"])
            .map_err(|e| e.in_cache(&remote.path))?;
        if recorded.trim() != url {
            return Err(Error::OtherUrl {
                path: remote.path.clone(),
                recorded: recorded.trim().to_string(),
                url: url.into(),
            });
        }
        Ok(remote)
    }

    /// The URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The cache repository (bare): open it with [`treesync_core::Repo::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Create the cache repository: in a temporary directory beside it, renamed into place, so
    /// that a half-made repository is never seen.
    fn init(&self) -> Result<(), Error> {
        let tmp = self.path.with_extension("git.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        let tmp_s = tmp.to_string_lossy().into_owned();
        git::local(&self.path, &["init", "--quiet", "--bare", &tmp_s]).map_err(|e| e.in_cache(&self.path))?;
        git::local(&tmp, &["config", "remote.origin.url", &self.url]).map_err(|e| e.in_cache(&self.path))?;
        // Refs are written by fetches only: no reflogs to grow.
        git::local(&tmp, &["config", "core.logAllRefUpdates", "false"]).map_err(|e| e.in_cache(&self.path))?;
        std::fs::rename(&tmp, &self.path).map_err(|source| Error::CacheDir { path: self.path.clone(), source })
    }

    /// Hold the cache repository's lock (a `flock` on `<name>.lock` beside it) until the guard
    /// drops: one process at a time creates or fetches into it.
    fn lock(&self) -> Result<File, Error> {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(|source| Error::Lock { path: self.lock.clone(), source })?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::Lock { path: self.lock.clone(), source: e.into() })?;
        Ok(file)
    }
}

/// The cache directory when none is given: `$TREESYNC_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/treesync`, else `~/.cache/treesync`; root without `$HOME`:
/// `/var/cache/treesync`.
pub fn default_cache_dir() -> Result<PathBuf, Error> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("TREESYNC_CACHE_DIR") {
        return Ok(dir);
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return Ok(dir.join("treesync"));
    }
    if let Some(home) = var("HOME") {
        return Ok(home.join(".cache").join("treesync"));
    }
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from("/var/cache/treesync"));
    }
    Err(Error::NoCacheDir)
}
