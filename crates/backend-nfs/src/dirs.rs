//! Handles of the target's directories, opened once per run.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::meta::Meta;
use dashmap::DashMap;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// Directory handles by relative path (`b""` is the root).
///
/// Each directory is looked up once, relative to its parent's handle and without following
/// symlinks (`openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW)`: one LOOKUP on the
/// wire). Every file op then runs relative to its directory's handle, so no path is resolved
/// again from the root: with the attribute cache off (NFS `actimeo=0`, or many clients) each
/// path-based call would re-look-up every component over the network.
pub(crate) struct DirCache {
    map: DashMap<Vec<u8>, Arc<OwnedFd>>,
    /// Handles kept at most (file descriptors are a limited resource).
    cap: usize,
    opens: AtomicU64,
}

impl DirCache {
    pub(crate) fn new() -> Self {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(1024);
        // Leave half of the descriptors to everything else (blocking threads write files too).
        let cap = usize::try_from(soft / 2).unwrap_or(4096).clamp(64, 16384);
        DirCache { map: DashMap::new(), cap, opens: AtomicU64::new(0) }
    }

    /// Directory lookups made so far.
    pub(crate) fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }

    /// The handle of directory `rel`, opening it (and any ancestor not yet open) if needed.
    pub(crate) fn get(&self, meta: &Meta, rel: &[u8]) -> Result<Arc<OwnedFd>, Errno> {
        if let Some(fd) = self.map.get(rel) {
            return Ok(fd.clone());
        }
        if rel.is_empty() {
            return self.root(meta);
        }
        // The deepest ancestor already open, then down from there.
        let mut base_len = rel.len();
        let mut base = loop {
            if base_len == 0 {
                break self.root(meta)?;
            }
            base_len = rel[..base_len].iter().rposition(|b| *b == b'/').unwrap_or(0);
            if base_len == 0 {
                break self.root(meta)?;
            }
            if let Some(fd) = self.map.get(&rel[..base_len]) {
                break fd.clone();
            }
        };
        let rest = if base_len == 0 { rel } else { &rel[base_len + 1..] };
        let mut done = base_len;
        for name in rest.split(|b| *b == b'/') {
            if name.is_empty() || name == b"." || name == b".." {
                return Err(Errno::INVAL);
            }
            let fd = rustix::fs::openat(
                base.as_fd(),
                OsStr::from_bytes(name),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            self.opens.fetch_add(1, Ordering::Relaxed);
            tracing::trace!(target: "treesync::nfs", dir = %String::from_utf8_lossy(&rel[..if done == 0 { name.len() } else { done + 1 + name.len() }]), "directory looked up");
            done = if done == 0 { name.len() } else { done + 1 + name.len() };
            base = Arc::new(fd);
            self.insert(&rel[..done], base.clone());
        }
        Ok(base)
    }

    fn root(&self, meta: &Meta) -> Result<Arc<OwnedFd>, Errno> {
        if let Some(fd) = self.map.get(&b""[..]) {
            return Ok(fd.clone());
        }
        let fd = meta.root_fd()?;
        self.map.insert(Vec::new(), fd.clone());
        Ok(fd)
    }

    fn insert(&self, rel: &[u8], fd: Arc<OwnedFd>) {
        if self.map.len() >= self.cap {
            // Drop the handles nobody is using right now; they are reopened if needed.
            self.map.retain(|k, v| k.is_empty() || Arc::strong_count(v) > 1);
        }
        self.map.insert(rel.to_vec(), fd);
    }

    /// `rel` was removed: forget it and everything below it.
    pub(crate) fn forget(&self, rel: &[u8]) {
        self.map.retain(|k, _| !(k.starts_with(rel) && (k.len() == rel.len() || k[rel.len()] == b'/')));
    }

    /// Start a new run: directories may have changed since the last one.
    pub(crate) fn clear(&self) {
        self.map.clear();
    }
}
