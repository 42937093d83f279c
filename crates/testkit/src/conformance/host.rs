//! The conformance suite of [`Host`]: what the trait documents, checked on every host — a
//! local disk with `RENAME_EXCHANGE` and with the symlink switch, a NAS mount, `nfs://` and
//! memory.
//!
//! A host's test file provides a [`HostFixture`] and calls
//! [`host_suite!`](crate::host_suite), which makes one test per case ([`HOST_CASES`]). Slots are
//! filled by syncing a small history into the backend the host opens for them
//! ([`Host::open`]), and read back through it; the target is read as a reader reads it (a link
//! followed), by the fixture. Each case uses a fresh target and a tree of a few entries: the
//! whole suite costs about a second per host.
//!
//! What `generation::sync` makes of these steps (which slot is reused, crashes at every step,
//! counts of ops) is checked in the generation tests of core and of each backend; this suite is
//! about the host's own calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use treesync_core::backend::{Error, FoundKind};
use treesync_core::generation::{At, AtTarget, CloneHow, Host, Switch};
use treesync_core::state::Holder;
use treesync_core::{Backend, RelPath};

use super::{History, sync_to};
use crate::history::{self, Entry, Model};
use crate::tree::{self, Node};

/// One target of the host under test, in a place of its own.
pub trait HostFixture: Send + Sync {
    /// A host of the target (a fresh handle each call; all share the target and its home).
    fn host(&self) -> Arc<dyn Host>;
    /// What a reader resolving the target path now reads, a link followed (empty: nothing
    /// there, or a dangling link). `.treesync` is left out.
    fn read_target(&self) -> BTreeMap<String, Node>;
    /// Whether the filesystem swaps directories atomically: [`Host::can_exchange`] must say so.
    fn exchange(&self) -> bool;
    /// Hold the slot open as a reader would (a descriptor in it) until the value is dropped;
    /// `None` where the host cannot know ([`Host::held`] then answers `None`).
    fn hold(&self, _slot: &str) -> Option<Box<dyn Send>> {
        None
    }
}

/// Two commits of a few entries each: a file, an executable, a symlink, a nested directory;
/// the second changes a file, adds one deep and removes the executable.
fn history() -> History {
    let a = Model::of(&[("a.txt", "one\n"), ("d/e/f.txt", "deep\n")])
        .with([("run", history::executable("#!/bin/sh\n")), ("link", Entry::Link { target: "a.txt".into() })]);
    let mut b = a.with([("a.txt", history::file("two\n")), ("d/new.txt", history::file("new\n"))]);
    b.0.remove("run");
    History::from_trees(&[a, b])
}

/// Make `HOME/slot` hold commit `i` of `h`: claimed, then synced through the host's backend.
async fn fill(host: &dyn Host, slot: &str, h: &History, i: usize) {
    host.claim_slot(slot).await.unwrap_or_else(|e| panic!("{host}: claim {slot}: {e}"));
    sync_to(&h.repo, &h.commits[i], &*host.open(&At::Slot(slot.into())))
        .await
        .unwrap_or_else(|e| panic!("{host}: sync {slot} to commit {i}: {e}"));
}

/// What `HOME/slot` holds, read through the backend the host opens for it (`None`: no such
/// slot).
async fn read_slot(host: &dyn Host, slot: &str) -> Option<BTreeMap<String, Node>> {
    if !host.slots().await.expect("slots").iter().any(|s| s == slot) {
        return None;
    }
    Some(read_backend(&*host.open(&At::Slot(slot.into()))).await)
}

/// A backend's tree as [`Node`]s: its scan, and the bytes of each file.
async fn read_backend(b: &dyn Backend) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    for found in b.scan(4).await.unwrap_or_else(|e| panic!("scan {b}: {e}")) {
        let path = String::from_utf8(found.path).expect("UTF-8 paths");
        let node = match found.kind {
            FoundKind::Dir => Node::Dir,
            FoundKind::Link { target, .. } => Node::Link(target),
            FoundKind::File { executable, .. } => {
                let rel = RelPath::parse(&path).expect("a path the scan found");
                Node::File(b.read_file(&rel).await.expect("read a file"), executable.unwrap_or(false))
            }
            FoundKind::Other => panic!("{b}: {path} is neither a file, a link nor a directory"),
        };
        out.insert(path, node);
    }
    out
}

