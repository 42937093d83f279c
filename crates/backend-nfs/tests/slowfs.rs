//! The NFS backend on the slow FUSE filesystem (latency on every op, kernel caches off, like
//! NFS with `actimeo=0`): the conformance suite, walks of random histories against `git
//! archive`, and the budgets as the filesystem sees them. (The operation count of an
//! incremental sync is checked on the CLI, in its own process: a test process that forks
//! children while files are open on the mount makes the kernel send extra FLUSHes.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use treesync_backend_local::LocalBackend;
use treesync_backend_nfs::{NfsBackend, Options, Window};
use treesync_core::policy::Budgets;
use treesync_core::{Backend, RelPath, sync, verify};
use treesync_testkit::Rng;
use treesync_testkit::conformance::{self, Fixture, History, sync_to};
use treesync_testkit::runtime;
use treesync_testkit::slowfs::{self, Config, Op, SlowFs};
use treesync_testkit::tree::{self, Node};
use treesync_testkit::verify_at;

const LATENCY: Duration = Duration::from_micros(200);

fn slow(record_paths: bool) -> SlowFs {
    slowfs::require();
    SlowFs::temp(Config { meta_latency: LATENCY, record_paths, ..Config::default() }).expect("mount slowfs")
}

struct Slow {
    fs: SlowFs,
    options: Options,
}

impl Slow {
    fn new(options: Options) -> Self {
        Slow { fs: slow(false), options }
    }
    /// Sync this target to commit `i` of `h` through the mount, by a backend of its own.
    #[allow(clippy::result_large_err)] // the results as `sync::sync` gives them
    fn sync(&self, rt: &tokio::runtime::Runtime, h: &History, i: usize) -> Result<sync::Outcome, sync::Error> {
        rt.block_on(sync_to(&h.repo, &h.commits[i], &*self.backend()))
    }
    fn mounted(&self) -> PathBuf {
        self.fs.path().join("target")
    }
    fn backing(&self) -> PathBuf {
        self.fs.backing().join("target")
    }
}

impl Fixture for Slow {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(treesync_backend_nfs::open(self.mounted(), self.options))
    }
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.backing())
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        tree::put_file(&self.backing(), path, content)
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &Path) -> bool {
        tree::replace_dir_by_symlink(&self.backing(), path, target)
    }
    fn tamper(&self, path: &str, how: &tree::Tamper) -> bool {
        tree::tamper(&self.backing(), path, how)
    }
}

/// A case-insensitive, case-preserving filesystem (like APFS, NTFS or an SMB share), through
/// the local and the NFS backend: both find out with their probe, the whole suite passes, and
/// names that differ only by case are refused before any write.
struct CaseInsensitive {
    fs: SlowFs,
    nfs: bool,
}

impl CaseInsensitive {
    fn new(nfs: bool) -> Self {
        slowfs::require();
        let fs = SlowFs::temp(Config { case_insensitive: true, ..Config::default() }).expect("mount slowfs");
        CaseInsensitive { fs, nfs }
    }
}

impl Fixture for CaseInsensitive {
    fn backend(&self) -> Arc<dyn Backend> {
        let root = self.fs.path().join("target");
        if self.nfs {
            Arc::new(treesync_backend_nfs::open(root, Options::default()))
        } else {
            Arc::new(LocalBackend::new(root, Default::default()))
        }
    }
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.fs.backing().join("target"))
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        tree::put_file(&self.fs.backing().join("target"), path, content)
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &Path) -> bool {
        tree::replace_dir_by_symlink(&self.fs.backing().join("target"), path, target)
    }
    fn tamper(&self, path: &str, how: &tree::Tamper) -> bool {
        tree::tamper(&self.fs.backing().join("target"), path, how)
    }
}

macro_rules! case_insensitive_suite {
    ($nfs:expr) => {
        treesync_testkit::conformance_suite!(
            CaseInsensitive::new($nfs),
            skip = |case: &str| match case {
                "storage_faults_are_clear_and_recoverable"
                | "locked_target_is_refused"
                | "slow_and_reordered_ops_change_nothing_but_time"
                | "unmanaged_target_needs_force"
                | "verify_after_sync_is_clean"
                | "random_walk_matches_git" => {
                    Some("case does not matter here: the case-sensitive suites of the same backend run it")
                }
                _ => None,
            }
        );

        #[test]
        fn the_probe_finds_out() {
            let f = CaseInsensitive::new($nfs);
            let h = History::random(4, 1);
            let b = f.backend();
            assert!(b.capabilities().case_sensitive, "unknown before the first look");
            runtime().block_on(sync_to(&h.repo, &h.commits[0], &*b)).expect("sync");
            assert!(!b.capabilities().case_sensitive, "probed under the lock");
            let fresh = f.backend();
            runtime().block_on(fresh.prepare_target(false)).expect("prepare");
            assert!(!fresh.capabilities().case_sensitive, "probed on a managed target");
        }
    };
}

