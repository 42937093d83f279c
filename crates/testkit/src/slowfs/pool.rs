//! The worker pool and the service limit: requests run on worker threads, at most
//! `max_concurrent` at once, each sleeping its latency while it holds a slot.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;

use super::passthrough::Inner;
use super::stats::Op;

/// Limits how many requests are served at once.
pub(super) struct Service {
    pub(super) limit: Option<usize>,
    pub(super) busy: Mutex<usize>,
    pub(super) freed: Condvar,
}

/// One request from receipt to reply: counts it in flight until dropped.
pub(super) struct Ticket {
    pub(super) inner: Arc<Inner>,
    pub(super) op: Op,
}

impl Ticket {
    pub(super) fn new(inner: Arc<Inner>, op: Op) -> Ticket {
        let c = &inner.counters;
        let i = op as usize;
        c.count[i].fetch_add(1, Ordering::SeqCst);
        let now = c.in_flight[i].fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight[i].fetch_max(now, Ordering::SeqCst);
        let all = c.all_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.all_max_in_flight.fetch_max(all, Ordering::SeqCst);
        Ticket { inner, op }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let c = &self.inner.counters;
        c.in_flight[self.op as usize].fetch_sub(1, Ordering::SeqCst);
        c.all_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Holds a service slot; released on drop (also on panic).
pub(super) struct Slot<'a>(&'a Inner);

impl<'a> Slot<'a> {
    pub(super) fn take(inner: &'a Inner) -> Slot<'a> {
        let s = &inner.service;
        let mut busy = lock(&s.busy);
        if let Some(limit) = s.limit {
            while *busy >= limit {
                busy = s.freed.wait(busy).unwrap_or_else(|e| e.into_inner());
            }
        }
        *busy += 1;
        drop(busy);
        let c = &inner.counters;
        let now = c.in_service.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_service.fetch_max(now, Ordering::SeqCst);
        Slot(inner)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.counters.in_service.fetch_sub(1, Ordering::SeqCst);
        let s = &self.0.service;
        *lock(&s.busy) -= 1;
        s.freed.notify_one();
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request with its reply, run on a worker.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Start `threads` workers that run the jobs sent on the returned channel; they end when it is
/// dropped (with the FUSE session's daemon).
pub(super) fn start(threads: usize) -> std::io::Result<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    for i in 0..threads {
        let queue = queue.clone();
        thread::Builder::new().name(format!("slowfs-{i}")).stack_size(512 * 1024).spawn(move || worker(&queue))?;
    }
    Ok(jobs)
}

fn worker(queue: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = lock(queue).recv();
        match job {
            // A panic drops the reply, which answers EIO; the worker lives on.
            Ok(job) => drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))),
            Err(_) => return,
        }
    }
}

impl Inner {
    /// Sleep the latency while holding a service slot, then do the work.
    pub(super) fn serve<T>(&self, op: Op, work: impl FnOnce(&Inner) -> T) -> T {
        let _slot = Slot::take(self);
        let latency = if op.is_data() { self.data_latency } else { self.meta_latency };
        if !latency.is_zero() {
            thread::sleep(latency);
        }
        work(self)
    }
}
