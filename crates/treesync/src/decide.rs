//! What kind of place an opened target is — plain, or kept in generations — decided once, where
//! the target is opened, and the operations on it: [`Place::sync`], [`Place::verify`],
//! [`Place::repair`], [`Place::watched`]. The `treesync` binary and a library user make the
//! same decision through the same call.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use treesync_core::apply::Progress;
use treesync_core::generation::{self, Host};
use treesync_core::{Backend, Repo, sync, verify};

use crate::open::{OpenError, Opened, TargetOptions, generations_of};
use crate::target::Target;

/// `--switch`, the `switch` key: how a target kept in generations is switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum SwitchMode {
    /// Exchange where the filesystem can, else symlink (or what the target uses already).
    Auto,
    /// A symlink replaced by a rename.
    Symlink,
    /// renameat2 RENAME_EXCHANGE of two directories.
    Exchange,
}

/// What a command means to do with a target, which decides how its generations are looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Read it (`status`, `verify`, a repair): a target with generations is read in its current
    /// generation.
    Read,
    /// Write it (`sync`, `plan`, `watch`): `Some(true)` keeps it in generations (`--atomic`),
    /// `Some(false)` stops (`--no-atomic`), `None` keeps what the target is.
    Write(Option<bool>),
}

/// What kind of place a target is.
#[derive(Clone)]
pub enum PlaceKind {
    /// A plain target: syncs write into it.
    Plain,
    /// Kept in generations: a sync prepares a generation and switches the target to it (the
    /// switch the generations' record names, or the one [`generation::Options::switch`] asks).
    Generations(Arc<dyn Host>),
    /// A plain target from now on that still has generations: to leave (a sync first makes the
    /// target a plain directory and removes retired generations past their grace), or to read
    /// in (its current generation). With `--no-atomic` (`Intent::Write(Some(false))`) also a
    /// target without a home: leaving unmarks a generation whose home is gone.
    Leaving(Arc<dyn Host>),
}

impl std::fmt::Debug for PlaceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaceKind::Plain => f.write_str("Plain"),
            PlaceKind::Generations(h) => write!(f, "Generations({h})"),
            PlaceKind::Leaving(h) => write!(f, "Leaving({h})"),
        }
    }
}

/// An opened target and what kind of place it is ([`Place::open`]).
#[derive(Debug, Clone)]
pub struct Place {
    /// The target as [`crate::open()`] opened it.
    pub opened: Opened,
    /// Plain, or kept in generations.
    pub kind: PlaceKind,
}

/// A sync of a [`Place`]: the sync, and for a target kept in generations what preparing and
/// switching did, or what leaving them did.
#[derive(Debug)]
pub struct Synced {
    /// The sync (of the generation prepared, for a target kept in generations).
    pub outcome: sync::Outcome,
    /// The generation prepared and switched to.
    pub generation: Option<generation::Outcome>,
    /// What leaving the generations did (`--no-atomic`).
    pub left: Option<generation::LeaveOutcome>,
}

/// Why a place could not be decided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    /// The target cannot be kept in generations (`--atomic` on a bucket), or its generations
    /// not opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Looking at the generations failed, or the target is a generation whose home is gone.
    #[error(transparent)]
    Generations(#[from] generation::Error),
}

impl Place {
    /// Open `target` with `options` ([`crate::open()`]) and decide what kind of place it is
    /// for `intent`.
    pub async fn open(target: &Target, options: &TargetOptions, intent: Intent) -> Result<Place, PlaceError> {
        let opened = crate::open(target, options)?;
        Place::of(target, opened, options, intent).await
    }

