//! Issue 29: someone who can write in a target's generations home (`.NAME.treesync`, not in
//! the target's parent) must not be able to make the target show their content. The exchange
//! switch swapped in whatever stood at `HOME/gN` at that moment, and leaving atomic mode did
//! the same with the current slot. Now the switch swaps in the directory claimed for the
//! generation or nothing, and says so.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use treesync_backend_local::generations::{FsHost, Opener};
use treesync_backend_local::{LocalBackend, Options as LocalOptions};
use treesync_core::backend::Error;
use treesync_core::generation::{self, Switch};
use treesync_core::{Backend, sync};
use treesync_testkit::conformance::History;
use treesync_testkit::history::{Entry, Model};
use treesync_testkit::tree;

/// What to do to the home once a generation's sync has stored its state (its last write,
/// right before the switch): given the generation's path.
type Plant = Box<dyn FnOnce(&Path) + Send>;

/// Runs the armed [`Plant`] after the state is stored.
struct AfterState {
    inner: Arc<dyn Backend>,
    root: PathBuf,
    plant: Arc<Mutex<Option<Plant>>>,
}

impl std::fmt::Display for AfterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait::async_trait]
impl Backend for AfterState {
    treesync_core::delegate_backend!(inner, except store_state);

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.inner.store_state(bytes).await?;
        if let Some(plant) = self.plant.lock().expect("never poisoned").take() {
            plant(&self.root);
        }
        Ok(())
    }
}

struct Site {
    dir: tempfile::TempDir,
    host: FsHost,
    plant: Arc<Mutex<Option<Plant>>>,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let plant: Arc<Mutex<Option<Plant>>> = Default::default();
        let armed = plant.clone();
        let opener: Opener = Arc::new(move |path: PathBuf| {
            let inner: Arc<dyn Backend> = Arc::new(LocalBackend::new(path.clone(), LocalOptions::default()));
            Arc::new(AfterState { inner, root: path, plant: armed.clone() }) as Arc<dyn Backend>
        });
        let host = FsHost::new(dir.path().join("site"), opener);
        Site { dir, host, plant }
    }

    /// A fresh site whose first generation holds commit 0 of `h`, switched to by `switch`.
    async fn synced(h: &History, switch: Switch) -> Site {
        let site = Site::new();
        gsync(h, 0, &site, switch).await.expect("first sync");
        site
    }

    /// A directory of the attacker's, outside the home, with one file.
    fn outside(&self) -> PathBuf {
        let out = self.dir.path().join("outside");
        std::fs::create_dir_all(&out).expect("outside");
        std::fs::write(out.join("evil"), "their content").expect("evil");
        out
    }

    fn arm(&self, plant: impl FnOnce(&Path) + Send + 'static) {
        *self.plant.lock().expect("never poisoned") = Some(Box::new(plant));
    }
}

fn trees() -> History {
    let tree = |v: u32| {
        let mut m = Model::default();
        for i in 0..6 {
            m.insert(
                &format!("d{}/f{i}", i % 2),
                Entry::File { content: format!("{i} v{v}\n").into(), executable: false },
            );
        }
        m
    };
    History::from_trees(&[tree(0), tree(1)])
}

fn options(switch: Switch) -> generation::Options {
    generation::Options {
        sync: sync::Options { backend_name: "local".into(), ..Default::default() },
        keep: 2,
        grace: Duration::ZERO,
        switch: Some(switch),
        max_generations: None,
    }
}

async fn gsync(h: &History, i: usize, site: &Site, switch: Switch) -> Result<generation::Outcome, generation::Error> {
    generation::sync(&h.repo, &h.commits[i], &site.host, &options(switch), &|_| {}, &AtomicBool::new(false)).await
}

fn assert_holds(h: &History, i: usize, path: &Path, context: &str) {
    if let Some(d) = tree::diff(&h.expected(i), &tree::read_dir(path)) {
        panic!("{context}: {} differs from `git archive` of commit {i}:\n{d}", path.display());
    }
}

fn assert_untouched(outside: &Path) {
    let names: Vec<_> = std::fs::read_dir(outside).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("evil")], "nothing was written outside");
    assert_eq!(std::fs::read_to_string(outside.join("evil")).expect("evil"), "their content");
}

