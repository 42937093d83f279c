use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::{Backend, Batch, DirEntry, Error, Found, Policy, TargetState};
use crate::op::{Op, OpKind};
use crate::path::RelPath;
use crate::source::BlobSource;

/// How the in-flight limit of an adaptive [`Gate`] moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// The limit to start with.
    pub initial: usize,
    /// Never below this.
    pub min: usize,
    /// Never above this.
    pub max: usize,
    /// Back off when the mean latency of a window exceeds the lowest seen by this factor.
    pub backoff_latency: f64,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive { initial: 4, min: 1, max: 64, backoff_latency: 2.0 }
    }
}

/// A budget of operations in flight: a fixed number, or one that adapts to the latency the
/// operations see (additive increase while throughput rises, multiplicative decrease when
/// latency climbs, like TCP congestion control). Cheap to clone; clones share the budget.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    permits: Arc<Semaphore>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    control: Option<Mutex<Control>>,
}

/// The state of an adaptive gate.
struct Control {
    options: Adaptive,
    limit: usize,
    /// Permits to retire as they come back (the limit went down).
    owed: usize,
    /// Lowest mean latency of a window so far.
    base: Option<f64>,
    window_start: Instant,
    window_ops: u32,
    window_latency: f64,
    prev_throughput: f64,
    /// Doubling until the first sign of congestion.
    slow_start: bool,
    /// The class of work the current baseline belongs to.
    class: Option<u8>,
    /// Bad windows in a row.
    strikes: u32,
    /// Limits chosen, for reports and tests.
    history: Vec<usize>,
}

/// Holds a place in a [`Gate`]; frees it (and reports the latency) when dropped.
pub struct Ticket {
    gate: Gate,
    permit: Option<OwnedSemaphorePermit>,
    start: Instant,
}

impl Gate {
    /// At most `n` (at least 1) in flight.
    pub fn fixed(n: usize) -> Gate {
        Gate::build(n.max(1), None)
    }

    /// A limit that moves within `options.min..=options.max`.
    pub fn adaptive(options: Adaptive) -> Gate {
        let min = options.min.max(1);
        let max = options.max.max(min);
        let options = Adaptive { min, max, initial: options.initial.clamp(min, max), ..options };
        Gate::build(options.initial, Some(Mutex::new(Control::new(options))))
    }

    fn build(n: usize, control: Option<Mutex<Control>>) -> Gate {
        Gate {
            inner: Arc::new(GateInner {
                permits: Arc::new(Semaphore::new(n)),
                in_flight: AtomicUsize::new(0),
                max_in_flight: AtomicUsize::new(0),
                control,
            }),
        }
    }

    /// Wait for a place.
    pub async fn acquire(&self) -> Ticket {
        self.acquire_as(0).await
    }

    /// Wait for a place for an operation of `class` (a small number naming a kind of work).
    /// An adaptive gate compares latencies within one class only: when the class changes (a
    /// plan's phase of cheap mkdirs ends and its writes begin), the baseline is measured anew.
    pub async fn acquire_as(&self, class: u8) -> Ticket {
        if let Some(c) = &self.inner.control {
            c.lock().expect("never poisoned").enter(class);
        }
        let permit = self.inner.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let now = self.inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Ticket { gate: self.clone(), permit: Some(permit), start: Instant::now() }
    }

    /// Wait for a place from a blocking thread (code run by [`crate::backend::blocking`]),
    /// e.g. around each request a backend makes itself. Never call it on the runtime's own
    /// threads: it blocks the thread while it waits.
    pub fn acquire_blocking(&self) -> Ticket {
        block_on(self.acquire())
    }

    /// The current limit (the highest it may reach, for [`Gate::ceiling`]).
    pub fn limit(&self) -> usize {
        match &self.inner.control {
            Some(c) => c.lock().expect("never poisoned").limit,
            None => self.inner.permits.available_permits() + self.inner.in_flight.load(Ordering::SeqCst),
        }
    }

    /// The highest limit this gate can reach: what a caller should keep in flight to fill it.
    pub fn ceiling(&self) -> usize {
        match &self.inner.control {
            Some(c) => c.lock().expect("never poisoned").options.max,
            None => self.limit(),
        }
    }

    /// Whether the limit adapts.
    pub fn is_adaptive(&self) -> bool {
        self.inner.control.is_some()
    }

    /// The most operations that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// The limits an adaptive gate went through, in order (a fixed gate: empty).
    pub fn history(&self) -> Vec<usize> {
        self.inner.control.as_ref().map(|c| c.lock().expect("never poisoned").history.clone()).unwrap_or_default()
    }

