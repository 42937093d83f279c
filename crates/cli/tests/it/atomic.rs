//! `sync --atomic` from the command line: turning generations on and off in both switch modes,
//! what stays atomic without the flag, the config keys, `--json`, `status`, `plan`, `verify
//! --repair`, `watch --atomic`, and what is refused (and how it is said).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cli;
use crate::schema::STATUS;
use crate::schema::SYNC;
use serde_json::Value;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::conformance::History;
use treesync_testkit::history::{Entry, Model};
use treesync_testkit::tree;

/// Four commits of 40 files: contents change, a file is added and one removed, a mode changes.
fn history() -> History {
    let mut trees = Vec::new();
    for c in 0..4 {
        let mut m = Model::default();
        for i in 0..40 {
            let content = if i < 10 * (c + 1) { format!("{c}:{i}") } else { format!("base {i}") };
            m.insert(
                &format!("d{}/f{i}", i % 4),
                Entry::File { content: content.into_bytes(), executable: c == 3 && i == 1 },
            );
        }
        m.insert(&format!("only-{c}"), Entry::File { content: b"x".to_vec(), executable: false });
        trees.push(m);
    }
    History::from_trees(&trees)
}

fn home(target: &Path) -> PathBuf {
    let name = target.file_name().expect("a name").to_str().expect("utf8");
    target.with_file_name(format!(".{name}.treesync"))
}

fn sync(h: &History, rev: usize, target: &Path, extra: &[&str]) -> String {
    let mut args = vec!["sync", "--repo", s(&h.bare.path), "--ref", &h.commits[rev], "--target", s(target)];
    args.extend_from_slice(extra);
    cli().ok(&args)
}

/// A new target synced to each of the first `commits` commits in turn, with `extra` arguments.
fn synced_through(h: &History, commits: usize, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let (dir, target) = temp_target("site");
    for rev in 0..commits {
        sync(h, rev, &target, extra);
    }
    (dir, target)
}

#[test]
fn a_plain_target_becomes_atomic_stays_so_and_goes_back_in_both_modes() {
    let h = history();
    for (mode, link) in [("exchange", false), ("symlink", true)] {
        let (_dir, target) = temp_target("site");
        sync(&h, 0, &target, &[]);
        let out = sync(&h, 1, &target, &["--atomic", "--switch", mode, "--grace", "0"]);
        assert!(out.contains(&format!("switched the target ({mode})")), "{out}");
        assert_eq!(std::fs::symlink_metadata(&target).expect("target").is_symlink(), link, "{mode}");
        assert_eq!(tree::read_dir(&target), h.expected(1), "{mode}");
        // Without the flag it stays atomic: the third sync reuses the retired generation.
        let out = sync(&h, 2, &target, &["--grace", "0"]);
        assert!(out.contains("(reused)"), "{mode}: {out}");
        assert_eq!(tree::read_dir(&target), h.expected(2), "{mode}");
        let status = cli().json(&["status", "--target", s(&target)], STATUS);
        assert_eq!(status["generations"]["switch"], mode, "{status:#}");
        let gens = status["generations"]["generations"].as_array().expect("generations");
        assert_eq!(gens.len(), 2, "{status:#}");
        assert_eq!(gens[0]["current"], true);
        assert_eq!(gens[0]["commit"], h.commits[2].as_str(), "the current generation's commit");
        assert_eq!(status["state"]["synced"]["commit"], h.commits[2].as_str(), "state is the current one's");
        // Off again: a plain directory, the home gone, synced in place.
        let out = sync(&h, 3, &target, &["--no-atomic", "--grace", "0"]);
        assert!(out.contains("removed retired generations"), "{mode}: {out}");
        assert!(std::fs::symlink_metadata(&target).expect("target").is_dir(), "{mode}: a real directory");
        assert!(!home(&target).exists(), "{mode}: the home is removed");
        assert_eq!(tree::read_dir(&target), h.expected(3), "{mode}");
        let status = cli().json(&["status", "--target", s(&target)], STATUS);
        assert!(status.get("generations").is_none(), "{status:#}");
    }
}

