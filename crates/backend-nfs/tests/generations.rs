//! Generations (`sync --atomic`) of `nfs://` targets against a real NFS server (nfs-ganesha
//! on 127.0.0.1, see `treesync_testkit::ganesha`): the target is a symlink switched by
//! SYMLINK + RENAME on the server, new generations are hard-link farms, a reused generation
//! costs the diff. Targets are read back from the exported directory on this machine,
//! following the link like any reader.
//!
//! The host suite runs here on both NFS hosts: [`ClientHost`] on the server, and the
//! [`FsHost`] of a NAS mount (the slow FUSE filesystem, as the mounted backend's tests use).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use treesync_backend_local::generations::FsHost;
use treesync_backend_nfs::client::{ClientHost, ClientOptions};
use treesync_core::generation::{self, CloneHow, Host, Switch};
use treesync_core::sync;
use treesync_testkit::conformance::History;
use treesync_testkit::conformance::host::HostFixture;
use treesync_testkit::ganesha::Ganesha;
use treesync_testkit::history;
use treesync_testkit::runtime;
use treesync_testkit::slowfs::{self, SlowFs};
use treesync_testkit::tree::{self, Node};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh directory `PARENT` of the export holding the target `PARENT/site`.
struct Place {
    server: &'static Ganesha,
    parent: String,
}

impl Place {
    fn new() -> Place {
        let server = Ganesha::shared();
        let parent = format!("g{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        std::fs::create_dir(server.dir().join(&parent)).expect("make the target's parent");
        Place { server, parent }
    }

    fn url(&self) -> String {
        self.server.url(&format!("{}/site", self.parent))
    }

    fn host(&self) -> ClientHost {
        ClientHost::open(&self.url(), ClientOptions::default()).expect("valid URL")
    }

    /// `PARENT` in the exported directory.
    fn dir(&self) -> PathBuf {
        self.server.dir().join(&self.parent)
    }

    /// The target as a reader sees it: the link followed.
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.dir().join("site"))
    }

    fn link(&self) -> Option<String> {
        std::fs::read_link(self.dir().join("site")).ok().map(|p| p.to_string_lossy().into_owned())
    }

    fn slot(&self, name: &str) -> PathBuf {
        self.dir().join(".site.treesync").join(name)
    }
}

impl HostFixture for Place {
    fn host(&self) -> Arc<dyn Host> {
        Arc::new(Place::host(self))
    }
    fn read_target(&self) -> BTreeMap<String, Node> {
        self.read()
    }
    fn exchange(&self) -> bool {
        false
    }
}

/// `nfs://`: the host on the server, through the built-in client.
mod host_client {
    use super::*;
    treesync_testkit::host_suite!(
        Place::new(),
        skip = |case: &str| {
            (case == "a_switch_to_a_missing_slot_is_refused").then_some(
            "the client makes the link without looking the slot up (a LOOKUP per switch saved): generation::sync switches only to a slot it has just prepared"
        )
        }
    );
}

/// A target `site` on a NAS mount (the slow FUSE filesystem, no latency): the directory
/// host with the mounted backend, switched by links (as `open` makes it for a mount).
struct Mounted {
    fs: SlowFs,
}

impl Mounted {
    fn new() -> Mounted {
        slowfs::require();
        Mounted { fs: SlowFs::temp(slowfs::Config::default()).expect("mount slowfs") }
    }
}

impl HostFixture for Mounted {
    fn host(&self) -> Arc<dyn Host> {
        let opener: treesync_backend_local::generations::Opener =
            Arc::new(|path| Arc::new(treesync_backend_nfs::open(path, treesync_backend_nfs::Options::default())));
        Arc::new(FsHost::new(self.fs.path().join("site"), opener).without_exchange())
    }
    fn read_target(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.fs.path().join("site"))
    }
    fn exchange(&self) -> bool {
        false
    }
    fn hold(&self, slot: &str) -> Option<Box<dyn Send>> {
        let path = self.fs.path().join(".site.treesync").join(slot);
        Some(Box::new(std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))))
    }
}

mod host_mounted {
    use super::*;
    treesync_testkit::host_suite!(Mounted::new());
}

