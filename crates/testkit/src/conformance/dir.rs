//! [`DirFixture`]: the fixture of a backend whose target is a directory on this machine, read
//! and changed behind the backend's back with plain file calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use treesync_core::Backend;

use super::Fixture;
use crate::tree::{self, Node};

/// Makes the backend of a target directory.
type Open = Box<dyn Fn(&Path) -> Arc<dyn Backend> + Send + Sync>;

/// A target directory and the backend that writes it.
pub struct DirFixture {
    root: PathBuf,
    open: Open,
    /// The temporary directory holding the target, dropped with the fixture.
    _dir: tempfile::TempDir,
}

impl DirFixture {
    /// The target `target` (not made yet) in a fresh temporary directory, its backend made by
    /// `open` from the target's path.
    pub fn temp(open: impl Fn(&Path) -> Arc<dyn Backend> + Send + Sync + 'static) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        DirFixture { root: dir.path().join("target"), open: Box::new(open), _dir: dir }
    }
}

impl Fixture for DirFixture {
    fn backend(&self) -> Arc<dyn Backend> {
        (self.open)(&self.root)
    }
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.root)
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        tree::put_file(&self.root, path, content)
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &Path) -> bool {
        tree::replace_dir_by_symlink(&self.root, path, target)
    }
    fn tamper(&self, path: &str, how: &tree::Tamper) -> bool {
        tree::tamper(&self.root, path, how)
    }
}
