//! Repositories with a working tree, made with the real `git` the way a person would: git with
//! an author and committer, `main` as the first branch, local submodule URLs allowed, and no
//! system or global configuration of the machine.

use std::path::Path;

/// Run git in `dir` with an identity and the settings above; its trimmed stdout. Panics with
/// git's stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = crate::git_command(dir)
        .args(["-c", "protocol.file.allow=always", "-c", "user.name=T", "-c", "user.email=t@t"])
        .args(["-c", "init.defaultBranch=main", "-c", "advice.detachedHead=false"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Write `content` to `file` (directories made as needed), commit everything with the file's
/// name as the message, and return the new commit's id.
pub fn commit(dir: &Path, file: &str, content: &str) -> String {
    crate::tree::put_file(dir, file, content.as_bytes());
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", file]);
    git(dir, &["rev-parse", "HEAD"])
}

/// Write `content` at `path`, making its directories.
pub fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

/// Size of the large files of the memory tests: 256 MiB, or `TREESYNC_BIG_FILE_MIB` (e.g. 2048).
pub fn big_file_mib() -> u64 {
    std::env::var("TREESYNC_BIG_FILE_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

/// Write a file of `mib` MiB at `path` that neither compresses nor repeats within a MiB,
/// one MiB at a time.
pub fn write_big_file(path: &Path, mib: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create");
    let mut block = vec![0u8; 1 << 20];
    for i in 0..mib {
        for (j, b) in block.iter_mut().enumerate() {
            *b = ((j as u64).wrapping_mul(31) ^ i) as u8;
        }
        f.write_all(&block).expect("write");
    }
}
