//! Git LFS from the command line, with real git and git-lfs: a sync writes what a fresh clone
//! with git-lfs smudging checks out, through a history that changes LFS objects and moves files
//! in and out of LFS (forward and back); `--lfs=pointers` writes what a clone that skips
//! smudging does, and switching back rewrites exactly the LFS files; a missing object stops the
//! sync before anything is written, with a hint whose `git lfs fetch` fixes it; a corrupt object
//! fails the sync naming its oid, and a rerun after fixing it finishes the sync. A large object
//! is streamed from the store with a bounded peak RSS (`wait4`'s `ru_maxrss`).
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::ok;
use crate::plan_ops;
use crate::treesync;
use serde_json::Value;
use treesync_testkit::cli::peak_rss_mib;
use treesync_testkit::cli::s;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::gitcheck;
use treesync_testkit::work::git;
use treesync_testkit::work::{big_file_mib, write_big_file};

/// The filter config `git lfs install` writes: what the clones git's answer comes from need.
const SMUDGE: &[(&str, &str)] = &[
    ("filter.lfs.smudge", "git-lfs smudge -- %f"),
    ("filter.lfs.process", "git-lfs filter-process"),
    ("filter.lfs.clean", "git-lfs clean -- %f"),
    ("filter.lfs.required", "true"),
];

/// What `git lfs install --skip-smudge` writes: the clone keeps the pointer files (as with
/// `GIT_LFS_SKIP_SMUDGE=1`).
const SKIP_SMUDGE: &[(&str, &str)] = &[
    ("filter.lfs.smudge", "git-lfs smudge --skip -- %f"),
    ("filter.lfs.process", "git-lfs filter-process --skip"),
    ("filter.lfs.clean", "git-lfs clean -- %f"),
    ("filter.lfs.required", "true"),
];

/// Bytes no one would mistake for text, `len` of them, different for each `seed`.
fn noise(seed: u8, len: usize) -> Vec<u8> {
    let mut x = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A work repository with git-lfs and three commits, and a bare mirror of it whose LFS store
/// `git lfs fetch --all` filled (unless `fetch` is false):
/// * `c1`: `*.bin` in LFS; `a.bin`, `big.bin` (1.5 MiB), `notptr.bin` (matches `*.bin` but was
///   committed as plain content: not a pointer), `moved.dat` and `plain.txt` plain files;
/// * `c2`: `a.bin` changed (a new object), `sub/c.bin` added;
/// * `c3`: `.gitattributes` moves `*.bin` out of LFS and `*.dat` into it (renormalized).
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    mirror: PathBuf,
    commits: [String; 3],
}

fn world(fetch: bool) -> World {
    treesync_testkit::missing::require_program("git-lfs", "git-lfs");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let work = root.join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    git(&work, &["init", "-q"]);
    git(&work, &["lfs", "install", "--local"]);
    git(&work, &["lfs", "track", "*.bin"]);
    std::fs::write(work.join("a.bin"), noise(1, 3000)).expect("write");
    std::fs::write(work.join("big.bin"), noise(2, 1536 * 1024)).expect("write");
    std::fs::write(work.join("moved.dat"), "plain for now\n").expect("write");
    std::fs::write(work.join("plain.txt"), "hello\n").expect("write");
    git(&work, &["add", "."]);
    // A file the LFS pattern matches, committed without the clean filter: not a pointer.
    std::fs::write(work.join("notptr.bin"), "not a pointer\n").expect("write");
    let blob = git(&work, &["hash-object", "-w", "--no-filters", "notptr.bin"]);
    git(&work, &["update-index", "--add", "--cacheinfo", &format!("100644,{blob},notptr.bin")]);
    git(&work, &["commit", "-qm", "c1"]);
    let c1 = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("a.bin"), noise(3, 5000)).expect("write");
    std::fs::create_dir_all(work.join("sub")).expect("mkdir");
    std::fs::write(work.join("sub/c.bin"), noise(4, 70_000)).expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "c2"]);
    let c2 = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["lfs", "untrack", "*.bin"]);
    git(&work, &["lfs", "track", "*.dat"]);
    git(&work, &["add", "--renormalize", "."]);
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "c3"]);
    let c3 = git(&work, &["rev-parse", "HEAD"]);
    let mirror = root.join("mirror.git");
    git(&root, &["clone", "-q", "--mirror", s(&work), s(&mirror)]);
    if fetch {
        git(&mirror, &["lfs", "fetch", "--all"]);
    }
    World { _dir: dir, root, mirror, commits: [c1, c2, c3] }
}

