//! An initial checkout is applied while it is planned, in chunks (`sync::Options::stream_chunk`),
//! and keeps the guarantees of a whole plan: whatever would refuse the plan refuses before any
//! write, a sync stopped anywhere is finished by the next run, and the target equals
//! `git archive`. Real git repositories (`git fast-import`), memory targets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use treesync_core::backend::{Batch, Error as BackendError};
use treesync_core::policy::Fail;
use treesync_core::source::BlobSource;
use treesync_core::{Backend, MemoryBackend, Op, OpKind, sync};
use treesync_testkit::conformance::{History, reduce};
use treesync_testkit::history::{Entry, Model, wide_tree};
use treesync_testkit::tree::{Node, read_memory};

/// Ops per chunk in these tests: a tree of 1,000 files takes ten chunks and more.
const CHUNK: usize = 100;

fn file(content: &str) -> Entry {
    Entry::File { content: content.as_bytes().to_vec(), executable: false }
}

/// 1,000 files in 10 directories two levels down, a symlink, and files converted by
/// `.gitattributes` (`eol=crlf`) at the end of the walk.
fn tree() -> Model {
    let mut m = wide_tree(1000, 7);
    m.insert(".gitattributes", file("*.crlf text eol=crlf\n"));
    m.insert("zz/last.crlf", file("one\ntwo\n"));
    m.insert("zz/link", Entry::Link { target: "last.crlf".into() });
    m
}

fn options(chunk: usize) -> sync::Options {
    sync::Options { backend_name: "memory".into(), stream_chunk: Some(chunk), ..Default::default() }
}

/// What the target holds, without treesync's own folder.
fn held(backend: &MemoryBackend) -> BTreeMap<String, Node> {
    let mut held = read_memory(&backend.snapshot());
    held.retain(|k, _| !k.starts_with(".treesync"));
    held
}

fn assert_is_archive(h: &History, backend: &MemoryBackend, what: &str) {
    let expected = reduce(&h.expected(0), backend.capabilities());
    if let Some(d) = treesync_testkit::tree::diff(&expected, &held(backend)) {
        panic!("{what}: the target is not git archive:\n{d}");
    }
}

/// Records the kind of every op in the order the backend runs them (none may run, for a
/// refused sync).
struct Recording<B> {
    inner: B,
    kinds: Mutex<Vec<OpKind>>,
}

impl<B> Recording<B> {
    fn new(inner: B) -> Self {
        Recording { inner, kinds: Mutex::new(Vec::new()) }
    }

    /// The kinds recorded so far, taken.
    fn take(&self) -> Vec<OpKind> {
        std::mem::take(&mut *self.kinds.lock().expect("never poisoned"))
    }
}

impl<B: Backend> std::fmt::Display for Recording<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recording({})", self.inner)
    }
}

#[async_trait::async_trait]
impl<B: Backend> Backend for Recording<B> {
    treesync_core::delegate_backend!(inner, except execute, execute_batch);

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), BackendError> {
        self.kinds.lock().expect("never poisoned").push(op.kind());
        self.inner.execute(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), BackendError> {
        self.kinds.lock().expect("never poisoned").extend(batch.iter().map(Op::kind));
        self.inner.execute_batch(batch, blobs).await
    }
}

#[tokio::test]
async fn an_initial_checkout_writes_files_before_the_last_directory_is_planned() {
    let h = History::from_trees(&[tree()]);
    let backend = Recording::new(MemoryBackend::new());
    let seen = Mutex::new(Vec::new());
    let progress = |p: &treesync_core::apply::Progress<'_>| {
        seen.lock().expect("never poisoned").push((p.ops_done, p.ops_total));
    };
    let out = sync::sync(&h.repo, &h.commits[0], &backend, &options(CHUNK), &progress, &AtomicBool::new(false))
        .await
        .expect("sync");
    let kinds = backend.take();
    // A whole plan makes every directory before it writes any file; a streamed one makes the
    // directories of each chunk before that chunk's files.
    let first_write = kinds.iter().position(|k| *k == OpKind::Write).expect("files written");
    let last_mkdir = kinds.iter().rposition(|k| *k == OpKind::Mkdir).expect("directories made");
    assert!(first_write < last_mkdir, "all {last_mkdir} directories were made before the first file");
    let writes_before_last_mkdir = kinds[..last_mkdir].iter().filter(|k| **k == OpKind::Write).count();
    assert!(writes_before_last_mkdir >= 900, "only {writes_before_last_mkdir} files before the last directory");
    // Counted before the first write, reported against the whole, done once each.
    assert_eq!(out.planned, out.applied);
    assert_eq!(kinds.len() as u64, out.applied.total());
    assert_eq!((out.applied.write, out.applied.symlink, out.applied.mkdir), (1002, 1, 12));
    let seen = seen.into_inner().expect("never poisoned");
    assert!(seen.len() > 10, "progress once per batch at least: {}", seen.len());
    assert!(seen.iter().all(|(_, total)| *total == out.planned.total()), "the total is the whole checkout's");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "progress only goes forward");
    assert_eq!(seen.last().expect("some").0, out.planned.total());
    assert_is_archive(&h, &backend.inner, "after a streamed checkout");
    // Planning again finds nothing to do.
    let again = sync::prepare(&h.repo, &h.commits[0], &backend, &Default::default()).await.expect("plan");
    assert!(again.main.is_empty(), "{}", again.main.counts);
}

