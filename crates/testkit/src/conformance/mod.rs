//! The conformance suite: the same behaviour checked on every backend.
//!
//! A backend's test file provides a [`Fixture`] and calls [`conformance_suite!`](crate::conformance_suite),
//! which makes one test per case. Every case compares the target with `git archive` of the
//! commit it was synced to.
//!
//! The cases are cut by what they check: `syncing` (syncs, faults, the lock, subtrees, planted
//! symlinks, drift), `verifying` (verify and repair) and `converting` (`.gitattributes`
//! conversions). The suite of the generations host ([`host`]) stands apart: it checks a
//! [`treesync_core::generation::Host`], not a backend.

mod converting;
mod dir;
pub mod host;
mod syncing;
mod verifying;

pub use converting::*;
pub use dir::DirFixture;
pub use syncing::*;
pub use verifying::*;

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
        Self::from_trees_with_config(trees, &[])
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

    /// One commit: [`history::wide_tree`] of `files` files.
    pub fn wide(files: usize, seed: u64) -> History {
        Self::from_trees(&[history::wide_tree(files, seed)])
    }

    /// The commits of a walk through this history, by index: forward, `jumps` far jumps at
    /// random (from `rng`), then backward, every `back`-th commit.
    pub fn walk_order(&self, rng: &mut Rng, jumps: usize, back: usize) -> Vec<usize> {
        let n = self.commits.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.extend((0..jumps).map(|_| rng.below(n)));
        order.extend((0..n).rev().step_by(back));
        order
    }

    /// Sync `backend` to the commits of `order` one after the other, checking after every step
    /// that the directory `root` (the target as its storage holds it) is `git archive` of the
    /// commit. `seed` names the walk in a failure.
    pub async fn walk_dir(&self, backend: &dyn Backend, root: &std::path::Path, order: &[usize], seed: u64) {
        for (step, &i) in order.iter().enumerate() {
            sync_to(&self.repo, &self.commits[i], backend)
                .await
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            if let Some(d) = tree::diff(&self.expected(i), &tree::read_dir(root)) {
                panic!("seed {seed} step {step}: target differs from git archive of commit {i}:\n{d}");
            }
        }
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

/// The paths a counted run touched, as text.
fn touched(r: &treesync_core::policy::Record) -> Vec<String> {
    r.ops.iter().map(|o| String::from_utf8_lossy(o.path().as_bytes()).into_owned()).collect()
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
            let rt = $crate::runtime();
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
            let rt = $crate::runtime();
            let f = $make;
            rt.block_on($crate::conformance::$name(&f));
        }
    };
}

/// Whether `skip` leaves `case` out (for [`conformance_suite!`](crate::conformance_suite));
/// says so, with the reason, on stderr.
pub fn skipped(skip: &dyn Fn(&str) -> Option<&'static str>, case: &str) -> bool {
    assert!(CASES.contains(&case), "{case} is not a conformance case");
    skip_with(skip(case), case)
}

/// Whether a case is skipped for `reason`; says so on stderr.
fn skip_with(reason: Option<&'static str>, case: &str) -> bool {
    if let Some(why) = reason {
        eprintln!("skipped {case}: {why}");
    }
    reason.is_some()
}
