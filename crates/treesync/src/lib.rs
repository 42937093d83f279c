//! treesync as a library: the front door.
//!
//! [`open()`] turns a target as a person writes it — a directory, an `nfs://` URL, an `s3://`,
//! `file://` or `memory://` URL — into a [`Backend`] with the policy the `treesync` binary
//! gives it, and says which backend it chose and why; [`check()`] applies the same rules
//! without opening anything (the binary's config file validates with it). Everything else is
//! the core's: [`sync`], [`verify`], [`Repo`].
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::atomic::AtomicBool;
//! use treesync::{OpenOptions, Repo, sync};
//!
//! let target = treesync::open("/mnt/nas/site", &OpenOptions::default())?;
//! println!("backend: {}", target.label()); // e.g. nfs (auto: /mnt/nas/site is on nfs4 (…), a network filesystem)
//! let repo = Repo::open("/srv/git/site.git")?;
//! let options = sync::Options { backend_name: target.label(), ..Default::default() };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(sync::sync(&repo, "main", &*target.backend, &options, &|_| {}, &AtomicBool::new(false)))?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

pub use treesync_core::{self as core, Backend, Repo, apply, plan, sync, verify};

use treesync_core::policy::Gate;

/// Which backend serves a target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// Choose from the target: the built-in NFS client for `nfs://` URLs, object storage for
    /// other URLs, the NFS backend for directories on network mounts, else local.
    #[default]
    Auto,
    /// Local disks: wide parallelism, atomic rename into place.
    Local,
    /// Network filesystems mounted here, or the built-in NFSv3 client for `nfs://` URLs.
    Nfs,
    /// Object storage (`s3://`, `file://`, `memory://`).
    S3,
}

impl BackendKind {
    /// The name people write (`auto`, `local`, `nfs`, `s3`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Local => "local",
            BackendKind::Nfs => "nfs",
            BackendKind::S3 => "s3",
        }
    }
}

/// How many writes an NFS backend keeps in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteJobs {
    /// Adapt to the latency the server shows (each NFS backend's default range).
    #[default]
    Auto,
    /// Exactly this many.
    Fixed(usize),
}

/// How to open a target. The defaults are what the binary uses without flags.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Which backend (default: chosen from the target).
    pub backend: BackendKind,
    /// Batches in flight (local), PUTs in flight (object storage); on NFS the write budget
    /// when `write_jobs` is not given.
    pub jobs: Option<usize>,
    /// Ops per batch (local).
    pub batch: Option<usize>,
    /// Writes in flight on NFS (`None`: `jobs` if given, else adaptive).
    pub write_jobs: Option<WriteJobs>,
    /// Directory lookups in flight on NFS (mounts: 1, `nfs://`: 32).
    pub lookup_jobs: Option<usize>,
    /// fsync files and the state before renaming them (local and mounted NFS).
    pub fsync: bool,
    /// Object storage: endpoint, region, plain HTTP, credentials.
    pub s3: treesync_backend_s3::Config,
}

/// An opened target: its backend, and which one it is and why.
#[derive(Clone)]
pub struct Opened {
    /// The backend, with its policy.
    pub backend: Arc<dyn Backend>,
    /// `local`, `nfs` or `s3`.
    pub name: &'static str,
    /// Why this backend, e.g. `auto: /mnt/nas/site is on nfs4 (nas:/export at /mnt/nas), a
    /// network filesystem`.
    pub why: String,
    /// The lookup and write budgets (NFS backends), to report what the adaptive one did.
    pub gates: Option<(Gate, Gate)>,
}

impl Opened {
    /// `nfs (auto: /mnt/nas/site is on nfs4 (nas:/export at /mnt/nas), a network filesystem)`:
    /// what the state file and `status` record as the backend.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.why)
    }
}

/// A target could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The target string is empty.
    #[error(
        "the target is empty\n  hint: give a directory (/srv/site) or a URL (s3://BUCKET/PREFIX, nfs://HOST/EXPORT/PATH)"
    )]
    Empty,
    /// The backend asked for cannot serve this kind of target.
    #[error("backend {backend} {needs}, got {target:?}\n  hint: {hint}", backend = backend.name())]
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
    /// An `nfs://` URL that does not parse, or the NFS client failed to start.
    #[error(transparent)]
    Nfs(treesync_core::backend::Error),
    /// An object-storage URL that does not parse or open.
    #[error(transparent)]
    ObjectStore(#[from] treesync_backend_s3::OpenError),
}

