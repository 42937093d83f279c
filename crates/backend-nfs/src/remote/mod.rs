//! `nfs://` targets: a built-in NFSv3 client that needs no mount, no root and no kernel NFS
//! support, and keeps a whole phase of the plan in flight on one TCP connection.
//!
//! Through a kernel mount every lookup is a synchronous round trip behind the VFS's locks; NFS
//! itself allows many calls in flight. Here each op of a phase is a short chain of calls
//! (the ops run concurrently under the [`Budgets`] wrapper, and
//! the calls of all of them share the connection):
//!
//! | op | calls |
//! |---|---|
//! | mkdir | MKDIR (its reply carries the new handle: no LOOKUP later) |
//! | write | GUARDED CREATE of `.treesync-tmp.NAME` with the mode (whatever is there is removed, never written through), WRITE (`FILE_SYNC` for one chunk; `UNSTABLE` chunks of the server's `wtmax` + one COMMIT for larger files), RENAME over `NAME` |
//! | symlink | SYMLINK of the temporary name, RENAME |
//! | chmod | LOOKUP, SETATTR; a file with other hard links is written anew like a write instead |
//! | unlink, rmdir | REMOVE, RMDIR |
//!
//! and every directory a plan touches is looked up once per run (LOOKUP results are cached by
//! path; directories made by the run are known from their MKDIR replies). No unchanged path is
//! ever looked up. The journal costs one LOOKUP + READ to read it and one WRITE per update (in
//! place, like the mounted backend, unless the file has other hard links: then it is replaced
//! by a new file); the lock is a file created with a guarded CREATE (`.treesync/lock.nfs`),
//! renewed every 30 s while held, taken over when its holder's process is gone (same host) or
//! it was not renewed for two minutes. A takeover RENAMEs the stale file to a name of its own
//! and checks it got the file it judged, so of several syncs taking over at once one wins and
//! the others find its fresh lock ([`Error::Locked`]).
//!
//! Calls that get no reply in time, or whose connection breaks, go again on a new connection;
//! the server's status codes become errors that name the path and say what they mean.

pub mod nfs;
pub mod rpc;
pub mod url;

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use nfs3_types::mount;
use nfs3_types::nfs3::{fattr3, ftype3, nfsstat3, stable_how};
use nfs3_types::xdr_codec::{Opaque, Void};
use tokio::sync::OnceCell;
use treesync_backend_local::fs::Target;
use treesync_core::backend::{
    Backend, Capabilities, DirEntry, Error, FileStat, Found, FoundKind, LockGuard, Policy, TargetState,
};
use treesync_core::path::STATE_DIR;
use treesync_core::policy::{Adaptive, Budgets, Gate};
use treesync_core::source::{BlobError, BlobSource};
use treesync_core::state::Holder;
use treesync_core::{Op, RelPath};

pub use nfs::{Fh, NfsError};
pub use rpc::RpcOptions;
pub use url::NfsUrl;

use crate::WriteJobs;

/// A lock not renewed for this long is taken over (the default of [`RemoteOptions::lease`]).
pub const LEASE: Duration = Duration::from_secs(120);
/// A held lock is renewed this many times per lease.
const RENEWALS_PER_LEASE: u32 = 4;
/// The lock file in `.treesync`.
const LOCK_FILE: &[u8] = b"lock.nfs";
/// WRITEs of one large file in flight at once.
const CHUNKS_IN_FLIGHT: usize = 4;

pub(crate) fn hostname() -> String {
    treesync_core::sync::hostname()
}

/// Options of [`open`].
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Directory lookups in flight (default 32: over the built-in client they pipeline).
    pub lookup_jobs: usize,
    /// Ops in flight (default: adaptive from 16, between 1 and 128).
    pub write_jobs: WriteJobs,
    /// Record every call with its path (tests, `-vv`).
    pub record: bool,
    /// The lock's lease: a lock not renewed for this long is taken over by another sync; a
    /// held lock is renewed four times per lease, and a renewal that fails stops the run
    /// ([`Error::LeaseLost`]) before it writes more. Default [`LEASE`] (2 minutes).
    pub lease: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            lookup_jobs: 32,
            write_jobs: WriteJobs::Adaptive(Adaptive { initial: 16, min: 1, max: 128, backoff_latency: 2.0 }),
            record: false,
            lease: LEASE,
        }
    }
}

/// The `nfs://` backend with its budgets: what the CLI uses for `--target nfs://…`.
pub fn open(url: &str, options: RemoteOptions) -> Result<Budgets<RemoteBackend>, Error> {
    let url = NfsUrl::parse(url).map_err(|detail| Error::BadUrl { detail })?;
    let writes = match options.write_jobs {
        WriteJobs::Fixed(n) => Gate::fixed(n.max(1)),
        WriteJobs::Adaptive(a) => Gate::adaptive(a),
    };
    let mut backend = RemoteBackend::new(url, options.record)?;
    Arc::get_mut(&mut backend.inner).expect("not shared yet").lease = options.lease;
    Ok(Budgets::new(backend, Gate::fixed(options.lookup_jobs.max(1)), writes))
}

/// A directory on an NFSv3 server, reached by the built-in client. Cheap to clone.
#[derive(Clone)]
pub struct RemoteBackend {
    inner: Arc<Inner>,
}

struct Inner {
    url: NfsUrl,
    host: String,
    rpc: RpcOptions,
    /// See [`RemoteOptions::lease`].
    lease: Duration,
    nfs_addr: OnceCell<SocketAddr>,
    nfs: OnceCell<nfs::Nfs>,
    record: bool,
    mount_calls: AtomicU64,
    /// The export's root handle.
    export: OnceCell<(Fh, Vec<String>)>,
    /// The target directory's handle (resolved by `prepare_target` or on first use).
    root: tokio::sync::Mutex<Option<Fh>>,
    /// Directory handles by path below the target, looked up once per run.
    dirs: DashMap<Vec<u8>, Arc<OnceCell<Fh>>>,
    /// `.treesync`.
    meta: tokio::sync::Mutex<Option<Fh>>,
    /// The run holding the lock: the lock file and the state file with its length.
    run: Mutex<Option<Run>>,
    wtmax: OnceCell<u32>,
    /// PATHCONF's answer: names that differ by case are different entries.
    case_sensitive: OnceCell<bool>,
}

struct Run {
    released: Arc<AtomicBool>,
    renew: tokio::task::AbortHandle,
    /// Set by the renewal task when a renewal failed: what it met.
    lost: Arc<Mutex<Option<String>>>,
    state: Option<(Fh, usize)>,
}

/// How a directory lookup failed.
enum DirError {
    /// Nothing there.
    Missing,
    /// Something that is not a directory (a symlink included).
    NotDir,
    /// The call failed.
    Call(NfsError),
    /// The target itself could not be reached (mount, connection, its path).
    Target(Error),
}