mod case_insensitive_local {
    use super::*;
    case_insensitive_suite!(false);
}

mod case_insensitive_nfs {
    use super::*;
    case_insensitive_suite!(true);
}

/// A case-sensitive filesystem is found to be one.
#[test]
fn the_probe_finds_a_case_sensitive_filesystem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = History::random(4, 1);
    let b = LocalBackend::new(dir.path().join("t"), Default::default());
    runtime().block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("sync");
    assert!(b.capabilities().case_sensitive);
}

/// The whole conformance suite through the mount (a machine without FUSE fails here, as the
/// suite cannot run; CI has it).
mod conformance_on_slowfs {
    use super::*;
    treesync_testkit::conformance_suite!(Slow::new(Options::default()));
}

/// A fresh mount (recording paths or not) with commit 0 of `h` in `t`, synced behind it (in
/// the backing directory, at the speed of a local disk): for the tests that only read it
/// through the mount.
fn synced_behind(rt: &tokio::runtime::Runtime, h: &History, record_paths: bool) -> SlowFs {
    let fs = slow(record_paths);
    rt.block_on(sync_to(&h.repo, &h.commits[0], &LocalBackend::new(fs.backing().join("t"), Default::default())))
        .expect("initial");
    fs
}

/// Random histories walked forward, backward and by far jumps through the mount, each step
/// compared with `git archive`, with the default budgets and with everything serialized.
#[test]
fn random_histories_match_git_on_the_slow_filesystem() {
    let fs = slow(false);
    let rt = runtime();
    for (seed, options) in [
        (300, Options::default()),
        (301, Options { lookup_window: Window::Fixed(1), scan_jobs: 1, write_window: Window::Fixed(1), fsync: false }),
        (302, Options { lookup_window: Window::Fixed(2), scan_jobs: 2, write_window: Window::Fixed(16), fsync: false }),
    ] {
        let h = History::random(seed, 16);
        let name = format!("walk{seed}");
        let backend = treesync_backend_nfs::open(fs.path().join(&name), options);
        let order = h.walk_order(&mut Rng::new(seed), 8, 3);
        rt.block_on(h.walk_dir(&backend, &fs.backing().join(&name), &order, seed));
    }
}

/// Verify right after a sync through the mount, with the default options: the scan keeps many
/// lookups in flight (as git's preloaded index does; a sync's probes stay at one), every file
/// is proven by the stat data the sync recorded, and the filesystem sees at most two requests
/// per file (LOOKUP and GETATTR: the stat) plus a handful per directory (no stat of the
/// directories: `d_type` says what they are).
#[test]
fn verify_scan_keeps_many_lookups_in_flight_and_two_requests_per_file() {
    let fs = slow(false);
    let rt = runtime();
    let n = 3_000;
    let h = History::wide(n, 10);
    let backend = treesync_backend_nfs::open(fs.path().join("t"), Options::default());
    assert_eq!(
        (backend.policy().lookups, backend.policy().scans),
        (16, 32),
        "the defaults: lookups adapt up to 16, the scan runs 32"
    );
    rt.block_on(sync_to(&h.repo, &h.commits[0], &backend)).expect("sync");
    fs.reset();
    let report = rt.block_on(verify_at(&h.repo, &backend, verify::Level::Stat)).expect("verify");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((report.hashed, report.proven_by_stat), (0, n as u64), "proven by the recorded stat data");
    let stats = fs.settled_stats();
    // wide_tree(3,000): 30 leaf directories in 3 top ones.
    let dirs = 33;
    assert!(stats.max_in_flight_of(Op::Lookup) >= 8, "the scan's lookups overlap: {stats}");
    assert!(stats.count(Op::Lookup) >= n as u64, "every file looked up: {stats}");
    let bound = 2 * n as u64 + 6 * dirs + 60;
    assert!(
        stats.total() <= bound,
        "{} requests for {n} files in {dirs} directories (bound {bound}): {stats}",
        stats.total()
    );
}

