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
//! * [`sync::sync`] does the whole job with a lock and a journal in `.treesync/state`;
//!   [`sync::repair`] brings a drifted target back the same way.
//! * `treesync_watch::watch::watch` keeps a target following a ref, telling what happens as
//!   typed events (its own crate: it alone needs HTTP and inotify).
//! * [`adopt::adopt`] takes over a git clone as it is, recording its commit as synced.
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
//!
//! Lower down, the same job step by step: plan a tree-to-tree diff in the object database, look
//! at it, and apply it to a backend composed of policies (here: count every call, and at most
//! two calls in flight). Any [`Backend`] fits: `treesync_backend_local::LocalBackend`,
//! `treesync_backend_nfs::open(…)`, `treesync_backend_s3::open(…)`, or your own.
//!
//! ```
//! use std::sync::{Arc, atomic::AtomicBool};
//! use treesync_core::policy::{Budgets, Count, Gate};
//! use treesync_core::source::BlobSource;
//! use treesync_core::{MemoryBackend, Repo, apply, plan};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let git = |args: &[&str]| std::process::Command::new("git").current_dir(dir.path()).args(args).output();
//! # git(&["init", "-q", "-b", "main"])?;
//! # std::fs::create_dir(dir.path().join("src"))?;
//! # std::fs::write(dir.path().join("src/a.rs"), "fn a() {}\n")?;
//! # git(&["add", "."])?;
//! # git(&["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "one"])?;
//! # std::fs::write(dir.path().join("src/b.rs"), "fn b() {}\n")?;
//! # git(&["add", "."])?;
//! # git(&["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", "two"])?;
//! let repo = Repo::open(dir.path())?;
//! let (old, new) = (repo.resolve("main~1")?, repo.resolve("main")?);
//!
//! // The whole first tree, then only the difference (one write: src/b.rs).
//! let first = repo.with_objects(|odb| plan::plan(odb, None, old.tree))?;
//! let next = repo.with_objects(|odb| plan::plan(odb, Some(old.tree), new.tree))?;
//! assert_eq!((next.counts.write, next.counts.mkdir), (1, 0));
//! for phase in &next.phases {
//!     println!("{}: {} ops", phase.name, phase.ops.len());
//! }
//!
//! let memory = MemoryBackend::new();
//! let backend = Budgets::new(Count::new(memory.clone()), Gate::fixed(1), Gate::fixed(2));
//! let blobs: Arc<dyn BlobSource> = Arc::new(repo.clone());
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! for plan in [&first, &next] {
//!     let done = rt.block_on(apply::apply(plan, &backend, &blobs, apply::Options::default(), &|_| {}, &AtomicBool::new(false)))?;
//!     assert_eq!(done.counts.total(), plan.counts.total());
//! }
//! assert!(memory.snapshot().contains_key(&b"src/b.rs"[..]));
//! # Ok(()) }
//! ```
//!
//! (`apply` alone keeps no journal: [`sync::sync`] adds the lock, the state file and the
//! resume of interrupted runs around it.)
#![deny(missing_docs)]

pub mod adopt;
pub mod apply;
pub mod generation;
pub mod gitworktree;
pub mod index_delta;
pub mod oracle;
pub mod plan;
pub mod slice;
pub mod state;
pub mod submodule;
pub mod sync;
pub mod verify;

// The backend vocabulary (`treesync-backend`) and the content layer (`treesync-content`),
// under the names they had when they were modules of this crate.
pub use treesync_backend::{backend, conversion, delegate_backend, duration, json, lock, memory, op, path, policy};
pub use treesync_content::{convert, export, lfs, limits, select, smudge, source};

pub use backend::Backend;
pub use gix_hash::ObjectId;
pub use memory::MemoryBackend;
pub use op::{Op, OpCounts, OpKind, Phase, Plan};
pub use path::RelPath;
pub use source::Repo;
