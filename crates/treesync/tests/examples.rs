//! The examples run, built as `cargo test` builds them, against real targets: a directory,
//! `memory://`, S3 on moto and `nfs://` on nfs-ganesha; what they wrote is compared with
//! `git archive`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use treesync_testkit::conformance::History;
use treesync_testkit::ganesha::Ganesha;
use treesync_testkit::s3::Moto;
use treesync_testkit::tree::{self, Node};

/// `target/debug/examples/NAME`, next to the `deps` folder this test runs from.
fn example(name: &str) -> Command {
    let exe = std::env::current_exe().expect("the test's path");
    let dir: PathBuf = exe.parent().and_then(Path::parent).expect("target/debug").join("examples");
    let bin = dir.join(name);
    assert!(bin.exists(), "{} is built by `cargo test -p treesync`", bin.display());
    Command::new(bin)
}

fn ok(o: Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "the example failed ({:?}): {}{out}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

/// Files and symlinks in a tree (what a full checkout writes).
fn entries(t: &BTreeMap<String, Node>) -> usize {
    t.values().filter(|n| !matches!(n, Node::Dir)).count()
}

#[test]
fn library_syncs_a_directory_like_git_archive_and_verifies_it() {
    let h = History::random(31, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("site");
    for i in 0..2 {
        let out = ok(example("library").args([s(&h.bare.path), &h.commits[i], s(&target)]).output().expect("runs"));
        assert!(out.contains("backend: local (auto: "), "{out}");
        assert!(out.contains("verified: ") && out.contains("clean"), "{out}");
        assert!(tree::diff(&h.expected(i), &tree::read_dir(&target)).is_none(), "commit {i} like git archive");
    }
}

#[test]
fn library_on_a_directory_as_nfs_reports_the_decided_budgets() {
    let h = History::random(32, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("site");
    let args = [s(&h.bare.path), &h.commits[0], s(&target), "--backend", "nfs", "--jobs", "3", "--write-jobs", "auto"];
    let out = ok(example("library").args(args).output().expect("runs"));
    assert!(out.contains("budgets: 3 ops in flight, lookups adaptive(1..16), writes adaptive(1..3)"), "{out}");
    assert!(tree::diff(&h.expected(0), &tree::read_dir(&target)).is_none(), "like git archive");
}

#[test]
fn library_and_logging_on_memory() {
    let h = History::random(33, 1);
    let expected = entries(&h.expected(0));
    let out = ok(example("library").args([s(&h.bare.path), &h.commits[0], "memory://"]).output().expect("runs"));
    assert!(out.contains("backend: memory (auto: memory://"), "{out}");
    assert!(out.contains("verified: ") && out.contains("clean"), "{out}");

    let out = ok(example("logging").args([s(&h.bare.path), &h.commits[0], "memory://"]).output().expect("runs"));
    let writes = out.lines().filter(|l| l.starts_with("op: write ") || l.starts_with("op: symlink ")).count();
    assert_eq!(writes, expected, "one logged op per file and symlink:\n{out}");
    assert!(out.contains("call: lock") && out.contains("call: store_state"), "the state calls are logged too:\n{out}");
    assert!(out.contains("through Logged(memory"), "Display shows the stack:\n{out}");
}

#[test]
fn plan_prints_a_full_checkout_and_an_update() {
    let h = History::random(34, 2);
    let out = ok(example("plan").args([s(&h.bare.path), &h.commits[0]]).output().expect("runs"));
    let writes = out.lines().filter(|l| l.starts_with("  write ") || l.starts_with("  symlink ")).count();
    assert_eq!(writes, entries(&h.expected(0)), "a full checkout writes every file and symlink:\n{out}");
    assert!(out.lines().last().is_some_and(|l| l.starts_with("total: ")), "{out}");
    let out = ok(example("plan").args([s(&h.bare.path), &h.commits[1], &h.commits[0]]).output().expect("runs"));
    assert!(out.lines().last().is_some_and(|l| l.starts_with("total: ")), "{out}");
    let none = ok(example("plan").args([s(&h.bare.path), &h.commits[1], &h.commits[1]]).output().expect("runs"));
    assert_eq!(none.lines().filter(|l| l.starts_with("  ")).count(), 0, "no change, no ops:\n{none}");
}

#[test]
fn library_syncs_an_nfs_url_on_ganesha() {
    let server = Ganesha::shared();
    let h = History::random(35, 2);
    let url = server.url("example-library");
    for i in 0..2 {
        let out = ok(example("library").args([s(&h.bare.path), &h.commits[i], &url]).output().expect("runs"));
        assert!(out.contains("backend: nfs (auto: an nfs:// URL"), "{out}");
        assert!(out.contains("clean"), "{out}");
        let actual = tree::read_dir(&server.dir().join("example-library"));
        assert!(tree::diff(&h.expected(i), &actual).is_none(), "commit {i} like git archive");
    }
}

#[test]
fn library_syncs_an_s3_url_on_moto() {
    let moto = Moto::start();
    moto.create_bucket("examples");
    let h = History::random(36, 2);
    let url = "s3://examples/site";
    for i in 0..2 {
        let mut c = example("library");
        c.args([s(&h.bare.path), &h.commits[i], url, "--endpoint", &moto.endpoint, "--allow-http"]);
        for (k, v) in moto.env() {
            c.env(k, v);
        }
        let out = ok(c.output().expect("runs"));
        assert!(out.contains("backend: s3 (auto: the target is a URL)"), "{out}");
        assert!(out.contains("clean"), "{out}");

        // Read the prefix back with GETs and compare with git archive.
        moto.assert_bucket_is(url, &h.expected(i), &format!("git archive of commit {i}"));
    }
}
