//! Trees on the server: a generation cloned (a hard-link farm, else copies; of the state folder
//! only the state, last) and one removed without following a symlink.

use std::collections::VecDeque;

use futures::stream::{self, TryStreamExt};

use super::*;

impl ClientHost {
    /// [`Host::clone_tree`]: `HOME/to` made as a copy of the directory at `from`, a directory
    /// at a time (READDIRPLUS), its entries made `JOBS` at a time.
    pub(super) async fn clone_tree_at(&self, from: &At, to: &str) -> Result<Cloned, Error> {
        self.check_lease()?;
        let nfs = self.nfs().await?;
        let (src, attr, _) = self.dir_of(from).await?;
        let home = self.home_fh_or_missing().await?;
        let top = self.mkdir(&home, to.as_bytes(), attr.mode & 0o7777, false, &self.shown(to)).await?;
        let linking = AtomicBool::new(true);
        let (dirs, entries, bytes) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let mut state = None;
        let mut queue = VecDeque::from([(src, top, self.shown(to), true)]);
        while let Some((src, dst, here, root)) = queue.pop_front() {
            let listed =
                nfs.readdirplus(&src, here.as_bytes()).await.map_err(|e| nfs_io("read directory", &here, e))?;
            let mut items = Vec::with_capacity(listed.len());
            for e in listed {
                let shown = format!("{here}/{}", String::from_utf8_lossy(&e.name));
                let (fh, attr) = match (e.fh, e.attr) {
                    (Some(fh), Some(a)) => (fh, a),
                    _ => lookup_attr(nfs, &src, &e.name, &shown).await.map_err(|er| nfs_io("read", &shown, er))?,
                };
                if root && e.name == STATE_DIR.as_bytes() {
                    // Of the state folder only the state file, copied last.
                    if attr.type_ == ftype3::NF3DIR
                        && let Ok((sfh, sattr)) = lookup_attr(nfs, &fh, b"state", &shown).await
                        && sattr.type_ == ftype3::NF3REG
                    {
                        state = Some((sfh, sattr, dst.clone(), shown));
                    }
                    continue;
                }
                items.push(Item { name: e.name, fh, attr, shown });
            }
            let made: Vec<Option<(Fh, Fh, String)>> = stream::iter(items.into_iter().map(Ok::<_, Error>))
                .map_ok(|item| {
                    let (dst, linking, dirs, entries, bytes) = (&dst, &linking, &dirs, &entries, &bytes);
                    async move {
                        let Item { name, fh, attr, shown } = item;
                        let about = shown.as_bytes();
                        match attr.type_ {
                            ftype3::NF3DIR => {
                                let made = self.mkdir(dst, &name, attr.mode & 0o7777, false, &shown).await?;
                                dirs.fetch_add(1, Ordering::Relaxed);
                                Ok(Some((fh, made, shown)))
                            }
                            ftype3::NF3REG => {
                                entries.fetch_add(1, Ordering::Relaxed);
                                if linking.load(Ordering::Relaxed) {
                                    match nfs.link(&fh, dst, &name, about).await {
                                        Ok(()) => return Ok(None),
                                        Err(e) if is(&e, nfsstat3::NFS3ERR_NOTSUPP) => {
                                            linking.store(false, Ordering::Relaxed);
                                        }
                                        // This file has as many links as the server allows.
                                        Err(e) if is(&e, nfsstat3::NFS3ERR_MLINK) => {}
                                        Err(e) => return Err(nfs_io("link", &shown, e)),
                                    }
                                }
                                let n = self.copy_file(&fh, &attr, dst, &name, &shown).await?;
                                bytes.fetch_add(n, Ordering::Relaxed);
                                Ok(None)
                            }
                            ftype3::NF3LNK => {
                                entries.fetch_add(1, Ordering::Relaxed);
                                let text =
                                    nfs.readlink(&fh, about).await.map_err(|e| nfs_io("read symlink", &shown, e))?;
                                match nfs.symlink(dst, &name, &text, about).await {
                                    Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(None),
                                    Err(e) => Err(nfs_io("create symlink", &shown, e)),
                                }
                            }
                            // Nothing treesync writes (a FIFO, a device): not part of any tree.
                            _ => Ok(None),
                        }
                    }
                })
                .try_buffer_unordered(JOBS)
                .try_collect()
                .await?;
            queue.extend(made.into_iter().flatten().map(|(s, d, p)| (s, d, p, false)));
        }
        if let Some((sfh, sattr, dst, shown)) = state {
            let meta = self.mkdir(&dst, STATE_DIR.as_bytes(), 0o755, true, &shown).await?;
            let about = shown.as_bytes();
            let data = read_all(nfs, &sfh, sattr.size, about).await.map_err(|e| nfs_io("copy", &shown, e))?;
            let tmp = Target::sibling_tmp(b"state");
            let fh = create_new(nfs, &meta, &tmp, 0o644, about).await.map_err(|e| nfs_io("copy", &shown, e))?;
            let chunk = self.target.wtmax().await as usize;
            for (i, part) in data.chunks(chunk).enumerate() {
                write_all(nfs, &fh, (i * chunk) as u64, part, stable_how::FILE_SYNC, about)
                    .await
                    .map_err(|e| nfs_io("copy", &shown, e))?;
            }
            match nfs.rename(&meta, &tmp, &meta, b"state", about).await {
                Ok(()) | Err(NfsError::DoneBefore(_)) => {}
                Err(e) => return Err(nfs_io("copy", &shown, e)),
            }
        }
        let copied = bytes.load(Ordering::Relaxed);
        Ok(Cloned {
            how: if linking.load(Ordering::Relaxed) { CloneHow::Hardlink } else { CloneHow::Copy },
            dirs: dirs.load(Ordering::Relaxed) + 1,
            entries: entries.load(Ordering::Relaxed),
            bytes_copied: copied,
        })
    }

