//! Trees the planner read to see whether they hold content, kept for the diff that usually
//! reads them next.

use std::collections::HashMap;

use gix_hash::ObjectId;

/// Trees read by `Planner::tree_has_content`, kept for the one read that usually follows:
/// the diff of that very tree. Taken out when read, so the cache holds only trees whose diff
/// is still to come, bounded in count and bytes (past the bound nothing more is kept and the
/// diff decodes the tree again, as it would without the cache).
#[derive(Default)]
pub(super) struct KeptTrees {
    pub(super) trees: HashMap<ObjectId, Vec<u8>>,
    pub(super) bytes: usize,
}

impl KeptTrees {
    const MAX_TREES: usize = 256;
    const MAX_BYTES: usize = 4 << 20;

    pub(super) fn keep(&mut self, id: ObjectId, bytes: &[u8]) {
        if self.trees.len() < Self::MAX_TREES
            && self.bytes + bytes.len() <= Self::MAX_BYTES
            && !self.trees.contains_key(&id)
        {
            self.bytes += bytes.len();
            self.trees.insert(id, bytes.to_vec());
        }
    }

    pub(super) fn take(&mut self, id: &ObjectId) -> Option<Vec<u8>> {
        let bytes = self.trees.remove(id)?;
        self.bytes -= bytes.len();
        Some(bytes)
    }
}