/// A verify that must read files (here `--level full`: every one) reads many at once, within
/// the budgets: with the defaults the filesystem sees several opens in flight; with one lookup
/// and one scan thread allowed, never two (the check can fail). Every file is hashed and
/// drift is still found in both.
#[test]
fn a_verify_that_hashes_reads_many_files_at_once_within_the_budget() {
    let rt = runtime();
    let n = 600;
    let h = History::wide(n, 6);
    let fs = synced_behind(&rt, &h, false);
    let victim = h
        .expected(0)
        .into_iter()
        .find_map(|(p, node)| matches!(node, treesync_testkit::tree::Node::File(..)).then_some(p))
        .expect("a file");
    // Same size, other bytes: only reading it tells.
    let on_disk = fs.backing().join("t").join(&victim);
    let mut bytes = std::fs::read(&on_disk).expect("read");
    bytes[0] ^= 1;
    std::fs::write(&on_disk, bytes).expect("drift");
    let mut seen = Vec::new();
    for options in [Options::default(), Options { lookup_window: Window::Fixed(1), scan_jobs: 1, ..Options::default() }]
    {
        let backend = treesync_backend_nfs::open(fs.path().join("t"), options);
        fs.reset();
        let report = rt.block_on(verify_at(&h.repo, &backend, verify::Level::Full)).expect("verify");
        assert_eq!(report.hashed, n as u64, "every file hashed: {report:?}");
        let drift: Vec<_> = report.drift.iter().map(|d| String::from_utf8_lossy(d.path()).into_owned()).collect();
        assert_eq!(drift, std::slice::from_ref(&victim), "the drifted file is found");
        let stats = fs.settled_stats();
        assert!(stats.count(Op::Open) >= n as u64, "every file opened: {stats}");
        seen.push(stats.max_in_flight_of(Op::Open));
    }
    assert!(seen[0] >= 4, "the defaults read files at once: {} opens in flight at most", seen[0]);
    assert_eq!(seen[1], 1, "one lookup allowed: one open in flight at a time");
}

/// With one lookup (and one scan thread) in flight, the filesystem never sees two lookups (or
/// two getattrs) at once during a verify, which is all lookups; with two allowed it does see
/// two (the check can fail).
#[test]
fn lookup_budget_holds_at_the_filesystem() {
    let rt = runtime();
    let h = History::wide(1_500, 8);
    let fs = synced_behind(&rt, &h, false);
    let mut seen = Vec::new();
    for lookups in [1, 2] {
        let backend = treesync_backend_nfs::open(
            fs.path().join("t"),
            Options { lookup_window: Window::Fixed(lookups), scan_jobs: lookups, ..Options::default() },
        );
        fs.reset();
        let report = rt.block_on(verify_at(&h.repo, &backend, verify::Level::Quick)).expect("verify");
        assert!(report.is_clean(), "{report:?}");
        let stats = fs.settled_stats();
        assert!(stats.count(Op::Lookup) >= 1_500, "every file looked up: {stats}");
        seen.push((stats.max_in_flight_of(Op::Lookup), stats.max_in_flight_of(Op::Getattr)));
    }
    assert_eq!(seen[0], (1, 1), "lookup-jobs 1: lookups in flight at once (lookup, getattr)");
    assert!(seen[1].0 >= 2, "lookup-jobs 2 lets lookups overlap: {:?}", seen[1]);
}

/// The write budget caps the creates in flight: 4 with `--write-jobs 4`; a wide budget lets
/// more through (so the check can fail); the adaptive budget ends up above its start of 8 on a
/// filesystem that serves everything in parallel.
#[test]
fn write_budget_holds_at_the_filesystem() {
    let fs = slow(false);
    let rt = runtime();
    let h = History::wide(600, 9);
    let mut seen = Vec::new();
    for (i, jobs) in [Window::Fixed(4), Window::Fixed(24)].into_iter().enumerate() {
        fs.reset();
        let backend = treesync_backend_nfs::open(
            fs.path().join(format!("w{i}")),
            Options { write_window: jobs, ..Options::default() },
        );
        rt.block_on(sync_to(&h.repo, &h.commits[0], &backend)).expect("sync");
        let stats = fs.settled_stats();
        assert!(stats.count(Op::Create) >= 600, "{stats}");
        seen.push((stats.max_in_flight_of(Op::Create), backend.writes().max_in_flight()));
        if let Some(d) = tree::diff(&h.expected(0), &tree::read_dir(&fs.backing().join(format!("w{i}")))) {
            panic!("target differs from git archive:\n{d}");
        }
    }
    assert!(seen[0].0 <= 4 && seen[0].1 == 4, "write-jobs 4: creates in flight {:?}", seen[0]);
    assert!(seen[1].0 > 4, "write-jobs 24 lets more than 4 creates overlap: {:?}", seen[1]);
}

