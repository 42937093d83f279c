//! Hostile shapes of repositories, through the `treesync` binary: a chain of 100,000 nested
//! trees (a 7 MB pack) and a tree bomb (a few KB of trees whose two entries per level are the
//! same subtree: 2^24 files). Both are refused (exit 4) with a clear message before anything
//! is written, quickly, and with a peak RSS under 100 MiB measured by the kernel (`wait4`).
//! A regression must fail the test, not take the machine down: the child's address space is
//! capped at 2 GiB.
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::{BareRepo, git, pack};

/// The bound on the peak RSS of a refusal.
const MAX_RSS_MIB: u64 = 100;

struct Run {
    code: Option<i32>,
    stderr: String,
    rss_mib: u64,
    took: Duration,
}

/// Run `treesync ARGS` with a capped address space; its exit code, stderr, peak RSS and time.
#[allow(clippy::zombie_processes)] // reaped by wait4, which also gives the peak RSS
fn run(args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_treesync"));
    cmd.args(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let cap = libc::rlimit { rlim_cur: 2 << 30, rlim_max: 2 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &cap) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("treesync runs");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; status and usage point to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4");
    let took = start.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Run { code, stderr, rss_mib: usage.ru_maxrss as u64 / 1024, took }
}

/// Refused with exit 4, one short error mentioning `needle`, fast and within the RSS bound.
fn assert_refused(what: &str, r: &Run, needle: &str) {
    eprintln!("{what}: exit {:?} in {:.2?}, peak RSS {} MiB: {}", r.code, r.took, r.rss_mib, r.stderr.trim());
    assert_eq!(r.code, Some(4), "{what}: refused with exit 4: {}", r.stderr);
    assert!(r.stderr.starts_with("treesync: error: "), "{what}: {}", r.stderr);
    assert!(r.stderr.contains(needle), "{what}: the message should say {needle:?}: {}", r.stderr);
    assert!(r.stderr.len() < 800 && r.stderr.lines().count() <= 3, "{what}: a short message: {}", r.stderr);
    assert!(r.rss_mib < MAX_RSS_MIB, "{what}: peak RSS {} MiB (bound: {MAX_RSS_MIB} MiB)", r.rss_mib);
    assert!(r.took < Duration::from_secs(20), "{what}: refused in {:?}", r.took);
}

/// Nothing of the tree in the target: at most the `.treesync` folder with its lock, no state.
fn assert_nothing_written(target: &Path) {
    let entries: Vec<String> = match std::fs::read_dir(target) {
        Ok(d) => d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => return, // not even created
    };
    assert!(entries.iter().all(|e| e == ".treesync"), "nothing but .treesync: {entries:?}");
    assert!(!target.join(".treesync/state").exists(), "no state was written");
}

/// Sync a one-file commit to `target`, then make its state say it holds `commit` (as if that
/// tree had been synced), so that `verify` walks `commit`'s tree.
fn pretend_synced(repo: &Path, target: &Path, commit: &str) {
    let blob = treesync_testkit::git_stdin(repo, &["hash-object", "-w", "--stdin"], b"small\n");
    let tree = treesync_testkit::raw_tree(repo, &[("100644", b"small", &blob)]);
    let small = git(repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "small"]);
    let r = run(&["sync", "--repo", s(repo), "--ref", &small, "--target", s(target)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let state_file = target.join(".treesync/state");
    let state = std::fs::read_to_string(&state_file).expect("state");
    let hostile_tree = git(repo, &["rev-parse", &format!("{commit}^{{tree}}")]);
    let state = state.replace(&small, commit).replace(&tree, &hostile_tree);
    std::fs::write(&state_file, state).expect("state written");
}

#[test]
fn a_chain_of_100000_trees_is_refused_with_bounded_memory() {
    let bare = BareRepo::new();
    let start = Instant::now();
    let commit = pack::deep_chain(&bare.path, 100_000);
    eprintln!("a chain of 100,000 trees built in {:.2?}", start.elapsed());
    let (_dir, target) = temp_target("t");
    let needle = "\"d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/…\": the tree is deeper than 4096 levels";
    for cmd in ["plan", "sync"] {
        let r = run(&[cmd, "--repo", s(&bare.path), "--ref", &commit, "--target", s(&target)]);
        assert_refused(cmd, &r, needle);
        assert_nothing_written(&target);
    }
    pretend_synced(&bare.path, &target, &commit);
    let r = run(&["verify", "--repo", s(&bare.path), "--target", s(&target)]);
    assert_refused("verify", &r, needle);
}

#[test]
fn a_tree_bomb_is_refused_while_planning_with_bounded_memory() {
    let bare = BareRepo::new();
    // 24 levels: 2^24 files in 2^25 - 2 directories, from 26 objects.
    let commit = pack::tree_bomb(&bare.path, 24);
    let (dir, target) = temp_target("t");
    let needle = "the tree needs 50331646 ops (directories, files and symlinks to create, change or remove), more than the limit of 10000000 (max_entries)";
    // With --atomic too (issue 29: it exited 2 where a plain sync exits 4), writing no home.
    for cmd in [&["plan"][..], &["sync"], &["sync", "--atomic"]] {
        let mut args = cmd.to_vec();
        args.extend(["--repo", s(&bare.path), "--ref", &commit, "--target", s(&target)]);
        let r = run(&args);
        assert_refused(&cmd.join(" "), &r, needle);
        assert!(r.stderr.contains("--max-entries N"), "the hint names the flag: {}", r.stderr);
        assert_nothing_written(&target);
        assert!(!dir.path().join(".t.treesync").exists(), "{cmd:?} made no home");
    }
    // The limits are flags, and keys of the config file.
    let r = run(&["plan", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&target), "--max-entries", "1000"]);
    assert_refused("plan --max-entries 1000", &r, "needs 50331646 ops");
    let mut args = vec!["sync", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&target)];
    args.extend(["--max-entries", "60000000", "--max-bytes", "1MiB"]);
    let r = run(&args);
    assert_refused(
        "sync --max-bytes 1MiB",
        &r,
        "the tree needs 80.0 MiB (83886080 bytes) of file content, more than the limit of 1.0 MiB (1048576 bytes) (max_bytes)",
    );
    assert_nothing_written(&target);
    let config =
        ConfigFile::new().mirror("bomb", &bare.path, &commit, &target).key("max_entries", 100).write_in(dir.path());
    let r = run(&["--config", s(&config), "sync", "bomb"]);
    assert_refused("sync MIRROR (max_entries = 100)", &r, "more than the limit of 100 (max_entries)");
    assert_nothing_written(&target);

    // A bomb small enough for the limit is planned like any tree.
    let small = pack::tree_bomb(&bare.path, 3);
    let r = run(&["sync", "--repo", s(&bare.path), "--ref", &small, "--target", s(&target), "--max-entries", "22"]);
    assert_eq!(r.code, Some(0), "2^3 files in 14 directories: {}", r.stderr);
    assert!(target.join("a/b/a/f").is_file());

    // verify walks the whole tree: it refuses a bomb before expanding it too.
    pretend_synced(&bare.path, &target, &commit);
    let r = run(&["verify", "--repo", s(&bare.path), "--target", s(&target)]);
    assert_refused("verify", &r, "more than the limit of 10000000 (max_entries)");
}