/// The backend that serves `target` with `backend`, and why — the rules of [`open()`] without
/// opening anything (only a directory target with [`BackendKind::Auto`] looks at the mount
/// table). An `nfs://` URL is parsed (so a bad one is found); other URLs are checked when
/// opened.
pub fn check(target: &str, backend: BackendKind) -> Result<(&'static str, String), OpenError> {
    if target.is_empty() {
        return Err(OpenError::Empty);
    }
    let mismatch = |needs, hint| OpenError::Mismatch { backend, target: target.to_string(), needs, hint };
    if target.starts_with("nfs://") {
        treesync_backend_nfs::remote::NfsUrl::parse(target)
            .map_err(|detail| OpenError::Nfs(treesync_core::backend::Error::BadUrl { detail }))?;
        return match backend {
            BackendKind::Auto => Ok(("nfs", "auto: an nfs:// URL, the built-in NFSv3 client".into())),
            BackendKind::Nfs => Ok(("nfs", "--backend nfs with an nfs:// URL: the built-in NFSv3 client".into())),
            _ => Err(mismatch("cannot use an NFS URL", "use backend auto or nfs for nfs:// targets")),
        };
    }
    let is_url = target.contains("://");
    match backend {
        BackendKind::Auto if is_url => Ok(("s3", "auto: the target is a URL".into())),
        BackendKind::S3 if is_url => Ok(("s3", "--backend s3".into())),
        BackendKind::S3 => {
            Err(mismatch("needs a URL such as s3://BUCKET/PREFIX", "use backend auto, local or nfs for a directory"))
        }
        BackendKind::Local | BackendKind::Nfs if is_url => {
            Err(mismatch("needs a directory", "use backend auto or s3 for object-storage URLs"))
        }
        BackendKind::Local => Ok(("local", "--backend local".into())),
        BackendKind::Nfs => Ok(("nfs", "--backend nfs".into())),
        BackendKind::Auto => {
            let c = treesync_backend_nfs::detect::choose(std::path::Path::new(target));
            let kind = if c.network { "a network filesystem" } else { "not a network filesystem" };
            Ok((if c.network { "nfs" } else { "local" }, format!("auto: {}, {kind}", c.reason)))
        }
    }
}

/// Open `target` the way the `treesync` binary does: choose the backend ([`check()`]) and
/// give it its policy, adjusted by `options`.
pub fn open(target: &str, options: &OpenOptions) -> Result<Opened, OpenError> {
    let (name, why) = check(target, options.backend)?;
    // NFS write budget: fixed when asked for (or when only `jobs` is given), else adaptive.
    let fixed_writes = match (options.jobs, options.write_jobs) {
        (_, Some(WriteJobs::Fixed(n))) | (Some(n), None) => Some(n.max(1)),
        (_, Some(WriteJobs::Auto)) | (None, None) => None,
    };
    match name {
        "nfs" if target.starts_with("nfs://") => {
            let mut o = treesync_backend_nfs::remote::RemoteOptions::default();
            if let Some(n) = fixed_writes {
                o.write_jobs = treesync_backend_nfs::WriteJobs::Fixed(n);
            }
            if let Some(n) = options.lookup_jobs {
                o.lookup_jobs = n.max(1);
            }
            let b = treesync_backend_nfs::remote::open(target, o).map_err(OpenError::Nfs)?;
            let gates = Some((b.lookups().clone(), b.writes().clone()));
            Ok(Opened { backend: Arc::new(b), name, why, gates })
        }
        "nfs" => {
            let o = treesync_backend_nfs::Options {
                lookup_jobs: options.lookup_jobs.unwrap_or(1).max(1),
                write_jobs: fixed_writes.map(treesync_backend_nfs::WriteJobs::Fixed).unwrap_or_default(),
                fsync: options.fsync,
            };
            let b = treesync_backend_nfs::open(target, o);
            let gates = Some((b.lookups().clone(), b.writes().clone()));
            Ok(Opened { backend: Arc::new(b), name, why, gates })
        }
        "s3" => {
            let mut o = treesync_backend_s3::Options::default();
            if let Some(j) = options.jobs {
                o.puts_in_flight = j.max(1);
            }
            let b = treesync_backend_s3::open(target, &options.s3, o)?;
            Ok(Opened { backend: Arc::new(b), name, why, gates: None })
        }
        _ => {
            let mut o = treesync_backend_local::Options { fsync: options.fsync, ..Default::default() };
            if let Some(j) = options.jobs {
                o.jobs = j.max(1);
            }
            if let Some(b) = options.batch {
                o.batch = b.max(1);
            }
            let b = treesync_backend_local::LocalBackend::new(target, o);
            Ok(Opened { backend: Arc::new(b), name, why, gates: None })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_target_opens_with_the_backend_the_binary_would_choose() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("site");
        let t = path.to_str().expect("utf8");
        let local = open(t, &OpenOptions::default()).expect("a directory");
        assert_eq!(local.name, "local");
        assert!(local.why.starts_with("auto: "), "{}", local.why);
        let nfs = open(t, &OpenOptions { backend: BackendKind::Nfs, ..Default::default() }).expect("nfs");
        assert_eq!((nfs.name, nfs.gates.is_some()), ("nfs", true));
        let memory = open("memory://", &OpenOptions::default()).expect("memory://");
        assert_eq!(memory.name, "s3");
        let url =
            open("nfs://127.0.0.1:1/export/site?mountport=1", &OpenOptions::default()).expect("nfs:// opens lazily");
        assert_eq!(url.name, "nfs");
        assert!(url.label().contains("built-in NFSv3 client"), "{}", url.label());
    }

    #[test]
    fn backends_that_cannot_serve_a_target_say_what_to_use() {
        let err = |t: &str, b| check(t, b).expect_err("refused").to_string();
        assert!(err("nfs://h/e", BackendKind::S3).contains("backend s3 cannot use an NFS URL"));
        assert!(err("/srv/site", BackendKind::S3).contains("needs a URL such as s3://BUCKET/PREFIX"));
        assert!(err("s3://b/p", BackendKind::Local).contains("backend local needs a directory"));
        assert!(err("", BackendKind::Auto).contains("the target is empty"));
        assert!(check("nfs://[::1/x", BackendKind::Auto).is_err(), "a bad nfs:// URL is found without opening");
        assert!(err("s3://b/p", BackendKind::Nfs).contains("hint: "));
    }
}
