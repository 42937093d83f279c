//! Never a wrong tree, never a write outside the target: planted symlinks in the state folder,
//! hard links, refusals that write nothing, read-only commands, and targets that can always be
//! finished (a damaged state file, a synced commit gone from the repository, leftovers of
//! killed runs).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::plan_ops;
use crate::treesync;
use treesync_testkit::assert_target_is;
use treesync_testkit::cli::listing;
use treesync_testkit::cli::s;
use treesync_testkit::cli::stderr;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, Model};
use treesync_testkit::history::{executable, file};
use treesync_testkit::{BareRepo, git};

fn sync(repo: &Path, rev: &str, target: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["sync", "-q", "--repo", s(repo), "--ref", rev, "--target", s(target)];
    args.extend_from_slice(extra);
    treesync(&args)
}

/// Sync `commit` into `t` with `extra` arguments, and check the target is its archive.
fn synced(bare: &BareRepo, commit: &str, t: &Path, extra: &[&str]) {
    assert_ok(&sync(&bare.path, commit, t, extra));
    assert_target_is(bare, commit, t);
}

fn assert_ok(o: &Output) {
    assert!(o.status.success(), "exit {:?}: {}", o.status.code(), stderr(o));
}

/// A new target synced to `commit` of `bare`.
fn target_at(bare: &BareRepo, commit: &str) -> (tempfile::TempDir, PathBuf) {
    let (dir, t) = temp_target("t");
    assert_ok(&sync(&bare.path, commit, &t, &[]));
    (dir, t)
}

/// Two commits: `a` changes, `b` appears.
fn two_commits() -> (BareRepo, Vec<String>) {
    let one = Model::of(&[("a", "one\n"), ("d/x", "x\n")]);
    let two = one.with([("a", file("two\n")), ("d/b", file("b\n"))]);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[one, two]);
    (bare, commits)
}

#[test]
fn a_planted_symlink_in_the_state_folder_is_refused_naming_it() {
    let (bare, commits) = two_commits();
    for planted in [".treesync", ".treesync/lock", ".treesync/state", ".treesync/tmp"] {
        let (dir, t) = temp_target("t");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), b"outside\n").expect("write");
        assert_ok(&sync(&bare.path, &commits[0], &t, &[]));
        let p = t.join(planted);
        if p.is_dir() {
            std::fs::remove_dir_all(&p).expect("rm -r");
        } else {
            std::fs::remove_file(&p).expect("rm");
        }
        let link_to = if planted.ends_with("lock") || planted.ends_with("state") {
            outside.join("keep")
        } else {
            outside.clone()
        };
        std::os::unix::fs::symlink(&link_to, &p).expect("plant the symlink");
        for args in [&["sync"][..], &["verify", "--repair"][..]] {
            let mut a = args.to_vec();
            a.extend(["--repo", s(&bare.path), "--target", s(&t)]);
            if args[0] == "sync" {
                a.extend(["--ref", &commits[1]]);
            }
            let o = treesync(&a);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(4), "{planted}, {args:?}: {err}");
            assert!(err.contains(&format!("refusing to use {}: it is a symlink", s(&p))), "{planted}: {err}");
            assert!(err.contains("hint: "), "{err}");
            assert_eq!(listing(&outside), ["keep"], "{planted}: something was written outside");
            assert_eq!(std::fs::read(outside.join("keep")).expect("keep"), b"outside\n", "{planted}");
        }
        // The hint works: remove it and run again (a target holding files needs --force).
        std::fs::remove_file(&p).expect("rm the symlink");
        // Without its state file a target holding files is not treesync's any more.
        let force: &[&str] = if matches!(planted, ".treesync" | ".treesync/state") { &["--force"] } else { &[] };
        assert_ok(&sync(&bare.path, &commits[1], &t, force));
        assert_target_is(&bare, &commits[1], &t);
    }
}

