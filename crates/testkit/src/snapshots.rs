//! Whole-tree snapshots taken by a reader that resolves the target once per pass, checked
//! against `git archive` of each commit: the reader test of `sync --atomic` (issue 16).
//!
//! A pass opens the target directory once (`open(2)` follows the link of the symlink mode;
//! the exchange mode's real directory is opened as it is at that moment), then reads every
//! directory, file and symlink of the tree *relative to that descriptor* (`openat`,
//! `readlinkat`, `statat`), never through the target path again, and hashes what it reads
//! (files as git blob ids, with their exec bit; symlinks by their text). Such a snapshot must
//! equal `git archive` of exactly one commit: one that equals neither is *mixed* — what a
//! reader of a target synced in place sees while a sync runs.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use crate::history::{Entry, Model};
use crate::tree::Node;

/// What a snapshot holds at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A directory.
    Dir,
    /// A file: the git blob id of its content, and whether the owner exec bit is set.
    File(gix_hash::ObjectId, bool),
    /// A symlink and its text.
    Link(Vec<u8>),
}

/// A whole tree by relative path (`.treesync` at the top left out, as `git archive` has none).
pub type Snapshot = BTreeMap<String, Item>;

/// The git blob id of `content`.
pub fn blob_id(content: &[u8]) -> gix_hash::ObjectId {
    let mut h = gix_hash::hasher(gix_hash::Kind::Sha1);
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    h.try_finalize().expect("SHA-1 of a test tree: no collision attack here")
}

/// A tree read back by [`crate::tree::read_dir`] (e.g. `git archive` extracted) as a snapshot.
pub fn from_nodes(nodes: &BTreeMap<String, Node>) -> Snapshot {
    nodes
        .iter()
        .map(|(k, n)| {
            let item = match n {
                Node::Dir => Item::Dir,
                Node::File(data, x) => Item::File(blob_id(data), *x),
                Node::Link(t) => Item::Link(t.clone()),
            };
            (k.clone(), item)
        })
        .collect()
}

/// Take one snapshot of the tree at `target`: resolve it once, then read everything relative
/// to that directory descriptor. Errors name the path that failed (a generation changed or
/// removed under a reader shows as one).
pub fn take(target: &Path) -> Result<Snapshot, String> {
    let root = rustix::fs::open(target, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{}: {e}", target.display()))?;
    let mut out = Snapshot::new();
    walk(root.as_fd(), "", &mut out)?;
    Ok(out)
}

fn walk(dir: BorrowedFd<'_>, prefix: &str, out: &mut Snapshot) -> Result<(), String> {
    let here = if prefix.is_empty() { "." } else { prefix };
    let mut names = Vec::new();
    for e in Dir::read_from(dir).map_err(|e| format!("{here}: listing: {e}"))? {
        let e = e.map_err(|e| format!("{here}: listing: {e}"))?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." || (prefix.is_empty() && name == b".treesync") {
            continue;
        }
        names.push(String::from_utf8_lossy(name).into_owned());
    }
    for name in names {
        let rel = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
        let st = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| format!("{rel}: lstat: {e}"))?;
        let item = match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let sub = rustix::fs::openat(
                    dir,
                    name.as_str(),
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("{rel}: open: {e}"))?;
                walk(sub.as_fd(), &rel, out)?;
                Item::Dir
            }
            FileType::Symlink => {
                let t = rustix::fs::readlinkat(dir, name.as_str(), Vec::new())
                    .map_err(|e| format!("{rel}: readlink: {e}"))?;
                Item::Link(t.into_bytes())
            }
            FileType::RegularFile => {
                let fd = rustix::fs::openat(
                    dir,
                    name.as_str(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("{rel}: open: {e}"))?;
                let mut data = Vec::new();
                std::fs::File::from(fd).read_to_end(&mut data).map_err(|e| format!("{rel}: read: {e}"))?;
                Item::File(blob_id(&data), st.st_mode & 0o100 != 0)
            }
            other => return Err(format!("{rel}: unexpected {other:?}")),
        };
        out.insert(rel, item);
    }
    Ok(())
}

