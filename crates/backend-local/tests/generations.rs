//! Generations of a directory target on a local disk (`sync --atomic`): the host suite on
//! [`FsHost`], switching by `RENAME_EXCHANGE` and by links, and [`FsHost`] driven by
//! `treesync_core::generation`, checked against `git archive` of each commit with real git.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use treesync_backend_local::generations::{FsHost, Opener};
use treesync_backend_local::{LocalBackend, Options as LocalOptions};
use treesync_core::generation::{self, AtTarget, CloneHow, Host, Switch};
use treesync_core::policy::{Count, Record};
use treesync_core::{Backend, backend, sync};
use treesync_testkit::conformance::History;
use treesync_testkit::conformance::host::HostFixture;
use treesync_testkit::history::{Entry, Model};
use treesync_testkit::tree::{self, Node};

/// A target `PARENT/site` in a fresh temporary directory, for the host suite.
struct Place {
    dir: tempfile::TempDir,
    exchange: bool,
}

impl Place {
    fn new(exchange: bool) -> Place {
        Place { dir: tempfile::tempdir().expect("tempdir"), exchange }
    }
}

impl HostFixture for Place {
    fn host(&self) -> Arc<dyn Host> {
        let opener: Opener = Arc::new(|path| Arc::new(LocalBackend::new(path, LocalOptions::default())));
        let host = FsHost::new(self.dir.path().join("site"), opener);
        Arc::new(if self.exchange { host } else { host.without_exchange() })
    }
    fn read_target(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.dir.path().join("site"))
    }
    fn exchange(&self) -> bool {
        self.exchange
    }
    fn hold(&self, slot: &str) -> Option<Box<dyn Send>> {
        let path = self.dir.path().join(".site.treesync").join(slot);
        Some(Box::new(std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))))
    }
}

/// Exchange mode where the filesystem swaps directories (`RENAME_EXCHANGE`).
mod host_exchange {
    use super::*;
    treesync_testkit::host_suite!(Place::new(true));
}

/// Symlink mode: the host never exchanges (as on a network filesystem).
mod host_symlink {
    use super::*;
    treesync_testkit::host_suite!(Place::new(false));
}

/// A target `PARENT/site` in a fresh temporary directory, with its host; every backend the
/// host opens counts its calls.
struct Site {
    dir: tempfile::TempDir,
    host: FsHost,
    counts: Arc<Mutex<Vec<Arc<Mutex<Record>>>>>,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let counts: Arc<Mutex<Vec<Arc<Mutex<Record>>>>> = Default::default();
        let seen = counts.clone();
        let opener: Opener = Arc::new(move |path: PathBuf| {
            let b = Count::new(LocalBackend::new(path, LocalOptions::default()));
            seen.lock().expect("never poisoned").push(b.record());
            Arc::new(b) as Arc<dyn Backend>
        });
        let host = FsHost::new(dir.path().join("site"), opener);
        Site { dir, host, counts }
    }

    fn slot(&self, name: &str) -> PathBuf {
        self.host.home_path().join(name)
    }

    /// Ops and calls of every backend opened since the last call.
    fn take_counts(&self) -> (u64, u64) {
        let records = std::mem::take(&mut *self.counts.lock().expect("never poisoned"));
        records.iter().fold((0, 0), |(ops, calls), r| {
            let r = r.lock().expect("never poisoned");
            (ops + r.counts.total(), calls + r.total_calls())
        })
    }
}

fn file(content: String, executable: bool) -> Entry {
    Entry::File { content: content.into_bytes(), executable }
}

/// `n` files in a few directories; the first `changed` hold `version`, the files of `exec`
/// are executable; and a symlink.
fn tree_of(n: usize, changed: usize, version: u32, exec: &[usize]) -> Model {
    let mut m = Model::default();
    for i in 0..n {
        let content = if i < changed { format!("file {i} version {version}\n") } else { format!("file {i}\n") };
        m.insert(&format!("d{}/f{i}", i % 7), file(content, exec.contains(&i)));
    }
    m.insert("link", Entry::Link { target: "d0/f0".into() });
    m
}

