//! The conformance suites on the reference in-memory backend and generations host.

use std::collections::BTreeMap;
use std::sync::Arc;

use treesync_core::Backend;
use treesync_core::generation::{Host, MemoryHost};
use treesync_core::memory::{MemNode, MemoryBackend};
use treesync_testkit::conformance::Fixture;
use treesync_testkit::conformance::host::HostFixture;
use treesync_testkit::tree::{self, Node};

struct Memory(MemoryBackend);

impl Fixture for Memory {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.0.clone())
    }
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_memory(&self.0.snapshot())
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        self.0.insert(path, MemNode::File { data: content.to_vec(), executable: false });
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &std::path::Path) -> bool {
        let prefix = format!("{path}/");
        for (k, _) in self.0.snapshot() {
            if k.starts_with(prefix.as_bytes()) {
                self.0.remove(std::str::from_utf8(&k).expect("utf8"));
            }
        }
        self.0.insert(path, MemNode::Link { target: target.to_string_lossy().as_bytes().to_vec() });
        true
    }
    fn tamper(&self, path: &str, how: &treesync_testkit::tree::Tamper) -> bool {
        use treesync_testkit::tree::Tamper;
        let prefix = format!("{path}/");
        for (k, _) in self.0.snapshot() {
            if k.starts_with(prefix.as_bytes()) || k == path.as_bytes() {
                self.0.remove(std::str::from_utf8(&k).expect("utf8"));
            }
        }
        match how {
            Tamper::Remove => {}
            Tamper::File => {
                self.0.insert(path, MemNode::File { data: b"planted by a test\n".to_vec(), executable: false })
            }
            Tamper::Dir => {
                self.0.insert(path, MemNode::Dir);
                self.0.insert(
                    &format!("{path}/planted"),
                    MemNode::File { data: b"planted\n".to_vec(), executable: false },
                );
            }
            Tamper::Symlink(t) => {
                self.0.insert(path, MemNode::Link { target: t.to_string_lossy().as_bytes().to_vec() })
            }
        }
        true
    }
}

mod case_sensitive {
    use super::*;
    treesync_testkit::conformance_suite!(Memory(MemoryBackend::new()));
}

/// Like APFS, NTFS or an SMB share: names that differ only by case are one entry.
mod case_insensitive {
    use super::*;
    treesync_testkit::conformance_suite!(Memory(MemoryBackend::case_insensitive()));
}

/// The generations host in memory, the reference for `generation::sync`.
struct Generations {
    host: Arc<MemoryHost>,
    exchange: bool,
}

impl Generations {
    fn new(exchange: bool) -> Self {
        Generations { host: Arc::new(MemoryHost::new(exchange)), exchange }
    }
}

impl HostFixture for Generations {
    fn host(&self) -> Arc<dyn Host> {
        self.host.clone()
    }
    fn read_target(&self) -> BTreeMap<String, Node> {
        self.host.resolve().map(|t| tree::read_memory(&t)).unwrap_or_default()
    }
    fn exchange(&self) -> bool {
        self.exchange
    }
}

/// The reference host answers for slots the generations code made: it takes a missing one for
/// a bug of that code (and panics), or for an empty directory (a clone of it is empty).
fn memory_skips(case: &str) -> Option<&'static str> {
    case.contains("missing_slot").then_some("the memory host assumes every slot it is asked for exists")
}

/// The memory host as a filesystem with `RENAME_EXCHANGE`.
mod host_with_exchange {
    use super::*;
    treesync_testkit::host_suite!(Generations::new(true), skip = memory_skips);
}

/// The memory host as a filesystem without it (NFS): symlink switches only.
mod host_without_exchange {
    use super::*;
    treesync_testkit::host_suite!(Generations::new(false), skip = memory_skips);
}