    /// Copy the file `src` (attributes `attr`) as `name` in `dir`: a new file of its own, by
    /// READs and WRITEs. Answers the bytes copied.
    async fn copy_file(&self, src: &Fh, attr: &fattr3, dir: &Fh, name: &[u8], shown: &str) -> Result<u64, Error> {
        let nfs = self.nfs().await?;
        let about = shown.as_bytes();
        let fh = create_new(nfs, dir, name, attr.mode & 0o7777, about).await.map_err(|e| nfs_io("copy", shown, e))?;
        let chunk = self.target.wtmax().await;
        let mut offset = 0u64;
        loop {
            let (data, eof) = nfs.read(src, offset, chunk, about).await.map_err(|e| nfs_io("copy", shown, e))?;
            if !data.is_empty() {
                write_all(nfs, &fh, offset, &data, stable_how::FILE_SYNC, about)
                    .await
                    .map_err(|e| nfs_io("copy", shown, e))?;
                offset += data.len() as u64;
            }
            if eof || data.is_empty() {
                return Ok(offset);
            }
        }
    }

    /// Remove the directory `name` in `dir` and everything in it: READDIRPLUS of each
    /// directory, REMOVE of each file and symlink (never followed), RMDIR deepest first.
    /// Answers how many entries were removed (the directory included).
    pub(super) async fn remove_tree(&self, dir: &Fh, name: &[u8], shown: &str) -> Result<u64, Error> {
        let nfs = self.nfs().await?;
        let (top, attr) = match lookup_attr(nfs, dir, name, shown).await {
            Ok(r) => r,
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Ok(0),
            Err(e) => return Err(nfs_io("remove", shown, e)),
        };
        if attr.type_ != ftype3::NF3DIR {
            gone_ok(nfs.remove(dir, name, shown.as_bytes()).await).map_err(|e| nfs_io("remove", shown, e))?;
            return Ok(1);
        }
        let mut removed = 0u64;
        // Directories found, parents before children: removed in reverse.
        let mut dirs: Vec<(Fh, Vec<u8>, String)> = Vec::new();
        let mut queue = VecDeque::from([(top, shown.to_string())]);
        while let Some((fh, here)) = queue.pop_front() {
            let entries =
                nfs.readdirplus(&fh, here.as_bytes()).await.map_err(|e| nfs_io("read directory", &here, e))?;
            let mut files = Vec::new();
            for e in entries {
                let p = format!("{here}/{}", String::from_utf8_lossy(&e.name));
                let is_dir = match (&e.attr, &e.fh) {
                    (Some(a), Some(h)) => {
                        if a.type_ == ftype3::NF3DIR {
                            queue.push_back((h.clone(), p.clone()));
                        }
                        a.type_ == ftype3::NF3DIR
                    }
                    _ => {
                        let (h, a) =
                            lookup_attr(nfs, &fh, &e.name, &p).await.map_err(|er| nfs_io("read directory", &p, er))?;
                        if a.type_ == ftype3::NF3DIR {
                            queue.push_back((h, p.clone()));
                        }
                        a.type_ == ftype3::NF3DIR
                    }
                };
                if is_dir {
                    dirs.push((fh.clone(), e.name, p));
                } else {
                    files.push((e.name, p));
                }
            }
            removed += files.len() as u64;
            stream::iter(files.into_iter().map(Ok::<_, Error>))
                .try_for_each_concurrent(JOBS, |(n, p)| {
                    let fh = fh.clone();
                    async move { gone_ok(nfs.remove(&fh, &n, p.as_bytes()).await).map_err(|e| nfs_io("remove", &p, e)) }
                })
                .await?;
        }
        for (parent, n, p) in dirs.into_iter().rev() {
            gone_ok(nfs.rmdir(&parent, &n, p.as_bytes()).await).map_err(|e| nfs_io("remove directory", &p, e))?;
            removed += 1;
        }
        gone_ok(nfs.rmdir(dir, name, shown.as_bytes()).await).map_err(|e| nfs_io("remove directory", shown, e))?;
        Ok(removed + 1)
    }
}

/// One entry of a directory being copied, with its handle and attributes.
struct Item {
    name: Vec<u8>,
    fh: Fh,
    attr: fattr3,
    shown: String,
}
