//! # treesync-watch
//!
//! `treesync watch`: keep a target following a ref ([`watch::watch`], many targets at once with
//! [`watch::watch_many`]), woken by inotify when the repository is local or polling it, and run
//! hooks after each sync ([`hook`]: a command, a webhook).
//!
//! It is its own crate because it is the only part of treesync that needs an HTTP client
//! (`reqwest`, `rustls`) and inotify (`notify`): backends and library users who only sync do
//! not build them. Everything it does to a target goes through `treesync_core`'s `sync`,
//! `sync::repair`, `verify` and `generation`.
#![deny(missing_docs)]

pub mod hook;
mod line;
pub mod watch;

pub use line::one_line;
