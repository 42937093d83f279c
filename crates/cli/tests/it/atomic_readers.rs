//! The reader test of `sync --atomic` (issue 16): a reader thread resolves the target once per
//! pass and reads every file and symlink of the tree relative to that directory
//! (`treesync_testkit::snapshots`), while `treesync sync` switches the target back and forth
//! between two commits that differ in 442 paths (content, modes, adds, deletes, symlinks,
//! file↔symlink, directory↔file). With `--atomic` every snapshot equals `git archive` of one
//! commit over 60 switches, in both switch modes; without it the same reader sees mixed trees.

use std::path::Path;
use std::process::Command;

use treesync_testkit::cli::temp_target;
use treesync_testkit::conformance::History;
use treesync_testkit::snapshots::{self, Race, Snapshot};

/// Switches each atomic race makes (the issue asks for at least 50).
const SWITCHES: u64 = 60;

fn sync(target: &Path, repo: &Path, commit: &str, extra: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["sync", "-q", "--repo"])
        .arg(repo)
        .args(["--ref", commit, "--target"])
        .arg(target)
        .args(extra)
        .output()
        .expect("treesync runs");
    assert!(o.status.success(), "treesync sync {extra:?} failed: {}", String::from_utf8_lossy(&o.stderr));
}

fn setup() -> (History, Vec<Snapshot>) {
    let h = History::from_trees(&snapshots::two_trees(1));
    let expected: Vec<Snapshot> = (0..2).map(|i| snapshots::from_nodes(&h.expected(i))).collect();
    assert_ne!(expected[0], expected[1]);
    (h, expected)
}

/// The race on a fresh local target synced with `extra`, after an initial sync to commit 0;
/// and whether the target was a symlink at the end.
fn local_race(extra: &[&str], switches: u64) -> (Race, bool) {
    let (h, expected) = setup();
    let (_dir, target) = temp_target("site");
    let repo = h.bare.path.clone();
    sync(&target, &repo, &h.commits[0], extra);
    let race = snapshots::race(&target, &expected, switches, |i| sync(&target, &repo, &h.commits[i], extra));
    eprintln!("{extra:?}: {race:?}");
    let link = std::fs::symlink_metadata(&target).expect("the target").file_type().is_symlink();
    (race, link)
}

fn assert_whole(race: &Race, switches: u64) {
    let r = &race.readings;
    assert_eq!(race.syncs, switches);
    assert_eq!(r.mixed, 0, "{} of {} passes saw a mixed tree: {:#?}", r.mixed, r.passes, r.examples);
    // The reader really followed the switches (a reader that never saw one proves nothing).
    assert!(r.switches_seen >= switches / 2, "the reader saw only {} of {switches} switches: {r:?}", r.switches_seen);
    assert!(r.per_commit.iter().all(|&n| n > 0), "{r:?}");
}

#[test]
fn atomic_symlink_readers_never_see_a_mixed_tree_over_60_switches() {
    let (race, link) = local_race(&["--atomic", "--grace", "0", "--switch", "symlink"], SWITCHES);
    assert_whole(&race, SWITCHES);
    assert!(link, "the target is a symlink to the current generation");
}

#[test]
fn atomic_exchange_readers_never_see_a_mixed_tree_over_60_switches() {
    let (race, link) = local_race(&["--atomic", "--grace", "0", "--switch", "exchange"], SWITCHES);
    assert_whole(&race, SWITCHES);
    assert!(!link, "the target stays a real directory");
}

/// The same reader on a target synced in place sees trees of neither commit: the test above
/// can fail.
#[test]
fn without_atomic_the_same_reader_sees_mixed_trees() {
    let (race, _) = local_race(&[], 20);
    assert_eq!(race.syncs, 20);
    assert!(race.readings.mixed > 0, "no mixed tree over 20 in-place syncs: {:?}", race.readings);
}