    fn release(&self, permit: OwnedSemaphorePermit, latency: Duration) {
        self.inner.in_flight.fetch_sub(1, Ordering::SeqCst);
        let Some(control) = &self.inner.control else {
            drop(permit);
            return;
        };
        let mut c = control.lock().expect("never poisoned");
        if c.owed > 0 {
            c.owed -= 1;
            permit.forget();
        } else {
            drop(permit);
        }
        let grow = c.observe(latency.as_secs_f64());
        if grow > 0 {
            self.inner.permits.add_permits(grow);
        }
    }
}

/// Run `f` to completion on this thread, parking it while `f` waits (a semaphore's wake-up
/// unparks it). For [`Gate::acquire_blocking`]: no runtime needed, nothing else to poll.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

impl Control {
    fn new(options: Adaptive) -> Control {
        Control {
            options,
            limit: options.initial,
            owed: 0,
            base: None,
            window_start: Instant::now(),
            window_ops: 0,
            window_latency: 0.0,
            prev_throughput: 0.0,
            slow_start: true,
            class: None,
            strikes: 0,
            history: vec![options.initial],
        }
    }

    fn new_window(&mut self) {
        self.window_start = Instant::now();
        self.window_ops = 0;
        self.window_latency = 0.0;
    }

    /// Work of `class` arrives: a different class has different latencies, so start the
    /// baseline and the window over (the limit stays).
    fn enter(&mut self, class: u8) {
        if self.class != Some(class) {
            self.class = Some(class);
            self.base = None;
            self.prev_throughput = 0.0;
            self.new_window();
        }
    }

    /// Take one latency sample; at the end of a window, move the limit. Returns how many
    /// permits to add (a decrease is settled through `owed`).
    fn observe(&mut self, latency: f64) -> usize {
        self.window_ops += 1;
        self.window_latency += latency;
        // A window is one round of the current limit (at least 8 ops): enough samples to
        // compare, short enough to follow changes.
        if (self.window_ops as usize) < (2 * self.limit).max(16) {
            return 0;
        }
        let elapsed = self.window_start.elapsed().as_secs_f64().max(1e-9);
        let mean = self.window_latency / f64::from(self.window_ops);
        let throughput = f64::from(self.window_ops) / elapsed;
        // The baseline is the lowest window mean so far, except at the floor: with the fewest
        // ops in flight our own concurrency cannot be what makes them slow, so what we see
        // there is the baseline (a stale, too-low one must not pin the limit to the floor).
        let base = if self.limit <= self.options.min { mean } else { self.base.unwrap_or(mean).min(mean) };
        self.base = Some(base);
        let old = self.limit;
        let gaining = throughput > self.prev_throughput * 1.05;
        // Latency that climbs without buying throughput means the storage queues instead of
        // serving; throughput that falls means more in flight hurts. Either way: back off.
        // (Latency alone is no signal: on a NAS, more in flight often costs latency and still
        // pays in throughput, e.g. when the client serializes parts of each op per directory.)
        let bad = (mean > base * self.options.backoff_latency && !gaining)
            || (!self.slow_start && throughput < self.prev_throughput * 0.85);
        // One bad window may be noise; two in a row are a trend.
        self.strikes = if bad { self.strikes + 1 } else { 0 };
        let congested = self.strikes >= 2 || (bad && self.slow_start);
        let mut new = old;
        if congested {
            self.strikes = 0;
            self.slow_start = false;
            new = ((old as f64) * 0.75).floor() as usize;
        } else if gaining {
            new = if self.slow_start { old * 2 } else { old + old.div_ceil(8) };
        } else if self.slow_start {
            // More in flight no longer helps: stop doubling, probe gently from here.
            self.slow_start = false;
        } else if !bad {
            new = old + 1;
        }
        new = new.clamp(self.options.min, self.options.max);
        self.prev_throughput = throughput;
        self.new_window();
        if new != old {
            tracing::debug!(
                target: "treesync::budget",
                from = old,
                to = new,
                mean_latency_ms = mean * 1000.0,
                throughput = throughput as u64,
                "adaptive limit"
            );
            self.limit = new;
            self.history.push(new);
        }
        if new > old {
            // Settle a pending decrease first.
            let mut grow = new - old;
            let settle = grow.min(self.owed);
            self.owed -= settle;
            grow -= settle;
            grow
        } else {
            self.owed += old - new;
            0
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.gate.release(permit, self.start.elapsed());
        }
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner.control {
            Some(c) => {
                let o = c.lock().expect("never poisoned").options;
                write!(f, "adaptive({}..{})", o.min, o.max)
            }
            None => write!(f, "{}", self.limit()),
        }
    }
}

