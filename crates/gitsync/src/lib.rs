//! # treesync-gitsync
//!
//! `treesync git-sync` (and the binary run under the name `git-sync`): a drop-in for
//! [kubernetes/git-sync](https://github.com/kubernetes/git-sync) v4 — its flags and their
//! environment variables ([`flags`]), its exit codes, its on-disk contract (ROOT a git
//! repository, each commit a linked worktree `ROOT/.worktrees/HASH`, LINK a relative symlink to
//! the current one, switched atomically: [`layout`]), its hooks ([`hooks`]), its error and touch
//! files ([`log`]) and its metrics ([`metrics`]) — where each new commit's worktree is made at
//! the cost of the diff ([`worktree`]) instead of a whole checkout.
//!
//! ```no_run
//! # async fn example() {
//! use std::sync::Arc;
//! use treesync_gitsync::{Config, Log, Metrics, flags, run};
//! let args: Vec<String> = ["--repo", "https://example.com/site.git", "--root", "/git", "--one-time"]
//!     .iter().map(|s| s.to_string()).collect();
//! let parsed = flags::parse(&args, &|k| std::env::var(k).ok()).expect("flags");
//! let config = Config::from_parsed(&parsed, std::path::Path::new("/")).expect("valid");
//! let log = Log::new(config.verbose, config.error_file.clone());
//! let code = run(config, Arc::new(Metrics::default()), log).await;
//! # }
//! ```
#![deny(missing_docs)]

pub mod config;
pub mod flags;
pub mod git;
pub mod hooks;
pub mod layout;
pub mod log;
pub mod metrics;
mod process;
mod run;
pub mod values;
pub mod worktree;

pub use config::{Config, ConfigError};
pub use log::Log;
pub use metrics::Metrics;
pub use run::run;

/// The HTTP client of the webhook and `--askpass-url`: rustls with ring (as treesync's other
/// HTTP clients), redirects not followed for askpass (git-sync's), followed for webhooks (Go's
/// default client, up to 10, as git-sync's `http.DefaultClient`): `follow` says which.
pub(crate) fn http_client(follow: bool) -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(concat!("treesync-git-sync/", env!("CARGO_PKG_VERSION")))
        .redirect(if follow { reqwest::redirect::Policy::limited(10) } else { reqwest::redirect::Policy::none() })
        .build()
        .map_err(|e| format!("can't make an HTTP client: {e}"))
}

/// The most of a response body read from a webhook or `--askpass-url` server (a server that
/// sends more is cut off there; the request's timeout bounds the time).
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// A response's body, at most [`MAX_BODY`] bytes of it, as text.
pub(crate) async fn body_of(mut response: reqwest::Response) -> Result<String, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk[..chunk.len().min(MAX_BODY - body.len())]);
        if body.len() >= MAX_BODY {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}
