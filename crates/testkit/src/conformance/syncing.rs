//! The cases of syncs: against `git archive`, type changes, interrupted runs and storage faults,
//! the ops an incremental sync costs, subtrees, the lock, symlinks planted in the target, drift
//! on the paths a sync touches, and unmanaged targets.

use super::*;

/// Walk a random history of 24 commits in a random order (forward, backward, far jumps),
/// checking the target against `git archive` after every step, and that planning again is empty.
pub async fn random_walk_matches_git(f: &dyn Fixture, seed: u64) {
    let h = History::random(seed, 24);
    let order = h.walk_order(&mut Rng::new(seed ^ 0xABCD), 20, 1);
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
    let files = [("f2d", "file"), ("d2f/x", "x"), ("d2f/sub/y", "y"), ("d2l/z", "z"), ("f2l", "f"), ("mode", "m")];
    let a = Model::of(&files).with([
        ("gone/deep/only", history::file("o")),
        ("l2d", Entry::Link { target: "f2d".into() }),
        ("l2f", Entry::Link { target: "nowhere".into() }),
        ("sub", Entry::Gitlink { commit: "1111111111111111111111111111111111111111".into() }),
        ("sub2d", Entry::Gitlink { commit: "2222222222222222222222222222222222222222".into() }),
    ]);
    let b =
        Model::of(&[("f2d/inner", "now a dir"), ("d2f", "now a file"), ("l2d/x", "x"), ("l2f", "file now")]).with([
            ("d2l", Entry::Link { target: "../escape".into() }),
            ("f2l", Entry::Link { target: "mode".into() }),
            ("mode", history::executable("m")),
            ("sub", Entry::Gitlink { commit: "3333333333333333333333333333333333333333".into() }),
            ("sub2d/file", history::file("in dir")),
        ]);
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
            a.insert(&format!("d{d}/f{i}"), history::file(format!("{d}/{i}\n")));
        }
    }
    let changed = ["d1/f1", "d2/f2", "d3/new", "d19/f49"];
    let mut b = a.with(changed.map(|p| (p, history::file("changed\n"))));
    b.0.remove("d5/f5");
    let h = History::from_trees(&[a, b]);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("initial");
    assert_touches_only(&h, &h.commits[1], f, &changed).await;
    h.assert_matches(f, 1, "incremental");
}

/// Sync `f` to `rev` through a counting wrapper: the run's 5 ops are on the `changed` paths and
/// the removed `d5/f5`, with one state read, two state writes and no listing of the target.
async fn assert_touches_only(h: &History, rev: &str, f: &dyn Fixture, changed: &[&str]) {
    let counting = Count::new(f.backend());
    let record = counting.record();
    sync_to(&h.repo, rev, &counting).await.expect("incremental");
    let r = record.lock().expect("record").clone();
    let touched = touched(&r);
    for p in &touched {
        assert!(changed.contains(&p.as_str()) || p == "d5/f5", "op on unchanged path {p}");
    }
    assert_eq!(r.counts.total(), 5, "ops: {touched:?}");
    assert_eq!(r.state_reads, 1);
    assert_eq!(r.state_writes, 2);
    assert_eq!(r.dir_reads, 0, "no listing of the target");
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
            m.insert("top.txt", history::file(format!("commit {i}\n")));
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
    let mut a = Model::default();
    for d in 0..10 {
        for i in 0..20 {
            a.insert(&format!("site/d{d}/f{i}"), history::file(format!("{d}/{i}\n")));
            a.insert(&format!("src/d{d}/f{i}"), history::file(format!("src {d}/{i}\n")));
        }
    }
    let changed = ["d1/f1", "d2/f2", "d3/new", "d9/f19"];
    let mut b = a.with(changed.map(|p| (format!("site/{p}"), history::file("changed\n"))));
    b.0.remove("site/d5/f5");
    for d in 0..10 {
        for i in 0..10 {
            b.insert(&format!("src/d{d}/f{i}"), history::file("outside\n"));
        }
    }
    let h = History::from_trees(&[a, b]);
    sync_to(&h.repo, &format!("{}:site", h.commits[0]), &*f.backend()).await.expect("initial");
    let rev = format!("{}:site", h.commits[1]);
    assert_touches_only(&h, &rev, f, &changed).await;
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
    let a = Model::of(&[("a.txt", "a\n")]);
    let b = a.with([("README", history::file("upper\n")), ("readme", history::file("lower\n"))]);
    let c = a.with([("Dir/x", history::file("x\n")), ("dir/y", history::file("y\n"))]);
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
    let a = Model::of(&[("d/x", "x")]);
    let b = a.with([("d/y", history::file("y"))]);
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

/// A target whose `.treesync` someone replaced by a symlink to `outside`, an empty directory
/// elsewhere (the backends of a shared server, where others can write in the target): the sync
/// to commit `i` of `h` is refused naming it, and nothing is written where it points. Not a
/// case of the suite (a local disk is the user's own); returns the error for the caller's
/// checks.
pub async fn a_state_folder_that_is_a_symlink_is_refused(
    f: &dyn Fixture,
    h: &History,
    i: usize,
    outside: &std::path::Path,
) -> sync::Error {
    assert!(f.replace_dir_by_symlink(".treesync", outside), "the fixture has symlinks");
    let err = sync_to(&h.repo, &h.commits[i], &*f.backend()).await.expect_err("refused");
    assert!(matches!(err, sync::Error::Backend(backend::Error::StateFolder { found: "symlink", .. })), "{err}");
    assert_eq!(std::fs::read_dir(outside).expect("ls").count(), 0, "nothing written where it points");
    err
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
    let a = Model::of(&[
        ("d/x", "x"),
        ("d/sub/y", "y"),
        ("d/sub/z", "z"),
        ("e/f", "f"),
        ("k/z", "z"),
        ("top", "t"),
        ("m", "mode only"),
    ]);
    let changed = [("d/x", "x2"), ("d/sub/y", "y2"), ("d/new", "n"), ("e/f", "f2"), ("k/z2", "z2"), ("top", "t2")];
    let b = a.with(changed.map(|(p, c)| (p, history::file(c)))).with([("m", history::executable("mode only"))]);
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