/// The NAS testbed: the slow FUSE filesystem (20 µs per request, kernel caches off, like NFS
/// with `actimeo=0`) with `--backend nfs --atomic --grace GRACE --switch SWITCH`; the reader
/// reads through the mount. 60 switches, no mixed tree. Answers whether the target ended a
/// symlink.
fn nas_race(switch: &str, grace: &str) -> bool {
    use treesync_testkit::slowfs::{self, Config, SlowFs};
    slowfs::require();
    let fs = SlowFs::temp(Config { meta_latency: std::time::Duration::from_micros(20), ..Config::default() })
        .expect("mount slowfs");
    let (h, expected) = setup();
    let target = fs.path().join("site");
    let repo = h.bare.path.clone();
    // 60 switches within the grace period: as many generations (the default cap, --keep + 8,
    // would refuse the 11th sync until the first is past its grace period).
    let extra = ["--backend", "nfs", "--atomic", "--grace", grace, "--switch", switch, "--max-generations", "100"];
    sync(&target, &repo, &h.commits[0], &extra);
    let race = snapshots::race(&target, &expected, SWITCHES, |i| sync(&target, &repo, &h.commits[i], &extra));
    eprintln!("nas, {switch}, grace {grace}: {race:?}");
    assert_whole(&race, SWITCHES);
    std::fs::symlink_metadata(&target).expect("the target").file_type().is_symlink()
}

/// On the NAS testbed the grace period (30 s, far above a pass of about 1.5 s, and above one
/// under CI load) protects the reader, as docs/atomic.md says it must on network filesystems:
/// with `--grace 0` the held-open scan alone missed a reader 2 times in 55 passes on a loaded CI
/// machine (a reader that resolved the link, then was descheduled before the scan saw its
/// descriptor). Each sync then starts a new generation (a hardlink farm) until the oldest is
/// past the grace period.
#[test]
fn atomic_symlink_on_the_nas_testbed_readers_never_see_a_mixed_tree_over_60_switches() {
    assert!(nas_race("symlink", "30s"), "the target is a symlink");
}

/// `nfs://` on a real nfs-ganesha (symlink mode: SYMLINK then RENAME over the old link on the
/// server); the reader reads the exported directory on this machine. Held-open detection is
/// local only, so the grace (2 s) is what keeps a generation a reader is in from being reused:
/// it is far longer than a pass (a few milliseconds here). 60 switches, no mixed tree.
#[test]
fn atomic_over_nfs_url_readers_never_see_a_mixed_tree_over_60_switches() {
    let server = treesync_testkit::ganesha::Ganesha::shared();
    let (h, expected) = setup();
    let sub = format!("atomic-readers-{}", std::process::id());
    let url = server.url(&sub);
    let target = server.dir().join(&sub);
    let repo = h.bare.path.clone();
    let extra = ["--atomic", "--grace", "2s", "--switch", "symlink", "--max-generations", "100"];
    let sync_url = |commit: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_treesync"))
            .args(["sync", "-q", "--repo"])
            .arg(&repo)
            .args(["--ref", commit, "--target", &url])
            .args(extra)
            .output()
            .expect("treesync runs");
        assert!(o.status.success(), "treesync sync {url} failed: {}", String::from_utf8_lossy(&o.stderr));
    };
    sync_url(&h.commits[0]);
    assert!(std::fs::symlink_metadata(&target).expect("the target").file_type().is_symlink());
    let race = snapshots::race(&target, &expected, SWITCHES, |i| sync_url(&h.commits[i]));
    eprintln!("nfs://: {race:?}");
    assert_whole(&race, SWITCHES);
}

/// `--switch auto` on the FUSE testbed with `--backend nfs`: the probe finds that
/// `RENAME_EXCHANGE` works (the FUSE passthrough hands it to the backing directory), the sync
/// says so in `--json`, and the target is a real directory holding the whole commit.
#[test]
fn on_the_nas_testbed_auto_and_exchange_switch_by_symlink() {
    use treesync_testkit::slowfs::{self, Config, SlowFs};
    slowfs::require();
    let fs = SlowFs::temp(Config::default()).expect("mount slowfs");
    let (h, expected) = setup();
    let target = fs.path().join("site");
    let o = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["sync", "--json", "--backend", "nfs", "--atomic", "--switch", "exchange", "--repo"])
        .arg(&h.bare.path)
        .args(["--ref", &h.commits[0], "--target"])
        .arg(&target)
        .output()
        .expect("treesync runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["backend"], "nfs", "{v}");
    // The FUSE testbed passes RENAME_EXCHANGE through, but names files by path, so a reader's
    // directory handle would resolve names in the other generation after an exchange (seen: a
    // pass mixing the commits with a 30 s grace): on network mounts treesync switches by
    // symlink, and says so when exchange was asked for.
    assert_eq!(v["atomic"]["switch"], "symlink", "{v}");
    let notes = v["atomic"]["notes"].to_string();
    assert!(notes.contains("switching with a symlink instead"), "{v}");
    assert!(std::fs::symlink_metadata(&target).expect("the target").is_symlink());
    assert_eq!(snapshots::take(&target).expect("a snapshot"), expected[0]);
}
