//! The conformance suite: the same behaviour checked on every backend.
//!
//! A backend's test file provides a [`Fixture`] and calls [`conformance_suite!`](crate::conformance_suite),
//! which makes one test per case. Every case compares the target with `git archive` of the
//! commit it was synced to.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use treesync_core::policy::{Count, Fail};
use treesync_core::{Backend, Repo, backend, sync, verify};

use crate::history::{self, Entry, Model};
use crate::tree::{self, Node};
use crate::{BareRepo, Rng};

/// One target of the backend under test.
pub trait Fixture: Send + Sync {
    /// A backend for the target (a fresh handle each call; all handles share the target).
    fn backend(&self) -> Arc<dyn Backend>;
    /// Read the whole target back.
    fn read(&self) -> BTreeMap<String, Node>;
    /// Put a foreign file into the target, bypassing treesync.
    fn put_file(&self, path: &str, content: &[u8]);
    /// Replace the directory at `path` by a symlink to `target` (which may be outside), bypassing treesync.
    /// Returns `false` if the backend has no symlinks.
    fn replace_dir_by_symlink(&self, path: &str, target: &std::path::Path) -> bool;
    /// Replace whatever is at `path` as `how` says, bypassing treesync. Returns `false` if the
    /// fixture cannot (object stores: no directories, nothing of the wrong type to heal).
    fn tamper(&self, _path: &str, _how: &tree::Tamper) -> bool {
        false
    }
    /// What the backend can represent (expected trees are reduced to that).
    fn capabilities(&self) -> backend::Capabilities {
        self.backend().capabilities()
    }
}

/// `tree` as a backend with `caps` can hold it: without empty directories, exec bits or
/// symlinks where it has none (a symlink is then a file holding its target).
pub fn reduce(tree: &BTreeMap<String, Node>, caps: backend::Capabilities) -> BTreeMap<String, Node> {
    let mut out: BTreeMap<String, Node> = tree
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Node::Link(t) if !caps.symlinks => Node::File(t.clone(), false),
                Node::File(d, _) if !caps.exec_bit => Node::File(d.clone(), false),
                v => v.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    if !caps.empty_dirs {
        let keep: std::collections::BTreeSet<String> = out
            .iter()
            .filter(|(_, v)| !matches!(v, Node::Dir))
            .flat_map(|(k, _)| {
                let mut parents = Vec::new();
                let mut p = k.as_str();
                while let Some(i) = p.rfind('/') {
                    p = &p[..i];
                    parents.push(p.to_string());
                }
                parents
            })
            .collect();
        out.retain(|k, v| !matches!(v, Node::Dir) || keep.contains(k));
    }
    out
}

/// Sync `backend` to `rev`.
pub async fn sync_to(repo: &Repo, rev: &str, backend: &dyn Backend) -> Result<sync::Outcome, sync::Error> {
    sync_with(repo, rev, backend, false).await
}

/// Sync `backend` to `rev`, optionally with `--force`.
pub async fn sync_with(
    repo: &Repo,
    rev: &str,
    backend: &dyn Backend,
    force: bool,
) -> Result<sync::Outcome, sync::Error> {
    let options = sync::Options { force, backend_name: "test".into(), ..Default::default() };
    sync::sync(repo, rev, backend, &options, &|_| {}, &AtomicBool::new(false)).await
}

/// A bare repository holding a random history, and `git archive` of each commit read back.
pub struct History {
    /// The repository.
    pub bare: BareRepo,
    /// The opened repository.
    pub repo: Repo,
    /// Commit ids, oldest first.
    pub commits: Vec<String>,
    expected: std::sync::Mutex<HashMap<String, BTreeMap<String, Node>>>,
}

impl History {
    /// A repository with `trees` as its history on `main`.
    pub fn from_trees(trees: &[Model]) -> History {
        let bare = BareRepo::new();
        let commits = history::import(&bare.path, "main", trees);
        assert_eq!(commits.len(), trees.len(), "fast-import made one commit per tree");
        let repo = Repo::open(&bare.path).expect("open generated repo");
        History { bare, repo, commits, expected: Default::default() }
    }

    /// [`History::from_trees`] in a repository with `config` set (`git config`) before it is
    /// opened.
    pub fn from_trees_with_config(trees: &[Model], config: &[(&str, &str)]) -> History {
        let bare = BareRepo::new();
        let commits = history::import(&bare.path, "main", trees);
        assert_eq!(commits.len(), trees.len(), "fast-import made one commit per tree");
        for (k, v) in config {
            crate::git(&bare.path, &["config", k, v]);
        }
        let repo = Repo::open(&bare.path).expect("open generated repo");
        History { bare, repo, commits, expected: Default::default() }
    }

    /// A random history of `n` commits.
    pub fn random(seed: u64, n: usize) -> History {
        Self::from_trees(&history::random_history(seed, n))
    }

    /// What `git archive` of commit `i` holds.
    pub fn expected(&self, i: usize) -> BTreeMap<String, Node> {
        self.expected_of(&self.commits[i])
    }

    /// What `git archive TREEISH` holds: a commit, or a directory of one (`ID:sub`).
    pub fn expected_of(&self, treeish: &str) -> BTreeMap<String, Node> {
        let mut cache = self.expected.lock().expect("never poisoned");
        cache
            .entry(treeish.to_string())
            .or_insert_with(|| {
                let dir = tempfile::tempdir().expect("tempdir");
                let dest = dir.path().join("x");
                self.bare.archive(treeish, &dest);
                tree::read_dir(&dest)
            })
            .clone()
    }

    /// Panic with a readable diff unless the fixture holds commit `i`.
    pub fn assert_matches(&self, f: &dyn Fixture, i: usize, context: &str) {
        self.assert_matches_of(f, &self.commits[i], context);
    }

    /// Panic with a readable diff unless the fixture holds what `git archive TREEISH` holds.
    pub fn assert_matches_of(&self, f: &dyn Fixture, treeish: &str, context: &str) {
        let expected = reduce(&self.expected_of(treeish), f.capabilities());
        if let Some(d) = tree::diff(&expected, &f.read()) {
            panic!("{context}: target differs from `git archive {treeish}`:\n{d}");
        }
    }
}

/// Walk a random history of 24 commits in a random order (forward, backward, far jumps),
/// checking the target against `git archive` after every step, and that planning again is empty.
pub async fn random_walk_matches_git(f: &dyn Fixture, seed: u64) {
    let h = History::random(seed, 24);
    let mut rng = Rng::new(seed ^ 0xABCD);
    let n = h.commits.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.extend((0..20).map(|_| rng.below(n)));
    order.extend((0..n).rev());
    let backend = f.backend();
    for (step, &i) in order.iter().enumerate() {
        sync_to(&h.repo, &h.commits[i], &*backend)
            .await
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: sync to commit {i} failed: {e}"));
        h.assert_matches(f, i, &format!("seed {seed} step {step} (commit {i})"));
        let again = sync::prepare(&h.repo, &h.commits[i], &*backend, &Default::default()).await.expect("prepare");
        assert!(again.main.is_empty(), "seed {seed} step {step}: planning again is not empty: {:?}", again.main.counts);
        assert!(again.resume.is_none());
    }
}

