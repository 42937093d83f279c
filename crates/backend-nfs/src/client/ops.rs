//! Executing a plan's ops: each op is a short chain of NFS calls (see [`super`]).

use std::io::ErrorKind;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use nfs3_types::nfs3::{ftype3, nfsstat3, stable_how};
use treesync_backend::backend::Error;
use treesync_backend::source::{BlobError, BlobSource, OwnedContent};
use treesync_backend::{Op, RelPath};
use treesync_backend_local::fs::Target;

use super::handles::DirError;
#[allow(clippy::wildcard_imports)]
use super::inner::*;
use super::nfs::{self, Fh, NfsError};

/// WRITEs of one large file in flight at once.
pub(super) const CHUNKS_IN_FLIGHT: usize = 4;

impl ClientBackend {
    pub(super) async fn run(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
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
            Err(e) => return Err(e.at("open the directory of", path)),
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
            Op::Write { executable, .. } => {
                let content = op.owned_content().expect("a write has content");
                self.replace_file(nfs, &dir, name, content, *executable, blobs, path).await
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
            Op::Chmod { executable, .. } => {
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
                    _ => {
                        let content = op.owned_content().expect("a mode change has content");
                        self.replace_file(nfs, &dir, name, content, *executable, blobs, path).await
                    }
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
    pub(super) async fn replace_file(
        &self,
        nfs: &nfs::Nfs,
        dir: &Fh,
        name: &[u8],
        content: OwnedContent,
        executable: bool,
        blobs: &Arc<dyn BlobSource>,
        path: &RelPath,
    ) -> Result<(), Error> {
        let about = path.as_bytes();
        let tmp = Target::sibling_tmp(name);
        let mode = if executable { 0o755 } else { 0o644 };
        let fh = create_new(nfs, dir, &tmp, mode, about).await.map_err(|e| nfs_io("write", path, e))?;
        let result = async {
            self.write_content(nfs, &fh, content, blobs, path).await?;
            match nfs.rename(dir, &tmp, dir, name, about).await {
                Ok(_) | Err(NfsError::DoneBefore(_)) => Ok(()),
                Err(e) => Err(nfs_io("write", path, e)),
            }
        }
        .await;
        if result.is_err() {
            let _ = nfs.remove(dir, &tmp, about).await;
            return result;
        }
        // The attributes a later READDIRPLUS of the untouched file returns, for the next
        // verify: one GETATTR once the file is in place (the RENAME moved its ctime, and its
        // reply carries only the directory's attributes). Beyond what a sync records
        // (`index_delta::RECORD_AT_MOST`), not even that; without it the file is hashed once.
        let room = self.inner.recording.load(std::sync::atomic::Ordering::Relaxed)
            && self.inner.written.lock().expect("never poisoned").len() < treesync_backend::backend::RECORD_AT_MOST;
        if room && let Ok(a) = nfs.getattr(&fh, about).await {
            let written = treesync_backend::backend::Written { path: about.to_vec(), size: a.size, stat: stat_of(&a) };
            self.inner.written.lock().expect("never poisoned").push(written);
        }
        result
    }

    /// Write the blob into the open temporary `fh`: one FILE_SYNC WRITE when it fits in one
    /// chunk, else UNSTABLE chunks (a few in flight, read from the repository as they go, never
    /// the whole file in memory here) and one COMMIT.
    pub(super) async fn write_content(
        &self,
        nfs: &nfs::Nfs,
        fh: &Fh,
        content: OwnedContent,
        blobs: &Arc<dyn BlobSource>,
        path: &RelPath,
    ) -> Result<(), Error> {
        let about = path.as_bytes();
        let blob_err = |e: BlobError| Error::from_blob("write", path, e);
        if !content.may_have_bytes() {
            return Ok(());
        }
        let size = content.size;
        let chunk = self.wtmax().await as usize;
        if size <= chunk as u64 {
            let mut data = Vec::with_capacity(size as usize);
            blobs
                .read_content(&content.as_content(), &mut |c| {
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
            source.read_content(&content.as_content(), &mut |mut c| {
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
            return Err(io_error(
                "write",
                path,
                ErrorKind::Interrupted,
                "the NFS server restarted during the write (its write verifier changed); run sync again",
            ));
        }
        Ok(())
    }
}

/// CREATE `name` in `dir` as a new, empty file with `mode`: GUARDED, so whatever is already
/// there (a killed run's temporary, or a hard link someone planted to a file outside the tree)
/// is never truncated or written through. It is removed (only its name: the file it links
/// to is untouched) and the CREATE tried once more.
pub(super) async fn create_new(nfs: &nfs::Nfs, dir: &Fh, name: &[u8], mode: u32, about: &[u8]) -> Result<Fh, NfsError> {
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
pub(super) async fn read_all(nfs: &nfs::Nfs, fh: &Fh, size_hint: u64, about: &[u8]) -> Result<Vec<u8>, NfsError> {
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
pub(super) async fn write_all(
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
