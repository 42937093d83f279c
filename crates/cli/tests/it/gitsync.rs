//! `treesync git-sync`: git-sync's layout and flags, judged from outside the process by real
//! git — each worktree against a fresh `git clone` checkout of its commit, `git status` clean
//! in it — with repositories served by a real `git daemon` on 127.0.0.1 and over `file://`.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use treesync_testkit::cli::s;
use treesync_testkit::git;
use treesync_testkit::gitdaemon::Served;
use treesync_testkit::history::{self, Model};
use treesync_testkit::tree::{self, Node};

/// `treesync git-sync ARGS`, with no GITSYNC_* or GIT_SYNC_* variable of the caller's.
pub(crate) fn git_sync() -> Command {
    let mut c = crate::cli().command();
    c.arg("git-sync");
    for (k, _) in std::env::vars() {
        if k.starts_with("GITSYNC_") || k.starts_with("GIT_SYNC_") {
            c.env_remove(k);
        }
    }
    c
}

/// Run `treesync git-sync ARGS`.
pub(crate) fn run(args: &[&str]) -> Output {
    git_sync().args(args).output().expect("treesync git-sync runs")
}

/// Run it and expect exit `code`; stderr.
pub(crate) fn exits(args: &[&str], code: i32) -> String {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "git-sync {args:?}: {err}");
    err
}

/// What LINK names: the hash its target ends in, and the target as written.
pub(crate) fn link_of(link: &Path) -> (String, PathBuf) {
    let target = std::fs::read_link(link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
    (target.file_name().expect("a name").to_string_lossy().into_owned(), target)
}

/// Assert that `worktree` is what a fresh `git clone` of `repo` checked out at `hash` holds
/// (bytes, exec bits, symlinks, empty gitlink directories), that git itself says it is clean
/// and at `hash`.
pub(crate) fn assert_like_git(repo: &Path, hash: &str, worktree: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clone = dir.path().join("clone");
    git(dir.path(), &["clone", "-q", "--no-checkout", s(repo), s(&clone)]);
    git(&clone, &["-c", "advice.detachedHead=false", "checkout", "-q", hash]);
    let strip = |t: BTreeMap<String, Node>| -> BTreeMap<String, Node> {
        t.into_iter().filter(|(k, _)| k != ".git" && !k.starts_with(".git/")).collect()
    };
    let (want, got) = (strip(tree::read_dir(&clone)), strip(tree::read_dir(worktree)));
    if let Some(d) = tree::diff(&want, &got) {
        panic!("{} differs from git's checkout of {hash}: {d}", worktree.display());
    }
    assert_eq!(
        git(worktree, &["status", "--porcelain", "--untracked-files=all"]),
        "",
        "git status in {}",
        worktree.display()
    );
    assert_eq!(git(worktree, &["rev-parse", "HEAD"]), hash);
}

/// The log lines (JSON) of a run's stderr that have `msg`.
pub(crate) fn lines_with(stderr: &str, msg: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["msg"] == msg)
        .collect()
}

#[test]
fn one_time_makes_git_syncs_layout_with_a_clean_shallow_worktree() {
    let served = Served::new(&[("index.html", "one\n"), ("css/site.css", "body {}\n"), ("bin/run", "#!/bin/sh\n")]);
    let root = served.dir.path().join("root");
    exits(&["--repo", &served.url, "--root", s(&root), "--one-time"], 0);
    let head = git(&served.bare, &["rev-parse", "main"]);
    // LINK defaults to the leaf of --repo, relative, to .worktrees/HASH.
    let link = root.join("site.git");
    let (hash, target) = link_of(&link);
    assert_eq!(hash, head);
    assert_eq!(target, Path::new(".worktrees").join(&head));
    assert_like_git(&served.bare, &head, &link);
    // ROOT is a repository on branch git-sync with nothing checked out, shallow (--depth 1).
    assert_eq!(git(&root, &["rev-parse", "--show-toplevel"]), s(&root));
    assert_eq!(git(&root, &["symbolic-ref", "HEAD"]), "refs/heads/git-sync");
    assert_eq!(git(&root, &["rev-parse", "git-sync"]), head);
    assert_eq!(git(&root, &["rev-parse", "--is-shallow-repository"]), "true");
    assert_eq!(git(&link, &["log", "--format=%H"]), head, "one commit of history");
    let worktrees = git(&root, &["worktree", "list", "--porcelain"]);
    assert!(worktrees.contains(&format!("worktree {}", root.join(".worktrees").join(&head).display())), "{worktrees}");
    // The .git pointer is relative (the volume may be mounted elsewhere).
    let pointer = std::fs::read_to_string(link.join(".git")).expect(".git");
    assert_eq!(pointer, format!("gitdir: ../../.git/worktrees/{head}\n"));
}

