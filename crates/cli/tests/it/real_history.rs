//! Issue 30 on real history: slices of libgit2 (`* binary` over CRLF test data), PowerShell
//! (`* text=auto`, `*.rtf binary`, `*.sh text eol=lf`) and composer (`text=auto eol=lf`,
//! changed five times in a day), 25 commits each (tests/fixtures/real/README.md says how they
//! were made). Every commit is synced forward into one target, then the sync jumps back and
//! forth; after every step the target must equal a fresh clone's checkout of that commit by
//! real git — without repository config and with `core.autocrlf=true`. Failures list every
//! differing path of every step.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::sync_without_git_config as sync;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::gitcheck::{self, Snapshot};
use treesync_testkit::{BareRepo, git};

/// The bundle `NAME.bundle` of tests/fixtures/real as a bare repository (branch `main`).
fn repo(name: &str) -> BareRepo {
    let bundle: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests/fixtures/real", &format!("{name}.bundle")].iter().collect();
    let bare = BareRepo::new();
    git(&bare.path, &["fetch", "-q", s(&bundle), "refs/heads/main:refs/heads/main"]);
    bare
}

/// Every commit forward, then back and forth: last → first → middle → first → the anchor
/// region (around the middle, where `.gitattributes` changes) both ways → last.
fn route(n: usize) -> Vec<usize> {
    let mut r: Vec<usize> = (0..n).collect();
    let mid = n / 2;
    r.extend([0, mid, 0, mid + 1, mid - 1, mid + 1, n - 1, mid - 1, n - 1]);
    r
}

/// Replay bundle `name` with `config` set in the repository; panics listing every differing
/// path of every step.
fn replays_like_fresh_clones(name: &str, config: &[(&str, &str)]) {
    let bare = repo(name);
    for (k, v) in config {
        git(&bare.path, &["config", k, v]);
    }
    let commits: Vec<String> =
        git(&bare.path, &["rev-list", "--reverse", "main"]).lines().map(str::to_string).collect();
    assert_eq!(commits.len(), 25, "{name}: the README says 25 commits");
    let (_dir, target) = temp_target("target");
    let mut expected: HashMap<usize, Snapshot> = HashMap::new();
    let (mut failures, mut steps, mut files) = (Vec::new(), 0, 0);
    let mut prev: Option<usize> = None;
    for (step, i) in route(commits.len()).into_iter().enumerate() {
        let c = &commits[i];
        let o = sync(&bare.path, c, &target);
        let from = prev.map_or("an empty target".to_string(), |p| format!("commit {p}"));
        if !o.status.success() {
            failures.push(format!(
                "step {step}, commit {i} ({c}) from {from}: treesync sync failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
            prev = None;
            continue;
        }
        let want = expected.entry(i).or_insert_with(|| gitcheck::expected(&bare.path, c, config));
        files += want.len();
        steps += 1;
        let d = gitcheck::diff(want, &target);
        if !d.is_empty() {
            failures.push(format!(
                "step {step}, commit {i} ({c}) from {from}: {} path(s) differ from a fresh clone:\n  {}",
                d.len(),
                d.join("\n  ")
            ));
        }
        prev = Some(i);
    }
    eprintln!("{name} {config:?}: {steps} syncs compared ({files} paths), {} step(s) differ", failures.len());
    assert!(failures.is_empty(), "{name} with {config:?}: {} step(s) differ:\n{}", failures.len(), failures.join("\n"));
}

/// The slices are what the README says: 25 commits, and a commit in the middle that changes
/// `.gitattributes`, whose change makes git write some file differently.
#[test]
fn the_bundles_are_what_their_readme_says() {
    for (name, rule) in [("libgit2", "*.sh text"), ("powershell", "*.sh text eol=lf"), ("composer", "*.test")] {
        let bare = repo(name);
        let log = git(&bare.path, &["log", "--format=%H", "main", "--", ".gitattributes"]);
        assert!(log.lines().count() >= 2, "{name}: .gitattributes changes in the slice");
        let root = git(&bare.path, &["show", "main:.gitattributes"]);
        assert!(root.contains(rule), "{name}: {root}");
    }
    let libgit2 = repo("libgit2");
    let resources = git(&libgit2.path, &["show", "main:tests/resources/.gitattributes"]);
    assert!(resources.starts_with("* binary\n"), "{resources}");
    // git itself would convert those files without `* binary`: some hold LF line ends.
    let snap = gitcheck::expected(&libgit2.path, "main", &[("core.autocrlf", "true")]);
    let lf = snap
        .iter()
        .filter(|(p, n)| {
            p.starts_with("tests/resources/crlf_data/")
                && matches!(n, treesync_testkit::tree::Node::File(b, _) if gitcheck::shape(b) == "LF")
        })
        .count();
    assert!(lf > 100, "libgit2: {lf} LF files kept by `* binary` under core.autocrlf=true");
}

/// One test per repository and configuration, so each runs and fails on its own.
macro_rules! replay_tests {
    ($($test:ident: $repo:literal, $config:expr;)*) => {$(
        #[test]
        fn $test() {
            replays_like_fresh_clones($repo, $config);
        }
    )*};
}

replay_tests! {
    libgit2_history_replays_like_fresh_clones: "libgit2", &[];
    libgit2_history_replays_like_fresh_clones_with_core_autocrlf_true: "libgit2", &[("core.autocrlf", "true")];
    powershell_history_replays_like_fresh_clones: "powershell", &[];
    powershell_history_replays_like_fresh_clones_with_core_autocrlf_true: "powershell", &[("core.autocrlf", "true")];
    composer_history_replays_like_fresh_clones: "composer", &[];
    composer_history_replays_like_fresh_clones_with_core_autocrlf_true: "composer", &[("core.autocrlf", "true")];
}
