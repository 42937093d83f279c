//! `--recurse-submodules` from the command line: a sync to a local directory equals
//! `git clone --recurse-submodules`, `--json` names the submodules read (held to the schemas),
//! the config file's `recurse_submodules` key does the same, and turning it off empties them;
//! a URL naming a local repository is read only when git's `protocol.file.allow` allows it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::schema::PLAN;
use crate::schema::SYNC;
use crate::{json, ok};
use serde_json::Value;
use treesync_testkit::cli::s;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::tree::{self, Node};
use treesync_testkit::work::git;

/// `srv/super.git` with a submodule `vendor/lib` (URL `../lib.git`, beside it in `srv`); the
/// branch `v1` has the submodule at its first commit, `main` at its second.
fn world() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = dir.path().join("srv");
    for name in ["lib.git", "super.git"] {
        std::fs::create_dir_all(srv.join(name)).expect("mkdir");
        git(&srv.join(name), &["init", "-q", "--bare"]);
    }
    for name in ["lib", "super"] {
        git(dir.path(), &["clone", "-q", s(&srv.join(format!("{name}.git"))), name]);
    }
    let lib = dir.path().join("lib");
    std::fs::write(lib.join("a.txt"), "a\n").expect("write");
    std::os::unix::fs::symlink("a.txt", lib.join("link")).expect("symlink");
    git(&lib, &["add", "."]);
    git(&lib, &["commit", "-qm", "one"]);
    std::fs::write(lib.join("b.txt"), "b\n").expect("write");
    git(&lib, &["add", "."]);
    git(&lib, &["commit", "-qm", "two"]);
    git(&lib, &["push", "-q", "origin", "main"]);
    let sup = dir.path().join("super");
    std::fs::write(sup.join("README"), "super\n").expect("write");
    git(&sup, &["add", "."]);
    git(&sup, &["commit", "-qm", "one"]);
    git(&sup, &["submodule", "add", "-q", "../lib.git", "vendor/lib"]);
    git(&sup.join("vendor/lib"), &["checkout", "-q", "HEAD~1"]);
    git(&sup, &["add", "vendor/lib"]);
    git(&sup, &["commit", "-qm", "lib one"]);
    git(&sup, &["branch", "v1"]);
    git(&sup.join("vendor/lib"), &["checkout", "-q", "main"]);
    git(&sup, &["add", "vendor/lib"]);
    git(&sup, &["commit", "-qm", "lib two"]);
    git(&sup, &["push", "-q", "origin", "main", "v1"]);
    // Submodule URLs naming local repositories are read (as git clones them) only with this.
    git(&srv.join("super.git"), &["config", "protocol.file.allow", "always"]);
    (dir, srv)
}

/// A directory without `.git` (directories and gitfiles) and `.treesync`.
fn read(dir: &Path) -> BTreeMap<String, Node> {
    tree::read_dir(dir).into_iter().filter(|(k, _)| !k.split('/').any(|c| c == ".git" || c == ".treesync")).collect()
}

/// What `git clone [--recurse-submodules] -b BRANCH` checks out.
fn clone(srv: &Path, branch: &str, recurse: bool) -> BTreeMap<String, Node> {
    let to = srv.join(format!("../clone-{branch}-{recurse}"));
    let mut args = vec!["clone", "-q", "-b", branch];
    if recurse {
        args.push("--recurse-submodules");
    }
    let from = srv.join("super.git");
    args.extend([s(&from), s(&to)]);
    git(srv, &args);
    read(&to)
}

fn assert_same(expected: &BTreeMap<String, Node>, dir: &Path, what: &str) {
    if let Some(d) = tree::diff(expected, &read(dir)) {
        panic!("{what}: the target differs from git's clone: {d}");
    }
}

