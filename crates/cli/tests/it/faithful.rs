//! Issue 15, differentially: after every `treesync sync` the target holds exactly what a fresh
//! `git clone` of that commit checks out on Linux — after `.gitattributes` conversions
//! (`text`, `text=auto`, `eol`, legacy `crlf`, `-text`/`binary`, `ident`,
//! `working-tree-encoding`) and repository settings (`core.autocrlf`, `core.eol`,
//! `info/attributes`) — forward through random histories, then jumping back and forth.
//!
//! Also here: the harness checked against an independent clone, and proof that the histories
//! contain the "renormalize trap" (a commit changing only `.gitattributes`, after which an
//! incremental `git checkout` differs from a fresh clone), so the sync tests cover it.

use std::collections::BTreeMap;

use crate::sync_without_git_config as sync;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::gitcheck::{self, AttrHistory, REPO_CONFIGS, RepoConfig, Snapshot};
use treesync_testkit::history::Entry;
use treesync_testkit::{Rng, git};

/// Seeds of the histories every configuration runs.
const SEEDS: [u64; 3] = [1, 2, 3];
/// Commits per history.
const STEPS: usize = 12;
/// Random jumps after walking the history forward.
const JUMPS: usize = 5;

/// The order commits are synced in: every commit forward, then `JUMPS` random ones (the first
/// and last commit among them), so syncs go backward over attribute changes as well.
fn walk(seed: u64, commits: usize) -> Vec<usize> {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut order: Vec<usize> = (0..commits).collect();
    order.push(0);
    for _ in 1..JUMPS {
        order.push(rng.below(commits));
    }
    order.push(commits - 1);
    order
}

/// Sync every step of [`walk`] into one target; the first step whose target differs from a
/// fresh clone, described, or `None`.
fn first_difference(h: &AttrHistory, config: &RepoConfig) -> Option<String> {
    let (_dir, target) = temp_target("target");
    let mut expected: BTreeMap<usize, Snapshot> = BTreeMap::new();
    let mut prev: Option<usize> = None;
    for (step, idx) in walk(h.seed, h.commits.len()).into_iter().enumerate() {
        let commit = &h.commits[idx];
        let what = format!(
            "seed {}, config {}, step {step}: commit {idx} of {} ({commit}{}), from {}",
            h.seed,
            config.name,
            h.commits.len(),
            if h.attr_only.contains(&idx) { ", changes only .gitattributes" } else { "" },
            prev.map_or("an empty target".to_string(), |p| format!("commit {p}")),
        );
        let o = sync(&h.repo.path, commit, &target);
        if !o.status.success() {
            return Some(format!("{what}: treesync sync failed: {}", String::from_utf8_lossy(&o.stderr)));
        }
        let want = expected.entry(idx).or_insert_with(|| gitcheck::expected(&h.repo.path, commit, config.config));
        let d = gitcheck::diff(want, &target);
        if !d.is_empty() {
            return Some(format!(
                "{what}: the target differs from a fresh clone in {} path(s):\n  {}\n  attributes of that commit: {}",
                d.len(),
                d.join("\n  "),
                attributes(h, idx)
            ));
        }
        prev = Some(idx);
    }
    None
}

/// The `.gitattributes` files of commit `idx`, for failure messages.
fn attributes(h: &AttrHistory, idx: usize) -> String {
    let files: Vec<String> = h.models[idx]
        .0
        .iter()
        .filter(|(k, _)| k.ends_with(".gitattributes"))
        .map(|(k, e)| match e {
            Entry::File { content, .. } => format!("{k}: {:?}", String::from_utf8_lossy(content)),
            other => format!("{k}: {other:?}"),
        })
        .collect();
    if files.is_empty() { "none".into() } else { files.join(", ") }
}

/// Every seed with `config`; panics listing each seed's first difference.
fn syncs_equal_fresh_clones(config: &RepoConfig) {
    let mut failures = Vec::new();
    for seed in SEEDS {
        let h = AttrHistory::generate(seed, STEPS);
        config.apply(&h.repo.path);
        if let Some(f) = first_difference(&h, config) {
            failures.push(f);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} histories differ from git (reproduce: AttrHistory::generate(seed, {STEPS}), config {:?}):\n\n{}",
        failures.len(),
        SEEDS.len(),
        config,
        failures.join("\n\n")
    );
}

