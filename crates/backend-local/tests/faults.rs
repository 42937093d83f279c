//! Real faults on a real filesystem: a full disk, temporaries left by a killed run.

use std::path::{Path, PathBuf};
use std::process::Command;

use treesync_backend_local::{LocalBackend, Options};
use treesync_core::policy::Fail;
use treesync_core::{backend, sync};
use treesync_testkit::conformance::{History, sync_to};
use treesync_testkit::history::{Entry, Model};
use treesync_testkit::runtime;
use treesync_testkit::tree;

fn leftovers(root: &Path) -> Vec<String> {
    tree::read_dir(root)
        .into_keys()
        .filter(|k| k.rsplit('/').next().is_some_and(|n| n.starts_with(".treesync-tmp.")))
        .collect()
}

#[test]
fn temporaries_of_a_killed_run_are_consumed_by_the_next_run() {
    let rt = runtime();
    let mut a = Model::default();
    for i in 0..40 {
        a.insert(&format!("d{}/f{i}", i % 4), Entry::File { content: vec![b'a'; 100], executable: false });
    }
    let mut b = a.clone();
    for i in 0..40 {
        b.insert(&format!("d{}/f{i}", i % 4), Entry::File { content: vec![b'b'; 100], executable: i % 3 == 0 });
    }
    let h = History::from_trees(&[a, b]);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    rt.block_on(sync_to(&h.repo, &h.commits[0], &LocalBackend::new(&root, Options::default()))).expect("initial");
    // A run that "dies" half-way, leaving temporaries as a SIGKILL between write and rename would.
    let failing = Fail::after(LocalBackend::new(&root, Options { jobs: 1, batch: 1, min_batch: 1, fsync: false }), 20);
    assert!(rt.block_on(sync_to(&h.repo, &h.commits[1], &failing)).is_err());
    for i in [25, 30, 35] {
        std::fs::write(root.join(format!("d{}/.treesync-tmp.f{i}", i % 4)), b"partial").expect("plant leftover");
    }
    let out =
        rt.block_on(sync_to(&h.repo, &h.commits[1], &LocalBackend::new(&root, Options::default()))).expect("resume");
    assert!(out.resumed.is_some());
    assert_eq!(leftovers(&root), Vec::<String>::new());
    if let Some(d) = tree::diff(&h.expected(1), &tree::read_dir(&root)) {
        panic!("target differs from git archive:\n{d}");
    }
}

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn full_disk_is_a_clear_error_leaves_no_temporaries_and_the_rerun_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).expect("mkdir");
    let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"]).arg(&mnt).status();
    if !ok.is_ok_and(|s| s.success()) {
        treesync_testkit::missing::Missing::new("root (the test mounts a small tmpfs)", "run the tests as root").fail();
    }
    let _guard = Mount(mnt.clone());
    let rt = runtime();
    let mut a = Model::default();
    for i in 0..40 {
        a.insert(&format!("big{i}"), Entry::File { content: vec![b'x' + (i % 2) as u8; 20_000], executable: false });
    }
    let h = History::from_trees(&[a]);
    let root = mnt.join("t");
    let err = rt
        .block_on(sync_to(&h.repo, &h.commits[0], &LocalBackend::new(&root, Options::default())))
        .expect_err("800 KB do not fit into 256 KB");
    let msg = err.to_string();
    assert!(matches!(err, sync::Error::Apply { source: backend::Error::Io { .. }, .. }), "{msg}");
    assert!(msg.contains("No space left on device") && msg.contains("free space and run sync again"), "{msg}");
    assert_eq!(leftovers(&root), Vec::<String>::new(), "temporaries left on a full disk");
    let status = rt.block_on(sync::status(&LocalBackend::new(&root, Options::default()))).expect("status");
    assert!(status.state.expect("state").in_progress.is_some(), "the journal knows the sync is unfinished");

    let ok = Command::new("mount").args(["-o", "remount,size=4m"]).arg(&mnt).status().expect("remount");
    assert!(ok.success());
    rt.block_on(sync_to(&h.repo, &h.commits[0], &LocalBackend::new(&root, Options::default())))
        .expect("rerun finishes");
    if let Some(d) = tree::diff(&h.expected(0), &tree::read_dir(&root)) {
        panic!("target differs from git archive:\n{d}");
    }
}

/// `.treesync/lock` as a hard link to a file outside the target: the holder line is not
/// written over that file's first bytes; the sync stops naming the path and what to do, and
/// runs once the link is removed (the mounted NFS backend shares the lock file code and its
/// test of the same on a mount).
#[test]
fn a_lock_file_that_is_a_hard_link_is_not_written_through() {
    let rt = runtime();
    let h = History::random(61, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    let backend = || LocalBackend::new(&root, Options::default());
    rt.block_on(sync_to(&h.repo, &h.commits[0], &backend())).expect("initial");
    let before = tree::read_dir(&root);
    let outside = dir.path().join("outside-lock");
    let secret = "SECRET-TOKEN and more bytes than a holder line has, so that an overwrite shows at once ".repeat(4);
    std::fs::write(&outside, &secret).expect("outside file");
    let lock = root.join(".treesync/lock");
    std::fs::remove_file(&lock).expect("rm lock");
    std::fs::hard_link(&outside, &lock).expect("plant the lock");

    let result = rt.block_on(sync_to(&h.repo, &h.commits[1], &backend()));
    assert_eq!(std::fs::read_to_string(&outside).expect("read"), secret, "the outside file is unchanged");
    let err = result.expect_err("refused").to_string();
    assert!(err.contains(".treesync/lock") && err.contains("hard link") && err.contains("hint"), "{err}");
    assert!(!err.contains("SECRET-TOKEN"), "{err}");
    assert_eq!(tree::read_dir(&root), before, "nothing changed");

    std::fs::remove_file(&lock).expect("rm the planted lock");
    rt.block_on(sync_to(&h.repo, &h.commits[1], &backend())).expect("sync once it is gone");
    assert_ne!(tree::read_dir(&root), before, "the second commit is there");
}

/// A lock held by another run: the second is refused naming the holder the first wrote, read
/// from the lock file (the holder line is padded to a fixed length and parsed back).
#[test]
fn a_held_lock_names_its_holder() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    std::fs::create_dir(&root).expect("mkdir target");
    let first = LocalBackend::new(&root, Options::default());
    let holder = treesync_core::state::Holder { pid: 4242, host: "elsewhere".into(), started: 1_796_000_000 };
    let _guard = rt.block_on(backend::Backend::lock(&first, &holder)).expect("first lock");
    let line = std::fs::read(root.join(".treesync/lock")).expect("read the lock file");
    assert_eq!(line.len(), treesync_backend_local::lockfile::HOLDER_LEN + 1, "padded to a fixed length");
    let second = LocalBackend::new(&root, Options::default());
    let Err(err) = rt.block_on(backend::Backend::lock(&second, &treesync_core::state::Holder::this_process())) else {
        panic!("the second lock is taken while the first is held");
    };
    assert!(matches!(err, backend::Error::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("pid 4242 on elsewhere, started at unix time 1796000000"), "{err}");
}
