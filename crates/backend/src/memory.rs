//! [`MemoryBackend`]: the reference backend. It keeps the tree in a map and enforces the
//! same rules a real filesystem does (parents must be directories, nothing is written through
//! a symlink, non-empty directories cannot be removed), which makes it the oracle for unit tests.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::backend::{Backend, Capabilities, DirEntry, Error, Found, FoundKind, LockGuard, Policy, TargetState};
use crate::lock::Holder;
use crate::op::Op;
use crate::path::{RelPath, fold_case};
use crate::source::BlobSource;

/// An entry of a [`MemoryBackend`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemNode {
    /// A directory.
    Dir,
    /// A file.
    File {
        /// Content.
        data: Vec<u8>,
        /// Exec bit.
        executable: bool,
    },
    /// A symlink.
    Link {
        /// Target.
        target: Vec<u8>,
    },
}

#[derive(Default)]
struct Inner {
    nodes: BTreeMap<Vec<u8>, MemNode>,
    state: Option<Vec<u8>>,
    /// Auxiliary files of the state folder, by name.
    aux: BTreeMap<String, Vec<u8>>,
    lock: Option<String>,
    /// Names that differ only by case are one entry (like APFS, NTFS, SMB shares): the name
    /// it was first created with is kept.
    case_insensitive: bool,
}

/// The key that `path` reaches: on a case-insensitive tree, each component takes the spelling
/// of an existing entry that differs from it only by case.
fn resolve(nodes: &BTreeMap<Vec<u8>, MemNode>, path: &RelPath, insensitive: bool) -> Vec<u8> {
    if !insensitive {
        return path.as_bytes().to_vec();
    }
    let mut key: Vec<u8> = Vec::new();
    for c in path.components() {
        let base = key.len();
        if !key.is_empty() {
            key.push(b'/');
        }
        key.extend_from_slice(c);
        if nodes.contains_key(&key) {
            continue;
        }
        let (parent, want) = (key[..base].to_vec(), fold_case(c));
        let found = nodes.keys().find(|k| {
            let (kp, kn) = match k.iter().rposition(|b| *b == b'/') {
                Some(i) => (&k[..i], &k[i + 1..]),
                None => (&k[..0], &k[..]),
            };
            kp == parent.as_slice() && fold_case(kn) == want
        });
        if let Some(k) = found {
            key = k.clone();
        }
    }
    key
}

/// An in-memory tree. Clones share the same tree.
#[derive(Clone, Default)]
pub struct MemoryBackend {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Display for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("memory")
    }
}

fn io(op: &'static str, path: &RelPath, kind: std::io::ErrorKind, msg: &str) -> Error {
    Error::io(op, path, std::io::Error::new(kind, msg.to_string()))
}

impl MemoryBackend {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty tree where names that differ only by case are the same entry, like on APFS,
    /// NTFS or an SMB share (case-preserving, case-insensitive).
    pub fn case_insensitive() -> Self {
        let b = Self::default();
        b.inner.lock().expect("never poisoned").case_insensitive = true;
        b
    }

    /// Everything in the tree, by path.
    pub fn snapshot(&self) -> BTreeMap<Vec<u8>, MemNode> {
        self.inner.lock().expect("never poisoned").nodes.clone()
    }

    /// Whether the tree has a state file (treesync manages it).
    pub fn has_state(&self) -> bool {
        self.inner.lock().expect("never poisoned").state.is_some()
    }

    /// Put an entry in place directly (to simulate someone changing the target).
    pub fn insert(&self, path: &str, node: MemNode) {
        self.inner.lock().expect("never poisoned").nodes.insert(path.as_bytes().to_vec(), node);
    }