    /// What kind of place `target`, opened as `opened` with `options`, is for `intent`: the
    /// one decision about generations.
    pub async fn of(
        target: &Target,
        opened: Opened,
        options: &TargetOptions,
        intent: Intent,
    ) -> Result<Place, PlaceError> {
        let host = generations_of(target, &opened, options);
        let kind = match (intent, host) {
            (Intent::Write(Some(true)), Err(e)) => return Err(e.into()),
            (_, Err(_)) => PlaceKind::Plain,
            (Intent::Read, Ok(h)) => match generation::has_home(&*h).await? {
                false => PlaceKind::Plain,
                true if generation::kept(&*h).await? => PlaceKind::Generations(h),
                true => PlaceKind::Leaving(h),
            },
            (Intent::Write(Some(true)), Ok(h)) => PlaceKind::Generations(h),
            (Intent::Write(wanted), Ok(h)) if !generation::has_home(&*h).await? => {
                if wanted.is_none() {
                    // A generation whose home is gone is refused, saying how to go on.
                    generation::orphaned(&*h, &*opened.backend).await?;
                }
                // --no-atomic on a generation whose home is gone: leaving makes it plain.
                if wanted == Some(false) { PlaceKind::Leaving(h) } else { PlaceKind::Plain }
            }
            (Intent::Write(wanted), Ok(h)) => match wanted.unwrap_or(generation::kept(&*h).await?) {
                true => PlaceKind::Generations(h),
                false => PlaceKind::Leaving(h),
            },
        };
        Ok(Place { opened, kind })
    }

    /// The generations of the target, if it has any.
    pub fn host(&self) -> Option<&Arc<dyn Host>> {
        match &self.kind {
            PlaceKind::Plain => None,
            PlaceKind::Generations(h) | PlaceKind::Leaving(h) => Some(h),
        }
    }

    /// Whether a sync prepares a generation and switches.
    pub fn is_atomic(&self) -> bool {
        matches!(self.kind, PlaceKind::Generations(_))
    }

    /// Sync `rev` to the target: into it, or into a generation then switched to (leaving the
    /// generations first when the target stops being kept in them, unless a dry run).
    /// `options.sync` is the sync's; the rest is used by a target kept in generations.
    pub async fn sync(
        &self,
        repo: &Repo,
        rev: &str,
        options: &generation::Options,
        progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
        interrupt: &AtomicBool,
    ) -> Result<Synced, generation::Error> {
        let left = match &self.kind {
            PlaceKind::Leaving(h) if !options.sync.dry_run => Some(generation::leave(&**h, options).await?),
            _ => None,
        };
        Ok(match &self.kind {
            PlaceKind::Generations(h) => {
                let g = generation::sync(repo, rev, &**h, options, progress, interrupt).await?;
                Synced { outcome: g.sync.clone(), generation: Some(g), left }
            }
            _ => {
                let outcome = sync::sync(repo, rev, &*self.opened.backend, &options.sync, progress, interrupt).await?;
                Synced { outcome, generation: None, left }
            }
        })
    }

    /// Leave the generations of a target that stops being kept in them, which is a plain
    /// target from then on; `None` when there is nothing to leave. [`Place::sync`] leaves them
    /// first when this was not called.
    pub async fn leave(
        &mut self,
        options: &generation::Options,
    ) -> Result<Option<generation::LeaveOutcome>, generation::Error> {
        match &self.kind {
            PlaceKind::Leaving(h) => {
                let left = generation::leave(&**h, options).await?;
                self.kind = PlaceKind::Plain;
                Ok(Some(left))
            }
            _ => Ok(None),
        }
    }

    /// Where a plan of the next sync starts from: the target, or the generation the next sync
    /// of a target kept in generations brings up to date (`None`: it writes a first generation
    /// in full, from nothing).
    pub async fn planned_from(
        &self,
        options: &generation::Options,
    ) -> Result<Option<Arc<dyn Backend>>, generation::Error> {
        match &self.kind {
            PlaceKind::Generations(h) => Ok(generation::preview(&**h, options).await?.map(|at| h.open(&at))),
            _ => Ok(Some(self.opened.backend.clone())),
        }
    }

    /// The backend a reader reads: the current generation of a target with generations, else
    /// the target's own.
    pub async fn reader(&self) -> Result<Arc<dyn Backend>, generation::Error> {
        match self.host() {
            Some(h) => Ok(generation::current_backend(&**h).await?.unwrap_or_else(|| self.opened.backend.clone())),
            None => Ok(self.opened.backend.clone()),
        }
    }

    /// Compare what the target holds (its current generation) with the synced tree.
    pub async fn verify(
        &self,
        repo: &Repo,
        options: &verify::Options,
        progress: &(dyn Fn(&verify::Progress) + Send + Sync),
        interrupt: &AtomicBool,
    ) -> Result<verify::Report, generation::Error> {
        let backend = self.reader().await?;
        let verified = verify::verify(repo, &*backend, options, progress, interrupt).await;
        verified.map_err(|e| generation::Error::Sync(sync::Error::Verify(e)))
    }