#[test]
fn sync_json_says_which_generation_was_prepared_and_how() {
    let h = history();
    let (_dir, target) = temp_target("site");
    let run = |rev: usize| -> Value {
        let args = ["sync", "--repo", s(&h.bare.path), "--ref", &h.commits[rev], "--target", s(&target)];
        cli().json(&[&args[..], &["--atomic", "--grace", "0"]].concat(), SYNC)
    };
    let first = run(0);
    assert_eq!(first["atomic"]["switched"], true);
    assert!(first["atomic"].get("cloned").is_none(), "{first:#}");
    let second = run(1);
    assert_eq!(second["atomic"]["cloned"]["how"], "hardlink", "{second:#}");
    assert_eq!(second["atomic"]["cloned"]["bytes_copied"], 0);
    let third = run(2);
    assert_eq!(third["atomic"]["reused"], true, "{third:#}");
    assert_eq!(third["from"]["commit"], h.commits[0].as_str(), "the reused generation held commit 0: {third:#}");
    // Only what differs between commit 0 and 2 is written: 30 files changed, 1 added, 1 removed.
    assert_eq!(
        (third["applied"]["write"].as_u64(), third["applied"]["unlink"].as_u64()),
        (Some(31), Some(1)),
        "{third:#}"
    );
    let again = run(2);
    assert_eq!(again["atomic"]["switched"], false, "{again:#}");
    assert_eq!(again["applied"]["write"], 0);
}

#[test]
fn a_mode_change_rewrites_the_file_and_leaves_the_retired_generation_alone() {
    let h = history();
    let (_dir, target) = synced_through(&h, 3, &["--atomic", "--grace", "0"]);
    let out = sync(&h, 3, &target, &["--json"]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["applied"]["chmod"], 0, "no chmod of a possibly shared inode: {v:#}");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("file").permissions().mode() & 0o111;
    assert_ne!(mode(&target.join("d1/f1")), 0, "executable in commit 3");
    let retired = v["atomic"]["retired"].as_str().expect("a retired generation");
    assert_eq!(mode(&home(&target).join(retired).join("d1/f1")), 0, "the retired generation keeps its mode");
}

