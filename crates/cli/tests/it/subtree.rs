//! Subtree syncs from the command line: `--ref REV:PATH`, `--path PATH`, the config file's
//! `path` key, what is refused (and how it is said), and the `--json` documents of a subtree
//! sync held to their schemas.

use std::path::Path;

use crate::schema::PLAN;
use crate::schema::STATUS;
use crate::schema::SYNC;
use crate::treesync;
use crate::{json, ok};
use serde_json::Value;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history::file;
use treesync_testkit::history::{Entry, Model};
use treesync_testkit::tree::{self, Node};
use treesync_testkit::{BareRepo, git};

/// Run `treesync ARGS`, expect exit `code`, return stderr (which holds one error).
fn fails(args: &[&str], code: i32) -> String {
    let o = treesync(args);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "treesync {args:?}: {stderr}");
    assert!(stderr.starts_with("treesync: error: "), "{stderr}");
    stderr
}

/// A monorepo of two commits: `docs/` (with a subdirectory and a symlink), `site/`, a file and
/// a symlink at the top. The second commit changes one file of `docs/` and much outside it.
fn monorepo() -> (BareRepo, Vec<String>) {
    let m0 = Model::of(&[
        ("README", "top\n"),
        ("docs/index.md", "# docs\n"),
        ("docs/guide/intro.md", "intro\n"),
        ("site/index.html", "<html>\n"),
    ])
    .with([
        ("docs/latest", Entry::Link { target: "guide/intro.md".into() }),
        ("link", Entry::Link { target: "docs".into() }),
    ]);
    let m1 = m0.with([
        ("docs/guide/intro.md", file("intro, revised\n")),
        ("README", file("top, revised\n")),
        ("src/main.rs", file("fn main() {}\n")),
    ]);
    let bare = BareRepo::new();
    let commits = treesync_testkit::history::import(&bare.path, "main", &[m0, m1]);
    (bare, commits)
}

/// What `git archive TREEISH` holds.
fn archive(bare: &BareRepo, treeish: &str) -> std::collections::BTreeMap<String, Node> {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("x");
    bare.archive(treeish, &dest);
    tree::read_dir(&dest)
}

fn assert_holds(target: &Path, bare: &BareRepo, treeish: &str) {
    if let Some(d) = tree::diff(&archive(bare, treeish), &tree::read_dir(target)) {
        panic!("{} differs from `git archive {treeish}`:\n{d}", target.display());
    }
}

#[test]
fn ref_with_a_path_and_path_flag_sync_a_directory_as_the_root() {
    let (bare, commits) = monorepo();
    let (_dir, target) = temp_target("docs");
    let (repo, t) = (s(&bare.path), s(&target));

    // plan --json of a subtree: the commit, and the subtree's tree.
    let v = json(&["plan", "--repo", repo, "--ref", &format!("{}:docs", commits[0]), "--target", t], PLAN);
    assert_eq!(v["commit"], commits[0].as_str());
    assert_eq!(v["path"], "docs");
    let docs0 = git(&bare.path, &["rev-parse", &format!("{}:docs", commits[0])]);
    assert_eq!(v["tree"], docs0.trim(), "the plan goes to the tree of docs/");

    let v = json(&["sync", "--repo", repo, "--ref", &format!("{}:docs", commits[0]), "--target", t], SYNC);
    assert_eq!(v["tree"], docs0.trim());
    assert_holds(&target, &bare, &format!("{}:docs", commits[0]));

    // The same directory by --path, at the next commit: one file changed inside docs/.
    let v = json(&["sync", "--repo", repo, "--ref", "main", "--path", "docs/", "--target", t], SYNC);
    assert_eq!(v["commit"], commits[1].as_str());
    assert_eq!(v["path"], "docs", "recorded as written without the slash");
    assert_eq!(v["applied"]["write"], 1, "one file of docs/ changed: {v:#}");
    assert_eq!(v["applied"]["unlink"], 0);
    assert_holds(&target, &bare, "main:docs");

    // status --json records the commit and the subtree's tree.
    let v = json(&["status", "--target", t], STATUS);
    let docs1 = git(&bare.path, &["rev-parse", "main:docs"]);
    assert_eq!(v["state"]["synced"]["commit"], commits[1].as_str());
    assert_eq!(v["state"]["synced"]["tree"], docs1.trim());
    assert_eq!(v["state"]["path"], "docs", "the state records the directory: {v:#}");
    let human = ok(&["status", "--target", t]);
    assert!(human.contains(&format!("synced:  docs/ of commit {}", commits[1])), "{human}");

    // A nested directory, then the whole tree (`main:`): each a diff of two trees.
    ok(&["sync", "--repo", repo, "--ref", "main:docs/guide/", "--target", t]);
    assert_holds(&target, &bare, "main:docs/guide");
    let v = json(&["sync", "--repo", repo, "--ref", "main:", "--target", t], SYNC);
    assert!(v.get("path").is_none(), "the whole tree has no path: {v:#}");
    assert_holds(&target, &bare, "main");
    let v = json(&["status", "--target", t], STATUS);
    assert!(v["state"].get("path").is_none(), "back to the whole tree, the state has no path: {v:#}");

    // verify compares with the synced subtree.
    ok(&["sync", "--repo", repo, "--ref", "main:docs", "--target", t]);
    ok(&["verify", "--repo", repo, "--target", t, "--level", "full"]);
    let v = json(&["plan", "--repo", repo, "--ref", "main", "--path", "docs", "--target", t], PLAN);
    assert_eq!(v["plan"]["phases"], serde_json::json!([]), "planning again is empty: {v:#}");
    assert_eq!((&v["plan"]["from"], &v["plan"]["to"]), (&Value::from(docs1.trim()), &Value::from(docs1.trim())));

    // Drift in a subtree target is found and repaired against the subtree's tree.
    std::fs::write(target.join("guide/intro.md"), "tampered\n").expect("tamper");
    std::fs::remove_file(target.join("index.md")).expect("remove");
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--level", "full"]);
    assert_eq!(o.status.code(), Some(1), "drift found: {}", String::from_utf8_lossy(&o.stdout));
    ok(&["verify", "--repo", repo, "--target", t, "--level", "full", "--repair"]);
    assert_holds(&target, &bare, "main:docs");
}

