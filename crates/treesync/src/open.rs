//! Open a [`Target`] with the policy the `treesync` binary gives it: which backend, and how
//! many operations in flight.

use std::fmt;
use std::sync::Arc;

use treesync_core::Backend;
use treesync_core::policy::{Adaptive, Gate};

use crate::target::{Target, TargetError};

/// Which backend serves a target (`--backend`, the `backend` key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum BackendKind {
    /// Choose from the target: s3 for URLs, nfs for directories on network mounts, else local.
    // (The built-in NFS client for `nfs://` URLs, the in-memory backend for `memory://`.)
    #[default]
    Auto,
    /// Local disks (ext4, xfs, tmpfs, …): wide parallelism, atomic rename into place.
    Local,
    /// Network filesystems mounted here (NFS, SMB, sshfs, …): serialized lookups, each
    /// directory looked up once per run, adaptive write concurrency. With an nfs:// URL: the
    /// built-in NFSv3 client, many calls in flight on one connection, no mount needed.
    Nfs,
    /// Object storage through object_store (s3://, file://, memory:// URLs): concurrent PUTs,
    /// bulk deletes, conditional state writes.
    S3,
    /// The core's in-memory reference backend (`memory://`), for tests and examples.
    #[cfg_attr(feature = "clap", value(hide = true))]
    Memory,
}

impl BackendKind {
    /// The kinds the docs and messages list (`memory` is for tests and examples).
    pub const LISTED: [BackendKind; 4] = [BackendKind::Auto, BackendKind::Local, BackendKind::Nfs, BackendKind::S3];

    /// The name people write (`auto`, `local`, `nfs`, `s3`, `memory`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Local => "local",
            BackendKind::Nfs => "nfs",
            BackendKind::S3 => "s3",
            BackendKind::Memory => "memory",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;

    /// `auto`, `local`, `nfs`, `s3` or `memory`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use BackendKind::*;
        [Auto, Local, Nfs, S3, Memory]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown backend {s:?} (auto, local, nfs, s3 or memory)"))
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many writes an NFS backend keeps in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteJobs {
    /// Adapt to the latency the server shows, within the backend's range — or up to `jobs`
    /// when [`TargetOptions::jobs`] is given.
    #[default]
    Auto,
    /// Exactly this many.
    Fixed(usize),
}

impl std::str::FromStr for WriteJobs {
    type Err = String;

    /// `auto`, or a number of writes of at least 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(WriteJobs::Auto),
            n => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .map(WriteJobs::Fixed)
                .ok_or_else(|| format!("{s:?} is neither a number of writes in flight (1, 8, 32, …) nor `auto`")),
        }
    }
}

impl fmt::Display for WriteJobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteJobs::Auto => f.write_str("auto"),
            WriteJobs::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// How to open a target. The defaults are what the binary uses without flags.
#[derive(Debug, Clone, Default)]
pub struct TargetOptions {
    /// Which backend (default: chosen from the target).
    pub backend: BackendKind,
    /// Operations in flight: batches (local), PUTs (object storage), writes (NFS). On NFS it
    /// is the write budget when `write_jobs` is not given, and the ceiling of an adaptive one
    /// when it is `auto`.
    pub jobs: Option<usize>,
    /// Ops per batch (local).
    pub batch: Option<usize>,
    /// Writes in flight on NFS (`None`: `jobs` if given, else adaptive). A fixed number must
    /// agree with `jobs` when both are given.
    pub write_jobs: Option<WriteJobs>,
    /// Lookups in flight on NFS: a sync's directory probes and verify's scan (`None`: on mounts
    /// the probes adapt between 1 and 16 starting at 8, each directory looked up once, and
    /// verify's read-only scan runs 32 threads; `nfs://` takes 32 for both).
    pub lookup_jobs: Option<usize>,
    /// fsync files and the state before renaming them (local and mounted NFS).
    pub fsync: bool,
    /// Object storage: endpoint, region, plain HTTP, credentials.
    pub s3: treesync_backend_s3::Config,
}

