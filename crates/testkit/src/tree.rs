//! Read a directory (or an in-memory target) back as a comparable map.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use treesync_core::memory::MemNode;

/// What one path holds, as `git checkout` would make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A file: its bytes and whether the owner exec bit is set.
    File(Vec<u8>, bool),
    /// A symlink and its target.
    Link(Vec<u8>),
}

/// The whole tree below a directory, by relative path; `.treesync` at the top is left out.
pub fn read_dir(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Entries that vanish while we read (a sync running concurrently renames temporaries into
/// place) are skipped; anything else that fails panics.
fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
    fn gone<T>(r: std::io::Result<T>, what: &Path) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("{}: {e}", what.display()),
        }
    }
    let Some(entries) = gone(std::fs::read_dir(dir), dir) else { return };
    for e in entries {
        let Some(e) = gone(e, dir) else { continue };
        let path = e.path();
        let rel = path.strip_prefix(root).expect("below root").to_string_lossy().into_owned();
        if rel == ".treesync" {
            continue;
        }
        let Some(meta) = gone(std::fs::symlink_metadata(&path), &path) else { continue };
        let node = if meta.file_type().is_symlink() {
            use std::os::unix::ffi::OsStrExt;
            let Some(t) = gone(std::fs::read_link(&path), &path) else { continue };
            Node::Link(t.as_os_str().as_bytes().to_vec())
        } else if meta.is_dir() {
            walk(root, &path, out);
            Node::Dir
        } else {
            let Some(data) = gone(std::fs::read(&path), &path) else { continue };
            Node::File(data, meta.permissions().mode() & 0o100 != 0)
        };
        out.insert(rel, node);
    }
}

/// A tree from objects read back from an object store: `(path, mode, bytes)` with the mode as
/// `st_mode` bits (a symlink is `0o120000`, exec bits `0o111`), and the directories their
/// paths imply. An object without a mode is a test failure (treesync always stores one).
pub fn read_objects(objects: impl IntoIterator<Item = (String, Option<u32>, Vec<u8>)>) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    for (path, mode, data) in objects {
        let parts: Vec<&str> = path.split('/').collect();
        for i in 1..parts.len() {
            out.insert(parts[..i].join("/"), Node::Dir);
        }
        let node = match mode {
            Some(m) if m & 0o170000 == 0o120000 => Node::Link(data),
            Some(m) => Node::File(data, m & 0o111 != 0),
            None => panic!("{path} has no mode metadata"),
        };
        out.insert(path, node);
    }
    out
}

/// The content of a memory backend in the same form.
pub fn read_memory(nodes: &BTreeMap<Vec<u8>, MemNode>) -> BTreeMap<String, Node> {
    nodes
        .iter()
        .map(|(k, v)| {
            let node = match v {
                MemNode::Dir => Node::Dir,
                MemNode::File { data, executable } => Node::File(data.clone(), *executable),
                MemNode::Link { target } => Node::Link(target.clone()),
            };
            (String::from_utf8_lossy(k).into_owned(), node)
        })
        .collect()
}

/// Describe how `actual` differs from `expected`, or `None` if they are equal.
pub fn diff(expected: &BTreeMap<String, Node>, actual: &BTreeMap<String, Node>) -> Option<String> {
    let mut out = String::new();
    for (k, v) in expected {
        match actual.get(k) {
            None => out.push_str(&format!("  missing {k} ({})\n", describe(v))),
            Some(a) if a != v => {
                out.push_str(&format!("  differs {k}: expected {}, got {}\n", describe(v), describe(a)))
            }
            Some(_) => {}
        }
    }
    for (k, v) in actual {
        if !expected.contains_key(k) {
            out.push_str(&format!("  extra   {k} ({})\n", describe(v)));
        }
    }
    (!out.is_empty()).then_some(out)
}

fn describe(n: &Node) -> String {
    match n {
        Node::Dir => "dir".into(),
        Node::File(d, x) => format!("file of {} bytes{}", d.len(), if *x { ", +x" } else { "" }),
        Node::Link(t) => format!("symlink -> {}", String::from_utf8_lossy(t)),
    }
}

/// Put a foreign file at `path` below `root` (parents created), bypassing treesync: for
/// conformance fixtures on directories.
pub fn put_file(root: &Path, path: &str, content: &[u8]) {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, content).expect("write");
}

/// Replace the directory at `path` below `root` by a symlink to `target`, bypassing treesync.
/// How a test changes a target behind treesync's back ([`tamper`]).
#[derive(Debug, Clone)]
pub enum Tamper {
    /// Remove what is at the path (recursively).
    Remove,
    /// Put a file there.
    File,
    /// Put a directory holding one file there.
    Dir,
    /// Put a symlink to this target there.
    Symlink(std::path::PathBuf),
}

/// Replace whatever is at `path` below `root` as `how` says (what was there is removed first,
/// a directory with its content), not through treesync.
pub fn tamper(root: &Path, path: &str, how: &Tamper) -> bool {
    let p = root.join(path);
    match std::fs::symlink_metadata(&p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p).expect("rm -r"),
        Ok(_) => std::fs::remove_file(&p).expect("rm"),
        Err(_) => {}
    }
    match how {
        Tamper::Remove => {}
        Tamper::File => std::fs::write(&p, b"planted by a test\n").expect("write"),
        Tamper::Dir => {
            std::fs::create_dir(&p).expect("mkdir");
            std::fs::write(p.join("planted"), b"planted by a test\n").expect("write");
        }
        Tamper::Symlink(target) => std::os::unix::fs::symlink(target, &p).expect("symlink"),
    }
    true
}

pub fn replace_dir_by_symlink(root: &Path, path: &str, target: &Path) -> bool {
    let p = root.join(path);
    std::fs::remove_dir_all(&p).expect("rm -r");
    std::os::unix::fs::symlink(target, &p).expect("symlink");
    true
}
