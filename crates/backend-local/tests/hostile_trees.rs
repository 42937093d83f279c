//! Random trees full of hostile and odd entry names, written straight into the object database
//! (bypassing git's own checks: `hash-object --literally`), synced one after another into a
//! target with the local backend. Every sync either refuses before writing anything (the
//! target is unchanged) or leaves exactly what `git archive` gives; nothing ever appears beside
//! the target, and the directory that symlinks in the trees point at stays empty.
//! `TREESYNC_HOSTILE_CASES` sets the number of trees (default 150), `TREESYNC_HOSTILE_SEED` the seed.

use std::collections::BTreeMap;
use std::path::Path;

use treesync_backend_local::LocalBackend;
use treesync_core::{Repo, plan, sync};
use treesync_testkit::conformance::sync_to;
use treesync_testkit::tree::{self, Node};
use treesync_testkit::{BareRepo, Rng, git, git_stdin, raw_tree};

/// Names that must be refused (as any entry).
const HOSTILE: &[&[u8]] = &[
    b"..",
    b".",
    b".git",
    b".GIT",
    b".Git",
    b".git.",
    b".git ",
    b"GIT~1",
    b"git~1",
    b".gi\xe2\x80\x8ct",
    b".\xe2\x80\x8cgit",
    b"a/b",
    b"/",
    b".treesync-tmp.x",
];

/// Odd names that git checks out fine on Linux.
const ODD: &[&[u8]] = &[
    b"a",
    b"b",
    b"c",
    b"A",
    b"with space",
    b"new\nline",
    b"tab\there",
    b"\x01ctl",
    b"-dash",
    b"con",
    b"nul.txt",
    b"\xff\xfe",
    b"..a",
    b".gitx",
    b"git",
    b"x.git",
    b".gitmodules",
    b"\xc3\xa9t\xc3\xa9",
];

/// Symlink targets: outside the target (the sentinel directory), absolute, dangling, inside.
const LINKS: &[&[u8]] = &[b"../outside", b"../../outside", b"../outside/x", b"/tmp", b"..", b"a", b"b/c", b"."];

struct Gen<'a> {
    repo: &'a Path,
    rng: Rng,
    hostile: Vec<String>,
    blobs: Vec<String>,
}

impl Gen<'_> {
    fn blob(&mut self, content: &[u8]) -> String {
        git_stdin(self.repo, &["hash-object", "-w", "--stdin"], content)
    }

    fn name(&mut self, root: bool) -> (Vec<u8>, bool) {
        match self.rng.below(100) {
            0..=7 => (HOSTILE[self.rng.below(HOSTILE.len())].to_vec(), true),
            8 if root => (b".treesync".to_vec(), true),
            9 => (vec![b'n'; 256 + self.rng.below(50)], true),
            10 => (vec![b'm'; 255], false),
            _ => (ODD[self.rng.below(ODD.len())].to_vec(), false),
        }
    }

    /// A tree object with 1..=5 entries; `depth` levels of subtrees at most.
    fn tree(&mut self, depth: usize, root: bool, path: &str) -> String {
        let n = 1 + self.rng.below(5);
        let mut entries: Vec<(String, Vec<u8>, String)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..n {
            let (name, bad) = self.name(root);
            let twice = !seen.insert(name.clone());
            if twice && self.rng.below(4) != 0 {
                continue;
            }
            let shown = format!("{path}{}", String::from_utf8_lossy(&name));
            let (mode, id, bad) = match self.rng.below(10) {
                0..=3 => {
                    let c = format!("{shown} {}\n", self.rng.next_u64());
                    ("100644".to_string(), self.blob(c.as_bytes()), bad)
                }
                4 => {
                    let c = format!("#!/bin/sh\n# {shown}\n");
                    ("100755".to_string(), self.blob(c.as_bytes()), bad)
                }
                5 | 6 => {
                    let target = LINKS[self.rng.below(LINKS.len())];
                    // A symlink named .gitmodules, or below a directory of that name, is refused
                    // too, as git does (the CVE-2018-11235 family).
                    let bad = bad || name == b".gitmodules" || path.split('/').any(|c| c == ".gitmodules");
                    ("120000".to_string(), self.blob(target), bad)
                }
                7 => {
                    let commit = format!("{:040x}", u128::from(self.rng.next_u64()) << 32 | 1);
                    ("160000".to_string(), commit, bad)
                }
                _ if depth > 0 => {
                    let sub = self.tree(depth - 1, false, &format!("{shown}/"));
                    ("40000".to_string(), sub, bad)
                }
                _ => ("100644".to_string(), self.blob(b"leaf\n"), bad),
            };
            if bad || twice {
                self.hostile.push(if twice { format!("{shown} (twice)") } else { shown.clone() });
            }
            entries.push((mode, name, id));
        }
        // Git sorts entries with directories compared as if they ended in '/'.
        entries.sort_by(|a, b| {
            let key = |e: &(String, Vec<u8>, String)| {
                let mut k = e.1.clone();
                if e.0 == "40000" {
                    k.push(b'/');
                }
                k
            };
            key(a).cmp(&key(b))
        });
        let raw: Vec<(&str, &[u8], &str)> =
            entries.iter().map(|(m, n, i)| (m.as_str(), n.as_slice(), i.as_str())).collect();
        let id = raw_tree(self.repo, &raw);
        self.blobs.push(id.clone());
        id
    }
}

