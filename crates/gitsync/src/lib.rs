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
/// HTTP clients), redirects not followed for askpass (git-sync's), followed for webhooks.
pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(concat!("treesync-git-sync/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("can't make an HTTP client: {e}"))
}