fn config(name: &str) -> &'static RepoConfig {
    REPO_CONFIGS.iter().find(|c| c.name == name).expect("a configuration of REPO_CONFIGS")
}

/// One test per configuration of REPO_CONFIGS (by name), so each runs and fails on its own.
macro_rules! fresh_clone_tests {
    ($($test:ident: $config:literal,)*) => {$(
        #[test]
        fn $test() {
            syncs_equal_fresh_clones(config($config));
        }
    )*};
}

fresh_clone_tests! {
    syncs_equal_fresh_clones_without_repository_config: "none",
    syncs_equal_fresh_clones_with_core_autocrlf_true: "autocrlf-true",
    syncs_equal_fresh_clones_with_core_autocrlf_input: "autocrlf-input",
    syncs_equal_fresh_clones_with_core_eol_crlf: "eol-crlf",
    syncs_equal_fresh_clones_with_info_attributes: "info-attributes",
}

/// The harness itself: `expected()` (clone --no-checkout, then checkout of a commit id) equals
/// a plain `git clone --branch` over the pack transport, for every commit of a history and
/// every repository configuration — and the configurations do change what git writes.
#[test]
fn expected_equals_an_independent_fresh_clone() {
    let h = AttrHistory::generate(11, 6);
    let mut snapshots_per_config = Vec::new();
    for config in &REPO_CONFIGS {
        // A copy of the repository per configuration: `apply` writes into it.
        let copy = tempfile::tempdir().expect("tempdir");
        let repo = copy.path().join("repo.git");
        git(copy.path(), &["clone", "-q", "--bare", s(&h.repo.path), s(&repo)]);
        config.apply(&repo);
        let mut snapshots = Vec::new();
        for (i, commit) in h.commits.iter().enumerate() {
            let branch = format!("check-{i}");
            git(&repo, &["branch", "-f", &branch, commit]);
            let ours = gitcheck::expected(&repo, commit, config.config);
            let theirs = gitcheck::fresh_clone_of_branch(&repo, &branch, config.config);
            let d = gitcheck::diff_snapshots(&theirs, &ours);
            assert!(
                d.is_empty(),
                "config {}, commit {i}: expected() differs from git clone:\n{}",
                config.name,
                d.join("\n")
            );
            assert!(ours.keys().any(|k| k.ends_with(".txt") || k.ends_with(".bat")), "commit {i} has files");
            snapshots.push(ours);
        }
        snapshots_per_config.push(snapshots);
    }
    // Settings that convert text files this history has (core.eol only touches files with a
    // text attribute, which this history may lack): the comparison above was not vacuous.
    for name in ["autocrlf-true", "info-attributes"] {
        let c = REPO_CONFIGS.iter().position(|c| c.name == name).expect("a configuration");
        assert!(snapshots_per_config[c] != snapshots_per_config[0], "config {name} changes nothing git writes");
    }
}

/// The trap the sync tests cover: in at least one generated history, a commit that changes
/// only `.gitattributes` leaves an incremental `git checkout` (from the commit before) with
/// files that differ from a fresh clone — git does not renormalize files whose blob is
/// unchanged. treesync must (issue 15), so the sync tests above check those steps too.
#[test]
fn git_checkout_alone_misses_attribute_only_changes() {
    let mut trapped = Vec::new();
    for seed in SEEDS {
        let h = AttrHistory::generate(seed, STEPS);
        let dir = tempfile::tempdir().expect("tempdir");
        let wt = dir.path().join("wt");
        git(dir.path(), &["clone", "-q", "--no-checkout", s(&h.repo.path), s(&wt)]);
        for (i, commit) in h.commits.iter().enumerate() {
            let incremental = gitcheck::git_checkout(&wt, commit);
            if h.attr_only.contains(&i) {
                let d = gitcheck::diff_snapshots(&gitcheck::expected(&h.repo.path, commit, &[]), &incremental);
                if !d.is_empty() {
                    trapped.push(format!("seed {seed}, commit {i}: {}", d.join("; ")));
                }
            }
        }
    }
    assert!(!trapped.is_empty(), "no attribute-only commit where git checkout differs from a fresh clone");
    eprintln!(
        "incremental git checkout differs from a fresh clone after attribute-only commits:\n{}",
        trapped.join("\n")
    );
}
