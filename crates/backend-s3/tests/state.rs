//! The state object is written with conditional PUTs: of two syncs that read the same state,
//! only one can commit.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use treesync_backend_s3::{ObjectStoreBackend, Options};
use treesync_core::Backend;
use treesync_core::backend::{Error, TargetState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_syncs_that_read_the_same_state_only_one_commits() {
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let make =
        || ObjectStoreBackend::new(store.clone(), Path::from("p"), "memory://p".into(), true, true, Options::default());
    let (a, b) = (make(), make());
    // Both see an empty prefix; both try to create the state: one wins.
    assert_eq!(a.prepare_target(true).await.expect("a"), TargetState::Empty);
    assert_eq!(b.prepare_target(true).await.expect("b"), TargetState::Empty);
    a.store_state(b"{\"a\":1}").await.expect("first create wins");
    let err = b.store_state(b"{\"b\":1}").await.expect_err("second create loses");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    // Both read version 1; a updates; b's update from the stale version fails.
    let (a, b) = (make(), make());
    assert_eq!(a.prepare_target(true).await.expect("a"), TargetState::Managed);
    assert_eq!(b.prepare_target(true).await.expect("b"), TargetState::Managed);
    a.store_state(b"{\"a\":2}").await.expect("a updates");
    a.store_state(b"{\"a\":3}").await.expect("a updates again from its own new version");
    let err = b.store_state(b"{\"b\":2}").await.expect_err("stale update");
    assert!(err.to_string().contains("another treesync"), "{err}");
    assert_eq!(make().load_state().await.expect("read").as_deref(), Some(&b"{\"a\":3}"[..]));
}