/// A target path that is a symlink (to a directory on the mount) is refused, with the local
/// backend's words, and nothing lands where it points.
#[test]
fn a_target_that_is_a_symlink_is_refused_like_on_a_local_disk() {
    let f = Slow::new(Options::default());
    let rt = runtime();
    let h = History::random(63, 1);
    std::fs::create_dir(f.fs.backing().join("real")).expect("mkdir");
    std::os::unix::fs::symlink("real", f.fs.backing().join("link")).expect("symlink");
    let link = f.fs.path().join("link");
    let nfs = rt
        .block_on(sync_to(&h.repo, &h.commits[0], &treesync_backend_nfs::open(&link, Options::default())))
        .expect_err("refused")
        .to_string();
    let local = rt
        .block_on(sync_to(&h.repo, &h.commits[0], &LocalBackend::new(&link, Default::default())))
        .expect_err("refused");
    assert_eq!(nfs, local.to_string(), "one rule, one message");
    assert!(nfs.contains("it is a symlink (to real)"), "{nfs}");
    let written: Vec<_> = std::fs::read_dir(f.fs.backing().join("real")).expect("list").collect();
    assert!(written.is_empty(), "nothing written where the link points: {written:?}");
}

/// Two first syncs into a target directory that does not exist yet, started together through
/// the mount: making the directory is no error for the one that finds it made (no "File
/// exists"); one syncs, the other finds the lock (exit 3) or runs after it.
#[test]
fn concurrent_first_syncs_into_a_missing_target_on_a_mount() {
    treesync_testkit::race::concurrent_first_syncs_into_a_missing_target(12, 51, || Slow::new(Options::default()));
}

fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).expect("stat").ino()
}

/// Where the tests below plant, behind the mount, what a user of the server could: a target on
/// a fresh mount synced to the first of two random commits (from `seed`), and `outside`, a path
/// beside it in the backing directory (outside the tree it syncs).
struct Planting {
    rt: tokio::runtime::Runtime,
    h: History,
    f: Slow,
    outside: PathBuf,
}

impl Planting {
    fn new(seed: u64) -> Self {
        let (rt, h, f) = (runtime(), History::random(seed, 2), Slow::new(Options::default()));
        f.sync(&rt, &h, 0).expect("initial");
        let outside = f.fs.backing().join("outside");
        Planting { rt, h, f, outside }
    }
}

/// `.treesync/lock` as a hard link (made on the server side) to a file outside the tree: the
/// holder line is not written over that file's first bytes; the sync stops naming the path and
/// what to do, and runs once the link is removed.
#[test]
fn a_lock_file_that_is_a_hard_link_is_not_written_through_on_a_mount() {
    let Planting { rt, h, f, outside } = Planting::new(61);
    let secret = "SECRET-TOKEN and more bytes than a holder line has, so that an overwrite shows at once ".repeat(4);
    std::fs::write(&outside, &secret).expect("outside file");
    let lock = f.backing().join(".treesync/lock");
    std::fs::remove_file(&lock).expect("rm lock");
    std::fs::hard_link(&outside, &lock).expect("plant the lock");
    let result = f.sync(&rt, &h, 1);
    assert_eq!(std::fs::read_to_string(&outside).expect("read"), secret, "the outside file is unchanged");
    let err = result.expect_err("refused").to_string();
    assert!(err.contains(".treesync/lock") && err.contains("hard link") && err.contains("hint"), "{err}");
    assert!(!err.contains("SECRET-TOKEN"), "{err}");
    h.assert_matches(&f, 0, "nothing changed");
    std::fs::remove_file(&lock).expect("rm the planted lock");
    f.sync(&rt, &h, 1).expect("sync once it is gone");
    h.assert_matches(&f, 1, "after the planted lock was removed");
}