fn nfs_io(op: &'static str, path: impl fmt::Display, e: NfsError) -> Error {
    Error::io(op, path, e.into_io())
}

fn is(e: &NfsError, s: nfsstat3) -> bool {
    e.status() == Some(s)
}

fn stat_of(a: &fattr3) -> FileStat {
    FileStat {
        mtime_secs: i64::from(a.mtime.seconds),
        mtime_nsecs: a.mtime.nseconds,
        ctime_secs: i64::from(a.ctime.seconds),
        ctime_nsecs: a.ctime.nseconds,
        dev: a.fsid,
        ino: a.fileid,
        uid: a.uid,
        gid: a.gid,
    }
}

fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

impl RemoteBackend {
    /// A backend for `url` (nothing is contacted until the first call).
    pub fn new(url: NfsUrl, record: bool) -> Result<Self, Error> {
        let mut rpc = RpcOptions { uid: url.uid, gid: url.gid, ..Default::default() };
        if let Some(n) = url.inflight {
            rpc.max_in_flight = n;
        }
        if let Some(t) = url.timeout {
            rpc.timeout = t;
        }
        Ok(RemoteBackend {
            inner: Arc::new(Inner {
                host: url.host.clone(),
                url,
                rpc,
                lease: LEASE,
                nfs_addr: OnceCell::new(),
                nfs: OnceCell::new(),
                record,
                mount_calls: AtomicU64::new(0),
                export: OnceCell::new(),
                root: tokio::sync::Mutex::new(None),
                dirs: DashMap::new(),
                meta: tokio::sync::Mutex::new(None),
                run: Mutex::new(None),
                wtmax: OnceCell::new(),
                case_sensitive: OnceCell::new(),
            }),
        })
    }

    /// NFS calls made so far, by procedure.
    pub fn calls(&self) -> Vec<(&'static str, u64)> {
        self.inner.nfs.get().map(|n| n.counts()).unwrap_or_default()
    }

    /// All NFS calls made so far.
    pub fn total_calls(&self) -> u64 {
        self.inner.nfs.get().map_or(0, |n| n.total())
    }

    /// Every call with the path it was about (when created with `record`).
    pub fn recorded(&self) -> Vec<(&'static str, Vec<u8>)> {
        self.inner.nfs.get().map(|n| n.recorded()).unwrap_or_default()
    }

    /// The RPC client of the NFS program, once connected (in-flight figures, test hooks).
    pub fn rpc(&self) -> Option<&rpc::Client> {
        self.inner.nfs.get().map(|n| n.rpc())
    }

    fn shown(&self, rel: &[u8]) -> String {
        if rel.is_empty() { self.inner.url.to_string() } else { String::from_utf8_lossy(rel).into_owned() }
    }

    fn resolve(&self, port: u16) -> Result<SocketAddr, Error> {
        (self.inner.host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| Error::io("resolve", &self.inner.host, e))?
            .next()
            .ok_or_else(|| Error::Unreachable {
                service: "NFS",
                host: self.inner.host.clone(),
                detail: "the name resolves to no address".into(),
                hint: "\n  hint: check the host name in the URL".into(),
                source: None,
            })
    }

    /// Ask the portmapper at HOST:111 for a program's TCP port.
    async fn portmap(&self, prog: u32, vers: u32, what: &'static str) -> Result<u16, Error> {
        let pm = rpc::Client::new(self.resolve(111)?, 100_000, 2, RpcOptions { retries: 0, ..self.inner.rpc.clone() });
        let args = nfs3_types::portmap::mapping { prog, vers, prot: 6, port: 0 };
        let hint = |detail: String, source: Option<Box<dyn std::error::Error + Send + Sync>>| Error::Unreachable {
            service: what,
            host: self.inner.host.clone(),
            detail: format!("the portmapper cannot tell its port: {detail}"),
            hint: format!(
                "\n  hint: give its port in the URL, e.g. nfs://{}{}?nfsport=2049&mountport=20048",
                self.inner.host, self.inner.url.path
            ),
            source,
        };
        let reply = pm
            .call(3, &args, &|| "portmap GETPORT".into())
            .await
            .map_err(|e| hint(e.to_string(), Some(Box::new(e))))?;
        let port = reply.decode::<u32>().map_err(|why| hint(why, None))?;
        match u16::try_from(port) {
            Ok(p) if p != 0 => Ok(p),
            _ => Err(hint("the portmapper does not know it".into(), None)),
        }
    }

    async fn nfs(&self) -> Result<&nfs::Nfs, Error> {
        self.inner
            .nfs
            .get_or_try_init(|| async {
                let addr = *self
                    .inner
                    .nfs_addr
                    .get_or_try_init(|| async {
                        let port = match self.inner.url.nfs_port {
                            Some(p) => p,
                            None => self.portmap(100_003, 3, "NFS").await.unwrap_or(2049),
                        };
                        self.resolve(port)
                    })
                    .await?;
                Ok(nfs::Nfs::new(addr, self.inner.rpc.clone(), self.inner.record))
            })
            .await
    }

    /// The export's root handle and the target's path components below it (MOUNT protocol:
    /// EXPORT to find the export holding the path, MNT of it).
    async fn export(&self) -> Result<&(Fh, Vec<String>), Error> {
        self.inner
            .export
            .get_or_try_init(|| async {
                let port = match self.inner.url.mount_port {
                    Some(p) => p,
                    None => self.portmap(mount::PROGRAM, mount::VERSION, "MOUNT").await?,
                };
                let client =
                    rpc::Client::new(self.resolve(port)?, mount::PROGRAM, mount::VERSION, self.inner.rpc.clone());
                let mnt_err = |e: rpc::RpcError| {
                    let hint = if matches!(e, rpc::RpcError::Connect { .. }) {
                        "\n  hint: is the NFS server running, and is ?mountport= right?"
                    } else {
                        ""
                    };
                    Error::Mount {
                        target: self.inner.url.to_string(),
                        detail: e.to_string(),
                        hint,
                        source: Some(Box::new(e)),
                    }
                };
                self.inner.mount_calls.fetch_add(1, Ordering::Relaxed);
                let reply = client.call(5, &Void, &|| "MOUNT EXPORT".into()).await.map_err(mnt_err)?;
                let exports: mount::exports<'static, 'static> =
                    reply.decode().map_err(|detail| Error::Garbled { what: "export list", detail })?;
                let names: Vec<String> = exports
                    .into_inner()
                    .into_iter()
                    .map(|e| String::from_utf8_lossy(&e.ex_dir.0).trim_end_matches('/').to_string())
                    .collect();
                let want = self.inner.url.components();
                let best = names
                    .iter()
                    .filter_map(|n| {
                        let c: Vec<&str> = n.split('/').filter(|c| !c.is_empty()).collect();
                        (c.len() <= want.len() && c[..] == want[..c.len()]).then_some((c.len(), n))
                    })
                    .max_by_key(|(len, _)| *len);
                let Some((depth, export)) = best else {
                    return Err(Error::Mount {
                        target: self.inner.url.to_string(),
                        detail: format!(
                            "no export of {} holds {}; the server exports: {}",
                            self.inner.host,
                            self.inner.url.path,
                            if names.is_empty() { "nothing".to_string() } else { names.join(", ") }
                        ),
                        hint: "\n  hint: the URL's path starts with an export",
                        source: None,
                    });
                };
                let path = if export.is_empty() { "/".to_string() } else { export.clone() };
                self.inner.mount_calls.fetch_add(1, Ordering::Relaxed);
                let reply = client
                    .call(1, &mount::dirpath(Opaque::borrowed(path.as_bytes())), &|| format!("MOUNT MNT {path}"))
                    .await
                    .map_err(mnt_err)?;
                let res: mount::mountres3<'static> =
                    reply.decode().map_err(|detail| Error::Garbled { what: "MNT reply", detail })?;
                let fh = match res {
                    mount::mountres3::Ok(ok) => Fh { data: Opaque::owned(ok.fhandle.0.into_owned()) },
                    mount::mountres3::Err(stat) => {
                        return Err(Error::Mount {
                            target: self.inner.url.to_string(),
                            detail: format!("the server refused to mount {path}: {stat}"),
                            hint: "\n  hint: check the export's client list and options",
                            source: None,
                        });
                    }
                };
                let rest = want[depth..].iter().map(|c| c.to_string()).collect();
                Ok((fh, rest))
            })
            .await
    }

