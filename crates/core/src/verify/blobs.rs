//! Blobs of the recorded tree, read from the repository or its submodules.

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::FindExt;

use super::Error;
use crate::backend::FoundKind;
use crate::convert::{Conversion, Converter};
use crate::source::{self, Repo};

/// A blob the tree names could not be read: the repository is damaged or incomplete. That is
/// an error of the repository, never drift of the target.
fn object_error(id: &ObjectId, path: &[u8], cause: source::Cause) -> Error {
    Error::Source(source::Error::Object {
        what: "blob",
        id: *id,
        at: format!(" (at {})", crate::path::quote(path)),
        source: cause,
    })
}

/// The repository of `repos` that holds blob `id` (the first one; blob ids are content
/// addresses), and its size; `repos` is the repository, then submodules.
fn holder<'r>(repos: &'r [Repo], id: &ObjectId, path: &[u8]) -> Result<(&'r Repo, u64), Error> {
    let mut first_error = None;
    for repo in repos {
        match repo.with_objects(|odb| odb.try_header(id)) {
            Ok(Some(h)) => return Ok((repo, h.size)),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(match first_error {
        Some(e) => object_error(id, path, source::Cause::gix(e)),
        None => object_error(id, path, source::Cause::found("it is not in the repository")),
    })
}

/// The size of blob `id` (at `path` in the tree), from its header.
pub(super) fn blob_size(repos: &[Repo], id: &ObjectId, path: &[u8]) -> Result<u64, Error> {
    Ok(holder(repos, id, path)?.1)
}

/// The content of blob `id` (at `path` in the tree).
pub(super) fn blob_data(repos: &[Repo], id: &ObjectId, path: &[u8], buf: &mut Vec<u8>) -> Result<Vec<u8>, Error> {
    let (repo, _) = holder(repos, id, path)?;
    repo.with_objects(|odb| odb.find_blob(id, buf).map(|b| b.data.to_vec()))
        .map_err(|e| object_error(id, path, source::Cause::gix(e)))
}

/// The bytes a sync writes for blob `id` at `path` under `conversion`.
pub(super) fn converted_data(
    repos: &[Repo],
    converter: &Converter,
    id: &ObjectId,
    path: &[u8],
    conversion: &Conversion,
    buf: &mut Vec<u8>,
) -> Result<Vec<u8>, Error> {
    let data = blob_data(repos, id, path, buf)?;
    Ok(converter.converted(&data, path.as_bstr(), id, conversion)?)
}

pub(super) fn kind_name(k: &FoundKind) -> &'static str {
    match k {
        FoundKind::Dir => "directory",
        FoundKind::File { .. } => "file",
        FoundKind::Link { .. } => "symlink",
        FoundKind::Other => "special file",
    }
}

pub(super) fn lookup<'a, T>(v: &'a [(Vec<u8>, T)], path: &[u8]) -> Option<&'a T> {
    v.binary_search_by(|e| e.0.as_slice().cmp(path)).ok().map(|i| &v[i].1)
}
