//! Memory does not grow with a file's size: a large file is streamed from the repository to
//! the target (local disk, and an NFS server through the built-in client) with a bounded peak
//! RSS, measured by the kernel for the `treesync` process (`wait4`'s `ru_maxrss`).
#![allow(unsafe_code)]

use std::path::Path;
use std::process::Command;

use treesync_testkit::cli::peak_rss_mib;
use treesync_testkit::git;
use treesync_testkit::work::{big_file_mib, write_big_file};

/// A repository whose HEAD has `big.bin` (`mib` MiB) and a small file. Above git's
/// `core.bigFileThreshold` the file goes straight into a pack, undeltified; below it, it becomes
/// a loose object.
fn repo_with_big_file(dir: &Path, mib: u64, threshold: &str) -> std::path::PathBuf {
    let work = dir.join(format!("work-{threshold}"));
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &["init", "-q", "-b", "main"]);
    write_big_file(&work.join("big.bin"), mib);
    std::fs::write(work.join("small.txt"), b"small\n").expect("write");
    git(&work, &["-c", &format!("core.bigFileThreshold={threshold}"), "add", "big.bin", "small.txt"]);
    git(&work, &["-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "-m", "big"]);
    std::fs::remove_file(work.join("big.bin")).expect("rm");
    work
}

fn same_file(a: &Path, b: &Path) -> bool {
    let out = Command::new("cmp").arg(a).arg(b).output().expect("cmp runs");
    out.status.success()
}

#[test]
fn a_large_file_is_synced_with_bounded_memory() {
    // In a pack (git's way with large files), and as a loose object.
    for (mib, threshold) in [(big_file_mib(), "1m"), (96, "4g")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = repo_with_big_file(dir.path(), mib, threshold);
        let want = dir.path().join("want.bin");
        let out = Command::new("git")
            .current_dir(&work)
            .args(["cat-file", "blob", "HEAD:big.bin"])
            .stdout(std::fs::File::create(&want).expect("create"))
            .status()
            .expect("git");
        assert!(out.success());
        let how = if threshold == "1m" { "packed" } else { "loose" };

        let target = dir.path().join("target");
        let rss = peak_rss_mib(
            Command::new(env!("CARGO_BIN_EXE_treesync"))
                .args(["sync", "--repo"])
                .arg(&work)
                .args(["--ref", "HEAD", "--target"])
                .arg(&target),
        );
        eprintln!("local: {mib} MiB file ({how}) synced with a peak RSS of {rss} MiB");
        assert!(same_file(&want, &target.join("big.bin")), "content");
        assert!(rss < 100, "peak RSS {rss} MiB for a {mib} MiB {how} file (bound: 100 MiB)");

        let server = treesync_testkit::ganesha::Ganesha::shared();
        let sub = format!("big-{how}");
        let rss =
            peak_rss_mib(Command::new(env!("CARGO_BIN_EXE_treesync")).args(["sync", "--repo"]).arg(&work).args([
                "--ref",
                "HEAD",
                "--target",
                &server.url(&sub),
            ]));
        eprintln!("nfs://: {mib} MiB file ({how}) synced with a peak RSS of {rss} MiB");
        assert!(same_file(&want, &server.dir().join(&sub).join("big.bin")), "content over NFS");
        assert!(rss < 100, "nfs://: peak RSS {rss} MiB for a {mib} MiB {how} file (bound: 100 MiB)");
        let _ = std::fs::remove_dir_all(server.dir().join(&sub));
    }
}
