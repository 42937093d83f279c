//! Issue 15 on a real project's history: Scoop (ScoopInstaller/Scoop) from its first commit
//! to March 2014, whose `.gitattributes` says `* text eol=crlf` (every text file CRLF on every
//! platform) and later marks `*.exe` and `*.zip` as `-text`. The fixture is a git bundle
//! (tests/fixtures/scoop-2014.bundle, see tests/fixtures/README.md). After every sync, forward
//! through the tagged commits and commits between them and back again, the target must equal
//! a fresh `git clone` of that commit.

use std::path::{Path, PathBuf};

use crate::sync_without_git_config as sync;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::gitcheck::{self, REPO_CONFIGS};
use treesync_testkit::{BareRepo, git};

/// The tagged commits of the fixture, oldest first (tests/fixtures/make_scoop_bundle.sh).
const TAGS: [&str; 4] = ["scoop-initial", "scoop-attributes", "scoop-exe-binary", "scoop-zip-binary"];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scoop-2014.bundle")
}

/// The fixture as a bare repository (its branch `main` and the tags).
fn scoop() -> BareRepo {
    let bare = BareRepo::new();
    git(&bare.path, &["fetch", "-q", s(&fixture()), "refs/heads/main:refs/heads/main", "refs/tags/*:refs/tags/*"]);
    bare
}

/// The commits to visit: the tags, with a few commits between each pair of tags, forward;
/// then the tags backward and the last one again.
fn route(repo: &Path) -> Vec<(String, String)> {
    let mut forward = Vec::new();
    for (i, tag) in TAGS.iter().enumerate() {
        if i > 0 {
            let between = git(repo, &["rev-list", "--reverse", "--first-parent", &format!("{}..{tag}~1", TAGS[i - 1])]);
            let between: Vec<&str> = between.lines().collect();
            // Up to three, evenly spread.
            for k in 1..=3 {
                if let Some(c) = between.get(k * between.len() / 4).filter(|_| between.len() >= 4) {
                    forward.push((format!("{tag}~{}", between.len() - k * between.len() / 4), c.to_string()));
                }
            }
        }
        forward.push((tag.to_string(), git(repo, &["rev-parse", &format!("{tag}^{{commit}}")])));
    }
    let mut back: Vec<(String, String)> =
        forward.iter().filter(|(name, _)| TAGS.contains(&name.as_str())).cloned().collect();
    back.reverse();
    let last = back[0].clone();
    forward.extend(back.into_iter().skip(1));
    forward.push(last);
    forward
}

/// Sync the route with repository configuration `config` (a name of [`REPO_CONFIGS`]) and
/// compare after every step; panics with every differing step.
fn syncs_like_fresh_clones(config_name: &str) {
    let config = REPO_CONFIGS.iter().find(|c| c.name == config_name).expect("a configuration");
    let bare = scoop();
    config.apply(&bare.path);
    let (_dir, target) = temp_target("scoop");
    let mut failures = Vec::new();
    for (step, (name, commit)) in route(&bare.path).iter().enumerate() {
        let o = sync(&bare.path, commit, &target);
        assert!(
            o.status.success(),
            "step {step} ({name}): treesync sync failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let d = gitcheck::diff(&gitcheck::expected(&bare.path, commit, config.config), &target);
        if !d.is_empty() {
            let shown: Vec<&String> = d.iter().take(8).collect();
            failures.push(format!(
                "step {step}, {name} ({commit}): {} path(s) differ from a fresh clone, e.g.\n  {}",
                d.len(),
                shown.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "Scoop history, config {config_name}:\n{}", failures.join("\n"));
}

#[test]
fn the_fixture_is_what_its_readme_says() {
    let bare = scoop();
    let attrs = |tag: &str| git(&bare.path, &["show", &format!("{tag}:.gitattributes")]);
    assert!(git(&bare.path, &["ls-tree", "--name-only", TAGS[0]]).lines().all(|l| l != ".gitattributes"));
    assert!(attrs(TAGS[1]).contains("* text eol=crlf"));
    // The attributes commit changes nothing but .gitattributes: the real "renormalize" case.
    let changed = git(&bare.path, &["diff", "--name-only", TAGS[0], TAGS[1]]);
    assert_eq!(changed, ".gitattributes");
    assert!(attrs(TAGS[2]).contains("*.exe -text"));
    assert!(attrs(TAGS[3]).contains("*.zip -text"));
    // git itself writes CRLF for the files of the first commit once the attribute is there.
    let snap = gitcheck::expected(&bare.path, TAGS[1], &[]);
    let crlf = snap
        .values()
        .filter(|n| matches!(n, treesync_testkit::tree::Node::File(b, _) if gitcheck::shape(b) == "CRLF"))
        .count();
    assert!(crlf >= 2, "a fresh clone of {} has CRLF files", TAGS[1]);
}

#[test]
fn scoop_history_syncs_like_fresh_clones() {
    syncs_like_fresh_clones("none");
}

#[test]
fn scoop_history_syncs_like_fresh_clones_with_core_autocrlf_true() {
    syncs_like_fresh_clones("autocrlf-true");
}