/// The first sync writes exactly `git archive`.
pub async fn initial_sync_matches_git_archive(f: &dyn Fixture) {
    let h = History::random(7, 2);
    let out = sync_to(&h.repo, &h.commits[1], &*f.backend()).await.expect("sync");
    assert!(out.from.is_none());
    h.assert_matches(f, 1, "initial sync");
}

/// File ↔ directory ↔ symlink changes in both directions, gitlinks, exec bits, empty-after-delete.
pub async fn type_changes_match_git(f: &dyn Fixture) {
    let file = |s: &str| Entry::File { content: s.as_bytes().to_vec(), executable: false };
    let mut a = Model::default();
    a.insert("f2d", file("file"));
    a.insert("d2f/x", file("x"));
    a.insert("d2f/sub/y", file("y"));
    a.insert("l2d", Entry::Link { target: "f2d".into() });
    a.insert("d2l/z", file("z"));
    a.insert("f2l", file("f"));
    a.insert("l2f", Entry::Link { target: "nowhere".into() });
    a.insert("mode", file("m"));
    a.insert("gone/deep/only", file("o"));
    a.insert("sub", Entry::Gitlink { commit: "1111111111111111111111111111111111111111".into() });
    a.insert("sub2d", Entry::Gitlink { commit: "2222222222222222222222222222222222222222".into() });
    let mut b = Model::default();
    b.insert("f2d/inner", file("now a dir"));
    b.insert("d2f", file("now a file"));
    b.insert("l2d/x", file("x"));
    b.insert("d2l", Entry::Link { target: "../escape".into() });
    b.insert("f2l", Entry::Link { target: "mode".into() });
    b.insert("l2f", file("file now"));
    b.insert("mode", Entry::File { content: b"m".to_vec(), executable: true });
    b.insert("sub", Entry::Gitlink { commit: "3333333333333333333333333333333333333333".into() });
    b.insert("sub2d/file", file("in dir"));
    let h = History::from_trees(&[a, b]);
    let backend = f.backend();
    for (step, i) in [0usize, 1, 0, 1].into_iter().enumerate() {
        sync_to(&h.repo, &h.commits[i], &*backend).await.unwrap_or_else(|e| panic!("step {step}: {e}"));
        h.assert_matches(f, i, &format!("type changes, step {step}"));
    }
    // An exec-bit flip alone is a chmod, not a rewrite.
    let plan = sync::prepare(&h.repo, &h.commits[0], &*backend, &Default::default()).await.expect("prepare");
    assert!(plan.main.ops().any(|op| matches!(op, treesync_core::Op::Chmod { path, .. } if path.display() == "mode")));
}

/// A sync stopped after M ops (several M) is reported as interrupted and finished by the next run.
pub async fn interrupted_sync_is_finished_by_next_run(f: &dyn Fixture) {
    let h = History::random(11, 6);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("first sync");
    let mut current = 0;
    // (commit to sync to, which fraction of its plan runs before the fault, commit the next run goes to)
    for (round, (target, percent, next)) in [(5, 0, 5), (3, 33, 3), (0, 50, 0), (5, 99, 1)].into_iter().enumerate() {
        let total =
            sync::prepare(&h.repo, &h.commits[target], &*backend, &Default::default()).await.expect("plan").main.len();
        assert!(
            total > 1,
            "round {round}: the test needs a plan of some size, got {total} ops from {current} to {target}"
        );
        let m = (total * percent / 100).min(total - 1);
        let failing = Fail::after(f.backend(), m as u64);
        let err = sync_to(&h.repo, &h.commits[target], &failing).await.expect_err("the fault stops the sync");
        assert!(matches!(err, sync::Error::Apply { .. }), "unexpected error {err}");
        let status = sync::status(&*backend).await.expect("status");
        let p = status.state.and_then(|s| s.in_progress).expect("status reports the interrupted sync");
        assert_eq!(p.to_commit.to_string(), h.commits[target]);
        // Finish it, to the same commit or to another one.
        let out = sync_to(&h.repo, &h.commits[next], &*backend).await.expect("the next sync finishes");
        assert!(out.resumed.is_some());
        h.assert_matches(f, next, &format!("round {round}: after interruption at op {m} of {total}"));
        current = next;
    }
    let status = sync::status(&*backend).await.expect("status");
    assert!(status.state.expect("state").in_progress.is_none());
    assert_eq!(current, 1);
}

/// Storage faults of every kind (EIO, ENOSPC, EACCES, EROFS, a timeout), injected half-way
/// through a sync: one clear message with a hint where one helps and the advice to run sync
/// again, the journal records the unfinished sync, and the rerun finishes like git archive.
pub async fn storage_faults_are_clear_and_recoverable(f: &dyn Fixture) {
    use std::io::ErrorKind::*;
    use treesync_core::policy::Fault;
    let h = History::random(31, 4);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("initial");
    for (i, (kind, hint)) in [
        (Other, ""),
        (StorageFull, "free space"),
        (PermissionDenied, "permissions"),
        (ReadOnlyFilesystem, "read-only"),
        (TimedOut, ""),
    ]
    .into_iter()
    .enumerate()
    {
        let to = 1 + i % 3;
        let plan = sync::prepare(&h.repo, &h.commits[to], &*backend, &Default::default()).await.expect("plan");
        let half = (plan.main.len() / 2) as u64;
        let failing = Fail::after(f.backend(), half).with(Fault::Io(kind));
        let err = sync_to(&h.repo, &h.commits[to], &failing).await.expect_err("the fault stops the sync");
        let msg = err.to_string();
        assert!(msg.lines().count() <= 3 && msg.contains("(injected)") && msg.contains(hint), "{kind:?}: {msg}");
        assert!(msg.contains("run sync again"), "{kind:?}: says what to do: {msg}");
        let status = sync::status(&*backend).await.expect("status");
        assert!(status.state.expect("state").in_progress.is_some(), "{kind:?}: the journal knows");
        sync_to(&h.repo, &h.commits[to], &*backend).await.expect("the rerun finishes");
        h.assert_matches(f, to, &format!("{kind:?}: after the rerun"));
    }
}

/// An incremental sync touches only changed paths: ops ≤ 4 per changed path, no op elsewhere,
/// one state read and at most two state writes.
pub async fn incremental_sync_touches_only_changed_paths(f: &dyn Fixture) {
    let mut a = Model::default();
    for d in 0..20 {
        for i in 0..50 {
            a.insert(
                &format!("d{d}/f{i}"),
                Entry::File { content: format!("{d}/{i}\n").into_bytes(), executable: false },
            );
        }
    }
    let mut b = a.clone();
    let changed = ["d1/f1", "d2/f2", "d3/new", "d19/f49"];
    for p in changed {
        b.insert(p, Entry::File { content: b"changed\n".to_vec(), executable: false });
    }
    b.0.remove("d5/f5");
    let h = History::from_trees(&[a, b]);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("initial");
    let counting = Count::new(f.backend());
    let record = counting.record();
    sync_to(&h.repo, &h.commits[1], &counting).await.expect("incremental");
    let r = record.lock().expect("record").clone();
    let touched: Vec<String> =
        r.ops.iter().map(|o| String::from_utf8_lossy(o.path().as_bytes()).into_owned()).collect();
    for p in &touched {
        assert!(changed.contains(&p.as_str()) || p == "d5/f5", "op on unchanged path {p}");
    }
    assert_eq!(r.counts.total(), 5, "ops: {touched:?}");
    assert_eq!(r.state_reads, 1);
    assert_eq!(r.state_writes, 2);
    assert_eq!(r.dir_reads, 0, "no listing of the target");
    h.assert_matches(f, 1, "incremental");
}