/// Separate budgets for metadata lookups and for writes, around any backend.
///
/// On a network filesystem a sync's directory probes queue on the locks its writes take, while
/// writes overlap well and a read-only scan's `lstat`s overlap best, so each gets its limit:
/// * lookups: [`Backend::probe`] of each op's directory, listings, state and file reads;
/// * scans: the parallelism of [`Backend::scan`] and [`Backend::scan_dirs`] (read-only: verify's
///   listing takes no directory lock a write waits for, so it may run wider; by default as
///   wide as the lookups, see [`Budgets::with_scans`]);
/// * writes: every op of a plan (create, write, rename, remove, chmod) and state writes.
///
/// Ops are handed to the inner backend one at a time (batch 1), each after its directory was
/// probed under the lookup budget; the executor is told to keep as many in flight as the write
/// budget can take.
pub struct Budgets<B> {
    inner: B,
    lookups: Gate,
    writes: Gate,
    scans: usize,
    /// The inner backend takes a lookup ticket per lookup it really makes
    /// ([`Budgets::probes_gated_inside`]).
    probes_inside: bool,
}

impl<B: Backend> Budgets<B> {
    /// Wrap `inner`.
    pub fn new(inner: B, lookups: Gate, writes: Gate) -> Self {
        let scans = lookups.ceiling();
        Budgets { inner, lookups, writes, scans, probes_inside: false }
    }

    /// Let a read-only scan keep `scans` lookups in flight (at least 1) instead of as many as
    /// the lookup budget has.
    pub fn with_scans(mut self, scans: usize) -> Self {
        self.scans = scans.max(1);
        self
    }

    /// Lookups a read-only scan keeps in flight.
    pub fn scans(&self) -> usize {
        self.scans
    }

    /// The inner backend gates its own directory lookups with (a clone of) the lookup budget,
    /// one ticket per request it really sends: [`Backend::probe`] is then passed through
    /// without a ticket. A probe of a directory already open costs no request, so it must not
    /// take a place, nor give an adaptive budget a latency sample (microseconds among the
    /// milliseconds of real lookups would read as the baseline, and every real lookup as
    /// congestion).
    pub fn probes_gated_inside(mut self) -> Self {
        self.probes_inside = true;
        self
    }

    /// The lookup budget.
    pub fn lookups(&self) -> &Gate {
        &self.lookups
    }

    /// The write budget.
    pub fn writes(&self) -> &Gate {
        &self.writes
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    async fn probe_parent(&self, op: &Op) -> Result<(), Error> {
        let parent = op.path().parent();
        if parent.is_root() {
            return Ok(());
        }
        self.probe(&parent).await
    }
}

impl<B: Backend> fmt::Display for Budgets<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Budgets(lookups={:?}, writes={:?}, ", self.lookups, self.writes)?;
        // Shown only where it is not the lookup budget's.
        if self.scans != self.lookups.ceiling() {
            write!(f, "scans={}, ", self.scans)?;
        }
        write!(f, "{})", self.inner)
    }
}

#[async_trait]
impl<B: Backend> Backend for Budgets<B> {
    crate::delegate_backend!(
        inner,
        except policy,
        execute,
        execute_batch,
        probe,
        prepare_target,
        read_dir,
        load_state,
        store_state,
        scan,
        scan_dirs,
        read_file,
        load_aux,
        store_aux,
        append_aux,
        aux_mtime
    );

    fn policy(&self) -> Policy {
        Policy {
            jobs: self.writes.ceiling(),
            batch: 1,
            min_batch: 1,
            lookups: self.lookups.ceiling(),
            scans: self.scans,
            spread: true,
        }
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.probe_parent(op).await?;
        let class = match op.kind() {
            OpKind::Write | OpKind::Chmod => 0,
            OpKind::Symlink => 1,
            OpKind::Mkdir => 2,
            OpKind::Unlink => 3,
            OpKind::Rmdir => 4,
        };
        let _t = self.writes.acquire_as(class).await;
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        for op in batch.iter() {
            self.execute(op, blobs).await?;
        }
        Ok(())
    }

