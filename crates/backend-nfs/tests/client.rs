//! The built-in NFSv3 client (`nfs://` targets) against a real NFS server: nfs-ganesha on
//! 127.0.0.1, started by the test process (see `treesync_testkit::ganesha`), directly and
//! through a TCP delay line. Targets are read back from the exported directory on this machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use treesync_backend_nfs::Window;
use treesync_backend_nfs::client::{self, ClientBackend, ClientOptions};
use treesync_core::policy::Budgets;
use treesync_core::state::Holder;
use treesync_core::{Backend, Op, RelPath, backend, sync};
use treesync_testkit::conformance::{self, Fixture, History, sync_to};
use treesync_testkit::delay::DelayProxy;
use treesync_testkit::ganesha::Ganesha;
use treesync_testkit::history::{self, Model};
use treesync_testkit::runtime;
use treesync_testkit::tree::{self, Node};
use treesync_testkit::verify_at;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn server() -> &'static Ganesha {
    Ganesha::shared()
}

/// A fresh subdirectory of the export as a target.
struct Export {
    server: &'static Ganesha,
    sub: String,
    url: String,
    options: ClientOptions,
    _proxy: Option<Arc<DelayProxy>>,
}

impl Export {
    fn new(options: ClientOptions) -> Self {
        let server = server();
        let sub = format!("t{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        Export { server, url: server.url(&sub), sub, options, _proxy: None }
    }

    /// The same, with NFS calls going through a delay line of `one_way` each way.
    fn delayed(options: ClientOptions, one_way: Duration) -> Self {
        let mut e = Export::new(options);
        let proxy = Arc::new(DelayProxy::start(e.server.nfs_addr(), one_way));
        e.url = format!(
            "nfs://127.0.0.1:{}{}/{}?mountport={}",
            proxy.addr().port(),
            e.server.export_path(),
            e.sub,
            e.server.mount_port()
        );
        e._proxy = Some(proxy);
        e
    }

    fn root(&self) -> PathBuf {
        self.server.dir().join(&self.sub)
    }

    fn open(&self) -> Budgets<ClientBackend> {
        client::open(&self.url, self.options.clone()).expect("valid URL")
    }

    /// A fresh target with the default options, synced to `h`'s first commit.
    fn synced(rt: &tokio::runtime::Runtime, h: &History) -> Self {
        let e = Export::new(ClientOptions::default());
        e.sync(rt, h, 0).expect("initial");
        e
    }

    /// Sync this target to commit `i` of `h`, through a backend of its own.
    #[allow(clippy::result_large_err)] // the results as `sync::sync` gives them
    fn sync(&self, rt: &tokio::runtime::Runtime, h: &History, i: usize) -> Result<sync::Outcome, sync::Error> {
        rt.block_on(sync_to(&h.repo, &h.commits[i], &self.open()))
    }
}

impl Fixture for Export {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.open())
    }
    fn read(&self) -> BTreeMap<String, Node> {
        tree::read_dir(&self.root())
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        tree::put_file(&self.root(), path, content)
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &std::path::Path) -> bool {
        tree::replace_dir_by_symlink(&self.root(), path, target)
    }
    fn tamper(&self, path: &str, how: &tree::Tamper) -> bool {
        tree::tamper(&self.root(), path, how)
    }
}

/// The conformance suite on an `nfs://` export made by `$make` (an `Export`; without ganesha
/// every case fails, naming the command that installs it).
macro_rules! suite_on {
    ($make:expr) => {
        treesync_testkit::conformance_suite!(
            $make,
            skip = |case: &str| match case {
                // The test tampers with ganesha's exported directory behind its back, and
                // ganesha's cache then hands out handles of the removed directories
                // (NFS3ERR_STALE, about one run in three), which no client would see of a change
                // made through the server. Its chmod part is a test of its own below
                // (a_chmod_of_a_file_replaced_by_a_symlink_writes_the_file).
                "drift_on_the_paths_a_sync_touches_is_healed" => {
                    Some("ganesha's cache serves stale handles of directories removed behind its back")
                }
                _ => None,
            }
        );
    };
}

/// The defaults: pipelined, adaptive.
mod direct {
    use super::*;
    suite_on!(Export::new(ClientOptions::default()));
}

/// One op at a time and one call in flight: what a mount does.
mod one_in_flight {
    use super::*;
    suite_on!({
        let mut e = Export::new(ClientOptions { lookup_jobs: 1, write_window: Window::Fixed(1), ..Default::default() });
        e.url.push_str("&inflight=1");
        e
    });
}

/// Through a delay line of 2 ms each way: replies come late and out of order.
mod delayed {
    use super::*;
    suite_on!(Export::delayed(ClientOptions::default(), Duration::from_millis(2)));
}

fn calls(b: &ClientBackend) -> BTreeMap<&'static str, u64> {
    b.calls().into_iter().collect()
}

