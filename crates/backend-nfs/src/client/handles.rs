//! The directory-handle cache: every directory a run touches is looked up once (LOOKUP
//! results by path; directories made by the run are known from their MKDIR replies).

use std::fmt;
use std::io::ErrorKind;
use std::sync::Arc;

use nfs3_types::nfs3::{ftype3, nfsstat3};
use tokio::sync::OnceCell;
use treesync_backend::backend::Error;

#[allow(clippy::wildcard_imports)]
use super::inner::*;
use super::nfs::{Fh, NfsError};

/// How a directory lookup failed.
pub(super) enum DirError {
    /// Nothing there.
    Missing,
    /// Something that is not a directory (a symlink included).
    NotDir,
    /// The call failed.
    Call(NfsError),
    /// The target itself could not be reached (mount, connection, its path).
    Target(Error),
}

impl DirError {
    /// The error of `op` at `path`, whose directory could not be looked up: the one mapping of
    /// lookup failures to errors (callers judge first where a missing directory is fine, e.g.
    /// for a removal). Missing and not-a-directory are drift the executor heals.
    pub(super) fn at(self, op: &'static str, path: impl fmt::Display) -> Error {
        match self {
            DirError::Missing => io_error(op, path, ErrorKind::NotFound, "the directory is missing on the server"),
            DirError::NotDir => Error::NotBeneath { path: path.to_string() },
            DirError::Call(e) => nfs_io(op, path, e),
            DirError::Target(e) => e,
        }
    }
}

impl ClientBackend {
    /// The handle of directory `path` below the target (looked up once per run).
    pub(super) async fn dir(&self, path: &[u8]) -> Result<Fh, DirError> {
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

    pub(super) fn forget(&self, path: &[u8]) {
        self.inner
            .dirs
            .retain(|k, _| !(k.as_slice() == path || (k.starts_with(path) && k.get(path.len()) == Some(&b'/'))));
    }

    pub(super) fn remember(&self, path: &[u8], fh: Fh) {
        let cell = OnceCell::new();
        let _ = cell.set(fh);
        self.inner.dirs.insert(path.to_vec(), Arc::new(cell));
    }
}