    fn apply(&self, op: &Op, content: Option<Vec<u8>>) -> Result<(), Error> {
        let mut inner = self.inner.lock().expect("never poisoned");
        let insensitive = inner.case_insensitive;
        let nodes = &mut inner.nodes;
        let path = op.path();
        let resolved = resolve(nodes, path, insensitive);
        let resolved = RelPath::respelled(resolved);
        let path = &resolved;
        let parent_state = {
            let mut ok = Ok(true);
            let mut prefix = Vec::new();
            for c in path.components().collect::<Vec<_>>().split_last().map(|x| x.1).unwrap_or(&[]) {
                if !prefix.is_empty() {
                    prefix.push(b'/');
                }
                prefix.extend_from_slice(c);
                match nodes.get(&prefix) {
                    Some(MemNode::Dir) => {}
                    Some(_) => {
                        ok = Err(Error::NotBeneath { path: path.display() });
                        break;
                    }
                    None => {
                        ok = Ok(false);
                        break;
                    }
                }
            }
            ok
        };
        let key = path.as_bytes().to_vec();
        match op {
            Op::Unlink { .. } => {
                if parent_state? && matches!(nodes.get(&key), Some(MemNode::File { .. } | MemNode::Link { .. })) {
                    nodes.remove(&key);
                }
                return Ok(());
            }
            Op::Rmdir { .. } => {
                if !parent_state? || !matches!(nodes.get(&key), Some(MemNode::Dir)) {
                    return Ok(());
                }
                let mut child = key.clone();
                child.push(b'/');
                if nodes.range(child.clone()..).next().is_some_and(|(k, _)| k.starts_with(&child)) {
                    return Err(Error::NotEmpty { path: path.display() });
                }
                nodes.remove(&key);
                return Ok(());
            }
            _ => {}
        }
        if !parent_state? {
            return Err(io("write into", path, std::io::ErrorKind::NotFound, "parent directory does not exist"));
        }
        match op {
            Op::Mkdir { .. } => match nodes.get(&key) {
                Some(MemNode::Dir) => {}
                Some(_) => {
                    return Err(io("create directory", path, std::io::ErrorKind::AlreadyExists, "not a directory"));
                }
                None => {
                    nodes.insert(key, MemNode::Dir);
                }
            },
            Op::Write { executable, .. } => {
                if matches!(nodes.get(&key), Some(MemNode::Dir)) {
                    return Err(io("write", path, std::io::ErrorKind::IsADirectory, "is a directory"));
                }
                let data = content.expect("content is read for writes");
                nodes.insert(key, MemNode::File { data, executable: *executable });
            }
            Op::Symlink { target, .. } => {
                if matches!(nodes.get(&key), Some(MemNode::Dir)) {
                    return Err(io("create symlink", path, std::io::ErrorKind::IsADirectory, "is a directory"));
                }
                nodes.insert(key, MemNode::Link { target: target.clone() });
            }
            Op::Chmod { executable, .. } => match nodes.get_mut(&key) {
                Some(MemNode::File { executable: x, .. }) => *x = *executable,
                _ => return Err(io("change mode of", path, std::io::ErrorKind::NotFound, "no such file")),
            },
            Op::Unlink { .. } | Op::Rmdir { .. } => unreachable!("handled above"),
        }
        Ok(())
    }
}

struct MemLock(MemoryBackend);

impl Drop for MemLock {
    fn drop(&mut self) {
        self.0.inner.lock().expect("never poisoned").lock = None;
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn capabilities(&self) -> Capabilities {
        let case_sensitive = !self.inner.lock().expect("never poisoned").case_insensitive;
        Capabilities::filesystem(case_sensitive)
    }

    fn policy(&self) -> Policy {
        Policy { jobs: 4, batch: 16, min_batch: 1, lookups: 4, scans: 4, spread: false }
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let content = match (op, op.content()) {
            (Op::Write { path, .. }, Some(content)) => {
                let mut data = Vec::new();
                blobs
                    .read_content(&content, &mut |chunk| {
                        data.extend_from_slice(chunk);
                        Ok(())
                    })
                    .map_err(|e| Error::from_blob("write", path, e))?;
                Some(data)
            }
            _ => None,
        };
        self.apply(op, content)
    }

    async fn prepare_target(&self, _create: bool) -> Result<TargetState, Error> {
        let inner = self.inner.lock().expect("never poisoned");
        Ok(if inner.state.is_some() {
            TargetState::Managed
        } else if inner.nodes.is_empty() {
            TargetState::Empty
        } else {
            TargetState::Unmanaged
        })
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let inner = self.inner.lock().expect("never poisoned");
        let mut prefix = dir.as_bytes().to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        Ok(inner
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains(&b'/'))
            .map(|(k, n)| DirEntry { name: k[prefix.len()..].to_vec(), is_dir: matches!(n, MemNode::Dir) })
            .collect())
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.inner.lock().expect("never poisoned").state.clone())
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        self.inner.lock().expect("never poisoned").state = Some(bytes.to_vec());
        Ok(())
    }

    async fn scan(&self, _jobs: usize) -> Result<Vec<Found>, Error> {
        let inner = self.inner.lock().expect("never poisoned");
        Ok(inner
            .nodes
            .iter()
            .map(|(k, n)| Found {
                path: k.clone(),
                kind: match n {
                    MemNode::Dir => FoundKind::Dir,
                    MemNode::File { data, executable } => FoundKind::File {
                        size: data.len() as u64,
                        executable: Some(*executable),
                        stat: None,
                        etag: None,
                        typed: true,
                    },
                    MemNode::Link { target } => FoundKind::Link { target: target.clone(), stat: None },
                },
            })
            .collect())
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        match self.inner.lock().expect("never poisoned").nodes.get(path.as_bytes()) {
            Some(MemNode::File { data, .. }) => Ok(data.clone()),
            _ => Err(io("read", path, std::io::ErrorKind::NotFound, "no such file")),
        }
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        let mut inner = self.inner.lock().expect("never poisoned");
        if let Some(h) = &inner.lock {
            return Err(Error::Locked { holder: h.clone() });
        }
        inner.lock = Some(holder.to_string());
        Ok(LockGuard(Box::new(MemLock(self.clone()))))
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.inner.lock().expect("never poisoned").aux.get(name).cloned())
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.inner.lock().expect("never poisoned").aux.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }
}

impl MemoryBackend {
    /// Remove an entry directly (to simulate someone changing the target).
    pub fn remove(&self, path: &str) {
        self.inner.lock().expect("never poisoned").nodes.remove(path.as_bytes());
    }
}
