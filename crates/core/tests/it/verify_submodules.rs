//! `verify` and `verify --repair` of a target synced with `--recurse-submodules` (issue 15):
//! the gitlinks hold their submodules' trees, each converted by its own `.gitattributes`, and
//! verify compares them with those trees (not with empty directories); a repair reads the
//! submodule's blobs from the submodule's repository.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use treesync_core::memory::MemNode;
use treesync_core::sync;
use treesync_core::verify::{Drift, Level};
use treesync_core::{MemoryBackend, Repo};
use treesync_testkit::tree::{self, Node};
use treesync_testkit::verify_at;
use treesync_testkit::work::{git, write};

/// `srv/super.git` with submodule `lib` (`srv/lib.git`, URL `../lib.git`); `lib` converts
/// its `.txt` files to CRLF by its own `.gitattributes`, `super` converts nothing.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let srv = dir.path().join("srv");
        let work = dir.path().join("work");
        for name in ["lib", "super"] {
            std::fs::create_dir_all(srv.join(format!("{name}.git"))).expect("mkdir");
            git(&srv.join(format!("{name}.git")), &["init", "-q", "--bare"]);
            std::fs::create_dir_all(&work).expect("mkdir");
            git(&work, &["clone", "-q", srv.join(format!("{name}.git")).to_str().expect("utf-8"), name]);
        }
        let lib = work.join("lib");
        write(&lib.join(".gitattributes"), "*.txt text eol=crlf\n");
        write(&lib.join("a.txt"), "a\nlines\n");
        write(&lib.join("deep/b.txt"), "b\nmore\nlines\n");
        write(&lib.join("raw.dat"), "raw\n");
        git(&lib, &["add", "."]);
        git(&lib, &["commit", "-qm", "lib"]);
        git(&lib, &["push", "-q", "origin", "main"]);
        let sup = work.join("super");
        write(&sup.join("top.txt"), "top\n");
        git(&sup, &["add", "."]);
        git(&sup, &["submodule", "add", "-q", "../lib.git", "lib"]);
        git(&sup, &["commit", "-qm", "super"]);
        git(&sup, &["push", "-q", "origin", "main"]);
        // Submodule URLs naming local repositories are read (as git clones them) only with this.
        git(&srv.join("super.git"), &["config", "protocol.file.allow", "always"]);
        World { dir }
    }

    fn repo_path(&self) -> PathBuf {
        self.dir.path().join("srv/super.git")
    }

    /// What `git clone --recurse-submodules` writes (without `.git`).
    fn expected(&self) -> BTreeMap<String, Node> {
        let to = self.dir.path().join("clone");
        if !to.exists() {
            let from = self.repo_path();
            let args =
                ["clone", "-q", "--recurse-submodules", from.to_str().expect("utf-8"), to.to_str().expect("utf-8")];
            git(self.dir.path(), &args);
        }
        without_git(tree::read_dir(&to))
    }
}

/// A tree without `.git` (directories and gitfiles) and `.treesync`.
fn without_git(t: BTreeMap<String, Node>) -> BTreeMap<String, Node> {
    t.into_iter().filter(|(k, _)| !k.split('/').any(|c| c == ".git" || c == ".treesync")).collect()
}

fn run<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime").block_on(f)
}

fn options(force: bool) -> sync::Options {
    sync::Options { backend_name: "memory".into(), recurse_submodules: true, force, ..Default::default() }
}

fn sync_recursive(repo: &Repo, target: &MemoryBackend, force: bool) -> sync::Outcome {
    run(sync::sync(repo, "main", target, &options(force), &|_| {}, &AtomicBool::new(false))).expect("sync")
}

fn assert_holds_clone(world: &World, target: &MemoryBackend, context: &str) {
    let actual = without_git(tree::read_memory(&target.snapshot()));
    if let Some(d) = tree::diff(&world.expected(), &actual) {
        panic!("{context}: the target differs from git clone --recurse-submodules: {d}");
    }
}