/// What was decided about concurrency when a target was opened: the one place where `jobs`
/// and the NFS budgets meet. [`open()`] gives the backend a policy whose `jobs` is
/// [`Concurrency::jobs`], so an executor that takes the backend's policy (or is given the same
/// `jobs`) keeps exactly that many operations in flight, and the write gate never has more
/// room than that.
#[derive(Debug, Clone)]
pub struct Concurrency {
    /// Operations (batches) the executor keeps in flight.
    pub jobs: usize,
    /// Ops per batch, when [`TargetOptions::batch`] overrides the backend's policy.
    pub batch: Option<usize>,
    /// Directory lookups in flight (NFS backends).
    pub lookups: Option<Gate>,
    /// Writes in flight (NFS backends), fixed or adaptive; live, so it reports what an
    /// adaptive budget did once a run is over.
    pub writes: Option<Gate>,
    /// How it was decided, in words: `writes adapt within 1..=4 (the ceiling is --jobs 4)`.
    pub decided: String,
}

impl Concurrency {
    /// The figures `treesync sync --json` reports as `budgets` (NFS backends; `None` for the
    /// others): the decision, and what the run used of it.
    pub fn report(&self) -> Option<BudgetsReport> {
        let (lookups, writes) = (self.lookups.as_ref()?, self.writes.as_ref()?);
        Some(BudgetsReport {
            jobs: self.jobs,
            decided: self.decided.clone(),
            lookups: lookups.limit(),
            max_lookups_in_flight: lookups.max_in_flight(),
            writes: if writes.is_adaptive() { "adaptive".to_string() } else { writes.limit().to_string() },
            write_ceiling: writes.ceiling(),
            write_limit_final: writes.limit(),
            write_limits: writes.history(),
            max_writes_in_flight: writes.max_in_flight(),
        })
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ops in flight", self.jobs)?;
        if let (Some(l), Some(w)) = (&self.lookups, &self.writes) {
            write!(f, ", lookups {l:?}, writes {w:?}")?;
        }
        write!(f, ": {}", self.decided)
    }
}

/// The `budgets` object of `treesync sync --json` (see docs/json.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct BudgetsReport {
    /// Operations the executor kept in flight at most (`--jobs`, or what the budgets allow).
    pub jobs: usize,
    /// How `jobs` and the write budget were decided.
    pub decided: String,
    /// The lookup budget.
    pub lookups: usize,
    /// The most lookups that were in flight at once.
    pub max_lookups_in_flight: usize,
    /// `adaptive`, or the fixed write budget as a decimal string.
    #[schemars(regex(pattern = r"^(adaptive|[1-9][0-9]*)$"))]
    pub writes: String,
    /// The highest the write budget may go (a fixed budget: its limit).
    pub write_ceiling: usize,
    /// The write limit at the end of the run.
    pub write_limit_final: usize,
    /// The limits an adaptive budget went through, in order; empty for a fixed budget.
    #[schemars(inner(range(min = 1)))]
    pub write_limits: Vec<usize>,
    /// The most writes that were in flight at once.
    pub max_writes_in_flight: usize,
}

/// An opened target: its backend, which one it is and why, and its budgets.
#[derive(Clone)]
pub struct Opened {
    /// The backend, with its policy.
    pub backend: Arc<dyn Backend>,
    /// Which backend serves the target (never [`BackendKind::Auto`]).
    pub kind: BackendKind,
    /// Why this backend, e.g. `auto: /mnt/nas/site is on nfs4 (nas:/export at /mnt/nas), a
    /// network filesystem`.
    pub reason: String,
    /// What was decided about concurrency.
    pub budgets: Concurrency,
}

impl Opened {
    /// `nfs (auto: /mnt/nas/site is on nfs4 (nas:/export at /mnt/nas), a network filesystem)`:
    /// what the state file and `status` record as the backend.
    pub fn label(&self) -> String {
        format!("{} ({})", self.kind, self.reason)
    }