fn options(keep: usize) -> generation::Options {
    generation::Options {
        sync: sync::Options { backend_name: "test".into(), ..Default::default() },
        keep,
        grace: Duration::ZERO,
        switch: None,
        max_generations: None,
    }
}

/// Where each test below starts: a runtime, a fresh place and a host on it.
fn start() -> (tokio::runtime::Runtime, Place, ClientHost) {
    let place = Place::new();
    let host = place.host();
    (runtime(), place, host)
}

/// An atomic sync to commit `i` of `h` through `host`, keeping `keep` generations.
fn atomic(rt: &tokio::runtime::Runtime, h: &History, i: usize, host: &ClientHost, keep: usize) -> generation::Outcome {
    rt.block_on(generation::sync(&h.repo, &h.commits[i], host, &options(keep), &|_| {}, &AtomicBool::new(false)))
        .unwrap_or_else(|e| panic!("atomic sync to commit {i}: {e}"))
}

fn assert_tree(h: &History, i: usize, got: &BTreeMap<String, Node>, context: &str) {
    if let Some(d) = tree::diff(&h.expected(i), got) {
        panic!("{context}: the target differs from `git archive` of commit {i}:\n{d}");
    }
}

fn calls(host: &ClientHost) -> BTreeMap<&'static str, u64> {
    host.calls().into_iter().collect()
}

fn delta(after: &BTreeMap<&'static str, u64>, before: &BTreeMap<&'static str, u64>) -> BTreeMap<&'static str, u64> {
    after.iter().map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0))).filter(|(_, v)| *v > 0).collect()
}