#[tokio::test]
async fn a_generation_replaced_by_a_symlink_before_the_switch_is_not_switched_to() {
    let h = trees();
    for switch in [Switch::Exchange, Switch::Symlink] {
        let site = Site::synced(&h, switch).await;
        let outside = site.outside();
        let (home, planted) = (site.host.home_path(), outside.clone());
        site.arm(move |slot| {
            // Move the prepared generation aside, put a link to their own directory there.
            std::fs::rename(slot, home.join("aside")).expect("move aside");
            std::os::unix::fs::symlink(&planted, slot).expect("plant");
        });
        let e = gsync(&h, 1, &site, switch).await.expect_err("the slot was replaced");
        let text = e.to_string();
        assert!(text.contains("was replaced before the switch") || text.contains("symlink"), "{switch}: {text}");
        assert!(text.contains("hint: "), "{switch}: {text}");
        // The target still shows commit 0, never their content.
        assert_holds(&h, 0, site.host.target(), &format!("{switch}: after the refused switch"));
        let shown = std::fs::canonicalize(site.host.target()).expect("target");
        assert!(shown.starts_with(site.dir.path()) && !shown.starts_with(&outside), "{switch}: {shown:?}");
        assert_untouched(&outside);
        // Not stuck: once what was planted is removed, a plain rerun switches.
        let planted_slot = std::fs::read_dir(site.host.home_path())
            .expect("home")
            .map(|e| e.expect("entry").path())
            .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()));
        std::fs::remove_file(planted_slot.expect("the planted link is still there")).expect("remove it");
        gsync(&h, 1, &site, switch).await.expect("the rerun");
        assert_holds(&h, 1, site.host.target(), &format!("{switch}: rerun"));
        assert_untouched(&outside);
    }
}

#[tokio::test]
async fn a_generation_replaced_by_a_directory_of_another_user_is_not_switched_to() {
    let h = trees();
    let site = Site::synced(&h, Switch::Exchange).await;
    let home = site.host.home_path();
    site.arm(move |slot| {
        std::fs::rename(slot, home.join("aside")).expect("move aside");
        std::fs::create_dir(slot).expect("their directory");
        std::fs::write(slot.join("evil"), "their content").expect("evil");
        std::os::unix::fs::chown(slot, Some(4242), Some(4242)).expect("chown (the tests run as root)");
    });
    let e = gsync(&h, 1, &site, Switch::Exchange).await.expect_err("their directory");
    assert!(e.to_string().contains("belongs to uid 4242"), "{e}");
    assert_holds(&h, 0, site.host.target(), "after the refused switch");
    assert!(!site.host.target().join("evil").exists());
}

#[tokio::test]
async fn leaving_generations_over_a_planted_current_slot_does_not_take_it() {
    let h = trees();
    let site = Site::synced(&h, Switch::Symlink).await;
    let current =
        site.host.home_path().join(std::fs::read_link(site.host.target()).expect("a link").file_name().expect("slot"));
    let outside = site.outside();
    std::fs::rename(&current, site.host.home_path().join("aside")).expect("move aside");
    std::os::unix::fs::symlink(&outside, &current).expect("plant");
    // Under the lock a symlink in the home is removed (never followed), so the current slot is
    // missing then: refused either way, the target left as it is.
    let e = generation::leave(&site.host, &options(Switch::Symlink)).await.expect_err("a planted current slot");
    assert!(
        matches!(&e, generation::Error::Backend(Error::StateFolder { found: "symlink", .. } | Error::Io { .. })),
        "{e:?}"
    );
    // The target is still the link to its generation's name in the home (which, in symlink
    // mode, readers resolve through the home: docs/atomic.md), not their link moved into place.
    let text = std::fs::read_link(site.host.target()).expect("the target is still a link");
    assert!(text.starts_with(".site.treesync/"), "{text:?}");
    assert_untouched(&outside);
}

