//! The conformance suite on a real local directory.

use std::collections::BTreeMap;
use std::sync::Arc;

use treesync_backend_local::{LocalBackend, Options};
use treesync_core::Backend;
use treesync_testkit::conformance::Fixture;
use treesync_testkit::tree::{self, Node};

struct Local {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    options: Options,
}

impl Local {
    fn new(options: Options) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("target");
        Local { _dir: dir, root, options }
    }
}

impl Fixture for Local {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(LocalBackend::new(&self.root, self.options.clone()))
    }
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.root)
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        tree::put_file(&self.root, path, content)
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &std::path::Path) -> bool {
        tree::replace_dir_by_symlink(&self.root, path, target)
    }
    fn tamper(&self, path: &str, how: &tree::Tamper) -> bool {
        tree::tamper(&self.root, path, how)
    }
}

mod wide {
    use super::*;
    treesync_testkit::conformance_suite!(Local::new(Options::default()));
}

/// The same suite with one op per batch and one batch at a time: ordering bugs that wide
/// batches hide show up here.
mod serial {
    use super::*;
    treesync_testkit::conformance_suite!(Local::new(Options { jobs: 1, batch: 1, min_batch: 1, fsync: false }));
}

/// Two first syncs into a target directory that does not exist yet, started together, 20
/// rounds: neither fails with "File exists"; the loser finds the lock (exit 3) or runs after
/// the winner; the target equals `git archive` of the commit its state records.
#[test]
fn concurrent_first_syncs_into_a_missing_target() {
    use treesync_testkit::conformance::History;
    use treesync_testkit::history;
    let base = history::wide_tree(200, 51);
    let (one, _) = history::change_some(&base, 60, 20, 20, 52);
    let h = History::from_trees(&[base, one]);
    for round in 0..20 {
        let f = Local::new(Options::default());
        let results = treesync_testkit::race::two_syncs(&h, [&h.commits[0], &h.commits[1]], &|| f.backend());
        treesync_testkit::race::check(&h, &f, [0, 1], results, round);
    }
}
