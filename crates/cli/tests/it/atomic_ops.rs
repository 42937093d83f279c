//! `sync --atomic` costs the diff, not the tree (issue 16): after the first two syncs (which
//! make the two generations, the second a copy of the first), an update of K changed paths on
//! an N = 2,000-file tree reuses the generation retired longest ago and applies only the
//! difference between the tree *it* holds and the new commit. Counted on the slow FUSE
//! filesystem (every request the kernel sends, `--backend nfs`) and with `strace -c -f` on a
//! local directory; the bounds are a few times K and fail by far for anything that walks,
//! copies or links N paths.

use std::collections::{BTreeMap, BTreeSet};
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
/// before; and for syncing commit `i` into the generation that holds commit `i - 2` (the one an
/// --atomic sync with `--keep 2 --grace 0` reuses) the paths that differ between them (K is
/// their number; empty for the first two syncs).
fn chain() -> (History, Vec<BTreeSet<String>>) {
    let mut trees: Vec<Model> = vec![history::wide_tree(N, 3)];
    for i in 0..4 {
        let (next, _) = history::change_some(trees.last().expect("one"), 10, 2, 2, 100 + i);
        trees.push(next);
    }
    let differ = |a: &Model, b: &Model| -> BTreeSet<String> {
        a.0.iter()
            .filter(|(k, v)| b.0.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .chain(b.0.keys().filter(|k| !a.0.contains_key(*k)).cloned())
            .collect()
    };
    let k = (0..trees.len()).map(|i| if i < 2 { BTreeSet::new() } else { differ(&trees[i - 2], &trees[i]) }).collect();
    (History::from_trees(&trees), k)
}

/// The paths below a generation's root an update of `changed` may touch: the changed paths,
/// their temporaries, the directories on their way, the root and the state folder.
fn allowed(changed: &BTreeSet<String>) -> BTreeSet<String> {
    let mut allowed: BTreeSet<String> = [String::new()].into();
    for c in changed {
        let (dir, name) = c.rsplit_once('/').unwrap_or(("", c));
        allowed.insert(c.clone());
        allowed.insert(if dir.is_empty() {
            format!(".treesync-tmp.{name}")
        } else {
            format!("{dir}/.treesync-tmp.{name}")
        });
        let mut d = dir;
        while !d.is_empty() {
            allowed.insert(d.to_string());
            d = d.rsplit_once('/').map_or("", |(p, _)| p);
        }
    }
    allowed
}

fn sync_args<'a>(repo: &'a str, commit: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["sync", "-q", "--repo", repo, "--ref", commit, "--atomic", "--grace", "0", "--keep", "2"];
    v.extend_from_slice(extra);
    v
}

/// The path below a generation's root of a path recorded on the mount, when it lies in a
/// generation (`.t.treesync/gN/REST` → `REST`).
fn in_generation(p: &str) -> Option<&str> {
    let rest = p.strip_prefix(".t.treesync/g")?;
    let (_, rest) = rest.split_once('/').unwrap_or((rest, ""));
    Some(rest)
}

/// On the NAS stand-in (50 µs per request, kernel caches off), `--backend nfs --atomic`: the
/// third and later syncs make at most 12·K + 250 requests (K ≤ 28 here, so ≤ 586; a copy or a
/// walk of the 2,000 files takes at least 2,000 lookups alone), of which at most 12·K + 40 on
/// paths in the generations and at most 250 elsewhere (the home's lock, record, `tmp` folder
/// and slots, the link and the switch: the same whatever N and K); no hard link, and no path of
/// a generation outside the diff.
#[test]
fn atomic_updates_on_the_nas_testbed_cost_the_diff() {
    slowfs::require();
    let fs = SlowFs::temp(Config { meta_latency: Duration::from_micros(50), record_paths: true, ..Config::default() })
        .expect("mount");
    let (h, changed) = chain();
    let repo = h.bare.path.to_str().expect("utf8").to_string();
    let target = fs.path().join("t");
    let mut counted = Vec::new();
    for (i, delta) in changed.iter().enumerate() {
        fs.reset();
        if i == 0 {
            // The first sync goes to the backing directory (fast, local backend): the same home,
            // generation and link, only sooner.
            treesync(&sync_args(&repo, &h.commits[0], &["--switch", "symlink"]), &fs.backing().join("t"));
            counted.push(fs.settled_stats());
            continue;
        }
        treesync(&sync_args(&repo, &h.commits[i], &["--backend", "nfs", "--switch", "symlink"]), &target);
        let stats = fs.settled_stats();
        if let Some(d) = tree::diff(&h.expected(i), &tree::read_dir(&target)) {
            panic!("after sync {i} the target differs from git archive:\n{d}");
        }
        eprintln!("sync {i} (K={}): {} requests\n{stats}", delta.len(), stats.total());
        if std::env::var_os("SHOW_PATHS").is_some() {
            for (op, p) in &stats.paths {
                eprintln!("  {op:?} {p}");
            }
        }
        counted.push(stats);
    }
    // The first two syncs write the tree (the second copies it): O(N), as they must.
    assert!(counted[1].total() >= N as u64, "the second sync made a generation of {N} files in {}", counted[1].total());
    for i in 2..h.commits.len() {
        let (s, k) = (&counted[i], changed[i].len() as u64);
        assert!(k > 0);
        // Paths recorded (a rename records two) in the generations, and elsewhere (the home's
        // lock, record, tmp folder and slots, the link).
        let in_generations = s.paths.iter().filter(|(_, p)| in_generation(p).is_some()).count() as u64;
        let elsewhere = s.paths.len() as u64 - in_generations;
        eprintln!("sync {i}: {in_generations} paths in the generations, {elsewhere} elsewhere");
        assert!(in_generations <= 12 * k + 40, "sync {i}: {in_generations} paths in the generations for K={k}:\n{s}");
        assert!(elsewhere <= 250, "sync {i}: {elsewhere} paths outside the generations:\n{s}");
        assert!(s.total() <= 12 * k + 250, "sync {i}: {} requests for K={k} on N={N}:\n{s}", s.total());
        assert_eq!(s.count(Op::Link), 0, "sync {i} linked files:\n{s}");
        assert!(s.count(Op::Mkdir) <= 4, "sync {i} made directories:\n{s}");
        assert!(s.count(Op::Readdir) <= 20, "sync {i} listed directories:\n{s}");
        let allowed = allowed(&changed[i]);
        let stray: Vec<&(Op, String)> = s
            .paths
            .iter()
            .filter(|(_, p)| {
                in_generation(p)
                    .is_some_and(|rel| !allowed.contains(rel) && !rel.starts_with(".treesync") && rel != ".TREESYNC")
            })
            .collect();
        assert!(stray.is_empty(), "sync {i} touched paths of a generation the change does not involve: {stray:?}");
    }
}

