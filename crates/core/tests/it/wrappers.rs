//! Every wrapper forwards every method of the `Backend` trait: a recording backend sits under
//! each wrapper, every trait method is called once through the wrapper, and the recording
//! must show each call arrive (or the documented replacement of it). `Count` must have counted
//! each call that reaches the storage, and `Latency` must have waited once for each (counted,
//! not timed).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use treesync_core::backend::{
    self, Backend, Batch, Capabilities, DirEntry, Error, Found, LockGuard, METHODS, Policy, TargetState,
};
use treesync_core::policy::{Budgets, Count, Fail, Gate, Latency};
use treesync_core::source::{BlobError, BlobSource};
use treesync_core::state::Holder;
use treesync_core::{ObjectId, Op, RelPath};

/// Records the name of every method called on it.
#[derive(Clone, Default)]
struct Recorder {
    calls: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl Recorder {
    fn note(&self, m: &'static str) {
        *self.calls.lock().expect("never poisoned").entry(m).or_default() += 1;
    }

    fn seen(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().expect("never poisoned").clone()
    }
}

impl fmt::Display for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "recorder")
    }
}

#[async_trait]
impl Backend for Recorder {
    fn capabilities(&self) -> Capabilities {
        self.note("capabilities");
        Capabilities {
            symlinks: true,
            exec_bit: true,
            empty_dirs: true,
            case_sensitive: true,
            exclusive_lock: true,
            aux_store: true,
        }
    }
    fn policy(&self) -> Policy {
        self.note("policy");
        Policy::default()
    }
    async fn execute(&self, _op: &Op, _blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.note("execute");
        Ok(())
    }
    async fn execute_batch(&self, _batch: Batch, _blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.note("execute_batch");
        Ok(())
    }
    async fn prepare_target(&self, _create: bool) -> Result<TargetState, Error> {
        self.note("prepare_target");
        Ok(TargetState::Empty)
    }
    async fn read_dir(&self, _dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        self.note("read_dir");
        Ok(Vec::new())
    }
    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        self.note("load_state");
        Ok(None)
    }
    async fn store_state(&self, _bytes: &[u8]) -> Result<(), Error> {
        self.note("store_state");
        Ok(())
    }
    async fn lock(&self, _holder: &Holder) -> Result<LockGuard, Error> {
        self.note("lock");
        Ok(LockGuard(Box::new(())))
    }
    async fn unlock(&self, _guard: LockGuard) -> Result<(), Error> {
        self.note("unlock");
        Ok(())
    }
    async fn scan(&self, _jobs: usize) -> Result<Vec<Found>, Error> {
        self.note("scan");
        Ok(Vec::new())
    }
    async fn scan_dirs(&self, _dirs: &[RelPath], _jobs: usize) -> Result<Vec<Found>, Error> {
        self.note("scan_dirs");
        Ok(Vec::new())
    }
    fn cost(&self) -> Vec<(&'static str, u64)> {
        self.note("cost");
        Vec::new()
    }
    async fn probe(&self, _dir: &RelPath) -> Result<(), Error> {
        self.note("probe");
        Ok(())
    }
    async fn read_file(&self, _path: &RelPath) -> Result<Vec<u8>, Error> {
        self.note("read_file");
        Ok(Vec::new())
    }
    async fn load_aux(&self, _name: &str) -> Result<Option<Vec<u8>>, Error> {
        self.note("load_aux");
        Ok(None)
    }
    async fn store_aux(&self, _name: &str, _bytes: &[u8]) -> Result<(), Error> {
        self.note("store_aux");
        Ok(())
    }
    async fn append_aux(&self, _name: &str, _bytes: &[u8]) -> Result<(), Error> {
        self.note("append_aux");
        Ok(())
    }
    async fn aux_mtime(&self, _name: &str) -> Result<Option<(i64, u32)>, Error> {
        self.note("aux_mtime");
        Ok(None)
    }
    fn take_written(&self) -> Vec<backend::Written> {
        self.note("take_written");
        Vec::new()
    }
    fn record_written(&self, _on: bool) {
        self.note("record_written");
    }
}

struct NoBlobs;

impl BlobSource for NoBlobs {
    fn read_blob(
        &self,
        _id: &ObjectId,
        _size: u64,
        _sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), BlobError> {
        Ok(())
    }
}

