//! [`Blobs`]: the blobs of a plan that recursed into submodules, read from whichever repository
//! holds them.

use std::sync::Arc;

use gix_hash::ObjectId;

use crate::source::{BlobError, BlobSource, Repo, Sink};

/// A [`BlobSource`] over several repositories (a superproject and its submodules): each blob
/// is read from the first repository that has it.
#[derive(Debug, Clone)]
pub struct Blobs {
    repos: Vec<Repo>,
}

impl Blobs {
    /// Read from `repos`, asked in this order (at least one).
    pub fn new(repos: Vec<Repo>) -> Blobs {
        assert!(!repos.is_empty(), "Blobs reads from at least one repository");
        Blobs { repos }
    }

    /// The source for a sync: `repo` alone when there is nothing else (no lookups per blob).
    pub fn source(repos: Vec<Repo>) -> Arc<dyn BlobSource> {
        match <[Repo; 1]>::try_from(repos) {
            Ok([one]) => Arc::new(one),
            Err(many) => Arc::new(Blobs::new(many)),
        }
    }
}

impl BlobSource for Blobs {
    fn read_blob(&self, id: &ObjectId, size: u64, sink: Sink<'_>) -> Result<(), BlobError> {
        let holder = self
            .repos
            .iter()
            .find(|r| r.with_objects(|odb| matches!(odb.try_header(id), Ok(Some(_)))))
            // None has it: the first one's error says so.
            .unwrap_or(&self.repos[0]);
        holder.read_blob(id, size, sink)
    }
}
