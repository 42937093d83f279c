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

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
        let e = e.expect("dir entry");
        let path = e.path();
        let rel = path.strip_prefix(root).expect("below root").to_string_lossy().into_owned();
        if rel == ".treesync" {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        let node = if meta.file_type().is_symlink() {
            use std::os::unix::ffi::OsStrExt;
            Node::Link(std::fs::read_link(&path).expect("readlink").as_os_str().as_bytes().to_vec())
        } else if meta.is_dir() {
            walk(root, &path, out);
            Node::Dir
        } else {
            Node::File(std::fs::read(&path).expect("read"), meta.permissions().mode() & 0o100 != 0)
        };
        out.insert(rel, node);
    }
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
            Some(a) if a != v => out.push_str(&format!("  differs {k}: expected {}, got {}\n", describe(v), describe(a))),
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