/// Call every method of the trait once through `b`, in the order of [`METHODS`].
async fn call_every_method(b: &dyn Backend) {
    let blobs: Arc<dyn BlobSource> = Arc::new(NoBlobs);
    let dir = RelPath::parse("a/b").expect("valid path");
    let op = Op::Mkdir { path: RelPath::parse("a/b/c").expect("valid path") };
    for m in METHODS {
        match m {
            "capabilities" => {
                b.capabilities();
            }
            "policy" => {
                b.policy();
            }
            "execute" => b.execute(&op, &blobs).await.expect("execute"),
            "execute_batch" => b.execute_batch(Batch::all(Arc::from(vec![op.clone()])), &blobs).await.expect("batch"),
            "prepare_target" => {
                b.prepare_target(false).await.expect("prepare");
            }
            "read_dir" => {
                b.read_dir(&dir).await.expect("read_dir");
            }
            "load_state" => {
                b.load_state().await.expect("load_state");
            }
            "store_state" => b.store_state(b"{}").await.expect("store_state"),
            "lock" => {
                let guard = b.lock(&Holder::this_process()).await.expect("lock");
                drop(guard);
            }
            "unlock" => b.unlock(LockGuard(Box::new(()))).await.expect("unlock"),
            "scan" => {
                b.scan(1).await.expect("scan");
            }
            "scan_dirs" => {
                b.scan_dirs(std::slice::from_ref(&dir), 1).await.expect("scan_dirs");
            }
            "cost" => {
                b.cost();
            }
            "probe" => b.probe(&dir).await.expect("probe"),
            "read_file" => {
                b.read_file(&dir).await.expect("read_file");
            }
            "load_aux" => {
                b.load_aux("index").await.expect("load_aux");
            }
            "store_aux" => b.store_aux("index", b"x").await.expect("store_aux"),
            "append_aux" => b.append_aux("index-delta", b"x").await.expect("append_aux"),
            "aux_mtime" => {
                b.aux_mtime("index").await.expect("aux_mtime");
            }
            "take_written" => {
                b.take_written();
            }
            "record_written" => b.record_written(true),
            other => panic!("the test does not call {other}: add it"),
        }
    }
}

/// Every method reached the recorder, except `replaced` ones, which the wrapper turns into
/// the calls it names.
fn assert_forwarded(wrapper: &str, seen: &BTreeMap<&'static str, u64>, replaced: &[(&str, &[&str])]) {
    for m in METHODS {
        if let Some((_, instead)) = replaced.iter().find(|(r, _)| *r == m) {
            for i in *instead {
                assert!(seen.contains_key(i), "{wrapper}: {m} should reach the inner backend as {i}; saw {seen:?}");
            }
            continue;
        }
        assert!(seen.contains_key(m), "{wrapper} did not forward {m}; the inner backend saw {seen:?}");
    }
}

/// The calls that reach the storage (all but the three that only describe the backend,
/// `take_written`, which hands over what the backend noted, and `record_written`, which only
/// tells it whether to note).
const STORAGE_CALLS: usize = METHODS.len() - 5;

#[tokio::test]
async fn count_forwards_and_counts_every_call() {
    let inner = Recorder::default();
    let count = Count::new(inner.clone());
    call_every_method(&count).await;
    assert_forwarded("Count", &inner.seen(), &[]);
    let r = count.record();
    let r = r.lock().expect("never poisoned");
    assert_eq!(r.counts.total(), 2, "execute and execute_batch ops: {r:?}");
    assert_eq!(
        (r.state_reads, r.state_writes, r.dir_reads, r.setup_calls, r.unlocks),
        (1, 1, 1, 2, 1),
        "state, listing, setup calls: {r:?}"
    );
    assert_eq!((r.scans, r.probes, r.file_reads, r.aux_reads, r.aux_writes), (2, 1, 1, 2, 2), "{r:?}");
    // One per storage call, with execute_batch's one op.
    assert_eq!(r.total_calls(), STORAGE_CALLS as u64, "{r:?}");
}

#[tokio::test]
async fn latency_forwards_and_delays_every_storage_call() {
    let inner = Recorder::default();
    let slow = Latency::fixed(inner.clone(), std::time::Duration::from_millis(1));
    call_every_method(&slow).await;
    assert_forwarded("Latency", &inner.seen(), &[]);
    // One wait per storage call (execute_batch's single op waits once).
    assert_eq!(slow.waits(), STORAGE_CALLS as u64);
}

