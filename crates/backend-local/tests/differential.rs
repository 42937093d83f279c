//! Differential tests against the real `git`: many random histories, walked in random order,
//! each step compared with `git archive`, on the local backend behind different wrapper stacks.

use std::sync::Arc;

use treesync_backend_local::{LocalBackend, Options};
use treesync_core::policy::{Budgets, Count, Gate};
use treesync_core::{Backend, sync};
use treesync_testkit::conformance::{History, sync_to};
use treesync_testkit::history::{self, Model};
use treesync_testkit::runtime;
use treesync_testkit::{Rng, tree};

fn walk(seed: u64, wrap: impl Fn(LocalBackend) -> Arc<dyn Backend>) {
    let rt = runtime();
    let h = History::random(seed, 22);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    let backend = wrap(LocalBackend::new(&root, Options::default()));
    let order = h.walk_order(&mut Rng::new(seed), 15, 3);
    rt.block_on(h.walk_dir(&*backend, &root, &order, seed));
    let plan = rt
        .block_on(sync::prepare(&h.repo, &h.commits[order[order.len() - 1]], &*backend, &Default::default()))
        .expect("plan");
    assert!(plan.main.is_empty());
}

#[test]
fn random_histories_match_git_with_default_policy() {
    for seed in 100..108 {
        walk(seed, |b| Arc::new(b));
    }
}

#[test]
fn random_histories_match_git_behind_budgets_and_count() {
    for seed in 200..206 {
        walk(seed, |b| Arc::new(Budgets::new(Count::new(b), Gate::fixed(1), Gate::fixed(1 + (seed as usize % 3)))));
    }
}

/// N=20,000 files, K=14 changed paths: the counting wrapper sees exactly one op per changed
/// path, none on unchanged ones, one state read and two state writes.
#[test]
fn incremental_sync_cost_is_proportional_to_changes_not_tree_size() {
    let rt = runtime();
    let base = history::wide_tree(20_000, 3);
    let (next, changed) = history::change_some(&base, 10, 2, 2, 4);
    let k = changed.len() as u64;
    let h = History::from_trees(&[base, next] as &[Model]);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    rt.block_on(sync_to(&h.repo, &h.commits[0], &LocalBackend::new(&root, Options::default()))).expect("initial");
    let counting = Count::new(LocalBackend::new(&root, Options::default()));
    let record = counting.record();
    rt.block_on(sync_to(&h.repo, &h.commits[1], &counting)).expect("incremental");
    let r = record.lock().expect("record").clone();
    for op in &r.ops {
        assert!(
            changed.contains(&String::from_utf8_lossy(op.path().as_bytes()).into_owned()),
            "op on unchanged path: {op:?}"
        );
    }
    assert_eq!(r.counts.total(), k, "one op per changed path: {:?}", r.counts);
    // Besides the ops: one state read, two state writes, prepare, lock and unlock, and the stat
    // delta's clock reading and its one append (issue 18).
    assert!(r.total_calls() <= k + 8, "{} calls for {k} changes: {r:?}", r.total_calls());
    assert_eq!((r.state_reads, r.state_writes, r.dir_reads), (1, 2, 0));
    assert_eq!((r.aux_reads, r.aux_writes), (1, 1), "the delta costs one clock reading and one append");
    if let Some(d) = tree::diff(&h.expected(1), &tree::read_dir(&root)) {
        panic!("target differs from git archive:\n{d}");
    }
}
