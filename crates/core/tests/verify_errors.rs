//! `verify` tells a damaged repository from a drifted target: an object the recorded tree
//! names that the object database cannot read is an error of the repository, never drift.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;

use treesync_core::{MemoryBackend, Repo, sync, verify};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=a", "-c", "user.email=a@b", "-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").trim().to_string()
}

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
        let report = verify::verify(&repo, &backend, level).await.expect("verify");
        assert!(report.is_clean(), "{level:?}: {:?}", report.drift);
    }

    // The blob of a.txt is gone from the object database (loose, as `git commit` wrote it).
    let loose = work.join(".git/objects").join(&blob[..2]).join(&blob[2..]);
    std::fs::remove_file(&loose).expect("remove the loose object");
    let repo = Repo::open(work).expect("open again");
    for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
        match verify::verify(&repo, &backend, level).await {
            Err(verify::Error::Source(e)) => {
                let msg = e.to_string();
                assert!(msg.contains(&blob) && msg.contains("a.txt") && msg.contains("hint:"), "{level:?}: {msg}");
            }
            Err(e) => panic!("{level:?}: expected an error of the repository, got {e}"),
            Ok(report) => panic!("{level:?}: a missing object reported as {:?}", report.drift),
        }
    }
}