/// Panic with a diff unless `got` is commit `i` of `h`.
fn assert_commit(h: &History, i: usize, got: Option<BTreeMap<String, Node>>, context: &str) {
    let got = got.unwrap_or_else(|| panic!("{context}: not there"));
    if let Some(d) = tree::diff(&h.expected(i), &got) {
        panic!("{context}: differs from `git archive` of commit {i}:\n{d}");
    }
}

/// The slot a link at the target names, or what else is there.
async fn linked_slot(host: &dyn Host) -> Result<String, AtTarget> {
    match host.at_target().await.expect("at target") {
        AtTarget::Link { slot: Some(s), .. } => Ok(s),
        other => Err(other),
    }
}

/// A home whose slot `g1` holds commit 0 of [`history`], the target a link to it.
async fn linked_to_g1(f: &dyn HostFixture) -> (History, Arc<dyn Host>) {
    let h = history();
    let host = f.host();
    host.create_home().await.expect("create home");
    fill(&*host, "g1", &h, 0).await;
    host.switch("g1", Switch::Symlink, "unused").await.expect("switch");
    (h, host)
}

/// The home is made (twice is fine), holds no slot at first (its `tmp`, lock and record are
/// not slots), says whether it can exchange as the filesystem can, and is removed again.
pub async fn the_home_is_made_and_removed(f: &dyn HostFixture) {
    let host = f.host();
    let name = host.home_name();
    assert!(name.starts_with('.') && name.ends_with(".treesync"), "{host}: home {name}");
    assert!(!host.home_exists().await.expect("home exists"), "{host}: no home before the first call");
    assert_eq!(host.at_target().await.expect("at target"), AtTarget::Missing, "{host}");
    host.create_home().await.expect("create home");
    host.create_home().await.expect("create home again");
    assert!(host.home_exists().await.expect("home exists"), "{host}");
    assert_eq!(host.can_exchange().await.expect("can exchange"), f.exchange(), "{host}");
    let guard = host.lock(&Holder::this_process()).await.expect("lock");
    host.store_record(b"record").await.expect("store record");
    host.unlock(guard).await.expect("unlock");
    assert_eq!(host.slots().await.expect("slots"), Vec::<String>::new(), "{host}: no slot yet");
    host.remove_home().await.expect("remove home");
    assert!(!host.home_exists().await.expect("home exists"), "{host}: removed");
    assert_eq!(host.load_record().await.expect("load record"), None, "{host}: the record went with it");
}

/// The record reads back as stored, and a store replaces it whole (a shorter record leaves
/// nothing of the longer one).
pub async fn the_record_reads_back_as_stored(f: &dyn HostFixture) {
    let host = f.host();
    host.create_home().await.expect("create home");
    assert_eq!(host.load_record().await.expect("load"), None, "{host}: no record yet");
    for bytes in [&b"first record\nof two lines\n"[..], b"2\n", b""] {
        host.store_record(bytes).await.expect("store");
        assert_eq!(host.load_record().await.expect("load").as_deref(), Some(bytes), "{host}");
        assert_eq!(f.host().load_record().await.expect("load").as_deref(), Some(bytes), "{host}: another handle");
    }
}

/// The home's lock keeps a second holder out ([`Error::Locked`]) until the first releases it.
pub async fn the_lock_keeps_a_second_holder_out(f: &dyn HostFixture) {
    let (a, b) = (f.host(), f.host());
    let me = Holder::this_process();
    a.create_home().await.expect("create home");
    let guard = a.lock(&me).await.expect("first lock");
    match b.lock(&me).await {
        Err(Error::Locked { .. }) => {}
        Err(e) => panic!("{b}: expected Locked, got {e}"),
        Ok(_) => panic!("{b}: a second holder got the lock"),
    }
    a.unlock(guard).await.expect("unlock");
    let again = b.lock(&me).await.expect("free again");
    b.unlock(again).await.expect("unlock");
}