/// Which of `expected` a snapshot equals, if exactly one (the first, if several are equal).
pub fn which(snapshot: &Snapshot, expected: &[Snapshot]) -> Option<usize> {
    expected.iter().position(|e| e == snapshot)
}

/// A short description of how a mixed snapshot differs from each expected one.
pub fn describe_mix(snapshot: &Snapshot, expected: &[Snapshot]) -> String {
    let mut parts = Vec::new();
    for (i, e) in expected.iter().enumerate() {
        let differing = e.iter().filter(|(k, v)| snapshot.get(*k) != Some(v)).count()
            + snapshot.keys().filter(|k| !e.contains_key(*k)).count();
        let example = e
            .iter()
            .find(|(k, v)| snapshot.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .or_else(|| snapshot.keys().find(|k| !e.contains_key(*k)).cloned())
            .unwrap_or_default();
        parts.push(format!("{differing} paths differ from commit {i} (e.g. {example})"));
    }
    parts.join(", ")
}

/// What a reader saw.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    /// Passes over the whole tree.
    pub passes: u64,
    /// Passes that equalled each expected commit, by index.
    pub per_commit: Vec<u64>,
    /// Times a pass saw another commit than the pass before it (mixed passes skipped).
    pub switches_seen: u64,
    /// Passes that equalled no commit, or failed part-way (must be 0 with `--atomic`).
    pub mixed: u64,
    /// The first few mixed passes, described.
    pub examples: Vec<String>,
}

/// Take snapshots of `target` one after another until `stop` is set (at least one), and check
/// each against `expected`.
pub fn read_until(target: &Path, expected: &[Snapshot], stop: &AtomicBool) -> Readings {
    let mut r = Readings { per_commit: vec![0; expected.len()], ..Default::default() };
    let mut last = None;
    loop {
        let done = stop.load(Ordering::SeqCst);
        r.passes += 1;
        let outcome = take(target).map(|s| (which(&s, expected), s));
        match outcome {
            Ok((Some(i), _)) => {
                r.per_commit[i] += 1;
                if last.is_some_and(|l| l != i) {
                    r.switches_seen += 1;
                }
                last = Some(i);
            }
            Ok((None, s)) => {
                r.mixed += 1;
                if r.examples.len() < 5 {
                    r.examples.push(format!("pass {}: {}", r.passes, describe_mix(&s, expected)));
                }
            }
            Err(e) => {
                r.mixed += 1;
                if r.examples.len() < 5 {
                    r.examples.push(format!("pass {}: failed part-way: {e}", r.passes));
                }
            }
        }
        if done {
            return r;
        }
    }
}

/// What a race between syncs and a reader saw.
#[derive(Debug, Clone, Default)]
pub struct Race {
    /// Syncs (switches) made.
    pub syncs: u64,
    /// What the reader saw.
    pub readings: Readings,
}

/// Run `sync(i)` for `syncs` syncs alternating between commit 1 and commit 0 (the target must
/// hold commit 0 already) while a reader thread takes snapshots of `target`; the reader stops
/// after the last sync.
pub fn race(target: &Path, expected: &[Snapshot], syncs: u64, mut sync: impl FnMut(usize)) -> Race {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| read_until(target, expected, &stop));
        let mut made = 0;
        let finish = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for i in 1..=syncs {
                sync((i % 2) as usize);
                made += 1;
            }
        }));
        stop.store(true, Ordering::SeqCst);
        let readings = reader.join().expect("the reader thread does not panic");
        if let Err(p) = finish {
            std::panic::resume_unwind(p);
        }
        Race { syncs: made, readings }
    })
}