#[test]
fn a_refused_sync_and_status_write_nothing() {
    let (bare, commits) = two_commits();
    // A foreign target: refused, nothing of treesync's appears in it.
    let (dir, t) = temp_target("t");
    std::fs::create_dir(&t).expect("mkdir");
    std::fs::write(t.join("foreign"), b"mine\n").expect("write");
    let o = sync(&bare.path, &commits[0], &t, &[]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert_eq!(listing(&t), ["foreign"]);
    // A revision that does not resolve: the target is not even created.
    let missing = dir.path().join("missing");
    let o = sync(&bare.path, "no-such-ref", &missing, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!missing.exists());
    // status of a managed target creates nothing (not .treesync/tmp).
    let m = dir.path().join("m");
    assert_ok(&sync(&bare.path, &commits[0], &m, &[]));
    std::fs::remove_dir_all(m.join(".treesync/tmp")).expect("rm tmp");
    let before = listing(&m.join(".treesync"));
    assert_ok(&treesync(&["status", "--target", s(&m)]));
    assert_ok(&treesync(&["verify", "--repo", s(&bare.path), "--target", s(&m), "--level", "quick"]));
    assert_eq!(listing(&m.join(".treesync")), before, "a read-only command wrote into .treesync");
}

#[test]
fn a_mode_change_never_changes_a_file_outside_through_a_hard_link() {
    let one = Model::of(&[("tool", "#!/bin/sh\n")]);
    let two = one.with([("tool", executable("#!/bin/sh\n"))]);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[one, two]);
    let (dir, t) = temp_target("t");
    assert_ok(&sync(&bare.path, &commits[0], &t, &[]));
    // Someone with access to the target links a file of theirs in place of the managed one.
    let outside = dir.path().join("outside-file");
    std::fs::write(&outside, b"#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::remove_file(t.join("tool")).expect("rm");
    std::fs::hard_link(&outside, t.join("tool")).expect("ln");
    let plan = treesync(&["plan", "--repo", s(&bare.path), "--ref", &commits[1], "--target", s(&t), "--json"]);
    assert!(String::from_utf8_lossy(&plan.stdout).contains("chmod"), "the plan is a mode change only");
    assert_ok(&sync(&bare.path, &commits[1], &t, &[]));
    let mode = std::fs::metadata(&outside).expect("outside").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the mode of a file outside the target changed");
    assert_target_is(&bare, &commits[1], &t);
}

#[test]
fn a_synced_commit_gone_from_the_repository_says_so_and_force_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &["init", "-q", "-b", "main"]);
    let commit = |msg: &str| {
        git(&work, &["add", "-A"]);
        git(
            &work,
            &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--amend", "--allow-empty", "-m", msg],
        );
        git(&work, &["rev-parse", "HEAD"])
    };
    std::fs::write(work.join("a"), b"first\n").expect("write");
    git(&work, &["add", "-A"]);
    git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"]);
    let first = git(&work, &["rev-parse", "HEAD"]);
    let t = dir.path().join("t");
    assert_ok(&sync(&work, "main", &t, &[]));
    // Amend it and collect the garbage: the synced commit and its tree are gone.
    std::fs::write(work.join("a"), b"amended\n").expect("write");
    std::fs::write(work.join("b"), b"new\n").expect("write");
    let amended = commit("amended");
    git(&work, &["reflog", "expire", "--expire=now", "--all"]);
    git(&work, &["gc", "-q", "--prune=now"]);
    assert!(
        Command::new("git").current_dir(&work).args(["cat-file", "-e", &first]).status().expect("git").code()
            != Some(0)
    );
    let o = sync(&work, "main", &t, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is no longer in the repository") && err.contains("--force"), "{err}");
    assert!(!err.contains("fsck"), "the repository is fine: {err}");
    // The hint works.
    let o = sync(&work, "main", &t, &["--force"]);
    assert_ok(&o);
    assert_eq!(std::fs::read(t.join("a")).expect("a"), b"amended\n");
    assert_eq!(std::fs::read(t.join("b")).expect("b"), b"new\n");
    let o = treesync(&["status", "--target", s(&t), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["state"]["synced"]["commit"], amended.as_str());
    // And the next sync is incremental again.
    assert_ok(&sync(&work, "main", &t, &[]));
}

#[test]
fn a_damaged_state_file_says_to_force_and_force_finishes() {
    let (bare, commits) = two_commits();
    let (_dir, t) = target_at(&bare, &commits[0]);
    let state = t.join(".treesync/state");
    let bytes = std::fs::read(&state).expect("state");
    std::fs::write(&state, &bytes[..bytes.len() / 2]).expect("truncate");
    std::fs::write(t.join("foreign"), b"not from git\n").expect("write");
    let o = sync(&bare.path, &commits[1], &t, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("unreadable") && err.contains("--force"), "{err}");
    // The hint is true.
    synced(&bare, &commits[1], &t, &["--force"]);
    synced(&bare, &commits[0], &t, &[]);
}

#[test]
fn repair_removes_temporaries_that_killed_runs_left() {
    let (bare, commits) = two_commits();
    let (_dir, t) = target_at(&bare, &commits[1]);
    std::fs::write(t.join("d/.treesync-tmp.b"), b"half a file").expect("write");
    std::fs::write(t.join(".treesync-tmp.a"), b"half").expect("write");
    let o = treesync(&["verify", "--repo", s(&bare.path), "--target", s(&t), "--repair"]);
    assert_ok(&o);
    assert_target_is(&bare, &commits[1], &t);
    assert!(!t.join("d/.treesync-tmp.b").exists() && !t.join(".treesync-tmp.a").exists());
}

#[test]
fn verify_compares_an_interrupted_target_with_the_journal_and_repair_finishes_it() {
    let (bare, commits) = two_commits();
    let (_dir, t) = target_at(&bare, &commits[0]);
    // An interrupted sync to the second commit whose replay meets drift: the directory it
    // writes into was replaced by a file.
    let state = t.join(".treesync/state");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).expect("state")).expect("json");
    let synced = v["synced"].clone();
    let to_tree = git(&bare.path, &["rev-parse", &format!("{}^{{tree}}", commits[1])]);
    v["in_progress"] = serde_json::json!({
        "from_tree": synced["tree"], "to_commit": commits[1], "to_tree": to_tree,
        "takeover": false, "started_unix": 1, "holder": null, "host": null, "pid": null,
    });
    std::fs::write(&state, serde_json::to_vec(&v).expect("json")).expect("write");
    std::fs::remove_dir_all(t.join("d")).expect("rm -r");
    std::fs::write(t.join("d"), b"in the way\n").expect("write");
    let o = treesync(&["verify", "--repo", s(&bare.path), "--target", s(&t), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(report["report"]["interrupted"], true);
    assert_eq!(report["report"]["commit"], commits[1].as_str());
    let o = treesync(&["verify", "--repo", s(&bare.path), "--target", s(&t), "--repair", "--json"]);
    assert_ok(&o);
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(out["finished"].is_object(), "the interrupted sync was finished first: {out}");
    assert_eq!(out["clean"], true, "{out}");
    assert_target_is(&bare, &commits[1], &t);
}

#[test]
fn names_that_could_fake_output_lines_are_quoted_like_git() {
    let bare = BareRepo::new();
    let blob = treesync_testkit::git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"x\n");
    let names: [&[u8]; 3] = [b"evil\n  write   fake.txt (1 B)", b"\x1b[31mred", b"ok.txt"];
    let entries: Vec<(&str, &[u8], &str)> = names.iter().map(|n| ("100644", *n, blob.as_str())).collect();
    let tree = treesync_testkit::raw_tree(&bare.path, &entries);
    let commit = git(&bare.path, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "odd"]);
    let (_dir, t) = temp_target("t");
    let o = treesync(&["plan", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&t)]);
    assert_ok(&o);
    let out = String::from_utf8(o.stdout).expect("utf8");
    assert!(!out.contains('\x1b'), "a terminal escape reached the output: {out:?}");
    let writes: Vec<&str> = out.lines().filter(|l| l.starts_with("  write ")).collect();
    assert_eq!(writes.len(), 3, "one line per op, no faked line: {out}");
    assert!(out.contains(r#""evil\n  write   fake.txt (1 B)""#), "{out}");
    assert!(out.contains(r#""\033[31mred""#), "{out}");
    // --json keeps the name itself (JSON escapes it).
    let o = treesync(&["plan", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&t), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let paths: Vec<String> = plan_ops(&v).iter().map(|op| op["path"].as_str().expect("path").to_string()).collect();
    assert!(paths.contains(&"evil\n  write   fake.txt (1 B)".to_string()), "{paths:?}");
    assert!(!t.exists(), "plan writes nothing");
}

#[test]
fn targets_inside_the_git_directory_and_forced_takeovers_of_precious_places_are_refused() {
    let (bare, commits) = two_commits();
    let inside = bare.path.join("refs/t");
    let o = sync(&bare.path, &commits[0], &inside, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("inside the repository's git directory"), "{err}");
    assert!(!inside.exists());
    // A non-bare repository: its .git, and with --force its working tree, / and $HOME.
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("a"), b"a\n").expect("write");
    git(&work, &["add", "-A"]);
    git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a"]);
    let o = sync(&work, "main", &work.join(".git/x"), &[]);
    assert!(stderr(&o).contains("inside the repository's git directory"), "{}", stderr(&o));
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::write(home.join("precious"), b"mine\n").expect("write");
    for (target, what) in
        [(work.clone(), "working tree"), (home.clone(), "home directory"), ("/".into(), "filesystem root")]
    {
        let o = Command::new(env!("CARGO_BIN_EXE_treesync"))
            .args(["sync", "--repo", s(&work), "--ref", "main", "--target", s(&target), "--force"])
            .env("HOME", &home)
            .output()
            .expect("runs");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(err.contains("refusing to take over") && err.contains(what), "{err}");
    }
    assert_eq!(std::fs::read(home.join("precious")).expect("precious"), b"mine\n");
    assert!(!work.join(".treesync").exists() && !home.join(".treesync").exists());
}

/// Issue 29: `file://` skipped the checks on where a target may be (`--target file://REPO.git
/// --force` deleted the repository, `file://$HOME --force` removed `~/.ssh`, `file:///` offered
/// `--force` on `/`). The same rules now hold whatever the spelling, and by content for any
/// repository, home or generations a takeover would remove.
#[test]
fn every_spelling_of_a_precious_place_is_refused_and_nothing_is_removed() {
    let (bare, commits) = two_commits();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let url = |p: &Path| format!("file://{}", p.display());
    let run = |target: &str, force: bool| {
        let mut args = vec!["sync", "--repo", s(&bare.path), "--ref", &commits[0], "--target", target];
        if force {
            args.push("--force");
        }
        Command::new(env!("CARGO_BIN_EXE_treesync")).args(&args).env("HOME", root.join("home")).output().expect("runs")
    };
    let refused = |o: &Output, what: &str| {
        let err = stderr(o);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(err.contains(what), "{what:?} not in: {err}");
        assert!(!err.contains("pass --force"), "a hint that cannot work: {err}");
    };
    // The repository itself, through file://, and the home, holding ~/.ssh.
    refused(&run(&url(&bare.path), true), "inside the repository's git directory");
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
    std::fs::write(home.join(".ssh/id"), b"key\n").expect("write");
    refused(&run(&url(&home), true), "your home directory");
    refused(&run(s(&home), true), "your home directory");
    // The root, with or without --force: no hint offers --force there.
    for (target, force) in [("file:///", false), ("file:///", true), ("/", false), ("/", true)] {
        refused(&run(target, force), "the filesystem root");
    }
    // Another repository, by content: bare (at the top or deeper), or a clone's .git.
    let other = root.join("other.git");
    git(root, &["init", "-q", "--bare", s(&other)]);
    refused(&run(&url(&other), true), "a git repository (HEAD, objects/, refs/)");
    refused(&run(s(&other), true), "a git repository (HEAD, objects/, refs/)");
    let holder = root.join("holder");
    git(root, &["init", "-q", "--bare", s(&holder.join("deep/x.git"))]);
    refused(&run(&url(&holder), true), "HEAD, objects/, refs/ in deep/x.git");
    let clone = root.join("clone");
    git(root, &["clone", "-q", s(&bare.path), s(&clone)]);
    refused(&run(s(&clone), true), "a git repository that treesync did not write");
    refused(&run(&url(&clone), true), "a git repository");
    // Generations: a target in a home, and a directory holding one; a home's .ssh.
    let site_home = root.join("srv/.site.treesync");
    std::fs::create_dir_all(site_home.join("g1")).expect("mkdir");
    refused(&run(s(&site_home.join("g2")), false), "is a folder treesync keeps for a target of its own");
    refused(&run(&url(&site_home.join("g2")), false), "is a folder treesync keeps for a target of its own");
    refused(&run(s(&root.join("srv")), true), "the generations of another target (.site.treesync)");
    let user = root.join("user");
    std::fs::create_dir_all(user.join(".ssh")).expect("mkdir");
    std::fs::write(user.join(".ssh/authorized_keys"), b"key\n").expect("write");
    refused(&run(&url(&user), true), "a home directory (.ssh)");
    // Nothing was removed or written anywhere.
    assert_eq!(std::fs::read(home.join(".ssh/id")).expect("key"), b"key\n");
    git(&bare.path, &["rev-parse", "--verify", "-q", "main"]);
    git(&other, &["rev-parse", "--git-dir"]);
    git(&holder.join("deep/x.git"), &["rev-parse", "--git-dir"]);
    git(&clone, &["status", "--short"]);
    assert!(clone.join("a").exists() && user.join(".ssh/authorized_keys").exists() && site_home.join("g1").exists());
    assert!(!site_home.join("g2").exists());
    for d in [&home, &other, &holder, &clone, &root.join("srv"), &user] {
        assert!(!d.join(".treesync").exists(), "{} was written", d.display());
    }
}

#[test]
fn force_says_what_it_removes_and_writes_over() {
    let (bare, commits) = two_commits();
    let (_dir, t) = temp_target("t");
    std::fs::create_dir_all(t.join("junk/deeper")).expect("mkdir");
    std::fs::write(t.join("junk/deeper/x"), b"x\n").expect("write");
    std::fs::write(t.join("notes.txt"), b"mine\n").expect("write");
    std::fs::write(t.join("a"), b"someone else's a\n").expect("write");
    let o = treesync(&["plan", "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&t), "--force", "--json"]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["replaced"]["removed"], 2, "{v}");
    assert_eq!(v["replaced"]["first_removed"], serde_json::json!(["junk", "notes.txt"]), "{v}");
    assert_eq!(v["replaced"]["overwritten"], 1, "{v}");
    assert_eq!(v["replaced"]["first_overwritten"], serde_json::json!(["a"]), "{v}");
    let o = treesync(&["sync", "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&t), "--force"]);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("takeover removed 2 entries the tree does not have: junk, notes.txt"), "{out}");
    assert!(out.contains("takeover wrote over 1 files that were there: a"), "{out}");
    assert_target_is(&bare, &commits[0], &t);
    // --force on the managed target now: compared once, only what differs is named.
    std::fs::write(t.join("d/x"), b"changed\n").expect("write");
    std::fs::write(t.join("stray"), b"s\n").expect("write");
    let o = sync(&bare.path, &commits[1], &t, &["--force", "--json"]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["takeover"], true, "{v}");
    assert_eq!(v["replaced"]["first_removed"], serde_json::json!(["stray"]), "{v}");
    assert!(v["replaced"]["first_overwritten"].as_array().expect("array").contains(&"d/x".into()), "{v}");
    assert_target_is(&bare, &commits[1], &t);
}

#[test]
fn targets_that_name_nothing_or_another_prefix_get_a_clear_error() {
    let (bare, commits) = two_commits();
    let o = sync(&bare.path, &commits[0], Path::new(""), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("the target is empty") && err.contains("hint: "), "{err}");
    for url in ["s3://bucket/../../x", "s3://bucket/site/./x", "file:///tmp/a/../b"] {
        let o = treesync(&["plan", "--repo", s(&bare.path), "--ref", &commits[0], "--target", url]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains("`.` or `..` segment"), "{url}: {err}");
    }
}

#[test]
fn an_entry_with_a_mode_git_does_not_write_is_named_plainly() {
    let bare = BareRepo::new();
    let blob = treesync_testkit::git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"x\n");
    let tree = treesync_testkit::raw_tree(&bare.path, &[("0", b"w", &blob)]);
    let commit = git(&bare.path, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "mode 0"]);
    let (_dir, t) = temp_target("t");
    let o = sync(&bare.path, &commit, &t, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("has an entry w with mode 0, which git does not write"), "{err}");
    assert!(!err.contains("./w") && err.contains("hint: "), "{err}");
    assert!(!t.exists(), "nothing written");
}

#[test]
fn a_target_that_is_a_symlink_is_refused_with_a_hint_that_works() {
    let (bare, commits) = two_commits();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("real")).expect("mkdir");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("real", &link).expect("ln -s");
    let o = sync(&bare.path, &commits[0], &link, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("it is a symlink (to real)") && err.contains("end the target with a slash"), "{err}");
    assert_eq!(listing(&dir.path().join("real")), Vec::<String>::new(), "nothing written");
    // The hint works: a trailing slash follows the link on purpose.
    let followed = format!("{}/", s(&link));
    assert_ok(&sync(&bare.path, &commits[0], Path::new(&followed), &[]));
    assert_target_is(&bare, &commits[0], &dir.path().join("real"));
}

#[test]
fn sync_waits_for_the_lock_with_wait() {
    let (bare, commits) = two_commits();
    let (_dir, t) = target_at(&bare, &commits[0]);
    // Another writer holds the lock for a second (flock, like treesync's own lock).
    let mut holder = Command::new("flock")
        .arg(t.join(".treesync/lock"))
        .args(["sleep", "1"])
        .spawn()
        .expect("flock (util-linux) runs");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let o = sync(&bare.path, &commits[1], &t, &[]);
    assert_eq!(o.status.code(), Some(3), "without --wait: {}", stderr(&o));
    let o = sync(&bare.path, &commits[1], &t, &["--wait", "30s"]);
    assert_ok(&o);
    assert!(holder.wait().expect("flock ends").success());
    assert_target_is(&bare, &commits[1], &t);
}

/// A name that is not UTF-8: `--json` writes it losslessly (git's C-quoted form, documented in
/// docs/json.md), and `verify --repair` repairs it instead of skipping it.
#[test]
fn names_that_are_not_utf8_lose_nothing_in_json_and_are_repaired() {
    use std::os::unix::ffi::OsStrExt;
    let bare = BareRepo::new();
    let blob = treesync_testkit::git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"latin-1 name\n");
    let tree = treesync_testkit::raw_tree(&bare.path, &[("100644", b"caf\xe9.txt", &blob), ("100644", b"ok", &blob)]);
    let commit = git(&bare.path, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "latin-1"]);
    let (_dir, t) = temp_target("t");
    let o = treesync(&["plan", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&t), "--json"]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let paths: Vec<&str> = plan_ops(&v).iter().map(|op| op["path"].as_str().expect("path")).collect();
    assert_eq!(paths, [r#""caf\351.txt""#, "ok"], "{v}");
    assert_ok(&sync(&bare.path, &commit, &t, &[]));
    let odd = t.join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
    std::fs::write(&odd, b"tampered\n").expect("tamper");
    let o = treesync(&["verify", "--repo", s(&bare.path), "--target", s(&t), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["report"]["drift"][0]["path"], r#""caf\351.txt""#, "{v}");
    assert_ok(&treesync(&["verify", "--repo", s(&bare.path), "--target", s(&t), "--repair"]));
    assert_eq!(std::fs::read(&odd).expect("read"), b"latin-1 name\n", "repaired, not skipped");
}

/// A sync that waits for the lock (`--wait`) writes the commit its ref names once it has the
/// lock, not the older one the ref named when it started waiting (a post-receive hook's sync
/// queued behind another must not roll the target back) — in place and with `--atomic`.
#[test]
fn a_sync_that_waited_for_the_lock_writes_what_the_ref_names_then() {
    let (bare, commits) = two_commits();
    for atomic in [false, true] {
        let (dir, t) = temp_target("t");
        git(&bare.path, &["update-ref", "refs/heads/live", &commits[0]]);
        let extra: &[&str] = if atomic { &["--atomic"] } else { &[] };
        assert_ok(&sync(&bare.path, "live", &t, extra));
        let lock = if atomic { dir.path().join(".t.treesync/lock") } else { t.join(".treesync/lock") };
        assert!(lock.is_file(), "{atomic}: the lock file is {}", lock.display());
        // Another writer holds the lock; the waiting sync starts while `live` names the first commit.
        let mut holder = Command::new("flock").arg(&lock).args(["sleep", "3"]).spawn().expect("flock runs");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut args = vec!["sync", "-q", "--repo", s(&bare.path), "--ref", "live", "--target", s(&t), "--wait", "60s"];
        args.extend_from_slice(extra);
        let waiting = Command::new(env!("CARGO_BIN_EXE_treesync"))
            .args(&args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("treesync runs");
        std::thread::sleep(std::time::Duration::from_millis(1000));
        // The push lands while it waits.
        git(&bare.path, &["update-ref", "refs/heads/live", &commits[1]]);
        assert!(holder.wait().expect("flock ends").success());
        let o = waiting.wait_with_output().expect("the waiting sync ends");
        assert_ok(&o);
        assert_target_is(&bare, &commits[1], &t);
    }
}