/// A clone holds the same tree and the same state, but none of the state folder's other
/// files; a clone over an existing slot is refused.
pub async fn a_clone_is_the_same_tree_with_the_same_state(f: &dyn HostFixture) {
    let h = history();
    let host = f.host();
    host.create_home().await.expect("create home");
    fill(&*host, "g1", &h, 0).await;
    let source = host.open(&At::Slot("g1".into()));
    let aux = source.capabilities().aux_store;
    if aux {
        source.store_aux("index", b"of g1's inodes").await.expect("store aux");
    }
    let cloned = host.clone_tree(&At::Slot("g1".into()), "g2").await.expect("clone");
    assert_commit(&h, 0, read_slot(&*host, "g2").await, &format!("{host}: the clone"));
    assert_commit(&h, 0, read_slot(&*host, "g1").await, &format!("{host}: the source"));
    let entries = h.expected(0).values().filter(|n| !matches!(n, Node::Dir)).count() as u64;
    assert_eq!(cloned.entries, entries, "{host}: files and links made: {cloned:?}");
    assert!(cloned.how == CloneHow::Copy || cloned.bytes_copied == 0, "{host}: {cloned:?}");
    let copy = host.open(&At::Slot("g2".into()));
    let state = copy.load_state().await.expect("load state");
    assert!(state.is_some(), "{host}: the clone has a state");
    assert_eq!(state, source.load_state().await.expect("load state"), "{host}: the same state");
    if aux {
        assert_eq!(copy.load_aux("index").await.expect("load aux"), None, "{host}: only the state is copied");
    }
    assert!(host.clone_tree(&At::Slot("g1".into()), "g2").await.is_err(), "{host}: a clone over a slot");
    assert_commit(&h, 0, read_slot(&*host, "g2").await, &format!("{host}: the clone, untouched"));
}

/// [`Switch::Symlink`] makes the target a link to the slot: from nothing, from a link to
/// another slot (which is named as the previous one), and from a real directory, which is
/// moved to the slot named `displaced`. The target reads the slot's commit after each.
pub async fn a_link_switch_points_the_target_at_the_slot(f: &dyn HostFixture) {
    let h = history();
    let host = f.host();
    host.create_home().await.expect("create home");
    fill(&*host, "g1", &h, 0).await;
    fill(&*host, "g2", &h, 1).await;
    let s = host.switch("g1", Switch::Symlink, "unused").await.expect("switch from nothing");
    assert_eq!(s.previous, None, "{host}");
    assert_eq!(linked_slot(&*host).await, Ok("g1".into()), "{host}");
    assert_commit(&h, 0, Some(f.read_target()), &format!("{host}: the target, linked to g1"));
    let s = host.switch("g2", Switch::Symlink, "unused").await.expect("switch from a link");
    assert_eq!(s.previous.as_deref(), Some("g1"), "{host}");
    assert_commit(&h, 1, Some(f.read_target()), &format!("{host}: the target, linked to g2"));
    assert_eq!(host.slots().await.expect("slots"), ["g1", "g2"], "{host}: both kept");

    // Leaving generations: the slot becomes the target directory again.
    host.unlink_target("g2").await.expect("unlink target");
    assert!(matches!(host.at_target().await.expect("at"), AtTarget::Dir { managed: true, .. }), "{host}");
    assert_commit(&h, 1, Some(f.read_target()), &format!("{host}: the target, a directory again"));
    assert_eq!(host.slots().await.expect("slots"), ["g1"], "{host}: g2 is the target now");

    // A real directory (a plain target becoming atomic) is displaced into the home.
    let s = host.switch("g1", Switch::Symlink, "g0").await.expect("switch from a directory");
    assert_eq!(s.previous.as_deref(), Some("g0"), "{host}: the displaced directory is named");
    assert_commit(&h, 1, read_slot(&*host, "g0").await, &format!("{host}: the displaced directory"));
    assert_commit(&h, 0, Some(f.read_target()), &format!("{host}: the target, linked to g1 again"));
}

/// A reader resolving the target while it is switched from link to link, 20 times, always
/// reads one whole generation, never nothing.
pub async fn a_reader_never_sees_the_target_missing_between_links(f: &dyn HostFixture) {
    let trees: Vec<Model> = ["first\n", "second\n"].iter().map(|c| Model::of(&[("marker", c)])).collect();
    let h = History::from_trees(&trees);
    let host = f.host();
    host.create_home().await.expect("create home");
    fill(&*host, "g1", &h, 0).await;
    fill(&*host, "g2", &h, 1).await;
    host.switch("g1", Switch::Symlink, "unused").await.expect("switch");
    let (first, second) = (h.expected(0), h.expected(1));
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    let runtime = tokio::runtime::Handle::current();
    // The switches run on this thread (out of the runtime's way), the reader on another; each
    // switch waits for a read to begin after the previous one, so the two interleave.
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    reads.fetch_add(1, Ordering::SeqCst);
                    let got = f.read_target();
                    assert!(got == first || got == second, "{host}: a reader saw {got:?}");
                }
            });
            runtime.block_on(async {
                for round in 0..20 {
                    let before = reads.load(Ordering::SeqCst);
                    while reads.load(Ordering::SeqCst) == before && !reader.is_finished() {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                    let slot = if round % 2 == 0 { "g2" } else { "g1" };
                    host.switch(slot, Switch::Symlink, "unused").await.expect("switch");
                }
            });
            done.store(true, Ordering::SeqCst);
            reader.join().expect("the reader saw whole generations only");
        })
    });
    assert!(reads.load(Ordering::SeqCst) >= 20, "{host}: the reader read");
}

