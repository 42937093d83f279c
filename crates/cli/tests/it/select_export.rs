//! `--include`/`--exclude` and `--export` against git: after every sync the target equals a
//! fresh clone's checkout of that commit restricted to the selected paths, or what
//! `git archive` of that commit extracts to — whatever the target held before (other
//! patterns, other commits, with or without `--export`), without reading the target.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::ok;
use crate::treesync;
use treesync_core::select::Select;
use treesync_testkit::cli::s;
use treesync_testkit::git;
use treesync_testkit::gitcheck::{self, Snapshot};
use treesync_testkit::tree::{self, Node};

/// A small xorshift generator: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Commit the files `(path, content)` (all others removed) to the work tree `w`; its id.
fn commit(w: &Path, files: &[(&str, &str)], n: usize) -> String {
    for e in std::fs::read_dir(w).expect("read work tree").flatten() {
        if e.file_name() != ".git" {
            let p = e.path();
            if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) }.expect("clean");
        }
    }
    for (path, content) in files {
        tree::put_file(w, path, content.as_bytes());
    }
    git(w, &["add", "-A"]);
    git(w, &["-c", "user.name=T", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", &format!("step {n}")]);
    git(w, &["rev-parse", "HEAD"]).trim().to_string()
}

/// A history whose commits move files between directories and change which paths carry
/// `export-ignore` and `export-subst`; the bare repository and the commits.
fn history(dir: &Path) -> (std::path::PathBuf, Vec<String>) {
    let w = dir.join("w");
    std::fs::create_dir_all(&w).expect("mkdir");
    git(&w, &["init", "-q", "-b", "main"]);
    let base: Vec<(&str, &str)> = vec![
        ("README.md", "# readme\n"),
        ("docs/guide.md", "guide\n"),
        ("docs/img/logo.png", "PNG\0data"),
        ("docs/api/index.html", "<html>\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("src/lib/util.rs", "pub fn u() {}\n"),
        ("tests/it.rs", "#[test] fn t() {}\n"),
        ("build/out.bin", "bin\0"),
        ("VERSION", "$Format:%H %s %ad$\n"),
    ];
    let mut commits = Vec::new();
    let attrs = [
        "tests/ export-ignore\n.gitattributes export-ignore\nVERSION export-subst\n",
        "tests/ export-ignore\nbuild/** export-ignore\n*.png export-ignore\nVERSION export-subst\n",
        "docs/api export-ignore\n",
        "",
    ];
    for (n, a) in attrs.iter().enumerate() {
        let mut files = base.clone();
        if n % 2 == 1 {
            files.push(("docs/new.md", "new\n"));
            files.retain(|(p, _)| *p != "src/lib/util.rs");
        }
        if !a.is_empty() {
            files.push((".gitattributes", a));
        }
        commits.push(commit(&w, &files, n));
    }
    let bare = dir.join("bare.git");
    git(dir, &["clone", "-q", "--bare", s(&w), s(&bare)]);
    (bare, commits)
}

/// `snapshot` with only what `select` selects: files and symlinks it includes, and the
/// directories above them.
fn selected(snapshot: &Snapshot, select: &Select) -> Snapshot {
    let mut out = BTreeMap::new();
    for (path, node) in snapshot {
        if matches!(node, Node::Dir) || !select.includes(path.as_str().into(), false) {
            continue;
        }
        out.insert(path.clone(), node.clone());
        let mut p = path.as_str();
        while let Some((up, _)) = p.rsplit_once('/') {
            out.insert(up.to_string(), Node::Dir);
            p = up;
        }
    }
    out
}

/// What `git archive REV` extracts to.
fn archive(repo: &Path, rev: &str, scratch: &Path) -> Snapshot {
    let dir = scratch.join(format!("archive-{rev}"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let tar = Command::new("git").arg("-C").arg(repo).args(["archive", rev]).output().expect("git archive");
    assert!(tar.status.success());
    let mut x = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("tar runs");
    std::io::Write::write_all(&mut x.stdin.take().expect("piped"), &tar.stdout).expect("feed tar");
    assert!(x.wait().expect("tar ends").success());
    let out = tree::read_dir(&dir);
    std::fs::remove_dir_all(&dir).expect("clean");
    out
}

const INCLUDES: &[&[&str]] = &[&[], &["docs/"], &["*.md"], &["src/", "/README.md"], &["docs/**/*.html", "src/lib/"]];
const EXCLUDES: &[&[&str]] = &[&[], &["img/"], &["*.rs", "!main.rs"], &["docs/api/"], &["build"]];

#[test]
fn changing_patterns_and_commits_always_leaves_exactly_the_selected_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bare, commits) = history(dir.path());
    let target = dir.path().join("target");
    let mut rng = Rng(0x5eed_1234_abcd);
    for step in 0..24 {
        let rev = &commits[rng.below(commits.len())];
        let include: Vec<String> = INCLUDES[rng.below(INCLUDES.len())].iter().map(|p| p.to_string()).collect();
        let exclude: Vec<String> = EXCLUDES[rng.below(EXCLUDES.len())].iter().map(|p| p.to_string()).collect();
        let mut args = vec!["sync", "--repo", s(&bare), "--ref", rev, "--target", s(&target)];
        for p in &include {
            args.extend(["--include", p]);
        }
        for p in &exclude {
            args.extend(["--exclude", p]);
        }
        ok(&args);
        let select = Select::new(&include, &exclude).expect("patterns");
        let want = selected(&gitcheck::expected(&bare, rev, &[]), &select);
        let diffs = gitcheck::diff(&want, &target);
        assert!(
            diffs.is_empty(),
            "step {step}: {rev} --include {include:?} --exclude {exclude:?}:\n{}",
            diffs.join("\n")
        );
        // verify compares with the same selection (the state's), at every level.
        for level in ["quick", "full"] {
            ok(&["verify", "--repo", s(&bare), "--target", s(&target), "--level", level]);
        }
        let status = ok(&["status", "--target", s(&target), "--json"]);
        let state: serde_json::Value = serde_json::from_str(&status).expect("json");
        let recorded = &state["state"]["select"];
        if include.is_empty() && exclude.is_empty() {
            assert!(recorded.is_null(), "no patterns recorded as none: {recorded}");
        } else {
            assert_eq!(recorded["include"].as_array().map_or(0, Vec::len), include.len(), "{recorded}");
        }
    }
}

#[test]
fn an_incremental_sync_under_unchanged_patterns_touches_only_changed_selected_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bare, commits) = history(dir.path());
    let target = dir.path().join("target");
    let sync = |rev: &str| -> serde_json::Value {
        let out =
            ok(&["sync", "--repo", s(&bare), "--ref", rev, "--target", s(&target), "--include", "/docs/", "--json"]);
        serde_json::from_str(&out).expect("json")
    };
    // A first sync removes nothing (there was nothing: paths outside the selection were never
    // written).
    let first = sync(&commits[0]);
    assert_eq!(
        (first["applied"]["unlink"].as_u64(), first["applied"]["rmdir"].as_u64()),
        (Some(0), Some(0)),
        "{first}"
    );
    // commits[1] adds docs/new.md and removes src/lib/util.rs (not selected) and changes
    // .gitattributes (not selected): one write (and, as with every selection, a mkdir of the
    // directory it writes into — fine if it exists), nothing removed.
    let out = sync(&commits[1]);
    let applied = &out["applied"];
    assert_eq!(
        (applied["write"].as_u64(), applied["unlink"].as_u64(), applied["rmdir"].as_u64()),
        (Some(1), Some(0), Some(0)),
        "{out}"
    );
    assert!(applied["mkdir"].as_u64() <= Some(1), "{out}");
    let want =
        selected(&gitcheck::expected(&bare, &commits[1], &[]), &Select::new(&["/docs/".into()], &[]).expect("ok"));
    assert!(gitcheck::diff(&want, &target).is_empty());
    // The same commit again: nothing.
    let out = sync(&commits[1]);
    assert_eq!(out["applied"]["write"].as_u64(), Some(0), "{out}");
}

