//! Filter drivers (`filter=NAME` in `.gitattributes`, `filter.NAME.*` in the repository's
//! config) run as git runs them on checkout: `smudge` once per file, `process` as one
//! long-running process speaking git's filter protocol; the target equals a fresh clone made
//! with the same config. A required driver without a command is refused before any write.

use std::path::Path;
use std::process::Command;

use crate::plan_ops;
use crate::treesync;
use treesync_testkit::cli::s;
use treesync_testkit::git;
use treesync_testkit::gitcheck;
use treesync_testkit::run_with_input;
use treesync_testkit::tree;

/// A temporary directory holding a bare repository with one commit of `files`; the repository
/// and that commit.
fn repo(files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let w = dir.join("w");
    std::fs::create_dir_all(&w).expect("mkdir");
    git(&w, &["init", "-q", "-b", "main"]);
    for (p, c) in files {
        tree::put_file(&w, p, c.as_bytes());
    }
    git(&w, &["add", "-A"]);
    git(&w, &["-c", "user.name=T", "-c", "user.email=t@t", "commit", "-q", "-m", "one"]);
    let bare = dir.join("bare.git");
    git(dir, &["clone", "-q", "--bare", s(&w), s(&bare)]);
    let head = git(&bare, &["rev-parse", "main"]).trim().to_string();
    (tmp, bare, head)
}

/// A long-running filter process speaking git's protocol (pkt-lines; version 2; the `smudge`
/// capability): it upper-cases what it is given and logs each request to `log`.
const PROCESS: &str = r#"import sys
log = open(sys.argv[1], "a")
inp, out = sys.stdin.buffer, sys.stdout.buffer
def read():
    n = inp.read(4)
    if not n:
        sys.exit(0)
    n = int(n, 16)
    return None if n == 0 else inp.read(n - 4)
def write(data):
    out.write(b"%04x" % (len(data) + 4) + data)
def flush():
    out.write(b"0000"); out.flush()
def packets():
    items = []
    while True:
        p = read()
        if p is None:
            return items
        items.append(p)
packets(); write(b"git-filter-server\n"); write(b"version=2\n"); flush()
packets(); write(b"capability=smudge\n"); flush()
while True:
    head = packets()
    content = b"".join(packets())
    meta = dict(l.rstrip(b"\n").split(b"=", 1) for l in head)
    log.write("%s %s\n" % (meta[b"command"].decode(), meta[b"pathname"].decode())); log.flush()
    write(b"status=success\n"); flush()
    body = content.upper()
    for i in range(0, len(body), 65000):
        write(body[i:i + 65000])
    flush(); flush()
"#;

