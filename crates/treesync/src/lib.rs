//! treesync as a library: keep a read-only working tree in sync with a git repository.
//!
//! treesync diffs two trees in the object database and turns the difference into a small,
//! printable [`Plan`] of operations — directories to make, files to write, entries to remove —
//! which a [`Backend`] applies to a directory on a local disk, a NAS, an `nfs://` export reached
//! without a mount, or an object store. A journal makes an interrupted sync finish on the next
//! run; a state file on the target records what it holds, so the next sync writes only what
//! changed.
//!
//! This crate is the front door. It turns a target as a person writes it into a backend with the
//! policy the `treesync` binary gives it, and re-exports the core for the rest:
//!
//! 1. [`Target::parse`] a directory or an `nfs://`, `s3://`, `file://` or `memory://` URL;
//! 2. describe what you want with [`Settings`] — every setting of the binary, as a field: its
//!    flag and its `treesync.toml` key are that field ([`settings`]);
//! 3. [`Place::open`] it: the backend [`open()`] chose ([`BackendKind`]) and why, the
//!    [`Concurrency`] it decided — the one place where `jobs` and the NFS write budget meet — and
//!    what kind of place the target is ([`PlaceKind`]: plain, or kept in generations);
//! 4. [`Place::sync`] a revision of a [`Repo`] to it, [`Place::verify`] or [`Place::repair`]
//!    what is there, [`Place::watch`] a ref; [`plan::plan`] plans without applying.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::atomic::AtomicBool;
//! use treesync::{Intent, Place, Repo, Settings, Target};
//!
//! let target = Target::parse("/mnt/nas/site")?; // or nfs://nas/export/site, s3://bucket/site, memory://
//! let settings = Settings::default(); // or flags and a mirror merged: flags.or(mirror)
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let place = rt.block_on(Place::open(&target, &settings.target.options(), Intent::Write(settings.generations.wanted())))?;
//! println!("backend: {}", place.opened.label()); // nfs (auto: /mnt/nas/site is on nfs4 (…), a network filesystem)
//! println!("budgets: {}", place.opened.budgets); // 64 ops in flight, lookups 1, writes adaptive up to 64: …
//! let repo = Repo::open("/srv/git/site.git")?;
//! let options = settings.generations.options(settings.sync_options(&place.opened)?);
//! let synced = rt.block_on(place.sync(&repo, "main", &options, &|_| {}, &AtomicBool::new(false)))?;
//! println!("{} ops in {:?}", synced.outcome.applied.total(), synced.outcome.elapsed);
//! # Ok(())
//! # }
//! ```
//!
//! The examples (`cargo run -p treesync --example NAME`) show the rest: `library` opens any
//! target and syncs, `plan` prints the plan between two revisions, `logging` wraps a backend in
//! a [`Backend`] of its own that logs every operation. A custom backend implements [`Backend`]
//! (see [`core::backend`]); the policy wrappers in [`core::policy`] (limits, latency, counting,
//! fault injection) wrap any backend.

mod decide;
mod open;
mod place;
pub mod settings;
mod target;

pub use decide::{Intent, Place, PlaceError, PlaceKind, Repaired, Synced};
pub use open::{
    BackendKind, BudgetsReport, Concurrency, OpenError, Opened, TargetOptions, WriteJobs, check, generations,
    generations_of, open,
};
pub use place::{check_place, unmanaged_hint};
pub use settings::Settings;
pub use target::{Target, TargetError};
pub use treesync_core::{
    self as core, Backend, MemoryBackend, Op, Phase, Plan, RelPath, Repo, apply, generation, plan, sync, verify,
};
pub use treesync_watch::{hook, watch};
