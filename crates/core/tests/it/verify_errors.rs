//! `verify` tells a damaged repository from a drifted target: an object the recorded tree
//! names that the object database cannot read is an error of the repository, never drift; a
//! verify that is interrupted stops between files and says so.

use std::sync::atomic::AtomicBool;

use treesync_core::{MemoryBackend, Repo, sync, verify};
use treesync_testkit::verify_at;
use treesync_testkit::work::git;

#[tokio::test]
async fn a_missing_blob_is_an_error_not_drift() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    git(work, &["init", "-q"]);
    std::fs::write(work.join("a.txt"), "the content of a\n").expect("write");
    std::fs::write(work.join("b.txt"), "the content of b\n").expect("write");
    git(work, &["add", "."]);
    git(work, &["commit", "-q", "-m", "one"]);
    let blob = git(work, &["rev-parse", "HEAD:a.txt"]);

    let backend = MemoryBackend::new();
    let options = sync::Options { backend_name: "memory".into(), ..Default::default() };
    let repo = Repo::open(work).expect("open");
    sync::sync(&repo, "main", &backend, &options, &|_| {}, &AtomicBool::new(false)).await.expect("sync");
    for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
        let report = verify_at(&repo, &backend, level).await.expect("verify");
        assert!(report.is_clean(), "{level:?}: {:?}", report.drift);
    }

    // The blob of a.txt is gone from the object database (loose, as `git commit` wrote it).
    let loose = work.join(".git/objects").join(&blob[..2]).join(&blob[2..]);
    std::fs::remove_file(&loose).expect("remove the loose object");
    let repo = Repo::open(work).expect("open again");
    for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
        match verify_at(&repo, &backend, level).await {
            Err(verify::Error::Source(e)) => {
                let msg = e.to_string();
                assert!(msg.contains(&blob) && msg.contains("a.txt") && msg.contains("hint:"), "{level:?}: {msg}");
            }
            Err(e) => panic!("{level:?}: expected an error of the repository, got {e}"),
            Ok(report) => panic!("{level:?}: a missing object reported as {:?}", report.drift),
        }
    }
}

/// gitoxide's error is kept as the source of the repository errors (not flattened to text):
/// a caller can walk the chain down to it, and the message still says what it said.
#[tokio::test]
async fn repository_errors_keep_gitoxides_error_as_their_source() {
    use std::error::Error as _;
    use treesync_core::source::{self, Cause};

    // Not a repository: gix::open's error.
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Repo::open(dir.path()).expect_err("an empty directory is no repository");
    let source::Error::Open { source: Cause::Gix(gix), .. } = &e else { panic!("gitoxide's error: {e:?}") };
    assert!(e.to_string().contains(&gix.to_string()), "the message says what gitoxide said: {e}");
    assert!(e.source().is_some(), "the chain goes on to gitoxide's error");

    // A blob whose header gitoxide's object database cannot read.
    let work = dir.path().join("w");
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("a.txt"), "the content of a\n").expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "one"]);
    let blob = git(&work, &["rev-parse", "HEAD:a.txt"]);
    let backend = MemoryBackend::new();
    let options = sync::Options { backend_name: "memory".into(), ..Default::default() };
    let repo = Repo::open(&work).expect("open");
    sync::sync(&repo, "main", &backend, &options, &|_| {}, &AtomicBool::new(false)).await.expect("sync");
    // Damaged rather than gone: no zlib stream where the loose object should be.
    let loose = work.join(".git/objects").join(&blob[..2]).join(&blob[2..]);
    std::fs::remove_file(&loose).expect("remove the loose object (read-only)");
    std::fs::write(&loose, b"this is not a zlib stream").expect("write garbage in its place");
    let repo = Repo::open(&work).expect("open again");
    match verify_at(&repo, &backend, verify::Level::Quick).await {
        Err(verify::Error::Source(source::Error::Object { source: Cause::Gix(gix), id, .. })) => {
            assert_eq!(id.to_string(), blob);
            assert!(!gix.to_string().is_empty());
        }
        Err(e) => panic!("expected gitoxide's error as the source, got {e:?}"),
        Ok(report) => panic!("a damaged object reported as {:?}", report.drift),
    }
}

/// The interrupt flag stops a verify between files, with an error that says how far it got;
/// progress is told each file read.
#[tokio::test]
async fn an_interrupted_verify_stops_between_files_and_says_so() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    git(work, &["init", "-q"]);
    for i in 0..5 {
        std::fs::write(work.join(format!("f{i}.txt")), format!("file {i}\n")).expect("write");
    }
    git(work, &["add", "."]);
    git(work, &["commit", "-q", "-m", "one"]);
    let backend = MemoryBackend::new();
    let options = sync::Options { backend_name: "memory".into(), ..Default::default() };
    let repo = Repo::open(work).expect("open");
    sync::sync(&repo, "main", &backend, &options, &|_| {}, &AtomicBool::new(false)).await.expect("sync");
    let full = verify::Options::at(verify::Level::Full);

    // Raised before: nothing is read.
    match verify::verify(&repo, &backend, &full, &|_| {}, &AtomicBool::new(true)).await {
        Err(verify::Error::Interrupted { hashed: 0 }) => {}
        other => panic!("expected an interrupted verify, got {other:?}"),
    }
    // Raised by the progress of the first file read: the verify stops after it.
    let stop = AtomicBool::new(false);
    let told = AtomicU64::new(0);
    let progress = |p: &verify::Progress| {
        told.fetch_add(1, Ordering::SeqCst);
        if p.hashed >= 1 {
            assert_eq!(p.to_hash, 5, "every file is read at the full level");
            stop.store(true, Ordering::SeqCst);
        }
    };
    match verify::verify(&repo, &backend, &full, &progress, &stop).await {
        Err(e @ verify::Error::Interrupted { hashed: 1 }) => {
            assert!(e.to_string().contains("interrupted"), "{e}");
        }
        other => panic!("expected a verify interrupted after one file, got {other:?}"),
    }
    assert_eq!(told.load(Ordering::SeqCst), 2, "told once the target is listed, then the file read");
    // Not interrupted, it is clean.
    let report = verify::verify(&repo, &backend, &full, &|_| {}, &AtomicBool::new(false)).await.expect("verify");
    assert!(report.is_clean(), "{:?}", report.drift);
}