impl World {
    fn target(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// `treesync sync` of `rev` into `target`, with more `args`.
    fn sync(&self, rev: &str, target: &Path, args: &[&str]) -> Output {
        let mut all = vec!["sync", "--repo", s(&self.mirror), "--ref", rev, "--target", s(target)];
        all.extend(args);
        treesync(&all)
    }

    fn sync_ok(&self, rev: &str, target: &Path, args: &[&str]) {
        let o = self.sync(rev, target, args);
        assert!(o.status.success(), "sync {rev} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// The target equals git's clone of `rev` with `config`.
    fn assert_like_git(&self, rev: &str, target: &Path, config: &[(&str, &str)], what: &str) {
        let expected = gitcheck::expected(&self.mirror, rev, config);
        let diff = gitcheck::diff(&expected, target);
        assert!(diff.is_empty(), "{what}: the target differs from git's clone of {rev}:\n{}", diff.join("\n"));
    }

    /// [`World::sync_ok`], then [`World::assert_like_git`].
    fn sync_like_git(&self, rev: &str, target: &Path, args: &[&str], config: &[(&str, &str)], what: &str) {
        self.sync_ok(rev, target, args);
        self.assert_like_git(rev, target, config, what);
    }

    /// The path of an object in the mirror's LFS store.
    fn object(&self, oid: &str) -> PathBuf {
        self.mirror.join("lfs/objects").join(&oid[..2]).join(&oid[2..4]).join(oid)
    }
}

/// The oid of the pointer at `path` in `rev`.
fn oid_of(mirror: &Path, rev: &str, path: &str) -> String {
    let text = git(mirror, &["cat-file", "-p", &format!("{rev}:{path}")]);
    let line = text.lines().find_map(|l| l.strip_prefix("oid sha256:")).expect("a pointer");
    line.to_string()
}

#[test]
fn syncs_through_the_history_equal_clones_with_git_lfs() {
    let w = world(true);
    let target = w.target("site");
    let [c1, c2, c3] = &w.commits;
    for rev in [c1, c2, c3, c2, c1, c3] {
        w.sync_like_git(rev, &target, &[], SMUDGE, "content");
    }
    let pointer = git(&w.mirror, &["cat-file", "-p", &format!("{c3}:moved.dat")]);
    assert!(pointer.starts_with("version https://git-lfs"), "in c3 moved.dat is in LFS: {pointer}");
    assert_eq!(std::fs::read(target.join("moved.dat")).expect("moved.dat"), b"plain for now\n");
    let blob = git(&w.mirror, &["cat-file", "-s", &format!("{c3}:big.bin")]);
    assert_eq!(blob, (1536 * 1024).to_string(), "in c3 big.bin is out of LFS: its content is the blob");
    w.sync_ok(c1, &target, &[]);
    assert_eq!(std::fs::read(target.join("big.bin")).expect("big.bin"), noise(2, 1536 * 1024), "the object");
    assert_eq!(std::fs::read(target.join("notptr.bin")).expect("notptr"), b"not a pointer\n");
}

/// The paths of the plan's ops that write a file.
fn written(plan: &Value) -> Vec<String> {
    let mut paths: Vec<String> = plan_ops(plan)
        .into_iter()
        .filter(|op| op["op"] == "write" || op["kind"] == "write")
        .map(|op| op["path"].as_str().expect("a path").to_string())
        .collect();
    paths.sort();
    paths
}

/// The target's state file.
fn state_of(target: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(target.join(".treesync/state")).expect("state")).expect("json")
}

#[test]
fn pointers_mode_equals_a_clone_that_skips_smudging_and_switching_rewrites_only_lfs_files() {
    let w = world(true);
    let target = w.target("site");
    let c2 = &w.commits[1];
    w.sync_like_git(c2, &target, &["--lfs=pointers"], SKIP_SMUDGE, "pointers");
    let state = state_of(&target);
    assert_eq!(state["conversions"]["lfs"], "pointers", "{state:#}");

    let plan: Value = serde_json::from_str(&ok(&[
        "plan",
        "--repo",
        s(&w.mirror),
        "--ref",
        c2,
        "--target",
        s(&target),
        "--lfs",
        "content",
        "--json",
    ]))
    .expect("json");
    assert_eq!(written(&plan), ["a.bin", "big.bin", "notptr.bin", "sub/c.bin"], "the filter=lfs files: {plan:#}");
    let ops = plan_ops(&plan);
    assert!(
        ops.iter().all(|op| op["reason"] == "LFS mode changed: content (was: pointers)"),
        "each op says why: {plan:#}"
    );
    w.sync_like_git(c2, &target, &["--lfs", "content"], SMUDGE, "content after pointers");
    let state = state_of(&target);
    assert!(state["conversions"].get("lfs").is_none(), "content is the default, not recorded: {state:#}");
}

#[test]
fn a_missing_object_stops_the_sync_before_any_write_and_the_hinted_fetch_fixes_it() {
    let w = world(false);
    let target = w.target("site");
    let c2 = &w.commits[1];
    let o = w.sync(c2, &target, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!target.exists(), "nothing written, not even the target or its journal: {err}");
    let oid = oid_of(&w.mirror, c2, "sub/c.bin");
    assert!(err.contains(&oid), "names the oid: {err}");
    assert!(err.contains("sub/c.bin"), "names the path: {err}");
    assert!(err.contains("4 Git LFS objects missing"), "all of them at once: {err}");
    let hinted = format!("git -C {} lfs fetch", w.mirror.display());
    assert!(err.contains(&hinted), "hints the fetch: {err}");
    // A managed target (pointers so far) stays as it is too: no journal, no file changed.
    let managed = w.target("managed");
    w.sync_ok(c2, &managed, &["--lfs=pointers"]);
    let state = std::fs::read(managed.join(".treesync/state")).expect("state");
    let files = treesync_testkit::tree::read_dir(&managed);
    let o = w.sync(c2, &managed, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(managed.join(".treesync/state")).expect("state"), state, "no journal");
    assert!(treesync_testkit::tree::read_dir(&managed) == files, "no file changed");
    // The hint's command, with --all as it offers.
    git(&w.root, &["-C", s(&w.mirror), "lfs", "fetch", "--all"]);
    w.sync_like_git(c2, &target, &[], SMUDGE, "after the fetch");
    w.sync_like_git(c2, &managed, &[], SMUDGE, "the managed target after the fetch");
}

#[test]
fn pointers_mode_needs_no_store() {
    let w = world(false);
    let target = w.target("site");
    let c2 = &w.commits[1];
    w.sync_like_git(c2, &target, &["--lfs=pointers"], SKIP_SMUDGE, "pointers without objects");
}

#[test]
fn a_corrupt_object_fails_the_sync_naming_it_and_a_rerun_after_the_fix_finishes() {
    let w = world(true);
    let target = w.target("site");
    let c2 = &w.commits[1];
    let oid = oid_of(&w.mirror, c2, "big.bin");
    let object = w.object(&oid);
    let good = std::fs::read(&object).expect("the object");
    let mut bad = good.clone();
    bad[1000] ^= 0xff;
    std::fs::write(&object, &bad).expect("corrupt it");
    let o = w.sync(c2, &target, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&oid) && err.contains("corrupt"), "names the corrupt object: {err}");
    assert!(err.contains("big.bin"), "names the file: {err}");
    std::fs::write(&object, &good).expect("fix it");
    w.sync_like_git(c2, &target, &[], SMUDGE, "after the fix");
}

#[test]
fn the_config_key_lfs_sets_the_mode() {
    let w = world(false);
    let target = w.target("site");
    let config = ConfigFile::new()
        .defaults()
        .key("lfs", "pointers")
        .mirror("site", &w.mirror, &w.commits[1], &target)
        .write_in(&w.root);
    ok(&["sync", "--config", s(&config), "site"]);
    w.assert_like_git(&w.commits[1], &target, SKIP_SMUDGE, "lfs = pointers");
    ConfigFile::new().mirror("site", "/r", "main", "/t").key("lfs", "pointer").write(&config);
    let o = treesync(&["sync", "--config", s(&config), "site"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("unknown LFS mode \"pointer\""), "{err}");
}

#[test]
fn files_of_submodules_are_read_from_the_submodules_stores() {
    treesync_testkit::missing::require_program("git-lfs", "git-lfs");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (lib, lib_git, sup, sup_git) =
        (root.join("lib"), root.join("lib.git"), root.join("super"), root.join("super.git"));
    for d in [&lib, &sup] {
        std::fs::create_dir_all(d).expect("mkdir");
        git(d, &["init", "-q"]);
    }
    git(&lib, &["lfs", "install", "--local"]);
    git(&lib, &["lfs", "track", "*.bin"]);
    std::fs::write(lib.join("obj.bin"), noise(5, 200_000)).expect("write");
    git(&lib, &["add", "."]);
    git(&lib, &["commit", "-qm", "lib"]);
    git(root, &["clone", "-q", "--mirror", s(&lib), s(&lib_git)]);
    git(&lib_git, &["lfs", "fetch", "--all"]);
    std::fs::write(sup.join("README"), "super\n").expect("write");
    git(&sup, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", s(&lib_git), "vendor/lib"]);
    git(&sup, &["add", "."]);
    git(&sup, &["commit", "-qm", "super"]);
    git(root, &["clone", "-q", "--mirror", s(&sup), s(&sup_git)]);
    // Submodule URLs naming local repositories are read (as git clones them) only with this.
    git(&sup_git, &["config", "protocol.file.allow", "always"]);
    assert!(!sup_git.join("lfs/objects").exists(), "the superproject's store does not hold the object");

    let target = root.join("site");
    let args = ["sync", "--repo", s(&sup_git), "--ref", "main", "--target", s(&target), "--recurse-submodules"];
    ok(&args);
    assert_eq!(std::fs::read(target.join("vendor/lib/obj.bin")).expect("obj.bin"), noise(5, 200_000));
    assert_eq!(std::fs::read(target.join("README")).expect("README"), b"super\n");
}

#[test]
fn a_large_object_is_streamed_with_bounded_memory() {
    treesync_testkit::missing::require_program("git-lfs", "git-lfs");
    let mib = big_file_mib();
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    git(&work, &["init", "-q"]);
    git(&work, &["lfs", "install", "--local"]);
    git(&work, &["lfs", "track", "*.bin"]);
    write_big_file(&work.join("big.bin"), mib);
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "big"]);
    let want = dir.path().join("want.bin");
    std::fs::rename(work.join("big.bin"), &want).expect("move the file aside");
    let target = dir.path().join("site");
    let rss = peak_rss_mib(Command::new(env!("CARGO_BIN_EXE_treesync")).args([
        "sync",
        "--repo",
        s(&work),
        "--ref",
        "HEAD",
        "--target",
        s(&target),
    ]));
    eprintln!("{mib} MiB LFS object synced with a peak RSS of {rss} MiB");
    let same = Command::new("cmp").arg(&want).arg(target.join("big.bin")).output().expect("cmp runs");
    assert!(same.status.success(), "the object's content");
    assert!(rss < 100, "peak RSS {rss} MiB for a {mib} MiB LFS object (bound: 100 MiB)");
}

/// A bare repository whose commit holds `pointers`: (path, content) files stored as LFS
/// pointers (`filter=lfs`), each object put in the repository's LFS store; made by hand, as
/// git-lfs would (`pointer(…)` gives the size the pointer says, which may lie).
fn handmade(dir: &Path, files: &[(&str, &[u8], u64)]) -> PathBuf {
    let w = dir.join("hand");
    std::fs::create_dir_all(&w).expect("mkdir");
    git(&w, &["init", "-q"]);
    std::fs::write(w.join(".gitattributes"), "*.bin filter=lfs diff=lfs merge=lfs -text\n").expect("attrs");
    let bare = dir.join("hand.git");
    let mut objects = Vec::new();
    for (path, content, size) in files {
        let oid = sha256(content);
        let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n");
        std::fs::write(w.join(path), pointer).expect("pointer");
        objects.push((oid, content.to_vec()));
    }
    // git add without git-lfs's clean filter: the pointer files are committed as they are.
    git(&w, &["-c", "filter.lfs.clean=cat", "-c", "filter.lfs.required=false", "add", "-A"]);
    git(&w, &["commit", "-q", "-m", "pointers"]);
    git(dir, &["clone", "-q", "--bare", w.to_str().expect("utf8"), bare.to_str().expect("utf8")]);
    for (oid, content) in objects {
        let at = bare.join("lfs/objects").join(&oid[..2]).join(&oid[2..4]);
        std::fs::create_dir_all(&at).expect("mkdir");
        std::fs::write(at.join(&oid), content).expect("object");
    }
    bare
}

fn sha256(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = data.to_vec();
    let w = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
    let out = child.wait_with_output().expect("sha256sum ends");
    w.join().expect("joined").expect("written");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().expect("a sum").to_string()
}

/// Issue 29: `--max-bytes` did not count LFS content (30 pointers to one 10 MB object wrote
/// 287 MB under `--max-bytes 50MiB`; plan and summary said 3.9 KiB). Pointers now count by
/// their objects' sizes: refused before any write, and plan and summary say the real size.
#[test]
fn lfs_objects_count_toward_max_bytes_by_their_real_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let object = noise(9, 1 << 20);
    let files: Vec<(String, u64)> = (0..30).map(|i| (format!("p{i:02}.bin"), 1 << 20)).collect();
    let refs: Vec<(&str, &[u8], u64)> = files.iter().map(|(p, n)| (p.as_str(), object.as_slice(), *n)).collect();
    let bare = handmade(dir.path(), &refs);
    let target = dir.path().join("target");
    let args = |extra: &[&'static str]| {
        let mut a = vec!["sync", "--repo", s(&bare), "--ref", "HEAD", "--target", s(&target)];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| Command::new(env!("CARGO_BIN_EXE_treesync")).args(&a).output().expect("runs");
    let o = run(args(&["--max-bytes", "10MiB"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("--max-bytes") || err.contains("max_bytes"), "{err}");
    assert!(!target.exists(), "nothing was written");
    let plan = ok(&["plan", "--repo", s(&bare), "--ref", "HEAD", "--target", s(&target), "--json"]);
    let plan: Value = serde_json::from_str(&plan).expect("json");
    let bytes = plan["plan"]["counts"]["bytes"].as_u64().expect("bytes");
    assert!(bytes >= 30 << 20, "the plan counts the objects: {bytes}");
    let o = run(args(&["--max-bytes", "64MiB", "--json"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v["planned"]["bytes"].as_u64().expect("planned") >= 30 << 20, "{v}");
    assert!(v["applied"]["bytes"].as_u64().expect("applied") >= 30 << 20, "{v}");
    assert_eq!(std::fs::read(target.join("p17.bin")).expect("content"), object);
}

/// Issue 29: two pointers to one oid with different sizes passed the check before any write,
/// then failed after writing some files. Each (oid, size) is checked now.
#[test]
fn two_pointers_to_one_oid_with_different_sizes_are_refused_before_any_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let object = noise(3, 4096);
    let bare = handmade(
        dir.path(),
        &[("a.bin", object.as_slice(), 4096), ("b.bin", object.as_slice(), 4096), ("c.bin", object.as_slice(), 5000)],
    );
    let target = dir.path().join("target");
    let o = treesync(&["sync", "--repo", s(&bare), "--ref", "HEAD", "--target", s(&target)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("c.bin"), "{err}");
    assert!(!target.exists(), "nothing was written: {:?}", std::fs::read_dir(&target).map(|d| d.count()));
}
