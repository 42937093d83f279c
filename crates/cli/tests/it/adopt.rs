//! `treesync adopt` and `sync --git-worktree`: take over a clone made by git, sync it
//! incrementally, and keep `git status` there clean.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::treesync;
use treesync_testkit::cli::listing;
use treesync_testkit::cli::s;
use treesync_testkit::{BareRepo, git, history, tree};

fn clone_at(bare: &BareRepo, commit: &str, dir: &Path) -> std::path::PathBuf {
    git(&bare.path, &["update-ref", "refs/heads/main", commit]);
    let t = dir.join("clone");
    let o = Command::new("git")
        .args(["clone", "-q", "--branch", "main"])
        .arg(&bare.path)
        .arg(&t)
        .output()
        .expect("git clone");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    t
}

/// A repository of `commits` random commits (seeded) on `staging`, and a git clone of its
/// second commit in a temporary directory.
fn cloned(seed: u64, commits: usize) -> (BareRepo, Vec<String>, tempfile::TempDir, std::path::PathBuf) {
    let trees = history::random_history(seed, commits);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "staging", &trees);
    let dir = tempfile::tempdir().expect("tempdir");
    let t = clone_at(&bare, &commits[1], dir.path());
    (bare, commits, dir, t)
}

fn git_status(t: &Path) -> String {
    let o = Command::new("git").arg("-C").arg(t).args(["status", "--porcelain"]).output().expect("git status");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn an_adopted_clone_syncs_incrementally_and_git_status_stays_clean() {
    let (bare, commits, dir, t) = cloned(91, 6);
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[5]]);

    let o = treesync(&["adopt", "--target", s(&t)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("adopted"));
    let o = treesync(&["status", "--target", s(&t), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["state"]["synced"]["commit"], commits[1].as_str());

    for c in [&commits[3], &commits[5], &commits[2]] {
        let o = treesync(&["sync", "--json", "--repo", s(&bare.path), "--ref", c, "--target", s(&t), "--git-worktree"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert!(v["from"].is_object(), "incremental, not a full checkout: {v}");
        let expected = dir.path().join(format!("expected-{c}"));
        bare.archive(c, &expected);
        let mut actual = tree::read_dir(&t);
        actual.retain(|k, _| k != ".git" && !k.starts_with(".git/"));
        assert_eq!(tree::diff(&tree::read_dir(&expected), &actual), None, "like git archive {c}");
        assert_eq!(git_status(&t), "", "git status in the clone is clean after syncing to {c}");
        assert_eq!(git(&t, &["rev-parse", "HEAD"]), *c, "HEAD moved");
    }
    // `verify` does not count the clone's .git as drift.
    let o = treesync(&["verify", "--repo", s(&bare.path), "--target", s(&t)]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    // And git itself can still move the tree.
    let o = Command::new("git").arg("-C").arg(&t).args(["checkout", "-q", &commits[4]]).output().expect("git checkout");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn adopt_refuses_staged_changes_and_bare_repositories() {
    let (bare, _commits, _dir, t) = cloned(92, 2);
    std::fs::write(t.join("staged-file"), "x").expect("write");
    git(&t, &["add", "staged-file"]);
    let o = treesync(&["adopt", "--target", s(&t)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("records local changes") && err.contains("staged-file"), "{err}");
    assert!(!t.join(".treesync").exists(), "nothing recorded");

    let o = treesync(&["adopt", "--target", s(&bare.path)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("bare"), "{err}");
}

/// A clone whose `.git/info/exclude` is a symlink to a file outside the target (what a user of
/// a shared NAS could plant for a treesync running as root).
fn plant_exclude_symlink(t: &Path, outside: &Path) -> PathBuf {
    let victim = outside.join("victim");
    std::fs::write(&victim, "precious\n").expect("write");
    let exclude = t.join(".git/info/exclude");
    let _ = std::fs::remove_file(&exclude);
    std::os::unix::fs::symlink(&victim, &exclude).expect("symlink");
    victim
}

/// A clone whose `.git/refs/heads` is a symlink to an empty directory outside the target (the
/// branch stays readable through `packed-refs`).
fn plant_refs_heads_symlink(t: &Path, outside: &Path) -> PathBuf {
    git(t, &["pack-refs", "--all"]);
    let elsewhere = outside.join("heads");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let heads = t.join(".git/refs/heads");
    std::fs::remove_dir_all(&heads).expect("rm refs/heads");
    std::os::unix::fs::symlink(&elsewhere, &heads).expect("symlink");
    elsewhere
}

/// [`cloned`] (three commits, HEAD at the second) and adopted.
fn adopted(seed: u64) -> (BareRepo, Vec<String>, tempfile::TempDir, PathBuf) {
    let (bare, commits, dir, t) = cloned(seed, 3);
    let o = treesync(&["adopt", "--target", s(&t)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (bare, commits, dir, t)
}

fn assert_refused(o: &Output, path: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{path} is a symlink")) && err.contains("never writes through symlinks"), "{err}");
}

/// `adopt` of a clone (made from `seed`) in which `plant` made `path` a symlink to a
/// directory outside: refused naming `path`, nothing recorded. What `plant` returned (outside
/// the clone, in the returned directory), for the caller to check it was left alone.
fn adopt_refuses_a_planted_symlink(
    seed: u64,
    plant: fn(&Path, &Path) -> PathBuf,
    path: &str,
) -> (tempfile::TempDir, PathBuf) {
    let (_bare, _commits, _dir, t) = cloned(seed, 2);
    let outside = tempfile::tempdir().expect("tempdir");
    let planted = plant(&t, outside.path());
    let o = treesync(&["adopt", "--target", s(&t)]);
    assert_refused(&o, path);
    assert!(!t.join(".treesync/state").exists(), "nothing recorded");
    (outside, planted)
}

#[test]
fn adopt_refuses_an_exclude_file_that_is_a_symlink_and_leaves_its_target_alone() {
    let (_outside, victim) = adopt_refuses_a_planted_symlink(93, plant_exclude_symlink, ".git/info/exclude");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious\n", "the outside file is unchanged");
}

#[test]
fn adopt_refuses_refs_heads_that_is_a_symlink_and_creates_nothing_there() {
    let (_outside, elsewhere) = adopt_refuses_a_planted_symlink(94, plant_refs_heads_symlink, ".git/refs/heads");
    assert_eq!(listing(&elsewhere), Vec::<String>::new(), "nothing created outside");
}

#[test]
fn sync_git_worktree_refuses_an_exclude_file_that_is_a_symlink_and_leaves_its_target_alone() {
    let (bare, commits, _dir, t) = adopted(95);
    let outside = tempfile::tempdir().expect("tempdir");
    let victim = plant_exclude_symlink(&t, outside.path());

    let o = treesync(&["sync", "--repo", s(&bare.path), "--ref", &commits[2], "--target", s(&t), "--git-worktree"]);
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious\n", "the outside file is unchanged");
    assert_refused(&o, ".git/info/exclude");
    assert_eq!(git(&t, &["rev-parse", "HEAD"]), commits[1], "HEAD did not move");
}

#[test]
fn sync_git_worktree_refuses_refs_heads_that_is_a_symlink_and_creates_nothing_there() {
    let (bare, commits, _dir, t) = adopted(96);
    let outside = tempfile::tempdir().expect("tempdir");
    let elsewhere = plant_refs_heads_symlink(&t, outside.path());

    let sync = ["sync", "--repo", s(&bare.path), "--ref", &commits[2], "--target", s(&t), "--git-worktree"];
    let o = treesync(&sync);
    assert_eq!(listing(&elsewhere), Vec::<String>::new(), "nothing created outside");
    assert_refused(&o, ".git/refs/heads");
    assert_eq!(git(&t, &["rev-parse", "HEAD"]), commits[1], "HEAD did not move");

    // Doing what the message says makes it work, and git reads what treesync wrote.
    std::fs::remove_file(t.join(".git/refs/heads")).expect("rm symlink");
    std::fs::create_dir(t.join(".git/refs/heads")).expect("mkdir");
    let o = treesync(&sync);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(git(&t, &["rev-parse", "HEAD"]), commits[2], "HEAD moved");
    assert_eq!(git(&t, &["rev-parse", "refs/heads/main"]), commits[2], "through its branch");
    assert_eq!(git_status(&t), "", "git status in the clone is clean");
    assert_eq!(listing(&elsewhere), Vec::<String>::new(), "nothing created outside");
}

#[test]
fn adopt_while_the_target_is_locked_exits_3_and_writes_nothing() {
    use treesync_core::Backend;
    let (_bare, _commits, _dir, t) = cloned(97, 2);
    let exclude_before = std::fs::read(t.join(".git/info/exclude")).ok();
    let backend = treesync_backend_local::LocalBackend::new(&t, Default::default());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let guard = rt
        .block_on(backend.lock(&treesync_core::state::Holder { pid: 777, host: "buildhost".into(), started: 1 }))
        .expect("lock");

    let o = treesync(&["adopt", "--target", s(&t)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("pid 777 on buildhost"), "{err}");
    assert_eq!(std::fs::read(t.join(".git/info/exclude")).ok(), exclude_before, "exclude untouched");
    assert!(!t.join(".treesync/state").exists(), "nothing recorded");
    drop(guard);
    assert!(treesync(&["adopt", "--target", s(&t)]).status.success());
}

/// Under `strace`: every write of the clone's `.git` (adopt's `info/exclude`, the index and
/// HEAD of `sync --git-worktree`) happens before the target lock is released.
#[test]
fn git_worktree_writes_happen_while_the_target_lock_is_held() {
    treesync_testkit::missing::require_program("strace", "strace");
    let (bare, commits, dir, t) = cloned(98, 3);
    let traced = |args: &[&str], name: &str| -> Vec<String> {
        let log = dir.path().join(name);
        let o = Command::new("strace")
            .args(["-f", "-e", "trace=flock,open,openat,rename,renameat,renameat2", "-o"])
            .arg(&log)
            .arg(env!("CARGO_BIN_EXE_treesync"))
            .args(args)
            .output()
            .expect("strace runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(&log).expect("strace log").lines().map(str::to_string).collect()
    };
    let check = |lines: &[String], what: &str| {
        let unlock = lines.iter().position(|l| l.contains("LOCK_UN")).expect("the lock is released explicitly");
        let writes: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.contains("O_RDONLY") && (l.contains("exclude") || l.contains(".lock\"")))
            .map(|(i, _)| i)
            .collect();
        assert!(!writes.is_empty(), "{what}: no write of .git seen:\n{}", lines.join("\n"));
        for i in writes {
            assert!(i < unlock, "{what}: written after the lock was released: {}\n{}", lines[i], lines.join("\n"));
        }
    };
    check(&traced(&["adopt", "--target", s(&t)], "adopt.strace"), "adopt");
    let lines = traced(
        &["sync", "--repo", s(&bare.path), "--ref", &commits[2], "--target", s(&t), "--git-worktree"],
        "sync.strace",
    );
    check(&lines, "sync --git-worktree");
    assert_eq!(git(&t, &["rev-parse", "HEAD"]), commits[2], "HEAD moved");
    assert_eq!(git_status(&t), "", "git status in the clone is clean");
}