#[tokio::test]
async fn a_streamed_checkout_stopped_at_any_op_is_finished_by_the_next_sync() {
    let h = History::from_trees(&[tree()]);
    let total = {
        let backend = MemoryBackend::new();
        let dry = sync::Options { dry_run: true, ..options(CHUNK) };
        let out = sync::sync(&h.repo, &h.commits[0], &backend, &dry, &|_| {}, &AtomicBool::new(false)).await;
        out.expect("dry run").planned.total()
    };
    assert_eq!(total, 1015);
    // In the first chunk, at its edges, in the middle, just before the end.
    for after in [0, 1, 99, 100, 101, 250, 555, 1000, total - 1] {
        let backend = Arc::new(MemoryBackend::new());
        let failing = Fail::after(backend.clone(), after);
        let err = sync::sync(&h.repo, &h.commits[0], &failing, &options(CHUNK), &|_| {}, &AtomicBool::new(false))
            .await
            .expect_err("the fault stops the sync");
        match &err {
            // Counted by whole batches: the ops of the failing batch are not.
            sync::Error::Apply { done, .. } => assert!(done.total() <= after, "{after}: {done}"),
            other => panic!("after {after}: unexpected error {other}"),
        }
        let status = sync::status(&*backend).await.expect("status");
        let p = status.state.and_then(|s| s.in_progress).expect("the journal records the unfinished sync");
        assert_eq!(p.to_commit.to_string(), h.commits[0]);
        assert_eq!(p.from_tree, None);
        let out = sync::sync(&h.repo, &h.commits[0], &*backend, &options(CHUNK), &|_| {}, &AtomicBool::new(false))
            .await
            .expect("the rerun finishes");
        assert!(out.resumed.is_some(), "after {after}: the rerun finished the interrupted sync");
        assert_eq!(out.applied.total(), total, "the rerun replays the whole checkout (every op idempotent)");
        assert_is_archive(&h, &backend, &format!("stopped after {after} ops, then rerun"));
        let status = sync::status(&*backend).await.expect("status");
        assert!(status.state.expect("state").in_progress.is_none());
    }
}

#[tokio::test]
async fn an_interrupted_streamed_checkout_stops_early_and_is_finished_by_the_next_sync() {
    let h = History::from_trees(&[tree()]);
    for stop_at in [1, 150, 700] {
        let backend = MemoryBackend::new();
        let interrupt = AtomicBool::new(false);
        let progress = |p: &treesync_core::apply::Progress<'_>| {
            if p.ops_done >= stop_at {
                interrupt.store(true, Ordering::SeqCst);
            }
        };
        let err = sync::sync(&h.repo, &h.commits[0], &backend, &options(CHUNK), &progress, &interrupt)
            .await
            .expect_err("interrupted");
        let sync::Error::Interrupted { done } = err else { panic!("unexpected error {err}") };
        // Stops within the chunk it is in: the batches in flight finish, no other chunk starts.
        assert!(done.total() >= stop_at && done.total() < stop_at + CHUNK as u64, "{stop_at}: {done}");
        assert!(held(&backend).len() < 1000, "{stop_at}: the checkout went on: {}", held(&backend).len());
        sync::sync(&h.repo, &h.commits[0], &backend, &options(CHUNK), &|_| {}, &AtomicBool::new(false))
            .await
            .expect("the rerun finishes");
        assert_is_archive(&h, &backend, &format!("interrupted at {stop_at}, then rerun"));
    }
}

#[tokio::test]
async fn a_tree_refused_at_its_last_entry_writes_nothing() {
    let h = History::from_trees(&[tree()]);
    let repo = &h.bare.path;
    let git = |args: &[&str]| treesync_testkit::git(repo, args);
    // The tree with one more directory at the end of the walk, holding an entry named `..`.
    let blob = treesync_testkit::git_stdin(repo, &["hash-object", "-w", "--stdin"], b"x\n");
    let hostile = treesync_testkit::raw_tree(repo, &[("100644", b"..", &blob)]);
    let mut entries: Vec<(String, Vec<u8>, String)> = git(&["ls-tree", &h.commits[0]])
        .lines()
        .map(|l| {
            let (meta, name) = l.split_once('\t').expect("mode type id\tname");
            let mut m = meta.split(' ');
            let mode = m.next().expect("mode").to_string();
            let id = m.nth(1).expect("id").to_string();
            (mode, name.as_bytes().to_vec(), id)
        })
        .collect();
    entries.push(("40000".into(), b"zzzz".to_vec(), hostile));
    let raw: Vec<(&str, &[u8], &str)> =
        entries.iter().map(|(m, n, i)| (m.as_str(), n.as_slice(), i.as_str())).collect();
    let tree = treesync_testkit::raw_tree(repo, &raw);
    let commit = git(&["-c", "user.name=T", "-c", "user.email=t@t", "commit-tree", &tree, "-m", "hostile at the end"]);
    let limits = |max_entries| sync::Options {
        limits: treesync_core::plan::Limits { max_entries, ..Default::default() },
        ..options(CHUNK)
    };
    for (rev, opts, what) in [
        (commit.as_str(), options(CHUNK), "a name `..` in the last directory"),
        // 1,015 ops: one too many.
        (h.commits[0].as_str(), limits(1014), "one op over --max-entries"),
    ] {
        let backend = Recording::new(MemoryBackend::new());
        let err =
            sync::sync(&h.repo, rev, &backend, &opts, &|_| {}, &AtomicBool::new(false)).await.expect_err("refused");
        assert!(matches!(err, sync::Error::Plan(_)), "{what}: unexpected error {err}");
        assert!(err.to_string().contains("nothing was written"), "{what}: {err}");
        assert_eq!(backend.take(), Vec::<OpKind>::new(), "{what}: ops ran");
        assert!(backend.inner.snapshot().is_empty(), "{what}: the target was touched");
    }
}