/// Two trees that differ in many ways: 320 files whose content changes (every 4th also its
/// exec bit), 40 files only in the first and 40 only in the second (two directories of them
/// appear and disappear), 12 symlinks whose text changes, a file that becomes a symlink, a
/// directory that becomes a file, and 40 files that stay the same. `scale` multiplies the
/// number of changing files (1 for the figures above).
pub fn two_trees(scale: usize) -> [Model; 2] {
    let mut a = Model::default();
    let mut b = Model::default();
    let file = |c: &str, i: usize, len: usize, x: bool| Entry::File {
        content: format!("{c} {i}\n").repeat(len / 8 + 1).into_bytes(),
        executable: x,
    };
    for i in 0..320 * scale {
        let p = format!("d{:02}/s{}/f{i}.txt", i % 16, i % 3);
        a.insert(&p, file("a", i, 200 + 13 * (i % 50), false));
        b.insert(&p, file("b", i, 900 + 7 * (i % 40), i % 4 == 0));
    }
    for i in 0..40 * scale {
        a.insert(&format!("only-a/f{i}"), file("x", i, 100, false));
        a.insert(&format!("d{:02}/gone{i}", i % 16), file("g", i, 50, i % 2 == 0));
        b.insert(&format!("only-b/f{i}"), file("y", i, 120, false));
        b.insert(&format!("d{:02}/new{i}", i % 16), file("n", i, 70, false));
    }
    for i in 0..40 {
        let same = file("same", i, 300, i % 5 == 0);
        a.insert(&format!("same/f{i}"), same.clone());
        b.insert(&format!("same/f{i}"), same);
    }
    for i in 0..12 {
        a.insert(&format!("links/l{i}"), Entry::Link { target: format!("../d{:02}", i % 16) });
        b.insert(&format!("links/l{i}"), Entry::Link { target: format!("../same/f{i}") });
    }
    a.insert("flip/file-then-link", file("flip", 0, 40, false));
    b.insert("flip/file-then-link", Entry::Link { target: "../same/f1".into() });
    a.insert("flip/dir-then-file/inner", file("inner", 0, 40, false));
    b.insert("flip/dir-then-file", file("leaf", 0, 40, true));
    [a, b]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_snapshot_reads_what_tree_reads_through_a_link_and_tells_mixes_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = dir.path().join("g1");
        crate::tree::put_file(&g, "a/b/file", b"one\n");
        crate::tree::put_file(&g, "run.sh", b"#!/bin/sh\n");
        std::fs::set_permissions(g.join("run.sh"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::os::unix::fs::symlink("a/b/file", g.join("link")).expect("symlink");
        crate::tree::put_file(&g, ".treesync/state", b"left out\n");
        std::os::unix::fs::symlink("g1", dir.path().join("site")).expect("symlink");
        let snap = take(&dir.path().join("site")).expect("a snapshot");
        assert_eq!(snap, from_nodes(&crate::tree::read_dir(&g)));
        assert_eq!(snap.get("run.sh"), Some(&Item::File(blob_id(b"#!/bin/sh\n"), true)));
        assert_eq!(snap.get("link"), Some(&Item::Link(b"a/b/file".to_vec())));
        assert!(!snap.contains_key(".treesync") && snap.contains_key("a/b"));
        // git's id of a blob: `printf 'one\n' | git hash-object --stdin`.
        assert_eq!(blob_id(b"one\n").to_string(), "5626abf0f72e58d7a153368ba57db4c673c0e171");
        let mut other = snap.clone();
        other.insert("a/b/file".into(), Item::File(blob_id(b"two\n"), false));
        let expected = [other.clone(), snap.clone()];
        assert_eq!(which(&snap, &expected), Some(1));
        let mut mixed = snap.clone();
        mixed.remove("link");
        assert_eq!(which(&mixed, &expected), None);
        assert!(
            describe_mix(&mixed, &expected).contains("2 paths differ from commit 0"),
            "{}",
            describe_mix(&mixed, &expected)
        );
    }
}
