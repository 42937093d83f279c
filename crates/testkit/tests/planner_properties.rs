//! Properties of the planner, checked on many random histories against `git archive`, on the
//! reference in-memory backend (fast enough for every ordered pair of commits):
//!
//! 1. from any commit X to any commit Y, applying plan(X→Y) to a target holding X gives exactly
//!    `git archive Y`;
//! 2. planning again right after is empty (X→X costs nothing);
//! 3. every op's path is a path that differs between X and Y, or one of their parents;
//! 4. the phases are ordered right and the ops of a phase are independent: running each phase's
//!    ops in reverse order (or any order a backend picks) gives the same tree.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use treesync_core::memory::MemoryBackend;
use treesync_core::source::BlobSource;
use treesync_core::{Backend, sync};
use treesync_testkit::conformance::{History, sync_to};
use treesync_testkit::tree::{self, Node};

/// Paths whose entry differs between two trees, with all their parents.
fn differing(a: &BTreeMap<String, Node>, b: &BTreeMap<String, Node>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for k in a.keys().chain(b.keys()) {
        if a.get(k) != b.get(k) {
            let mut p = k.as_str();
            out.insert(p.to_string());
            while let Some(i) = p.rfind('/') {
                p = &p[..i];
                out.insert(p.to_string());
            }
        }
    }
    out
}

#[test]
fn every_pair_of_commits_of_random_histories_plans_like_git() {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let mut pairs = 0;
    for seed in 500..530 {
        let h = History::random(seed, 6);
        let n = h.commits.len();
        let expected: Vec<_> = (0..n).map(|i| h.expected(i)).collect();
        for x in 0..n {
            for y in 0..n {
                let target = MemoryBackend::new();
                rt.block_on(sync_to(&h.repo, &h.commits[x], &target)).expect("to X");
                let prepared =
                    rt.block_on(sync::prepare(&h.repo, &h.commits[y], &target, &Default::default())).expect("plan X→Y");
                let allowed = differing(&expected[x], &expected[y]);
                for phase in &prepared.main.phases {
                    for op in phase.ops.iter() {
                        let p = String::from_utf8_lossy(op.path().as_bytes()).into_owned();
                        assert!(
                            allowed.contains(&p),
                            "seed {seed} {x}→{y}: {op:?} touches a path that does not differ"
                        );
                    }
                }
                // Property 4: each phase's ops in reverse order, one at a time.
                let reversed = MemoryBackend::new();
                rt.block_on(sync_to(&h.repo, &h.commits[x], &reversed)).expect("to X");
                let blobs: Arc<dyn BlobSource> = Arc::new(h.repo.clone());
                for phase in &prepared.main.phases {
                    for op in phase.ops.iter().rev() {
                        rt.block_on(reversed.execute(op, &blobs)).unwrap_or_else(|e| {
                            panic!("seed {seed} {x}→{y}: phase '{}' reversed: {op:?}: {e}", phase.name)
                        });
                    }
                }
                if let Some(d) = tree::diff(&expected[y], &tree::read_memory(&reversed.snapshot())) {
                    panic!("seed {seed} {x}→{y}: phases with their ops reversed give another tree:\n{d}");
                }
                rt.block_on(sync_to(&h.repo, &h.commits[y], &target)).expect("X→Y");
                if let Some(d) = tree::diff(&expected[y], &tree::read_memory(&target.snapshot())) {
                    panic!("seed {seed} {x}→{y}: target differs from git archive:\n{d}");
                }
                let again =
                    rt.block_on(sync::prepare(&h.repo, &h.commits[y], &target, &Default::default())).expect("again");
                assert!(again.main.is_empty(), "seed {seed} {x}→{y}: planning again is not empty");
                pairs += 1;
            }
        }
    }
    assert_eq!(pairs, 30 * 36);
}
