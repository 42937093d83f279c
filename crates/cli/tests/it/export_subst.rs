//! `export-subst` with `%(describe…)` against git itself: after every `treesync sync --export`
//! the target equals, byte for byte, what `git archive COMMIT | tar -x` extracts — the options
//! of `%(describe:…)`, tags of every kind, and git's rule that an archive expands one
//! `%(describe…)` only (the first in its order), across incremental syncs where that first one
//! moves to another file or the tags change.

use std::path::Path;
use std::process::Command;

use crate::treesync;
use treesync_testkit::cli::s;
use treesync_testkit::gitcheck;

fn git_in(dir: &Path, args: &[&str], date: &str) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "A")
        .env("GIT_AUTHOR_EMAIL", "a@example.org")
        .env("GIT_COMMITTER_NAME", "C")
        .env("GIT_COMMITTER_EMAIL", "c@example.org")
        .env("GIT_AUTHOR_DATE", date)
        .env("GIT_COMMITTER_DATE", date)
        .env_remove("GIT_DIR")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").trim_end().to_owned()
}

/// A repository whose commits and tags get increasing dates, one step per call.
struct Repo {
    dir: std::path::PathBuf,
    clock: std::cell::Cell<u64>,
}

impl Repo {
    /// A new repository in `dir`, its `.gitattributes` (not committed yet) `attributes`.
    fn new(dir: &Path, attributes: &str) -> Repo {
        let r = Repo { dir: dir.join("repo"), clock: std::cell::Cell::new(1_700_000_000) };
        std::fs::create_dir_all(&r.dir).expect("mkdir");
        r.git(&["init", "-q", "-b", "main"]);
        r.write(".gitattributes", attributes);
        r
    }

    fn git(&self, args: &[&str]) -> String {
        self.clock.set(self.clock.get() + 100);
        git_in(&self.dir, args, &format!("{} +0000", self.clock.get()))
    }

    fn write(&self, path: &str, text: &str) {
        let p = self.dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Write `text` to `path` and commit everything as `message`; the commit's id.
    fn commit_file(&self, path: &str, text: &str, message: &str) -> String {
        self.write(path, text);
        self.commit(message)
    }
}

/// Sync `rev` with `--export` into `target`, compare with `git archive`; returns how many
/// files were compared.
fn sync_and_compare(repo: &Repo, rev: &str, target: &Path, what: &str) -> usize {
    let o = treesync(&["sync", "--repo", s(&repo.dir), "--ref", rev, "--target", s(target), "--export"]);
    assert!(o.status.success(), "{what}: treesync sync: {}", String::from_utf8_lossy(&o.stderr));
    let (want, _) = gitcheck::archive_expected(&repo.dir, rev, &[]);
    let diffs = gitcheck::diff(&want, target);
    assert!(diffs.is_empty(), "{what} ({rev}) differs from git archive:\n{}", diffs.join("\n"));
    want.len()
}

/// setuptools-scm's `.git_archival.txt` template, as its documentation has it.
const ARCHIVAL: &str =
    "node: $Format:%H$\nnode-date: $Format:%cI$\ndescribe-name: $Format:%(describe:tags=true,match=*[0-9]*)$\n";

/// A history of five commits holding `placeholder` in `.git_archival.txt` (the archive's first)
/// and a plain `%(describe)` in `z.txt` (after it: left as it is), with tags of every kind:
/// annotated at different dates and lightweight ones, several on one commit.
fn tagged_history(dir: &Path, placeholder: &str) -> (Repo, Vec<String>) {
    let repo = Repo::new(dir, "*.txt export-subst\n");
    repo.write(".git_archival.txt", &format!("describe: $Format:{placeholder}$ {placeholder}\n"));
    repo.write("z.txt", "later: $Format:%(describe)$\n");
    repo.write("f.txt", "plain $Format:%h$\n");
    let mut commits = vec![repo.commit("one")];
    repo.git(&["tag", "-a", "-m", "1", "v1.0"]);
    commits.push(repo.commit_file("g", "x\n", "two"));
    repo.git(&["tag", "build-light"]);
    commits.push(repo.commit_file("g", "y\n", "three"));
    repo.git(&["tag", "-a", "-m", "rc", "v2.0-rc1"]);
    repo.git(&["tag", "-a", "-m", "2", "v2.0"]);
    repo.git(&["tag", "zz-light"]);
    commits.push(repo.commit_file("g", "z\n", "four"));
    commits.push(repo.commit_file("g", "w\n", "five"));
    repo.git(&["tag", "-a", "-m", "3", "v3.0-beta"]);
    (repo, commits)
}

#[test]
fn describe_options_and_tags_of_every_kind_expand_as_git_archive_does() {
    let placeholders = [
        "%(describe)",
        "%(describe:tags)",
        "%(describe:tags=true,match=*[0-9]*)",
        "%(describe:match=v1*)",
        "%(describe:exclude=*rc*,exclude=v3*)",
        "%(describe:tags,match=build*)",
        "%(describe:abbrev=0)",
        "%(describe:abbrev=12)",
        "%(describe:match=none*)",
        "%(describe:tags=maybe)",
        "%(describe:nope)",
    ];
    let mut compared = 0;
    for (i, placeholder) in placeholders.iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (repo, commits) = tagged_history(dir.path(), placeholder);
        // Each commit fresh, then all onto one target, forward and back.
        for (n, rev) in commits.iter().enumerate() {
            let target = dir.path().join(format!("fresh-{n}"));
            compared += sync_and_compare(&repo, rev, &target, &format!("{placeholder} ({i}) at commit {n}"));
        }
        let target = dir.path().join("target");
        for n in [0, 4, 2, 3, 1] {
            compared += sync_and_compare(&repo, &commits[n], &target, &format!("{placeholder} ({i}) onto commit {n}"));
        }
    }
    // 10 syncs per placeholder: 4 files in the first commit's archive, 5 in the others'.
    assert_eq!(compared, placeholders.len() * (2 * 4 + 8 * 5));
}