/// An incremental sync of K changed paths in a wide tree costs O(K) calls, none of them about
/// a path the change does not involve, and the same number whatever the tree's size.
#[test]
fn incremental_sync_costs_o_k_calls() {
    let rt = runtime();
    let mut per_size = Vec::new();
    for n in [400, 2000] {
        let e = Export::new(ClientOptions { record: true, ..Default::default() });
        let base = history::wide_tree(n, 7);
        let (next, changed) = history::change_some(&base, 6, 2, 2, 8);
        let k = changed.len();
        assert_eq!(k, 10);
        let h = History::from_trees(&[base, next]);
        e.sync(&rt, &h, 0).expect("initial");
        let b = e.open();
        rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("incremental");
        h.assert_matches(&e, 1, "incremental over NFS");
        let inner = b.inner();
        let total = inner.total_calls();
        let by_proc = calls(inner);
        assert!(total <= 11 * k as u64 + 10, "N={n}: {total} calls for K={k}: {by_proc:?}");
        // One GETATTR per file written (its attributes once in place, for the next verify);
        // every other attribute comes with the replies.
        assert_eq!(by_proc.get("GETATTR"), Some(&8), "6 modified + 2 added files: {by_proc:?}");
        assert_eq!(by_proc.get("READDIRPLUS"), None, "no listing: {by_proc:?}");
        assert_eq!(by_proc.get("READDIR"), None, "no listing: {by_proc:?}");
        // Every call is about a changed path, a directory above one, or the state folder.
        for (proc, path) in inner.recorded() {
            let p = String::from_utf8_lossy(&path).into_owned();
            // The target itself is looked up by its path on the server.
            let involved = p.is_empty()
                || e.url.contains(&p)
                || p.starts_with(".treesync")
                || p.contains("lock.nfs")
                || changed.iter().any(|c| c == &p || c.starts_with(&format!("{p}/")));
            assert!(involved, "N={n}: {proc} of {p:?}, which the change does not involve");
        }
        // LOOKUPs: each directory above a changed path once, plus the target's own path
        // (1 component below the export), `.treesync`, its state file, and for the stat
        // delta the state file's time and the delta itself.
        let mut dirs = std::collections::BTreeSet::new();
        for c in &changed {
            let mut p = c.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                dirs.insert(parent.to_string());
                p = parent;
            }
        }
        let lookups = by_proc.get("LOOKUP").copied().unwrap_or(0);
        assert!(
            lookups <= dirs.len() as u64 + 5,
            "N={n}: {lookups} LOOKUPs for {} directories: {by_proc:?}",
            dirs.len()
        );
        eprintln!("N={n} K={k}: {total} calls ({by_proc:?}), {} directories above the changes", dirs.len());
        let mut rest = by_proc.clone();
        rest.remove("LOOKUP");
        per_size.push(rest);
    }
    assert_eq!(per_size[0], per_size[1], "the same calls but directory lookups whatever the tree's size");
}

/// With the default budgets many calls are in flight on one connection; `inflight=1` keeps
/// exactly one (the comparison of the benchmark).
#[test]
fn calls_are_pipelined_on_one_connection() {
    let rt = runtime();
    let h = History::from_trees(&[history::wide_tree(600, 3)]);
    let e = Export::delayed(ClientOptions::default(), Duration::from_millis(1));
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("initial");
    h.assert_matches(&e, 0, "pipelined");
    let rpc = b.inner().rpc().expect("connected");
    assert_eq!(rpc.connections(), 1, "one connection");
    assert!(rpc.max_in_flight() >= 8, "pipelined: at most {} in flight", rpc.max_in_flight());

    let mut one = Export::new(ClientOptions { lookup_jobs: 1, write_window: Window::Fixed(1), ..Default::default() });
    one.url.push_str("&inflight=1");
    let b = one.open();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("initial, one in flight");
    h.assert_matches(&one, 0, "one in flight");
    assert_eq!(b.inner().rpc().expect("connected").max_in_flight(), 1);
}

/// A connection that breaks under pending calls: they go again on a new connection and the
/// sync finishes like git archive.
#[test]
fn dropped_connections_are_survived() {
    let rt = runtime();
    let h = History::random(11, 3);
    let e = Export::delayed(ClientOptions::default(), Duration::from_millis(1));
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("initial");
    let rpc = b.inner().rpc().expect("connected");
    rpc.drop_connection_after(3);
    rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("survives three dropped connections");
    h.assert_matches(&e, 1, "after dropped connections");
    assert!(rpc.connections() >= 4, "reconnected: {} connections", rpc.connections());
    assert!(rpc.retransmits() >= 3, "sent again: {}", rpc.retransmits());
    // The delay line cutting every connection mid-sync.
    let proxy = e._proxy.clone().expect("proxy");
    let cutter = std::thread::spawn(move || {
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(15));
            proxy.cut();
        }
    });
    rt.block_on(sync_to(&h.repo, &h.commits[2], &b)).expect("survives cut connections");
    cutter.join().expect("cutter");
    h.assert_matches(&e, 2, "after cut connections");
}

/// Errors name the problem and what to do.
#[test]
fn bad_targets_get_clear_errors() {
    let rt = runtime();
    let s = server();
    let h = History::random(5, 1);
    let status = |url: &str| {
        let b = client::open(url, ClientOptions::default()).expect("valid URL");
        rt.block_on(treesync_core::sync::status(&b)).map(|_| ()).map_err(|e| e.to_string())
    };
    // An export the server does not have.
    let url = format!("nfs://127.0.0.1:{}/nope/x?mountport={}", s.nfs_port(), s.mount_port());
    let e = status(&url).expect_err("no such export");
    assert!(e.contains("no export of 127.0.0.1 holds /nope/x") && e.contains(s.export_path()), "{e}");
    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("nfs://127.0.0.1:{port}/x?mountport={port}&timeout=2");
    let e = status(&url).expect_err("nobody there");
    assert!(e.contains("cannot mount") && e.contains("Connection refused") && e.contains("hint"), "{e}");
    // A parent that does not exist.
    let url = s.url("missing-parent/site");
    let b = client::open(&url, ClientOptions::default()).expect("valid URL");
    let e = rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect_err("parent missing").to_string();
    assert!(e.contains("missing-parent") && e.contains("NFS3ERR_NOENT"), "{e}");
    // A target that is a file.
    std::fs::write(s.dir().join("a-file"), b"x").expect("write");
    let b = client::open(&s.url("a-file"), ClientOptions::default()).expect("valid URL");
    let e = rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect_err("not a dir").to_string();
    assert!(e.contains("not a directory"), "{e}");
}