fn options(switch: Switch, keep: usize, grace: Duration) -> generation::Options {
    generation::Options {
        sync: sync::Options { backend_name: "local".into(), ..Default::default() },
        keep,
        grace,
        switch: Some(switch),
        max_generations: None,
    }
}

async fn gsync(h: &History, i: usize, site: &Site, o: &generation::Options) -> generation::Outcome {
    generation::sync(&h.repo, &h.commits[i], &site.host, o, &|_| {}, &AtomicBool::new(false))
        .await
        .unwrap_or_else(|e| panic!("atomic sync to commit {i} failed: {e}"))
}

/// Panic unless the directory at `path` (followed if it is a link) holds commit `i`.
fn assert_holds(h: &History, i: usize, path: &Path, context: &str) {
    if let Some(d) = tree::diff(&h.expected(i), &tree::read_dir(path)) {
        panic!("{context}: {} differs from `git archive` of commit {i}:\n{d}", path.display());
    }
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).ino()
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// Where the generation retired by `out` is.
fn retired(site: &Site, out: &generation::Outcome) -> PathBuf {
    site.slot(out.retired.as_deref().expect("a generation was retired"))
}

#[tokio::test]
async fn the_first_sync_starts_a_generation_the_second_clones_it_the_third_reuses_the_oldest() {
    let h = History::from_trees(&[tree_of(30, 5, 0, &[]), tree_of(30, 5, 1, &[]), tree_of(30, 5, 2, &[])]);
    for mode in [Switch::Symlink, Switch::Exchange] {
        let site = Site::new();
        let o = options(mode, 2, Duration::ZERO);
        let first = gsync(&h, 0, &site, &o).await;
        assert!(first.switched && !first.reused && first.cloned.is_none(), "{mode}: {first:?}");
        assert_eq!(first.switch, mode);
        assert_holds(&h, 0, site.host.target(), &format!("{mode}: first sync"));
        let text = std::fs::read_link(site.host.target()).ok();
        match mode {
            Switch::Symlink => assert_eq!(text, Some(PathBuf::from(".site.treesync/g1")), "relative link text"),
            Switch::Exchange => {
                assert_eq!(text, None, "the target stays a real directory");
                assert!(std::fs::metadata(site.host.target().join(".treesync/state")).is_ok(), "it holds its state");
            }
        }
        assert!(matches!(
            site.host.at_target().await.expect("at target"),
            AtTarget::Link { slot: Some(_), .. } | AtTarget::Dir { managed: true, .. }
        ));

        let second = gsync(&h, 1, &site, &o).await;
        let cloned = second.cloned.unwrap_or_else(|| panic!("{mode}: the second sync clones: {second:?}"));
        assert!(!second.reused);
        assert!(cloned.entries >= 31 && cloned.dirs >= 7, "{mode}: {cloned:?}");
        assert_holds(&h, 1, site.host.target(), &format!("{mode}: second sync"));
        let old = retired(&site, &second);
        assert_holds(&h, 0, &old, &format!("{mode}: the retired generation keeps its commit"));
        // Unchanged files share their inode with the retired generation; changed ones do not.
        if cloned.how == CloneHow::Hardlink {
            assert_eq!(cloned.bytes_copied, 0);
            assert_eq!(ino(&site.host.target().join("d3/f10")), ino(&old.join("d3/f10")), "{mode}: a hard link farm");
            assert_ne!(
                ino(&site.host.target().join("d0/f0")),
                ino(&old.join("d0/f0")),
                "{mode}: rewritten, not in place"
            );
        }

        let third = gsync(&h, 2, &site, &o).await;
        assert!(third.reused && third.cloned.is_none() && third.switched, "{mode}: {third:?}");
        assert_holds(&h, 2, site.host.target(), &format!("{mode}: third sync"));
        assert_holds(&h, 1, &retired(&site, &third), &format!("{mode}: retired after the third"));
        assert_eq!(third.sync.applied.total(), 5, "{mode}: the diff of commit 0 to 2 only: {:?}", third.sync.applied);

        let again = gsync(&h, 2, &site, &o).await;
        assert!(!again.switched && again.prepared.is_none(), "{mode}: nothing to do: {again:?}");
        let status = generation::status(&site.host).await.expect("status").expect("kept in generations");
        assert_eq!(status.switch, Some(mode));
        assert_eq!(status.generations.len(), 2, "{mode}: keep 2: {:?}", status.generations);
        assert!(status.generations[0].current);
    }
}