/// Issue 29: a run of `--no-atomic` killed between the exchange and the removal of the old
/// link left that link in the home, and leaving (or re-entering) atomic mode failed for good
/// ("Directory not empty", then "File exists"). Any stray entry did the same.
#[tokio::test]
async fn leaving_generations_finishes_after_a_kill_and_a_stray_entry_is_reported_not_a_dead_end() {
    let h = trees();
    let site = Site::synced(&h, Switch::Symlink).await;
    // What a leave killed right after its exchange leaves: the target is the generation's
    // directory, the old link is at HOME/SLOT.
    let slot = std::fs::read_link(site.host.target()).expect("a link");
    let slot_path = site.dir.path().join(&slot);
    let link_aside = site.host.home_path().join("tmp/old-link");
    std::fs::rename(site.host.target(), &link_aside).expect("link aside");
    std::fs::rename(&slot_path, site.host.target()).expect("slot to target");
    std::fs::rename(&link_aside, &slot_path).expect("old link into the slot's name");
    let o = options(Switch::Symlink);
    let left = generation::leave(&site.host, &o).await.expect("a rerun finishes leaving");
    assert!(left.home_removed && left.notes.is_empty(), "{left:?}");
    assert!(!site.host.home_path().exists());
    assert_holds(&h, 0, site.host.target(), "left");
    // Entering again, twice, works (the slot's name is free).
    for i in [1, 0] {
        gsync(&h, i, &site, Switch::Symlink).await.unwrap_or_else(|e| panic!("re-entering, commit {i}: {e}"));
        assert_holds(&h, i, site.host.target(), "atomic again");
    }
    // A stray file in the home: leaving finishes, says what kept the home and how to remove it.
    std::fs::write(site.host.home_path().join("stray"), "not treesync's").expect("stray");
    let left = generation::leave(&site.host, &o).await.expect("leaving with a stray file");
    assert!(!left.home_removed, "{left:?}");
    let note = left.notes.join("\n");
    assert!(note.contains("stray") && note.contains("rm -r"), "{note}");
    assert_holds(&h, 0, site.host.target(), "left again");
    assert!(!std::fs::symlink_metadata(site.host.target()).expect("target").file_type().is_symlink());
    // Again: still no dead end. Once the stray file is removed (the hint), the home goes.
    assert!(!generation::leave(&site.host, &o).await.expect("again").home_removed);
    std::fs::remove_file(site.host.home_path().join("stray")).expect("the hint");
    assert!(generation::leave(&site.host, &o).await.expect("after the hint").home_removed);
    assert!(!site.host.home_path().exists());
}

/// Issue 29: generations grew without bound inside the grace period (12 syncs in 5 minutes,
/// 12 generations). At the cap (`--keep` + GRACE_CAP by default) with none past its grace
/// period, a sync is refused saying when to retry, rather than reuse a generation a reader may
/// be in; the target keeps its commit, and with a shorter grace the same sync goes through.
#[tokio::test]
async fn generations_within_the_grace_period_stop_at_the_cap() {
    let h = trees();
    for switch in [Switch::Exchange, Switch::Symlink] {
        let site = Site::new();
        let o = generation::Options { grace: Duration::from_secs(3600), ..options(switch) };
        let cap = o.keep + generation::GRACE_CAP;
        assert_eq!(o.cap(), cap);
        let generations = || {
            let slots = std::fs::read_dir(site.host.home_path())
                .expect("home")
                .map(|e| e.expect("entry"))
                .filter(|e| e.file_name().to_string_lossy().starts_with('g') && e.file_type().expect("type").is_dir())
                .count();
            slots + usize::from(switch == Switch::Exchange)
        };
        let mut refused = 0;
        for n in 0..(cap + 4) {
            match generation::sync(&h.repo, &h.commits[n % 2], &site.host, &o, &|_| {}, &AtomicBool::new(false)).await {
                Ok(_) => assert_holds(&h, n % 2, site.host.target(), &format!("{switch}: sync {n}")),
                Err(e) => {
                    refused += 1;
                    assert!(matches!(e, generation::Error::AtCap { .. }), "{switch}: sync {n}: {e:?}");
                    let text = e.to_string();
                    assert!(
                        text.contains("--max-generations") && text.contains("hint: run the sync again in"),
                        "{text}"
                    );
                    // The target still shows the commit it was last switched to.
                    assert_holds(&h, (n + 1) % 2, site.host.target(), &format!("{switch}: refused sync {n}"));
                }
            }
            assert!(generations() <= cap, "{switch}: {} generations after sync {n}", generations());
        }
        // Past the cap every sync that needs a new generation is refused (those to the commit
        // the target holds already need none).
        assert_eq!(refused, 2, "{switch}: the syncs past the cap are refused");
        // The cap is a setting; a shorter grace frees the oldest at once.
        let shorter = generation::Options { grace: Duration::ZERO, ..o };
        generation::sync(&h.repo, &h.commits[0], &site.host, &shorter, &|_| {}, &AtomicBool::new(false))
            .await
            .expect("past the grace period");
        assert_holds(&h, 0, site.host.target(), "after the cap");
    }
}