/// A lock whose holder died on this machine is taken over at once; one held by a live
/// process elsewhere names it.
#[test]
fn stale_locks_are_taken_over() {
    let rt = runtime();
    let h = History::random(9, 2);
    let e = Export::synced(&rt, &h);
    let lock = e.root().join(".treesync/lock.nfs");
    let host = treesync_core::sync::hostname();
    std::fs::write(&lock, format!("pid {} on {host}, started at unix time 1\n", dead_pid())).expect("write lock");
    e.sync(&rt, &h, 1).expect("stale lock taken over");
    h.assert_matches(&e, 1, "after taking over");
    assert!(!lock.exists(), "the lock is released after the sync");
    // A live holder on another host.
    std::fs::write(&lock, "pid 1 on elsewhere, started at unix time 1\n").expect("write lock");
    let err = e.sync(&rt, &h, 0).expect_err("locked").to_string();
    assert!(err.contains("pid 1 on elsewhere") && err.contains("taken over 120 s after"), "{err}");
    std::fs::remove_file(&lock).expect("rm");
}

/// A lock whose lease cannot be renewed stops the run: here another sync took the lock over
/// (its lock file replaced ours on the server), so the renewal finds our file gone. Ops and
/// state writes then fail with `LeaseLost` before touching the target, and releasing the lost
/// lock leaves the other sync's lock file alone.
#[test]
fn a_lease_that_cannot_be_renewed_stops_the_run() {
    let rt = runtime();
    let h = History::random(23, 2);
    // Renewed every 100 ms.
    let e = Export::new(ClientOptions { lease: Duration::from_millis(400), ..Default::default() });
    e.sync(&rt, &h, 0).expect("initial");
    let state = std::fs::read(e.root().join(".treesync/state")).expect("state");
    let b = e.open();
    let lock = e.root().join(".treesync/lock.nfs");
    let other = "pid 1 on elsewhere, started at unix time 1\n";
    rt.block_on(async {
        let guard = b.lock(&Holder::this_process()).await.expect("lock");
        assert!(b.inner().lease_lost().is_none(), "a fresh lease holds");
        std::fs::remove_file(&lock).expect("rm lock");
        std::fs::write(&lock, other).expect("the other sync's lock");
        // Wait for the next renewal to notice (the renewal task runs on its own).
        let mut waited = 0;
        while b.inner().lease_lost().is_none() {
            assert!(waited < 600, "no renewal noticed the lost lock within 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        let op = Op::Mkdir { path: RelPath::parse("late").expect("path") };
        let blobs: Arc<dyn treesync_core::source::BlobSource> = Arc::new(h.repo.clone());
        let err = b.execute(&op, &blobs).await.expect_err("the run stops");
        assert!(matches!(err, backend::Error::LeaseLost { .. }), "{err}");
        assert!(err.to_string().contains("lost the lock") && err.to_string().contains("hint:"), "{err}");
        let err = b.store_state(b"{}").await.expect_err("no state write either");
        assert!(matches!(err, backend::Error::LeaseLost { .. }), "{err}");
        b.unlock(guard).await.expect("unlock");
    });
    assert!(!e.root().join("late").exists(), "nothing written after the lease was lost");
    assert_eq!(std::fs::read(e.root().join(".treesync/state")).expect("state"), state, "state untouched");
    assert_eq!(std::fs::read_to_string(&lock).expect("the other sync's lock stays"), other);
    std::fs::remove_file(&lock).expect("rm");
}

/// Another sync takes the lock over after the third op of a sync: the wrapper below replaces
/// the lock file on the server and lets the run go on only once the renewal has noticed. The
/// sync stops with "lost the lock" (no op after that is done), the journal says it is
/// unfinished, the other sync's lock file stays; once that one is gone, the next run finishes.
#[test]
fn a_sync_whose_lock_is_taken_over_stops_and_the_next_run_finishes() {
    struct TakeoverAfter {
        inner: Budgets<ClientBackend>,
        ops: AtomicU64,
        after: u64,
        lock: PathBuf,
        /// What the renewal met, as the run saw it.
        seen: std::sync::Mutex<Option<String>>,
    }
    impl std::fmt::Display for TakeoverAfter {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "TakeoverAfter({}, {})", self.after, self.inner)
        }
    }
    #[async_trait::async_trait]
    impl Backend for TakeoverAfter {
        treesync_core::delegate_backend!(inner, except execute, execute_batch);

        async fn execute(
            &self,
            op: &Op,
            blobs: &Arc<dyn treesync_core::source::BlobSource>,
        ) -> Result<(), backend::Error> {
            if self.ops.fetch_add(1, Ordering::SeqCst) == self.after {
                std::fs::remove_file(&self.lock).expect("rm lock");
                std::fs::write(&self.lock, "pid 1 on elsewhere, started at unix time 1\n").expect("other lock");
                for _ in 0..600 {
                    if let Some(why) = self.inner.inner().lease_lost() {
                        *self.seen.lock().expect("never poisoned") = Some(why);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            self.inner.execute(op, blobs).await
        }

        async fn execute_batch(
            &self,
            batch: backend::Batch,
            blobs: &Arc<dyn treesync_core::source::BlobSource>,
        ) -> Result<(), backend::Error> {
            for op in batch.iter() {
                self.execute(op, blobs).await?;
            }
            Ok(())
        }
    }

    let rt = runtime();
    let h = History::random(29, 2);
    let options =
        ClientOptions { lease: Duration::from_millis(400), write_window: Window::Fixed(1), ..Default::default() };
    let e = Export::new(options);
    e.sync(&rt, &h, 0).expect("initial");
    let lock = e.root().join(".treesync/lock.nfs");
    let b = TakeoverAfter {
        inner: e.open(),
        ops: AtomicU64::new(0),
        after: 3,
        lock: lock.clone(),
        seen: Default::default(),
    };
    let err = rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect_err("the lease is lost");
    let chain = format!("{err}: {:?}", std::error::Error::source(&err).map(ToString::to_string));
    assert!(chain.contains("lost the lock"), "{chain}");
    let seen = b.seen.lock().expect("never poisoned").clone();
    assert!(seen.as_deref().is_some_and(|why| why.contains("another sync")), "{seen:?}");
    assert_eq!(b.ops.load(Ordering::SeqCst), 4, "no op is started after the one that found the lease lost");
    let state = std::fs::read_to_string(e.root().join(".treesync/state")).expect("state");
    assert!(state.contains("\"in_progress\": {"), "the journal says the sync is unfinished: {state}");
    assert_eq!(
        std::fs::read_to_string(&lock).expect("the other sync's lock stays"),
        "pid 1 on elsewhere, started at unix time 1\n"
    );
    std::fs::remove_file(&lock).expect("the other sync is done");
    let out = e.sync(&rt, &h, 1).expect("the next run");
    assert!(out.resumed.is_some(), "it finishes the interrupted sync");
    h.assert_matches(&e, 1, "after the next run");
}

/// Files larger than the server's write size go up in chunks (UNSTABLE WRITEs + one COMMIT).
#[test]
fn large_files_are_written_in_chunks() {
    let rt = runtime();
    let e = Export::new(ClientOptions::default());
    let mut m = Model::default();
    let big: Vec<u8> = (0..5_300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    m.insert("big.bin", history::executable(big));
    m.insert("small", history::file("s\n"));
    let h = History::from_trees(&[m]);
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("sync");
    h.assert_matches(&e, 0, "large file");
    let c = calls(b.inner());
    assert!(c.get("WRITE").copied().unwrap_or(0) >= 6, "chunks: {c:?}");
    assert_eq!(c.get("COMMIT"), Some(&1), "one COMMIT for the large file: {c:?}");
    assert_eq!(c.get("FSINFO"), Some(&1), "wtmax asked once: {c:?}");
}

/// `verify` over NFS: a full scan (READDIRPLUS per directory, READLINK per symlink), content
/// hashed through READ, drift found.
#[test]
fn verify_over_nfs() {
    use treesync_core::verify::Level;
    let rt = runtime();
    let h = History::random(21, 2);
    let e = Export::new(ClientOptions::default());
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("sync");
    for level in [Level::Quick, Level::Stat, Level::Full] {
        let r = rt.block_on(verify_at(&h.repo, &b, level)).expect("verify");
        assert!(r.is_clean(), "{level:?}: a fresh sync verifies: {r:?}");
    }
    e.put_file("intruder.txt", b"not from git\n");
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Quick)).expect("verify");
    assert!(!r.is_clean(), "the extra file is found");
    std::fs::remove_file(e.root().join("intruder.txt")).expect("rm");
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Stat)).expect("verify");
    assert!(r.is_clean(), "clean again: {r:?}");
}