#[test]
fn paths_that_are_not_directories_and_two_spellings_are_refused() {
    let (bare, _) = monorepo();
    let (dir, target) = temp_target("t");
    let (repo, t) = (s(&bare.path), s(&target));

    let e = fails(&["sync", "--repo", repo, "--ref", "main:README", "--target", t], 2);
    assert!(e.contains("\"README\" of \"main\"") && e.contains("README is a file"), "{e}");
    assert!(e.contains("hint: ") && e.contains("ls-tree -d --name-only main:"), "{e}");
    let e = fails(&["sync", "--repo", repo, "--ref", "main", "--path", "docs/nope", "--target", t], 2);
    assert!(e.contains("has no docs/nope"), "{e}");
    assert!(e.contains("ls-tree -d --name-only main:docs`"), "the hint lists the parent: {e}");
    let e = fails(&["plan", "--repo", repo, "--ref", "main:link", "--target", t], 2);
    assert!(e.contains("link is a symlink"), "{e}");
    let e = fails(&["sync", "--repo", repo, "--ref", "main:docs", "--path", "site", "--target", t], 2);
    assert!(e.contains("already names a directory (\"docs\")") && e.contains("--path names \"site\""), "{e}");
    assert!(e.contains("hint: --ref main --path site, or --ref main:site"), "{e}");
    assert!(!target.exists(), "a refused sync writes nothing, not even the target");

    // --git-worktree keeps a clone's index and HEAD on a whole commit: refused with a subtree.
    let clone = dir.path().join("clone");
    git(dir.path(), &["clone", "-q", repo, s(&clone)]);
    ok(&["adopt", "--target", s(&clone)]);
    let e = fails(&["sync", "--repo", repo, "--ref", "main:docs", "--target", s(&clone), "--git-worktree"], 2);
    assert!(e.contains("--git-worktree cannot keep a git clone on \"main:docs\""), "{e}");
    assert!(clone.join("README").exists() && clone.join("docs/index.md").exists(), "the clone is untouched");
}

#[test]
fn config_path_key_composes_with_the_ref_and_is_refused_with_a_path_in_the_ref() {
    let (bare, commits) = monorepo();
    let (dir, target) = temp_target("docs");
    let config = dir.path().join("treesync.toml");
    let write = |rev: &str, path: &str| {
        let mirror = ConfigFile::new().table("mirror.docs").key("repo", &bare.path).key("ref", rev);
        mirror.key("path", path).key("target", &target).write(&config);
    };
    write("main", "docs");
    ok(&["--config", s(&config), "sync", "docs"]);
    assert_holds(&target, &bare, "main:docs");
    let v = json(&["--config", s(&config), "plan", "docs"], PLAN);
    assert_eq!(v["commit"], commits[1].as_str());
    // The command line's --path overrides the mirror's.
    ok(&["--config", s(&config), "sync", "docs", "--path", "site"]);
    assert_holds(&target, &bare, "main:site");

    write("main:docs", "site");
    let e = fails(&["--config", s(&config), "sync", "docs"], 2);
    assert!(e.contains("treesync.toml:4:8: path \"site\" of [mirror.docs] and its ref \"main:docs\""), "{e}");
    assert!(e.contains("hint: ref = \"main\" with path = \"site\", or ref = \"main:site\" alone"), "{e}");

    ConfigFile::new().defaults().key("path", "docs").write(&config);
    let e = fails(&["--config", s(&config), "sync", "--all"], 2);
    assert!(e.contains("unknown key \"path\" in [defaults]"), "path is a mirror's own key: {e}");
    assert!(e.contains("hint: path names a directory of a mirror's ref: set it in each [mirror.NAME]"), "{e}");
}

#[test]
fn help_shows_rev_path_and_path_with_an_example() {
    let help = ok(&["sync", "--help"]);
    assert!(help.contains("--ref <REV|REV:PATH>"), "{help}");
    assert!(help.contains("--path <PATH>"), "{help}");
    assert!(help.contains("treesync sync --repo mono.git --ref main:docs --target /srv/docs"), "{help}");
    for cmd in ["plan", "watch"] {
        let help = ok(&[cmd, "--help"]);
        assert!(help.contains("--path <PATH>") && help.contains("REV:PATH"), "{cmd}: {help}");
    }
}