fn same_inode(a: &Path, b: &Path) -> bool {
    let (a, b) = (std::fs::metadata(a).expect("a"), std::fs::metadata(b).expect("b"));
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Three atomic syncs of a 1,000-file tree over `nfs://`: the first makes a generation, the
/// second starts one as a hard-link farm of the first, the third (grace 0) reuses the first by
/// its diff — O(K) NFS calls for K changed paths, not O(N). After each, the target (the link
/// followed, through the server's exported directory) equals `git archive` of the commit, and
/// the generation retired by a switch still holds its own commit. Cleanup past `--keep`
/// removes the retired generation on the server.
#[test]
fn atomic_syncs_switch_whole_generations_and_reuse_one_at_the_cost_of_the_diff() {
    let (rt, place, host) = start();
    let base = history::wide_tree(1000, 7);
    let (second, _) = history::change_some(&base, 6, 2, 2, 8);
    let (third, changed) = history::change_some(&second, 6, 2, 2, 9);
    let h = History::from_trees(&[base, second, third]);

    // First: a new generation g1, the target a link to it.
    let first = atomic(&rt, &h, 0, &host, 2);
    assert_eq!((first.switch, first.switched, first.prepared.as_deref()), (Switch::Symlink, true, Some("g1")));
    assert!(first.cloned.is_none() && !first.reused, "{first:?}");
    assert_eq!(place.link().as_deref(), Some(".site.treesync/g1"));
    assert_tree(&h, 0, &place.read(), "first atomic sync");

    // Second: g2 starts as a hard-link farm of g1, brought to commit 1 by the diff.
    let second = atomic(&rt, &h, 1, &host, 2);
    let cloned = second.cloned.expect("a new generation is cloned from the current one");
    assert_eq!(cloned.how, CloneHow::Hardlink, "{cloned:?}");
    // The slot, dir000 and its 10 subdirectories (1,000 files spread over 10 directories).
    assert_eq!((cloned.entries, cloned.dirs, cloned.bytes_copied), (1000, 12, 0), "{cloned:?}");
    assert_eq!((second.prepared.as_deref(), second.retired.as_deref()), (Some("g2"), Some("g1")));
    assert_eq!(place.link().as_deref(), Some(".site.treesync/g2"));
    assert_tree(&h, 1, &place.read(), "second atomic sync (clone)");
    assert_tree(&h, 0, &tree::read_dir(&place.slot("g1")), "the retired generation keeps its commit");
    let unchanged = "dir000/sub01/file000001.txt";
    assert!(same_inode(&place.slot("g1").join(unchanged), &place.slot("g2").join(unchanged)), "a hard link");
    let state = ".treesync/state";
    assert!(
        !same_inode(&place.slot("g1").join(state), &place.slot("g2").join(state)),
        "the state is a file of its own"
    );

    // Third: g1 is past the grace period (0) and is brought from commit 0 to commit 2.
    let before = calls(&host);
    let third = atomic(&rt, &h, 2, &host, 2);
    let cost = delta(&calls(&host), &before);
    assert!(third.reused && third.cloned.is_none(), "{third:?}");
    assert_eq!((third.prepared.as_deref(), third.retired.as_deref()), (Some("g1"), Some("g2")));
    assert_eq!(place.link().as_deref(), Some(".site.treesync/g1"));
    assert_tree(&h, 2, &place.read(), "third atomic sync (reuse)");
    assert_tree(&h, 1, &tree::read_dir(&place.slot("g2")), "the generation retired by the third sync");
    // K: the paths that differ between commit 0 (what g1 held) and commit 2.
    let k = {
        let (a, b) = (h.expected(0), h.expected(2));
        let paths: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        paths.into_iter().filter(|p| a.get(*p) != b.get(*p)).count() as u64
    };
    assert!(k >= changed.len() as u64 && k < 40, "K = {k}");
    let total: u64 = cost.values().sum();
    eprintln!("third atomic sync, N=1000, K={k}: {total} calls {cost:?}");
    assert!(total <= 8 * k + 60, "O(K): {total} calls for K={k} on a 1,000-file tree: {cost:?}");
    assert!(total < 1000 / 4, "not O(N): {total} calls for N=1000: {cost:?}");
    assert_eq!(cost.get("LINK"), None, "no copy of the tree: {cost:?}");
    assert!(cost.get("READDIRPLUS").copied().unwrap_or(0) <= 2, "only the home is listed: {cost:?}");
    assert!(cost.get("LOOKUP").copied().unwrap_or(0) <= 2 * k + 40, "no lookup of unchanged paths: {cost:?}");

    // Nothing to do: the same commit again switches nothing.
    let again = atomic(&rt, &h, 2, &host, 2);
    assert!(!again.switched && again.removed.is_empty(), "{again:?}");

    // Cleanup: with --keep 1 the retired g2 is removed from the server.
    let cleaned = atomic(&rt, &h, 2, &host, 1);
    assert_eq!(cleaned.removed, ["g2"], "{cleaned:?}");
    assert!(!place.slot("g2").exists(), "g2 is gone from the server");
    assert_eq!(rt.block_on(host.slots()).expect("slots"), ["g1"]);
    assert_tree(&h, 2, &place.read(), "after cleanup");
}

/// A target that is a real directory synced the ordinary way becomes atomic (it is renamed
/// into the home and a link takes its name), and goes back to a real directory with `leave`.
#[test]
fn a_directory_target_becomes_atomic_and_back() {
    let (rt, place, host) = start();
    let h = History::random(21, 3);
    let target = treesync_backend_nfs::client::open(&place.url(), ClientOptions::default()).expect("valid URL");
    rt.block_on(treesync_testkit::conformance::sync_to(&h.repo, &h.commits[0], &target)).expect("ordinary sync");
    assert!(std::fs::symlink_metadata(place.dir().join("site")).expect("site").is_dir());

    let first = atomic(&rt, &h, 1, &host, 2);
    assert!(first.switched && first.cloned.is_some(), "the new generation starts as a copy of the directory");
    let displaced = first.retired.clone().expect("the directory is kept as a retired generation");
    assert_eq!(place.link(), Some(format!(".site.treesync/{}", first.prepared.clone().expect("prepared"))));
    assert_tree(&h, 1, &place.read(), "atomic after ordinary");
    assert_tree(&h, 0, &tree::read_dir(&place.slot(&displaced)), "the directory moved into the home");

    // Another process leaves generations: the home is removed under the first host.
    let other = place.host();
    let left = rt.block_on(generation::leave(&other, &options(1))).expect("leave");
    assert!(left.restored && left.home_removed, "{left:?}");
    assert!(std::fs::symlink_metadata(place.dir().join("site")).expect("site").is_dir(), "a real directory again");
    assert!(!place.dir().join(".site.treesync").exists(), "the home is gone");
    assert_tree(&h, 1, &place.read(), "after leaving generations");

    // The first host (a long-lived watch) makes the target atomic again in a new home.
    let back = atomic(&rt, &h, 2, &host, 2);
    assert!(back.switched, "{back:?}");
    assert_tree(&h, 2, &place.read(), "atomic again with a host that knew the removed home");
}

/// A target at the root of its export has no parent inside the export for its generations.
#[test]
fn a_target_at_the_export_root_is_refused_with_a_hint() {
    let rt = runtime();
    let server = Ganesha::shared();
    let host = ClientHost::open(&server.url(""), ClientOptions::default()).expect("valid URL");
    let e = rt.block_on(host.at_target()).expect_err("the export root").to_string();
    assert!(e.contains("root of its export") && e.contains("hint: "), "{e}");
}

/// Removing a retired generation removes the symlinks in it and never what they point to.
#[test]
fn removing_a_generation_never_follows_a_symlink() {
    let (rt, place, host) = start();
    let h = History::random(5, 2);
    atomic(&rt, &h, 0, &host, 2);
    atomic(&rt, &h, 1, &host, 2);
    // Planted in the retired g1: links to a directory and a file outside it.
    let outside = place.dir().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    std::fs::write(outside.join("precious"), b"keep me").expect("precious");
    std::os::unix::fs::symlink(&outside, place.slot("g1").join("to-dir")).expect("link to a directory");
    std::os::unix::fs::symlink(outside.join("precious"), place.slot("g1").join("to-file")).expect("link to a file");
    let cleaned = atomic(&rt, &h, 1, &host, 1);
    assert_eq!(cleaned.removed, ["g1"], "{cleaned:?}");
    assert!(!place.slot("g1").exists(), "g1 is gone");
    assert_eq!(std::fs::read(outside.join("precious")).expect("still there"), b"keep me");
    assert_tree(&h, 1, &place.read(), "after cleanup");
}

/// What a killed run leaves in the home — a generation cut short while being copied, a
/// removal cut short (`trash-*`), the link of a switch that never happened — is cleaned up by
/// the next run, which ends with the target on the new commit.
#[test]
fn leftovers_of_a_killed_run_are_cleaned_up_by_the_next() {
    let (rt, place, host) = start();
    let h = History::random(9, 2);
    atomic(&rt, &h, 0, &host, 2);
    let home = place.dir().join(".site.treesync");
    // A copy of g1 cut short: some directories and files, no state, recorded as cloning.
    let record_path = home.join("generations");
    let mut record = generation::Record::parse(&std::fs::read(&record_path).expect("record")).expect("parses");
    let cut = record.new_slot();
    std::fs::create_dir_all(home.join(&cut).join("a/b")).expect("a partial copy");
    std::fs::write(home.join(&cut).join("a/b/f"), b"partial").expect("a file");
    record.slots.insert(cut.clone(), generation::SlotRecord { preparing: true, cloning: true, ..Default::default() });
    std::fs::write(&record_path, record.to_bytes()).expect("record");
    // A removal cut short, and the link of a switch that never happened.
    std::fs::create_dir_all(home.join("trash-g9/x")).expect("trash");
    std::os::unix::fs::symlink(".site.treesync/g9", home.join("tmp/link")).expect("a stale link");

    let next = atomic(&rt, &h, 1, &host, 2);
    assert!(next.switched, "{next:?}");
    assert!(next.removed.contains(&cut) && next.removed.iter().any(|r| r == "trash-g9"), "{next:?}");
    assert_tree(&h, 1, &place.read(), "after a killed run's leftovers");
    let left: Vec<String> = std::fs::read_dir(&home)
        .expect("home")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("trash-"))
        .collect();
    assert!(left.is_empty(), "no trash left: {left:?}");
    assert!(!home.join("tmp/link").exists() && std::fs::symlink_metadata(home.join("tmp/link")).is_err());
}