/// Commit `i` of a history whose trees hold random trees in `sub/` and `other/` (the next
/// one's, so the two differ) and a file at the top, for the subtree cases.
fn monorepo(models: &[Model]) -> Vec<Model> {
    (0..models.len())
        .map(|i| {
            let mut m = Model::default();
            for (prefix, model) in [("sub", &models[i]), ("other", &models[(i + 1) % models.len()])] {
                for (p, e) in &model.0 {
                    m.0.insert(format!("{prefix}/{p}"), e.clone());
                }
            }
            m.insert("top.txt", Entry::File { content: format!("commit {i}\n").into_bytes(), executable: false });
            m
        })
        .collect()
}

/// `REV:PATH` syncs a directory of a commit as the target's root: the first sync, an
/// incremental one to the next commit's `sub`, a switch to another directory (`other`) and
/// back in history, each equal to `git archive REV:PATH` and planning again empty. Moving
/// between subtrees diffs the two trees in the object database: the target is never listed.
pub async fn subtree_syncs_match_git_archive_of_the_tree(f: &dyn Fixture) {
    // One target, so one repository: its history is long enough for every kind of step.
    {
        let seed = 11;
        let h = History::from_trees(&monorepo(&history::random_history(seed, 5)));
        let steps =
            [(0, "sub"), (1, "sub"), (1, "other"), (0, "other"), (3, "sub"), (2, ""), (4, "other/"), (4, "sub")];
        for (step, (i, path)) in steps.into_iter().enumerate() {
            let rev = format!("{}:{path}", h.commits[i]);
            let counting = Count::new(f.backend());
            let record = counting.record();
            let out = sync_to(&h.repo, &rev, &counting)
                .await
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: sync to {rev} failed: {e}"));
            assert_eq!(out.commit.to_string(), h.commits[i], "the state records the commit");
            let tree = crate::git(&h.bare.path, &["rev-parse", &rev]);
            assert_eq!(out.tree.to_string(), tree.trim(), "the state records the subtree's tree");
            let state = treesync_core::state::SyncState::parse(
                &f.backend().load_state().await.expect("load state").expect("a state"),
            )
            .expect("parse state");
            let recorded = path.trim_end_matches('/');
            assert_eq!(state.path.as_deref(), (!recorded.is_empty()).then_some(recorded), "the state records the path");
            h.assert_matches_of(f, &rev, &format!("seed {seed} step {step} ({rev})"));
            if step > 0 {
                let r = record.lock().expect("record");
                assert_eq!(r.dir_reads, 0, "seed {seed} step {step}: the target was listed");
                assert_eq!(r.state_reads, 1, "seed {seed} step {step}: one state read");
            }
            let again = sync::prepare(&h.repo, &rev, &*f.backend(), &Default::default()).await.expect("prepare");
            assert!(again.main.is_empty(), "seed {seed} step {step}: planning again: {:?}", again.main.counts);
            let report = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Full).await.expect("verify");
            assert!(report.is_clean(), "seed {seed} step {step}: verify after {rev}: {:?}", report.drift);
        }
        // Interrupted on the way to a subtree: the journal records the directory, and the next
        // run finishes it (the same revision, then the whole tree of another commit).
        let backend = f.backend();
        for (round, (to, next)) in [((0, "other"), (0, "other")), ((3, "sub"), (3, ""))].into_iter().enumerate() {
            let rev = format!("{}:{}", h.commits[to.0], to.1);
            let total = sync::prepare(&h.repo, &rev, &*backend, &Default::default()).await.expect("plan").main.len();
            assert!(total > 1, "round {round}: the test needs a plan of some size, got {total} ops to {rev}");
            let failing = Fail::after(f.backend(), (total / 2) as u64);
            let err = sync_to(&h.repo, &rev, &failing).await.expect_err("the fault stops the sync");
            assert!(matches!(err, sync::Error::Apply { .. }), "round {round}: unexpected error {err}");
            let state = sync::status(&*backend).await.expect("status").state.expect("a state");
            let p = state.in_progress.expect("the interrupted sync is journaled");
            assert_eq!(p.to_path.as_deref(), Some(to.1), "round {round}: the journal records the directory");
            let next_rev = format!("{}:{}", h.commits[next.0], next.1);
            let out = sync_to(&h.repo, &next_rev, &*backend).await.expect("the next sync finishes");
            assert!(out.resumed.is_some_and(|r| r.to_path.as_deref() == Some(to.1)), "round {round}: resumed");
            h.assert_matches_of(f, &next_rev, &format!("round {round}: after the interruption ({next_rev})"));
            let state = sync::status(&*backend).await.expect("status").state.expect("a state");
            assert!(state.in_progress.is_none());
            assert_eq!(state.path.as_deref(), (!next.1.is_empty()).then_some(next.1), "round {round}: path");
        }
    }
}

/// An incremental sync of a subtree costs what its own changes cost: K ops for K changed
/// paths inside it, none for the many changes outside it.
pub async fn incremental_subtree_sync_touches_only_changed_paths(f: &dyn Fixture) {
    let file = |s: String| Entry::File { content: s.into_bytes(), executable: false };
    let mut a = Model::default();
    for d in 0..10 {
        for i in 0..20 {
            a.insert(&format!("site/d{d}/f{i}"), file(format!("{d}/{i}\n")));
            a.insert(&format!("src/d{d}/f{i}"), file(format!("src {d}/{i}\n")));
        }
    }
    let mut b = a.clone();
    let changed = ["d1/f1", "d2/f2", "d3/new", "d9/f19"];
    for p in changed {
        b.insert(&format!("site/{p}"), file("changed\n".into()));
    }
    b.0.remove("site/d5/f5");
    for d in 0..10 {
        for i in 0..10 {
            b.insert(&format!("src/d{d}/f{i}"), file("outside\n".into()));
        }
    }
    let h = History::from_trees(&[a, b]);
    sync_to(&h.repo, &format!("{}:site", h.commits[0]), &*f.backend()).await.expect("initial");
    let counting = Count::new(f.backend());
    let record = counting.record();
    let rev = format!("{}:site", h.commits[1]);
    sync_to(&h.repo, &rev, &counting).await.expect("incremental");
    let r = record.lock().expect("record").clone();
    let touched: Vec<String> =
        r.ops.iter().map(|o| String::from_utf8_lossy(o.path().as_bytes()).into_owned()).collect();
    for p in &touched {
        assert!(changed.contains(&p.as_str()) || p == "d5/f5", "op on unchanged path {p}");
    }
    assert_eq!(r.counts.total(), 5, "ops: {touched:?}");
    assert_eq!(r.state_reads, 1);
    assert_eq!(r.state_writes, 2);
    assert_eq!(r.dir_reads, 0, "no listing of the target");
    h.assert_matches_of(f, &rev, "incremental subtree");
}