/// A verify that reads files back over `nfs://` reads each with the handle its scan's
/// READDIRPLUS gave: one READ per file, no LOOKUP per file. A file replaced after the scan
/// (rename over it) is still compared as the scan saw it or by name, and drift between sync and
/// verify is found.
#[test]
fn a_full_verify_over_nfs_reads_files_by_the_handles_its_scan_listed() {
    use treesync_core::verify::Level;
    let rt = runtime();
    let n = 300;
    let h = History::from_trees(&[history::wide_tree(n, 5)]);
    let e = Export::synced(&rt, &h);
    let b = e.open();
    let before = calls(b.inner());
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Full)).expect("verify");
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(r.hashed, n as u64, "every file read back");
    let after = calls(b.inner());
    let delta = |p: &str| after.get(p).copied().unwrap_or(0) - before.get(p).copied().unwrap_or(0);
    assert!(delta("READ") >= n as u64, "a READ per file: {after:?}");
    assert!(delta("LOOKUP") <= 10, "no LOOKUP per file, only the target's and the state's: {after:?}");
    // Drift found by content (same size), read through the scan's handle.
    let victim =
        h.expected(0).into_iter().find_map(|(p, node)| matches!(node, Node::File(..)).then_some(p)).expect("a file");
    let on_disk = e.root().join(&victim);
    let mut bytes = std::fs::read(&on_disk).expect("read");
    bytes[0] ^= 1;
    std::fs::write(&on_disk, &bytes).expect("drift");
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Full)).expect("verify");
    let drift: Vec<_> = r.drift.iter().map(|d| String::from_utf8_lossy(d.path()).into_owned()).collect();
    assert_eq!(drift, std::slice::from_ref(&victim), "the drifted file is found");
}

