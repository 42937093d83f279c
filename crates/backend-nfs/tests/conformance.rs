//! The conformance suite on the NFS backend, on a plain directory (the slow-filesystem runs
//! are in `slowfs.rs`).

use std::sync::Arc;

use treesync_backend_nfs::{Options, Window};
use treesync_testkit::conformance::DirFixture;

/// A target directory written by the NFS backend with `options`.
fn dir(options: Options) -> DirFixture {
    DirFixture::temp(move |root| Arc::new(treesync_backend_nfs::open(root, options)))
}

/// The defaults: lookups serialized, adaptive writes.
mod adaptive {
    use super::*;
    treesync_testkit::conformance_suite!(dir(Options::default()));
}

/// Everything one at a time: ordering bugs that concurrency hides show up here.
mod serial {
    use super::*;
    treesync_testkit::conformance_suite!(dir(Options {
        lookup_window: Window::Fixed(1),
        scan_jobs: 1,
        write_window: Window::Fixed(1),
        fsync: false
    }));
}

/// Wide budgets both ways.
mod wide {
    use super::*;
    treesync_testkit::conformance_suite!(dir(Options {
        lookup_window: Window::Fixed(8),
        scan_jobs: 64,
        write_window: Window::Fixed(32),
        fsync: false
    }));
}
