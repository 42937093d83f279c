//! The state folder `.treesync` on the server: the state file (written in place, like the
//! mounted backend, unless it has other hard links) and the auxiliary files.

use nfs3_types::nfs3::{fattr3, ftype3, nfsstat3, stable_how};
use treesync_backend::backend::Error;
use treesync_backend::path::STATE_DIR;
use treesync_backend_local::fs::Target;

#[allow(clippy::wildcard_imports)]
use super::inner::*;
use super::nfs::{Fh, NfsError};
use super::ops::{create_new, read_all, write_all};

impl ClientBackend {
    /// `.treesync`'s handle; `None` if missing and not `create`.
    pub(super) async fn meta(&self, create: bool) -> Result<Option<Fh>, Error> {
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

    pub(super) async fn read_meta_file(&self, name: &[u8]) -> Result<Option<(Fh, Option<fattr3>, Vec<u8>)>, Error> {
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

    pub(super) async fn read_state(&self) -> Result<Option<Vec<u8>>, Error> {
        let Some((fh, attr, bytes)) = self.read_meta_file(b"state").await? else { return Ok(None) };
        // Written in place only if it is a file of its own: never through a hard link (or
        // anything else) someone put there; that is replaced by a new file instead.
        let own = attr.is_some_and(|a| a.type_ == ftype3::NF3REG && a.nlink == 1);
        if let Some(run) = self.inner.run.lock().expect("never poisoned").as_mut() {
            run.state = own.then_some((fh, bytes.len()));
        }
        Ok(Some(bytes))
    }

    pub(super) async fn write_state(&self, bytes: &[u8]) -> Result<(), Error> {
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

    pub(super) async fn read_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.read_meta_file(name.as_bytes()).await?.map(|(_, _, b)| b))
    }

    /// Append `bytes` to `name` in `.treesync` (created if absent): a LOOKUP for its size, then
    /// FILE_SYNC WRITEs at its end. Only into a regular file of its own (one link): a hard
    /// link or symlink someone put there would take the bytes elsewhere.
    pub(super) async fn append_to_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let shown = format!("{STATE_DIR}/{name}");
        let meta = self.meta(true).await?.expect("created");
        let nfs = self.nfs().await?;
        let (fh, end) = match lookup_attr(nfs, &meta, name.as_bytes(), &shown).await {
            Ok((fh, a)) => {
                match a.type_ {
                    ftype3::NF3REG if a.nlink == 1 => {}
                    ftype3::NF3LNK => {
                        return Err(Error::StateFolder {
                            path: format!("{}/{shown}", self.inner.url),
                            found: "symlink",
                        });
                    }
                    _ => {
                        let url = &self.inner.url;
                        return Err(not_own_file(url, &format!("{}/{shown}", url.path.trim_end_matches('/'))));
                    }
                }
                (fh, a.size)
            }
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => {
                let fh = create_new(nfs, &meta, name.as_bytes(), 0o644, shown.as_bytes())
                    .await
                    .map_err(|e| nfs_io("write", &shown, e))?;
                (fh, 0)
            }
            Err(e) => return Err(nfs_io("read", &shown, e)),
        };
        let chunk = self.wtmax().await as usize;
        for (i, part) in bytes.chunks(chunk).enumerate() {
            write_all(nfs, &fh, end + (i * chunk) as u64, part, stable_how::FILE_SYNC, shown.as_bytes())
                .await
                .map_err(|e| nfs_io("write", &shown, e))?;
        }
        Ok(())
    }

    /// The modification time of `name` in `.treesync` as the server's clock stamped it (the
    /// attributes of a LOOKUP), `None` if absent.
    pub(super) async fn aux_time(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        let shown = format!("{STATE_DIR}/{name}");
        let Some(meta) = self.meta(false).await? else { return Ok(None) };
        let nfs = self.nfs().await?;
        match lookup_attr(nfs, &meta, name.as_bytes(), &shown).await {
            Ok((_, a)) => Ok(Some((i64::from(a.mtime.seconds), a.mtime.nseconds))),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => Ok(None),
            Err(e) => Err(nfs_io("read the time of", &shown, e)),
        }
    }

    pub(super) async fn write_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
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