/// Files of `dir` (relative path → (inode, mtime ns)), `.git` and `.treesync` left out.
fn inodes(dir: &Path) -> BTreeMap<String, (u64, i64)> {
    let mut out = BTreeMap::new();
    for (rel, node) in tree::read_dir(dir) {
        if matches!(node, Node::File(..)) && rel != ".git" {
            let m = std::fs::symlink_metadata(dir.join(&rel)).expect("stat");
            out.insert(rel, (m.ino(), m.mtime_nsec() + m.mtime() * 1_000_000_000));
        }
    }
    out
}

#[test]
fn each_new_commit_is_the_diff_a_clone_then_a_reused_worktree() {
    let files: Vec<(String, String)> =
        (0..300).map(|i| (format!("d{}/f{i}.txt", i % 7), format!("file {i}\n"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let served = Served::new(&refs);
    let root = served.dir.path().join("root");
    let args = ["--repo", &served.url, "--root", s(&root), "--link", "site", "--one-time", "-v", "1"];
    let how = |stderr: &str| -> (String, u64) {
        let l = lines_with(stderr, "worktree ready");
        assert_eq!(l.len(), 1, "{stderr}");
        (l[0]["how"].as_str().expect("how").to_string(), l[0]["changed"].as_str().expect("n").parse().expect("n"))
    };
    let first = exits(&args, 0);
    assert_eq!(how(&first), ("full".into(), 300 + 7));
    let link = root.join("site");
    let mut previous: Vec<String> = vec![link_of(&link).0];
    for (round, expected) in [(1, "clone"), (2, "reuse"), (3, "reuse"), (4, "reuse")] {
        let spare_before = std::fs::read_dir(root.join(".worktrees"))
            .expect("worktrees")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .find(|n| Some(n) != previous.last());
        let spare_inodes = spare_before.as_ref().map(|n| inodes(&root.join(".worktrees").join(n)));
        // Three changed files, one added, one removed; an executable bit in round 2.
        let mut change = [
            (format!("d1/f{}.txt", round), format!("changed {round}\n")),
            (format!("d2/f{}.txt", round + 10), format!("changed {round}\n")),
            (format!("d3/f{}.txt", round + 20), format!("changed {round}\n")),
            (format!("new/n{round}.txt"), "new\n".into()),
        ];
        change.sort();
        let change_refs: Vec<(&str, &str)> = change.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
        served.commit(&change_refs);
        git(&served.work(), &["rm", "-q", &format!("d4/f{}.txt", 4 + 7 * round)]);
        if round == 2 {
            std::fs::set_permissions(
                served.work().join("d5/f5.txt"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .expect("chmod");
            git(&served.work(), &["add", "d5/f5.txt"]);
        }
        git(&served.work(), &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "rm"]);
        served.push(&["main"]);
        let err = exits(&args, 0);
        let (made, changed) = how(&err);
        assert_eq!(made, expected, "round {round}: {err}");
        let head = git(&served.bare, &["rev-parse", "main"]);
        let (hash, _) = link_of(&link);
        assert_eq!(hash, head);
        assert_like_git(&served.bare, &head, &link);
        // Only the paths that changed were written: from the current worktree's commit for a
        // clone (4 files, the new directory, 1 removal), from the reused one's (two pushes'
        // worth) for a reuse.
        if made == "clone" {
            assert_eq!(changed, 6, "{err}");
        } else {
            assert!((7..=14).contains(&changed), "round {round}: {changed} changes: {err}");
            // The reused worktree kept the inodes of every file no push touched.
            let now = inodes(&link);
            let kept = spare_inodes.as_ref().expect("a spare").iter().filter(|(p, id)| now.get(*p) == Some(id)).count();
            assert!(kept >= 300 - 12, "round {round}: only {kept} files kept their inode");
        }
        // The worktree LINK left is still complete and clean (readers in it are not disturbed).
        let old = previous.last().expect("previous").clone();
        let old_path = root.join(".worktrees").join(&old);
        assert_like_git(&served.bare, &old, &old_path);
        // .worktrees holds the current worktree and the one a next sync reuses, nothing else.
        let mut names: Vec<String> = std::fs::read_dir(root.join(".worktrees"))
            .expect("worktrees")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut want = vec![hash.clone(), old.clone()];
        want.sort();
        assert_eq!(names, want, "round {round}");
        previous.push(hash);
    }
}

#[test]
fn random_histories_judged_by_git_checkout() {
    // file ↔ directory, symlinks, executables, deletions: every commit of a random history,
    // synced in order and then jumping back, equals git's checkout of it.
    let dir = tempfile::tempdir().expect("tempdir");
    let bare = dir.path().join("repo.git");
    std::fs::create_dir(&bare).expect("mkdir");
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let trees: Vec<Model> = history::random_history(32, 10);
    let commits = history::import(&bare, "main", &trees);
    let root = dir.path().join("root");
    let url = format!("file://{}", bare.display());
    let mut order: Vec<usize> = (0..commits.len()).collect();
    order.extend([2, 9, 0, 5]);
    for (step, i) in order.into_iter().enumerate() {
        git(&bare, &["update-ref", "refs/heads/main", &commits[i]]);
        let err = exits(&["--repo", &url, "--root", s(&root), "--link", "t", "--one-time", "--depth", "0"], 0);
        let (hash, _) = link_of(&root.join("t"));
        assert_eq!(hash, commits[i], "step {step}: {err}");
        assert_like_git(&bare, &commits[i], &root.join("t"));
    }
}

#[test]
fn a_root_that_git_sync_would_wipe_is_wiped_and_made_again() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let head = git(&served.bare, &["rev-parse", "main"]);
    // A root inside another repository (not its own top level).
    let outer = served.dir.path().join("outer");
    std::fs::create_dir(&outer).expect("mkdir");
    git(&outer, &["init", "-q"]);
    let root = outer.join("root");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("stray"), "x").expect("stray");
    exits(&["--repo", &served.url, "--root", s(&root), "--link", "l", "--one-time"], 0);
    assert_eq!(git(&root, &["rev-parse", "--show-toplevel"]), s(&root));
    assert!(!root.join("stray").exists(), "the root was emptied first, as git-sync does");
    assert_like_git(&served.bare, &head, &root.join("l"));
    // A corrupt repository (its objects gone) is wiped and fetched again.
    std::fs::remove_dir_all(root.join(".git/objects")).expect("rm objects");
    std::fs::create_dir(root.join(".git/objects")).expect("mkdir");
    exits(&["--repo", &served.url, "--root", s(&root), "--link", "l", "--one-time"], 0);
    assert_like_git(&served.bare, &head, &root.join("l"));
    // A root given through a symlink and with `..`: resolved, the link still relative.
    let alias = served.dir.path().join("alias");
    std::os::unix::fs::symlink(&outer, &alias).expect("symlink");
    let via = format!("{}/../alias/root", alias.display());
    exits(&["--repo", &served.url, "--root", &via, "--link", "l", "--one-time"], 0);
    assert_eq!(link_of(&root.join("l")).1, Path::new(".worktrees").join(&head));
    // LINK replaced by a directory in a usable root: an error that names it; nothing removed.
    std::fs::remove_file(root.join("l")).expect("rm link");
    std::fs::create_dir(root.join("l")).expect("mkdir");
    std::fs::write(root.join("l/keep"), "x").expect("keep");
    let err = exits(&["--repo", &served.url, "--root", s(&root), "--link", "l", "--one-time"], 1);
    assert!(err.contains("is not a symlink"), "{err}");
    assert!(root.join("l/keep").exists());
}

#[test]
fn flags_environment_and_exit_codes_as_git_sync() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let root = served.dir.path().join("root");
    // The environment names, new and old; the legacy one wins over GITSYNC_*, the flag over both.
    let o = git_sync()
        .env("GITSYNC_REPO", "git://127.0.0.1:1/nothing")
        .env("GIT_SYNC_REPO", &served.url)
        .env("GITSYNC_ROOT", &root)
        .env("GITSYNC_ONE_TIME", "true")
        .env("GITSYNC_LINK", "from-env")
        .args(["--link", "from-flag"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("env $GIT_SYNC_REPO has been deprecated, use $GITSYNC_REPO instead"), "{err}");
    assert!(root.join("from-flag").exists() && !root.join("from-env").exists());
    // A usage error is exit 2, a bad configuration or environment value exit 1.
    assert!(exits(&["--nope"], 2).contains("unknown flag: --nope"));
    assert!(exits(&["--repo", "x"], 1).contains("required flag: --root must be specified"));
    assert!(
        exits(&["--root", "r", "--repo", "x", "--depth", "-1"], 1)
            .contains("--depth must be greater than or equal to 0")
    );
    let filter = exits(&["--root", "r", "--repo", "x", "--filter", "blob:none"], 1);
    assert!(
        filter.contains("--filter is not supported by treesync git-sync") && filter.contains("leave --filter out"),
        "{filter}"
    );
    let o = git_sync().env("GITSYNC_PERIOD", "10").arg("--help").output().expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("FATAL: invalid duration env GITSYNC_PERIOD=\"10\""));
    // --help teaches every flag with its environment name.
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for f in ["--repo", "--stale-worktree-timeout", "--exechook-command", "GITSYNC_SYNC_ON_SIGNAL", "--http-metrics"] {
        assert!(help.contains(f), "{f} missing from --help");
    }
    // The same program under the name git-sync (an image's entrypoint, a symlink).
    let bin_dir = tempfile::tempdir().expect("tempdir");
    let alias = bin_dir.path().join("git-sync");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_treesync"), &alias).expect("symlink");
    let root2 = served.dir.path().join("root2");
    let o = Command::new(&alias)
        .args(["--repo", &served.url, "--root", s(&root2), "--one-time"])
        .output()
        .expect("runs as git-sync");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_like_git(&served.bare, &git(&served.bare, &["rev-parse", "main"]), &root2.join("site.git"));
}

#[test]
fn failures_count_to_max_failures_and_write_the_error_file() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let root = served.dir.path().join("root");
    // The default --max-failures 0 gives up on the first failure; 2 on the second.
    let err = exits(
        &["--repo", &served.url, "--ref", "nope", "--root", s(&root), "--one-time", "--error-file", "err.json"],
        1,
    );
    assert_eq!(lines_with(&err, "too many failures, aborting").len(), 1, "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("err.json")).expect("error file")).expect("json");
    assert_eq!(doc["Msg"], "too many failures, aborting");
    assert!(doc["Err"].as_str().expect("Err").contains("git fetch"), "{doc}");
    let err = exits(
        &[
            "--repo",
            &served.url,
            "--ref",
            "nope",
            "--root",
            s(&root),
            "--max-failures",
            "2",
            "--period",
            "10ms",
            "--one-time",
        ],
        1,
    );
    assert_eq!(lines_with(&err, "error syncing repo, will retry").len(), 1, "{err}");
    assert_eq!(lines_with(&err, "too many failures, aborting").len(), 1, "{err}");
    // Before the first success --init-max-failures rules, with --init-period between tries.
    let err = exits(
        &[
            "--repo",
            &served.url,
            "--ref",
            "nope",
            "--root",
            s(&root),
            "--max-failures",
            "-1",
            "--init-max-failures",
            "3",
            "--init-period",
            "10ms",
            "--one-time",
        ],
        1,
    );
    assert_eq!(lines_with(&err, "error syncing repo, will retry").len(), 2, "{err}");
    // --sync-timeout: git killed at the deadline, the attempt a failure that says so.
    let err = exits(&["--repo", &served.url, "--root", s(&root), "--sync-timeout", "10ms", "--one-time"], 1);
    let last = lines_with(&err, "too many failures, aborting");
    assert!(last[0]["error"].as_str().expect("error").contains("--sync-timeout (10ms)"), "{err}");
    // A success removes the error file.
    exits(&["--repo", &served.url, "--root", s(&root), "--one-time", "--error-file", "err.json"], 0);
    assert!(!root.join("err.json").exists());
}

/// The calls of `strace -f -y` output on paths or descriptors under `/.worktrees/`, by name.
fn calls_under_worktrees(log: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(log).expect("strace log");
    let mut c = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains("/.worktrees/")) {
        let rest = line.split_once(' ').map_or(line, |(_, r)| r).trim_start();
        if rest.starts_with('<') || rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        if let Some((name, _)) = rest.split_once('(') {
            *c.entry(name.to_string()).or_default() += 1;
        }
    }
    c
}

