//! Two syncs of one target started at the same moment (two threads, each with its own runtime
//! and backend, released together by a barrier), and the checks every such race must pass: the
//! loser finds the lock ([`backend::Error::Locked`], exit 3) or runs after the winner, never at
//! the same time, and the target ends up equal to `git archive` of the commit its state
//! records. Shared by the lock tests of the mounted and the `nfs://` backends, and the race of
//! two first syncs into a missing target ([`concurrent_first_syncs_into_a_missing_target`]) that
//! the local and `nfs://` suites run.

use std::sync::{Arc, Barrier};

use treesync_core::backend::{self, Backend};
use treesync_core::sync::{self, Outcome};

use crate::conformance::{Fixture, History, sync_to};
use crate::history;

/// How one race ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// Both synced, one after the other.
    pub one_after_the_other: bool,
    /// One synced, the other found the lock.
    pub one_locked_out: bool,
}

/// Sync to `revs[0]` and `revs[1]` at once, each with a backend from `backend()`.
#[allow(clippy::result_large_err)] // the results as `sync::sync` gives them
pub fn two_syncs(
    h: &History,
    revs: [&str; 2],
    backend: &(dyn Fn() -> Arc<dyn Backend> + Sync),
) -> [Result<Outcome, sync::Error>; 2] {
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let handles = revs.map(|rev| {
            let b = backend();
            let start = &start;
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                start.wait();
                rt.block_on(sync_to(&h.repo, rev, &*b))
            })
        });
        handles.map(|t| t.join().expect("a sync thread panicked"))
    })
}

/// Check a race's results (syncs to commits `to[0]` and `to[1]` of `h`) and the target it left
/// (read through `f`); panics naming `round` unless all is well.
pub fn check(
    h: &History,
    f: &dyn Fixture,
    to: [usize; 2],
    results: [Result<Outcome, sync::Error>; 2],
    round: usize,
) -> Ended {
    let mut won = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => won.push((to[i], o)),
            Err(sync::Error::Backend(backend::Error::Locked { .. })) => {}
            Err(e) => panic!("round {round}: the sync to commit {} failed other than 'locked' (exit 3): {e}", to[i]),
        }
    }
    let ended = match &won[..] {
        [] => panic!("round {round}: neither sync won"),
        [_] => Ended { one_locked_out: true, ..Ended::default() },
        [(ia, a), (ib, b)] => {
            // The later one started from what the earlier one synced: it held the lock after.
            let (sa, sb) = (h.commits[*ia].as_str(), h.commits[*ib].as_str());
            let (from_a, from_b) = (a.from.map(|c| c.commit.to_string()), b.from.map(|c| c.commit.to_string()));
            assert!(
                from_a.as_deref() == Some(sb) || from_b.as_deref() == Some(sa),
                "round {round}: both syncs won at once (they started from {from_a:?} and {from_b:?})"
            );
            Ended { one_after_the_other: true, ..Ended::default() }
        }
        _ => unreachable!("two syncs"),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let status = rt.block_on(sync::status(&*f.backend())).expect("status");
    let state = status.state.unwrap_or_else(|| panic!("round {round}: no state after a sync won"));
    assert!(state.in_progress.is_none(), "round {round}: a sync is still in progress: {state:?}");
    let synced = state.synced.expect("synced").commit.to_string();
    let i = h.commits.iter().position(|c| *c == synced).expect("the state records a commit of the history");
    assert!(won.iter().any(|(w, _)| *w == i), "round {round}: the state records commit {i}, which no winner synced");
    h.assert_matches(f, i, &format!("round {round}: the commit the state records"));
    ended
}

/// Two first syncs into a target that does not exist yet, started together, `rounds` times on
/// a fresh fixture each: making the target is no error for the one that finds it made (no
/// "File exists"); one syncs, the other finds the lock (exit 3) or runs after it; the target
/// equals `git archive` of the commit its state records. `seed` picks the two revisions (200
/// files, 100 apart).
pub fn concurrent_first_syncs_into_a_missing_target<F: Fixture>(rounds: usize, seed: u64, make: impl Fn() -> F) {
    let base = history::wide_tree(200, seed);
    let (one, _) = history::change_some(&base, 60, 20, 20, seed + 1);
    let h = History::from_trees(&[base, one]);
    for round in 0..rounds {
        let f = make();
        let results = two_syncs(&h, [&h.commits[0], &h.commits[1]], &|| f.backend());
        check(&h, &f, [0, 1], results, round);
    }
}
