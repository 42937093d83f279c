//! What the watch tests share: a working repository to commit to, with real git.

use std::path::Path;

/// `git ARGS` in `dir` with an author and `main` as the first branch; its output, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"];
    all.extend_from_slice(args);
    treesync_testkit::git(dir, &all)
}

/// Write `file` with `content` in the working repository `dir` and commit it: the commit's id.
pub fn commit(dir: &Path, file: &str, content: &str) -> String {
    std::fs::write(dir.join(file), content).expect("write");
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", file]);
    git(dir, &["rev-parse", "HEAD"])
}