/// A second sync of a locked target fails fast with `Locked`, naming the holder. On backends
/// without an exclusive lock, the journal entry of a sync that died is a lease: the next sync
/// is refused until it expires or `break_lock` is given, and then finishes the job.
pub async fn locked_target_is_refused(f: &dyn Fixture) {
    let h = History::random(3, 3);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("first sync");
    if !f.capabilities().exclusive_lock {
        let dying = Fail::after(f.backend(), 1).also_state();
        sync_to(&h.repo, &h.commits[1], &dying).await.expect_err("dies");
        let err = sync_to(&h.repo, &h.commits[2], &*f.backend()).await.expect_err("lease held");
        match err {
            sync::Error::Backend(backend::Error::Locked { holder }) => {
                assert!(
                    holder.contains(&std::process::id().to_string()) && holder.contains("--break-lock"),
                    "holder: {holder}"
                )
            }
            e => panic!("expected Locked, got {e}"),
        }
        let options = sync::Options { break_lock: true, backend_name: "test".into(), ..Default::default() };
        sync::sync(&h.repo, &h.commits[2], &*f.backend(), &options, &|_| {}, &AtomicBool::new(false))
            .await
            .expect("--break-lock takes over");
        h.assert_matches(f, 2, "after breaking the lease");
        return;
    }
    let other = treesync_core::state::Holder { pid: 4242, host: "testhost".into(), started: 1 };
    let guard = backend.lock(&other).await.expect("lock");
    let err = sync_to(&h.repo, &h.commits[1], &*f.backend()).await.expect_err("locked");
    match err {
        sync::Error::Backend(backend::Error::Locked { holder }) => assert!(holder.contains("4242"), "holder: {holder}"),
        e => panic!("expected Locked, got {e}"),
    }
    backend.unlock(guard).await.expect("unlock");
    sync_to(&h.repo, &h.commits[1], &*backend).await.expect("after unlock");
    h.assert_matches(f, 1, "after the lock was released");
}

/// Slow storage whose ops finish out of order (0–3 ms each, spread by path): every sync of a
/// walk through a random history still gives `git archive`, and a sync interrupted while ops
/// are slow is recorded and finished by the next run.
pub async fn slow_and_reordered_ops_change_nothing_but_time(f: &dyn Fixture) {
    use std::time::Duration;
    use treesync_core::policy::Latency;
    let h = History::random(41, 6);
    let slow = Latency::spread(f.backend(), Duration::ZERO, Duration::from_millis(3));
    for i in [0, 3, 1, 5, 2, 4] {
        sync_to(&h.repo, &h.commits[i], &slow).await.unwrap_or_else(|e| panic!("slow sync to {i}: {e}"));
        h.assert_matches(f, i, &format!("slow sync to commit {i}"));
    }
    // Interrupted while ops are slow (Ctrl-C): the journal knows, the next run finishes.
    let interrupt = std::sync::Arc::new(AtomicBool::new(false));
    let flag = interrupt.clone();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(4)).await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let slower = Latency::spread(f.backend(), Duration::from_millis(2), Duration::from_millis(6));
    let options = sync::Options { backend_name: "test".into(), ..Default::default() };
    let r = sync::sync(&h.repo, &h.commits[0], &slower, &options, &|_| {}, &interrupt).await;
    let _ = stopper.await;
    if let Err(e) = &r {
        assert!(matches!(e, sync::Error::Interrupted { .. }), "interrupted, not {e}");
        let status = sync::status(&*f.backend()).await.expect("status");
        assert!(status.state.expect("state").in_progress.is_some(), "the journal knows");
    }
    sync_to(&h.repo, &h.commits[0], &slow).await.expect("the next run finishes");
    h.assert_matches(f, 0, "after the interrupted slow sync");
}

/// Names that differ only by case: on a target that tells them apart they are two entries,
/// like in git; on one that does not (probed, or told by the server), the sync that would make
/// one overwrite the other is refused before any write, naming both, and the target stays at
/// the commit it had.
pub async fn case_collisions_are_refused_where_case_is_not_told_apart(f: &dyn Fixture) {
    let file = |s: &str| Entry::File { content: s.as_bytes().to_vec(), executable: false };
    let mut a = Model::default();
    a.insert("a.txt", file("a\n"));
    let mut b = a.clone();
    b.insert("README", file("upper\n"));
    b.insert("readme", file("lower\n"));
    let mut c = a.clone();
    c.insert("Dir/x", file("x\n"));
    c.insert("dir/y", file("y\n"));
    let h = History::from_trees(&[a, b, c]);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("initial");
    if backend.capabilities().case_sensitive {
        for i in [1, 2, 0] {
            sync_to(&h.repo, &h.commits[i], &*backend).await.expect("a case-sensitive target holds both");
            h.assert_matches(f, i, "case-sensitive");
        }
        return;
    }
    for (i, (x, y)) in [(1, ("README", "readme")), (2, ("Dir", "dir"))] {
        let err = sync_to(&h.repo, &h.commits[i], &*backend).await.expect_err("refused").to_string();
        assert!(
            err.contains("differ only by case")
                && err.contains(x)
                && err.contains(y)
                && err.contains("nothing was written"),
            "{err}"
        );
        h.assert_matches(f, 0, "nothing written");
        let status = sync::status(&*backend).await.expect("status");
        let state = status.state.expect("state");
        assert!(state.in_progress.is_none(), "no unfinished sync recorded");
        assert_eq!(state.synced.expect("synced").commit.to_string(), h.commits[0], "still at the first commit");
    }
}

/// A target that someone changed so that a directory is a symlink to a directory elsewhere:
/// nothing is written through it (nor removed), the symlink is replaced by the directory the
/// tree has, and the target ends as the tree (backends without symlinks of their own refuse).
pub async fn never_writes_through_a_symlink(f: &dyn Fixture) {
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("x"), b"outside\n").expect("write");
    let file = |s: &str| Entry::File { content: s.as_bytes().to_vec(), executable: false };
    let mut a = Model::default();
    a.insert("d/x", file("x"));
    let mut b = a.clone();
    b.insert("d/y", file("y"));
    let h = History::from_trees(&[a.clone(), b, a]);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("first sync");
    if !f.replace_dir_by_symlink("d", outside.path()) {
        return;
    }
    let only_x = || {
        let names: Vec<_> =
            std::fs::read_dir(outside.path()).expect("outside").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, ["x"], "something was written or removed outside");
        assert_eq!(std::fs::read(outside.path().join("x")).expect("x"), b"outside\n", "a file outside changed");
    };
    if !f.capabilities().symlinks {
        // A store of objects on a directory (`file://`) has no symlinks of its own to replace:
        // it refuses the path instead, and writes nothing through it.
        let err = sync_to(&h.repo, &h.commits[1], &*backend).await.expect_err("must refuse");
        assert!(
            matches!(err, sync::Error::Apply { source: backend::Error::NotBeneath { .. }, .. }),
            "unexpected error: {err}"
        );
        only_x();
        return;
    }
    let out = sync_to(&h.repo, &h.commits[1], &*backend).await.expect("the sync replaces the symlink");
    assert!(out.healed > 0, "the sync reports that it healed drift");
    only_x();
    h.assert_matches(f, 1, "after replacing the planted symlink");
    f.replace_dir_by_symlink("d", outside.path());
    sync_to(&h.repo, &h.commits[2], &*backend).await.expect("syncing back");
    only_x();
    h.assert_matches(f, 2, "after syncing back over a planted symlink");
}

