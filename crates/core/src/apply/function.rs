use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;

use super::{Error, Options, Outcome, Progress};
use crate::backend::{self, Backend, Batch};
use crate::op::{Op, OpCounts, Plan};
use crate::path::{NameKind, RelPath};
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
    let mut healed = 0;
    let mut dirs_recreated = 0;
    // One heal at a time: two ops that meet the same drift (a directory replaced by a
    // symlink, say) must not both replace it, the second removing what the first made.
    let healing = tokio::sync::Mutex::new(());
    let ops_total = plan.len() as u64;
    let bytes_total = plan.counts.bytes;

    // While the first phase runs, the directories the later phases work in are looked up
    // (backends that keep directory handles, behind a lookup budget): on a network filesystem
    // those lookups are round trips, and otherwise they would wait for the phase before.
    let ahead = if policy.spread { dirs_to_look_up_ahead(plan) } else { Vec::new() };
    let phases_done = AtomicBool::new(false);
    let look_ahead = async {
        let phases_done = &phases_done;
        futures::stream::iter(&ahead)
            .for_each_concurrent(policy.lookups.max(1), |dir| async move {
                if phases_done.load(Ordering::SeqCst) || interrupt.load(Ordering::SeqCst) {
                    return;
                }
                // A hint: an op in `dir` looks it up again and reports what goes wrong.
                let _ = backend.probe(dir).await;
            })
            .await
    };
    let phases = async {
        for phase in &plan.phases {
            let ops = if policy.spread { spread(&phase.ops) } else { phase.ops.clone() };
            tracing::debug!(target: "treesync::apply", phase = %phase.name, ops = ops.len(), jobs, batch_size, "phase");
            let n = ops.len();
            // Small phases are spread over all jobs rather than packed into one batch.
            let size = batch_size.min(n.div_ceil(jobs).max(policy.min_batch)).max(1);
            let batches: Vec<Batch> =
                (0..n).step_by(size).map(|i| Batch::new(ops.clone(), i..(i + size).min(n))).collect();
            let failed = AtomicBool::new(false);
            let healing = &healing;
            let mut first_error = None;
            let mut results = futures::stream::iter(batches)
                .map(|batch| {
                    let failed = &failed;
                    async move {
                        if failed.load(Ordering::SeqCst) || interrupt.load(Ordering::SeqCst) {
                            return (batch, None);
                        }
                        let r = match backend.execute_batch(batch.clone(), blobs).await {
                            // The target drifted on a path of this batch: run its ops one by one,
                            // healing those that meet the drift (the ones done already are
                            // idempotent).
                            Err(e) if e.is_drift() => one_by_one(backend, &batch, blobs, healing).await,
                            r => r.map(|()| Healed::default()),
                        };
                        (batch, Some(r))
                    }
                })
                .buffer_unordered(jobs);
            while let Some((batch, result)) = results.next().await {
                match result {
                    None => {}
                    Some(Ok(healed_here)) => {
                        healed += healed_here.ops;
                        dirs_recreated += healed_here.dirs_recreated;
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
        Ok(Outcome { counts: done, healed, dirs_recreated, elapsed: start.elapsed() })
    };
    let phases = async {
        let outcome = phases.await;
        phases_done.store(true, Ordering::SeqCst);
        outcome
    };
    // Once the phases are done (or failed) no lookup ahead starts, and those still out are
    // waited for: none may land in the backend's handles after this run, when the next one
    // may have removed or replaced that directory.
    futures::future::join(phases, look_ahead).await.0
}

/// The directories that ops of the plan's later phases work in and that the plan leaves as
/// they are: neither they nor any directory above them is the path of an op (made, removed,
/// or replaced by a file), so a handle opened before the first phase runs stays the handle
/// of that directory for the whole run.
fn dirs_to_look_up_ahead(plan: &Plan) -> Vec<RelPath> {
    use std::collections::HashSet;
    let Some((_, later)) = plan.phases.split_first() else { return Vec::new() };
    if later.iter().all(|p| p.ops.is_empty()) {
        return Vec::new();
    }
    let touched: HashSet<&[u8]> =
        plan.phases.iter().flat_map(|p| p.ops.iter()).map(|op| op.path().as_bytes()).collect();
    let untouched = |dir: &[u8]| {
        !touched.contains(dir) && !dir.iter().enumerate().any(|(i, b)| *b == b'/' && touched.contains(&dir[..i]))
    };
    let mut seen = HashSet::new();
    let mut dirs = Vec::new();
    for op in later.iter().flat_map(|p| p.ops.iter()) {
        let dir = op.path().parent();
        if !dir.is_root() && untouched(dir.as_bytes()) && seen.insert(dir.as_bytes().to_vec()) {
            dirs.push(dir);
        }
    }
    dirs
}

/// What healing a batch did.
#[derive(Default)]
struct Healed {
    ops: u64,
    dirs_recreated: u64,
}

/// Run the ops of `batch` one at a time, healing each that meets drift.
async fn one_by_one(
    backend: &dyn Backend,
    batch: &Batch,
    blobs: &Arc<dyn BlobSource>,
    healing: &tokio::sync::Mutex<()>,
) -> Result<Healed, backend::Error> {
    let mut healed = Healed::default();
    for op in batch.iter() {
        match backend.execute(op, blobs).await {
            Ok(()) => {}
            Err(e) if e.is_drift() => {
                let _one_at_a_time = healing.lock().await;
                tracing::info!(target: "treesync::apply", path = %op.path(), error = %e, "the target drifted here; healing");
                healed.dirs_recreated += heal(backend, op, blobs).await.map_err(|h| {
                    tracing::warn!(target: "treesync::apply", path = %op.path(), error = %h, "healing failed");
                    e
                })?;
                healed.ops += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(healed)
}

/// `op` met a target that differs from what the plan expects on the path it touches (a
/// directory deleted, or replaced by a symlink or a file; a file replaced by a directory).
/// Correct exactly that and run the op again: every directory on the way is made a real one
/// (whatever is in its place is removed first) and whatever of the wrong type is at the path
/// itself is removed. Each step is an op of the backend, so none follows a symlink; what is
/// looked at is listed with [`Backend::read_dir`], which never follows one either. Returns
/// how many directories on the way had to be made (their other content is gone).
async fn heal(backend: &dyn Backend, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<u64, backend::Error> {
    let path = op.path();
    let mut recreated = 0;
    let mut dir = RelPath::root();
    for name in path.components().collect::<Vec<_>>().split_last().map_or(&[][..], |(_, up)| up) {
        let next = dir.join((*name).into(), NameKind::Other).expect("a component of a valid path");
        match kind_at(backend, &dir, name).await? {
            Some(true) => {}
            Some(false) => {
                backend.execute(&Op::Unlink { path: next.clone() }, blobs).await?;
                backend.execute(&Op::Mkdir { path: next.clone() }, blobs).await?;
                recreated += 1;
            }
            None => {
                backend.execute(&Op::Mkdir { path: next.clone() }, blobs).await?;
                recreated += 1;
            }
        }
        dir = next;
    }
    let here = kind_at(backend, &dir, path.split_last().1).await?;
    let op = match (op, here) {
        // Nothing (or nothing of that kind) left to remove.
        (Op::Unlink { .. } | Op::Rmdir { .. }, None) | (Op::Unlink { .. }, Some(true)) => return Ok(recreated),
        (Op::Rmdir { path }, Some(false)) => Op::Unlink { path: path.clone() },
        (Op::Mkdir { path }, Some(false)) => {
            backend.execute(&Op::Unlink { path: path.clone() }, blobs).await?;
            op.clone()
        }
        (Op::Write { .. } | Op::Symlink { .. } | Op::Chmod { .. }, Some(true)) => {
            remove_tree(backend, path, blobs).await?;
            op.clone()
        }
        _ => op.clone(),
    };
    // A mode change of a file that is no longer there as one: write the file.
    let op = match op {
        Op::Chmod { path, executable, blob, size, conversion } => {
            Op::Write { path, blob, size, executable, conversion, reason: None }
        }
        op => op,
    };
    backend.execute(&op, blobs).await?;
    Ok(recreated)
}

/// Is `name` in `dir` a directory (`Some(true)`), something else, or absent?
async fn kind_at(backend: &dyn Backend, dir: &RelPath, name: &[u8]) -> Result<Option<bool>, backend::Error> {
    Ok(backend.read_dir(dir).await?.into_iter().find(|e| e.name == name).map(|e| e.is_dir))
}

/// Remove the directory `path` and everything below it, deepest first.
async fn remove_tree(backend: &dyn Backend, path: &RelPath, blobs: &Arc<dyn BlobSource>) -> Result<(), backend::Error> {
    let mut dirs = vec![path.clone()];
    let mut i = 0;
    while i < dirs.len() {
        let dir = dirs[i].clone();
        for e in backend.read_dir(&dir).await? {
            let child = dir
                .join(e.name.as_slice().into(), NameKind::Other)
                .map_err(|e| backend::Error::NotEmpty { path: format!("{} (it holds {:?})", dir, e.path) })?;
            if e.is_dir {
                dirs.push(child);
            } else {
                backend.execute(&Op::Unlink { path: child }, blobs).await?;
            }
        }
        i += 1;
    }
    for dir in dirs.iter().rev() {
        backend.execute(&Op::Rmdir { path: dir.clone() }, blobs).await?;
    }
    Ok(())
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

/// Apply the plans `chunks` yields, one after another, as one plan of `total` ops: what
/// [`apply`] does for each, with progress counted against `total` and errors counting what
/// the chunks before did. `applied` is called after each chunk is done. The producer of the
/// chunks plans while a chunk is being applied; when this returns early (an error, an
/// interrupt) the receiver is dropped, which tells it to stop.
#[allow(clippy::too_many_arguments)] // apply()'s inputs plus the chunks and what follows each
pub async fn apply_chunks(
    mut chunks: tokio::sync::mpsc::Receiver<Plan>,
    total: OpCounts,
    backend: &dyn Backend,
    blobs: &Arc<dyn BlobSource>,
    options: Options,
    progress: &(dyn Fn(&Progress<'_>) + Send + Sync),
    interrupt: &AtomicBool,
    applied: &mut (dyn FnMut(&Plan) + Send),
) -> Result<Outcome, Error> {
    let start = Instant::now();
    let mut outcome = Outcome::default();
    while let Some(chunk) = chunks.recv().await {
        if interrupt.load(Ordering::SeqCst) {
            return Err(Error::Interrupted { done: outcome.counts });
        }
        let before = outcome.counts;
        let of_all = |p: &Progress<'_>| {
            progress(&Progress {
                phase: p.phase,
                ops_done: before.total() + p.ops_done,
                ops_total: total.total(),
                bytes_done: before.bytes + p.bytes_done,
                bytes_total: total.bytes,
            })
        };
        match apply(&chunk, backend, blobs, options, &of_all, interrupt).await {
            Ok(done) => {
                outcome.counts.merge(&done.counts);
                outcome.healed += done.healed;
                outcome.dirs_recreated += done.dirs_recreated;
                applied(&chunk);
            }
            Err(Error::Backend { phase, source, mut done }) => {
                done.merge(&before);
                return Err(Error::Backend { phase, source, done });
            }
            Err(Error::Interrupted { mut done }) => {
                done.merge(&before);
                return Err(Error::Interrupted { done });
            }
        }
    }
    outcome.elapsed = start.elapsed();
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gix_hash::ObjectId;

    fn p(s: &str) -> RelPath {
        RelPath::parse(s).expect("path")
    }

    fn write(s: &str) -> Op {
        Op::Write {
            path: p(s),
            blob: ObjectId::null(gix_hash::Kind::Sha1),
            size: 1,
            executable: false,
            conversion: None,
            reason: None,
        }
    }

    #[test]
    fn only_directories_the_plan_leaves_alone_are_looked_up_ahead() {
        let plan = Plan::from_ops(
            None,
            ObjectId::null(gix_hash::Kind::Sha1),
            [
                // Phase one: removals.
                Op::Unlink { path: p("a/old.txt") },
                Op::Unlink { path: p("gone/x") },
                Op::Rmdir { path: p("gone") },
                // `file` becomes a directory: made by the plan, not looked up ahead.
                Op::Unlink { path: p("file") },
                Op::Mkdir { path: p("file") },
                write("file/new.txt"),
                // Recreated below a directory the plan removed.
                Op::Mkdir { path: p("gone") },
                Op::Mkdir { path: p("gone/sub") },
                write("gone/sub/y"),
                // Left alone by the plan: looked up ahead, once each.
                write("a/b/c.txt"),
                write("a/b/d.txt"),
                write("e/f.txt"),
                // In the root: nothing to look up.
                write("top.txt"),
            ],
        );
        assert!(plan.phases.len() >= 2, "{:?}", plan.phases.iter().map(|p| &p.name).collect::<Vec<_>>());
        let mut ahead: Vec<String> = dirs_to_look_up_ahead(&plan).iter().map(|d| d.display().to_string()).collect();
        ahead.sort();
        assert_eq!(ahead, ["a/b", "e"]);
    }

    #[test]
    fn a_plan_of_one_phase_looks_nothing_up_ahead() {
        let plan = Plan::from_ops(None, ObjectId::null(gix_hash::Kind::Sha1), [write("a/b.txt"), write("c/d.txt")]);
        assert_eq!(plan.phases.len(), 1);
        assert!(dirs_to_look_up_ahead(&plan).is_empty());
    }
}
