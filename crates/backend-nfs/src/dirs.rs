//! Handles of the target's directories, opened once per run.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::meta::Meta;
use dashmap::DashMap;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use treesync_backend::policy::Gate;

/// Directory handles by relative path (`b""` is the root).
///
/// Each directory is looked up once, relative to its parent's handle and without following
/// symlinks (`openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW)`: one LOOKUP on the
/// wire). Every file op then runs relative to its directory's handle, so no path is resolved
/// again from the root: with the attribute cache off (NFS `actimeo=0`, or many clients) each
/// path-based call would re-look-up every component over the network.
///
/// **Each directory is looked up once, as many at once as the lookup budget allows, in one
/// parent or in many.** Each lookup takes a ticket of the lookup budget (a probe of a directory
/// already open takes none) and holds the directory it opens: a second lookup of the same
/// directory waits, then finds the handle the first one opened, so no directory is looked up
/// twice. Lookups of different children of one parent go out together: a Linux NFS client runs
/// a LOOKUP with the parent directory's inode lock (`i_rwsem`) held *shared* since Linux 4.7
/// (`lookup_slow` and `d_alloc_parallel` in `fs/namei.c`), so they overlap on the wire; on an
/// older kernel, which held it exclusively, they queue in the kernel as they would have queued
/// here, and the server sees no more than one of them at a time. The twelve changed top-level
/// directories of an update are twelve lookups in the target's root: one at a time they were
/// the longest chain of round trips of a sync (see `docs/backends.md`).
pub(crate) struct DirCache {
    map: DashMap<Vec<u8>, Arc<OwnedFd>>,
    /// Handles kept at most (file descriptors are a limited resource).
    cap: usize,
    opens: AtomicU64,
    /// The lookup budget, one ticket per lookup sent (`None`: unlimited, e.g. a bare backend).
    lookups: Option<Gate>,
    /// Directories being looked up, each held by its lookup.
    busy: DashMap<Vec<u8>, Arc<Mutex<()>>>,
}

impl DirCache {
    pub(crate) fn new(lookups: Option<Gate>) -> Self {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(1024);
        // Leave half of the descriptors to everything else (blocking threads write files too).
        let cap = usize::try_from(soft / 2).unwrap_or(4096).clamp(64, 16384);
        DirCache { map: DashMap::new(), cap, opens: AtomicU64::new(0), lookups, busy: DashMap::new() }
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
            done = if done == 0 { name.len() } else { done + 1 + name.len() };
            base = self.look_up(base, name, &rel[..done])?;
        }
        Ok(base)
    }

    /// Open `name` in the directory `base` as `child`, holding `child` and a ticket of the
    /// lookup budget while the request is out.
    fn look_up(&self, base: Arc<OwnedFd>, name: &[u8], child: &[u8]) -> Result<Arc<OwnedFd>, Errno> {
        let hold = self.busy.entry(child.to_vec()).or_default().clone();
        let _one_lookup_of_it = hold.lock().expect("never poisoned");
        // Whoever held it before us has opened it.
        if let Some(fd) = self.map.get(child) {
            return Ok(fd.clone());
        }
        let _ticket = self.lookups.as_ref().map(Gate::acquire_blocking);
        let fd = match rustix::fs::openat(
            base.as_fd(),
            OsStr::from_bytes(name),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => {
                // The hold is done either way; whoever waits tries the lookup again.
                self.busy.remove(child);
                return Err(e);
            }
        };
        self.opens.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(target: "treesync::nfs", dir = %String::from_utf8_lossy(child), "directory looked up");
        let fd = Arc::new(fd);
        self.insert(child, fd.clone());
        // Whoever waits for it, or comes later, finds the handle in the map: the hold is done
        // (and the map of holds stays as small as the lookups in flight).
        self.busy.remove(child);
        Ok(fd)
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
        self.busy.clear();
    }
}