#[test]
fn sync_recurse_submodules_fills_them_like_a_recursive_clone_and_names_them() {
    let (dir, srv) = world();
    let repo = srv.join("super.git");
    let target = dir.path().join("out");
    let base = ["sync", "--repo", s(&repo), "--target", s(&target), "--recurse-submodules"];

    let v1 = json(&[&base[..], &["--ref", "v1"]].concat(), SYNC);
    assert_same(&clone(&srv, "v1", true), &target, "v1");
    let used = &v1["submodules"][0];
    assert_eq!((used["path"].as_str(), used["name"].as_str()), (Some("vendor/lib"), Some("vendor/lib")), "{v1:#}");
    assert_eq!(used["repo"].as_str(), Some(s(&srv.join("lib.git"))), "{v1:#}");

    // The bump plans one write (b.txt), named in plan --json.
    let plan =
        json(&["plan", "--repo", s(&repo), "--ref", "main", "--target", s(&target), "--recurse-submodules"], PLAN);
    assert_eq!(plan["plan"]["counts"]["write"].as_u64(), Some(1), "{plan:#}");
    assert_eq!(plan["submodules"].as_array().map(Vec::len), Some(2), "the old and the new commit: {plan:#}");
    json(&[&base[..], &["--ref", "main"]].concat(), SYNC);
    assert_same(&clone(&srv, "main", true), &target, "main");

    // Without the flag: emptied, as a plain clone has it (the run names what it emptied); then
    // nothing more to do, and no submodules named.
    let off = json(&["sync", "--repo", s(&repo), "--target", s(&target), "--ref", "main"], SYNC);
    assert!(
        off.get("submodules").is_some_and(|u| u.as_array().is_some_and(|a| !a.is_empty())),
        "emptying reads them: {off:#}"
    );
    assert_same(&clone(&srv, "main", false), &target, "main without submodules");
    let again = json(&["sync", "--repo", s(&repo), "--target", s(&target), "--ref", "main"], SYNC);
    assert!(again.get("submodules").is_none(), "{again:#}");
    assert_eq!(again["applied"]["write"].as_u64(), Some(0), "{again:#}");
}

#[test]
fn the_config_key_recurse_submodules_turns_it_on() {
    let (dir, srv) = world();
    let target = dir.path().join("site");
    let config = ConfigFile::new()
        .defaults()
        .key("recurse_submodules", true)
        .mirror("site", srv.join("super.git"), "main", &target)
        .write_in(dir.path());
    ok(&["--config", s(&config), "sync", "site"]);
    assert_same(&clone(&srv, "main", true), &target, "the config's mirror");
    let state: Value =
        serde_json::from_slice(&std::fs::read(target.join(".treesync/state")).expect("state")).expect("json");
    assert_eq!(state["recurse_submodules"], Value::Bool(true), "{state:#}");
}

#[test]
fn a_subtree_sync_fills_the_submodules_inside_it() {
    let (dir, srv) = world();
    let target = dir.path().join("vendor-only");
    let repo = srv.join("super.git");
    let v = json(
        &["sync", "--repo", s(&repo), "--ref", "main:vendor", "--target", s(&target), "--recurse-submodules"],
        SYNC,
    );
    assert_eq!(v["submodules"][0]["path"].as_str(), Some("lib"), "the path in the target: {v:#}");
    let whole = clone(&srv, "main", true);
    let expected: BTreeMap<String, Node> =
        whole.into_iter().filter_map(|(k, n)| k.strip_prefix("vendor/").map(|k| (k.to_string(), n))).collect();
    assert!(expected.contains_key("lib/b.txt"), "{expected:?}");
    assert_same(&expected, &target, "main:vendor");
}

/// `treesync ARGS` with only the repository's configuration (no global or system file) and
/// `env` (`GIT_ALLOW_PROTOCOL` unset unless given).
fn treesync_isolated(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_ALLOW_PROTOCOL")
        .envs(env.iter().copied())
        .output()
        .expect("treesync runs")
}

/// `dir/NAME`, a new repository with one commit (`message`) of one file.
fn work_repo_with_one_file(dir: &Path, name: &str, file: &str, content: &str, message: &str) -> PathBuf {
    let repo = dir.join(name);
    std::fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join(file), content).expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", message]);
    repo
}

/// `dir/private.git`, a repository of this host holding `secret.txt`, and `dir/super.git`
/// whose branches `abs`, `file` and `rel` each hold a gitlink `private` to private.git's commit
/// and a `.gitmodules` naming it by URL: `/…/private.git`, `file:///…/private.git`,
/// `../private.git`. Anyone who can push to super.git can write that. The URLs by branch.
fn a_superproject_naming_a_private_repository(dir: &Path) -> Vec<(&'static str, String)> {
    let private = work_repo_with_one_file(dir, "private", "secret.txt", "secret\n", "secret");
    git(dir, &["clone", "-q", "--bare", "private", "private.git"]);
    let commit = git(&private, &["rev-parse", "HEAD"]);
    let sup = work_repo_with_one_file(dir, "sup", "README", "super\n", "one");
    let abs = dir.join("private.git");
    let urls = vec![
        ("abs", s(&abs).to_string()),
        ("file", format!("file://{}", s(&abs))),
        ("rel", "../private.git".to_string()),
    ];
    for (branch, url) in &urls {
        git(&sup, &["checkout", "-q", "-B", branch, "main"]);
        let gitmodules = format!("[submodule \"private\"]\n\tpath = private\n\turl = {url}\n");
        std::fs::write(sup.join(".gitmodules"), gitmodules).expect("write");
        git(&sup, &["add", ".gitmodules"]);
        git(&sup, &["update-index", "--add", "--cacheinfo", &format!("160000,{commit},private")]);
        git(&sup, &["commit", "-qm", branch]);
    }
    git(dir, &["clone", "-q", "--bare", "sup", "super.git"]);
    urls
}