#[tokio::test]
async fn a_mode_change_rewrites_the_file_and_leaves_the_retired_generation_alone() {
    let h = History::from_trees(&[tree_of(12, 0, 0, &[]), tree_of(12, 1, 1, &[]), tree_of(12, 1, 1, &[5])]);
    for mode in [Switch::Symlink, Switch::Exchange] {
        let site = Site::new();
        let o = options(mode, 2, Duration::ZERO);
        gsync(&h, 0, &site, &o).await;
        let second = gsync(&h, 1, &site, &o).await;
        assert!(second.cloned.is_some());
        // Commit 2 only sets the exec bit of d5/f5, which commit 1's generation shares with
        // the one commit 2 reuses.
        let third = gsync(&h, 2, &site, &o).await;
        assert!(third.reused, "{mode}: {third:?}");
        assert_holds(&h, 2, site.host.target(), &format!("{mode}: after the mode change"));
        let f5 = std::fs::metadata(site.host.target().join("d5/f5")).expect("f5");
        assert!(f5.permissions().mode() & 0o100 != 0, "{mode}: executable now");
        let old = retired(&site, &third);
        let old_f5 = std::fs::symlink_metadata(old.join("d5/f5")).expect("retired f5");
        assert_eq!(old_f5.permissions().mode() & 0o111, 0, "{mode}: the retired generation's file kept its mode");
        assert_holds(&h, 1, &old, &format!("{mode}: the retired generation is untouched"));
    }
}

#[tokio::test]
async fn a_plain_target_becomes_atomic_in_both_modes_and_back() {
    let h = History::from_trees(&[tree_of(15, 3, 0, &[]), tree_of(15, 3, 1, &[]), tree_of(15, 3, 2, &[2])]);
    for mode in [Switch::Symlink, Switch::Exchange] {
        let site = Site::new();
        let plain = LocalBackend::new(site.host.target(), LocalOptions::default());
        let so = sync::Options { backend_name: "local".into(), ..Default::default() };
        sync::sync(&h.repo, &h.commits[0], &plain, &so, &|_| {}, &AtomicBool::new(false)).await.expect("plain sync");
        let ino_before = ino(&site.host.target().join("d3/f3"));

        let o = options(mode, 2, Duration::ZERO);
        let first = gsync(&h, 1, &site, &o).await;
        assert!(first.switched, "{mode}: {first:?}");
        assert_holds(&h, 1, site.host.target(), &format!("{mode}: converted"));
        assert_eq!(is_link(site.host.target()), mode == Switch::Symlink, "{mode}");
        assert_holds(&h, 0, &retired(&site, &first), &format!("{mode}: the plain tree, retired"));
        if first.cloned.is_some_and(|c| c.how == CloneHow::Hardlink) {
            assert_eq!(ino(&site.host.target().join("d3/f3")), ino_before, "{mode}: cloned from the plain tree");
        }
        let second = gsync(&h, 2, &site, &o).await;
        assert!(second.reused, "{mode}: the plain tree is a generation like any other: {second:?}");
        assert_holds(&h, 2, site.host.target(), &format!("{mode}: atomic update"));

        let left = generation::leave(&site.host, &o).await.expect("leave");
        assert_eq!(left.restored, mode == Switch::Symlink, "{mode}: {left:?}");
        assert!(left.home_removed && left.kept.is_empty(), "{mode}: grace 0 removes the rest: {left:?}");
        assert!(!is_link(site.host.target()) && !site.host.home_path().exists(), "{mode}: an ordinary target again");
        assert_holds(&h, 2, site.host.target(), &format!("{mode}: after leaving"));
        let back = sync::sync(&h.repo, &h.commits[0], &plain, &so, &|_| {}, &AtomicBool::new(false))
            .await
            .expect("plain sync after leaving");
        assert!(back.from.is_some(), "{mode}: the state came along");
        assert_holds(&h, 0, site.host.target(), &format!("{mode}: plain sync after leaving"));
    }
}

