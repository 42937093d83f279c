use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;

use super::{Error, Options, Outcome, Progress};
use crate::backend::{Backend, Batch};
use crate::op::{Op, OpCounts, Plan};
use crate::source::BlobSource;

/// Apply `plan` to `backend`, reading file content from `blobs`.
///
/// Phases run in order; within a phase, batches of ops run concurrently. On the first error no
/// new batch starts, the batches in flight finish, and the error is returned. When `interrupt`
/// becomes `true`, the same happens and [`Error::Interrupted`] is returned.
pub async fn apply(
    plan: &Plan,
    backend: &dyn Backend,
    blobs: &Arc<dyn BlobSource>,
    options: Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<Outcome, Error> {
    let start = Instant::now();
    let policy = backend.policy();
    let jobs = options.jobs.unwrap_or(policy.jobs).max(1);
    let batch_size = options.batch.unwrap_or(policy.batch).max(1);
    let mut done = OpCounts::default();
    let ops_total = plan.len() as u64;
    let bytes_total = plan.counts.bytes;

    for phase in &plan.phases {
        let ops = if policy.spread { spread(&phase.ops) } else { phase.ops.clone() };
        tracing::debug!(target: "treesync::apply", phase = %phase.name, ops = ops.len(), jobs, batch_size, "phase");
        let n = ops.len();
        // Small phases are spread over all jobs rather than packed into one batch.
        let size = batch_size.min(n.div_ceil(jobs).max(policy.min_batch)).max(1);
        let batches: Vec<Batch> = (0..n).step_by(size).map(|i| Batch::new(ops.clone(), i..(i + size).min(n))).collect();
        let failed = AtomicBool::new(false);
        let mut first_error = None;
        let mut results = futures::stream::iter(batches)
            .map(|batch| {
                let failed = &failed;
                async move {
                    if failed.load(Ordering::SeqCst) || interrupt.load(Ordering::SeqCst) {
                        return (batch, None);
                    }
                    let r = backend.execute_batch(batch.clone(), blobs).await;
                    (batch, Some(r))
                }
            })
            .buffer_unordered(jobs);
        while let Some((batch, result)) = results.next().await {
            match result {
                None => {}
                Some(Ok(())) => {
                    for op in batch.iter() {
                        done.add(op);
                    }
                    progress(&Progress {
                        phase: &phase.name,
                        ops_done: done.total(),
                        ops_total,
                        bytes_done: done.bytes,
                        bytes_total,
                    });
                }
                Some(Err(e)) => {
                    failed.store(true, Ordering::SeqCst);
                    if first_error.is_none() {
                        first_error = Some(e);
                    }
                }
            }
        }
        if let Some(source) = first_error {
            return Err(Error::Backend { phase: phase.name.clone(), source, done });
        }
        if interrupt.load(Ordering::SeqCst) {
            return Err(Error::Interrupted { done });
        }
    }
    Ok(Outcome { counts: done, elapsed: start.elapsed() })
}

/// `ops` (in path order) interleaved over their parent directories: one op of each directory
/// in turn, so the ops in flight together are in different directories.
fn spread(ops: &Arc<[Op]>) -> Arc<[Op]> {
    let mut by_dir: std::collections::BTreeMap<&[u8], std::collections::VecDeque<&Op>> = Default::default();
    for op in ops.iter() {
        by_dir.entry(op.path().split_last().0).or_default().push_back(op);
    }
    if by_dir.len() < 2 {
        return ops.clone();
    }
    let mut queues: Vec<_> = by_dir.into_values().collect();
    let mut out = Vec::with_capacity(ops.len());
    while !queues.is_empty() {
        queues.retain_mut(|q| {
            if let Some(op) = q.pop_front() {
                out.push(op.clone());
            }
            !q.is_empty()
        });
    }
    out.into()
}