/// `treesync sync` of main of the repository `bare` into `target`, which must succeed.
fn sync_ok(bare: &Path, target: &Path) {
    let o = treesync(&["sync", "--repo", s(bare), "--ref", "main", "--target", s(target)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Set `key` to `value` in the config of `bare` (the fix for a failed sync), then
/// [`sync_ok`]: the rerun finishes.
fn fix_and_sync(bare: &Path, target: &Path, (key, value): (&str, &str)) {
    git(bare, &["config", key, value]);
    sync_ok(bare, target);
}

/// `treesync sync` of main of the repository `bare` into `target`, with `extra` arguments,
/// which must fail with exit 2 (a file failed); its stderr.
fn sync_fails(bare: &Path, target: &Path, extra: &[&str]) -> String {
    let o = treesync(&[&["sync", "--repo", s(bare), "--ref", "main", "--target", s(target)], extra].concat());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    err
}

/// Set each `(key, value)` of `config` in the repository `bare`'s config.
fn configure(bare: &Path, config: &[(&str, &str)]) {
    for (k, v) in config {
        git(bare, &["config", k, v]);
    }
}

/// `target` holds what git's checkout of `rev` writes with `config` set.
fn assert_like_git(bare: &Path, rev: &str, config: &[(&str, &str)], target: &Path) {
    let diffs = gitcheck::diff(&gitcheck::expected(bare, rev, config), target);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// [`sync_ok`] of main (commit `head`), then [`assert_like_git`] with `config`.
fn sync_like_git(bare: &Path, head: &str, config: &[(&str, &str)], target: &Path) {
    sync_ok(bare, target);
    assert_like_git(bare, head, config, target);
}

/// Content more than a pipe holds (1 MiB): a filter that does not read it all makes the write
/// to it fail.
fn more_than_a_pipe_holds() -> String {
    "x".repeat(1 << 20)
}

#[test]
fn smudge_and_process_drivers_write_what_a_fresh_clone_writes() {
    let (dir, bare, head) = repo(&[
        (".gitattributes", "*.up filter=upper\n*.pr filter=proc\n*.none filter=unconfigured\n"),
        ("a.up", "hello\nworld\n"),
        ("sub/b.up", "more text\n"),
        ("c.pr", "through the process\n"),
        ("d/e.pr", "second file, same process\n"),
        ("f.none", "an unconfigured filter is no filter\n"),
        ("plain.txt", "untouched\n"),
    ]);
    let script = dir.path().join("filter.py");
    std::fs::write(&script, PROCESS).expect("script");
    let log = dir.path().join("process.log");
    let process = format!("python3 {} {}", s(&script), s(&log));
    let config = [
        ("filter.upper.smudge", "tr a-z A-Z"),
        ("filter.upper.clean", "cat"),
        ("filter.proc.process", process.as_str()),
        ("filter.proc.required", "true"),
    ];
    configure(&bare, &config);
    let target = dir.path().join("target");
    sync_ok(&bare, &target);
    // git's own checkout, with the same filters (and the same process) configured.
    std::fs::remove_file(&log).expect("the process ran for treesync");
    assert_like_git(&bare, &head, &config, &target);
    assert_eq!(std::fs::read_to_string(target.join("a.up")).expect("a.up"), "HELLO\nWORLD\n");
    assert_eq!(std::fs::read_to_string(target.join("c.pr")).expect("c.pr"), "THROUGH THE PROCESS\n");
    // The plan names the driver of each converted file.
    let plan =
        treesync(&["plan", "--repo", s(&bare), "--ref", "main", "--target", s(&dir.path().join("t2")), "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).expect("plan json");
    let ops = plan_ops(&plan);
    let filter_of = |path: &str| {
        ops.iter().find(|o| o["path"] == path).and_then(|o| o["conversion"]["filter"].as_str()).map(str::to_string)
    };
    assert_eq!(filter_of("a.up").as_deref(), Some("upper"));
    assert_eq!(filter_of("d/e.pr").as_deref(), Some("proc"));
    assert_eq!(filter_of("plain.txt"), None);
}

#[test]
fn a_required_driver_without_a_command_is_refused_before_any_write() {
    let (dir, bare, _) =
        repo(&[(".gitattributes", "*.m filter=must\n"), ("one.m", "x\n"), ("deep/two.m", "y\n"), ("ok.txt", "z\n")]);
    git(&bare, &["config", "filter.must.required", "true"]);
    let target = dir.path().join("target");
    let err = sync_fails(&bare, &target, &[]);
    assert!(
        err.contains("\"must\"")
            && err.contains("one.m")
            && err.contains("deep/two.m")
            && err.contains("filter.must.smudge"),
        "{err}"
    );
    assert!(!target.exists() || tree::read_dir(&target).is_empty(), "nothing was written");
    // The hint's fix: configure the driver; the sync then goes through.
    fix_and_sync(&bare, &target, ("filter.must.smudge", "cat"));
    assert_eq!(std::fs::read_to_string(target.join("deep/two.m")).expect("two.m"), "y\n");
}

#[test]
fn a_failing_required_driver_fails_the_sync_naming_the_file_and_a_rerun_finishes() {
    let (dir, bare, head) = repo(&[(".gitattributes", "*.f filter=flaky\n"), ("a.f", "x\n"), ("b.txt", "y\n")]);
    let flag = dir.path().join("broken");
    std::fs::write(&flag, "").expect("flag");
    let smudge = format!("sh -c 'test ! -e {} && cat'", s(&flag));
    configure(&bare, &[("filter.flaky.smudge", smudge.as_str()), ("filter.flaky.required", "true")]);
    let target = dir.path().join("target");
    let err = sync_fails(&bare, &target, &[]);
    assert!(err.contains("a.f"), "{err}");
    assert!(!target.join("a.f").exists(), "a failed filter writes no file");
    std::fs::remove_file(&flag).expect("unflag");
    sync_like_git(&bare, &head, &[("filter.flaky.smudge", "cat")], &target);
}

/// A smudge command that exits without reading its input (the write to it fails with EPIPE)
/// fails that file with a message — it does not kill treesync — and output into a closed pipe
/// (`treesync plan --json | head -c 1`) ends quietly.
#[test]
fn a_driver_that_does_not_read_its_input_fails_the_file_not_the_process() {
    let (dir, bare, _) = repo(&[(".gitattributes", "*.f filter=early\n"), ("a.f", &more_than_a_pipe_holds())]);
    configure(&bare, &[("filter.early.smudge", "false"), ("filter.early.required", "true")]);
    let target = dir.path().join("target");
    for _ in 0..5 {
        let err = sync_fails(&bare, &target, &[]);
        assert!(err.contains("a.f") && err.contains("filter=early"), "{err}");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["plan", "--repo", s(&bare), "--ref", "main", "--target", s(&dir.path().join("t2")), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("treesync runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("treesync ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(matches!(out.status.code(), Some(0 | 141)), "{:?} {err}", out.status);
}

/// Issue 29: a filter's output is counted toward `--max-bytes` as it is written and never held
/// whole (a `gzip -dc` smudge filter turned 1.4 MB into 1.43 GB written and 1.48 GB of memory).
/// The sync stops at the limit, leaves no file past it, and a raised limit finishes it.
#[test]
fn a_filter_bomb_is_cut_at_max_bytes_and_a_raised_limit_finishes_the_sync() {
    let (dir, bare, _) = repo(&[(".gitattributes", "*.gz filter=gunzip\n"), ("small.txt", "s\n")]);
    let bomb = run_with_input(Command::new("gzip").args(["-9", "-c"]), &vec![0u8; 8 << 20]).stdout;
    let tmp = dir.path().join("add");
    git(dir.path(), &["clone", "-q", s(&bare), s(&tmp)]);
    std::fs::write(tmp.join("bomb.gz"), &bomb).expect("bomb");
    git(&tmp, &["add", "-A"]);
    git(&tmp, &["-c", "user.name=T", "-c", "user.email=t@t", "commit", "-q", "-m", "bomb"]);
    git(&tmp, &["push", "-q", "origin", "main"]);
    let head = git(&bare, &["rev-parse", "main"]).trim().to_string();
    let config = [("filter.gunzip.smudge", "gzip -dc"), ("filter.gunzip.clean", "gzip -c")];
    configure(&bare, &config);
    let target = dir.path().join("target");
    let err = sync_fails(&bare, &target, &["--max-bytes", "1MiB"]);
    assert!(err.contains("bomb.gz") && err.contains("--max-bytes"), "{err}");
    // Nothing past the limit stays behind, not even a temporary.
    let mut big = Vec::new();
    for e in walk(&target) {
        if std::fs::symlink_metadata(&e).is_ok_and(|m| m.is_file() && m.len() > 1 << 20) {
            big.push(e);
        }
    }
    assert!(big.is_empty(), "{big:?}");
    let o = treesync(&["sync", "--repo", s(&bare), "--ref", "main", "--target", s(&target), "--max-bytes", "64MiB"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_like_git(&bare, &head, &config, &target);
    assert_eq!(std::fs::metadata(target.join("bomb.gz")).expect("bomb").len(), 8 << 20);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Issue 29: a filter that hangs hung the sync forever. It is killed with what it started at
/// `--filter-timeout`, and the sync fails naming the filter and the file.
#[test]
fn a_filter_that_hangs_is_killed_at_the_timeout_naming_the_filter_and_the_file() {
    let (dir, bare, _) = repo(&[(".gitattributes", "*.s filter=stuck\n"), ("slow.s", "x\n")]);
    // A child of the filter's shell: the whole process group goes.
    git(&bare, &["config", "filter.stuck.smudge", "sh -c 'sleep 3600.25; cat'"]);
    let target = dir.path().join("target");
    let err = sync_fails(&bare, &target, &["--filter-timeout", "1s"]);
    assert!(err.contains("slow.s") && err.contains("stuck") && err.contains("--filter-timeout"), "{err}");
    let left = running("3600.25");
    assert!(left.is_empty(), "the filter's processes are gone: {left:?}");
    // A fixed filter finishes the sync.
    fix_and_sync(&bare, &target, ("filter.stuck.smudge", "cat"));
    assert_eq!(std::fs::read_to_string(target.join("slow.s")).expect("slow.s"), "x\n");
}

/// Issue 29: a filter that is not required and fails wrote the blob as it is, with exit 0 and
/// no word (git prints an error). It now fails the sync naming the filter and the file, as
/// docs/attributes.md says; once the filter is fixed, a rerun finishes with its new command.
#[test]
fn a_failing_filter_that_is_not_required_stops_the_sync_and_the_fixed_filter_finishes_it() {
    let (dir, bare, head) = repo(&[(".gitattributes", "*.f filter=broken\n"), ("a.f", "x\n"), ("b.txt", "y\n")]);
    git(&bare, &["config", "filter.broken.smudge", "false"]);
    let target = dir.path().join("target");
    let err = sync_fails(&bare, &target, &[]);
    assert!(err.contains("a.f") && err.contains("filter driver broken") && err.contains("status 1"), "{err}");
    assert!(!target.join("a.f").exists(), "the blob is not written as it is");
    let fix = ("filter.broken.smudge", "tr x X");
    fix_and_sync(&bare, &target, fix);
    assert_like_git(&bare, &head, &[fix], &target);
}

/// Issue 29: a required filter that exits 0 without reading all its input failed the sync
/// with "Broken pipe"; git ignores that, and so does treesync now.
#[test]
fn a_required_filter_that_does_not_read_all_its_input_writes_what_git_writes() {
    let (dir, bare, head) = repo(&[(".gitattributes", "*.f filter=short\n"), ("a.f", &more_than_a_pipe_holds())]);
    let config = [("filter.short.smudge", "echo replaced"), ("filter.short.required", "true")];
    configure(&bare, &config);
    let target = dir.path().join("target");
    sync_like_git(&bare, &head, &config, &target);
    assert_eq!(std::fs::read_to_string(target.join("a.f")).expect("a.f"), "replaced\n");
}

/// A `process` driver (git's long-running filter protocol) that hangs gets the same timeout:
/// killed with what it started, the sync fails naming it and the file.
#[test]
fn a_process_filter_that_hangs_is_killed_at_the_timeout() {
    let (dir, bare, _) = repo(&[(".gitattributes", "*.p filter=hangs\n"), ("a.p", "x\n")]);
    configure(&bare, &[("filter.hangs.process", "sh -c 'sleep 3600.75'"), ("filter.hangs.required", "true")]);
    let target = dir.path().join("target");
    let err = sync_fails(&bare, &target, &["--filter-timeout", "1s"]);
    assert!(err.contains("a.p") && err.contains("hangs") && err.contains("--filter-timeout"), "{err}");
    let left = running("3600.75");
    assert!(left.is_empty(), "the filter's processes are gone: {left:?}");
}

/// The command lines of the processes on this machine whose command line holds `marker`.
fn running(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(marker))
        .collect()
}
