//! `--recurse-submodules`: gitlinks filled with their submodules' trees, found as git finds
//! them for a superproject, synced incrementally, and compared with what
//! `git clone --recurse-submodules` makes of the same commit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;

use treesync_core::sync::{self, PrepareOptions};
use treesync_core::{MemoryBackend, Repo};
use treesync_testkit::tree::{self, Node};
use treesync_testkit::work::{git, write};

/// [`git`] with `input` on its stdin.
fn git_stdin(dir: &Path, args: &[&str], input: &str) -> String {
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git runs");
    std::io::Write::write_all(&mut child.stdin.take().expect("piped"), input.as_bytes()).expect("stdin");
    let out = child.wait_with_output().expect("git ends");
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A server directory with `super.git`, `lib.git` and `nested.git` side by side; `lib` is a
/// submodule of `super` (URL `../lib.git`), `nested` one of `lib` (URL `../nested.git`).
/// Branches `s1`… of `super` walk a history: no submodule, added, bumped (with its nested
/// submodule), removed, replaced by a directory, back, replaced by a file, back, replaced by a
/// directory at once.
struct World {
    dir: tempfile::TempDir,
}

const BRANCHES: [&str; 9] = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"];

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = dir.path();
        let srv = w.join("srv");
        for name in ["nested.git", "lib.git", "super.git"] {
            std::fs::create_dir_all(srv.join(name)).expect("mkdir");
            git(&srv.join(name), &["init", "-q", "--bare"]);
        }
        let work = w.join("work");
        std::fs::create_dir_all(&work).expect("mkdir");
        for name in ["nested", "lib", "super"] {
            git(&work, &["clone", "-q", srv.join(format!("{name}.git")).to_str().expect("utf-8"), name]);
        }

        // nested: N1, N2.
        let nested = work.join("nested");
        write(&nested.join("n.txt"), "n1\n");
        git(&nested, &["add", "."]);
        git(&nested, &["commit", "-qm", "n1"]);
        let n1 = git(&nested, &["rev-parse", "HEAD"]);
        write(&nested.join("n.txt"), "n2\n");
        git(&nested, &["commit", "-qam", "n2"]);
        git(&nested, &["push", "-q", "origin", "main"]);

        // lib: L1 (with nested at N1), L2 (files changed, added, removed; nested at N2).
        let lib = work.join("lib");
        for i in 0..20 {
            write(&lib.join(format!("f{i:02}")), &format!("file {i}\n"));
        }
        write(&lib.join("dir/deep/g.txt"), "deep\n");
        write(&lib.join("run.sh"), "#!/bin/sh\necho hi\n");
        std::fs::set_permissions(lib.join("run.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        std::os::unix::fs::symlink("f00", lib.join("link")).expect("symlink");
        git(&lib, &["add", "."]);
        git(&lib, &["commit", "-qm", "l0"]);
        git(&lib, &["submodule", "add", "-q", "../nested.git", "nested"]);
        git(&lib.join("nested"), &["checkout", "-q", &n1]);
        git(&lib, &["add", "nested"]);
        git(&lib, &["commit", "-qm", "l1"]);
        write(&lib.join("f01"), "file 1, changed\n");
        write(&lib.join("f20"), "file 20\n");
        git(&lib, &["rm", "-q", "f02"]);
        git(&lib.join("nested"), &["checkout", "-q", "main"]);
        git(&lib, &["add", "."]);
        git(&lib, &["commit", "-qm", "l2"]);
        let l2 = git(&lib, &["rev-parse", "HEAD"]);
        let l1 = git(&lib, &["rev-parse", "HEAD~1"]);
        git(&lib, &["push", "-q", "origin", "main"]);

        // super: s1 without submodules, s2 adds lib at L1, s3 bumps it to L2, s4 removes it,
        // s5 has a directory lib/ in its place.
        let sup = work.join("super");
        write(&sup.join("README"), "super\n");
        write(&sup.join("d/x.txt"), "x\n");
        git(&sup, &["add", "."]);
        git(&sup, &["commit", "-qm", "s1"]);
        git(&sup, &["branch", "s1"]);
        git(&sup, &["submodule", "add", "-q", "../lib.git", "lib"]);
        git(&sup.join("lib"), &["checkout", "-q", &l1]);
        git(&sup, &["add", "lib"]);
        git(&sup, &["commit", "-qm", "s2"]);
        git(&sup, &["branch", "s2"]);
        git(&sup.join("lib"), &["checkout", "-q", &l2]);
        git(&sup, &["add", "lib"]);
        git(&sup, &["commit", "-qm", "s3"]);
        git(&sup, &["branch", "s3"]);
        git(&sup, &["rm", "-q", "lib"]);
        git(&sup, &["commit", "-qm", "s4"]);
        git(&sup, &["branch", "s4"]);
        write(&sup.join("lib/plain.txt"), "a plain directory now\n");
        write(&sup.join("lib/f01"), "not the submodule's\n");
        git(&sup, &["add", "."]);
        git(&sup, &["commit", "-qm", "s5"]);
        git(&sup, &["branch", "s5"]);
        git(&sup, &["push", "-q", "origin", "main", "s1", "s2", "s3", "s4", "s5"]);

        // s6: s3's tree again; s7: lib is a file; s8: s3's tree again. Made in the bare
        // repository with git mktree.
        let bare = srv.join("super.git");
        let s3_tree = git(&bare, &["rev-parse", "s3^{tree}"]);
        let s6 = git(&bare, &["commit-tree", &s3_tree, "-p", "s5", "-m", "s6"]);
        git(&bare, &["branch", "s6", &s6]);
        let blob = git(&bare, &["hash-object", "-w", "/dev/null"]);
        let mut listing: Vec<String> =
            git(&bare, &["ls-tree", "s3"]).lines().filter(|l| !l.ends_with("\tlib")).map(String::from).collect();
        listing.push(format!("100644 blob {blob}\tlib"));
        let s7_tree = git_stdin(&bare, &["mktree"], &(listing.join("\n") + "\n"));
        let s7 = git(&bare, &["commit-tree", &s7_tree, "-p", "s6", "-m", "s7"]);
        git(&bare, &["branch", "s7", &s7]);
        let s8 = git(&bare, &["commit-tree", &s3_tree, "-p", "s7", "-m", "s8"]);
        git(&bare, &["branch", "s8", &s8]);
        // s9: s5's tree (lib a directory) straight after the submodule.
        let s5_tree = git(&bare, &["rev-parse", "s5^{tree}"]);
        let s9 = git(&bare, &["commit-tree", &s5_tree, "-p", "s8", "-m", "s9"]);
        git(&bare, &["branch", "s9", &s9]);
        // Submodule URLs naming local repositories are read (as git clones them) only with this.
        git(&bare, &["config", "protocol.file.allow", "always"]);
        World { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// What `git clone --recurse-submodules` of `branch` checks out (`recurse: false`: a plain
    /// `git clone`), without the `.git` directories and files.
    fn expected(&self, branch: &str, recurse: bool) -> BTreeMap<String, Node> {
        let to = self.path(&format!("expected/{branch}-{recurse}"));
        if !to.exists() {
            let from = self.path("srv/super.git");
            let mut args = vec!["clone", "-q", "-b", branch];
            if recurse {
                args.push("--recurse-submodules");
            }
            args.extend([from.to_str().expect("utf-8"), to.to_str().expect("utf-8")]);
            git(self.dir.path(), &args);
        }
        without_git(tree::read_dir(&to))
    }
}

/// A tree without `.git` (directories and gitfiles) and `.treesync`.
fn without_git(t: BTreeMap<String, Node>) -> BTreeMap<String, Node> {
    t.into_iter().filter(|(k, _)| !k.split('/').any(|c| c == ".git" || c == ".treesync")).collect()
}

fn options(recurse: bool) -> sync::Options {
    sync::Options { backend_name: "memory".into(), recurse_submodules: recurse, ..Default::default() }
}

fn run<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
}

fn sync_to(repo: &Repo, branch: &str, target: &MemoryBackend, recurse: bool) -> sync::Outcome {
    run(sync::sync(repo, branch, target, &options(recurse), &|_| {}, &AtomicBool::new(false)))
        .unwrap_or_else(|e| panic!("sync to {branch}: {e}"))
}

fn assert_holds(world: &World, target: &MemoryBackend, branch: &str, recurse: bool) {
    let expected = world.expected(branch, recurse);
    let actual = without_git(tree::read_memory(&target.snapshot()));
    if let Some(d) = tree::diff(&expected, &actual) {
        panic!("after the sync to {branch} (recurse {recurse}) the target differs from git's clone: {d}");
    }
}

/// The plan a sync to `branch` would make now (nothing written).
fn plan(repo: &Repo, branch: &str, target: &MemoryBackend, recurse: bool) -> treesync_core::Plan {
    let o = PrepareOptions { recurse_submodules: recurse, ..Default::default() };
    run(sync::prepare(repo, branch, target, &o)).expect("prepare").main.as_ref().clone()
}

/// Sync through the whole history and back, each step compared with git's clone; the commit
/// bump of the submodule touches only the paths it changes.
fn walk_history(world: &World, repo: &Repo) -> Vec<sync::Outcome> {
    let full = world.expected("s3", true);
    assert!(full.contains_key("lib/nested/n.txt") && full.contains_key("lib/link"), "the clone recursed: {full:?}");
    let target = MemoryBackend::new();
    let mut outcomes = Vec::new();
    for (i, branch) in BRANCHES.iter().enumerate() {
        if *branch == "s3" {
            // L1 → L2: f01 changed, f20 added, f02 removed, nested/n.txt changed (N1 → N2).
            let p = plan(repo, branch, &target, true);
            let paths: Vec<String> = p.ops().map(|op| op.path().display()).collect();
            assert!(paths.iter().all(|p| p.starts_with("lib/")), "only the submodule's changes: {paths:?}");
            assert_eq!((p.counts.write, p.counts.unlink), (3, 1), "{paths:?}");
            assert_eq!(p.counts.total(), 4, "{paths:?}");
        }
        let outcome = sync_to(repo, branch, &target, true);
        assert_holds(world, &target, branch, true);
        if i > 0 {
            assert!(outcome.applied.total() > 0, "{branch} changes something");
        }
        outcomes.push(outcome);
    }
    // Back to the submodule, then off: the gitlinks are emptied (only them); on again: filled.
    sync_to(repo, "s8", &target, true);
    assert_holds(world, &target, "s8", true);
    let off = plan(repo, "s8", &target, false);
    assert!(off.ops().all(|op| op.path().display().starts_with("lib/")), "only the submodule's content goes");
    sync_to(repo, "s8", &target, false);
    assert_holds(world, &target, "s8", false);
    assert!(plan(repo, "s8", &target, false).is_empty(), "planning again is empty");
    sync_to(repo, "s8", &target, true);
    assert_holds(world, &target, "s8", true);
    assert!(plan(repo, "s8", &target, true).is_empty(), "planning again is empty");
    // And back to where the submodule is at L1 with recursion off from the start.
    let plain = MemoryBackend::new();
    sync_to(repo, "s2", &plain, false);
    assert_holds(world, &plain, "s2", false);
    outcomes
}

#[test]
fn a_mirror_with_its_submodules_beside_it_syncs_like_a_recursive_clone() {
    let world = World::new();
    let repo = Repo::open(world.path("srv/super.git")).expect("open");
    let outcomes = walk_history(&world, &repo);
    let s3 = &outcomes[2];
    let names: Vec<(&str, &str)> = s3.submodules.iter().map(|u| (u.path.as_str(), u.name.as_str())).collect();
    assert_eq!(names, [("lib", "lib"), ("lib", "lib"), ("lib/nested", "nested"), ("lib/nested", "nested")]);
    assert!(s3.submodules[0].repo.ends_with("srv/lib.git"), "{:?}", s3.submodules[0].repo);
    assert!(s3.submodules[2].repo.ends_with("srv/nested.git"), "{:?}", s3.submodules[2].repo);
}

#[test]
fn submodules_in_modules_under_the_git_dir_are_found_first() {
    let world = World::new();
    // A mirror elsewhere, its submodules cloned where git keeps them (nothing beside it).
    let mirror = world.path("elsewhere/super.git");
    let srv = world.path("srv");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    git(world.dir.path(), &["clone", "-q", "--mirror", &s(&srv.join("super.git")), &s(&mirror)]);
    git(world.dir.path(), &["clone", "-q", "--bare", &s(&srv.join("lib.git")), &s(&mirror.join("modules/lib"))]);
    let nested = mirror.join("modules/lib/modules/nested");
    git(world.dir.path(), &["clone", "-q", "--bare", &s(&srv.join("nested.git")), &s(&nested)]);
    let repo = Repo::open(&mirror).expect("open");
    let outcomes = walk_history(&world, &repo);
    let used: Vec<&Path> = outcomes[2].submodules.iter().map(|u| u.repo.as_path()).collect();
    assert_eq!(used[0], mirror.join("modules/lib"));
    assert_eq!(used[2], nested);
}

#[test]
fn a_missing_submodule_is_refused_before_any_write_and_the_hint_fixes_it() {
    let world = World::new();
    let mirror = world.path("lonely/super.git");
    let from = world.path("srv/super.git");
    git(world.dir.path(), &["clone", "-q", "--mirror", from.to_str().expect("utf-8"), mirror.to_str().expect("utf-8")]);
    let repo = Repo::open(&mirror).expect("open");
    let target = MemoryBackend::new();
    sync_to(&repo, "s1", &target, true);
    let before = target.snapshot();
    let mut fixed = 0;
    loop {
        let r = run(sync::sync(&repo, "s3", &target, &options(true), &|_| {}, &AtomicBool::new(false)));
        let Err(e) = r else { break };
        let text = e.to_string();
        assert_eq!(target.snapshot(), before, "nothing written: {text}");
        let (name, path, modules) = if fixed == 0 {
            ("lib", "lib", "modules/lib")
        } else {
            ("nested", "lib/nested", "modules/lib/modules/nested")
        };
        assert!(text.contains(&format!("submodule \"{name}\" at {path}")), "{text}");
        assert!(text.contains(&format!("{} (no such directory)", mirror.join(modules).display())), "{text}");
        let hint = text.split("hint: ").nth(1).expect("a hint");
        let command = hint.split('`').nth(1).expect("a command in backquotes");
        assert!(command.starts_with("git clone --bare "), "{text}");
        let args: Vec<&str> = command.split(' ').skip(1).collect();
        git(world.dir.path(), &args);
        fixed += 1;
        assert!(fixed <= 2, "the hints fix it: {text}");
    }
    assert_eq!(fixed, 2, "lib, then its nested submodule");
    assert_holds(&world, &target, "s3", true);
}

#[test]
fn an_interrupted_recursive_sync_is_finished_by_the_next_run() {
    use treesync_core::policy::Fail;
    let world = World::new();
    let repo = Repo::open(world.path("srv/super.git")).expect("open");
    let target = MemoryBackend::new();
    let state = |t: &MemoryBackend| -> serde_json::Value {
        let bytes = run(treesync_core::Backend::load_state(t)).expect("load").expect("a state");
        serde_json::from_slice(&bytes).expect("json")
    };
    // Turning recursion on for s3, stopped after two ops: the journal says where it was going.
    sync_to(&repo, "s3", &target, false);
    let failing = Fail::after(target.clone(), 2);
    let r = run(sync::sync(&repo, "s3", &failing, &options(true), &|_| {}, &AtomicBool::new(false)));
    assert!(r.is_err(), "the fault stops it");
    assert_eq!(state(&target)["in_progress"]["recurse_submodules"], serde_json::Value::Bool(true));
    // The next run (to s2, recursing) finishes it first, then goes on incrementally.
    let outcome = sync_to(&repo, "s2", &target, true);
    assert!(outcome.resumed.is_some(), "finished the interrupted sync first");
    assert_holds(&world, &target, "s2", true);
    assert_eq!(state(&target)["recurse_submodules"], serde_json::Value::Bool(true));
    // A bump stopped halfway is finished the same way.
    let failing = Fail::after(target.clone(), 1);
    assert!(run(sync::sync(&repo, "s3", &failing, &options(true), &|_| {}, &AtomicBool::new(false))).is_err());
    sync_to(&repo, "s3", &target, true);
    assert_holds(&world, &target, "s3", true);
    assert!(plan(&repo, "s3", &target, true).is_empty(), "planning again is empty");
}

#[test]
fn a_working_tree_without_initialized_submodules_gets_the_git_submodule_update_hint() {
    let world = World::new();
    let work = world.path("checkout");
    let from = world.path("srv/super.git");
    git(world.dir.path(), &["clone", "-q", "-b", "s3", from.to_str().expect("utf-8"), work.to_str().expect("utf-8")]);
    let repo = Repo::open(&work).expect("open");
    let target = MemoryBackend::new();
    let e = run(sync::sync(&repo, "s3", &target, &options(true), &|_| {}, &AtomicBool::new(false)))
        .expect_err("lib is not there");
    let text = e.to_string();
    assert!(target.snapshot().is_empty(), "nothing written: {text}");
    assert!(text.contains(&format!("{} (no such directory)", work.join(".git/modules/lib").display())), "{text}");
    assert!(text.contains(&format!("{} (not a git repository)", work.join("lib").display())), "{text}");
    let command = text.split("hint: ").nth(1).and_then(|h| h.split('`').nth(1)).expect("a command");
    assert_eq!(command, format!("git -C {} submodule update --init --recursive", work.display()));
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    git(world.dir.path(), &args);
    sync_to(&repo, "s3", &target, true);
    assert_holds(&world, &target, "s3", true);
}

#[test]
fn a_submodule_repository_without_the_commit_gets_a_fetch_hint_that_works() {
    let world = World::new();
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let mirror = world.path("old/super.git");
    let srv = world.path("srv");
    git(world.dir.path(), &["clone", "-q", "--mirror", &s(&srv.join("super.git")), &s(&mirror)]);
    // modules/lib holds only L1 (an old copy): s2 works, s3 needs L2.
    let lib = mirror.join("modules/lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    git(&lib, &["init", "-q", "--bare"]);
    git(&lib, &["remote", "add", "origin", &s(&srv.join("lib.git"))]);
    let l1 = git(&srv.join("lib.git"), &["rev-parse", "main~1"]);
    git(&lib, &["fetch", "-q", "origin", &format!("{l1}:refs/heads/main")]);
    let nested = lib.join("modules/nested");
    git(world.dir.path(), &["clone", "-q", "--bare", &s(&srv.join("nested.git")), &s(&nested)]);
    let repo = Repo::open(&mirror).expect("open");
    let target = MemoryBackend::new();
    sync_to(&repo, "s2", &target, true);
    assert_holds(&world, &target, "s2", true);
    let before = target.snapshot();
    let e = run(sync::sync(&repo, "s3", &target, &options(true), &|_| {}, &AtomicBool::new(false)))
        .expect_err("L2 is missing");
    let text = e.to_string();
    assert_eq!(target.snapshot(), before, "nothing written: {text}");
    assert!(text.contains(&format!("{} (does not have commit", lib.display())), "{text}");
    let command = text.split("hint: ").nth(1).and_then(|h| h.split('`').nth(1)).expect("a command");
    assert!(command.starts_with(&format!("git -C {} fetch origin", lib.display())), "{text}");
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    git(world.dir.path(), &args);
    sync_to(&repo, "s3", &target, true);
    assert_holds(&world, &target, "s3", true);
}