/// `git archive` of `rev` extracted at `dest`, or git's complaint.
fn archive(repo: &Path, rev: &str, dest: &Path) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let out = Command::new("git").current_dir(repo).args(["archive", "--format=tar", rev]).output().expect("git runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("").to_string());
    }
    std::fs::create_dir_all(dest).expect("mkdir");
    let mut tar = Command::new("tar").current_dir(dest).args(["-xf", "-"]).stdin(Stdio::piped()).spawn().expect("tar");
    std::io::Write::write_all(&mut tar.stdin.take().expect("piped"), &out.stdout).expect("tar input");
    assert!(tar.wait().expect("tar").success(), "tar");
    Ok(())
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn random_hostile_trees_never_escape_and_are_refused_before_any_write() {
    let cases: usize = std::env::var("TREESYNC_HOSTILE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let bare = BareRepo::new();
    let sandbox = tempfile::tempdir().expect("tempdir");
    let target = sandbox.path().join("target");
    let outside = sandbox.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    let repo = Repo::open(&bare.path).expect("open");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut g = Gen {
        repo: &bare.path,
        rng: Rng::new(std::env::var("TREESYNC_HOSTILE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed)),
        hostile: Vec::new(),
        blobs: Vec::new(),
    };
    let (mut refused, mut synced) = (0, 0);
    let mut current: BTreeMap<String, Node> = BTreeMap::new();
    for case in 0..cases {
        g.hostile.clear();
        let tree = g.tree(3, true, "");
        let commit = git(&bare.path, &["-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "x"]);
        let backend = LocalBackend::new(&target, Default::default());
        let result = rt.block_on(sync_to(&repo, &commit, &backend));
        let now = tree::read_dir(&target);
        match (&result, g.hostile.is_empty()) {
            (Err(sync::Error::Plan(plan::Error::Unsafe(e))), false) => {
                assert!(e.to_string().len() < 400, "case {case}: a short message: {e}");
                assert!(tree::diff(&current, &now).is_none(), "case {case}: refused, yet the target changed");
                refused += 1;
            }
            (Ok(_), true) => {
                let want = sandbox.path().join(format!("want{case}"));
                match archive(&bare.path, &commit, &want) {
                    Ok(()) => {
                        let expected = tree::read_dir(&want);
                        if let Some(d) = tree::diff(&expected, &now) {
                            panic!("case {case}: the target differs from git archive:\n{d}");
                        }
                        synced += 1;
                    }
                    Err(e) => panic!("case {case}: git archive refuses a tree treesync wrote: {e}"),
                }
                let _ = std::fs::remove_dir_all(&want);
                current = now;
            }
            (r, clean) => panic!(
                "case {case}: hostile entries {:?} (clean: {clean}), but the sync gave {:?}",
                g.hostile,
                r.as_ref().map(|_| "ok").map_err(|e| e.to_string())
            ),
        }
        assert!(
            listing(&outside).is_empty(),
            "case {case}: something was written through a symlink: {:?}",
            listing(&outside)
        );
        let beside: Vec<String> =
            listing(sandbox.path()).into_iter().filter(|n| n != "target" && n != "outside").collect();
        assert!(beside.is_empty(), "case {case}: something appeared beside the target: {beside:?}");
    }
    eprintln!("{cases} random trees: {synced} synced like git archive, {refused} refused before any write");
    assert!(synced > cases / 10 && refused > cases / 10, "both kinds exercised: {synced} synced, {refused} refused");
}
