//! `generation::sync` on the in-memory host with a real git history: the generations it makes,
//! reuses and removes, and a crash at every single write — the target must always show one
//! whole commit, and a plain rerun must finish the job.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use treesync_core::generation::{self, MemoryHost, Options, Switch};
use treesync_core::{Repo, sync};
use treesync_testkit::conformance::History;
use treesync_testkit::history::{Entry, Model};
use treesync_testkit::tree::{Node, read_memory};

/// Three commits: every file of the first changes in the second, a mode change and a
/// file↔directory change in the third.
fn history() -> History {
    let mut a = Model::default();
    let mut b = Model::default();
    let mut c = Model::default();
    for i in 0..12 {
        let p = format!("d{}/f{i}", i % 3);
        a.insert(&p, Entry::File { content: format!("a{i}").into_bytes(), executable: false });
        b.insert(&p, Entry::File { content: format!("b{i}").into_bytes(), executable: false });
        c.insert(&p, Entry::File { content: format!("b{i}").into_bytes(), executable: i == 3 });
    }
    a.insert("only-a", Entry::File { content: b"x".to_vec(), executable: false });
    b.insert("link", Entry::Link { target: "d0/f0".into() });
    c.insert("link/inside", Entry::File { content: b"now a dir".to_vec(), executable: false });
    History::from_trees(&[a, b, c])
}

fn options(switch: Switch, grace: Duration) -> Options {
    Options {
        sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
        keep: 2,
        grace,
        switch: Some(switch),
        max_generations: None,
    }
}

async fn run(repo: &Repo, rev: &str, host: &MemoryHost, o: &Options) -> Result<generation::Outcome, generation::Error> {
    generation::sync(repo, rev, host, o, &|_| {}, &AtomicBool::new(false)).await
}

/// The tree the target shows, as `git archive` would list it.
fn shown(host: &MemoryHost) -> Option<std::collections::BTreeMap<String, Node>> {
    host.resolve().map(|t| read_memory(&t))
}

#[tokio::test]
async fn generations_are_made_reused_and_removed() {
    let h = history();
    for switch in [Switch::Symlink, Switch::Exchange] {
        let host = MemoryHost::new(true);
        let o = options(switch, Duration::ZERO);
        let first = run(&h.repo, &h.commits[0], &host, &o).await.expect("first");
        assert!(first.switched && first.cloned.is_none() && !first.reused, "{switch}: {first:?}");
        assert_eq!(shown(&host), Some(h.expected(0)));
        let second = run(&h.repo, &h.commits[1], &host, &o).await.expect("second");
        assert!(second.cloned.is_some() && !second.reused, "{switch}: the second is a copy: {second:?}");
        assert_eq!(shown(&host), Some(h.expected(1)));
        let third = run(&h.repo, &h.commits[2], &host, &o).await.expect("third");
        assert!(third.reused && third.cloned.is_none(), "{switch}: the third reuses: {third:?}");
        // The reused generation held commit 0: its diff to commit 2, not a checkout.
        assert_eq!(third.sync.from.map(|s| s.commit.to_string()), Some(h.commits[0].clone()), "{switch}");
        assert_eq!(shown(&host), Some(h.expected(2)));
        assert_eq!(third.generations.len(), 2, "{switch}: keep 2: {:?}", third.generations);
        // Nothing to do: nothing written, nothing switched.
        let before = host.writes();
        let again = run(&h.repo, &h.commits[2], &host, &o).await.expect("again");
        assert!(!again.switched, "{switch}");
        assert_eq!(host.writes(), before, "{switch}: nothing is written, not even the record");
        assert_eq!(third.switch, switch);
    }
}

#[tokio::test]
async fn a_generation_within_its_grace_period_is_not_reused() {
    let h = history();
    let host = MemoryHost::new(false);
    let o = options(Switch::Symlink, Duration::from_secs(3600));
    run(&h.repo, &h.commits[0], &host, &o).await.expect("first");
    run(&h.repo, &h.commits[1], &host, &o).await.expect("second");
    let third = run(&h.repo, &h.commits[2], &host, &o).await.expect("third");
    assert!(!third.reused && third.cloned.is_some(), "{third:?}");
    assert!(third.notes.iter().any(|n| n.contains("no generation can be reused yet")), "{:?}", third.notes);
    assert!(third.notes.iter().any(|n| n.contains("within the grace period")), "{:?}", third.notes);
    assert_eq!(host.slot_names().len(), 3, "kept past --keep: {:?}", host.slot_names());
    assert_eq!(shown(&host), Some(h.expected(2)));
}

#[tokio::test]
async fn exchange_asked_where_the_filesystem_cannot_falls_back_to_symlink() {
    let h = history();
    let host = MemoryHost::new(false);
    let out = run(&h.repo, &h.commits[0], &host, &options(Switch::Exchange, Duration::ZERO)).await.expect("sync");
    assert_eq!(out.switch, Switch::Symlink);
    assert!(out.notes.iter().any(|n| n.contains("switching with a symlink instead")), "{:?}", out.notes);
}