/// A commit whose tree holds `k` gitlinks to `child` (with a `.gitmodules` naming this very
/// repository, `../NAME`), in `repo`.
fn gitlinks_to(repo: &Path, child: &str, k: usize) -> String {
    let name = repo.file_name().expect("a name").to_str().expect("utf8");
    let modules: String = (0..k).map(|i| format!("[submodule \"s{i}\"]\n\tpath = s{i}\n\turl = ../{name}\n")).collect();
    let blob = treesync_testkit::git_stdin(repo, &["hash-object", "-w", "--stdin"], modules.as_bytes());
    let names: Vec<String> = (0..k).map(|i| format!("s{i}")).collect();
    let mut entries: Vec<(&str, &[u8], &str)> = vec![("100644", b".gitmodules", &blob)];
    entries.extend(names.iter().map(|n| ("160000", n.as_bytes(), child)));
    let tree = treesync_testkit::raw_tree(repo, &entries);
    git(repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "gitlinks"])
}

/// A bare repository `name` whose commits each hold `k` gitlinks to the one before, `levels`
/// deep above a one-file commit; the top commit.
fn nesting_itself(dir: &Path, name: &str, k: usize, levels: usize) -> (std::path::PathBuf, String) {
    let repo = dir.join(name);
    git(dir, &["init", "-q", "--bare", repo.to_str().expect("utf8")]);
    // The URLs name the repository itself, a local path: allowed as git would need it.
    git(&repo, &["config", "protocol.file.allow", "always"]);
    let blob = treesync_testkit::git_stdin(&repo, &["hash-object", "-w", "--stdin"], b"x\n");
    let tree = treesync_testkit::raw_tree(&repo, &[("100644", b"f", &blob)]);
    let mut commit = git(&repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "leaf"]);
    for _ in 0..levels {
        commit = gitlinks_to(&repo, &commit, k);
    }
    (repo, commit)
}

/// Issue 29: a repository whose commits hold gitlinks to earlier commits of itself (a
/// submodule bomb: 8 gitlinks a level, 8 levels, 16.8 million files) was planned superlinearly
/// and never refused quickly (`--max-entries 10^6` took over 300 s). Each distinct commit is
/// measured once now, before it is planned: refused like a plain tree bomb, in bounded memory.
#[test]
fn a_submodule_bomb_is_refused_before_it_is_planned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (repo, commit) = nesting_itself(dir.path(), "bomb.git", 8, 8);
    let target = dir.path().join("t");
    for limit in [None, Some("1000000")] {
        let mut args =
            vec!["sync", "--repo", s(&repo), "--ref", &commit, "--target", s(&target), "--recurse-submodules"];
        if let Some(l) = limit {
            args.extend(["--max-entries", l]);
        }
        let r = run(&args);
        assert_refused(&format!("a submodule bomb, --max-entries {limit:?}"), &r, "(max_entries)");
        assert_nothing_written(&target);
    }
    // A small one is filled as git would: 2 gitlinks a level, 3 levels, 8 files.
    let (small, commit) = nesting_itself(dir.path(), "small.git", 2, 3);
    let t2 = dir.path().join("t2");
    let r = run(&["sync", "--repo", s(&small), "--ref", &commit, "--target", s(&t2), "--recurse-submodules"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(t2.join("s1/s0/s1/f")).expect("filled"), "x\n");
}
