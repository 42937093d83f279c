//! Readers never see a broken file on a local disk (see `treesync_testkit::readers`).

use std::sync::Arc;
use std::time::Duration;

use treesync_backend_local::{LocalBackend, Options};
use treesync_core::Backend;

#[test]
fn readers_see_old_or_new_content_never_a_partial_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    let make = || Arc::new(LocalBackend::new(&root, Options::default())) as Arc<dyn Backend>;
    let r = treesync_testkit::readers::race(&make, &root, Duration::from_secs(3));
    assert!(r.syncs >= 4 && r.reads >= 1000, "the test must actually race: {r:?}");
    assert!(r.bad.is_empty(), "{} broken reads, e.g. {:?}", r.bad.len(), &r.bad[..r.bad.len().min(5)]);
}