#[test]
fn plan_verify_and_repair_understand_generations() {
    let h = history();
    let (dir, target) = synced_through(&h, 2, &["--atomic", "--switch", "symlink"]);
    let plan = cli().ok(&["plan", "--repo", s(&h.bare.path), "--ref", &h.commits[2], "--target", s(&target)]);
    assert!(plan.contains("planned from the generation at"), "{plan}");
    // Drift in the current generation: verify sees it, --repair prepares the next and switches.
    std::fs::remove_file(target.join("d0/f0")).expect("remove through the link");
    let o = cli().run(&["verify", "--repo", s(&h.bare.path), "--target", s(&target)]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    let before = std::fs::read_link(&target).expect("a link");
    let out = cli().run(&["verify", "--repo", s(&h.bare.path), "--target", s(&target), "--repair"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after = std::fs::read_link(&target).expect("a link");
    assert_ne!(before, after, "the repair switched to a new generation");
    assert!(!dir.path().join(&before).join("d0/f0").exists(), "the old generation was not written into");
    assert_eq!(tree::read_dir(&target), h.expected(1));
    cli().ok(&["verify", "--repo", s(&h.bare.path), "--target", s(&target)]);
}

#[test]
fn config_keys_keep_a_mirror_atomic() {
    let h = history();
    let (dir, target) = temp_target("site");
    let write = |switch: &str| {
        let mirror = ConfigFile::new().mirror("site", &h.bare.path, "main", &target);
        mirror.key("atomic", true).key("keep", 3).key("grace", "0").key("switch", switch).write_in(dir.path())
    };
    let config = write("symlink");
    cli().ok(&["--config", s(&config), "sync", "site"]);
    assert!(std::fs::symlink_metadata(&target).expect("target").is_symlink());
    assert_eq!(tree::read_dir(&target), h.expected(3));
    write("sideways");
    let e = cli().fails(&["--config", s(&config), "sync", "site"], 2);
    assert!(e.contains("unknown switch mode \"sideways\""), "{e}");
}

#[test]
fn what_cannot_be_kept_in_generations_is_refused_before_anything_is_written() {
    let h = history();
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = s(&h.bare.path);
    let e = cli().fails(&["sync", "--repo", repo, "--ref", "main", "--target", "memory://", "--atomic"], 2);
    assert!(e.contains("no atomic switch of many keys") && e.contains("hint: "), "{e}");
    // A directory treesync did not write: --force, as without --atomic (exit 4, as without it).
    let target = dir.path().join("mine");
    std::fs::create_dir(&target).expect("dir");
    std::fs::write(target.join("precious"), "x").expect("file");
    let e = cli().fails(&["sync", "--repo", repo, "--ref", "main", "--target", s(&target), "--atomic"], 4);
    assert!(e.contains("--force"), "{e}");
    assert!(!home(&target).exists(), "nothing written");
    assert!(target.join("precious").exists());
    // A sync the plan refuses (here: over --max-entries) writes nothing, not even the home, and
    // leaves an atomic target on its generation.
    let fresh = dir.path().join("fresh");
    let e = cli()
        .fails(&["sync", "--repo", repo, "--ref", "main", "--target", s(&fresh), "--atomic", "--max-entries", "3"], 4);
    assert!(e.contains("max-entries") || e.contains("max_entries"), "{e}");
    assert!(!home(&fresh).exists() && !fresh.exists(), "nothing written");
    let kept = dir.path().join("kept");
    sync(&h, 0, &kept, &["--atomic"]);
    let slots = || std::fs::read_dir(home(&kept)).expect("home").count();
    let before = slots();
    cli().fails(&["sync", "--repo", repo, "--ref", &h.commits[1], "--target", s(&kept), "--max-entries", "3"], 4);
    assert_eq!(slots(), before, "no generation started");
    assert_eq!(tree::read_dir(&kept), h.expected(0));
    // A symlink treesync did not make.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let e = cli().fails(&["sync", "--repo", repo, "--ref", "main", "--target", s(&link), "--atomic"], 2);
    assert!(e.contains("symlink") && e.contains("treesync did not make"), "{e}");
    assert!(!home(&link).exists(), "nothing written");
}

#[test]
fn watch_atomic_follows_the_ref_into_generations() {
    let h = history();
    let (_dir, target) = temp_target("site");
    let repo = s(&h.bare.path);
    // The branch starts at commit 1, the watch follows it to commit 3.
    treesync_testkit::git(&h.bare.path, &["update-ref", "refs/heads/follow", &h.commits[1]]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["watch", "--repo", repo, "--ref", "follow", "--target", s(&target)])
        .args(["--interval", "100ms", "--atomic", "--grace", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("watch starts");
    let wait_for = |rev: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while tree::read_dir(&target) != h.expected(rev) {
            assert!(Instant::now() < deadline, "watch did not sync commit {rev}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(1);
    treesync_testkit::git(&h.bare.path, &["update-ref", "refs/heads/follow", &h.commits[3]]);
    wait_for(3);
    let _ = child.kill();
    let _ = child.wait();
    assert!(home(&target).join("generations").exists(), "kept in generations");
    let status = cli().json(&["status", "--target", s(&target)], STATUS);
    assert_eq!(status["generations"]["generations"].as_array().map(Vec::len), Some(2), "{status:#}");
}

/// Issue 29: a deleted home silently turned an exchange-mode target into plain in-place syncs
/// (readers lost the one-commit view without a word). The target remembers it is a generation:
/// a sync without --atomic/--no-atomic refuses with both ways out, and each works.
#[test]
fn a_generation_whose_home_was_deleted_is_refused_until_told_which_way() {
    let h = history();
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = s(&h.bare.path);
    for way in ["--atomic", "--no-atomic"] {
        let target = dir.path().join(way.trim_start_matches('-'));
        sync(&h, 0, &target, &["--atomic", "--switch", "exchange"]);
        sync(&h, 1, &target, &[]);
        std::fs::remove_dir_all(home(&target)).expect("the home removed by hand");
        let e = cli().fails(&["sync", "--repo", repo, "--ref", &h.commits[0], "--target", s(&target)], 2);
        assert!(e.contains("is kept in generations (exchange mode), but its home") && e.contains("--no-atomic"), "{e}");
        assert_eq!(tree::read_dir(&target), h.expected(1), "nothing was written");
        // The hint's two ways out; after each, plain syncs go on as that way says.
        // (A sync with nothing to do says so, not "would prepare": issue 29.)
        sync(&h, 0, &target, &[way]);
        sync(&h, 1, &target, &[]);
        assert_eq!(tree::read_dir(&target), h.expected(1));
        assert_eq!(home(&target).exists(), way == "--atomic", "{way}");
        if way == "--atomic" {
            let out = sync(&h, 1, &target, &[]);
            assert!(out.contains("nothing to switch") && !out.contains("would prepare"), "{out}");
        }
    }
}