/// Someone changed the target on paths a sync touches: a managed directory deleted, or
/// replaced by a symlink or a file; a managed file replaced by a directory; a file whose only
/// change is its mode replaced by a symlink. Each time, with and without an interrupted sync
/// before it, one plain run finishes: the tree equals `git archive`, nothing outside the target
/// is written, changed or removed.
pub async fn drift_on_the_paths_a_sync_touches_is_healed(f: &dyn Fixture) {
    use tree::Tamper;
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("keep"), b"outside\n").expect("write");
    let file = |s: &str, x: bool| Entry::File { content: s.as_bytes().to_vec(), executable: x };
    let mut a = Model::default();
    for (p, c) in [("d/x", "x"), ("d/sub/y", "y"), ("d/sub/z", "z"), ("e/f", "f"), ("k/z", "z"), ("top", "t")] {
        a.insert(p, file(c, false));
    }
    a.insert("m", file("mode only", false));
    let mut b = a.clone();
    for (p, c) in [("d/x", "x2"), ("d/sub/y", "y2"), ("d/new", "n"), ("e/f", "f2"), ("k/z2", "z2"), ("top", "t2")] {
        b.insert(p, file(c, false));
    }
    b.insert("m", file("mode only", true));
    let h = History::from_trees(&[a, b]);
    // A fresh backend for every run, as every run of the CLI has: handles of directories that
    // were tampered with are not kept from one run to the next.
    let variants = [
        ("d", Tamper::Remove),
        ("d", Tamper::File),
        ("d", Tamper::Symlink(outside.path().to_path_buf())),
        ("d/sub", Tamper::Symlink(outside.path().to_path_buf())),
        ("e/f", Tamper::Dir),
        ("m", Tamper::Symlink(outside.path().join("keep"))),
        ("k", Tamper::Remove),
    ];
    for (path, how) in &variants {
        for interrupted in [false, true] {
            let context = format!("{path} tampered ({how:?}), interrupted before: {interrupted}");
            sync_with(&h.repo, &h.commits[0], &*f.backend(), true).await.expect("back to the first commit");
            h.assert_matches(f, 0, &context);
            if interrupted {
                let failing = Fail::after(f.backend(), 2);
                sync_to(&h.repo, &h.commits[1], &failing).await.expect_err("the fault stops the sync");
            }
            if !f.tamper(path, how) {
                return;
            }
            let out = sync_to(&h.repo, &h.commits[1], &*f.backend())
                .await
                .unwrap_or_else(|e| panic!("{context}: one run must finish: {e}"));
            assert_eq!(out.resumed.is_some(), interrupted, "{context}");
            h.assert_matches(f, 1, &context);
            let names: Vec<_> =
                std::fs::read_dir(outside.path()).expect("outside").map(|e| e.expect("entry").file_name()).collect();
            assert_eq!(names, ["keep"], "{context}: something was written or removed outside");
            assert_eq!(std::fs::read(outside.path().join("keep")).expect("keep"), b"outside\n", "{context}");
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(outside.path().join("keep")).expect("keep").permissions(),
            );
            assert_eq!(mode & 0o111, 0, "{context}: the mode of a file outside changed");
            // Nothing left to do.
            let again = sync::prepare(&h.repo, &h.commits[1], &*f.backend(), &Default::default()).await.expect("plan");
            assert!(again.main.is_empty() && again.resume.is_none(), "{context}: planning again is not empty");
        }
    }
}

/// A non-empty target that treesync did not write is refused without `--force`, taken over with it.
pub async fn unmanaged_target_needs_force(f: &dyn Fixture) {
    let h = History::random(5, 2);
    f.put_file("foreign.txt", b"not from git\n");
    let err = sync_to(&h.repo, &h.commits[1], &*f.backend()).await.expect_err("refused");
    assert!(matches!(err, sync::Error::Unmanaged { .. }), "unexpected error: {err}");
    assert!(f.read().contains_key("foreign.txt"), "nothing may be removed without --force");
    let out = sync_with(&h.repo, &h.commits[1], &*f.backend(), true).await.expect("takeover");
    assert!(out.takeover);
    h.assert_matches(f, 1, "after takeover");
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("incremental after takeover");
    h.assert_matches(f, 0, "incremental after takeover");
}

/// After a sync, `verify` finds nothing at every level, and a second stat-level verify proves
/// files without hashing them again where the backend keeps a stat index.
pub async fn verify_after_sync_is_clean(f: &dyn Fixture) {
    let h = History::random(11, 2);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("sync");
    sync_to(&h.repo, &h.commits[1], &*backend).await.expect("sync");
    for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
        let report = crate::verify_at(&h.repo, &*f.backend(), level).await.expect("verify");
        assert!(report.is_clean(), "{level:?}: drift right after a sync: {:?}", report.drift);
        assert!(report.expected > 0 && report.scanned > 0, "{level:?}: nothing compared: {report:?}");
        assert!(!report.interrupted);
    }
    // A second stat-level verify reads no file where the backend keeps the stat index the
    // first one wrote (filesystems: `aux_store`, and a scan with stat data). (Object stores
    // prove files by ETag where it is an MD5, which only some stores give.)
    let again = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Stat).await.expect("verify");
    assert!(again.is_clean());
    let found = f.backend().scan(1).await.expect("scan");
    let files = found.iter().filter(|e| matches!(e.kind, backend::FoundKind::File { .. })).count() as u64;
    let provable = f.capabilities().aux_store
        && found.iter().any(|e| matches!(e.kind, backend::FoundKind::File { stat: Some(_), .. }));
    if provable {
        assert_eq!((again.hashed, again.proven_by_stat), (0, files), "proven without reading: {again:?}");
    }
}

/// A file changed behind treesync's back and a foreign file are found by `verify` and put
/// right by [`sync::repair`] (the foreign file removed with `delete_extra`); a verify after it
/// is clean and the target equals `git archive` again.
pub async fn drift_is_found_and_repaired(f: &dyn Fixture) {
    let h = History::random(12, 1);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("sync");
    let expected = h.expected(0);
    let changed = expected
        .iter()
        .find_map(|(p, n)| matches!(n, Node::File(..)).then(|| p.clone()))
        .expect("the history has a file");
    f.put_file(&changed, b"changed behind treesync's back, and longer than before\n");
    f.put_file("foreign.txt", b"not from git\n");
    let report = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Stat).await.expect("verify");
    let paths: Vec<String> = report.drift.iter().map(|d| String::from_utf8_lossy(d.path()).into_owned()).collect();
    assert!(
        report
            .drift
            .iter()
            .any(|d| matches!(d, verify::Drift::ContentChanged { .. }) && d.path() == changed.as_bytes()),
        "the changed file is drift: {paths:?}"
    );
    assert!(
        report.drift.iter().any(|d| matches!(d, verify::Drift::Extra { .. }) && d.path() == b"foreign.txt"),
        "the foreign file is drift: {paths:?}"
    );
    assert_eq!(report.drift.len(), 2, "nothing else: {paths:?}");
    let options = sync::RepairOptions {
        level: verify::Level::Stat,
        delete_extra: true,
        dry_run: false,
        check_after: true,
        slice: None,
        sync: sync::Options { backend_name: "test".into(), ..Default::default() },
    };
    let out = sync::repair(&h.repo, &*f.backend(), &options, &|_| {}, &AtomicBool::new(false)).await.expect("repair");
    let applied = out.applied.expect("the repair applied ops");
    assert_eq!((applied.write, applied.unlink), (1, 1), "one rewrite, one removal: {applied:?}");
    assert!(out.after.as_ref().is_some_and(|a| a.is_clean()), "clean after the repair: {:?}", out.after);
    h.assert_matches(f, 0, "after the repair");
    let report = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Full).await.expect("verify");
    assert!(report.is_clean(), "a full verify after the repair: {:?}", report.drift);
}

