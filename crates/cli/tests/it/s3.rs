//! `treesync` against a real S3 server (moto on 127.0.0.1): request counts by method, bad
//! buckets, injected throttling, and a sync killed with SIGKILL.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use treesync_testkit::BareRepo;
use treesync_testkit::history::{self, Entry, Model, file};
use treesync_testkit::s3::{FaultProxy, Moto};
use treesync_testkit::tree;

fn treesync(moto: &Moto, endpoint: &str, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_treesync"));
    c.args(args).args(["--endpoint", endpoint, "--allow-http"]);
    for (k, v) in moto.env() {
        c.env(k, v);
    }
    c.output().expect("treesync runs")
}

fn sync(moto: &Moto, repo: &Path, rev: &str, url: &str) -> Output {
    treesync(
        moto,
        &moto.endpoint,
        &["sync", "-q", "--repo", repo.to_str().expect("utf8"), "--ref", rev, "--target", url],
    )
}

fn assert_ok(o: &Output) {
    assert!(o.status.success(), "treesync failed: {}", String::from_utf8_lossy(&o.stderr));
}

/// Read the prefix back with GETs and compare with `git archive` (modes and symlinks included).
fn assert_bucket_is(moto: &Moto, url: &str, bare: &BareRepo, commit: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    bare.archive(commit, &dir.path().join("x"));
    moto.assert_bucket_is(url, &tree::read_dir(&dir.path().join("x")), &format!("git archive {commit}"));
}

fn wide_repo(files: usize, deleted: usize) -> (BareRepo, Vec<String>) {
    let base = history::wide_tree(files, 5);
    let (next, _) = history::change_some(&base, 10, 2, deleted, 6);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[base, next]);
    (bare, commits)
}

/// Incremental sync of K=12 (10 modified, 2 added) and D=2 deleted in a 300-file tree:
/// exactly K object PUTs + 1 bulk delete + 3 state requests (GET, 2 PUTs); no LIST, no HEAD.
#[test]
fn incremental_sync_requests_are_k_puts_one_bulk_delete_and_three_for_state() {
    let moto = Moto::start();
    moto.create_bucket("site");
    let (bare, commits) = wide_repo(300, 2);
    let url = "s3://site/www";
    assert_ok(&sync(&moto, &bare.path, &commits[0], url));
    assert_bucket_is(&moto, url, &bare, &commits[0]);
    let mark = moto.mark();
    let out = treesync(
        &moto,
        &moto.endpoint,
        &["sync", "--json", "--repo", bare.path.to_str().expect("utf8"), "--ref", &commits[1], "--target", url],
    );
    assert_ok(&out);
    let r = moto.requests_since(mark);
    assert_eq!(r.put, 12 + 2, "12 files + 2 state writes: {r:?}");
    assert_eq!(r.bulk_delete, 1, "{r:?}");
    assert_eq!(r.get, 1, "only the state is read: {r:?}");
    assert_eq!((r.list, r.head, r.delete, r.post, r.other), (0, 0, 0, 0, 0), "{r:?}");
    // The run's own cost summary agrees with what the server saw.
    let out: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(out["cost"], serde_json::json!({"PUT": 14, "bulk DELETE": 1, "GET": 1}), "{out}");
    assert_bucket_is(&moto, url, &bare, &commits[1]);
    // Syncing again changes nothing and costs one GET.
    let mark = moto.mark();
    assert_ok(&sync(&moto, &bare.path, &commits[1], url));
    assert_eq!(moto.requests_since(mark).total(), 1);
}

/// D = 1,500 deleted files: ⌈D/1000⌉ = 2 bulk deletes, no single DELETE.
#[test]
fn deletes_go_in_bulk_requests_of_up_to_1000_keys() {
    let moto = Moto::start();
    moto.create_bucket("site");
    let b = Model::of(&[("keep", "k\n")]);
    let a = b.with((0..1500).map(|i| (format!("d{}/f{i}", i % 7), file(format!("{i}\n")))));
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[a, b]);
    assert_ok(&sync(&moto, &bare.path, &commits[0], "s3://site/p"));
    let mark = moto.mark();
    assert_ok(&sync(&moto, &bare.path, &commits[1], "s3://site/p"));
    let r = moto.requests_since(mark);
    assert_eq!((r.bulk_delete, r.delete, r.list, r.head), (2, 0, 0, 0), "{r:?}");
    assert_bucket_is(&moto, "s3://site/p", &bare, &commits[1]);
}

