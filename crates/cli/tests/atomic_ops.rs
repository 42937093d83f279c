//! `sync --atomic` costs the diff, not the tree (issue 16): after the first two syncs (which
//! make the two generations, the second a copy of the first), an update of K changed paths on
//! an N = 2,000-file tree reuses the generation retired longest ago and applies only the
//! difference between the tree *it* holds and the new commit. Counted on the slow FUSE
//! filesystem (every request the kernel sends, `--backend nfs`) and with `strace -c -f` on a
//! local directory; the bounds are a few times K and fail by far for anything that walks,
//! copies or links N paths.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use treesync_testkit::conformance::History;
use treesync_testkit::history::{self, Model};
use treesync_testkit::slowfs::{self, Config, Op, SlowFs};
use treesync_testkit::tree;

/// Files in the tree.
const N: usize = 2000;

fn treesync(args: &[&str], target: &Path) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(args)
        .arg("--target")
        .arg(target)
        // cargo's library path makes the dynamic loader probe dozens of directories at start.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("treesync runs");
    assert!(o.status.success(), "treesync {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// Five commits of an N-file tree, each changing 10 files, adding 2 and deleting 2 of the one
/// before; and K for syncing commit `i` into the generation that holds commit `i - 2` (the one
/// an --atomic sync with `--keep 2 --grace 0` reuses): the paths that differ between them.
fn chain() -> (History, Vec<usize>) {
    let mut trees: Vec<Model> = vec![history::wide_tree(N, 3)];
    for i in 0..4 {
        let (next, _) = history::change_some(trees.last().expect("one"), 10, 2, 2, 100 + i);
        trees.push(next);
    }
    let differ = |a: &Model, b: &Model| {
        a.0.iter().filter(|(k, v)| b.0.get(*k) != Some(v)).count()
            + b.0.keys().filter(|k| !a.0.contains_key(*k)).count()
    };
    let k = (0..trees.len()).map(|i| if i < 2 { N } else { differ(&trees[i - 2], &trees[i]) }).collect();
    (History::from_trees(&trees), k)
}

fn sync_args<'a>(repo: &'a str, commit: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["sync", "-q", "--repo", repo, "--ref", commit, "--atomic", "--grace", "0", "--keep", "2"];
    v.extend_from_slice(extra);
    v
}

/// On the NAS stand-in (200 µs per request, kernel caches off), `--backend nfs --atomic`: the
/// third and later syncs make at most 12·K + 100 requests (K ≤ 28 here, so ≤ 436; a copy or a
/// walk of the 2,000 files would take at least 2,000 lookups alone), no hard link, and touch
/// no path of the tree outside the diff.
#[test]
fn atomic_updates_on_the_nas_testbed_cost_the_diff() {
    slowfs::require();
    let fs = SlowFs::temp(Config { meta_latency: Duration::from_micros(200), record_paths: true, ..Config::default() })
        .expect("mount");
    let (h, k) = chain();
    let repo = h.bare.path.to_str().expect("utf8").to_string();
    let target = fs.path().join("t");
    let mut counted = Vec::new();
    for i in 0..h.commits.len() {
        fs.reset();
        treesync(&sync_args(&repo, &h.commits[i], &["--backend", "nfs", "--switch", "symlink"]), &target);
        let stats = fs.settled_stats();
        if let Some(d) = tree::diff(&h.expected(i), &tree::read_dir(&target)) {
            panic!("after sync {i} the target differs from git archive:\n{d}");
        }
        eprintln!("sync {i} (K={}): {} requests\n{stats}", k[i], stats.total());
        counted.push(stats);
    }
    // The first two syncs write the tree (the second copies it): O(N), as they must.
    assert!(counted[1].total() >= N as u64, "the second sync made a generation of {N} files in {}", counted[1].total());
    for i in 2..h.commits.len() {
        let (s, k) = (&counted[i], k[i] as u64);
        assert!(s.total() <= 12 * k + 100, "sync {i}: {} requests for K={k} on N={N}:\n{s}", s.total());
        assert_eq!(s.count(Op::Link), 0, "sync {i} linked files:\n{s}");
        assert!(s.count(Op::Mkdir) <= 4, "sync {i} made directories:\n{s}");
        assert!(s.count(Op::Readdir) <= 20, "sync {i} listed directories:\n{s}");
    }
}

/// strace's summary (`strace -c`) as syscall → calls.
fn strace_counts(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors,] syscall
            let calls = f.get(3)?.parse().ok()?;
            let name = f.last()?;
            (*name != "total").then(|| (name.to_string(), calls))
        })
        .collect()
}

/// On a local directory, `strace -c -f` of the third and later syncs: no `linkat`, at most
/// 2·K + 10 renames, 3·K + 60 calls of the stat family, and fewer than N/4 = 500 calls of
/// everything that touches the tree (stat, link, unlink, rename, mkdir, symlink, chmod, listing)
/// together.
#[test]
fn atomic_updates_on_a_local_disk_cost_the_diff_in_syscalls() {
    let strace = treesync_testkit::missing::require_program("strace", "strace");
    let (h, k) = chain();
    let repo = h.bare.path.to_str().expect("utf8").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("t");
    let tree_calls = [
        "linkat",
        "link",
        "unlinkat",
        "unlink",
        "rmdir",
        "renameat",
        "renameat2",
        "rename",
        "mkdirat",
        "mkdir",
        "symlinkat",
        "fchmodat",
        "fchmod",
        "getdents64",
        "newfstatat",
        "statx",
        "fstat",
        "lstat",
        "stat",
        "copy_file_range",
        "ioctl",
    ];
    for i in 0..h.commits.len() {
        let args = sync_args(&repo, &h.commits[i], &[]);
        if i < 2 {
            treesync(&args, &target);
            continue;
        }
        let summary = dir.path().join(format!("strace{i}.txt"));
        let o = Command::new(&strace)
            .args(["-f", "-c", "-e", &format!("trace={}", tree_calls.join(",")), "-o"])
            .arg(&summary)
            .arg(env!("CARGO_BIN_EXE_treesync"))
            .env_remove("LD_LIBRARY_PATH")
            .args(&args)
            .arg("--target")
            .arg(&target)
            .output()
            .expect("strace runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        if let Some(d) = tree::diff(&h.expected(i), &tree::read_dir(&target)) {
            panic!("after sync {i} the target differs from git archive:\n{d}");
        }
        let text = std::fs::read_to_string(&summary).expect("strace summary");
        let c = strace_counts(&text);
        let n = |names: &[&str]| names.iter().map(|s| c.get(*s).copied().unwrap_or(0)).sum::<u64>();
        let k = k[i] as u64;
        eprintln!("sync {i} (K={k}) on N={N}:\n{text}");
        assert_eq!(n(&["linkat", "link"]), 0, "sync {i} made hard links:\n{text}");
        assert!(n(&["renameat", "renameat2", "rename"]) <= 2 * k + 10, "sync {i}:\n{text}");
        assert!(n(&["newfstatat", "statx", "fstat", "lstat", "stat"]) <= 3 * k + 60, "sync {i}:\n{text}");
        let all: u64 = c.values().sum();
        assert!(all < (N / 4) as u64, "sync {i}: {all} tree syscalls for K={k} on N={N}:\n{text}");
    }
}
