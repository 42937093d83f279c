//! `scan` for verify: READDIRPLUS of every directory, many in flight.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use nfs3_types::nfs3::ftype3;
use treesync_backend::RelPath;
use treesync_backend::backend::{Error, Found, FoundKind};
use treesync_backend::path::STATE_DIR;

use super::handles::DirError;
#[allow(clippy::wildcard_imports)]
use super::inner::*;
use super::nfs::Fh;

impl ClientBackend {
    pub(super) async fn scan_all(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        self.inner.scanned.lock().expect("never poisoned").clear();
        let root = self.root_fh().await?;
        self.scan_from(vec![(Vec::new(), root)], true, jobs).await
    }

    /// What is directly in each of `dirs` (one READDIRPLUS each, after the lookups of their
    /// ancestors); a directory that is missing or is not one is skipped.
    pub(super) async fn scan_dirs_only(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        // Handles from an earlier run may be stale (a directory replaced since): look up anew.
        self.inner.dirs.clear();
        self.inner.scanned.lock().expect("never poisoned").clear();
        let mut start = Vec::with_capacity(dirs.len());
        for d in dirs {
            match self.dir(d.as_bytes()).await {
                Ok(fh) => start.push((d.as_bytes().to_vec(), fh)),
                Err(DirError::Missing | DirError::NotDir) => {}
                Err(e) => return Err(e.at("read directory", d)),
            }
        }
        self.scan_from(start, false, jobs).await
    }

    /// READDIRPLUS of the directories `start` (and, with `recurse`, of everything below them).
    async fn scan_from(&self, start: Vec<(Vec<u8>, Fh)>, recurse: bool, jobs: usize) -> Result<Vec<Found>, Error> {
        let nfs = self.nfs().await?;
        let mut out = Vec::new();
        let mut queue = start;
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
                                if recurse {
                                    queue.push((p, fh));
                                }
                            }
                            ftype3::NF3REG => {
                                let mut kept = self.inner.scanned.lock().expect("never poisoned");
                                if kept.len() < SCANNED_KEPT {
                                    kept.insert(p.clone(), (fh, attr.size));
                                }
                                drop(kept);
                                out.push(Found {
                                path: p,
                                kind: FoundKind::File {
                                    size: attr.size,
                                    executable: Some(attr.mode & 0o111 != 0),
                                    stat: Some(stat_of(&attr)),
                                    etag: None,
                                    typed: true,
                                },
                            })
                            }
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
}
