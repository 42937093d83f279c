//! The repositories the benchmarks and the scale runs sync: generated with the testkit's history
//! model, packed, with tags A and B; git with a separate index for the baselines; the check
//! that a target holds exactly `git archive`; and the removal of the trees a run made.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::history;
use xtask::util::run_quiet;

/// `bench-generate REPO N` (internal): write commits A and B into REPO, print their ids.
pub fn generate(args: &[String]) -> Result<(), String> {
    let [repo, n] = args else { return Err("bench-generate REPO N".into()) };
    let n: usize = n.parse().map_err(|e| format!("N: {e}"))?;
    let a = history::wide_tree(n, 1);
    let (b, _) = history::change_some(&a, 10, 2, 2, 2);
    for id in history::import(Path::new(repo), "main", &[a, b]) {
        println!("{id}");
    }
    Ok(())
}

/// The two ways git is measured checking out: its defaults, and without parallel checkout
/// workers (a label, and `checkout.workers`).
pub const GIT_CHECKOUTS: [(&str, Option<&str>); 2] =
    [("git checkout -f", None), ("git -c checkout.workers=0 checkout -f", Some("0"))];

/// Remove `p`, a directory tree or a file, if it is there.
pub fn rm(p: &Path) {
    let _ = std::fs::remove_dir_all(p);
    let _ = std::fs::remove_file(p);
}

/// Remove each of `paths` (see [`rm`]): what a case made, once it is measured.
pub fn rm_all(paths: &[&Path]) {
    paths.iter().for_each(|p| rm(p));
}

/// Where a git checkout from nothing starts: `work` an empty directory, no `index`.
pub fn fresh_checkout(work: &Path, index: &Path) -> Result<(), String> {
    rm_all(&[work, index]);
    std::fs::create_dir(work).map_err(|e| e.to_string())
}

/// `git checkout -q -f --detach REV` into `work`, with `checkout.workers=W` when given.
pub fn git_checkout(repo: &Path, work: &Path, index: &Path, workers: Option<&str>, rev: &str) -> Command {
    let mut g = git(repo, work, index);
    if let Some(w) = workers {
        g.args(["-c", &format!("checkout.workers={w}")]);
    }
    g.args(["checkout", "-q", "-f", "--detach", rev]);
    g
}

/// git on `repo` with the work tree `work` and the index file `index`, no user or system config.
pub fn git(repo: &Path, work: &Path, index: &Path) -> Command {
    let mut c = Command::new("git");
    c.env("GIT_INDEX_FILE", index)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("--git-dir")
        .arg(repo)
        .arg("--work-tree")
        .arg(work);
    c
}

/// Make the index entries non-racy, as in a tree that has been there for a while.
pub fn settle(repo: &Path, work: &Path, index: &Path) -> Result<(), String> {
    std::thread::sleep(Duration::from_millis(1100));
    run_quiet(git(repo, work, index).args(["update-index", "-q", "--refresh"])).map(|_| ())
}

/// A bare repository at `repo` with tags A (`files` files) and B (A with 10 files modified, 2
/// added, 2 deleted), packed.
pub fn make_repo(repo: &Path, files: usize) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo).map_err(|e| e.to_string())?;
    run_quiet(Command::new("git").arg("init").arg("-q").arg("--bare").arg(repo))?;
    eprintln!("generating {files} files…");
    // In a child process, so that this process stays small: a spawned child's peak RSS starts
    // from its parent's (vfork), and the generated model is large.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = run_quiet(Command::new(exe).arg("bench-generate").arg(repo).arg(files.to_string()))?;
    let commits: Vec<String> = out.lines().map(str::to_string).collect();
    if commits.len() != 2 {
        return Err(format!("bench-generate printed {out:?}"));
    }
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["update-ref", "refs/tags/A", &commits[0]]))?;
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["update-ref", "refs/tags/B", &commits[1]]))?;
    run_quiet(Command::new("git").arg("-C").arg(repo).args(["repack", "-adq"]))?;
    Ok(())
}

/// Check that `target` holds exactly `git archive REV` of `repo` (`.treesync` left out): the
/// archive is unpacked into `scratch` (removed afterwards) and compared with `diff -r`.
pub fn matches_git_archive(
    repo: &std::path::Path,
    rev: &str,
    target: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let script = format!(
        "git -C '{}' archive {rev} | tar -x -C '{}' && diff -r --no-dereference -x .treesync '{}' '{}'",
        repo.display(),
        scratch.display(),
        scratch.display(),
        target.display()
    );
    let r = run_quiet(Command::new("sh").args(["-c", &script]));
    let _ = std::fs::remove_dir_all(scratch);
    r.map(|_| ()).map_err(|e| format!("the target differs from git archive {rev}: {e}"))
}
