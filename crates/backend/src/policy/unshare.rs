use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{Backend, Batch, Error};
use crate::op::Op;
use crate::source::BlobSource;

/// Change modes by rewriting: each [`Op::Chmod`] becomes an [`Op::Write`] of the same blob
/// (a temporary renamed over the file), so an inode the file shares with another tree is never
/// changed in place. Generations started as a hardlink farm of another generation
/// (core's `generation`) share the inodes of every file neither has rewritten since; a
/// `fchmod` would change the file in both.
pub struct RewriteModes<B> {
    inner: B,
}

impl<B: Backend> RewriteModes<B> {
    /// Wrap `inner`.
    pub fn new(inner: B) -> Self {
        RewriteModes { inner }
    }

    fn rewrite(op: &Op) -> Option<Op> {
        match op {
            Op::Chmod { path, executable, blob, size, conversion } => Some(Op::Write {
                path: path.clone(),
                blob: *blob,
                size: *size,
                executable: *executable,
                conversion: conversion.clone(),
                reason: Some("its mode changed; rewritten, as files may be shared with another generation".into()),
            }),
            _ => None,
        }
    }
}

impl<B: Backend> fmt::Display for RewriteModes<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RewriteModes({})", self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for RewriteModes<B> {
    crate::delegate_backend!(inner, except execute, execute_batch);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        match Self::rewrite(op) {
            Some(write) => self.inner.execute(&write, blobs).await,
            None => self.inner.execute(op, blobs).await,
        }
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        if !batch.iter().any(|op| matches!(op, Op::Chmod { .. })) {
            return self.inner.execute_batch(batch, blobs).await;
        }
        let ops: Arc<[Op]> = batch.iter().map(|op| Self::rewrite(op).unwrap_or_else(|| op.clone())).collect();
        self.inner.execute_batch(Batch::all(ops), blobs).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;
    use crate::policy::Count;

    struct Empty;
    impl BlobSource for Empty {
        fn read_blob(
            &self,
            _id: &gix_hash::ObjectId,
            _size: u64,
            _sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
        ) -> Result<(), crate::source::BlobError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn chmods_reach_the_backend_as_writes() {
        let counted = Count::new(MemoryBackend::new());
        let record = counted.record();
        let b = RewriteModes::new(counted);
        let blob = gix_hash::ObjectId::empty_blob(gix_hash::Kind::Sha1);
        let path = crate::RelPath::parse("f").expect("path");
        let chmod = Op::Chmod { path: path.clone(), executable: true, blob, size: 0, conversion: None };
        let blobs: Arc<dyn BlobSource> = Arc::new(Empty);
        b.execute(&Op::Write { path, blob, size: 0, executable: false, conversion: None, reason: None }, &blobs)
            .await
            .expect("write");
        b.execute_batch(Batch::all(vec![chmod.clone(), chmod.clone()].into()), &blobs).await.expect("batch");
        b.execute(&chmod, &blobs).await.expect("one");
        let r = record.lock().expect("record");
        assert_eq!((r.counts.write, r.counts.chmod), (4, 0), "{:?}", r.counts);
    }
}