/// Issue 18: a sync over `nfs://` records the attributes of the files it wrote (a GETATTR once
/// each is in place), so the first verify after it proves them by their stat data instead of
/// reading every file back: it hashes only those of the sync's last clock tick.
#[test]
fn the_first_verify_after_a_sync_over_nfs_reads_no_file_the_sync_recorded() {
    use treesync_core::index_delta;
    use treesync_core::verify::Level;
    let rt = runtime();
    let e = Export::new(ClientOptions::default());
    let base = history::wide_tree(300, 5);
    let (next, changed) = history::change_some(&base, 20, 5, 5, 6);
    let h = History::from_trees(&[base, next]);
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("initial");
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Stat)).expect("verify");
    assert!(r.is_clean(), "{:?}", r.drift);
    assert!(
        r.hashed as usize <= index_delta::YOUNG_LEFT_OUT,
        "at most the sync's last clock tick is hashed, the rest proven by what the sync recorded: {} hashed, {} by stat",
        r.hashed,
        r.proven_by_stat
    );
    assert_eq!(r.hashed + r.proven_by_stat, 300, "every file checked");
    // Incremental: the 25 files written are proven by the delta, the rest by the index.
    rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("incremental");
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Stat)).expect("verify");
    assert!(r.is_clean(), "{:?}", r.drift);
    assert!(r.hashed as usize <= index_delta::YOUNG_LEFT_OUT, "{} hashed of {} changed", r.hashed, changed.len());
    // Drift the recorded stat data must not hide: a file rewritten behind treesync's back.
    let victim =
        changed.iter().find(|c| h.expected_of(&h.commits[1]).contains_key(c.as_str())).expect("a written file");
    std::thread::sleep(std::time::Duration::from_millis(20));
    e.put_file(victim, b"changed behind treesync's back\n");
    let r = rt.block_on(verify_at(&h.repo, &b, Level::Stat)).expect("verify");
    assert!(!r.is_clean(), "the rewritten file is found: {r:?}");
}

/// A backend told not to record the files it writes (a sync does so for a plan larger than it
/// records) sends no GETATTR for them and hands over nothing; told to again, one GETATTR per
/// file, each handed over.
#[test]
fn files_written_while_not_recording_cost_no_getattr() {
    let rt = runtime();
    let h = History::from_trees(&[history::wide_tree(20, 2)]);
    let e = Export::synced(&rt, &h);
    let (path, bytes) = h
        .expected(0)
        .into_iter()
        .find_map(|(p, node)| match node {
            Node::File(bytes, _) => Some((p, bytes)),
            _ => None,
        })
        .expect("a file");
    let blob = treesync_testkit::git(&h.bare.path, &["rev-parse", &format!("{}:{path}", h.commits[0])]);
    let blob = treesync_core::ObjectId::from_hex(blob.trim().as_bytes()).expect("blob id");
    let b = e.open();
    let blobs: Arc<dyn treesync_core::source::BlobSource> = Arc::new(h.repo.clone());
    let write = |name: String| Op::Write {
        path: RelPath::parse(&name).expect("path"),
        blob,
        size: bytes.len() as u64,
        executable: false,
        conversion: None,
        reason: None,
    };
    let getattrs = |b: &Budgets<ClientBackend>| calls(b.inner()).get("GETATTR").copied().unwrap_or(0);
    rt.block_on(async {
        b.execute(&Op::Mkdir { path: RelPath::parse("extra").expect("path") }, &blobs).await.expect("mkdir");
        b.record_written(false);
        let before = getattrs(&b);
        for i in 0..5 {
            b.execute(&write(format!("extra/off{i}")), &blobs).await.expect("write");
        }
        assert_eq!(getattrs(&b), before, "no GETATTR while not recording");
        assert!(b.take_written().is_empty(), "nothing noted");
        b.record_written(true);
        for i in 0..5 {
            b.execute(&write(format!("extra/on{i}")), &blobs).await.expect("write");
        }
        assert_eq!(getattrs(&b), before + 5, "one GETATTR per file once recording");
        assert_eq!(b.take_written().len(), 5, "each handed over");
    });
    assert_eq!(std::fs::read(e.root().join("extra/off0")).expect("read"), bytes, "written all the same");
}

/// The server's disk fills up mid-sync: one clear error naming the path and NFS3ERR_NOSPC with
/// the hint, no temporary left behind, the journal knows; once space is freed the next sync
/// finishes like git archive.
#[test]
fn a_full_server_is_reported_and_recovered() {
    let rt = runtime();
    // Its own server with an 8 MiB export (stopped when the test process exits).
    let server = Ganesha::start_sized(8 << 20);
    let server: &'static Ganesha = Box::leak(Box::new(server));
    let e =
        Export { server, sub: "full".into(), url: server.url("full"), options: ClientOptions::default(), _proxy: None };
    let small = Model::of(&[("a.txt", "a\n")]);
    let mut big = small.clone();
    for i in 0..6 {
        let content: Vec<u8> = (0..700_000u32).map(|j| (j.wrapping_mul(2_654_435_761) >> (i + 7)) as u8).collect();
        big.insert(&format!("d/big{i}.bin"), history::file(content));
    }
    let h = History::from_trees(&[small, big]);
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[0], &b)).expect("initial");
    let ballast = server.dir().join("ballast");
    std::fs::write(&ballast, vec![7u8; 5 << 20]).expect("ballast");
    let err = rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect_err("the disk fills up").to_string();
    assert!(err.contains("NFS3ERR_NOSPC") && err.contains("d/big"), "{err}");
    assert!(err.contains("free space and run sync again"), "the hint: {err}");
    let tmp: Vec<_> = walk(&e.root())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".treesync-tmp.")))
        .collect();
    assert!(tmp.is_empty(), "temporaries left behind: {tmp:?}");
    let status = rt.block_on(treesync_core::sync::status(&b)).expect("status");
    assert!(status.state.expect("state").in_progress.is_some(), "the journal knows");
    std::fs::remove_file(&ballast).expect("free space");
    rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("the rerun finishes");
    h.assert_matches(&e, 1, "after space was freed");
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// Credentials without write permission: NFS3ERR_ACCES, named, with the hint, nothing changed.
#[test]
fn permission_denied_is_clear() {
    let rt = runtime();
    let h = History::random(13, 2);
    let e = Export::synced(&rt, &h);
    let url = format!("{}&uid=4321&gid=4321", e.url);
    let b = client::open(&url, ClientOptions::default()).expect("url");
    let err = rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect_err("no permission").to_string();
    assert!(err.contains("NFS3ERR_ACCES") && err.contains("check the target's permissions"), "{err}");
    h.assert_matches(&e, 0, "nothing changed");
}