#[tokio::test]
async fn removing_a_retired_generation_never_follows_a_link_planted_in_it() {
    let h = History::from_trees(&[tree_of(10, 2, 0, &[]), tree_of(10, 2, 1, &[])]);
    let site = Site::new();
    let o = options(Switch::Symlink, 2, Duration::ZERO);
    gsync(&h, 0, &site, &o).await;
    let second = gsync(&h, 1, &site, &o).await;
    let old = retired(&site, &second);
    let outside = site.dir.path().join("outside");
    std::fs::create_dir_all(outside.join("sub")).expect("outside");
    std::fs::write(outside.join("precious"), "keep me").expect("precious");
    std::fs::write(outside.join("sub/too"), "keep me").expect("too");
    std::os::unix::fs::symlink(&outside, old.join("evil")).expect("plant");
    std::os::unix::fs::symlink(&outside, old.join("d0/evil")).expect("plant deeper");

    let left = generation::leave(&site.host, &o).await.expect("leave");
    assert_eq!(left.removed, vec![second.retired.clone().expect("retired")], "{left:?}");
    assert!(!old.exists() && !site.host.home_path().exists(), "the retired generation and the home are gone");
    assert_eq!(std::fs::read_to_string(outside.join("precious")).expect("survives"), "keep me");
    assert_eq!(std::fs::read_to_string(outside.join("sub/too")).expect("survives"), "keep me");
    assert_holds(&h, 1, site.host.target(), "the current generation");
}

#[tokio::test]
async fn a_home_that_is_a_symlink_or_a_file_is_refused() {
    let h = History::from_trees(&[tree_of(4, 0, 0, &[])]);
    let site = Site::new();
    let elsewhere = site.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("elsewhere");
    std::os::unix::fs::symlink(&elsewhere, site.host.home_path()).expect("home link");
    let o = options(Switch::Symlink, 2, Duration::ZERO);
    let e = generation::sync(&h.repo, &h.commits[0], &site.host, &o, &|_| {}, &AtomicBool::new(false))
        .await
        .expect_err("a home that is a symlink");
    assert!(matches!(&e, generation::Error::Backend(backend::Error::StateFolder { found: "symlink", .. })), "{e:?}");
    assert!(e.to_string().contains(".site.treesync") && e.to_string().contains("hint: "), "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing was written through the link");
    assert!(!site.host.target().exists() && !is_link(site.host.target()));

    std::fs::remove_file(site.host.home_path()).expect("unlink");
    std::fs::write(site.host.home_path(), "not a directory").expect("home file");
    let e = generation::sync(&h.repo, &h.commits[0], &site.host, &o, &|_| {}, &AtomicBool::new(false))
        .await
        .expect_err("a home that is a file");
    assert!(matches!(&e, generation::Error::Backend(backend::Error::StateFolder { found: "file", .. })), "{e:?}");
}