#[tokio::test]
async fn fail_forwards_every_method_before_its_fault() {
    let inner = Recorder::default();
    let fail = Fail::after(inner.clone(), 100);
    call_every_method(&fail).await;
    assert_forwarded("Fail", &inner.seen(), &[]);
}

#[tokio::test]
async fn budgets_forward_every_method() {
    let inner = Recorder::default();
    let budgets = Budgets::new(inner.clone(), Gate::fixed(1), Gate::fixed(2));
    call_every_method(&budgets).await;
    let seen = inner.seen();
    // Budgets decides the policy itself, and hands ops over one at a time, each after a probe
    // of its directory.
    assert_forwarded(
        "Budgets",
        &seen,
        &[("policy", &[]), ("execute_batch", &["execute", "probe"]), ("execute", &["execute", "probe"])],
    );
    assert_eq!(seen.get("execute"), Some(&2), "{seen:?}");
    assert_eq!(seen.get("probe"), Some(&3), "two ops' directories and the probe itself: {seen:?}");
}

#[tokio::test]
async fn pointers_forward_every_method() {
    let inner = Recorder::default();
    call_every_method(&Box::new(inner.clone())).await;
    assert_forwarded("Box", &inner.seen(), &[]);
    let inner = Recorder::default();
    call_every_method(&Arc::new(inner.clone())).await;
    assert_forwarded("Arc", &inner.seen(), &[]);
    let inner = Recorder::default();
    let boxed: Box<dyn Backend> = Box::new(inner.clone());
    call_every_method(&boxed).await;
    assert_forwarded("Box<dyn Backend>", &inner.seen(), &[]);
}

#[test]
fn a_stack_prints_as_a_stack() {
    let stack = Budgets::new(
        Count::new(Recorder::default()),
        Gate::fixed(1),
        Gate::adaptive(treesync_core::policy::Adaptive { initial: 4, min: 1, max: 64, backoff_latency: 2.0 }),
    );
    assert_eq!(stack.to_string(), "Budgets(lookups=1, writes=adaptive(1..64), Count(recorder))");
}

/// Without an auxiliary store or a lock, a backend says so instead of dropping writes or
/// handing out a lock that excludes nobody.
#[tokio::test]
async fn missing_abilities_are_errors_not_no_ops() {
    struct Bare;
    impl fmt::Display for Bare {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "bare")
        }
    }
    #[async_trait]
    impl Backend for Bare {
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                symlinks: false,
                exec_bit: false,
                empty_dirs: false,
                case_sensitive: true,
                exclusive_lock: false,
                aux_store: false,
            }
        }
        fn policy(&self) -> Policy {
            Policy::default()
        }
        async fn execute(&self, _op: &Op, _blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
            Ok(())
        }
        async fn prepare_target(&self, _create: bool) -> Result<TargetState, Error> {
            Ok(TargetState::Empty)
        }
        async fn read_dir(&self, _dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
            Ok(Vec::new())
        }
        async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
            Ok(None)
        }
        async fn store_state(&self, _bytes: &[u8]) -> Result<(), Error> {
            Ok(())
        }
        async fn scan(&self, _jobs: usize) -> Result<Vec<Found>, Error> {
            Ok(Vec::new())
        }
        async fn read_file(&self, _path: &RelPath) -> Result<Vec<u8>, Error> {
            Ok(Vec::new())
        }
    }
    let b = Count::new(Bare);
    assert!(matches!(b.store_aux("index", b"x").await, Err(backend::Error::Unsupported { .. })));
    assert!(matches!(b.load_aux("index").await, Err(backend::Error::Unsupported { .. })));
    assert!(matches!(b.lock(&Holder::this_process()).await, Err(backend::Error::Unsupported { .. })));
}

#[test]
fn holder_lines_read_back_as_fields() {
    let h = Holder { pid: 4242, host: "elsewhere".into(), started: 1_796_000_000 };
    assert_eq!(h.to_string(), "pid 4242 on elsewhere, started at unix time 1796000000");
    assert_eq!(Holder::parse(&h.to_string()), Some(h.clone()));
    // A host name with ", " and " on " in it still reads back.
    let odd = Holder { pid: 7, host: "a on b, c".into(), started: 3 };
    assert_eq!(Holder::parse(&odd.to_string()), Some(odd));
    assert_eq!(Holder::parse("treesync status (probe)"), None);
    assert_eq!(Holder::parse("holder unknown"), None);
}