/// A server that stops answering (every reply later than the timeout): each call is sent
/// again on a new connection, then the sync stops with one clear error naming the call; the
/// next run against a server that answers finishes the job.
#[test]
fn a_server_that_does_not_answer_times_out_clearly() {
    let rt = runtime();
    let h = History::random(15, 2);
    let e = Export::synced(&rt, &h);
    let slow = DelayProxy::start(e.server.nfs_addr(), Duration::from_millis(1500));
    let url = format!(
        "nfs://127.0.0.1:{}{}/{}?mountport={}&timeout=1",
        slow.addr().port(),
        e.server.export_path(),
        e.sub,
        e.server.mount_port()
    );
    let b = client::open(&url, ClientOptions::default()).expect("url");
    let err = rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect_err("no answer in time").to_string();
    assert!(
        err.contains("no reply from") && err.contains("after 4 tries") && err.contains("no reply within 1s"),
        "{err}"
    );
    assert!(err.lines().count() <= 3, "{err}");
    assert!(slow.connections() >= 2, "sent again on new connections: {}", slow.connections());
    h.assert_matches(&e, 0, "nothing changed");
    e.sync(&rt, &h, 1).expect("a server that answers");
    h.assert_matches(&e, 1, "finished");
}

/// Readers on the server never see a broken file while syncs over `nfs://` go back and forth
/// between two commits (files are written under a temporary name and RENAMEd into place).
#[test]
fn readers_on_the_server_never_see_a_partial_file() {
    let e = Export::new(ClientOptions::default());
    let make = || e.backend();
    let r = treesync_testkit::readers::race(&make, &e.root(), Duration::from_secs(3));
    assert!(r.syncs >= 4 && r.reads >= 1000, "the test must actually race: {r:?}");
    assert!(r.bad.is_empty(), "{} broken reads, e.g. {:?}", r.bad.len(), &r.bad[..r.bad.len().min(5)]);
}

/// The id of a process of this host that is gone.
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().expect("spawn");
    c.wait().expect("wait");
    c.id()
}

fn inode(p: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).expect("stat").ino()
}

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
}

/// Two syncs to different commits (hundreds of files apart) started together against a lock
/// left by a sync that was killed, round after round: one takes the stale lock over (by
/// renaming it aside, never by removing a name it judged a moment before) and the other finds
/// the winner's fresh lock (exit 3) or runs after it; never both at once, no other error, and
/// the tree equals `git archive` of the commit the state records.
#[test]
fn racing_syncs_take_over_a_stale_lock_one_at_a_time() {
    let rt = runtime();
    let base = history::wide_tree(400, 31);
    let (one, _) = history::change_some(&base, 150, 75, 75, 32);
    let (two, _) = history::change_some(&base, 150, 75, 75, 33);
    let h = History::from_trees(&[base, one, two]);
    let e = Export::new(ClientOptions::default());
    let lock = e.root().join(".treesync/lock.nfs");
    let stale = format!("pid {} on {}, started at unix time 1\n", dead_pid(), treesync_core::sync::hostname());
    // More by hand: TREESYNC_RACE_ROUNDS=300.
    let rounds = std::env::var("TREESYNC_RACE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(30);
    let (mut locked_out, mut after) = (0, 0);
    for round in 0..rounds {
        e.sync(&rt, &h, 0).expect("back to the first commit");
        std::fs::write(&lock, &stale).expect("a killed sync's lock");
        let results = treesync_testkit::race::two_syncs(&h, [&h.commits[1], &h.commits[2]], &|| e.backend());
        let ended = treesync_testkit::race::check(&h, &e, [1, 2], results, round);
        locked_out += usize::from(ended.one_locked_out);
        after += usize::from(ended.one_after_the_other);
        assert!(!lock.exists(), "round {round}: the lock is released");
        let left: Vec<_> = std::fs::read_dir(e.root().join(".treesync"))
            .expect("list .treesync")
            .flatten()
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("lock"))
            .collect();
        assert!(left.is_empty(), "round {round}: lock files left: {left:?}");
    }
    eprintln!("{rounds} rounds: {locked_out} with one sync locked out, {after} one after the other");
}

/// Two first syncs into a target directory that does not exist yet, started together: making
/// the directory is no error for the one that finds it made; one of them syncs, the other finds
/// the lock (exit 3) or runs after it.
#[test]
fn concurrent_first_syncs_into_a_missing_target() {
    treesync_testkit::race::concurrent_first_syncs_into_a_missing_target(15, 41, || {
        Export::new(ClientOptions::default())
    });
}

