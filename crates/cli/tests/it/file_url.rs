//! `file:///DIR` targets (the object-store backend on a local directory): nothing outside the
//! target directory is written or removed through a symlink planted inside it.

use std::process::Output;

use crate::treesync;
use treesync_testkit::BareRepo;
use treesync_testkit::cli::listing;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, Model};

fn sync(bare: &BareRepo, rev: &str, url: &str) -> Output {
    treesync(&["sync", "--repo", s(&bare.path), "--ref", rev, "--target", url])
}

/// A repository of `models` on `main`, and a `file://` target (a directory) synced to the first.
fn synced(models: &[Model]) -> (BareRepo, Vec<String>, tempfile::TempDir, std::path::PathBuf, String) {
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", models);
    let (dir, t) = temp_target("t");
    std::fs::create_dir(&t).expect("mkdir");
    let url = format!("file://{}", s(&t));
    let o = sync(&bare, &commits[0], &url);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (bare, commits, dir, t, url)
}

fn assert_refused(o: &Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(what) && err.contains("symlink"), "{err}");
}

#[test]
fn file_targets_never_write_through_a_planted_directory_symlink() {
    let (bare, commits, _dir, t, url) = synced(&[
        Model::of(&[("a", "a"), ("deep/er/keep", "k")]),
        Model::of(&[("a", "a"), ("deep/er/keep", "k"), ("dir/evil", "evil"), ("deep/er/link/evil", "evil")]),
    ]);

    // A directory symlink at the top and one two levels down.
    let outside = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(outside.path(), t.join("dir")).expect("symlink");
    std::os::unix::fs::symlink(outside.path(), t.join("deep/er/link")).expect("symlink");
    let o = sync(&bare, &commits[1], &url);
    assert_eq!(listing(outside.path()), Vec::<String>::new(), "nothing written outside");
    assert_refused(&o, "/evil");
    // Still refused on the next run (the journal replays the same writes).
    std::fs::remove_file(t.join("dir")).expect("rm symlink");
    let o = sync(&bare, &commits[1], &url);
    assert_eq!(listing(outside.path()), Vec::<String>::new(), "nothing written outside");
    assert_refused(&o, "deep/er/link");
    std::fs::remove_file(t.join("deep/er/link")).expect("rm symlink");
    let o = sync(&bare, &commits[1], &url);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(t.join("dir/evil")).expect("read"), "evil", "written inside");
}

#[test]
fn file_targets_never_remove_through_a_planted_directory_symlink() {
    let (bare, commits, _dir, t, url) =
        synced(&[Model::of(&[("a", "a"), ("dir/evil", "evil"), ("dir/sub/x", "x")]), Model::of(&[("a", "a")])]);

    // Someone swaps `dir` for a symlink to a directory holding the same names.
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("evil"), "precious").expect("write");
    std::fs::create_dir(outside.path().join("sub")).expect("mkdir");
    std::fs::write(outside.path().join("sub/x"), "precious").expect("write");
    std::fs::remove_dir_all(t.join("dir")).expect("rm dir");
    std::os::unix::fs::symlink(outside.path(), t.join("dir")).expect("symlink");
    let o = sync(&bare, &commits[1], &url);
    assert_eq!(std::fs::read_to_string(outside.path().join("evil")).expect("still there"), "precious");
    assert_eq!(std::fs::read_to_string(outside.path().join("sub/x")).expect("still there"), "precious");
    assert_refused(&o, "dir");
}

#[test]
fn file_targets_replace_a_symlink_at_the_final_name_and_keep_state_inside() {
    let (bare, commits, _dir, t, url) = synced(&[
        Model::of(&[("a", "a")]),
        Model::of(&[("a", "a"), ("name", "new")]),
        Model::of(&[("a", "b"), ("name", "new")]),
    ]);

    // A symlink where a file will be written: replaced inside the target, never followed.
    let outside = tempfile::tempdir().expect("tempdir");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "precious").expect("write");
    std::os::unix::fs::symlink(&victim, t.join("name")).expect("symlink");
    let o = sync(&bare, &commits[1], &url);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious", "the outside file is unchanged");
    assert!(!t.join("name").is_symlink() && std::fs::read_to_string(t.join("name")).expect("read") == "new");

    // The state folder swapped for a symlink: the state is not written through it.
    let elsewhere = outside.path().join("state");
    std::fs::rename(t.join(".treesync"), &elsewhere).expect("move state away");
    std::os::unix::fs::symlink(&elsewhere, t.join(".treesync")).expect("symlink");
    let before = std::fs::read(elsewhere.join("state")).expect("read state");
    let o = sync(&bare, &commits[2], &url);
    assert_eq!(std::fs::read(elsewhere.join("state")).expect("read state"), before, "outside state unchanged");
    assert_refused(&o, ".treesync");
    assert_eq!(listing(&elsewhere), vec!["state".to_string()]);
}
