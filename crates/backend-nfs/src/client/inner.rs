//! The state every part of a [`ClientBackend`] works on ([`Inner`], [`Run`]) and the small
//! helpers they share: paths as bytes, NFS errors as backend errors, LOOKUP with attributes.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use nfs3_types::nfs3::{fattr3, nfsstat3};
use tokio::sync::OnceCell;
use treesync_backend::backend::{Error, FileStat};

use super::nfs::{self, Fh, NfsError};
use super::rpc::RpcOptions;
use super::url::NfsUrl;

/// A lock not renewed for this long is taken over (the default of [`ClientOptions::lease`](super::ClientOptions::lease)).
pub const LEASE: Duration = Duration::from_secs(120);

/// A directory on an NFSv3 server, reached by the built-in client. Cheap to clone.
#[derive(Clone)]
pub struct ClientBackend {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) url: NfsUrl,
    pub(super) host: String,
    pub(super) rpc: RpcOptions,
    /// See [`ClientOptions::lease`].
    pub(super) lease: Duration,
    pub(super) nfs_addr: OnceCell<SocketAddr>,
    /// The NFS program's client; shared by the backends of one generations host
    /// ([`generations::ClientHost`]), which then share one connection and one call count.
    pub(super) nfs: OnceCell<Arc<nfs::Nfs>>,
    pub(super) record: bool,
    pub(super) mount_calls: AtomicU64,
    /// The export's root handle.
    pub(super) export: OnceCell<(Fh, Vec<String>)>,
    /// The target directory's handle (resolved by `prepare_target` or on first use).
    pub(super) root: tokio::sync::Mutex<Option<Fh>>,
    /// Directory handles by path below the target, looked up once per run.
    pub(super) dirs: DashMap<Vec<u8>, Arc<OnceCell<Fh>>>,
    /// `.treesync`.
    pub(super) meta: tokio::sync::Mutex<Option<Fh>>,
    /// The run holding the lock: the lock file and the state file with its length.
    pub(super) run: Mutex<Option<Run>>,
    pub(super) wtmax: OnceCell<u32>,
    /// PATHCONF's answer: names that differ by case are different entries.
    pub(super) case_sensitive: OnceCell<bool>,
    /// The lock file's name in the target's root itself instead of `.treesync/lock.nfs` (the
    /// home of a target's generations locks with `HOME/lock`).
    pub(super) lock_in_root: Option<&'static [u8]>,
    /// Files written from blobs since [`Backend::take_written`] last took them, with the
    /// attributes the server gave after their RENAME (for the next verify's stat check).
    pub(super) written: Mutex<Vec<treesync_backend::backend::Written>>,
    /// Whether files written are noted in `written` ([`Backend::record_written`]).
    pub(super) recording: AtomicBool,
    /// The handles and sizes of the regular files the last scan listed (READDIRPLUS gives
    /// them), at most [`SCANNED_KEPT`]: a verify reads the files it must hash with them, one
    /// READ instead of a LOOKUP and a READ.
    pub(super) scanned: Mutex<std::collections::HashMap<Vec<u8>, (Fh, u64)>>,
}

/// File handles a scan keeps for the reads that follow it, at most (~100 bytes each).
pub(super) const SCANNED_KEPT: usize = 1 << 18;

pub(super) struct Run {
    pub(super) released: Arc<AtomicBool>,
    pub(super) renew: tokio::task::AbortHandle,
    /// Set by the renewal task when a renewal failed: what it met.
    pub(super) lost: Arc<Mutex<Option<String>>>,
    pub(super) state: Option<(Fh, usize)>,
}

pub(super) fn nfs_io(op: &'static str, path: impl fmt::Display, e: NfsError) -> Error {
    Error::io(op, path, e.into_io())
}

/// `op` of `path` failed for what the client found there: an error of `kind` saying `message`.
pub(super) fn io_error(
    op: &'static str,
    path: impl fmt::Display,
    kind: std::io::ErrorKind,
    message: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::io(op, path, std::io::Error::new(kind, message))
}

pub(super) fn is(e: &NfsError, s: nfsstat3) -> bool {
    e.status() == Some(s)
}

/// The file at `server_path` (absolute on `url`'s server) is not a file of its own. The hint
/// names the file as the server exports it: `rm` cannot take an `nfs://` URL.
pub(super) fn not_own_file(url: &NfsUrl, server_path: &str) -> Error {
    let mut shown = url.clone();
    shown.path = server_path.to_string();
    let host = &url.host;
    Error::NotOwnFile {
        path: shown.to_string(),
        remove: format!(
            "remove it through a mount of the export or in a shell on {host}: it is {server_path} as {host} exports it \
             (rm cannot take an nfs:// URL)"
        ),
    }
}

/// LOOKUP with the attributes (GETATTR when the reply has none).
pub(super) async fn lookup_attr(nfs: &nfs::Nfs, dir: &Fh, name: &[u8], shown: &str) -> Result<(Fh, fattr3), NfsError> {
    let (fh, attr) = nfs.lookup(dir, name, shown.as_bytes()).await?;
    let attr = match attr {
        Some(a) => a,
        None => nfs.getattr(&fh, shown.as_bytes()).await?,
    };
    Ok((fh, attr))
}

pub(super) fn stat_of(a: &fattr3) -> FileStat {
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

pub(super) fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

pub(super) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

impl Inner {
    /// The state of a backend for `url` that knows nothing of the server yet.
    pub(super) fn fresh(url: NfsUrl, rpc: RpcOptions, record: bool) -> Inner {
        Inner {
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
            written: Mutex::new(Vec::new()),
            recording: AtomicBool::new(true),
            scanned: Mutex::new(std::collections::HashMap::new()),
            wtmax: OnceCell::new(),
            case_sensitive: OnceCell::new(),
            lock_in_root: None,
        }
    }
}

impl ClientBackend {
    pub(super) fn shown(&self, rel: &[u8]) -> String {
        if rel.is_empty() { self.inner.url.to_string() } else { String::from_utf8_lossy(rel).into_owned() }
    }
}
