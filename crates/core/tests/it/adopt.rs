//! `adopt::adopt` on a real git clone: what it records, what a dry run leaves alone, and what
//! it refuses. The state goes to a MemoryBackend, which also models the target's lock.

use treesync_core::state::SyncState;
use treesync_core::{Backend, MemoryBackend, adopt, backend};
use treesync_testkit::work::git;

fn clone_with_two_files() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("a.txt"), "a\n").expect("write");
    std::fs::create_dir(dir.path().join("d")).expect("mkdir");
    std::fs::write(dir.path().join("d/b.txt"), "b\n").expect("write");
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "-q", "-m", "one"]);
    let (commit, tree) = (git(dir.path(), &["rev-parse", "HEAD"]), git(dir.path(), &["rev-parse", "HEAD^{tree}"]));
    (dir, commit, tree)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn adopting_records_head_as_synced_and_a_dry_run_writes_nothing() {
    let (dir, commit, tree) = clone_with_two_files();
    let target = MemoryBackend::new();
    let rt = rt();

    let dry = rt
        .block_on(adopt::adopt(dir.path(), &target, &adopt::Options { dry_run: true, ..Default::default() }))
        .expect("dry run");
    assert_eq!(
        (dry.commit.to_string(), dry.tree.to_string(), dry.index_entries, dry.dry_run),
        (commit.clone(), tree.clone(), 2, true)
    );
    assert_eq!(rt.block_on(target.load_state()).expect("load"), None, "a dry run records nothing");
    let exclude = dir.path().join(".git/info/exclude");
    assert!(!std::fs::read_to_string(&exclude).unwrap_or_default().contains(".treesync"));

    let done = rt.block_on(adopt::adopt(dir.path(), &target, &adopt::Options::default())).expect("adopt");
    assert_eq!((done.commit, done.index_entries, done.dry_run), (dry.commit, 2, false));
    let state = SyncState::parse(&rt.block_on(target.load_state()).expect("load").expect("a state")).expect("parses");
    let synced = state.synced.expect("synced");
    assert_eq!((synced.commit.to_string(), synced.tree.to_string()), (commit, tree));
    assert_eq!((state.in_progress, state.backend.as_str()), (None, "local"));
    assert!(std::fs::read_to_string(&exclude).expect("exclude").contains(".treesync"), "git status stays clean");
    // The lock was released.
    let guard = rt
        .block_on(target.lock(&treesync_core::state::Holder { pid: 1, host: "next".into(), started: 1 }))
        .expect("lock is free");
    rt.block_on(target.unlock(guard)).expect("unlock");

    let v = serde_json::to_value(&done).expect("serializes");
    assert_eq!(v["commit"], synced.commit.to_string());
    assert_eq!(v["index_entries"], 2);
}

#[test]
fn a_managed_target_is_refused_and_a_held_lock_is_reported() {
    let (dir, _, _) = clone_with_two_files();
    let target = MemoryBackend::new();
    let rt = rt();
    rt.block_on(adopt::adopt(dir.path(), &target, &adopt::Options::default())).expect("adopt");
    let before = rt.block_on(target.load_state()).expect("load");
    for dry_run in [true, false] {
        let e = rt
            .block_on(adopt::adopt(dir.path(), &target, &adopt::Options { dry_run, ..Default::default() }))
            .expect_err("managed already");
        assert!(matches!(e, adopt::Error::AlreadyManaged { .. }), "{e:?}");
        assert!(e.to_string().contains("already managed by treesync"), "{e}");
    }
    assert_eq!(rt.block_on(target.load_state()).expect("load"), before, "unchanged");

    let fresh = MemoryBackend::new();
    let _held = rt
        .block_on(fresh.lock(&treesync_core::state::Holder { pid: 2, host: "another".into(), started: 1 }))
        .expect("lock");
    let e = rt.block_on(adopt::adopt(dir.path(), &fresh, &adopt::Options::default())).expect_err("locked");
    assert!(matches!(e, adopt::Error::Backend(backend::Error::Locked { .. })), "{e:?}");
    assert_eq!(rt.block_on(fresh.load_state()).expect("load"), None);
}

#[test]
fn a_clone_with_staged_changes_is_refused() {
    let (dir, _, _) = clone_with_two_files();
    std::fs::write(dir.path().join("a.txt"), "changed\n").expect("write");
    git(dir.path(), &["add", "a.txt"]);
    let target = MemoryBackend::new();
    let e = rt().block_on(adopt::adopt(dir.path(), &target, &adopt::Options::default())).expect_err("staged");
    assert!(matches!(e, adopt::Error::GitWorktree(_)), "{e:?}");
    assert_eq!(rt().block_on(target.load_state()).expect("load"), None);
}
