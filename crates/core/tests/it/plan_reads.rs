//! Issue 18: an incremental plan decodes each tree it needs once. A directory holding only
//! directories is asked whether it has content (a tree of empty trees makes no directory);
//! answering that reads a subtree, and the planner picks one the diff reads next and keeps
//! it, instead of decoding another tree or the same one twice.

use std::collections::HashMap;
use std::sync::Mutex;

use gix_hash::ObjectId;
use treesync_core::plan;
use treesync_testkit::conformance::History;
use treesync_testkit::history::{Entry, Model};

fn file(content: &str) -> Entry {
    Entry::File { content: content.as_bytes().to_vec(), executable: false }
}

/// The object database, counting the objects read by id.
struct Counting<'a> {
    inner: &'a dyn gix_object::FindObjectOrHeader,
    reads: Mutex<HashMap<ObjectId, usize>>,
}

impl gix_object::Find for Counting<'_> {
    fn try_find<'b>(
        &self,
        id: &gix_hash::oid,
        buffer: &'b mut Vec<u8>,
    ) -> gix::error::Result<Option<gix_object::Data<'b>>> {
        *self.reads.lock().expect("never poisoned").entry(id.to_owned()).or_default() += 1;
        self.inner.try_find(id, buffer)
    }
}

impl gix_object::FindHeader for Counting<'_> {
    fn try_header(&self, id: &gix_hash::oid) -> gix::error::Result<Option<gix_object::Header>> {
        self.inner.try_header(id)
    }
}

#[test]
fn an_update_below_directories_of_directories_decodes_each_tree_once() {
    // Top-level directories of directories only (`dNN/sMM/file`), as in a tree sharded by
    // prefix; the update changes one file in each of three of them.
    let mut a = Model::default();
    for d in 0..6 {
        for s in 0..4 {
            a.insert(&format!("d{d:02}/s{s:02}/f.txt"), file(&format!("{d} {s}\n")));
        }
    }
    let mut b = a.clone();
    for d in [1, 3, 5] {
        b.insert(&format!("d{d:02}/s03/f.txt"), file(&format!("changed {d}\n")));
    }
    let h = History::from_trees(&[a, b]);
    let tree = |i: usize| h.repo.resolve(&h.commits[i]).expect("resolve").tree;
    let (from, to) = (tree(0), tree(1));
    h.repo.with_objects(|odb| {
        let counting = Counting { inner: odb, reads: Mutex::new(HashMap::new()) };
        let plan = plan::plan(&counting, Some(from), to).expect("plan");
        assert_eq!(plan.len(), 3, "three files written: {plan:?}");
        let reads = counting.reads.into_inner().expect("never poisoned");
        let twice: Vec<_> = reads.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "objects decoded more than once: {twice:?}");
        // The two roots, and per changed directory its two versions and the two versions of
        // the changed subdirectory: nothing else (no unchanged `s00` read to learn that the
        // directory has content).
        assert_eq!(reads.len(), 2 + 3 * 4, "objects read: {reads:?}");
    });
}