#[tokio::test]
async fn a_generation_a_process_holds_open_is_not_reused() {
    let h = History::from_trees(&[tree_of(6, 1, 0, &[]), tree_of(6, 1, 1, &[]), tree_of(6, 1, 2, &[])]);
    let site = Site::new();
    let o = options(Switch::Symlink, 2, Duration::ZERO);
    gsync(&h, 0, &site, &o).await;
    let second = gsync(&h, 1, &site, &o).await;
    let old = second.retired.clone().expect("retired");
    let reader = std::fs::File::open(site.slot(&old)).expect("a reader holds the retired generation");

    let third = gsync(&h, 2, &site, &o).await;
    assert!(!third.reused && third.prepared.as_deref() != Some(old.as_str()), "{third:?}");
    assert!(third.notes.iter().any(|n| n.contains("held open")), "{:?}", third.notes);
    assert!(site.slot(&old).exists(), "a held generation is not removed");
    assert_holds(&h, 2, site.host.target(), "third sync");
    assert_holds(&h, 0, &site.slot(&old), "the held generation is untouched");
    drop(reader);

    // In exchange mode the current generation is the target itself.
    let site = Site::new();
    gsync(&h, 0, &site, &options(Switch::Exchange, 2, Duration::ZERO)).await;
    let reader = std::fs::File::open(site.host.target().join("d0")).expect("a reader in the target");
    let held = site.host.held().await.expect("held").expect("known");
    assert_eq!(held.get("target"), Some(&vec![std::process::id()]), "{held:?}");
    drop(reader);
}

#[tokio::test]
async fn an_update_of_k_files_costs_o_k_ops_on_a_2000_file_tree() {
    const N: usize = 2000;
    const K: usize = 12;
    let h = History::from_trees(&[tree_of(N, K, 0, &[]), tree_of(N, K, 1, &[]), tree_of(N, K, 2, &[])]);
    for mode in [Switch::Symlink, Switch::Exchange] {
        let site = Site::new();
        let o = options(mode, 2, Duration::ZERO);
        let first = gsync(&h, 0, &site, &o).await;
        assert!(first.sync.applied.total() as usize > N, "{mode}: the first generation is a full checkout");
        let second = gsync(&h, 1, &site, &o).await;
        assert!(second.cloned.is_some_and(|c| c.entries as usize > N), "{mode}: {second:?}");
        site.take_counts();
        let third = gsync(&h, 2, &site, &o).await;
        assert!(third.reused, "{mode}: {third:?}");
        let (ops, calls) = site.take_counts();
        assert_eq!(third.sync.applied.total() as usize, K, "{mode}");
        assert!(ops as usize <= 3 * K + 10, "{mode}: {ops} ops for {K} changed files of {N}");
        assert!((calls as usize) < 3 * K + 40, "{mode}: {calls} calls on the target for {K} changed files of {N}");
        assert_eq!(tree::read_dir(site.host.target()).len(), N + 1 + 7, "{mode}: files, the link and the directories");
        assert_holds(&h, 2, site.host.target(), &format!("{mode}: after the update"));
    }
}

#[tokio::test]
async fn a_directory_taken_over_with_force_is_reused_later_without_force() {
    let h = History::from_trees(&[tree_of(8, 2, 0, &[]), tree_of(8, 2, 1, &[]), tree_of(8, 2, 2, &[])]);
    for mode in [Switch::Symlink, Switch::Exchange] {
        let site = Site::new();
        std::fs::create_dir(site.host.target()).expect("target");
        std::fs::write(site.host.target().join("foreign"), "not from git").expect("foreign");
        let mut o = options(mode, 2, Duration::ZERO);
        o.sync.force = true;
        let e = generation::sync(
            &h.repo,
            &h.commits[0],
            &site.host,
            &options(mode, 2, Duration::ZERO),
            &|_| {},
            &AtomicBool::new(false),
        )
        .await
        .expect_err("an unmanaged directory needs --force");
        assert!(e.to_string().contains("force"), "{mode}: {e}");
        gsync(&h, 0, &site, &o).await;
        assert_holds(&h, 0, site.host.target(), &format!("{mode}: taken over"));
        let o = options(mode, 2, Duration::ZERO);
        for i in [1, 2, 0, 1] {
            gsync(&h, i, &site, &o).await;
            assert_holds(&h, i, site.host.target(), &format!("{mode}: commit {i} after the takeover"));
        }
    }
}
