//! The conformance suite on the NFS backend, on a plain directory (the slow-filesystem runs
//! are in `slowfs.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use treesync_backend_nfs::{LookupJobs, Options, WriteJobs};
use treesync_core::Backend;
use treesync_testkit::conformance::Fixture;
use treesync_testkit::tree::{self, Node};

struct Dir {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    options: Options,
}

impl Dir {
    fn new(options: Options) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("target");
        Dir { _dir: dir, root, options }
    }
}

impl Fixture for Dir {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(treesync_backend_nfs::open(&self.root, self.options))
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

/// The defaults: lookups serialized, adaptive writes.
mod adaptive {
    use super::*;
    treesync_testkit::conformance_suite!(Dir::new(Options::default()));
}

/// Everything one at a time: ordering bugs that concurrency hides show up here.
mod serial {
    use super::*;
    treesync_testkit::conformance_suite!(Dir::new(Options {
        lookup_jobs: LookupJobs::Fixed(1),
        scan_jobs: 1,
        write_jobs: WriteJobs::Fixed(1),
        fsync: false
    }));
}

/// Wide budgets both ways.
mod wide {
    use super::*;
    treesync_testkit::conformance_suite!(Dir::new(Options {
        lookup_jobs: LookupJobs::Fixed(8),
        scan_jobs: 64,
        write_jobs: WriteJobs::Fixed(32),
        fsync: false
    }));
}