/// Where the tests below plant, on the server, what a hostile user of the export could: a
/// target synced to the first commit of `h`, and `outside`, an empty directory beside it on
/// the server (outside the tree it syncs).
struct Planting {
    rt: tokio::runtime::Runtime,
    h: History,
    e: Export,
    outside: PathBuf,
}

impl Planting {
    fn new(h: History) -> Self {
        let rt = runtime();
        let e = Export::synced(&rt, &h);
        let outside = e.server.dir().join(format!("{}-outside", e.sub));
        std::fs::create_dir(&outside).expect("mkdir outside");
        Planting { rt, h, e, outside }
    }
}

/// A hard link planted (on the server) at a temporary's name, to a file outside the synced
/// tree: the CREATE of the temporary is GUARDED, so that file is neither truncated nor filled
/// with repository content, and the synced file is a new inode. Same for `.treesync`'s
/// temporaries (the index `verify` writes).
#[test]
fn a_hard_link_at_a_temporary_name_is_not_written_through() {
    let m0 = Model::of(&[("a.txt", "old a\n"), ("d/b.txt", "old b\n")]);
    let m1 = m0.with([
        ("a.txt", history::file("new a, from the repository\n")),
        ("d/b.txt", history::executable("new b, from the repository\n")),
    ]);
    let Planting { rt, h, e, outside } = Planting::new(History::from_trees(&[m0, m1]));
    let planted = [(".treesync-tmp.a.txt", "secret a\n"), ("d/.treesync-tmp.b.txt", "secret b\n")];
    for (i, (at, content)) in planted.iter().enumerate() {
        let file = outside.join(format!("f{i}"));
        std::fs::write(&file, content).expect("outside file");
        std::fs::hard_link(&file, e.root().join(at)).expect("plant the hard link");
    }
    e.sync(&rt, &h, 1).expect("sync");
    for (i, (at, content)) in planted.iter().enumerate() {
        let file = outside.join(format!("f{i}"));
        assert_eq!(std::fs::read_to_string(&file).expect("read"), *content, "{at}: the outside file is unchanged");
        assert_eq!(mode(&file) & 0o111, 0, "{at}: its mode too");
        let synced = e.root().join(at.replace(".treesync-tmp.", ""));
        assert_ne!(inode(&synced), inode(&file), "{at}: the synced file is a new inode");
    }
    h.assert_matches(&e, 1, "after the planted links");
    // `.treesync`'s own temporary (verify writes the index through one).
    let file = outside.join("index");
    std::fs::write(&file, "secret index\n").expect("outside file");
    std::fs::hard_link(&file, e.root().join(".treesync/.treesync-tmp.index")).expect("plant");
    let r = rt.block_on(verify_at(&h.repo, &e.open(), treesync_core::verify::Level::Stat));
    assert!(r.expect("verify").is_clean());
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "secret index\n", "the outside file is unchanged");
}

/// `.treesync/lock.nfs` as a hard link to a file outside the tree: nothing is written to it and
/// its content is never shown (only a holder line treesync wrote, in a file of its own, is).
#[test]
fn a_lock_file_that_is_a_hard_link_is_neither_written_nor_shown() {
    let Planting { rt, h, e, outside } = Planting::new(History::random(17, 2));
    // The lock: a fresh file (not stale) that is not treesync's.
    let secret = outside.join("secret");
    std::fs::write(&secret, "pid 1 on db, started at unix time 1 SECRET-TOKEN\n").expect("outside file");
    let lock = e.root().join(".treesync/lock.nfs");
    std::fs::hard_link(&secret, &lock).expect("plant the lock");
    let err = e.sync(&rt, &h, 1).expect_err("locked");
    assert!(matches!(err, treesync_core::sync::Error::Backend(treesync_core::backend::Error::Locked { .. })), "{err}");
    let text = err.to_string();
    assert!(!text.contains("SECRET-TOKEN"), "the outside file's content is not shown: {text}");
    assert!(text.contains("holder unknown"), "{text}");
    assert_eq!(
        std::fs::read_to_string(&secret).expect("read"),
        "pid 1 on db, started at unix time 1 SECRET-TOKEN\n",
        "the outside file is unchanged"
    );
    std::fs::remove_file(&lock).expect("rm the planted lock");
    e.sync(&rt, &h, 1).expect("sync once it is gone");
    h.assert_matches(&e, 1, "after the planted lock was removed");
}

/// `.treesync/state` as a hard link to a file outside the tree (holding a copy of the state):
/// the state is written to a new file, the outside one is unchanged.
#[test]
fn a_state_file_that_is_a_hard_link_is_replaced_not_written_through() {
    let Planting { rt, h, e, outside } = Planting::new(History::random(18, 2));
    let state = e.root().join(".treesync/state");
    let copy = outside.join("state-copy");
    std::fs::copy(&state, &copy).expect("copy state");
    let before = std::fs::read_to_string(&copy).expect("read");
    std::fs::remove_file(&state).expect("rm state");
    std::fs::hard_link(&copy, &state).expect("plant the state");
    e.sync(&rt, &h, 1).expect("sync");
    h.assert_matches(&e, 1, "after the planted state");
    assert_eq!(std::fs::read_to_string(&copy).expect("read"), before, "the outside file is unchanged");
    assert_ne!(inode(&state), inode(&copy), "the state is a file of its own again");
    let status = rt.block_on(treesync_core::sync::status(&e.open())).expect("status");
    assert_eq!(status.state.expect("state").synced.expect("synced").commit.to_string(), h.commits[1]);
}