/// [`Switch::Exchange`] swaps the slot with the target: the slot renamed into place when there
/// is no target, swapped with a real directory (the slot then holds the tree the target
/// showed), and put in place of a link, which is removed. A host that cannot exchange is never
/// asked to (`generation::sync` then switches by links).
pub async fn an_exchange_swaps_the_slot_with_the_target(f: &dyn HostFixture) {
    let h = history();
    let host = f.host();
    host.create_home().await.expect("create home");
    if !f.exchange() {
        return;
    }
    fill(&*host, "g1", &h, 0).await;
    let s = host.switch("g1", Switch::Exchange, "unused").await.expect("switch into a missing target");
    assert_eq!(s.previous, None, "{host}");
    assert_eq!(host.slots().await.expect("slots"), Vec::<String>::new(), "{host}: the slot became the target");
    fill(&*host, "g2", &h, 1).await;
    let s = host.switch("g2", Switch::Exchange, "unused").await.expect("exchange");
    assert_eq!(s.previous.as_deref(), Some("g2"), "{host}: the slot now holds the old tree");
    assert!(matches!(host.at_target().await.expect("at"), AtTarget::Dir { managed: true, .. }), "{host}");
    assert_commit(&h, 1, Some(f.read_target()), &format!("{host}: the target after the exchange"));
    assert_commit(&h, 0, read_slot(&*host, "g2").await, &format!("{host}: the slot after the exchange"));

    // From a link: the link is removed, not kept as a slot.
    host.switch("g2", Switch::Symlink, "g3").await.expect("to a link");
    let s = host.switch("g3", Switch::Exchange, "unused").await.expect("exchange a link");
    assert_eq!(s.previous.as_deref(), Some("g2"), "{host}");
    assert_commit(&h, 1, Some(f.read_target()), &format!("{host}: the target after a link"));
    assert_eq!(host.slots().await.expect("slots"), ["g2"], "{host}: no link left in the home");
}

/// A slot moved aside is listed by its new name; removing it removes everything in it and
/// answers how much; renaming or removing a slot that is gone is fine.
pub async fn slots_are_renamed_and_removed(f: &dyn HostFixture) {
    let h = history();
    let host = f.host();
    host.create_home().await.expect("create home");
    fill(&*host, "g1", &h, 0).await;
    host.rename_slot("g1", "trash-g1").await.expect("rename");
    assert_eq!(host.slots().await.expect("slots"), ["trash-g1"], "{host}");
    assert_commit(&h, 0, read_slot(&*host, "trash-g1").await, &format!("{host}: the slot moved aside"));
    host.rename_slot("g1", "other").await.expect("renaming a slot that is gone is fine");
    let removed = host.remove_slot("trash-g1").await.expect("remove");
    assert!(removed > 0, "{host}: {removed} entries removed");
    assert_eq!(host.slots().await.expect("slots"), Vec::<String>::new(), "{host}");
    assert_eq!(host.remove_slot("trash-g1").await.expect("remove again"), 0, "{host}: gone already");
    host.remove_home().await.expect("remove home");
    assert!(!host.home_exists().await.expect("home exists"), "{host}");
}

/// A switch to a slot that does not exist fails and leaves the target as it was.
pub async fn a_switch_to_a_missing_slot_is_refused(f: &dyn HostFixture) {
    let (h, host) = linked_to_g1(f).await;
    for how in [Switch::Symlink, Switch::Exchange] {
        assert!(host.switch("g9", how, "g8").await.is_err(), "{host}: a {how} switch to a missing slot");
        assert_eq!(linked_slot(&*host).await, Ok("g1".into()), "{host}: the target is unchanged");
    }
    assert_commit(&h, 0, Some(f.read_target()), &format!("{host}: the target"));
}