    /// The target directory's handle; with `create`, its last component is made if missing.
    /// `None`: it does not exist.
    async fn root(&self, create: bool) -> Result<Option<Fh>, Error> {
        let mut slot = self.inner.root.lock().await;
        if let Some(fh) = &*slot {
            return Ok(Some(fh.clone()));
        }
        let (export, rest) = self.export().await?.clone();
        let nfs = self.nfs().await?;
        let mut fh = export;
        let mut seen = self.inner.url.path.len() - rest.iter().map(|c| c.len() + 1).sum::<usize>();
        for (i, c) in rest.iter().enumerate() {
            seen += c.len() + 1;
            let here = &self.inner.url.path[..seen];
            let last = i + 1 == rest.len();
            match nfs.lookup(&fh, c.as_bytes(), here.as_bytes()).await {
                Ok((next, attr)) => {
                    let attr = match attr {
                        Some(a) => a,
                        None => nfs.getattr(&next, here.as_bytes()).await.map_err(|e| nfs_io("look up", here, e))?,
                    };
                    if attr.type_ != ftype3::NF3DIR {
                        return Err(Error::io(
                            "use target",
                            here,
                            std::io::Error::new(std::io::ErrorKind::NotADirectory, "it exists and is not a directory"),
                        ));
                    }
                    fh = next;
                }
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) && last && create => {
                    let made = match nfs.mkdir(&fh, c.as_bytes(), 0o755, here.as_bytes()).await {
                        // Another sync made it a moment ago: use it if it is a directory.
                        Err(e) if is(&e, nfsstat3::NFS3ERR_EXIST) => {
                            let (next, attr) = nfs
                                .lookup(&fh, c.as_bytes(), here.as_bytes())
                                .await
                                .map_err(|e| nfs_io("create target directory", here, e))?;
                            let attr = match attr {
                                Some(a) => a,
                                None => {
                                    nfs.getattr(&next, here.as_bytes()).await.map_err(|e| nfs_io("look up", here, e))?
                                }
                            };
                            if attr.type_ != ftype3::NF3DIR {
                                return Err(Error::io(
                                    "use target",
                                    here,
                                    std::io::Error::new(
                                        std::io::ErrorKind::NotADirectory,
                                        "it exists and is not a directory",
                                    ),
                                ));
                            }
                            Ok(Some(next))
                        }
                        r => r,
                    };
                    fh = nfs
                        .made(&fh, c.as_bytes(), here.as_bytes(), made, false)
                        .await
                        .map_err(|e| nfs_io("create target directory", here, e))?;
                }
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) && last => return Ok(None),
                Err(e) => return Err(nfs_io("look up", here, e)),
            }
        }
        *slot = Some(fh.clone());
        Ok(Some(fh))
    }

    async fn root_fh(&self) -> Result<Fh, Error> {
        self.root(false).await?.ok_or_else(|| {
            Error::io(
                "open target directory",
                &self.inner.url,
                std::io::Error::new(std::io::ErrorKind::NotFound, "it does not exist"),
            )
        })
    }

    /// The handle of directory `path` below the target (looked up once per run).
    async fn dir(&self, path: &[u8]) -> Result<Fh, DirError> {
        if path.is_empty() {
            return match self.root(false).await {
                Ok(Some(fh)) => Ok(fh),
                Ok(None) => Err(DirError::Missing),
                Err(e) => Err(DirError::Target(e)),
            };
        }
        let cell = self.inner.dirs.entry(path.to_vec()).or_default().clone();
        cell.get_or_try_init(|| async {
            let (parent, name) = split_last(path);
            let pfh = Box::pin(self.dir(parent)).await?;
            let nfs = self.nfs().await.map_err(DirError::Target)?;
            let (fh, attr) = match nfs.lookup(&pfh, name, path).await {
                Ok(r) => r,
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Err(DirError::Missing),
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOTDIR) => return Err(DirError::NotDir),
                Err(e) => return Err(DirError::Call(e)),
            };
            let kind = match attr {
                Some(a) => a.type_,
                None => nfs.getattr(&fh, path).await.map_err(DirError::Call)?.type_,
            };
            if kind != ftype3::NF3DIR {
                return Err(DirError::NotDir);
            }
            Ok(fh)
        })
        .await
        .cloned()
    }

    fn forget(&self, path: &[u8]) {
        self.inner
            .dirs
            .retain(|k, _| !(k.as_slice() == path || (k.starts_with(path) && k.get(path.len()) == Some(&b'/'))));
    }

    fn remember(&self, path: &[u8], fh: Fh) {
        let cell = OnceCell::new();
        let _ = cell.set(fh);
        self.inner.dirs.insert(path.to_vec(), Arc::new(cell));
    }

    async fn wtmax(&self) -> u32 {
        *self
            .inner
            .wtmax
            .get_or_init(|| async {
                let (Ok(nfs), Ok(root)) = (self.nfs().await, self.root_fh().await) else { return 64 << 10 };
                match nfs.fsinfo(&root).await {
                    Ok(i) => i.wtmax.clamp(4096, 1 << 20),
                    Err(_) => 64 << 10,
                }
            })
            .await
    }

    async fn run(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.check_lease()?;
        let nfs = self.nfs().await?;
        let path = op.path();
        let (parent, name) = split_last(path.as_bytes());
        let removal = matches!(op, Op::Unlink { .. } | Op::Rmdir { .. });
        let dir = match self.dir(parent).await {
            Ok(fh) => fh,
            // The parent is gone: so is what we should remove. (A parent that is a symlink or
            // a file is drift the executor heals: reported below like for any other op.)
            Err(DirError::Missing) if removal => {
                if matches!(op, Op::Rmdir { .. }) {
                    self.forget(path.as_bytes());
                }
                return Ok(());
            }
            Err(DirError::NotDir) => return Err(Error::NotBeneath { path: path.display() }),
            Err(DirError::Missing) => {
                return Err(Error::io(
                    "open the directory of",
                    path,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "the directory is missing on the server"),
                ));
            }
            Err(DirError::Call(e)) => return Err(nfs_io("open the directory of", path, e)),
            Err(DirError::Target(e)) => return Err(e),
        };
        let about = path.as_bytes();
        match op {
            Op::Mkdir { .. } => match nfs.mkdir(&dir, name, 0o755, about).await {
                Ok(Some(fh)) => {
                    self.remember(about, fh);
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(e) if is(&e, nfsstat3::NFS3ERR_EXIST) => match nfs.lookup(&dir, name, about).await {
                    Ok((fh, Some(a))) if a.type_ == ftype3::NF3DIR => {
                        self.remember(about, fh);
                        Ok(())
                    }
                    Ok(_) => Err(Error::not_a_directory_in_the_way(path)),
                    Err(e) => Err(nfs_io("create directory", path, e)),
                },
                Err(e) => Err(nfs_io("create directory", path, e)),
            },
            Op::Write { blob, size, executable, .. } => {
                self.replace_file(nfs, &dir, name, (*blob, *size), *executable, blobs, path).await
            }
            Op::Symlink { target, .. } => {
                let tmp = Target::sibling_tmp(name);
                let result = async {
                    match nfs.symlink(&dir, &tmp, target, about).await {
                        Ok(_) | Err(NfsError::DoneBefore(_)) => {}
                        Err(e) if is(&e, nfsstat3::NFS3ERR_EXIST) => {
                            // A leftover of a killed run.
                            let _ = nfs.remove(&dir, &tmp, about).await;
                            nfs.symlink(&dir, &tmp, target, about).await?;
                        }
                        Err(e) => return Err(e),
                    }
                    match nfs.rename(&dir, &tmp, &dir, name, about).await {
                        Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                .await;
                if result.is_err() {
                    let _ = nfs.remove(&dir, &tmp, about).await;
                }
                result.map_err(|e| nfs_io("create symlink", path, e))
            }
            Op::Chmod { executable, blob, size, .. } => {
                let found = match nfs.lookup(&dir, name, about).await {
                    Ok((fh, Some(a))) => Some((fh, a)),
                    Ok((fh, None)) => {
                        let a = nfs.getattr(&fh, about).await.map_err(|e| nfs_io("change mode of", path, e))?;
                        Some((fh, a))
                    }
                    Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => None,
                    Err(e) => return Err(nfs_io("change mode of", path, e)),
                };
                match found {
                    // A file of its own: one SETATTR.
                    Some((fh, a)) if a.type_ == ftype3::NF3REG && a.nlink == 1 => {
                        let mode = if *executable { 0o755 } else { 0o644 };
                        nfs.setattr(&fh, Some(mode), false, about).await.map_err(|e| nfs_io("change mode of", path, e))
                    }
                    // Another name shares the inode (a hard link from outside the tree: a
                    // SETATTR would change that file's mode too), or the file is gone or
                    // something else took its place (like the local backend: write the file
                    // anew; a directory there fails the RENAME as drift the executor heals).
                    _ => self.replace_file(nfs, &dir, name, (*blob, *size), *executable, blobs, path).await,
                }
            }
            Op::Unlink { .. } => match nfs.remove(&dir, name, about).await {
                Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                // Gone already, or a directory took its place (an interrupted sync made it).
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) || is(&e, nfsstat3::NFS3ERR_ISDIR) => Ok(()),
                Err(e) => Err(nfs_io("remove", path, e)),
            },
            Op::Rmdir { .. } => {
                self.forget(about);
                match nfs.rmdir(&dir, name, about).await {
                    Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                    Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) || is(&e, nfsstat3::NFS3ERR_NOTDIR) => Ok(()),
                    Err(e) if is(&e, nfsstat3::NFS3ERR_NOTEMPTY) || is(&e, nfsstat3::NFS3ERR_EXIST) => {
                        Err(Error::NotEmpty { path: path.display() })
                    }
                    Err(e) => Err(nfs_io("remove directory", path, e)),
                }
            }
        }
    }

    /// Write a new file `name` in `dir` with the blob's content: CREATE of `.treesync-tmp.NAME`
    /// (a new inode, see [`create_new`]), WRITE, RENAME over `name`. The temporary never
    /// outlives an error (a full server must not fill up further).
    #[allow(clippy::too_many_arguments)] // one op's parts, passed through from `run`
    async fn replace_file(
        &self,
        nfs: &nfs::Nfs,
        dir: &Fh,
        name: &[u8],
        (blob, size): (treesync_core::ObjectId, u64),
        executable: bool,
        blobs: &Arc<dyn BlobSource>,
        path: &RelPath,
    ) -> Result<(), Error> {
        let about = path.as_bytes();
        let tmp = Target::sibling_tmp(name);
        let mode = if executable { 0o755 } else { 0o644 };
        let fh = create_new(nfs, dir, &tmp, mode, about).await.map_err(|e| nfs_io("write", path, e))?;
        let result = async {
            self.write_content(nfs, &fh, blob, size, blobs, path).await?;
            match nfs.rename(dir, &tmp, dir, name, about).await {
                Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                Err(e) => Err(nfs_io("write", path, e)),
            }
        }
        .await;
        if result.is_err() {
            let _ = nfs.remove(dir, &tmp, about).await;
        }
        result
    }

    /// Write the blob into the open temporary `fh`: one FILE_SYNC WRITE when it fits in one
    /// chunk, else UNSTABLE chunks (a few in flight, read from the repository as they go, never
    /// the whole file in memory here) and one COMMIT.
    async fn write_content(
        &self,
        nfs: &nfs::Nfs,
        fh: &Fh,
        blob: treesync_core::ObjectId,
        size: u64,
        blobs: &Arc<dyn BlobSource>,
        path: &RelPath,
    ) -> Result<(), Error> {
        let about = path.as_bytes();
        let blob_err = |e: BlobError| Error::from_blob("write", path, e);
        if size == 0 {
            return Ok(());
        }
        let chunk = self.wtmax().await as usize;
        if size <= chunk as u64 {
            let mut data = Vec::with_capacity(size as usize);
            blobs
                .read_blob(&blob, size, &mut |c| {
                    data.extend_from_slice(c);
                    Ok(())
                })
                .map_err(blob_err)?;
            return write_all(nfs, fh, 0, &data, stable_how::FILE_SYNC, about)
                .await
                .map(|_| ())
                .map_err(|e| nfs_io("write", path, e));
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(CHUNKS_IN_FLIGHT);
        let source = blobs.clone();
        let reader = tokio::task::spawn_blocking(move || {
            let mut buf = Vec::with_capacity(chunk);
            source.read_blob(&blob, size, &mut |mut c| {
                while !c.is_empty() {
                    let take = (chunk - buf.len()).min(c.len());
                    buf.extend_from_slice(&c[..take]);
                    c = &c[take..];
                    if buf.len() == chunk {
                        tx.blocking_send(std::mem::replace(&mut buf, Vec::with_capacity(chunk)))
                            .map_err(|_| std::io::Error::other("the write stopped"))?;
                    }
                }
                Ok(())
            })?;
            if !buf.is_empty() {
                tx.blocking_send(buf).map_err(|_| BlobError::Sink(std::io::Error::other("the write stopped")))?;
            }
            Ok::<(), BlobError>(())
        });
        let mut in_flight = FuturesUnordered::new();
        let mut offset = 0u64;
        let mut verfs = Vec::new();
        let mut failed = None;
        loop {
            while failed.is_none() && in_flight.len() < CHUNKS_IN_FLIGHT {
                match rx.recv().await {
                    Some(data) => {
                        let at = offset;
                        offset += data.len() as u64;
                        in_flight.push(async move { write_all(nfs, fh, at, &data, stable_how::UNSTABLE, about).await });
                    }
                    None => break,
                }
            }
            let Some(done) = in_flight.next().await else { break };
            match done {
                Ok(v) => verfs.push(v),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        drop(rx);
        let read = reader.await.unwrap_or_else(|e| Err(BlobError::Sink(std::io::Error::other(e.to_string()))));
        if let Some(e) = failed {
            return Err(nfs_io("write", path, e));
        }
        read.map_err(blob_err)?;
        let verf = nfs.commit(fh, about).await.map_err(|e| nfs_io("write", path, e))?;
        if verfs.iter().any(|v| v.is_some_and(|v| v != verf)) {
            return Err(Error::io(
                "write",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "the NFS server restarted during the write (its write verifier changed); run sync again",
                ),
            ));
        }
        Ok(())
    }

    /// `.treesync`'s handle; `None` if missing and not `create`.
    async fn meta(&self, create: bool) -> Result<Option<Fh>, Error> {
        let mut slot = self.inner.meta.lock().await;
        if let Some(fh) = &*slot {
            return Ok(Some(fh.clone()));
        }
        let Some(root) = self.root(create).await? else { return Ok(None) };
        let nfs = self.nfs().await?;
        let name = STATE_DIR.as_bytes();
        let fh = match nfs.lookup(&root, name, name).await {
            // Something else in place of the state folder (a symlink, a file): never used.
            Ok((_, Some(attr))) if attr.type_ != ftype3::NF3DIR => {
                return Err(Error::StateFolder {
                    path: format!("{}/{STATE_DIR}", self.inner.url),
                    found: match attr.type_ {
                        ftype3::NF3LNK => "symlink",
                        ftype3::NF3REG => "file",
                        _ => "special file",
                    },
                });
            }
            Ok((fh, _)) => fh,
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) && create => {
                let made = nfs.mkdir(&root, name, 0o755, name).await;
                nfs.made(&root, name, name, made, true).await.map_err(|e| nfs_io("create", STATE_DIR, e))?
            }
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Ok(None),
            Err(e) => return Err(nfs_io("read", STATE_DIR, e)),
        };
        *slot = Some(fh.clone());
        Ok(Some(fh))
    }

    async fn read_meta_file(&self, name: &[u8]) -> Result<Option<(Fh, Option<fattr3>, Vec<u8>)>, Error> {
        let shown = format!("{STATE_DIR}/{}", String::from_utf8_lossy(name));
        let Some(meta) = self.meta(false).await? else { return Ok(None) };
        let nfs = self.nfs().await?;
        let (fh, attr) = match nfs.lookup(&meta, name, shown.as_bytes()).await {
            Ok(r) => r,
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Ok(None),
            Err(e) => return Err(nfs_io("read", shown, e)),
        };
        let size = attr.as_ref().map_or(0, |a| a.size);
        let bytes = read_all(nfs, &fh, size, shown.as_bytes()).await.map_err(|e| nfs_io("read", &shown, e))?;
        Ok(Some((fh, attr, bytes)))
    }

    /// Take the stale lock file judged from `judged` (its attributes) out of the way, without
    /// ever removing another sync's lock by name: RENAME it to a name of our own (atomic:
    /// of several syncs doing this at once, one gets the stale file), then check that what we
    /// renamed is the file we judged (same fileid and mtime). If it is, remove it; if it is
    /// not, it is the fresh lock of a sync that took the stale one over first: put it back
    /// with LINK (which, unlike RENAME, never replaces a lock made in the meantime).
    async fn take_over(&self, nfs: &nfs::Nfs, meta: &Fh, judged: &fattr3, shown: &str) -> Result<(), Error> {
        static ASIDE: AtomicU64 = AtomicU64::new(0);
        let aside = format!(
            "lock.nfs.stale.{}.{}.{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
            ASIDE.fetch_add(1, Ordering::Relaxed)
        );
        let aside = aside.as_bytes();
        match nfs.rename(meta, LOCK_FILE, meta, aside, shown.as_bytes()).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => {}
            // Gone: its holder removed it, or another sync took it aside first.
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Ok(()),
            Err(e) => return Err(nfs_io("take over the lock", shown, e)),
        }
        let (fh, attr) =
            nfs.lookup(meta, aside, shown.as_bytes()).await.map_err(|e| nfs_io("take over the lock", shown, e))?;
        let attr = match attr {
            Some(a) => a,
            None => nfs.getattr(&fh, shown.as_bytes()).await.map_err(|e| nfs_io("take over the lock", shown, e))?,
        };
        let same = attr.fileid == judged.fileid
            && attr.fsid == judged.fsid
            && (attr.mtime.seconds, attr.mtime.nseconds) == (judged.mtime.seconds, judged.mtime.nseconds);
        if !same {
            match nfs.link(&fh, meta, LOCK_FILE, shown.as_bytes()).await {
                Ok(()) => {}
                Err(e) => {
                    // A third sync made a lock in the moment the other one was aside: leave
                    // that one be (the one aside still holds its run; it was not stale).
                    tracing::warn!(target: "treesync::nfs", error = %e, "could not put back a lock taken aside");
                    return Ok(());
                }
            }
        }
        match nfs.remove(meta, aside, shown.as_bytes()).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => Ok(()),
            Err(e) => Err(nfs_io("take over the lock", shown, e)),
        }
    }

    /// Take over a lock whose holder is gone: same host and no such process, or not renewed
    /// within the lease.
    fn stale(&self, holder: Option<&Holder>, attr: Option<&fattr3>) -> bool {
        if let Some(h) = holder
            && h.host == hostname()
        {
            return h.is_gone_here();
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        attr.is_some_and(|a| {
            let renewed = Duration::new(u64::from(a.mtime.seconds), a.mtime.nseconds);
            now.saturating_sub(renewed) > self.inner.lease
        })
    }

    /// What the renewal of this run's lock met when it failed (`None`: not locked, or the
    /// lease is held). Once it failed, ops and state writes fail with [`Error::LeaseLost`].
    pub fn lease_lost(&self) -> Option<String> {
        let run = self.inner.run.lock().expect("never poisoned");
        run.as_ref().and_then(|r| r.lost.lock().expect("never poisoned").clone())
    }

    /// Renew the lease of the lock file `lock`: check that the lock's name still leads to it
    /// (LOOKUP), then touch its mtime (SETATTR), which other syncs read as the last renewal.
    async fn renew(&self, lock: &Fh) -> Result<(), String> {
        let nfs = self.nfs().await.map_err(|e| e.to_string())?;
        let meta = self.meta(false).await.map_err(|e| e.to_string())?.ok_or("the state folder is gone")?;
        match nfs.lookup(&meta, LOCK_FILE, LOCK_FILE).await {
            Ok((fh, _)) if fh.data.0 == lock.data.0 => {}
            Ok(_) => return Err("the lock file is another sync's now".into()),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Err("the lock file is gone".into()),
            Err(e) => return Err(e.to_string()),
        }
        match nfs.setattr(lock, None, true, LOCK_FILE).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Fail with [`Error::LeaseLost`] when a renewal of this run's lock failed: another sync
    /// may have taken the target over, so nothing more may be written.
    fn check_lease(&self) -> Result<(), Error> {
        match self.lease_lost() {
            Some(detail) => Err(Error::LeaseLost { target: self.inner.url.to_string(), detail }),
            None => Ok(()),
        }
    }
}

/// The holder line of the lock file `fh`, if it is one treesync wrote: a regular file of its
/// own (one link: not a hard link to some other file) holding one short holder line
/// (`pid N on HOST, started at unix time T`). Anything else is never shown.
async fn lock_holder(nfs: &nfs::Nfs, fh: &Fh, attr: &fattr3, about: &[u8]) -> Option<Holder> {
    const MAX: u32 = 512;
    if attr.type_ != ftype3::NF3REG || attr.nlink != 1 || attr.size > u64::from(MAX) {
        return None;
    }
    let (data, _) = nfs.read(fh, 0, MAX, about).await.ok()?;
    let text = std::str::from_utf8(&data).ok()?;
    if text.trim().chars().any(|c| c.is_control()) {
        return None;
    }
    Holder::parse(text)
}

/// CREATE `name` in `dir` as a new, empty file with `mode`: GUARDED, so whatever is already
/// there (a killed run's temporary, or a hard link someone planted to a file outside the tree)
/// is never truncated or written through. It is removed (only its name: the file it links
/// to is untouched) and the CREATE tried once more.
async fn create_new(nfs: &nfs::Nfs, dir: &Fh, name: &[u8], mode: u32, about: &[u8]) -> Result<Fh, NfsError> {
    let mut first = true;
    loop {
        let created = nfs.create(dir, name, nfs::mode_attr(mode, None), true, about).await;
        if first && matches!(&created, Err(NfsError::Status(s)) if *s == nfsstat3::NFS3ERR_EXIST) {
            first = false;
            match nfs.remove(dir, name, about).await {
                Ok(()) | Err(NfsError::DoneBefore(_)) => {}
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        return nfs.made(dir, name, about, created, false).await;
    }
}

/// A whole file, by handle, in READs of its size (at least 4 KiB, at most 1 MiB).
async fn read_all(nfs: &nfs::Nfs, fh: &Fh, size_hint: u64, about: &[u8]) -> Result<Vec<u8>, NfsError> {
    let mut out = Vec::new();
    let count = u32::try_from(size_hint.clamp(4096, 1 << 20)).unwrap_or(1 << 20);
    loop {
        let (data, eof) = nfs.read(fh, out.len() as u64, count, about).await?;
        let empty = data.is_empty();
        out.extend_from_slice(&data);
        if eof || empty {
            return Ok(out);
        }
    }
}

/// WRITE all of `data` at `offset` (servers may write less than asked): the write verifier,
/// unless the server committed it to stable storage already.
async fn write_all(
    nfs: &nfs::Nfs,
    fh: &Fh,
    offset: u64,
    data: &[u8],
    stable: stable_how,
    about: &[u8],
) -> Result<Option<[u8; 8]>, NfsError> {
    let mut done = 0usize;
    let mut verf = None;
    while done < data.len() {
        let (n, committed, v) = nfs.write(fh, offset + done as u64, &data[done..], stable, about).await?;
        if n == 0 {
            return Err(NfsError::Status(nfsstat3::NFS3ERR_IO));
        }
        done += n as usize;
        if committed != stable_how::FILE_SYNC {
            verf = Some(v);
        }
    }
    Ok(verf)
}

impl fmt::Display for RemoteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner.url)
    }
}