/// From the third commit on, a sync's work on the worktrees grows with the changed paths, not
/// the tree: `strace -f -y` of a sync of K = 4 changed paths on N = 2,000 files counts the calls
/// on `.worktrees` (no hard link, a few per changed path, far below N); the second sync, a
/// copy of the current worktree, makes N hard links (so the count would see a copy).
#[test]
fn a_sync_after_the_second_costs_the_diff_in_syscalls() {
    const N: usize = 2000;
    let strace = treesync_testkit::missing::require_program("strace", "strace");
    let files: Vec<(String, String)> =
        (0..N).map(|i| (format!("d{}/e{}/f{i}", i % 20, i % 7), format!("{i}\n"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let served = Served::new(&refs);
    let root = served.dir.path().join("root");
    let args = ["git-sync", "--repo", &served.url, "--root", s(&root), "--one-time"];
    let traced = |name: &str| -> BTreeMap<String, u64> {
        let log = served.dir.path().join(name);
        let o = Command::new(&strace)
            .args(["-f", "-y", "-qq", "-s", "256", "-o"])
            .arg(&log)
            .arg(env!("CARGO_BIN_EXE_treesync"))
            .env_remove("LD_LIBRARY_PATH")
            .args(args)
            .output()
            .expect("strace runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        calls_under_worktrees(&log)
    };
    exits(&args[1..], 0);
    for round in 0..2 {
        served.commit(&[
            ("d1/e1/f1", &format!("r{round}\n")),
            ("d2/e2/f2", &format!("r{round}\n")),
            (&format!("new{round}"), "n\n"),
            ("d3/e3/f3", &format!("r{round}\n")),
        ]);
        served.push(&["main"]);
        let c = traced(&format!("strace{round}.txt"));
        let n = |names: &[&str]| names.iter().map(|s| c.get(*s).copied().unwrap_or(0)).sum::<u64>();
        let all: u64 = c.values().sum();
        let head = git(&served.bare, &["rev-parse", "main"]);
        assert_like_git(&served.bare, &head, &root.join("site.git"));
        eprintln!("sync {} on N={N}: {all} calls under .worktrees: {c:?}", round + 2);
        if round == 0 {
            assert!(n(&["linkat", "link"]) >= N as u64, "the second sync copies the current worktree: {c:?}");
        } else {
            // K = 4 from the reused worktree's commit (two pushes: 8 paths at most).
            assert_eq!(n(&["linkat", "link"]), 0, "{c:?}");
            assert!(n(&["openat", "openat2", "open"]) <= 80, "{c:?}");
            assert!(n(&["newfstatat", "statx", "fstat", "lstat", "stat"]) <= 80, "{c:?}");
            assert!(n(&["getdents64"]) <= 20, "{c:?}");
            assert!(all < (N / 4) as u64, "{all} calls under .worktrees for K ≤ 8 on N = {N}: {c:?}");
        }
    }
}

#[test]
fn planted_symlinks_in_the_root_send_nothing_outside() {
    let served = Served::new(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
    let root = served.dir.path().join("root");
    let outside = served.dir.path().join("outside");
    std::fs::create_dir_all(outside.join(".treesync")).expect("mkdir");
    std::fs::write(outside.join(".treesync/state"), "{}").expect("bait");
    std::fs::write(outside.join("keep"), "keep").expect("keep");
    let snapshot = || tree::read_dir(&outside);
    let before = snapshot();
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time"];
    exits(&args, 0);
    served.commit(&[("c.txt", "c\n")]);
    served.push(&["main"]);
    exits(&args, 0);
    // The retired worktree (the one a next sync reuses) swapped for a link to another directory.
    let (current, _) = link_of(&root.join("site.git"));
    let retired = std::fs::read_dir(root.join(".worktrees"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .find(|n| *n != current)
        .expect("a retired worktree");
    std::fs::remove_dir_all(root.join(".worktrees").join(&retired)).expect("rm");
    std::os::unix::fs::symlink(&outside, root.join(".worktrees").join(&retired)).expect("plant");
    let next = served.commit(&[("d/b.txt", "changed\n")]);
    served.push(&["main"]);
    exits(&args, 0);
    assert_like_git(&served.bare, &next, &root.join("site.git"));
    assert_eq!(snapshot(), before, "nothing changed outside the root");
    assert!(std::fs::symlink_metadata(root.join(".worktrees").join(&retired)).is_err(), "the planted link is removed");
    // .worktrees itself swapped for a link: refused, naming it, nothing written there.
    let worktrees = root.join(".worktrees");
    std::fs::rename(&worktrees, served.dir.path().join("moved")).expect("move");
    std::os::unix::fs::symlink(&outside, &worktrees).expect("plant");
    served.commit(&[("e.txt", "e\n")]);
    served.push(&["main"]);
    let err = exits(&args, 1);
    assert!(err.contains("not a directory (a symlink or a file)"), "{err}");
    assert_eq!(snapshot(), before, "nothing changed outside the root");
}

/// A kill inside the write of a worktree's index or HEAD (their `.lock` made, not yet renamed
/// over them) leaves the lock in `.git/worktrees/HASH`. No git works in a worktree LINK does
/// not name yet, so the next run finishes that worktree (and a later one reuses it) instead of
/// failing on the lock on every try.
#[test]
fn a_lock_left_by_a_killed_index_write_does_not_stop_later_syncs() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let root = served.dir.path().join("root");
    let link = root.join("l");
    let args = ["--repo", &served.url, "--root", s(&root), "--link", "l", "--one-time"];
    exits(&args, 0);
    let (first, _) = link_of(&link);
    let second = served.commit(&[("b.txt", "b\n")]);
    served.push(&["main"]);
    exits(&args, 0);
    // What the kill leaves: LINK still on the first commit, the second's worktree written, and
    // the locks of its git files.
    std::os::unix::fs::symlink(Path::new(".worktrees").join(&first), root.join("l.new")).expect("link");
    std::fs::rename(root.join("l.new"), &link).expect("LINK back on the first commit");
    let locks = |hash: &str| {
        for lock in ["index.lock", "HEAD.lock"] {
            std::fs::write(root.join(".git/worktrees").join(hash).join(lock), "").expect("lock");
        }
    };
    locks(&second);
    exits(&args, 0);
    assert_eq!(link_of(&link).0, second);
    assert_like_git(&served.bare, &second, &link);
    // The retired worktree, with such locks, reused for the next commit.
    locks(&first);
    let third = served.commit(&[("c.txt", "c\n")]);
    served.push(&["main"]);
    exits(&args, 0);
    assert_eq!(link_of(&link).0, third);
    assert_like_git(&served.bare, &third, &link);
}

/// LINK's worktree deleted (by hand, a cleaner), or only its git files: a rerun at the same
/// commit makes it again as a git worktree, not as the files alone without `.git` (where git
/// would find the root's repository instead).
#[test]
fn a_current_worktree_that_lost_its_git_files_is_made_whole_again() {
    let served = Served::new(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
    let root = served.dir.path().join("root");
    let link = root.join("l");
    let args = ["--repo", &served.url, "--root", s(&root), "--link", "l", "--one-time"];
    exits(&args, 0);
    let (hash, _) = link_of(&link);
    std::fs::remove_dir_all(root.join(".worktrees").join(&hash)).expect("rm the worktree");
    exits(&args, 0);
    assert_eq!(link_of(&link).0, hash);
    assert_like_git(&served.bare, &hash, &link);
    std::fs::remove_file(link.join(".git")).expect("rm .git");
    std::fs::remove_dir_all(root.join(".git/worktrees").join(&hash)).expect("rm its administrative directory");
    exits(&args, 0);
    assert_like_git(&served.bare, &hash, &link);
}

/// No verify ever reads a git-sync worktree's `.treesync/index-delta` (the stat data each sync
/// appends for the next verify), and the two worktrees a root keeps are reused in turn for
/// ever: the delta must not grow with every sync (it held the whole first checkout, then each
/// sync's files on top).
#[test]
fn worktrees_reused_in_turn_keep_no_growing_index_delta() {
    let files: Vec<(String, String)> = (0..200).map(|i| (format!("d/f{i}"), format!("{i}\n"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let served = Served::new(&refs);
    let root = served.dir.path().join("root");
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time"];
    for round in 0..4 {
        if round > 0 {
            served.commit(&[(&format!("d/f{round}"), &format!("round {round}\n"))]);
            served.push(&["main"]);
        }
        exits(&args, 0);
        for e in std::fs::read_dir(root.join(".worktrees")).expect("worktrees") {
            let delta = e.expect("entry").path().join(".treesync/index-delta");
            let len = std::fs::metadata(&delta).map(|m| m.len()).unwrap_or(0);
            assert_eq!(len, 0, "round {round}: {} holds {len} bytes", delta.display());
        }
    }
    assert_like_git(&served.bare, &git(&served.bare, &["rev-parse", "main"]), &root.join("site.git"));
}