#[test]
fn setuptools_scm_archival_file_equals_git_archive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(dir.path(), ".git_archival.txt export-subst\n");
    repo.write(".git_archival.txt", ARCHIVAL);
    repo.write("src/pkg.py", "print('hi')\n");
    let first = repo.commit("first");
    repo.git(&["tag", "release"]); // no digit: not a match
    let second = repo.commit_file("src/pkg.py", "print('hi 2')\n", "second");
    repo.git(&["tag", "1.0.0"]); // lightweight: counts with tags=true
    let third = repo.commit_file("src/pkg.py", "print('hi 3')\n", "third");
    let target = dir.path().join("target");
    for (n, rev) in [&first, &second, &third, &first].iter().enumerate() {
        sync_and_compare(&repo, rev, &target, &format!("step {n}"));
    }
    let written = std::fs::read_to_string(target.join(".git_archival.txt")).expect("read");
    assert!(written.contains("describe-name: \n"), "no tag with a digit reaches the first commit: {written}");
    sync_and_compare(&repo, &third, &target, "third");
    let written = std::fs::read_to_string(target.join(".git_archival.txt")).expect("read");
    assert!(written.contains("describe-name: 1.0.0-1-g"), "{written}");
}

#[test]
fn only_the_archives_first_describe_expands_and_follows_it_across_syncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(dir.path(), "* export-subst\n");
    // Archive order: depth first, entries in tree order: `b.txt`, then `b/inner.txt` (git sorts
    // a directory as if its name ended in `/`, after `.`), then `c.txt`.
    repo.write("b/inner.txt", "inner $Format:%(describe)$ $Format:%(describe:tags)$\n");
    repo.write("b.txt", "b $Format:%H %(describe) %(describe)$\n");
    repo.write("c.txt", "c $Format:%(describe:abbrev=4)$\n");
    let mut commits = vec![repo.commit("one")];
    repo.git(&["tag", "-a", "-m", "1", "v1"]);
    // The first placeholder moves: `a.txt` now comes first, and it is malformed (used up, left).
    commits.push(repo.commit_file("a.txt", "a $Format:%(describe:bogus)$\n", "two"));
    // It moves further in: `a.txt` gone, `b.txt` loses its placeholder.
    std::fs::remove_file(repo.dir.join("a.txt")).expect("rm");
    commits.push(repo.commit_file("b.txt", "b $Format:%H$\n", "three"));
    repo.git(&["tag", "light"]);
    // A tag appears between two syncs, and `b.txt` holds it again.
    commits.push(repo.commit_file("b.txt", "b $Format:%(describe:tags)$\n", "four"));
    repo.git(&["tag", "-a", "-m", "2", "v2"]);
    // `b/` is export-ignore: the first is then `c.txt`.
    commits.push(repo.commit_file(".gitattributes", "* export-subst\nb export-ignore\n", "five"));
    let target = dir.path().join("target");
    let order = [0, 1, 2, 3, 4, 2, 0, 4, 1, 3];
    for (step, &i) in order.iter().enumerate() {
        sync_and_compare(&repo, &commits[i], &target, &format!("step {step}: commit {i} after the one before"));
    }
    // Each commit synced fresh too.
    for (i, rev) in commits.iter().enumerate() {
        sync_and_compare(&repo, rev, &dir.path().join(format!("fresh-{i}")), &format!("commit {i} fresh"));
    }
}

#[test]
fn a_placeholder_git_expands_and_treesync_cannot_fails_the_sync_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(dir.path(), "*.txt export-subst\n");
    repo.write("wrap.txt", "$Format:%w(20)%B$\n");
    let rev = repo.commit("one");
    let target = dir.path().join("target");
    let o = treesync(&["sync", "--repo", s(&repo.dir), "--ref", &rev, "--target", s(&target), "--export"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "refused: {stderr}");
    assert!(stderr.contains("wrap.txt") && stderr.contains("`%w(20)`"), "{stderr}");
}