#[test]
fn export_matches_git_archive_forward_backward_and_when_turned_on_and_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bare, commits) = history(dir.path());
    let target = dir.path().join("target");
    let order = [0, 1, 2, 3, 2, 0, 3, 1];
    for (step, &i) in order.iter().enumerate() {
        let rev = &commits[i];
        ok(&["sync", "--repo", s(&bare), "--ref", rev, "--target", s(&target), "--export"]);
        let want = archive(&bare, rev, dir.path());
        let diffs = gitcheck::diff(&want, &target);
        assert!(diffs.is_empty(), "step {step} (commit {i}) with --export:\n{}", diffs.join("\n"));
        ok(&["verify", "--repo", s(&bare), "--target", s(&target), "--level", "full"]);
        if step % 3 == 2 {
            // Off: a fresh clone's checkout; on again: the archive.
            ok(&["sync", "--repo", s(&bare), "--ref", rev, "--target", s(&target)]);
            let diffs = gitcheck::diff(&gitcheck::expected(&bare, rev, &[]), &target);
            assert!(diffs.is_empty(), "step {step} (commit {i}) without --export:\n{}", diffs.join("\n"));
        }
    }
    // The expansion is there, with the commit's id.
    let version = std::fs::read_to_string(target.join("VERSION")).expect("VERSION");
    assert!(version.starts_with(&commits[1]), "{version}");
}

#[test]
fn export_and_patterns_compose_and_bad_patterns_are_refused_with_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bare, commits) = history(dir.path());
    let target = dir.path().join("target");
    ok(&["sync", "--repo", s(&bare), "--ref", &commits[1], "--target", s(&target), "--export", "--exclude", "*.md"]);
    let want = selected(&archive(&bare, &commits[1], dir.path()), &Select::new(&[], &["*.md".into()]).expect("ok"));
    let diffs = gitcheck::diff(&want, &target);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));

    let before = tree::read_dir(&target);
    let o = treesync(&["sync", "--repo", s(&bare), "--ref", &commits[0], "--target", s(&target), "--include", ""]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("hint:"), "{err}");
    assert_eq!(tree::read_dir(&target), before, "a refused sync writes nothing");
}