/// One line of `strace -f -y` output: the syscall's name, when the line starts a call.
fn syscall_name(line: &str) -> Option<&str> {
    let rest = line.split_once(' ').map_or(line, |(_, r)| r).trim_start();
    if rest.starts_with('<') || rest.starts_with("+++") || rest.starts_with("---") {
        return None;
    }
    rest.split_once('(').map(|(name, _)| name)
}

/// On a local directory, `strace -f -y` of the third and later syncs, counting only the calls
/// on the target's side (a path or a descriptor below the directory holding the target and its
/// home; the repository and `/proc`, which the held-open scan reads, are elsewhere): no `linkat`,
/// at most 2·K + 10 renames, 3·K + 60 calls of the stat family, 4·K + 60 opens, 40 directory
/// listings, and fewer than N/2 = 1,000 such calls of any kind in all (K ≤ 28 here; a copy or a
/// walk of the 2,000 files makes at least 2,000 opens or stats).
#[test]
fn atomic_updates_on_a_local_disk_cost_the_diff_in_syscalls() {
    let strace = treesync_testkit::missing::require_program("strace", "strace");
    let (h, changed) = chain();
    let repo = h.bare.path.to_str().expect("utf8").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let side = dir.path().join("side");
    std::fs::create_dir(&side).expect("mkdir");
    let side_text = side.to_str().expect("utf8").to_string();
    let target = side.join("t");
    for (i, delta) in changed.iter().enumerate() {
        let args = sync_args(&repo, &h.commits[i], &[]);
        if i < 2 {
            treesync(&args, &target);
            continue;
        }
        let log = dir.path().join(format!("strace{i}.txt"));
        let o = Command::new(&strace)
            .args(["-f", "-y", "-qq", "-s", "256", "-o"])
            .arg(&log)
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
        let text = std::fs::read_to_string(&log).expect("strace log");
        let mut c: BTreeMap<&str, u64> = BTreeMap::new();
        for line in text.lines().filter(|l| l.contains(&side_text)) {
            if let Some(name) = syscall_name(line) {
                *c.entry(name).or_default() += 1;
            }
        }
        let n = |names: &[&str]| names.iter().map(|s| c.get(*s).copied().unwrap_or(0)).sum::<u64>();
        let k = delta.len() as u64;
        let all: u64 = c.values().sum();
        eprintln!("sync {i} (K={k}) on N={N}: {all} calls on the target's side: {c:?}");
        assert!(k > 0);
        assert_eq!(n(&["linkat", "link"]), 0, "sync {i} made hard links: {c:?}");
        assert!(n(&["renameat", "renameat2", "rename"]) <= 2 * k + 10, "sync {i}: {c:?}");
        assert!(n(&["newfstatat", "statx", "fstat", "lstat", "stat"]) <= 3 * k + 60, "sync {i}: {c:?}");
        assert!(n(&["getdents64"]) <= 40, "sync {i}: {c:?}");
        assert!(n(&["openat", "openat2", "open"]) <= 4 * k + 60, "sync {i}: {c:?}");
        assert!(all < (N / 2) as u64, "sync {i}: {all} calls on the target's side for K={k} on N={N}: {c:?}");
    }
}