    /// Repair what differs: in place, or for a target kept in generations into a new generation
    /// that is then switched to (never writing into the current one).
    pub async fn repair(
        &self,
        repo: &Repo,
        options: &sync::RepairOptions,
        progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
        interrupt: &AtomicBool,
    ) -> Result<Repaired, generation::Error> {
        match &self.kind {
            PlaceKind::Generations(h) => {
                let g = generation::Options { sync: options.sync.clone(), ..Default::default() };
                let r = generation::repair(repo, &**h, &g, options, progress, interrupt).await?;
                Ok(Repaired { outcome: r.repair.clone(), generation: Some(r) })
            }
            _ => {
                let backend = self.reader().await?;
                let outcome = sync::repair(repo, &*backend, options, progress, interrupt).await?;
                Ok(Repaired { outcome, generation: None })
            }
        }
    }

    /// Follow `rev` into the target until `interrupt` ([`treesync_watch::watch`]): every new
    /// commit synced as [`Place::sync`] syncs (`generations` for a target kept in them,
    /// `options.sync` for every sync), each thing that happens told to `on_event`. Leave the
    /// generations of a [`PlaceKind::Leaving`] target first ([`Place::leave`]).
    pub async fn watch(
        &self,
        repo: &Repo,
        rev: &str,
        generations: &generation::Options,
        options: &treesync_watch::watch::Options,
        on_event: &mut (dyn FnMut(&treesync_watch::watch::Event) + Send),
        interrupt: &AtomicBool,
    ) -> treesync_watch::watch::Outcome {
        use treesync_watch::watch;
        match &self.kind {
            PlaceKind::Generations(h) => {
                watch::watch_generations(repo, rev, &**h, generations, options, on_event, interrupt).await
            }
            _ => watch::watch(repo, rev, &*self.opened.backend, options, on_event, interrupt).await,
        }
    }

    /// The place a watch of many mirrors syncs ([`treesync_watch::watch::watch_many`]), with
    /// `options` for a target kept in generations.
    pub fn watched<'a>(&'a self, options: &'a generation::Options) -> treesync_watch::watch::Place<'a> {
        match &self.kind {
            PlaceKind::Generations(h) => treesync_watch::watch::Place::Generations(&**h, options),
            _ => treesync_watch::watch::Place::Plain(&*self.opened.backend),
        }
    }
}

/// A repair of a [`Place`].
#[derive(Debug)]
pub struct Repaired {
    /// The repair (of the new generation, for a target kept in generations).
    pub outcome: sync::RepairOutcome,
    /// For a target kept in generations: the generation prepared and switched to.
    pub generation: Option<generation::RepairOutcome>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::result_large_err)] // the result as `Place::open` gives it
    fn place(target: &str, intent: Intent) -> Result<Place, PlaceError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(Place::open(&Target::parse(target).expect("target"), &TargetOptions::default(), intent))
    }

    #[test]
    fn a_new_directory_is_plain_unless_atomic_is_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let site = dir.path().join("site");
        let site = site.to_str().expect("utf8");
        for intent in [Intent::Read, Intent::Write(None)] {
            let p = place(site, intent).expect("a directory");
            assert!(matches!(p.kind, PlaceKind::Plain) && p.host().is_none(), "{intent:?}: {:?}", p.kind);
        }
        // --no-atomic leaves what generations there are (none here: leaving only unmarks).
        let p = place(site, Intent::Write(Some(false))).expect("a directory");
        assert!(matches!(p.kind, PlaceKind::Leaving(_)) && !p.is_atomic(), "{:?}", p.kind);
        let p = place(site, Intent::Write(Some(true))).expect("a directory can be kept in generations");
        assert!(p.is_atomic(), "{:?}", p.kind);
        assert_eq!(p.host().expect("its generations").home_name(), ".site.treesync");
    }

    #[test]
    fn a_bucket_is_plain_and_refuses_atomic_with_a_hint() {
        assert!(matches!(place("memory://", Intent::Write(None)).expect("plain").kind, PlaceKind::Plain));
        let e = place("memory://", Intent::Write(Some(true))).expect_err("refused").to_string();
        assert!(e.contains("a bucket has no atomic switch of many keys") && e.contains("hint: "), "{e}");
    }
}