/// The lock of one run (see [`Backend::unlock`]); dropped without an unlock it is removed in
/// the background, or taken over by the next run.
struct Held {
    backend: RemoteBackend,
    released: Arc<AtomicBool>,
    renew: tokio::task::AbortHandle,
    lost: Arc<Mutex<Option<String>>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renew.abort();
        let lost = self.lost.lock().expect("never poisoned").is_some();
        if !self.released.swap(true, Ordering::Relaxed)
            && !lost
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let b = self.backend.clone();
            rt.spawn(async move {
                if let (Ok(nfs), Ok(Some(meta))) = (b.nfs().await, b.meta(false).await) {
                    let _ = nfs.remove(&meta, LOCK_FILE, LOCK_FILE).await;
                }
            });
        }
        *self.backend.inner.run.lock().expect("never poisoned") = None;
    }
}

#[async_trait]
impl Backend for RemoteBackend {
    fn capabilities(&self) -> Capabilities {
        let case_sensitive = *self.inner.case_sensitive.get().unwrap_or(&true);
        Capabilities {
            symlinks: true,
            exec_bit: true,
            empty_dirs: true,
            case_sensitive,
            exclusive_lock: true,
            aux_store: true,
        }
    }

    fn policy(&self) -> Policy {
        Policy { jobs: 1, batch: 1, min_batch: 1, lookups: 1, spread: false }
    }

