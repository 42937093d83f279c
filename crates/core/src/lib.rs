//! # treesync-core
//!
//! Keeping a read-only working tree in sync with a git repository usually means `git checkout`,
//! which `lstat()`s every file to look for local changes — minutes on a slow NAS even when ten
//! files changed. Nobody but the tool writes such a tree, so treesync remembers which tree it
//! last wrote, diffs that tree against the new one inside the object database, and turns the
//! difference into a [`Plan`] of abstract [`Op`]s that a [`Backend`] executes.
//!
//! * [`Repo`] opens a repository and resolves revisions; [`plan::plan`] diffs two trees.
//! * [`apply::apply`] runs a plan on a backend within its [`backend::Policy`].
//! * [`sync::sync`] does the whole job with a lock and a journal in `.treesync/state`.
//! * [`MemoryBackend`] is the reference backend; [`policy`] has wrappers (count, fail, limit).
//!
//! ```
//! use std::sync::{Arc, atomic::AtomicBool};
//! use treesync_core::{MemoryBackend, Repo, sync};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let git = |args: &[&str]| std::process::Command::new("git").current_dir(dir.path()).args(args).output();
//! # git(&["init", "-q", "-b", "main"])?;
//! # std::fs::write(dir.path().join("hello.txt"), "hi\n")?;
//! # git(&["add", "."])?;
//! # git(&["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "one"])?;
//! let repo = Repo::open(dir.path())?;
//! let target = MemoryBackend::new();
//! let options = sync::Options { backend_name: "memory".into(), ..Default::default() };
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! let outcome = runtime.block_on(sync::sync(&repo, "main", &target, &options, &|_| {}, &AtomicBool::new(false)))?;
//! assert_eq!(outcome.applied.write, 1);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod apply;
pub mod backend;
pub mod gitworktree;
pub mod memory;
pub mod op;
pub mod path;
pub mod plan;
pub mod policy;
pub mod source;
pub mod state;
pub mod sync;
pub mod verify;

pub use backend::Backend;
pub use gix_hash::ObjectId;
pub use memory::MemoryBackend;
pub use op::{Op, OpCounts, OpKind, Phase, Plan};
pub use path::RelPath;
pub use source::Repo;