/// `.treesync/state` as a hard link (made on the server side) to a file outside the tree that
/// holds a copy of it: the state is written to a new file, the outside one is unchanged.
#[test]
fn a_state_file_that_is_a_hard_link_is_replaced_on_a_mount() {
    let Planting { rt, h, f, outside } = Planting::new(62);
    let state = f.backing().join(".treesync/state");
    std::fs::copy(&state, &outside).expect("copy state");
    let before = std::fs::read_to_string(&outside).expect("read");
    std::fs::remove_file(&state).expect("rm state");
    std::fs::hard_link(&outside, &state).expect("plant the state");
    f.sync(&rt, &h, 1).expect("sync");
    assert_eq!(std::fs::read_to_string(&outside).expect("read"), before, "the outside file is unchanged");
    assert_ne!(inode(&state), inode(&outside), "the state is a file of its own again");
    h.assert_matches(&f, 1, "after the planted state");
    let status = rt.block_on(treesync_core::sync::status(&*f.backend())).expect("status");
    assert_eq!(status.state.expect("state").synced.expect("synced").commit.to_string(), h.commits[1]);
}

/// A `.treesync` that is a symlink to a directory outside the tree, through the mount:
/// refused naming it as the local backend does, nothing written where it points.
#[test]
fn a_state_folder_that_is_a_symlink_is_refused_naming_it_on_a_mount() {
    let Planting { rt, h, f, outside } = Planting::new(65);
    std::fs::create_dir(&outside).expect("mkdir outside");
    rt.block_on(conformance::a_state_folder_that_is_a_symlink_is_refused(&f, &h, 1, &outside));
}

/// A verify of one slice of N costs about 1/N of a whole verify's requests at the filesystem,
/// and lists no directory of another slice (reaching its own costs lookups of ancestors).
#[test]
fn a_slice_of_n_costs_about_one_nth_of_a_whole_verify_at_the_filesystem() {
    use treesync_core::slice::Slice;
    let rt = runtime();
    // 64 directories of 100 files (dir000/sub00 … dir006/sub03).
    let h = History::wide(6_400, 11);
    let fs = synced_behind(&rt, &h, true);
    let backend = treesync_backend_nfs::open(fs.path().join("t"), Options::default());
    let limits = treesync_core::plan::Limits::default();
    fs.reset();
    let whole = rt
        .block_on(verify::verify(
            &h.repo,
            &backend,
            &verify::Options { level: verify::Level::Quick, limits, slice: None, ..Default::default() },
            &|_| {},
            &std::sync::atomic::AtomicBool::new(false),
        ))
        .expect("verify");
    assert!(whole.is_clean(), "{whole:?}");
    let full = fs.settled_stats().total();
    let leaves: Vec<String> = (0..64).map(|d| format!("dir{:03}/sub{:02}", d / 10, d % 10)).collect();
    let n = 4;
    let mut sum = 0;
    let mut costs = Vec::new();
    for k in 1..=n {
        let slice = Slice::new(k, n).expect("valid");
        fs.reset();
        let r = rt
            .block_on(verify::verify(
                &h.repo,
                &backend,
                &verify::Options { level: verify::Level::Quick, limits, slice: Some(slice), ..Default::default() },
                &|_| {},
                &std::sync::atomic::AtomicBool::new(false),
            ))
            .expect("verify a slice");
        assert!(r.is_clean(), "{r:?}");
        let stats = fs.settled_stats();
        let cost = stats.total();
        // Its share of the tree: the files of its directories.
        let mine = leaves.iter().filter(|l| slice.has_dir(l.as_bytes())).count();
        let share = mine as f64 / leaves.len() as f64;
        let expected = full as f64 * share;
        assert!(
            (cost as f64) <= expected * 1.15 + 50.0 && (cost as f64) >= expected * 0.85,
            "slice {slice} ({mine} of 64 directories) cost {cost} requests; the whole verify {full}"
        );
        // Another slice's directory may be stat'ed as an entry of its parent's listing, never
        // listed: nothing below it is touched.
        for other in leaves.iter().filter(|l| !slice.has_dir(l.as_bytes())) {
            let below = format!("t/{other}/");
            let touched = stats.paths.iter().find(|(_, p)| p.starts_with(&below));
            assert!(touched.is_none(), "slice {slice} touched {touched:?}, in another slice's directory");
        }
        costs.push((mine, cost));
        sum += cost;
    }
    eprintln!("whole verify: {full} requests; slices of {n} (directories, requests): {costs:?}; sum {sum}");
    assert!(costs.iter().all(|(mine, _)| *mine > 0), "every slice has directories: {costs:?}");
    assert!(sum as f64 <= full as f64 * 1.1, "the slices together cost about one whole verify: {sum} vs {full}");
}