#[test]
fn a_submodule_url_naming_a_local_repository_is_read_only_when_protocol_file_allow_allows_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let urls = a_superproject_naming_a_private_repository(dir.path());
    let (repo, private) = (dir.path().join("super.git"), dir.path().join("private.git"));
    let mut n = 0;
    let mut sync = |branch: &str, env: &[(&str, &str)]| {
        n += 1;
        let target = dir.path().join(format!("t{n}"));
        let args = ["sync", "--repo", s(&repo), "--ref", branch, "--target", s(&target), "--recurse-submodules"];
        let o = treesync_isolated(&args, env);
        let secret = std::fs::read_to_string(target.join("private/secret.txt")).ok();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned(), secret)
    };
    let refused = |(code, stderr, secret): (Option<i32>, String, Option<String>), url: &str, why: &str| {
        assert_eq!(code, Some(4), "{stderr}");
        assert_eq!(secret, None, "nothing of it written: {stderr}");
        let head = format!(
            "refusing to read submodule \"private\" at private from {}: its URL {url} names a local repository, and {why}",
            s(&private)
        );
        assert!(stderr.contains(&head), "{stderr}");
        stderr
    };
    let synced = |(code, stderr, secret): (Option<i32>, String, Option<String>)| {
        assert_eq!((code, secret.as_deref()), (Some(0), Some("secret\n")), "{stderr}");
    };

    // By default, as git (2.38.1 and later) refuses `git submodule update` here; also when
    // GIT_PROTOCOL_FROM_USER says the user asked (git sets it to 0 for submodules).
    let mut hint = String::new();
    for (branch, url) in &urls {
        for env in [&[][..], &[("GIT_PROTOCOL_FROM_USER", "1")]] {
            let stderr = refused(sync(branch, env), url, "protocol.file.allow is unset");
            hint = stderr.split("hint: ").nth(1).expect("a hint").to_string();
        }
    }
    // The hint's first command allows it.
    let command = hint.split('`').nth(1).expect("a command in backquotes");
    assert_eq!(command, format!("git -C {} config protocol.file.allow always", s(&repo)), "{hint}");
    git(dir.path(), &command.split(' ').skip(1).collect::<Vec<_>>());
    for (branch, _) in &urls {
        synced(sync(branch, &[]));
    }
    // `never` refuses even when every protocol is allowed; GIT_ALLOW_PROTOCOL overrides the
    // settings, either way.
    git(&repo, &["config", "protocol.file.allow", "never"]);
    git(&repo, &["config", "protocol.allow", "always"]);
    refused(sync("abs", &[]), &urls[0].1, "protocol.file.allow is never");
    synced(sync("abs", &[("GIT_ALLOW_PROTOCOL", "ssh:file")]));
    git(&repo, &["config", "protocol.file.allow", "always"]);
    let stderr = refused(
        sync("abs", &[("GIT_ALLOW_PROTOCOL", "ssh:https")]),
        &urls[0].1,
        "GIT_ALLOW_PROTOCOL=\"ssh:https\" does not list file",
    );
    assert!(
        stderr
            .contains("hint: if you trust the local repositories submodule URLs name, add file to GIT_ALLOW_PROTOCOL"),
        "{stderr}"
    );
    // protocol.allow alone, and the one-off form of `git -c` (the environment's configuration).
    git(&repo, &["config", "--unset", "protocol.file.allow"]);
    synced(sync("rel", &[]));
    git(&repo, &["config", "--unset", "protocol.allow"]);
    refused(sync("rel", &[]), "../private.git", "protocol.file.allow is unset");
    let once =
        [("GIT_CONFIG_COUNT", "1"), ("GIT_CONFIG_KEY_0", "protocol.file.allow"), ("GIT_CONFIG_VALUE_0", "always")];
    synced(sync("rel", &once));

    // The hint's other command makes it the superproject's own clone: read with no setting,
    // also once the URL names nothing.
    let command = hint.split('`').nth(3).expect("a second command in backquotes");
    assert_eq!(command, format!("git clone --bare {} {}", s(&private), s(&repo.join("modules/private"))), "{hint}");
    git(dir.path(), &command.split(' ').skip(1).collect::<Vec<_>>());
    std::fs::rename(&private, dir.path().join("moved.git")).expect("mv");
    for (branch, _) in &urls {
        synced(sync(branch, &[]));
    }
}
