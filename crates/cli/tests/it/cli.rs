//! The `treesync` binary, end to end: exit codes, messages, hostile trees, syscall counts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::treesync;
use treesync_testkit::assert_target_is;
use treesync_testkit::cli::s;
use treesync_testkit::cli::stderr;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, Entry, Model, file};
use treesync_testkit::{BareRepo, git, git_stdin, raw_tree, tree};

fn sync(repo: &Path, rev: &str, target: &Path) -> Output {
    treesync(&["sync", "--repo", s(repo), "--ref", rev, "--target", s(target)])
}

fn small_repo() -> (BareRepo, Vec<String>) {
    let bare = BareRepo::new();
    let trees = history::random_history(42, 3);
    let commits = history::import(&bare.path, "main", &trees);
    (bare, commits)
}

/// One line on stderr that starts with `treesync: error:`, plus at most a hint line or two.
fn assert_clear_error(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert!(err.starts_with("treesync: error: "), "stderr: {err}");
    assert!(err.contains(needle), "stderr should mention {needle:?}: {err}");
    assert!(err.lines().count() <= 3, "error should be short: {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

#[test]
fn sync_then_status_then_noop() {
    let (bare, commits) = small_repo();
    let (_dir, target) = temp_target("t");
    let o = sync(&bare.path, "main~2", &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_target_is(&bare, &commits[0], &target);
    let o = sync(&bare.path, "main", &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_target_is(&bare, &commits[2], &target);

    let o = treesync(&["status", "--target", s(&target), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status --json is JSON");
    assert_eq!(v["state"]["synced"]["commit"], commits[2].as_str());
    assert_eq!(v["state"]["in_progress"], serde_json::Value::Null);

    let o = treesync(&["sync", "--repo", s(&bare.path), "--ref", "main", "--target", s(&target), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("sync --json is JSON");
    assert_eq!(v["applied"]["write"], 0);
    assert_eq!(v["state_writes"], 0, "a sync to the commit already there writes nothing");
}

#[test]
fn plan_json_lists_phases_and_changes_nothing() {
    let (bare, _) = small_repo();
    let (_dir, target) = temp_target("t");
    let o = treesync(&["plan", "--repo", s(&bare.path), "--ref", "main", "--target", s(&target), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("plan --json is JSON");
    let phases = v["plan"]["phases"].as_array().expect("phases");
    assert!(phases.iter().any(|p| p["name"] == "write files"));
    assert!(v["plan"]["counts"]["write"].as_u64().expect("count") > 0);
    assert!(!target.exists(), "plan must not create the target");
    let o = treesync(&["sync", "--dry-run", "--repo", s(&bare.path), "--ref", "main", "--target", s(&target)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("would sync"));
    assert!(!target.exists(), "--dry-run must not create the target");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let (bare, _) = small_repo();
    let (dir, target) = temp_target("t");

    let o = sync(&bare.path, "no-such-branch", &target);
    assert_clear_error(&o, 2, "cannot resolve revision \"no-such-branch\"");
    assert!(!target.exists(), "a bad revision must not create the target");

    let o = sync(&dir.path().join("missing.git"), "main", &target);
    assert_clear_error(&o, 2, "cannot open git repository");

    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let o = sync(&bare.path, "main", &file);
    assert_clear_error(&o, 2, "not a directory");

    let o = sync(&bare.path, "main", &dir.path().join("no/parent/here"));
    assert_clear_error(&o, 2, "cannot create target directory");

    std::fs::create_dir(&target).expect("mkdir");
    std::fs::write(target.join("precious.txt"), "mine").expect("write");
    let o = sync(&bare.path, "main", &target);
    assert_clear_error(&o, 4, "--force");
    assert_eq!(std::fs::read_to_string(target.join("precious.txt")).expect("kept"), "mine");
}

#[test]
fn unwritable_target_is_a_clear_error() {
    let (bare, _) = small_repo();
    let (_dir, ro) = temp_target("ro");
    std::fs::create_dir(&ro).expect("mkdir");
    // Root ignores permission bits, so use a read-only mount.
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"]).arg(&ro).status();
    if !mounted.is_ok_and(|s| s.success()) {
        treesync_testkit::missing::Missing::new("root (the test mounts a read-only tmpfs)", "run the tests as root")
            .fail();
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _guard = Unmount(ro.clone());
    let o = sync(&bare.path, "main", &ro);
    assert_clear_error(&o, 2, "read-only");
}

fn commit_tree(repo: &Path, tree: &str) -> String {
    git(repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree, "-m", "hostile"])
}

#[test]
fn hostile_tree_entries_are_refused_before_any_write() {
    let bare = BareRepo::new();
    let blob = git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"evil\n");
    let good = raw_tree(&bare.path, &[("100644", b"ok.txt", &blob)]);
    let sub = raw_tree(&bare.path, &[("100644", b"config", &blob)]);
    for name in [&b".."[..], b".", b".git", b".GIT", b".git.", b"GIT~1", b".gi\xe2\x80\x8ct", b".treesync"] {
        // The hostile name as a directory (so `name/config` would be written) and as a file.
        for (mode, id) in [("40000", sub.as_str()), ("100644", blob.as_str())] {
            let (dir, target) = temp_target("t");
            let tree =
                raw_tree(&bare.path, &[("100644", b"a-first.txt", &blob), ("40000", b"dir", &good), (mode, name, id)]);
            let commit = commit_tree(&bare.path, &tree);
            let o = sync(&bare.path, &commit, &target);
            assert_clear_error(&o, 4, "refusing to sync");
            assert!(!target.exists(), "{name:?}: a refused sync writes nothing, not even the target or its lock");
            let beside: Vec<_> =
                std::fs::read_dir(dir.path()).expect("ls").filter_map(Result::ok).map(|e| e.file_name()).collect();
            assert!(beside.is_empty(), "nothing may appear beside the target: {beside:?}");
        }
    }
}

#[test]
fn a_tree_naming_one_entry_twice_is_refused() {
    // `a` as a symlink to the outside and `a` as a directory holding `b`, in the same tree.
    let bare = BareRepo::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    let link = git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], s(&outside).as_bytes());
    let blob = git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"evil\n");
    let sub = raw_tree(&bare.path, &[("100644", b"b", &blob)]);
    let tree = raw_tree(&bare.path, &[("120000", b"a", &link), ("40000", b"a", &sub)]);
    let commit = commit_tree(&bare.path, &tree);
    let o = sync(&bare.path, &commit, &dir.path().join("t"));
    assert_clear_error(&o, 4, "lists this name twice");
    assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0);
}

#[test]
fn symlink_replaced_by_directory_is_like_git_and_writes_nothing_outside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    let a = Model::of(&[("keep", "k")]).with([("a", Entry::Link { target: outside.to_string_lossy().into_owned() })]);
    let b = a.with([("a/b", file("inside\n"))]);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[a, b]);
    let target = dir.path().join("t");
    for c in [&commits[0], &commits[1], &commits[0], &commits[1]] {
        let o = sync(&bare.path, c, &target);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_target_is(&bare, c, &target);
    }
    assert!(std::fs::symlink_metadata(target.join("a")).expect("a").is_dir());
    assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0, "nothing written through the old symlink");
}

#[test]
fn interrupted_sync_is_reported_by_status_and_finished_by_sync() {
    use std::sync::atomic::AtomicBool;
    use treesync_core::{policy::Fail, sync as sy};
    let (bare, commits) = small_repo();
    let (_dir, target) = temp_target("t");
    let repo = treesync_core::Repo::open(&bare.path).expect("open");
    let backend = treesync_backend_local::LocalBackend::new(&target, Default::default());
    let failing = Fail::after(backend, 5);
    let options = sy::Options { backend_name: "local".into(), ..Default::default() };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let result = rt.block_on(sy::sync(&repo, &commits[2], &failing, &options, &|_| {}, &AtomicBool::new(false)));
    assert!(result.is_err());

    let o = treesync(&["status", "--target", s(&target)]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("INTERRUPTED") && out.contains(&commits[2]), "{out}");

    let o = sync(&bare.path, "main", &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("finished an interrupted sync"));
    assert_target_is(&bare, &commits[2], &target);
}

#[test]
fn second_concurrent_sync_fails_fast_naming_the_holder() {
    use treesync_core::Backend;
    let (bare, _) = small_repo();
    let (_dir, target) = temp_target("t");
    assert!(sync(&bare.path, "main~1", &target).status.success());
    let backend = treesync_backend_local::LocalBackend::new(&target, Default::default());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let guard = rt
        .block_on(backend.lock(&treesync_core::state::Holder { pid: 777, host: "buildhost".into(), started: 1 }))
        .expect("lock");
    let o = sync(&bare.path, "main", &target);
    assert_clear_error(&o, 3, "pid 777 on buildhost");
    drop(guard);
    assert!(sync(&bare.path, "main", &target).status.success());
}

/// `treesync sync` of `rev` under `strace OPTIONS -o OUT`.
fn strace_sync(options: &[&str], out: &Path, repo: &Path, rev: &str, target: &Path) -> Output {
    Command::new("strace")
        .args(options)
        .arg("-o")
        .arg(out)
        .arg(env!("CARGO_BIN_EXE_treesync"))
        // cargo's library path makes the dynamic loader probe dozens of directories at start.
        .env_remove("LD_LIBRARY_PATH")
        .args(["sync", "--repo", s(repo), "--ref", rev, "--target", s(target)])
        .output()
        .expect("strace runs")
}

/// At N=20,000 files and 14 changed paths, the CLI's stat-family syscalls (on the repository
/// and the target together) stay ≤ 100.
#[test]
fn incremental_sync_makes_few_stat_calls() {
    treesync_testkit::missing::require_program("strace", "strace");
    let base = history::wide_tree(20_000, 1);
    let (next, _) = history::change_some(&base, 10, 2, 2, 9);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[base, next]);
    git(&bare.path, &["repack", "-adq"]);
    let (dir, target) = temp_target("t");
    assert!(sync(&bare.path, &commits[0], &target).status.success());
    let summary = dir.path().join("strace.txt");
    let o = strace_sync(
        &["-f", "-c", "-e", "trace=/^(stat|lstat|fstat|newfstatat|statx|fstatat64|stat64|lstat64|fstat64)$"],
        &summary,
        &bare.path,
        &commits[1],
        &target,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&summary).expect("strace summary");
    let total: u64 = text
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .expect("strace -c prints a total line");
    assert!(total <= 100, "stat-family syscalls: {total}\n{text}");
    eprintln!("stat-family syscalls of an incremental sync at N=20,000: {total}\n{text}");
    assert_target_is(&bare, &commits[1], &target);
}

/// A sync to a directory reads the mount table once (to choose between the local and the NFS
/// backend) and makes the target's backend once: asking for the target's generations takes the
/// backend already chosen instead of choosing again (each choice read `/proc/self/mountinfo`,
/// each local backend the umask from `/proc/self/status`).
#[test]
fn a_sync_reads_the_mount_table_once() {
    treesync_testkit::missing::require_program("strace", "strace");
    let (bare, commits) = small_repo();
    let (dir, target) = temp_target("t");
    assert!(sync(&bare.path, &commits[0], &target).status.success());
    let trace = dir.path().join("strace.txt");
    let o = strace_sync(&["-f", "-e", "trace=open,openat,openat2"], &trace, &bare.path, &commits[1], &target);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&trace).expect("strace output");
    let opened = |path: &str| text.lines().filter(|l| l.contains(&format!("\"{path}\""))).count();
    assert_eq!(opened("/proc/self/mountinfo"), 1, "{text}");
    assert_eq!(opened("/proc/self/status"), 1, "{text}");
    assert_target_is(&bare, &commits[1], &target);
}

/// Deep trees: 1,000 levels sync like git archive (the walk runs on a large stack); 3,000
/// levels (a path beyond PATH_MAX) and 10,000 levels (deeper than git's core.maxTreeDepth) are
/// refused before any write instead of overflowing the stack.
#[test]
fn deep_trees_sync_or_are_refused_clearly() {
    let bare = BareRepo::new();
    let chain = |levels: usize, content: &[u8]| {
        Model::default().with([(format!("{}/leaf", vec!["d"; levels].join("/")), file(content))])
    };
    let commits =
        history::import(&bare.path, "main", &[chain(1000, b"deep\n"), chain(3000, b"x\n"), chain(10_000, b"x\n")]);
    let (_dir, target) = temp_target("t");
    let o = sync(&bare.path, &commits[0], &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_target_is(&bare, &commits[0], &target);
    let o = sync(&bare.path, &commits[1], &target);
    assert_clear_error(&o, 4, "PATH_MAX");
    assert_target_is(&bare, &commits[0], &target);
    let o = sync(&bare.path, &commits[2], &target);
    assert_clear_error(&o, 4, "deeper than 4096 levels");
    assert_target_is(&bare, &commits[0], &target);
}

/// A corrupt object database: a missing blob and a tree entry whose object is a tree, not a
/// blob. The error names the object and the path, nothing is written, the target keeps its
/// commit, and once the repository is repaired the next sync finishes.
#[test]
fn corrupt_objects_are_named_and_nothing_is_written() {
    let bare = BareRepo::new();
    let a = Model::of(&[("keep", "keep\n")]);
    let b = a.with([("dir/new", file("a blob that will vanish\n"))]);
    let commits = history::import(&bare.path, "main", &[a, b]);
    let (_dir, target) = temp_target("t");
    assert!(sync(&bare.path, &commits[0], &target).status.success());

    // Rebuild the repository without that blob: keep everything else.
    let blob = git(&bare.path, &["rev-parse", &format!("{}:dir/new", commits[1])]);
    let broken = BareRepo::new();
    let objects = git(&bare.path, &["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"]);
    let keep: String = objects.lines().filter(|o| *o != blob).map(|o| format!("{o}\n")).collect();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && printf '%s' \"$KEEP\" | git pack-objects --stdout | git -C {} index-pack --stdin >/dev/null",
            bare.path.display(),
            broken.path.display()
        ))
        .env("KEEP", &keep)
        .output()
        .expect("repack");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    git(&broken.path, &["update-ref", "refs/heads/main", &commits[1]]);

    let o = sync(&broken.path, "main", &target);
    assert_clear_error(&o, 2, &blob);
    assert!(stderr(&o).contains("dir/new"), "the path is named: {}", stderr(&o));
    assert_target_is(&bare, &commits[0], &target);
    let st = treesync(&["status", "--target", s(&target)]);
    assert!(!String::from_utf8_lossy(&st.stdout).contains("INTERRUPTED"), "planning failed before any write");

    // A tree entry claiming to be a file but pointing at a tree.
    let tree_as_blob = raw_tree(
        &broken.path,
        &[("100644", b"keep", &git(&broken.path, &["rev-parse", &format!("{}^{{tree}}", commits[0])]))],
    );
    let c = commit_tree(&broken.path, &tree_as_blob);
    let o = sync(&broken.path, &c, &target);
    assert_clear_error(&o, 2, "not a blob");
    assert_target_is(&bare, &commits[0], &target);

    // Repaired (the blob is back): the next sync finishes.
    git_stdin(&broken.path, &["hash-object", "-w", "--stdin"], b"a blob that will vanish\n");
    let o = sync(&broken.path, "main", &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_target_is(&bare, &commits[1], &target);
}

/// Names git accepts but that trip naive tools — newlines, tabs, escapes, leading dashes, spaces —
/// sync like git archive; a `.gitmodules` symlink (CVE-2018-11235 territory) is refused.
#[test]
fn odd_names_sync_like_git_and_gitmodules_symlinks_are_refused() {
    let bare = BareRepo::new();
    let names = ["new\nline", "tab\there", "esc\u{1b}[31m", "-rf", " spaced ", "back\\slash", "quote\"d", "ünïcødé"];
    let m = Model::default().with(names.map(|name| (format!("odd/{name}"), file(name))));
    let commits = history::import(&bare.path, "main", &[m]);
    let (dir, target) = temp_target("t");
    let o = sync(&bare.path, &commits[0], &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_target_is(&bare, &commits[0], &target);

    let link = git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"../../outside");
    let blob = git_stdin(&bare.path, &["hash-object", "-w", "--stdin"], b"x\n");
    let tree = raw_tree(&bare.path, &[("120000", b".gitmodules", &link), ("100644", b"z", &blob)]);
    let c = commit_tree(&bare.path, &tree);
    let o = sync(&bare.path, &c, &dir.path().join("t2"));
    assert_clear_error(&o, 4, ".gitmodules");
}

/// A truncated pack file (a disk that filled up during `git gc`, a copy cut short): the sync
/// stops with one clear error and exit 2, the target is left at its commit or journaled as
/// interrupted, and once the pack is whole again the next sync finishes like git archive.
#[test]
fn a_truncated_pack_is_a_clear_error_and_the_repaired_repository_syncs() {
    let bare = BareRepo::new();
    let a = Model::of(&[("keep", "keep\n")]);
    // Incompressible-ish content, so the pack's tail holds these blobs.
    let noise = |i: u32| -> Vec<u8> { (0..4000u32).map(|j| ((j * 7919 + i * 104_729) % 251) as u8).collect() };
    let b = a.with((0..40).map(|i| (format!("data/f{i:02}.bin"), file(noise(i)))));
    let commits = history::import(&bare.path, "main", &[a, b]);
    git(&bare.path, &["repack", "-adq"]);
    let pack_dir = bare.path.join("objects/pack");
    let pack = std::fs::read_dir(&pack_dir)
        .expect("pack dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .expect("a pack");
    let whole = std::fs::read(&pack).expect("read pack");

    let (_dir, target) = temp_target("t");
    assert!(sync(&bare.path, &commits[0], &target).status.success());

    // What git archive says, read while the pack is whole (git cannot read it either after).
    let expected_a = tempfile::tempdir().expect("tempdir");
    bare.archive(&commits[0], &expected_a.path().join("x"));
    let expected_a = tree::read_dir(&expected_a.path().join("x"));

    // Cut the pack to 60%: the index still lists every object.
    std::fs::write(&pack, &whole[..whole.len() * 6 / 10]).expect("truncate");
    let o = sync(&bare.path, &commits[1], &target);
    assert_eq!(o.status.code(), Some(2), "exit 2: {}", stderr(&o));
    let err = stderr(&o);
    assert!(err.lines().count() <= 3 && err.starts_with("treesync: error:"), "one clear error: {err}");
    let st = String::from_utf8_lossy(&treesync(&["status", "--target", s(&target)]).stdout).into_owned();
    if !st.contains("INTERRUPTED") {
        assert!(tree::diff(&expected_a, &tree::read_dir(&target)).is_none(), "nothing written: {err}");
    }
    eprintln!("error: {err}\nstatus: {st}");

    // The pack is whole again: the next sync finishes the job.
    std::fs::write(&pack, &whole).expect("restore");
    let o = sync(&bare.path, &commits[1], &target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_target_is(&bare, &commits[1], &target);
}

/// `--write-jobs` is read by the library's one parser (`treesync::WriteJobs::from_str`), and
/// the help of `--jobs` and `--write-jobs` states the rule the facade applies to the two.
#[test]
fn write_jobs_uses_the_librarys_parser_and_the_help_states_the_rule() {
    let (dir, target) = temp_target("t");
    for bad in ["0", "many", "-1"] {
        let o = treesync(&["sync", "--repo", s(dir.path()), "--target", s(&target), &format!("--write-jobs={bad}")]);
        let message = bad.parse::<treesync::WriteJobs>().expect_err("refused by the library");
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(&message), "{bad:?}: the library's message: {}", stderr(&o));
    }
    let help = String::from_utf8(treesync(&["sync", "--help"]).stdout)
        .expect("utf-8")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains("with `--write-jobs auto` it is the ceiling the adaptive budget grows to"), "{help}");
    assert!(help.contains("a fixed `--write-jobs` other than N is refused"), "{help}");
    assert!(help.contains("up to `--jobs N` when given. A number must equal `--jobs` when both are given"), "{help}");
}

/// Issue 29: revision errors leaked the parser's internals (`delegate.traverse(NthAncestor(999))
/// failed, input="~999"`, "couldn't parse revision" for an id that is not there). They say what
/// is wrong in words now.
#[test]
fn revision_errors_say_what_is_wrong_without_the_parsers_internals() {
    let (bare, commits) = small_repo();
    let (_dir, t) = temp_target("t");
    let missing = "0123456789abcdef0123456789abcdef01234567";
    for (rev, says) in [
        (format!("{}~999", commits[0]), "ancestor number 999 is out of range"),
        (missing.to_string(), "no object whose id starts with 0123456789abcdef"),
        ("main^{tree}~1".to_string(), "it leads to a tree"),
    ] {
        let o = sync(&bare.path, &rev, &t);
        assert_clear_error(&o, 2, says);
        let err = stderr(&o);
        for internal in ["delegate", "NthAncestor", "input=", "couldn't parse revision"] {
            assert!(!err.contains(internal), "{rev}: {err}");
        }
    }
    assert!(!t.exists(), "nothing was written");
}