/// A verify in slices ([`treesync_core::slice`]-style `verify_slice`): with drift in every directory
/// (each file changed, a foreign file added), each slice of N finds the drift of its own
/// directories only, and the N slices together find exactly what a whole verify finds, having
/// checked every path once. Then a repair of each slice leaves the whole target clean.
pub async fn slices_of_a_verify_find_all_drift_exactly_once(f: &dyn Fixture) {
    use treesync_core::slice::Slice;
    let h = History::random(14, 1);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("sync");
    let expected = h.expected(0);
    let parent = |p: &[u8]| -> Vec<u8> { p.iter().rposition(|b| *b == b'/').map_or(Vec::new(), |i| p[..i].to_vec()) };
    let mut dirs = vec![String::new()];
    for (p, n) in &expected {
        match n {
            Node::File(..) => f.put_file(p, b"changed behind treesync's back, in every directory\n"),
            Node::Dir => dirs.push(p.clone()),
            Node::Link(_) => {}
        }
    }
    for d in &dirs {
        let p = if d.is_empty() { "foreign.txt".to_string() } else { format!("{d}/foreign.txt") };
        f.put_file(&p, b"not from git\n");
    }
    let limits = treesync_core::plan::Limits::default();
    let b = f.backend();
    let whole = verify::verify(
        &h.repo,
        &*b,
        &verify::Options { level: verify::Level::Stat, limits, slice: None, ..Default::default() },
        &|_| {},
        &std::sync::atomic::AtomicBool::new(false),
    )
    .await
    .expect("verify");
    let all: std::collections::BTreeSet<Vec<u8>> = whole.drift.iter().map(|d| d.path().to_vec()).collect();
    assert!(all.len() > dirs.len(), "drift in every directory: {all:?}");
    let n = 3;
    let mut union = std::collections::BTreeSet::new();
    let mut checked = 0;
    for k in 1..=n {
        let slice = Slice::new(k, n).expect("valid");
        let r = verify::verify(
            &h.repo,
            &*b,
            &verify::Options { level: verify::Level::Stat, limits, slice: Some(slice), ..Default::default() },
            &|_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .await
        .expect("verify");
        for d in &r.drift {
            assert!(slice.has_dir(&parent(d.path())), "slice {slice} found {d:?}, of another slice");
            assert!(union.insert(d.path().to_vec()), "{d:?} found by two slices");
        }
        checked += r.expected;
    }
    assert_eq!(union, all, "the slices together find what the whole verify finds");
    assert_eq!(checked, whole.expected, "every path checked once");
    for k in 1..=n {
        let options = sync::RepairOptions {
            level: verify::Level::Stat,
            delete_extra: true,
            dry_run: false,
            check_after: true,
            slice: Some(Slice::new(k, n).expect("valid")),
            sync: sync::Options { backend_name: "test".into(), ..Default::default() },
        };
        let out = sync::repair(&h.repo, &*b, &options, &|_| {}, &AtomicBool::new(false)).await.expect("repair");
        assert!(out.after.as_ref().is_none_or(|a| a.is_clean()), "slice {k}/{n} clean after its repair");
    }
    h.assert_matches(f, 0, "after repairing every slice");
}

/// `verify --level full compares against the converted bytes` (issue 15): a target synced
/// from a repository with `.gitattributes` conversions (CRLF, `ident`, UTF-16, `text=auto`),
/// without and then with `core.autocrlf=true`, verifies clean at every level; a converted file
/// put back to its blob's bytes (CRLF → LF) is drift at every level and nothing else is; a
/// repair writes the converted bytes again (what a fresh `git clone` writes); and a `--force`
/// sync of the clean managed target writes nothing.
pub async fn verify_compares_with_converted_bytes(f: &dyn Fixture) {
    let file = |s: &[u8]| Entry::File { content: s.to_vec(), executable: false };
    let mut model = Model::default();
    model.insert(
        ".gitattributes",
        file(b"* text=auto\n*.bat text eol=crlf\n*.c ident\n*.u16 text working-tree-encoding=UTF-16LE-BOM\n"),
    );
    model.insert("run.bat", file(b"echo one\necho two\n"));
    model.insert("dir/deep.bat", file(b"x\ny\n"));
    model.insert("main.c", file(b"/* $Id$ */\nint main(void) { return 0; }\n"));
    model.insert("notes.u16", file("h\u{e9}llo\nw\u{f6}rld\n".as_bytes()));
    model.insert("readme.txt", file(b"plain\ntext\n"));
    model.insert("data.bin", file(b"\x00\x01binary\n\x00"));
    let h = History::from_trees(&[model]);
    let commit = h.commits[0].clone();
    let caps = f.capabilities();
    let repair = sync::RepairOptions {
        level: verify::Level::Stat,
        delete_extra: false,
        dry_run: false,
        check_after: true,
        slice: None,
        sync: sync::Options { backend_name: "test".into(), ..Default::default() },
    };
    for autocrlf in [false, true] {
        let config: &[(&str, &str)] = if autocrlf { &[("core.autocrlf", "true")] } else { &[] };
        if autocrlf {
            crate::git(&h.bare.path, &["config", "core.autocrlf", "true"]);
        }
        // Opened after the config is set: a repository reads its settings when opened.
        let repo = Repo::open(&h.bare.path).expect("open");
        let expected = reduce(&crate::gitcheck::expected(&h.bare.path, &commit, config), caps);
        let context = format!("core.autocrlf={autocrlf}");
        let run = |ctx: &str| {
            if let Some(d) = tree::diff(&expected, &f.read()) {
                panic!("{context}, {ctx}: the target differs from a fresh git clone:\n{d}");
            }
        };
        sync_to(&repo, &commit, &*f.backend()).await.expect("sync");
        run("after the sync");
        assert_ne!(
            expected.get("run.bat"),
            Some(&Node::File(b"echo one\necho two\n".to_vec(), false)),
            "{context}: the test needs a converted file"
        );
        for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full, verify::Level::Stat] {
            let report = crate::verify_at(&repo, &*f.backend(), level).await.expect("verify");
            assert!(report.is_clean(), "{context}, {level:?}: drift right after a sync: {:?}", report.drift);
        }
        // A `--force` sync of the clean managed target compares and writes nothing.
        let out = sync_with(&repo, &commit, &*f.backend(), true).await.expect("sync --force");
        assert_eq!(out.applied, Default::default(), "{context}: --force rewrote files of a clean target");
        run("after sync --force");

        // The converted file put back to the blob's bytes: drift, at every level, alone.
        f.put_file("run.bat", b"echo one\necho two\n");
        for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
            let report = crate::verify_at(&repo, &*f.backend(), level).await.expect("verify");
            assert_eq!(
                report.drift,
                [verify::Drift::ContentChanged { path: b"run.bat".to_vec() }],
                "{context}, {level:?}: exactly the changed file"
            );
        }
        let out = sync::repair(&repo, &*f.backend(), &repair, &|_| {}, &AtomicBool::new(false)).await.expect("repair");
        let applied = out.applied.expect("the repair applied ops");
        assert_eq!(applied.write, 1, "{context}: one file rewritten: {applied:?}");
        assert!(out.after.as_ref().is_some_and(|a| a.is_clean()), "{context}: clean after: {:?}", out.after);
        run("after the repair");
        let report = crate::verify_at(&repo, &*f.backend(), verify::Level::Full).await.expect("verify");
        assert!(report.is_clean(), "{context}: a full verify after the repair: {:?}", report.drift);
    }
}