    fn cost(&self) -> Vec<(&'static str, u64)> {
        let mut out = self.calls();
        let m = self.inner.mount_calls.load(Ordering::Relaxed);
        if m > 0 {
            out.push(("MOUNT", m));
        }
        out
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.run(op, blobs).await
    }

    async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
        // A directory that cannot be looked up is the op's business (an unlink below a removed
        // directory is fine, a write is not): it reports the error with the op's path.
        let _ = self.dir(dir.as_bytes()).await;
        Ok(())
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        *self.inner.root.lock().await = None;
        *self.inner.meta.lock().await = None;
        self.inner.dirs.clear();
        let Some(root) = self.root(create).await? else { return Ok(TargetState::Empty) };
        if self.inner.case_sensitive.get().is_none() {
            // Once per backend: servers on APFS, NTFS or casefold directories say so here.
            let nfs = self.nfs().await?;
            let sensitive = nfs.pathconf(&root).await.map(|p| !p.case_insensitive).unwrap_or(true);
            let _ = self.inner.case_sensitive.set(sensitive);
        }
        if self.meta(false).await?.is_some() {
            return Ok(TargetState::Managed);
        }
        let nfs = self.nfs().await?;
        let entries =
            nfs.readdirplus(&root, b"").await.map_err(|e| nfs_io("read target directory", self.shown(b""), e))?;
        Ok(if entries.iter().any(|e| e.name == STATE_DIR.as_bytes()) {
            // Made a moment ago by a sync starting at the same time as this one: whatever
            // else is there is its work (the state, read under the lock, will tell).
            TargetState::Managed
        } else if entries.is_empty() {
            TargetState::Empty
        } else {
            TargetState::Unmanaged
        })
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let nfs = self.nfs().await?;
        let fh = match self.dir(dir.as_bytes()).await {
            Ok(fh) => fh,
            Err(DirError::Missing) => {
                return Err(Error::io("read directory", dir, std::io::Error::from(std::io::ErrorKind::NotFound)));
            }
            Err(DirError::NotDir) => return Err(Error::NotBeneath { path: dir.display() }),
            Err(DirError::Call(e)) => return Err(nfs_io("read directory", dir, e)),
            Err(DirError::Target(e)) => return Err(e),
        };
        let entries = nfs.readdirplus(&fh, dir.as_bytes()).await.map_err(|e| nfs_io("read directory", dir, e))?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if dir.is_root() && e.name == STATE_DIR.as_bytes() {
                continue;
            }
            let is_dir = match &e.attr {
                Some(a) => a.type_ == ftype3::NF3DIR,
                None => {
                    let p = join(dir.as_bytes(), &e.name);
                    nfs.lookup(&fh, &e.name, &p)
                        .await
                        .map_err(|er| nfs_io("read directory", dir, er))?
                        .1
                        .is_some_and(|a| a.type_ == ftype3::NF3DIR)
                }
            };
            out.push(DirEntry { name: e.name, is_dir });
        }
        Ok(out)
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        let Some((fh, attr, bytes)) = self.read_meta_file(b"state").await? else { return Ok(None) };
        // Written in place only if it is a file of its own: never through a hard link (or
        // anything else) someone put there; that is replaced by a new file instead.
        let own = attr.is_some_and(|a| a.type_ == ftype3::NF3REG && a.nlink == 1);
        if let Some(run) = self.inner.run.lock().expect("never poisoned").as_mut() {
            run.state = own.then_some((fh, bytes.len()));
        }
        Ok(Some(bytes))
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.check_lease()?;
        let shown = format!("{STATE_DIR}/state");
        let known = match self.inner.run.lock().expect("never poisoned").as_ref() {
            None => {
                return Err(Error::NotLocked { backend: self.inner.url.to_string() });
            }
            Some(run) => run.state.clone(),
        };
        let nfs = self.nfs().await?;
        let (fh, len) = match known {
            Some(k) => k,
            None => {
                // No state file of our own yet (none, or one that is not ours to write
                // through): a new file, renamed into place; later writes go in place.
                let meta = self.meta(true).await?.expect("created");
                let tmp = Target::sibling_tmp(b"state");
                let fh = create_new(nfs, &meta, &tmp, 0o644, shown.as_bytes())
                    .await
                    .map_err(|e| nfs_io("write", &shown, e))?;
                let result = async {
                    write_all(nfs, &fh, 0, bytes, stable_how::FILE_SYNC, shown.as_bytes()).await?;
                    match nfs.rename(&meta, &tmp, &meta, b"state", shown.as_bytes()).await {
                        Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                .await;
                if let Err(e) = result {
                    let _ = nfs.remove(&meta, &tmp, shown.as_bytes()).await;
                    return Err(nfs_io("write", &shown, e));
                }
                if let Some(run) = self.inner.run.lock().expect("never poisoned").as_mut() {
                    run.state = Some((fh, bytes.len()));
                }
                return Ok(());
            }
        };
        let mut padded = bytes.to_vec();
        if padded.len() < len {
            padded.resize(len, b' ');
        }
        write_all(nfs, &fh, 0, &padded, stable_how::FILE_SYNC, shown.as_bytes())
            .await
            .map_err(|e| nfs_io("write", &shown, e))?;
        if let Some(run) = self.inner.run.lock().expect("never poisoned").as_mut() {
            run.state = Some((fh, padded.len()));
        }
        Ok(())
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let shown = format!("{STATE_DIR}/{}", String::from_utf8_lossy(LOCK_FILE));
        let meta = self.meta(true).await?.expect("created");
        let nfs = self.nfs().await?;
        let mut tries = 0;
        let fh = loop {
            tries += 1;
            let made = nfs.create(&meta, LOCK_FILE, nfs::mode_attr(0o644, Some(0)), true, shown.as_bytes()).await;
            match nfs.made(&meta, LOCK_FILE, shown.as_bytes(), made, false).await {
                Ok(fh) => break fh,
                Err(e) if is(&e, nfsstat3::NFS3ERR_EXIST) => {
                    let (fh, attr) = match nfs.lookup(&meta, LOCK_FILE, shown.as_bytes()).await {
                        Ok(r) => r,
                        Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) && tries < 4 => continue,
                        Err(e) => return Err(nfs_io("lock", &shown, e)),
                    };
                    let attr = match attr {
                        Some(a) => a,
                        None => nfs.getattr(&fh, shown.as_bytes()).await.map_err(|e| nfs_io("lock", &shown, e))?,
                    };
                    let other = lock_holder(nfs, &fh, &attr, shown.as_bytes()).await;
                    if tries < 4 && self.stale(other.as_ref(), Some(&attr)) {
                        tracing::warn!(target: "treesync::nfs", holder = ?other, "taking over a stale lock");
                        self.take_over(nfs, &meta, &attr, &shown).await?;
                        // Whoever got it: CREATE again, and a lock found now is judged afresh.
                        continue;
                    }
                    return Err(Error::Locked {
                        holder: format!(
                            "{}; lock file {shown} on the server, renewed every {} s while held and taken over {} s after the last renewal",
                            other.map_or_else(
                                || "holder unknown: no holder line treesync wrote".into(),
                                |h| h.to_string()
                            ),
                            (self.inner.lease / RENEWALS_PER_LEASE).as_secs(),
                            self.inner.lease.as_secs()
                        ),
                    });
                }
                Err(e) => return Err(nfs_io("lock", &shown, e)),
            }
        };
        write_all(nfs, &fh, 0, format!("{holder}\n").as_bytes(), stable_how::FILE_SYNC, shown.as_bytes())
            .await
            .map_err(|e| nfs_io("write lock file", &shown, e))?;
        let me = self.clone();
        let lock = fh.clone();
        let lost = Arc::new(Mutex::new(None));
        let every = self.inner.lease / RENEWALS_PER_LEASE;
        let renew = tokio::spawn({
            let lost = lost.clone();
            async move {
                loop {
                    tokio::time::sleep(every).await;
                    // The RPC layer already sent the calls again on new connections; a renewal
                    // that still fails, or finds another file under the lock's name (another
                    // sync took it over), means another sync may take or has taken the target.
                    let renewed = me.renew(&lock).await;
                    if let Err(detail) = renewed {
                        tracing::error!(target: "treesync::nfs", error = %detail, "renewing the lock failed; stopping the run");
                        *lost.lock().expect("never poisoned") = Some(detail);
                        return;
                    }
                }
            }
        })
        .abort_handle();
        let released = Arc::new(AtomicBool::new(false));
        *self.inner.run.lock().expect("never poisoned") =
            Some(Run { released: released.clone(), renew: renew.clone(), lost: lost.clone(), state: None });
        // A new run: whatever we knew about directories may be stale now.
        self.inner.dirs.clear();
        Ok(LockGuard(Box::new(Held { backend: self.clone(), released, renew, lost })))
    }

    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        let run = self.inner.run.lock().expect("never poisoned").take();
        if let Some(run) = run {
            run.renew.abort();
            // A lost lease: the lock file may be another sync's now; leave it be.
            let lost = run.lost.lock().expect("never poisoned").is_some();
            if !run.released.swap(true, Ordering::Relaxed) && !lost {
                let nfs = self.nfs().await?;
                if let Some(meta) = self.meta(false).await? {
                    match nfs.remove(&meta, LOCK_FILE, LOCK_FILE).await {
                        Ok(_) | Err(NfsError::DoneBefore(_)) => {}
                        Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => {}
                        Err(e) => return Err(nfs_io("unlock", format!("{STATE_DIR}/lock.nfs"), e)),
                    }
                }
            }
        }
        drop(guard);
        Ok(())
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        let nfs = self.nfs().await?;
        let root = self.root_fh().await?;
        let mut out = Vec::new();
        let mut queue = vec![(Vec::<u8>::new(), root)];
        let mut listing = FuturesUnordered::new();
        let mut links = FuturesUnordered::new();
        loop {
            while listing.len() < jobs.max(1)
                && let Some((path, fh)) = queue.pop()
            {
                listing.push(async move {
                    let r = nfs.readdirplus(&fh, &path).await;
                    (path, fh, r)
                });
            }
            tokio::select! {
                Some((path, dir, r)) = listing.next() => {
                    let entries = r.map_err(|e| nfs_io("read directory", self.shown(&path), e))?;
                    for e in entries {
                        if path.is_empty() && e.name == STATE_DIR.as_bytes() {
                            continue;
                        }
                        let p = join(&path, &e.name);
                        let (fh, attr) = match (e.fh, e.attr) {
                            (Some(fh), Some(a)) => (fh, a),
                            _ => {
                                let (fh, a) = nfs.lookup(&dir, &e.name, &p).await.map_err(|er| nfs_io("look up", self.shown(&p), er))?;
                                let a = match a { Some(a) => a, None => nfs.getattr(&fh, &p).await.map_err(|er| nfs_io("look up", self.shown(&p), er))? };
                                (fh, a)
                            }
                        };
                        match attr.type_ {
                            ftype3::NF3DIR => {
                                out.push(Found { path: p.clone(), kind: FoundKind::Dir });
                                queue.push((p, fh));
                            }
                            ftype3::NF3REG => out.push(Found {
                                path: p,
                                kind: FoundKind::File {
                                    size: attr.size,
                                    executable: Some(attr.mode & 0o111 != 0),
                                    stat: Some(stat_of(&attr)),
                                    etag: None,
                                    typed: true,
                                },
                            }),
                            ftype3::NF3LNK => links.push(async move {
                                let r = nfs.readlink(&fh, &p).await;
                                (p, attr, r)
                            }),
                            _ => out.push(Found { path: p, kind: FoundKind::Other }),
                        }
                    }
                }
                Some((p, attr, r)) = links.next() => {
                    let target = r.map_err(|e| nfs_io("read symlink", self.shown(&p), e))?;
                    out.push(Found { path: p, kind: FoundKind::Link { target, stat: Some(stat_of(&attr)) } });
                }
                else => break,
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        let nfs = self.nfs().await?;
        let (parent, name) = split_last(path.as_bytes());
        let dir = match self.dir(parent).await {
            Ok(fh) => fh,
            Err(DirError::NotDir) => return Err(Error::NotBeneath { path: path.display() }),
            Err(DirError::Missing) => {
                return Err(Error::io("read", path, std::io::Error::from(std::io::ErrorKind::NotFound)));
            }
            Err(DirError::Call(e)) => return Err(nfs_io("read", path, e)),
            Err(DirError::Target(e)) => return Err(e),
        };
        let (fh, attr) = nfs.lookup(&dir, name, path.as_bytes()).await.map_err(|e| nfs_io("read", path, e))?;
        read_all(nfs, &fh, attr.map_or(0, |a| a.size), path.as_bytes()).await.map_err(|e| nfs_io("read", path, e))
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.read_meta_file(name.as_bytes()).await?.map(|(_, _, b)| b))
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let shown = format!("{STATE_DIR}/{name}");
        let meta = self.meta(true).await?.expect("created");
        let nfs = self.nfs().await?;
        let tmp = Target::sibling_tmp(name.as_bytes());
        let fh = create_new(nfs, &meta, &tmp, 0o644, shown.as_bytes()).await.map_err(|e| nfs_io("write", &shown, e))?;
        let chunk = self.wtmax().await as usize;
        let result = async {
            for (i, part) in bytes.chunks(chunk).enumerate() {
                write_all(nfs, &fh, (i * chunk) as u64, part, stable_how::FILE_SYNC, shown.as_bytes()).await?;
            }
            match nfs.rename(&meta, &tmp, &meta, name.as_bytes(), shown.as_bytes()).await {
                Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                Err(e) => Err(e),
            }
        }
        .await;
        if result.is_err() {
            let _ = nfs.remove(&meta, &tmp, shown.as_bytes()).await;
        }
        result.map_err(|e| nfs_io("write", &shown, e))
    }
}
