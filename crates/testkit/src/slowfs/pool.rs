//! The worker pool and the service limit: requests run on worker threads, at most
//! `max_concurrent` at once, each sleeping its latency while it holds a slot.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;

/// Limits how many requests are served at once.
pub(super) struct Service {
    pub(super) limit: Option<usize>,
    pub(super) busy: Mutex<usize>,
    pub(super) freed: Condvar,
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
