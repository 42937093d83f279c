//! Readers never see a broken file: while syncs go back and forth between two commits, a reader
//! opening files continuously always gets the whole content of that path in one of the commits
//! (or no file, where one commit has none). Shared by the backends' tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use treesync_core::Backend;

use crate::conformance::{History, sync_to};
use crate::history::{Entry, Model};

/// What a race saw.
#[derive(Debug)]
pub struct Race {
    /// Syncs made.
    pub syncs: u64,
    /// Files read whole.
    pub reads: u64,
    /// Reads that were neither commit's content (empty when all is well).
    pub bad: Vec<String>,
}

/// Sync back and forth between two commits (300 files changing size and mode, 20 files only
/// in each) for `run` with a backend from `backend()`, while this thread reads files under
/// `read_root` (the target as this machine sees it) and checks each one.
pub fn race(backend: &(dyn Fn() -> Arc<dyn Backend> + Sync), read_root: &Path, run: Duration) -> Race {
    let mut a = Model::default();
    let mut b = Model::default();
    for i in 0..300 {
        let p = format!("d{}/f{i}", i % 10);
        a.insert(&p, Entry::File { content: vec![b'a'; 1000 + 37 * i], executable: false });
        b.insert(&p, Entry::File { content: vec![b'b'; 20_000 + 11 * i], executable: i % 4 == 0 });
    }
    for i in 0..20 {
        a.insert(&format!("only-a/f{i}"), Entry::File { content: vec![b'x'; 500], executable: false });
        b.insert(&format!("only-b/f{i}"), Entry::File { content: vec![b'y'; 700], executable: false });
    }
    let contents = |m: &Model| -> BTreeMap<String, Vec<u8>> {
        m.0.iter()
            .filter_map(|(k, e)| match e {
                Entry::File { content, .. } => Some((k.clone(), content.clone())),
                _ => None,
            })
            .collect()
    };
    let (ca, cb) = (contents(&a), contents(&b));
    let paths: Vec<String> = ca.keys().chain(cb.keys()).cloned().collect();
    let h = History::from_trees(&[a, b]);
    let rt = crate::runtime();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &*backend())).expect("initial");
    let stop = AtomicBool::new(false);
    let (mut reads, mut bad) = (0u64, Vec::new());
    let mut syncs = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = Instant::now() + run;
            let mut i = 1;
            while Instant::now() < deadline {
                rt.block_on(sync_to(&h.repo, &h.commits[i % 2], &*backend())).expect("sync");
                i += 1;
                syncs += 1;
            }
            stop.store(true, Ordering::SeqCst);
        });
        let mut n = 0usize;
        while !stop.load(Ordering::SeqCst) {
            let p = &paths[n % paths.len()];
            n = n.wrapping_mul(31).wrapping_add(7);
            match std::fs::read(read_root.join(p)) {
                Ok(data) => {
                    reads += 1;
                    if Some(&data) != ca.get(p) && Some(&data) != cb.get(p) {
                        bad.push(format!("{p}: {} bytes", data.len()));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if ca.contains_key(p) && cb.contains_key(p) {
                        bad.push(format!("{p}: missing although both commits have it"));
                    }
                }
                Err(e) => bad.push(format!("{p}: {e}")),
            }
        }
    });
    Race { syncs, reads, bad }
}
