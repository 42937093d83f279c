//! Test support for treesync: repositories generated with the real `git`, random histories,
//! comparison of a target with `git archive`, the conformance suite every backend runs, and
//! real servers to run it against (a slow FUSE filesystem, moto for S3, nfs-ganesha for NFS,
//! with a TCP delay line for latency). A test whose real component is missing fails, naming the
//! command that provides it ([`missing`]); `cargo xtask test` installs them all.

pub mod bucket;
pub mod cli;
pub mod config_file;
pub mod conformance;
pub mod crash;
pub mod delay;
pub mod ganesha;
pub mod gitcheck;
pub mod gitdaemon;
pub mod history;
pub mod missing;
pub mod oracle;
pub mod pack;
pub mod plant;
pub mod race;
pub mod readers;
pub mod run;
pub mod s3;
pub mod schema;
pub mod slowfs;
pub mod smarthttp;
pub mod snapshots;
pub mod tree;
pub mod work;

pub use run::{git_command, run_with_input};
/// The one `/proc/self/mountinfo` reader (treesync-backend-nfs's), for the testbeds and tests.
pub use treesync_backend_nfs::mountinfo;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Run git in `dir` and return its stdout; panics with git's stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_command(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Write a tree object with exactly these raw entries (mode, name, hex id), in the order given,
/// bypassing git's checks (`hash-object -t tree --literally`); its id.
pub fn raw_tree(repo: &Path, entries: &[(&str, &[u8], &str)]) -> String {
    let body: Vec<u8> = entries.iter().flat_map(|(mode, name, id)| pack::tree_entry(mode, name, id)).collect();
    git_stdin(repo, &["hash-object", "-t", "tree", "-w", "--literally", "--stdin"], &body)
}

/// Run git with `input` on stdin.
pub fn git_stdin(dir: &Path, args: &[&str], input: &[u8]) -> String {
    let out = run_with_input(git_command(dir).args(args), input);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The runtime tests drive backends with: two worker threads, I/O and timers enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// A bare repository in a temporary directory.
pub struct BareRepo {
    _dir: tempfile::TempDir,
    /// Its path.
    pub path: PathBuf,
}

impl BareRepo {
    /// A new empty bare repository.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("repo.git");
        std::fs::create_dir(&path).expect("mkdir");
        git(&path, &["init", "-q", "--bare", "-b", "main"]);
        BareRepo { _dir: dir, path }
    }

    /// Extract `git archive REV` into `dest` (which must not exist).
    pub fn archive(&self, rev: &str, dest: &Path) {
        archive(&self.path, rev, dest)
    }
}

/// Extract `git archive REV` of the repository `repo` into `dest` (which must not exist).
pub fn archive(repo: &Path, rev: &str, dest: &Path) {
    std::fs::create_dir_all(dest).expect("mkdir");
    let archive = Command::new("git")
        .current_dir(repo)
        .args(["archive", "--format=tar", rev])
        .output()
        .expect("git archive runs");
    assert!(archive.status.success(), "git archive {rev}: {}", String::from_utf8_lossy(&archive.stderr));
    untar(&archive.stdout, dest);
}

/// Extract the tar archive `tar` into the directory `dest`.
pub fn untar(tar: &[u8], dest: &Path) {
    run_with_input(Command::new("tar").current_dir(dest).args(["-xf", "-"]), tar);
}

/// How `target` differs from `git archive REV` of `bare`; `None` when it holds exactly that.
pub fn archive_diff(bare: &BareRepo, rev: &str, target: &Path) -> Option<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    bare.archive(rev, &dir.path().join("x"));
    tree::diff(&tree::read_dir(&dir.path().join("x")), &tree::read_dir(target))
}

/// Whether `target` is a directory holding exactly `git archive REV` of `bare`.
pub fn matches(bare: &BareRepo, rev: &str, target: &Path) -> bool {
    target.is_dir() && archive_diff(bare, rev, target).is_none()
}

/// Panic unless `target` holds exactly `git archive REV` of `bare`, showing the difference.
#[track_caller]
pub fn assert_target_is(bare: &BareRepo, rev: &str, target: &Path) {
    if let Some(d) = archive_diff(bare, rev, target) {
        panic!("target differs from git archive {rev}:\n{d}");
    }
}

impl Default for BareRepo {
    fn default() -> Self {
        Self::new()
    }
}

/// A small deterministic PRNG (xorshift64*), so histories are reproducible from a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `p` percent.
    pub fn percent(&mut self, p: u32) -> bool {
        self.below(100) < p as usize
    }

    /// A random element.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// [`treesync_core::verify::verify`] at `level`, of the whole tree the target's state
/// records, never interrupted: what most tests ask of a verify.
pub async fn verify_at(
    repo: &treesync_core::Repo,
    backend: &dyn treesync_core::Backend,
    level: treesync_core::verify::Level,
) -> Result<treesync_core::verify::Report, treesync_core::verify::Error> {
    let options = treesync_core::verify::Options::at(level);
    treesync_core::verify::verify(repo, backend, &options, &|_| {}, &std::sync::atomic::AtomicBool::new(false)).await
}