    async fn probe(&self, dir: &RelPath) -> Result<(), Error> {
        if self.probes_inside {
            return self.inner.probe(dir).await;
        }
        let _t = self.lookups.acquire().await;
        self.inner.probe(dir).await
    }

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        let _t = self.lookups.acquire().await;
        self.inner.prepare_target(create).await
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let _t = self.lookups.acquire().await;
        self.inner.read_dir(dir).await
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        let _t = self.lookups.acquire().await;
        self.inner.load_state().await
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        let _t = self.writes.acquire_as(5).await;
        self.inner.store_state(bytes).await
    }

    async fn scan(&self, jobs: usize) -> Result<Vec<Found>, Error> {
        // The scan runs its own threads (or calls): as many as the scan budget has.
        self.inner.scan(jobs.min(self.scans).max(1)).await
    }

    async fn scan_dirs(&self, dirs: &[RelPath], jobs: usize) -> Result<Vec<Found>, Error> {
        // As a scan: its own threads, as many as the scan budget has.
        self.inner.scan_dirs(dirs, jobs.min(self.scans).max(1)).await
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        let _t = self.lookups.acquire().await;
        self.inner.read_file(path).await
    }

    async fn load_aux(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        let _t = self.lookups.acquire().await;
        self.inner.load_aux(name).await
    }

    async fn store_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let _t = self.writes.acquire_as(5).await;
        self.inner.store_aux(name, bytes).await
    }

    async fn append_aux(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let _t = self.writes.acquire_as(5).await;
        self.inner.append_aux(name, bytes).await
    }

    async fn aux_mtime(&self, name: &str) -> Result<Option<(i64, u32)>, Error> {
        let _t = self.lookups.acquire().await;
        self.inner.aux_mtime(name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fixed_gate_never_exceeds_its_limit() {
        let gate = Gate::fixed(3);
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let g = gate.clone();
            tasks.push(tokio::spawn(async move {
                let _t = g.acquire().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(gate.max_in_flight(), 3);
        assert_eq!(gate.limit(), 3);
    }

    fn control(initial: usize) -> Control {
        Control::new(Adaptive { initial, min: 1, max: 64, backoff_latency: 2.0 })
    }

    /// Drive the controller with modelled windows of one class: a server that serves
    /// `capacity` ops at once in `service` seconds each and queues the rest (latency =
    /// service × max(1, n/capacity)). Elapsed time is modelled by back-dating the window start.
    fn drive(c: &mut Control, class: u8, service: f64, capacity: f64, windows: usize) {
        c.enter(class);
        for _ in 0..windows {
            let n = c.limit as f64;
            let latency = service * (n / capacity).max(1.0);
            let ops = (2 * c.limit).max(16);
            c.window_start = Instant::now() - Duration::from_secs_f64(ops as f64 * latency / n);
            for _ in 0..ops {
                c.observe(latency);
            }
        }
    }

    /// The adaptive gate must grow past its start and then settle near the capacity instead of
    /// running away.
    #[test]
    fn adaptive_control_finds_the_capacity_of_a_queueing_server() {
        let mut c = control(1);
        drive(&mut c, 0, 0.001, 16.0, 200);
        let tail = &c.history[c.history.len().saturating_sub(10)..];
        assert!(c.history.iter().any(|&l| l >= 16), "grew to the capacity: {:?}", c.history);
        assert!(tail.iter().all(|&l| (8..=40).contains(&l)), "settles around 16..32: {:?}", c.history);
    }

    /// A phase of cheap ops (mkdirs, 2 ms) followed by expensive ones (writes, 8 ms) must not
    /// read as congestion: the baseline is per class. (Without it the limit fell to 1 and
    /// stayed there: a 2,000-file checkout took 10.7 s instead of 1.1 s.)
    #[test]
    fn a_slower_class_of_ops_is_not_mistaken_for_congestion() {
        let mut c = control(8);
        drive(&mut c, 2, 0.002, 20.0, 30);
        drive(&mut c, 0, 0.008, 20.0, 100);
        let tail = &c.history[c.history.len().saturating_sub(10)..];
        assert!(tail.iter().all(|&l| l >= 10), "stays near the capacity of 20: {:?}", c.history);
    }

    /// A baseline from one lucky window creeps up, so the limit recovers.
    #[test]
    fn a_stale_baseline_does_not_pin_the_limit_to_one() {
        let mut c = control(8);
        c.enter(0);
        c.base = Some(0.0005); // far below anything this server can do
        drive(&mut c, 0, 0.008, 20.0, 300);
        assert!(c.limit >= 10, "recovered: {:?}", c.history);
    }
}
