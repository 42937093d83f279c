//! The index entries that differ between two trees: a walk of both that descends only into
//! subtrees whose ids differ, so its cost follows the changed paths, not the tree.

use gix_hash::ObjectId;
use gix_object::tree::EntryKind;
use gix_object::{FindExt, FindObjectOrHeader};

/// What happens to one path of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// The path holds this blob (or gitlink) with this mode in the new tree.
    Set(Vec<u8>, ObjectId, gix_index::entry::Mode),
    /// The path is gone.
    Remove(Vec<u8>),
}

type Entries = Vec<(Vec<u8>, EntryKind, ObjectId)>;

fn entries(odb: &dyn FindObjectOrHeader, tree: &ObjectId) -> Result<Entries, String> {
    let mut buf = Vec::new();
    odb.find_tree_iter(tree, &mut buf)
        .map_err(|e| format!("tree {tree}: {e}"))?
        .map(|e| {
            e.map(|e| (e.filename.to_vec(), e.mode.kind(), e.oid.to_owned())).map_err(|e| format!("tree {tree}: {e}"))
        })
        .collect()
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = prefix.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn mode(kind: EntryKind) -> gix_index::entry::Mode {
    match kind {
        EntryKind::BlobExecutable => gix_index::entry::Mode::FILE_EXECUTABLE,
        EntryKind::Link => gix_index::entry::Mode::SYMLINK,
        EntryKind::Commit => gix_index::entry::Mode::COMMIT,
        EntryKind::Blob | EntryKind::Tree => gix_index::entry::Mode::FILE,
    }
}

/// Every leaf below `tree` (at `prefix`) as a change: set (`add`) or removed.
fn all(
    odb: &dyn FindObjectOrHeader,
    prefix: &[u8],
    tree: &ObjectId,
    add: bool,
    out: &mut Vec<Change>,
) -> Result<(), String> {
    for (name, kind, id) in entries(odb, tree)? {
        let path = join(prefix, &name);
        match kind {
            EntryKind::Tree => all(odb, &path, &id, add, out)?,
            k if add => out.push(Change::Set(path, id, mode(k))),
            _ => out.push(Change::Remove(path)),
        }
    }
    Ok(())
}

/// The index changes that turn an index of `old` into one of `new`.
pub(crate) fn diff(odb: &dyn FindObjectOrHeader, old: &ObjectId, new: &ObjectId) -> Result<Vec<Change>, String> {
    let mut out = Vec::new();
    walk(odb, b"", old, new, &mut out)?;
    Ok(out)
}

fn walk(
    odb: &dyn FindObjectOrHeader,
    prefix: &[u8],
    old: &ObjectId,
    new: &ObjectId,
    out: &mut Vec<Change>,
) -> Result<(), String> {
    if old == new {
        return Ok(());
    }
    let (a, b) = (entries(odb, old)?, entries(odb, new)?);
    let by_name = |v: &Entries| -> std::collections::BTreeMap<Vec<u8>, (EntryKind, ObjectId)> {
        v.iter().map(|(n, k, id)| (n.clone(), (*k, *id))).collect()
    };
    let (a, b) = (by_name(&a), by_name(&b));
    let names: std::collections::BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    for name in names {
        let path = join(prefix, name);
        match (a.get(name), b.get(name)) {
            (Some(x), Some(y)) if x == y => {}
            (Some((EntryKind::Tree, x)), Some((EntryKind::Tree, y))) => walk(odb, &path, x, y, out)?,
            (old, new) => {
                match old {
                    Some((EntryKind::Tree, id)) => all(odb, &path, id, false, out)?,
                    Some(_) => out.push(Change::Remove(path.clone())),
                    None => {}
                }
                match new {
                    Some((EntryKind::Tree, id)) => all(odb, &path, id, true, out)?,
                    Some((k, id)) => out.push(Change::Set(path, *id, mode(*k))),
                    None => {}
                }
            }
        }
    }
    Ok(())
}
