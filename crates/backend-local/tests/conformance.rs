//! The conformance suite on a real local directory.

use std::sync::Arc;

use treesync_backend_local::{LocalBackend, Options};
use treesync_testkit::conformance::DirFixture;

/// A target directory written by the local backend with `options`.
fn local(options: Options) -> DirFixture {
    DirFixture::temp(move |root| Arc::new(LocalBackend::new(root, options.clone())))
}

mod wide {
    use super::*;
    treesync_testkit::conformance_suite!(local(Options::default()));
}

/// The same suite with one op per batch and one batch at a time: ordering bugs that wide
/// batches hide show up here.
mod serial {
    use super::*;
    treesync_testkit::conformance_suite!(local(Options { jobs: 1, batch: 1, min_batch: 1, fsync: false }));
}

/// Two first syncs into a target directory that does not exist yet, started together, 20
/// rounds: neither fails with "File exists"; the loser finds the lock (exit 3) or runs after
/// the winner; the target equals `git archive` of the commit its state records.
#[test]
fn concurrent_first_syncs_into_a_missing_target() {
    treesync_testkit::race::concurrent_first_syncs_into_a_missing_target(20, 51, || local(Options::default()));
}