/// `.treesync/index-delta` as a hard link to a file outside the tree: the sync still succeeds,
/// nothing is appended through the link, and the error's hint can be followed over `nfs://`: it
/// names the file as the server exports it (not `rm nfs://...`, which no shell can run). Once
/// it is removed there, the next sync records the delta again.
#[test]
fn a_delta_that_is_a_hard_link_is_not_appended_to_and_its_hint_names_the_file_on_the_server() {
    use treesync_core::index_delta;
    let Planting { rt, h, e, outside } = Planting::new(History::random(19, 3));
    let b = e.open();
    let secret = outside.join("secret");
    std::fs::write(&secret, "not treesync's\n").expect("outside file");
    let delta = e.root().join(".treesync").join(index_delta::NAME);
    let _ = std::fs::remove_file(&delta);
    std::fs::hard_link(&secret, &delta).expect("plant the delta");
    rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("the sync succeeds; only the record is skipped");
    h.assert_matches(&e, 1, "with the planted delta");
    assert_eq!(std::fs::read_to_string(&secret).expect("read"), "not treesync's\n", "nothing appended through it");
    let err = rt.block_on(b.append_aux(index_delta::NAME, b"\n")).expect_err("not a file of its own");
    assert!(matches!(err, backend::Error::NotOwnFile { .. }), "{err}");
    let text = err.to_string();
    let on_server = format!("{}/{}/.treesync/{}", treesync_testkit::ganesha::EXPORT_PATH, e.sub, index_delta::NAME);
    assert!(text.contains(&format!("it is {on_server} as 127.0.0.1 exports it")), "the hint names the file: {text}");
    assert!(!text.contains("rm nfs://"), "no hint to rm a URL: {text}");
    assert_eq!(std::fs::read_to_string(&secret).expect("read"), "not treesync's\n", "still unchanged");
    // Follow the hint: remove it on the server (here, the exported directory is local).
    std::fs::remove_file(&delta).expect("rm on the server");
    rt.block_on(sync_to(&h.repo, &h.commits[2], &b)).expect("sync");
    h.assert_matches(&e, 2, "after the delta was removed");
    assert_ne!(inode(&delta), inode(&secret), "the delta is a file of its own");
    let recorded = std::fs::read_to_string(&delta).expect("the sync recorded its delta again");
    assert!(recorded.lines().any(|l| !l.is_empty()), "{recorded:?}");
}

/// A chmod-only change of a file that has another hard link (from outside the tree): the
/// other name keeps its mode (the file is written anew instead of SETATTR on the shared inode).
#[test]
fn a_chmod_does_not_reach_through_a_hard_link() {
    let m0 = Model::of(&[("run.sh", "#!/bin/sh\necho hi\n"), ("plain", "plain\n")]);
    let m1 =
        m0.with([("run.sh", history::executable("#!/bin/sh\necho hi\n")), ("plain", history::executable("plain\n"))]);
    let Planting { rt, h, e, outside } = Planting::new(History::from_trees(&[m0, m1]));
    let outside = outside.join("run.sh");
    std::fs::hard_link(e.root().join("run.sh"), &outside).expect("hard link from outside");
    let plain = inode(&e.root().join("plain"));
    let b = e.open();
    rt.block_on(sync_to(&h.repo, &h.commits[1], &b)).expect("sync");
    h.assert_matches(&e, 1, "after the chmod");
    assert_eq!(mode(&outside) & 0o111, 0, "the outside name keeps its mode");
    assert_ne!(inode(&e.root().join("run.sh")), inode(&outside), "run.sh is a new file");
    assert_eq!(inode(&e.root().join("plain")), plain, "a file of its own gets a SETATTR, not a rewrite");
    assert_eq!(calls(b.inner()).get("SETATTR"), Some(&1), "one SETATTR (plain): {:?}", calls(b.inner()));
}

/// A chmod-only change of a file that someone replaced by a symlink (to a file outside the
/// tree): the file is written anew, the symlink's target keeps its mode.
#[test]
fn a_chmod_of_a_file_replaced_by_a_symlink_writes_the_file() {
    let m0 = Model::of(&[("m", "mode only\n")]);
    let m1 = m0.with([("m", history::executable("mode only\n"))]);
    let Planting { rt, h, e, outside } = Planting::new(History::from_trees(&[m0, m1]));
    let outside = outside.join("m");
    std::fs::write(&outside, "outside\n").expect("outside file");
    std::fs::remove_file(e.root().join("m")).expect("rm");
    std::os::unix::fs::symlink(&outside, e.root().join("m")).expect("plant the symlink");
    e.sync(&rt, &h, 1).expect("sync");
    assert_eq!(mode(&outside) & 0o111, 0, "the symlink's target keeps its mode");
    assert_eq!(std::fs::read_to_string(&outside).expect("read"), "outside\n");
    h.assert_matches(&e, 1, "after the chmod");
}

/// A `.treesync` that is a symlink (made on the server side) to a directory outside the tree:
/// refused naming it as the local backend does, nothing written where it points; removing it
/// and taking the target over (`--force`) works.
#[test]
fn a_state_folder_that_is_a_symlink_is_refused_naming_it() {
    let Planting { rt, h, e, outside } = Planting::new(History::random(19, 2));
    let err = rt.block_on(conformance::a_state_folder_that_is_a_symlink_is_refused(&e, &h, 1, &outside));
    assert!(err.to_string().contains(".treesync: it is a symlink"), "{err}");
    std::fs::remove_file(e.root().join(".treesync")).expect("rm the symlink");
    rt.block_on(conformance::sync_with(&h.repo, &h.commits[1], &e.open(), true)).expect("--force");
    h.assert_matches(&e, 1, "after the planted symlink was removed");
}