/// A crash at every write of a sync (of the host and of the generation's backend): after each,
/// the target shows exactly the old or the new commit; a plain rerun then brings the new one, and
/// a further sync still works (the home was left consistent).
#[tokio::test]
async fn a_crash_at_any_write_leaves_a_whole_commit_and_a_rerun_finishes() {
    let h = history();
    let mut trials = 0;
    for switch in [Switch::Symlink, Switch::Exchange] {
        for (from, to) in [(None, 0), (Some(0), 1), (Some(1), 2), (Some(2), 0)] {
            let mut k = 0;
            loop {
                // Bring a fresh host to `from` (through the generations before it).
                let host = MemoryHost::new(true);
                let o = options(switch, Duration::ZERO);
                let steps: Vec<usize> = match from {
                    None => vec![],
                    Some(f) => (0..=f).chain([f]).collect(),
                };
                for s in steps {
                    run(&h.repo, &h.commits[s], &host, &o).await.expect("setup");
                }
                let before = shown(&host);
                host.fail_after(k);
                let r = run(&h.repo, &h.commits[to], &host, &o).await;
                host.fail_after(u64::MAX);
                let now = shown(&host);
                let ok = now == before || now == Some(h.expected(to));
                assert!(ok, "{switch} {from:?}->{to}: a crash after {k} writes left a tree of neither commit");
                trials += 1;
                run(&h.repo, &h.commits[to], &host, &o).await.unwrap_or_else(|e| {
                    panic!("{switch} {from:?}->{to}: the rerun after a crash at write {k} failed: {e}")
                });
                assert_eq!(shown(&host), Some(h.expected(to)), "{switch} {from:?}->{to} crash at {k}: rerun");
                let next = (to + 1) % 3;
                run(&h.repo, &h.commits[next], &host, &o).await.expect("a later sync");
                assert_eq!(shown(&host), Some(h.expected(next)), "{switch} {from:?}->{to} crash at {k}: later");
                if r.is_ok() {
                    break;
                }
                k += 1;
            }
        }
    }
    assert!(trials > 100, "crash points tried: {trials}");
}

#[tokio::test]
async fn leaving_generations_makes_the_target_a_plain_directory() {
    let h = history();
    let host = MemoryHost::new(false);
    let o = options(Switch::Symlink, Duration::ZERO);
    run(&h.repo, &h.commits[0], &host, &o).await.expect("first");
    run(&h.repo, &h.commits[1], &host, &o).await.expect("second");
    let left = generation::leave(&host, &o).await.expect("leave");
    assert!(left.restored && left.home_removed, "{left:?}");
    assert!(matches!(generation::current(&host).await.expect("current"), Some(generation::At::Target)));
    assert_eq!(shown(&host), Some(h.expected(1)));
    assert!(host.slot_names().is_empty());
    // And back: the plain target becomes the current generation again.
    let again = run(&h.repo, &h.commits[2], &host, &o).await.expect("atomic again");
    assert!(again.switched);
    assert_eq!(shown(&host), Some(h.expected(2)));
}

/// A target synced in place, then kept in generations with symlink switches: a crash at every
/// write of that first atomic sync (the target's own tree is moved into a slot the record names
/// only after the move) — a plain rerun finishes, and later syncs, which make new slots while
/// the moved-aside one is within its grace period, never name a slot that is there already.
#[tokio::test]
async fn a_crash_while_a_plain_target_is_moved_aside_never_reuses_its_slot_name() {
    let h = history();
    let mut k = 0;
    loop {
        let host = MemoryHost::new(false);
        let plain = treesync_core::memory::MemoryBackend::new();
        let o = options(Switch::Symlink, Duration::from_secs(3600));
        sync::sync(&h.repo, &h.commits[0], &plain, &o.sync, &|_| {}, &AtomicBool::new(false))
            .await
            .expect("the plain sync");
        host.set_target(plain);
        host.fail_after(k);
        let r = run(&h.repo, &h.commits[1], &host, &o).await;
        host.fail_after(u64::MAX);
        let now = shown(&host);
        assert!(now == Some(h.expected(0)) || now == Some(h.expected(1)), "crash after {k} writes: neither commit");
        run(&h.repo, &h.commits[1], &host, &o).await.unwrap_or_else(|e| panic!("crash at {k}: the rerun: {e}"));
        assert_eq!(shown(&host), Some(h.expected(1)), "crash at {k}: rerun");
        for next in [2, 0, 1] {
            run(&h.repo, &h.commits[next], &host, &o)
                .await
                .unwrap_or_else(|e| panic!("crash at {k}: a later sync to {next}: {e}"));
            assert_eq!(shown(&host), Some(h.expected(next)), "crash at {k}: later sync to {next}");
        }
        if r.is_ok() {
            break;
        }
        k += 1;
    }
    assert!(k > 5, "crash points tried: {k}");
}