fn drift_of(repo: &Repo, target: &MemoryBackend, level: Level) -> Vec<Drift> {
    run(verify_at(repo, target, level)).expect("verify").drift
}

#[test]
fn a_recursive_sync_verifies_clean_and_drift_inside_a_submodule_is_found_and_repaired() {
    let world = World::new();
    let repo = Repo::open(world.repo_path()).expect("open");
    let target = MemoryBackend::new();
    sync_recursive(&repo, &target, false);
    assert_holds_clone(&world, &target, "after the sync");
    let expected = world.expected();
    assert_eq!(
        expected.get("lib/deep/b.txt"),
        Some(&Node::File(b"b\r\nmore\r\nlines\r\n".to_vec(), false)),
        "the submodule's own .gitattributes convert its files"
    );

    for level in [Level::Quick, Level::Stat, Level::Full] {
        let report = run(verify_at(&repo, &target, level)).expect("verify");
        assert!(report.is_clean(), "{level:?}: drift right after a recursive sync: {:?}", report.drift);
        assert!(report.expected >= 6, "{level:?}: the submodule's paths are compared: {report:?}");
    }
    // A --force sync of the clean target compares it (submodules filled) and writes nothing.
    let out = sync_recursive(&repo, &target, true);
    assert_eq!(out.applied, Default::default(), "--force rewrote a clean target");
    assert_holds_clone(&world, &target, "after sync --force");

    // Drift inside the submodule: a file deleted, a converted file put back to its blob's bytes.
    target.remove("lib/a.txt");
    target.insert("lib/deep/b.txt", MemNode::File { data: b"b\nmore\nlines\n".to_vec(), executable: false });
    for level in [Level::Stat, Level::Full] {
        assert_eq!(
            drift_of(&repo, &target, level),
            [
                Drift::Missing { path: b"lib/a.txt".to_vec() },
                Drift::ContentChanged { path: b"lib/deep/b.txt".to_vec() }
            ],
            "{level:?}: exactly the deleted and the changed file"
        );
    }
    let repair = sync::RepairOptions {
        level: Level::Stat,
        delete_extra: true,
        dry_run: false,
        check_after: true,
        slice: None,
        sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
    };
    let out = run(sync::repair(&repo, &target, &repair, &|_| {}, &AtomicBool::new(false))).expect("repair");
    let applied = out.applied.expect("the repair applied ops");
    assert_eq!((applied.write, applied.unlink, applied.rmdir), (2, 0, 0), "two files written back: {applied:?}");
    assert!(out.after.as_ref().is_some_and(|a| a.is_clean()), "clean after the repair: {:?}", out.after);
    assert_holds_clone(&world, &target, "after the repair");
    assert!(drift_of(&repo, &target, Level::Full).is_empty(), "a full verify after the repair");
    // The state still records filled submodules: a plain sync leaves them as they are.
    let out = sync_recursive(&repo, &target, false);
    assert_eq!(out.applied, Default::default(), "a sync after the repair has nothing to do");
}

#[test]
fn without_recurse_submodules_a_filled_gitlink_is_extra() {
    let world = World::new();
    let repo = Repo::open(world.repo_path()).expect("open");
    let target = MemoryBackend::new();
    run(sync::sync(
        &repo,
        "main",
        &target,
        &sync::Options { backend_name: "memory".into(), ..Default::default() },
        &|_| {},
        &AtomicBool::new(false),
    ))
    .expect("sync");
    assert!(drift_of(&repo, &target, Level::Full).is_empty(), "an empty gitlink verifies clean");
    target.insert("lib/planted", MemNode::File { data: b"x\n".to_vec(), executable: false });
    assert_eq!(
        drift_of(&repo, &target, Level::Stat),
        [Drift::Extra { path: b"lib/planted".to_vec(), dir: false }],
        "content in a gitlink the state says is empty"
    );
}
