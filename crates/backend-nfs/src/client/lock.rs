//! The lock: a file made with a guarded CREATE, its lease renewed while held (a renewal that
//! fails stops the run), taken over from a holder that is gone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nfs3_types::nfs3::{fattr3, ftype3, nfsstat3, stable_how};
use treesync_backend::backend::{Error, LockGuard};
use treesync_backend::lock::Holder;
use treesync_backend::path::STATE_DIR;

#[allow(clippy::wildcard_imports)]
use super::inner::*;
use super::nfs::{self, Fh, NfsError};
use super::ops::write_all;

/// A held lock is renewed this many times per lease.
pub(super) const RENEWALS_PER_LEASE: u32 = 4;

/// The lock file in `.treesync`.
pub(super) const LOCK_FILE: &[u8] = b"lock.nfs";

impl ClientBackend {
    /// The directory holding the lock file: `.treesync` (made with `create`), or the target's
    /// root itself when the lock lives there (the home of generations, `HOME/lock`).
    pub(super) async fn lock_dir(&self, create: bool) -> Result<Option<Fh>, Error> {
        match self.inner.lock_in_root {
            Some(_) => self.root(create).await,
            None => self.meta(create).await,
        }
    }

    /// The lock file's name in [`Self::lock_dir`].
    pub(super) fn lock_name(&self) -> &'static [u8] {
        self.inner.lock_in_root.unwrap_or(LOCK_FILE)
    }

    /// The lock file as messages show it.
    pub(super) fn lock_shown(&self) -> String {
        match self.inner.lock_in_root {
            Some(name) => format!("{}/{}", self.inner.url, String::from_utf8_lossy(name)),
            None => format!("{STATE_DIR}/{}", String::from_utf8_lossy(LOCK_FILE)),
        }
    }
}

impl ClientBackend {
    /// Take the stale lock file judged from `judged` (its attributes) out of the way, without
    /// ever removing another sync's lock by name: RENAME it to a name of our own (atomic:
    /// of several syncs doing this at once, one gets the stale file), then check that what we
    /// renamed is the file we judged (same fileid and mtime). If it is, remove it; if it is
    /// not, it is the fresh lock of a sync that took the stale one over first: put it back
    /// with LINK (which, unlike RENAME, never replaces a lock made in the meantime).
    pub(super) async fn take_over(&self, nfs: &nfs::Nfs, meta: &Fh, judged: &fattr3, shown: &str) -> Result<(), Error> {
        static ASIDE: AtomicU64 = AtomicU64::new(0);
        let aside = format!(
            "lock.nfs.stale.{}.{}.{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
            ASIDE.fetch_add(1, Ordering::Relaxed)
        );
        let aside = aside.as_bytes();
        match nfs.rename(meta, self.lock_name(), meta, aside, shown.as_bytes()).await {
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
            match nfs.link(&fh, meta, self.lock_name(), shown.as_bytes()).await {
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
    pub(super) fn stale(&self, holder: Option<&Holder>, attr: Option<&fattr3>) -> bool {
        if let Some(h) = holder
            && h.host == treesync_backend::lock::hostname()
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
    pub(super) async fn renew(&self, lock: &Fh) -> Result<(), String> {
        let nfs = self.nfs().await.map_err(|e| e.to_string())?;
        let meta =
            self.lock_dir(false).await.map_err(|e| e.to_string())?.ok_or("the directory of the lock file is gone")?;
        match nfs.lookup(&meta, self.lock_name(), self.lock_name()).await {
            Ok((fh, _)) if fh.data.0 == lock.data.0 => {}
            Ok(_) => return Err("the lock file is another sync's now".into()),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Err("the lock file is gone".into()),
            Err(e) => return Err(e.to_string()),
        }
        match nfs.setattr(lock, None, true, self.lock_name()).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Fail with [`Error::LeaseLost`] when a renewal of this run's lock failed: another sync
    /// may have taken the target over, so nothing more may be written.
    pub(super) fn check_lease(&self) -> Result<(), Error> {
        match self.lease_lost() {
            Some(detail) => Err(Error::LeaseLost { target: self.inner.url.to_string(), detail }),
            None => Ok(()),
        }
    }

    pub(super) async fn take_lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let shown = self.lock_shown();
        let meta = self.lock_dir(true).await?.expect("created");
        let nfs = self.nfs().await?;
        let mut tries = 0;
        let fh = loop {
            tries += 1;
            let made =
                nfs.create(&meta, self.lock_name(), nfs::mode_attr(0o644, Some(0)), true, shown.as_bytes()).await;
            match nfs.made(&meta, self.lock_name(), shown.as_bytes(), made, false).await {
                Ok(fh) => break fh,
                Err(e) if is(&e, nfsstat3::NFS3ERR_EXIST) => {
                    let (fh, attr) = match nfs.lookup(&meta, self.lock_name(), shown.as_bytes()).await {
                        Ok(r) => r,
                        // Released between our CREATE and LOOKUP: CREATE again. Past a few
                        // tries the lock is contended, which is what `Locked` says (exit 3).
                        Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => {
                            if tries < 4 {
                                continue;
                            }
                            return Err(Error::Locked {
                                holder: format!(
                                    "other syncs, which took and released lock file {shown} on the server {tries} times while this one tried to take it"
                                ),
                            });
                        }
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

    pub(super) async fn release(&self, guard: LockGuard) -> Result<(), Error> {
        let run = self.inner.run.lock().expect("never poisoned").take();
        if let Some(run) = run {
            run.renew.abort();
            // A lost lease: the lock file may be another sync's now; leave it be.
            let lost = run.lost.lock().expect("never poisoned").is_some();
            if !run.released.swap(true, Ordering::Relaxed) && !lost {
                let nfs = self.nfs().await?;
                if let Some(meta) = self.lock_dir(false).await? {
                    match nfs.remove(&meta, self.lock_name(), self.lock_name()).await {
                        Ok(_) | Err(NfsError::DoneBefore(_)) => {}
                        Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => {}
                        Err(e) => return Err(nfs_io("unlock", self.lock_shown(), e)),
                    }
                }
            }
        }
        drop(guard);
        Ok(())
    }
}

/// The holder line of the lock file `fh`, if it is one treesync wrote: a regular file of its
/// own (one link: not a hard link to some other file) holding one short holder line
/// (`pid N on HOST, started at unix time T`). Anything else is never shown.
pub(super) async fn lock_holder(nfs: &nfs::Nfs, fh: &Fh, attr: &fattr3, about: &[u8]) -> Option<Holder> {
    const MAX: u32 = 512;
    if attr.type_ != ftype3::NF3REG || attr.nlink != 1 || attr.size > u64::from(MAX) {
        return None;
    }
    let (data, _) = nfs.read(fh, 0, MAX, about).await.ok()?;
    Holder::from_lock_file(&data)
}

/// The lock of one run (see [`Backend::unlock`]); dropped without an unlock it is removed in
/// the background, or taken over by the next run.
pub(super) struct Held {
    backend: ClientBackend,
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
                if let (Ok(nfs), Ok(Some(meta))) = (b.nfs().await, b.lock_dir(false).await) {
                    let _ = nfs.remove(&meta, b.lock_name(), b.lock_name()).await;
                }
            });
        }
        *self.backend.inner.run.lock().expect("never poisoned") = None;
    }
}