/// What the probe tests below start from: a fresh mount with `d` directories under the target,
/// each holding `s` subdirectories (made in the backing directory), their relative paths
/// (subdirectories grouped by parent), and the NFS backend on the target with the defaults.
struct Dirs {
    fs: SlowFs,
    top: Vec<RelPath>,
    sub: Vec<RelPath>,
    backend: Budgets<NfsBackend>,
}

impl Dirs {
    fn new(d: usize, s: usize) -> Self {
        let fs = slow(false);
        let rel = |p: &str| RelPath::parse(p).expect("path");
        let (mut top, mut sub) = (Vec::new(), Vec::new());
        for i in 0..d {
            top.push(rel(&format!("d{i:03}")));
            for j in 0..s {
                std::fs::create_dir_all(fs.backing().join(format!("t/d{i:03}/s{j:02}"))).expect("mkdir");
                sub.push(rel(&format!("d{i:03}/s{j:02}")));
            }
        }
        let backend = treesync_backend_nfs::open(fs.path().join("t"), Options::default());
        Dirs { fs, top, sub, backend }
    }
}

/// Probe `dirs` with up to `n` probes in flight (as the executor does with the ops of a plan).
async fn probe_all(backend: &dyn Backend, dirs: &[RelPath], n: usize) {
    use futures::StreamExt;
    futures::stream::iter(dirs).for_each_concurrent(n, |d| async move { backend.probe(d).await.expect("probe") }).await;
}

/// Issue 18: directory lookups overlap, in one directory and across directories (a Linux
/// client holds the parent's lock shared for a lookup since 4.7), and no directory is looked up
/// twice when many ops below it ask for it at once.
#[test]
fn lookups_overlap_in_one_directory_and_none_is_looked_up_twice() {
    let rt = runtime();
    let Dirs { fs, top, sub, backend } = Dirs::new(12, 3);
    fs.reset();
    // Every subdirectory at once: twelve parents wanted in the root, three children in each.
    rt.block_on(probe_all(&backend, &sub, 64));
    let stats = fs.settled_stats();
    assert!(stats.max_lookups_in_one_dir >= 2, "lookups in one directory (the root) overlap:\n{stats}");
    assert!(stats.max_in_flight_of(Op::Lookup) >= 2, "lookups overlap:\n{stats}");
    assert!(stats.max_in_flight_of(Op::Lookup) <= 16, "within the lookup budget's ceiling:\n{stats}");
    // The root once, each directory once: nothing looked up twice.
    assert_eq!(stats.count(Op::Lookup), 1 + (top.len() + sub.len()) as u64, "{stats}");
    assert_eq!(backend.inner().dir_lookups(), (top.len() + sub.len()) as u64);
}

/// Issue 18: the default lookup budget adapts: on a mount that serves lookups in parallel
/// without their latency climbing, it widens past its start of 8 (and stays within its
/// ceiling), while a probe of a directory already open takes no place and gives no sample.
#[test]
fn the_lookup_budget_widens_on_a_mount_that_keeps_up() {
    let rt = runtime();
    let Dirs { fs: _mounted, top, sub, backend } = Dirs::new(48, 12);
    assert!(backend.lookups().is_adaptive(), "adaptive by default");
    // The parents first (all in the root), then their children, many at once.
    rt.block_on(probe_all(&backend, &top, 64));
    rt.block_on(probe_all(&backend, &sub, 64));
    // Again: all open, no lookups, no samples.
    let before = backend.lookups().history();
    rt.block_on(probe_all(&backend, &sub, 64));
    assert_eq!(backend.lookups().history(), before, "probes of open directories move nothing");
    let history = backend.lookups().history();
    assert_eq!(history[0], 8, "starts at 8: {history:?}");
    assert!(history.iter().any(|&l| l > 8), "widened: {history:?}");
    assert!(history.iter().all(|&l| l <= 16), "within the ceiling: {history:?}");
    assert!(backend.lookups().max_in_flight() > 8, "used the width: {history:?}");
    assert_eq!(backend.inner().dir_lookups(), (top.len() + sub.len()) as u64);
}