    /// The executor's options that keep [`Concurrency::jobs`] operations in flight, in batches of
    /// [`Concurrency::batch`]: pass them to [`sync::Options::apply`](crate::sync::Options).
    pub fn apply_options(&self) -> treesync_core::apply::Options {
        treesync_core::apply::Options { jobs: Some(self.budgets.jobs), batch: self.budgets.batch }
    }
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened")
            .field("backend", &self.backend.to_string())
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .field("budgets", &self.budgets)
            .finish()
    }
}

/// A target could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The target names no place treesync can write to.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The backend asked for cannot serve this kind of target.
    #[error("backend {backend} {needs}, got {target:?}\n  hint: {hint}")]
    Mismatch {
        /// The backend asked for.
        backend: BackendKind,
        /// The target.
        target: String,
        /// What that backend needs.
        needs: &'static str,
        /// What to do.
        hint: &'static str,
    },
    /// `jobs` and a fixed `write_jobs` disagree: on NFS both name the writes in flight.
    #[error(
        "jobs {jobs} and write_jobs {write_jobs} disagree: on nfs every operation in flight is a write, so jobs is the write budget\n  hint: give one of them (--write-jobs {write_jobs} or --jobs {jobs}), the same number for both, or --write-jobs auto to adapt up to --jobs"
    )]
    Budgets {
        /// `jobs`.
        jobs: usize,
        /// The fixed `write_jobs`.
        write_jobs: usize,
    },
    /// The NFS client failed to start.
    #[error("cannot open the nfs:// target")]
    Nfs(#[source] treesync_core::backend::Error),
    /// An object-storage URL that does not parse or open.
    #[error(transparent)]
    ObjectStore(#[from] treesync_backend_s3::OpenError),
    /// The target cannot be kept in generations (`--atomic`).
    #[error("cannot keep {target} in generations: {why}\n  hint: {hint}")]
    Atomic {
        /// The target.
        target: String,
        /// Why not.
        why: &'static str,
        /// What to do.
        hint: &'static str,
    },
}

/// Which backend serves `target` with `backend`, and why: the rules of [`open()`] without
/// opening anything (only a directory with [`BackendKind::Auto`] looks at the mount table).
pub fn check(target: &Target, backend: BackendKind) -> Result<(BackendKind, String), OpenError> {
    use BackendKind::*;
    let mismatch = |needs, hint| OpenError::Mismatch { backend, target: target.to_string(), needs, hint };
    Ok(match (target, backend) {
        (Target::Nfs { .. }, Auto) => (Nfs, "auto: an nfs:// URL, the built-in NFSv3 client".into()),
        (Target::Nfs { .. }, Nfs) => (Nfs, "--backend nfs with an nfs:// URL: the built-in NFSv3 client".into()),
        (Target::Nfs { .. }, _) => {
            return Err(mismatch("cannot use an NFS URL", "use backend auto or nfs for nfs:// targets"));
        }
        (Target::Memory(_), Auto | Memory) => (Memory, "auto: memory://, the in-memory reference backend".into()),
        (Target::Memory(_), S3) => (S3, "--backend s3 with memory://: object_store's in-memory store".into()),
        (Target::S3(_) | Target::File(_), Auto) => (S3, "auto: the target is a URL".into()),
        (Target::S3(_) | Target::File(_), S3) => (S3, "--backend s3".into()),
        (Target::S3(_) | Target::File(_), Memory) => {
            return Err(mismatch("needs memory://", "use backend auto or s3 for object-storage URLs"));
        }
        (Target::Dir(_), S3) => {
            return Err(mismatch(
                "needs a URL such as s3://BUCKET/PREFIX",
                "use backend auto, local or nfs for a directory",
            ));
        }
        (Target::Dir(_), Memory) => {
            return Err(mismatch("needs memory://", "use backend auto, local or nfs for a directory"));
        }
        (_, Local | Nfs) if target.is_url() => {
            return Err(mismatch("needs a directory", "use backend auto or s3 for object-storage URLs"));
        }
        (_, Local) => (Local, "--backend local".into()),
        (_, Nfs) => (Nfs, "--backend nfs".into()),
        (Target::Dir(dir), _) => {
            let c = treesync_backend_nfs::detect::choose(dir);
            let kind = if c.network { "a network filesystem" } else { "not a network filesystem" };
            (if c.network { Nfs } else { Local }, format!("auto: {}, {kind}", c.reason))
        }
    })
}

/// The write budget of an NFS backend and the ops in flight, decided together from `jobs` and
/// `write_jobs`: they cannot disagree, and the text says how it was decided.
fn nfs_writes(
    options: &TargetOptions,
    default: Adaptive,
) -> Result<(treesync_backend_nfs::Window, usize, String), OpenError> {
    use treesync_backend_nfs::Window as Nfs;
    let range = |a: &Adaptive| format!("{}..={}, starting at {}", a.min, a.max, a.initial);
    Ok(match (options.jobs.map(|n| n.max(1)), options.write_jobs) {
        (None, None | Some(WriteJobs::Auto)) => {
            (Nfs::Adaptive(default), default.max, format!("writes adapt within {} (the default)", range(&default)))
        }
        (Some(n), None) => (Nfs::Fixed(n), n, format!("{n} writes in flight (--jobs {n})")),
        (None, Some(WriteJobs::Fixed(w))) => {
            let w = w.max(1);
            (Nfs::Fixed(w), w, format!("{w} writes in flight (--write-jobs {w})"))
        }
        (Some(n), Some(WriteJobs::Fixed(w))) if n == w.max(1) => {
            (Nfs::Fixed(n), n, format!("{n} writes in flight (--jobs and --write-jobs {n})"))
        }
        (Some(jobs), Some(WriteJobs::Fixed(write_jobs))) => return Err(OpenError::Budgets { jobs, write_jobs }),
        (Some(n), Some(WriteJobs::Auto)) => {
            let a = Adaptive { min: 1, max: n, initial: default.initial.clamp(1, n), ..default };
            (Nfs::Adaptive(a), n, format!("writes adapt within {} (the ceiling is --jobs {n})", range(&a)))
        }
    })
}

/// The directory of a directory target ([`check()`] lets only those reach the local and the
/// mounted NFS backend), as a path, so a name that is not UTF-8 stays what it is.
fn dir_of(target: &Target) -> std::path::PathBuf {
    target.dir().map_or_else(|| target.as_str().into_owned().into(), std::path::Path::to_path_buf)
}

/// The options of the built-in NFS client (`nfs://` targets) for `options`: the budgets, the
/// executor's `jobs` and how they were decided.
fn client_options(
    options: &TargetOptions,
) -> Result<(treesync_backend_nfs::client::ClientOptions, usize, String), OpenError> {
    let defaults = treesync_backend_nfs::client::ClientOptions::default();
    let (write_window, jobs, decided) = nfs_writes(options, defaults.write_window.range())?;
    let o = treesync_backend_nfs::client::ClientOptions {
        write_window,
        lookup_jobs: options.lookup_jobs.unwrap_or(defaults.lookup_jobs).max(1),
        ..defaults
    };
    Ok((o, jobs, decided))
}

/// Open `target` the way the `treesync` binary does: choose the backend ([`check()`]), decide
/// the budgets, and give the backend its policy, adjusted by `options`.
pub fn open(target: &Target, options: &TargetOptions) -> Result<Opened, OpenError> {
    let (kind, reason) = check(target, options.backend)?;
    let ignored = if options.write_jobs.is_some() && kind != BackendKind::Nfs {
        format!(" (write_jobs is for nfs only; {kind} ignores it)")
    } else {
        String::new()
    };
    fn gated<B: Backend>(
        b: &treesync_core::policy::Budgets<B>,
        jobs: usize,
        batch: Option<usize>,
        decided: String,
    ) -> Concurrency {
        Concurrency { jobs, batch, lookups: Some(b.lookups().clone()), writes: Some(b.writes().clone()), decided }
    }
    let opened = match (kind, target) {
        (BackendKind::Nfs, Target::Nfs { text, .. }) => {
            let (o, jobs, decided) = client_options(options)?;
            let b = treesync_backend_nfs::client::open(text, o).map_err(OpenError::Nfs)?;
            let budgets = gated(&b, jobs, options.batch, decided);
            Opened { backend: Arc::new(b), kind, reason, budgets }
        }
        (BackendKind::Nfs, _) => {
            let (write_window, jobs, decided) = nfs_writes(options, treesync_backend_nfs::Window::WRITES.range())?;
            // `lookup_jobs` given bounds the scan too; else the defaults: 1 for a sync's
            // probes, 32 for verify's read-only scan.
            let defaults = treesync_backend_nfs::Options::default();
            let o = treesync_backend_nfs::Options {
                lookup_window: match options.lookup_jobs {
                    Some(n) => treesync_backend_nfs::Window::Fixed(n.max(1)),
                    None => defaults.lookup_window,
                },
                scan_jobs: options.lookup_jobs.unwrap_or(defaults.scan_jobs).max(1),
                write_window,
                fsync: options.fsync,
            };
            let b = treesync_backend_nfs::open(dir_of(target), o);
            let budgets = gated(&b, jobs, options.batch, decided);
            Opened { backend: Arc::new(b), kind, reason, budgets }
        }
        (BackendKind::S3, _) => {
            let mut o = treesync_backend_s3::Options::default();
            let decided = match options.jobs {
                Some(j) => {
                    o.puts_in_flight = j.max(1);
                    format!("{} PUTs in flight (--jobs){ignored}", o.puts_in_flight)
                }
                None => format!("{} PUTs in flight (the default){ignored}", o.puts_in_flight),
            };
            let b = treesync_backend_s3::open(&target.as_str(), &options.s3, o)?;
            let jobs = options.jobs.map_or_else(|| b.policy().jobs, |j| j.max(1));
            Opened {
                backend: Arc::new(b),
                kind,
                reason,
                budgets: Concurrency { jobs, batch: options.batch, lookups: None, writes: None, decided },
            }
        }
        (BackendKind::Memory, _) => {
            let b = treesync_core::MemoryBackend::new();
            let jobs = options.jobs.map_or_else(|| b.policy().jobs, |j| j.max(1));
            let decided = format!("{jobs} ops in flight{ignored}");
            Opened {
                backend: Arc::new(b),
                kind,
                reason,
                budgets: Concurrency { jobs, batch: options.batch, lookups: None, writes: None, decided },
            }
        }
        _ => {
            let mut o = treesync_backend_local::Options { fsync: options.fsync, ..Default::default() };
            let how = if options.jobs.is_some() { "--jobs" } else { "the default" };
            if let Some(j) = options.jobs {
                o.jobs = j.max(1);
            }
            if let Some(b) = options.batch {
                o.batch = b.max(1);
            }
            let decided = format!("{} batches of up to {} ops in flight ({how}){ignored}", o.jobs, o.batch);
            let (jobs, batch) = (o.jobs, options.batch.map(|_| o.batch));
            let b = treesync_backend_local::LocalBackend::new(dir_of(target), o);
            Opened {
                backend: Arc::new(b),
                kind,
                reason,
                budgets: Concurrency { jobs, batch, lookups: None, writes: None, decided },
            }
        }
    };
    tracing::debug!(target: "treesync::open", backend = %opened.label(), budgets = %opened.budgets, "opened {target}");
    Ok(opened)
}

/// The generations host of `target` (`sync --atomic`, see [`treesync_core::generation`]): for
/// a directory served by the local or the mounted-NFS backend, a
/// [`FsHost`](treesync_backend_local::generations::FsHost) whose generations are opened as
/// [`open()`] opens the target, with the same backend and budgets; for an `nfs://` URL, a
/// [`ClientHost`](treesync_backend_nfs::client::ClientHost) on the server, through the built-in
/// client with the budgets [`open()`] would give it. Other targets (buckets) are refused with
/// [`OpenError::Atomic`].
pub fn generations(
    target: &Target,
    options: &TargetOptions,
) -> Result<Arc<dyn treesync_core::generation::Host>, OpenError> {
    let (kind, _) = check(target, options.backend)?;
    if let (Target::Dir(_), BackendKind::Local | BackendKind::Nfs) = (target, kind) {
        // The budgets are checked once here: every generation is opened with them.
        open(target, &TargetOptions { backend: kind, ..options.clone() })?;
    }
    host(target, kind, options)
}

/// [`generations()`] of a target [`open()`] opened already (`opened` is what `open(target,
/// options)` returned): the backend it chose is taken as decided, so neither the mount table
/// nor the target is looked at again. A sync opens its target and then asks for its
/// generations; this way the mount table is read once per sync.
pub fn generations_of(
    target: &Target,
    opened: &Opened,
    options: &TargetOptions,
) -> Result<Arc<dyn treesync_core::generation::Host>, OpenError> {
    host(target, opened.kind, options)
}

/// The generations host of `target` served by backend `kind` (decided, never
/// [`BackendKind::Auto`]), with `options` checked already.
fn host(
    target: &Target,
    kind: BackendKind,
    options: &TargetOptions,
) -> Result<Arc<dyn treesync_core::generation::Host>, OpenError> {
    let refuse = |why, hint| OpenError::Atomic { target: target.to_string(), why, hint };
    match (target, kind) {
        (Target::Dir(dir), BackendKind::Local | BackendKind::Nfs) => {
            // Every generation gets the backend the target itself would: the kind is fixed
            // (a slot lies on the target's filesystem).
            let options = TargetOptions { backend: kind, ..options.clone() };
            let opener: treesync_backend_local::generations::Opener = Arc::new(move |path| {
                open(&Target::Dir(path), &options)
                    .expect("the options opened the target, so they open its generations")
                    .backend
            });
            let host = treesync_backend_local::generations::FsHost::new(dir.clone(), opener);
            // On a network mount a reader's directory handle may not survive an exchange (see
            // FsHost::without_exchange): symlink mode there, exchange on local disks.
            let host = if kind == BackendKind::Nfs { host.without_exchange() } else { host };
            Ok(Arc::new(host))
        }
        (Target::Nfs { text, .. }, _) => {
            // The generations get the client and budgets the target itself would.
            let (o, _, _) = client_options(options)?;
            Ok(Arc::new(treesync_backend_nfs::client::ClientHost::open(text, o).map_err(OpenError::Nfs)?))
        }
        _ => Err(refuse(
            "a bucket has no atomic switch of many keys; --atomic is for directories and nfs:// targets",
            "sync without --atomic; docs/atomic.md says how readers of a bucket get a consistent view",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> Target {
        Target::parse(s).expect(s)
    }

    #[test]
    fn every_kind_of_target_opens_with_the_backend_the_binary_would_choose() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("site");
        let t = target(path.to_str().expect("utf8"));
        let local = open(&t, &TargetOptions::default()).expect("a directory");
        assert_eq!(local.kind, BackendKind::Local);
        assert!(local.reason.starts_with("auto: "), "{}", local.reason);
        let nfs = open(&t, &TargetOptions { backend: BackendKind::Nfs, ..Default::default() }).expect("nfs");
        assert_eq!((nfs.kind, nfs.budgets.writes.is_some()), (BackendKind::Nfs, true));
        let memory = open(&target("memory://"), &TargetOptions::default()).expect("memory://");
        assert_eq!(memory.kind, BackendKind::Memory);
        assert!(memory.backend.to_string().starts_with("memory"), "{}", memory.backend);
        let store = open(&target("memory://"), &TargetOptions { backend: BackendKind::S3, ..Default::default() })
            .expect("memory:// through object_store");
        assert_eq!(store.kind, BackendKind::S3);
        let url = open(&target("nfs://127.0.0.1:1/export/site?mountport=1"), &TargetOptions::default())
            .expect("nfs:// opens lazily");
        assert_eq!(url.kind, BackendKind::Nfs);
        assert!(url.label().contains("built-in NFSv3 client"), "{}", url.label());
    }

    #[test]
    fn directories_get_a_generations_host_and_buckets_are_refused_with_a_hint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let site = dir.path().join("site");
        let host = generations(&target(site.to_str().expect("utf8")), &TargetOptions::default()).expect("a directory");
        assert_eq!(host.to_string(), site.display().to_string());
        assert_eq!(host.home_name(), ".site.treesync");
        let b = host.open(&treesync_core::generation::At::Slot("g1".into()));
        assert!(b.to_string().contains(".site.treesync/g1"), "{b}");
        let o = TargetOptions { backend: BackendKind::Nfs, ..Default::default() };
        let b = generations(&target(site.to_str().expect("utf8")), &o)
            .expect("a mounted nfs directory")
            .open(&treesync_core::generation::At::Target);
        assert!(b.to_string().contains("site"), "{b}");
        for t in ["s3://bucket/site", "memory://", "file:///tmp/x"] {
            let e = generations(&target(t), &TargetOptions::default()).err().expect("refused").to_string();
            assert!(e.contains("a bucket has no atomic switch of many keys"), "{t}: {e}");
            assert!(e.contains("hint: ") && e.contains("docs/atomic.md"), "{t}: {e}");
        }
        let nfs = generations(&target("nfs://h/e/www/site"), &TargetOptions::default()).expect("nfs:// opens lazily");
        assert_eq!((nfs.to_string().as_str(), nfs.home_name()), ("nfs://h/e/www/site", ".site.treesync".into()));
        let slot = nfs.open(&treesync_core::generation::At::Slot("g1".into()));
        assert!(slot.to_string().contains("nfs://h/e/www/.site.treesync/g1"), "{slot}");
        let bad = TargetOptions { jobs: Some(4), write_jobs: Some(WriteJobs::Fixed(16)), ..o };
        assert!(matches!(
            generations(&target(site.to_str().expect("utf8")), &bad).err(),
            Some(OpenError::Budgets { .. })
        ));
    }

    #[test]
    fn generations_of_an_opened_target_keep_the_backend_it_chose() {
        let dir = tempfile::tempdir().expect("tempdir");
        let site = target(dir.path().join("site").to_str().expect("utf8"));
        // Opened as NFS (as a directory on a network mount would be): its generations are
        // opened as NFS too, and as the mounted-NFS backend's host (symlink switches only).
        let nfs = TargetOptions { backend: BackendKind::Nfs, ..Default::default() };
        let opened = open(&site, &nfs).expect("nfs");
        let host = generations_of(&site, &opened, &TargetOptions::default()).expect("a directory");
        let slot = host.open(&treesync_core::generation::At::Slot("g1".into()));
        let local = open(&site, &TargetOptions::default()).expect("local");
        assert_ne!(local.kind, BackendKind::Nfs, "a temporary directory is on a local disk here");
        let slot_dir = Target::Dir(dir.path().join(".site.treesync/g1"));
        assert_eq!(slot.to_string(), open(&slot_dir, &nfs).expect("nfs").backend.to_string());
        let from_local = generations_of(&site, &local, &TargetOptions::default())
            .expect("a directory")
            .open(&treesync_core::generation::At::Slot("g1".into()));
        assert_ne!(from_local.to_string(), slot.to_string(), "local: {from_local}, nfs: {slot}");
        let bucket = target("memory://");
        let opened = open(&bucket, &TargetOptions::default()).expect("memory://");
        let e = generations_of(&bucket, &opened, &TargetOptions::default()).err().expect("refused").to_string();
        assert!(e.contains("a bucket has no atomic switch of many keys"), "{e}");
    }

    #[test]
    fn kinds_and_write_jobs_parse_from_what_people_write() {
        assert_eq!("nfs".parse(), Ok(BackendKind::Nfs));
        assert_eq!("memory".parse(), Ok(BackendKind::Memory));
        assert!("NFS".parse::<BackendKind>().is_err());
        assert_eq!("auto".parse(), Ok(WriteJobs::Auto));
        assert_eq!("8".parse(), Ok(WriteJobs::Fixed(8)));
        assert!("0".parse::<WriteJobs>().expect_err("zero").contains("neither a number"));
    }

    #[test]
    fn backends_that_cannot_serve_a_target_say_what_to_use() {
        let err = |t: &str, b| check(&target(t), b).expect_err("refused").to_string();
        assert!(err("nfs://h/e", BackendKind::S3).contains("backend s3 cannot use an NFS URL"));
        assert!(err("/srv/site", BackendKind::S3).contains("needs a URL such as s3://BUCKET/PREFIX"));
        assert!(err("s3://b/p", BackendKind::Local).contains("backend local needs a directory"));
        assert!(err("/srv/site", BackendKind::Memory).contains("backend memory needs memory://"));
        assert!(err("s3://b/p", BackendKind::Nfs).contains("hint: "));
    }

    /// The budgets of an NFS directory target opened with `jobs` and `write_jobs`.
    fn nfs_budgets(jobs: Option<usize>, write_jobs: Option<WriteJobs>) -> Result<Concurrency, OpenError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = target(dir.path().to_str().expect("utf8"));
        let o = TargetOptions { backend: BackendKind::Nfs, jobs, write_jobs, ..Default::default() };
        open(&t, &o).map(|o| {
            assert_eq!(o.backend.policy().jobs, o.budgets.jobs, "the executor's default is the decision");
            o.budgets
        })
    }

    #[test]
    fn jobs_and_the_write_budget_cannot_disagree() {
        // --jobs 4 --write-jobs auto: the adaptive budget's ceiling follows --jobs.
        let b = nfs_budgets(Some(4), Some(WriteJobs::Auto)).expect("adaptive up to 4");
        let writes = b.writes.as_ref().expect("nfs has a write gate");
        assert_eq!((b.jobs, writes.is_adaptive(), writes.ceiling(), writes.limit()), (4, true, 4, 4));
        assert!(b.decided.contains("the ceiling is --jobs 4"), "{}", b.decided);
        let r = b.report().expect("nfs reports budgets");
        assert_eq!((r.jobs, r.write_ceiling, r.writes.as_str()), (4, 4, "adaptive"));

        // Neither: the backend's adaptive default, and the executor as wide as its ceiling.
        let b = nfs_budgets(None, None).expect("default");
        let writes = b.writes.as_ref().expect("gate");
        assert_eq!((b.jobs, writes.is_adaptive()), (writes.ceiling(), true));
        assert!(b.decided.contains("(the default)"), "{}", b.decided);

        // One of them, or both the same: a fixed budget of that size.
        for (jobs, write_jobs) in
            [(Some(3), None), (None, Some(WriteJobs::Fixed(3))), (Some(3), Some(WriteJobs::Fixed(3)))]
        {
            let b = nfs_budgets(jobs, write_jobs).expect("fixed 3");
            let writes = b.writes.as_ref().expect("gate");
            assert_eq!((b.jobs, writes.is_adaptive(), writes.limit()), (3, false, 3), "{jobs:?} {write_jobs:?}");
        }

        // Different numbers are refused, saying what to give instead.
        let e = nfs_budgets(Some(4), Some(WriteJobs::Fixed(16))).expect_err("refused").to_string();
        assert!(e.starts_with("jobs 4 and write_jobs 16 disagree"), "{e}");
        assert!(e.contains("hint: give one of them (--write-jobs 16 or --jobs 4)"), "{e}");
    }

    #[test]
    fn write_jobs_on_a_backend_without_a_write_budget_is_said_to_be_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = target(dir.path().to_str().expect("utf8"));
        let o = TargetOptions {
            backend: BackendKind::Local,
            jobs: Some(2),
            write_jobs: Some(WriteJobs::Fixed(9)),
            ..Default::default()
        };
        let opened = open(&t, &o).expect("local");
        assert_eq!(opened.budgets.jobs, 2);
        assert!(opened.budgets.report().is_none(), "budgets are reported for nfs only");
        assert!(opened.budgets.decided.contains("write_jobs is for nfs only; local ignores it"), "{}", opened.budgets);
        let o = TargetOptions { batch: Some(7), ..o };
        let apply = open(&t, &o).expect("local").apply_options();
        assert_eq!((apply.jobs, apply.batch), (Some(2), Some(7)), "the executor gets what was decided");
    }
}