#[test]
fn missing_bucket_is_one_clear_line() {
    let moto = Moto::start();
    let (bare, commits) = wide_repo(100, 0);
    let o = sync(&moto, &bare.path, &commits[0], "s3://no-such-bucket/x");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("treesync: error:") && err.contains("no-such-bucket") && err.lines().count() <= 3, "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args([
            "sync",
            "--repo",
            bare.path.to_str().expect("utf8"),
            "--ref",
            "main",
            "--target",
            "s3://b/x",
            "--endpoint",
            &moto.endpoint,
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("--allow-http"), "{err}");
}

/// Every 4th request answered with 503 Slow Down: retried, nothing lost.
#[test]
fn throttling_is_retried_and_nothing_is_lost() {
    let moto = Moto::start();
    moto.create_bucket("site");
    let proxy = FaultProxy::start(&moto.endpoint, 4);
    let (bare, commits) = wide_repo(200, 3);
    for c in &commits {
        let o = treesync(
            &moto,
            &proxy.endpoint,
            &["sync", "-q", "--repo", bare.path.to_str().expect("utf8"), "--ref", c, "--target", "s3://site/t"],
        );
        assert_ok(&o);
        assert_bucket_is(&moto, "s3://site/t", &bare, c);
    }
    assert!(proxy.injected.load(std::sync::atomic::Ordering::SeqCst) > 40, "the proxy injected faults");
}

/// SIGKILL in the middle of an upload: `status` reports the unfinished sync, the next run
/// (same host, holder dead) finishes it without waiting for the lease.
#[test]
fn a_killed_sync_is_finished_by_the_next_run() {
    let moto = Moto::start();
    moto.create_bucket("site");
    let (bare, commits) = wide_repo(600, 2);
    let repo = bare.path.to_str().expect("utf8");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_treesync"));
    cmd.args([
        "sync",
        "-q",
        "--repo",
        repo,
        "--ref",
        &commits[0],
        "--target",
        "s3://site/k",
        "--endpoint",
        &moto.endpoint,
        "--allow-http",
        "--jobs",
        "2",
    ]);
    for (k, v) in moto.env() {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
    // Wait until some objects are there, then kill.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while moto.requests_since(0).put < 20 {
        assert!(std::time::Instant::now() < deadline, "no uploads seen");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let o = treesync(&moto, &moto.endpoint, &["status", "--target", "s3://site/k"]);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("INTERRUPTED"), "{out}");
    assert_ok(&sync(&moto, &bare.path, &commits[1], "s3://site/k"));
    assert_bucket_is(&moto, "s3://site/k", &bare, &commits[1]);
}

/// A file of 9 MiB goes up as a multipart upload (create, 2 parts, complete) and reads back whole.
#[test]
fn large_files_are_uploaded_in_parts() {
    let moto = Moto::start();
    moto.create_bucket("site");
    let mut m = Model::default();
    let big: Vec<u8> = (0..9 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    m.insert("big.bin", Entry::File { content: big, executable: true });
    m.insert("small", Entry::File { content: b"s\n".to_vec(), executable: false });
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[m]);
    let mark = moto.mark();
    assert_ok(&sync(&moto, &bare.path, &commits[0], "s3://site/m"));
    let r = moto.requests_since(mark);
    assert_eq!(r.post, 2, "create + complete multipart: {r:?}");
    assert_eq!(r.put, 2 + 1 + 2, "2 parts + the small file + 2 state writes: {r:?}");
    assert_bucket_is(&moto, "s3://site/m", &bare, &commits[0]);
}