/// A file of `content` (not executable), for the conversion cases.
fn text(content: &str) -> Entry {
    Entry::File { content: content.as_bytes().to_vec(), executable: false }
}

/// Panic with git's own words unless the fixture holds what `git checkout REV` writes
/// ([`crate::gitcheck::expected`], `.gitattributes` conversions applied), reduced to what the
/// backend can hold.
fn assert_matches_checkout(h: &History, f: &dyn Fixture, rev: &str, context: &str) {
    assert_matches_checkout_with(h, f, rev, &[], context);
}

/// [`assert_matches_checkout`] with `config` given to the clone (`git clone -c`): what the
/// repository's own config sets (clones do not copy it).
fn assert_matches_checkout_with(h: &History, f: &dyn Fixture, rev: &str, config: &[(&str, &str)], context: &str) {
    let expected = reduce(&crate::gitcheck::expected(&h.bare.path, rev, config), f.capabilities());
    let differences = crate::gitcheck::diff_snapshots(&expected, &f.read());
    assert!(
        differences.is_empty(),
        "{context}: target differs from `git checkout {rev}` in {} path(s):\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// The paths a counted run touched, as text.
fn touched(r: &treesync_core::policy::Record) -> Vec<String> {
    r.ops.iter().map(|o| String::from_utf8_lossy(o.path().as_bytes()).into_owned()).collect()
}

/// Files are written as `git checkout` writes them (issue 15): `.gitattributes` with
/// `text eol=crlf`, `ident`, `text` and `working-tree-encoding`, at the top and in a
/// subdirectory, through a history that adds, changes and removes converted files and the
/// attributes themselves, synced forward and back. Its last commit is the small attribute
/// matrix of issue 30 ([`crate::oracle::Size::Small`]: every attribute and macro of
/// gitattributes(5) in the root and nested `.gitattributes`, the encodings issue 30 names, a
/// filter driver configured in the repository). After every sync the target equals a fresh git
/// checkout of the commit, and planning again is empty.
pub async fn conversions_match_git_checkout(f: &dyn Fixture) {
    let root_attributes = "*.bat text eol=crlf\n*.c ident\n*.txt text\n*.u16 text working-tree-encoding=UTF-16LE-BOM\n";
    let mut a = Model::default();
    a.insert(".gitattributes", text(root_attributes));
    a.insert("run.bat", text("@echo off\necho one\necho two\n"));
    a.insert("src/main.c", text("/* $Id$ */\nint main(void) { return 0; }\n"));
    a.insert("src/plain.h", text("/* $Id$ stays: no ident here */\n"));
    a.insert("notes.txt", text("first\nsecond\n"));
    a.insert("mixed.txt", text("crlf line\r\nlf line\n"));
    a.insert("greeting.u16", text("h\u{e9}llo\nw\u{f6}rld\n"));
    a.insert("data.bin", Entry::File { content: b"\0binary\r\nbytes\n".to_vec(), executable: false });
    let mut b = a.clone();
    b.insert("run.bat", text("@echo off\necho changed\n"));
    b.insert("src/main.c", text("/* $Id$ */\nint main(void) { return 1; }\n"));
    b.insert("docs/.gitattributes", text("*.md text eol=crlf\n*.txt -text\n"));
    b.insert("docs/guide.md", text("# Guide\n\nline\n"));
    b.insert("docs/raw.txt", text("kept\nas is\n"));
    b.insert("docs/more.u16", text("\u{2603} snow\n"));
    b.0.remove("notes.txt");
    let mut c = b.clone();
    c.insert(".gitattributes", text("*.bat text eol=crlf\n*.c ident\n*.txt text eol=crlf\n"));
    c.insert("notes.txt", text("back\nagain\n"));
    c.insert("docs/guide.md", text("# Guide\n\nchanged line\n"));
    c.0.remove("greeting.u16");
    let (matrix, _) = crate::oracle::model(crate::oracle::Size::Small);
    let config = [crate::oracle::DRIVER];
    let h = History::from_trees_with_config(&[a, b, c, matrix], &config);
    let backend = f.backend();
    for (step, i) in [0usize, 1, 2, 0, 2, 3, 1, 3].into_iter().enumerate() {
        let rev = &h.commits[i];
        sync_to(&h.repo, rev, &*backend).await.unwrap_or_else(|e| panic!("step {step}: sync to commit {i}: {e}"));
        let what = if i == 3 { " (the attribute matrix)" } else { "" };
        assert_matches_checkout_with(&h, f, rev, &config, &format!("conversions, step {step} (commit {i}{what})"));
        let again = sync::prepare(&h.repo, rev, &*backend, &Default::default()).await.expect("prepare");
        assert!(again.main.is_empty(), "step {step}: planning again is not empty: {:?}", again.main.counts);
    }
}

/// A commit that changes nothing but a `.gitattributes` file rewrites exactly the files whose
/// converted bytes change (each op says why: its `reason`), and nothing else; a commit that
/// changes K files under an unchanged `.gitattributes` writes exactly those K files, as it
/// would without attributes.
pub async fn attribute_changes_rewrite_only_the_affected_files(f: &dyn Fixture) {
    let mut a = Model::default();
    a.insert(".gitattributes", text("*.c ident\n"));
    for i in 0..10 {
        a.insert(&format!("docs/page{i}.txt"), text(&format!("page {i}\nline two\n")));
        a.insert(&format!("docs/deep/note{i}.txt"), text(&format!("note {i}\nmore\n")));
        a.insert(&format!("other/page{i}.txt"), text(&format!("other {i}\nline two\n")));
        a.insert(&format!("src/f{i}.c"), text(&format!("/* $Id$ */\nint f{i};\n")));
    }
    // Under docs/, but their bytes do not change with `eol=crlf`: no line end, or not `*.txt`.
    a.insert("docs/one-line.txt", text("no line end"));
    a.insert("docs/readme.md", text("stays\nLF\n"));
    // Only the attributes change, in a subdirectory.
    let mut b = a.clone();
    b.insert("docs/.gitattributes", text("*.txt eol=crlf\n"));
    // K changed files under unchanged attributes: converted ones, and ones without conversion.
    let mut c = b.clone();
    let changed = ["docs/page3.txt", "docs/deep/note7.txt", "src/f2.c", "other/page5.txt", "docs/new.txt"];
    for p in changed {
        c.insert(p, text(&format!("{p} changed\nin commit c\n")));
    }
    let h = History::from_trees(&[a, b, c]);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("initial");
    assert_matches_checkout(&h, f, &h.commits[0], "before the attributes change");

    // The files whose bytes git writes differently at b, and the new attributes file.
    let (before, after) = (
        crate::gitcheck::expected(&h.bare.path, &h.commits[0], &[]),
        crate::gitcheck::expected(&h.bare.path, &h.commits[1], &[]),
    );
    let mut rewritten: Vec<String> = after
        .iter()
        .filter(|(p, n)| matches!(n, Node::File(..)) && before.get(*p).is_some_and(|old| old != *n))
        .map(|(p, _)| p.clone())
        .collect();
    rewritten.sort();
    assert_eq!(
        rewritten.len(),
        20,
        "the test expects the 20 multi-line .txt files below docs/ to change: {rewritten:?}"
    );
    let counting = Count::new(f.backend());
    let record = counting.record();
    let out = sync_to(&h.repo, &h.commits[1], &counting).await.expect("sync of the attributes-only commit");
    let r = record.lock().expect("record").clone();
    let mut writes: Vec<String> = Vec::new();
    for op in &r.ops {
        let path = String::from_utf8_lossy(op.path().as_bytes()).into_owned();
        match op {
            treesync_core::Op::Write { reason, .. } if path != "docs/.gitattributes" => {
                assert!(reason.as_deref().is_some_and(|s| !s.is_empty()), "{path}: a rewrite without a reason");
                writes.push(path);
            }
            treesync_core::Op::Write { .. } => {}
            other => panic!("only writes expected, got {other:?}"),
        }
    }
    writes.sort();
    assert_eq!(writes, rewritten, "exactly the files whose converted bytes change are rewritten");
    assert_eq!(r.counts.total(), 21, "the rewrites and the new .gitattributes: {:?}", touched(&r));
    assert_eq!(out.applied.total(), 21, "the outcome counts the same ops");
    assert_eq!(r.dir_reads, 0, "no listing of the target");
    assert_matches_checkout(&h, f, &h.commits[1], "after the attributes-only commit");

    // K changed paths under unchanged attributes: K writes, none elsewhere.
    let counting = Count::new(f.backend());
    let record = counting.record();
    let out = sync_to(&h.repo, &h.commits[2], &counting).await.expect("incremental under attributes");
    let r = record.lock().expect("record").clone();
    let mut paths = touched(&r);
    paths.sort();
    let mut want: Vec<String> = changed.iter().map(|p| p.to_string()).collect();
    want.sort();
    assert_eq!(paths, want, "K ops for K changed paths");
    assert_eq!((r.counts.write, r.counts.total()), (changed.len() as u64, changed.len() as u64), "{:?}", r.counts);
    assert_eq!(out.applied.total(), changed.len() as u64);
    for op in &r.ops {
        if let treesync_core::Op::Write { reason, .. } = op {
            assert!(reason.is_none(), "a changed blob needs no reason: {op:?}");
        }
    }
    assert_eq!(r.dir_reads, 0, "no listing of the target");
    assert_matches_checkout(&h, f, &h.commits[2], "after K changes under unchanged attributes");
}

/// The names of the conformance cases [`conformance_suite!`](crate::conformance_suite) makes
/// a test of, for skip conditions.
pub const CASES: &[&str] = &[
    "initial_sync_matches_git_archive",
    "type_changes_match_git",
    "interrupted_sync_is_finished_by_next_run",
    "storage_faults_are_clear_and_recoverable",
    "incremental_sync_touches_only_changed_paths",
    "locked_target_is_refused",
    "never_writes_through_a_symlink",
    "drift_on_the_paths_a_sync_touches_is_healed",
    "case_collisions_are_refused_where_case_is_not_told_apart",
    "slow_and_reordered_ops_change_nothing_but_time",
    "unmanaged_target_needs_force",
    "verify_after_sync_is_clean",
    "drift_is_found_and_repaired",
    "slices_of_a_verify_find_all_drift_exactly_once",
    "verify_compares_with_converted_bytes",
    "subtree_syncs_match_git_archive_of_the_tree",
    "incremental_subtree_sync_touches_only_changed_paths",
    "conversions_match_git_checkout",
    "attribute_changes_rewrite_only_the_affected_files",
    "random_walk_matches_git",
];

/// Make one `#[test]` per conformance case (see [`CASES`]) for the fixture built by `$make`
/// (an expression giving `impl Fixture`, evaluated in each test; it may `return` to skip when
/// its server is missing, as the suites of `nfs://` and S3 do outside CI).
///
/// `skip = CONDITION` leaves cases out: `CONDITION` is a `Fn(&str) -> Option<&'static str>`
/// called with the case's name, giving the reason to skip it (printed by the test) or `None`
/// to run it. A case that does not hold on a fixture is named there with its reason, instead
/// of the suite's list being copied without it.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!($make, skip = |_case: &str| -> Option<&'static str> { None });
    };
    ($make:expr, skip = $skip:expr) => {
        $crate::conformance_suite!(@case $make, $skip, initial_sync_matches_git_archive);
        $crate::conformance_suite!(@case $make, $skip, type_changes_match_git);
        $crate::conformance_suite!(@case $make, $skip, interrupted_sync_is_finished_by_next_run);
        $crate::conformance_suite!(@case $make, $skip, storage_faults_are_clear_and_recoverable);
        $crate::conformance_suite!(@case $make, $skip, incremental_sync_touches_only_changed_paths);
        $crate::conformance_suite!(@case $make, $skip, locked_target_is_refused);
        $crate::conformance_suite!(@case $make, $skip, never_writes_through_a_symlink);
        $crate::conformance_suite!(@case $make, $skip, drift_on_the_paths_a_sync_touches_is_healed);
        $crate::conformance_suite!(@case $make, $skip, case_collisions_are_refused_where_case_is_not_told_apart);
        $crate::conformance_suite!(@case $make, $skip, slow_and_reordered_ops_change_nothing_but_time);
        $crate::conformance_suite!(@case $make, $skip, unmanaged_target_needs_force);
        $crate::conformance_suite!(@case $make, $skip, verify_after_sync_is_clean);
        $crate::conformance_suite!(@case $make, $skip, drift_is_found_and_repaired);
        $crate::conformance_suite!(@case $make, $skip, slices_of_a_verify_find_all_drift_exactly_once);
        $crate::conformance_suite!(@case $make, $skip, verify_compares_with_converted_bytes);
        $crate::conformance_suite!(@case $make, $skip, subtree_syncs_match_git_archive_of_the_tree);
        $crate::conformance_suite!(@case $make, $skip, incremental_subtree_sync_touches_only_changed_paths);
        $crate::conformance_suite!(@case $make, $skip, conversions_match_git_checkout);
        $crate::conformance_suite!(@case $make, $skip, attribute_changes_rewrite_only_the_affected_files);
        #[test]
        fn random_walk_matches_git() {
            if $crate::conformance::skipped(&$skip, "random_walk_matches_git") {
                return;
            }
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            for seed in 1..=3 {
                let f = $make;
                rt.block_on($crate::conformance::random_walk_matches_git(&f, seed));
            }
        }
    };
    (@case $make:expr, $skip:expr, $name:ident) => {
        #[test]
        fn $name() {
            if $crate::conformance::skipped(&$skip, stringify!($name)) {
                return;
            }
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            let f = $make;
            rt.block_on($crate::conformance::$name(&f));
        }
    };
}

/// Whether `skip` leaves `case` out (for [`conformance_suite!`](crate::conformance_suite));
/// says so, with the reason, on stderr.
pub fn skipped(skip: &dyn Fn(&str) -> Option<&'static str>, case: &str) -> bool {
    assert!(CASES.contains(&case), "{case} is not a conformance case");
    match skip(case) {
        Some(why) => {
            eprintln!("skipped {case}: {why}");
            true
        }
        None => false,
    }
}