/// A clone of a slot that does not exist fails and makes nothing; leaving generations to one
/// fails.
pub async fn a_missing_slot_is_neither_cloned_nor_restored(f: &dyn HostFixture) {
    let (_, host) = linked_to_g1(f).await;
    assert!(host.clone_tree(&At::Slot("g9".into()), "g8").await.is_err(), "{host}: a clone of a missing slot");
    assert_eq!(host.slots().await.expect("slots"), ["g1"], "{host}: nothing made");
    assert!(host.unlink_target("g9").await.is_err(), "{host}: leaving to a missing slot");
}

/// A slot some process holds open is named with the process; once it lets go it is not.
/// Hosts that cannot know (a remote server) say so with `None`.
pub async fn a_slot_held_open_is_named_with_its_process(f: &dyn HostFixture) {
    let (h, host) = linked_to_g1(f).await;
    fill(&*host, "g2", &h, 1).await;
    let Some(reader) = f.hold("g2") else {
        assert_eq!(host.held().await.expect("held"), None, "{host}: cannot know, and says so");
        return;
    };
    let held = host.held().await.expect("held").expect("this host knows");
    assert_eq!(held.get("g2"), Some(&vec![std::process::id()]), "{host}: {held:?}");
    drop(reader);
    let held = host.held().await.expect("held").expect("this host knows");
    assert_eq!(held.get("g2"), None, "{host}: let go: {held:?}");
}

/// The names of the cases [`host_suite!`](crate::host_suite) makes a test of.
pub const HOST_CASES: &[&str] = &[
    "the_home_is_made_and_removed",
    "the_record_reads_back_as_stored",
    "the_lock_keeps_a_second_holder_out",
    "a_clone_is_the_same_tree_with_the_same_state",
    "a_link_switch_points_the_target_at_the_slot",
    "a_reader_never_sees_the_target_missing_between_links",
    "an_exchange_swaps_the_slot_with_the_target",
    "slots_are_renamed_and_removed",
    "a_switch_to_a_missing_slot_is_refused",
    "a_missing_slot_is_neither_cloned_nor_restored",
    "a_slot_held_open_is_named_with_its_process",
];

/// Make one `#[test]` per case of the host suite ([`HOST_CASES`]) for the fixture built by
/// `$make` (an expression giving `impl HostFixture`, evaluated in each test). `skip = CONDITION`
/// leaves cases out with a reason, as in [`conformance_suite!`](crate::conformance_suite).
#[macro_export]
macro_rules! host_suite {
    ($make:expr) => {
        $crate::host_suite!($make, skip = |_case: &str| -> Option<&'static str> { None });
    };
    ($make:expr, skip = $skip:expr) => {
        $crate::host_suite!(@case $make, $skip, the_home_is_made_and_removed);
        $crate::host_suite!(@case $make, $skip, the_record_reads_back_as_stored);
        $crate::host_suite!(@case $make, $skip, the_lock_keeps_a_second_holder_out);
        $crate::host_suite!(@case $make, $skip, a_clone_is_the_same_tree_with_the_same_state);
        $crate::host_suite!(@case $make, $skip, a_link_switch_points_the_target_at_the_slot);
        $crate::host_suite!(@case $make, $skip, a_reader_never_sees_the_target_missing_between_links);
        $crate::host_suite!(@case $make, $skip, an_exchange_swaps_the_slot_with_the_target);
        $crate::host_suite!(@case $make, $skip, slots_are_renamed_and_removed);
        $crate::host_suite!(@case $make, $skip, a_switch_to_a_missing_slot_is_refused);
        $crate::host_suite!(@case $make, $skip, a_missing_slot_is_neither_cloned_nor_restored);
        $crate::host_suite!(@case $make, $skip, a_slot_held_open_is_named_with_its_process);
    };
    (@case $make:expr, $skip:expr, $name:ident) => {
        #[test]
        fn $name() {
            if $crate::conformance::host::skipped(&$skip, stringify!($name)) {
                return;
            }
            let rt = $crate::runtime();
            let f = $make;
            rt.block_on($crate::conformance::host::$name(&f));
        }
    };
}

/// Whether `skip` leaves `case` out (for [`host_suite!`](crate::host_suite)); says so, with
/// the reason, on stderr.
pub fn skipped(skip: &dyn Fn(&str) -> Option<&'static str>, case: &str) -> bool {
    assert!(HOST_CASES.contains(&case), "{case} is not a case of the host suite");
    super::skip_with(skip(case), case)
}
