//! `watch::watch` on a MemoryBackend with a real git repository: the events it emits, in order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treesync_core::{MemoryBackend, Repo, sync};
use treesync_watch::watch::{self, Event};

mod common;
use common::{commit, git};

/// The events seen so far, by name, shared with the watch's handler.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Event>>>);

impl Seen {
    fn names(&self) -> Vec<&'static str> {
        self.0.lock().expect("not poisoned").iter().map(Event::name).collect()
    }
    fn wait_for(&self, what: &str, f: impl Fn(&[Event]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f(&self.0.lock().expect("not poisoned")) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {:?}", self.names());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Run a watch on a thread of its own; returns the handle (joined after the interrupt).
fn start(
    repo: Repo,
    rev: &str,
    backend: MemoryBackend,
    options: watch::Options,
    seen: &Seen,
    interrupt: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<watch::Outcome> {
    let (rev, seen, interrupt) = (rev.to_string(), seen.clone(), interrupt.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut handler = |e: &Event| seen.0.lock().expect("not poisoned").push(e.clone());
        rt.block_on(watch::watch(&repo, &rev, &backend, &options, &mut handler, &interrupt))
    })
}

fn options() -> watch::Options {
    watch::Options {
        interval: Duration::from_millis(50),
        sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
        ..Default::default()
    }
}

#[test]
fn a_push_is_synced_and_an_interrupt_stops_the_watch() {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    let first = commit(dir.path(), "a.txt", "one\n");
    let memory = MemoryBackend::new();
    let (seen, interrupt) = (Seen::default(), Arc::new(AtomicBool::new(false)));
    let handle = start(Repo::open(dir.path()).expect("repo"), "main", memory.clone(), options(), &seen, &interrupt);

    seen.wait_for("the first sync", |e| e.iter().any(|e| matches!(e, Event::Synced { .. })));
    let second = commit(dir.path(), "b.txt", "two\n");
    seen.wait_for("the pushed commit", |e| e.iter().filter(|e| matches!(e, Event::Synced { .. })).count() == 2);
    // Nothing changes: no more events, however many looks at the ref.
    std::thread::sleep(Duration::from_millis(300));
    interrupt.store(true, Ordering::SeqCst);
    let outcome = handle.join().expect("watch thread");

    assert_eq!(seen.names(), ["watching", "synced", "synced", "stopped"]);
    let events = seen.0.lock().expect("not poisoned");
    let Event::Watching { rev, target, interval, .. } = &events[0] else { panic!("watching first") };
    assert_eq!((rev.as_str(), target.as_str(), *interval), ("main", "memory", Duration::from_millis(50)));
    let commits: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Synced { outcome } => Some(outcome.commit.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(commits, [first, second]);
    let Event::Synced { outcome: o } = &events[2] else { panic!("second sync") };
    assert_eq!((o.applied.write, o.from.is_some()), (1, true), "only the difference is written");
    assert!(memory.snapshot().contains_key(&b"b.txt"[..]));
    assert_eq!(outcome, watch::Outcome { synced: 2, verified: 0, repaired: 0, errors: 0 });

    // The JSON form is tagged by `event`, with the documented field names.
    let v = serde_json::to_value(&events[0]).expect("serializes");
    assert_eq!(v["event"], "watching");
    assert_eq!(v["interval_secs"], 0.05);
    assert_eq!(serde_json::to_value(&events[3]).expect("serializes"), serde_json::json!({"event": "stopped"}));
}

#[test]
fn a_bad_ref_is_an_error_retried_with_growing_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    commit(dir.path(), "a.txt", "one\n");
    let (seen, interrupt) = (Seen::default(), Arc::new(AtomicBool::new(false)));
    let options = watch::Options { max_backoff: Duration::from_millis(200), ..options() };
    let handle = start(
        Repo::open(dir.path()).expect("repo"),
        "no-such-branch",
        MemoryBackend::new(),
        options,
        &seen,
        &interrupt,
    );
    seen.wait_for("four failed tries", |e| e.iter().filter(|e| matches!(e, Event::Error { .. })).count() >= 4);
    interrupt.store(true, Ordering::SeqCst);
    let outcome = handle.join().expect("watch thread");

    let events = seen.0.lock().expect("not poisoned");
    let waits: Vec<Duration> = events
        .iter()
        .filter_map(|e| match e {
            Event::Error { retry_in, message, error, .. } => {
                assert!(message.contains("no branch, tag or other ref of that name"), "{message}");
                assert!(!message.contains('\n'), "one line: {message}");
                assert!(matches!(**error, watch::Error::Sync(sync::Error::Source(_))), "{error:?}");
                Some(*retry_in)
            }
            _ => None,
        })
        .collect();
    let ms = |n| Duration::from_millis(n);
    assert_eq!(waits[..4], [ms(50), ms(100), ms(200), ms(200)], "doubling from the interval up to max_backoff");
    assert!(!events.iter().any(|e| matches!(e, Event::Synced { .. })));
    assert_eq!(events.last().map(Event::name), Some("stopped"));
    assert_eq!(outcome.errors, waits.len() as u64);
    let v = serde_json::to_value(&events[1]).expect("serializes");
    assert_eq!((v["event"].as_str(), v["retry_in_secs"].as_f64()), (Some("error"), Some(0.05)));
    assert!(v.get("error").is_none(), "the typed error is not part of the JSON: {v}");
}

#[test]
fn scheduled_verify_finds_drift_and_repair_fixes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    commit(dir.path(), "a.txt", "one\n");
    let memory = MemoryBackend::new();
    let (seen, interrupt) = (Seen::default(), Arc::new(AtomicBool::new(false)));
    let options = watch::Options { verify_every: Some(Duration::from_millis(100)), repair: true, ..options() };
    let handle = start(Repo::open(dir.path()).expect("repo"), "main", memory.clone(), options, &seen, &interrupt);
    seen.wait_for("a clean verify", |e| e.iter().any(|e| matches!(e, Event::Verified { clean: true, .. })));
    // Someone deletes a file behind treesync's back.
    memory.remove("a.txt");
    seen.wait_for("the repair", |e| e.iter().any(|e| matches!(e, Event::Repaired { .. })));
    interrupt.store(true, Ordering::SeqCst);
    let outcome = handle.join().expect("watch thread");

    let events = seen.0.lock().expect("not poisoned");
    let at = events.iter().position(|e| matches!(e, Event::Repaired { .. })).expect("repaired");
    let Event::Verified { report, clean: false } = &events[at - 1] else {
        panic!("the drifted verify comes right before the repair: {:?}", seen.names())
    };
    assert_eq!(report.drift.len(), 1);
    let Event::Repaired { repaired } = &events[at] else { unreachable!() };
    assert_eq!(repaired.write, 1);
    assert!(memory.snapshot().contains_key(&b"a.txt"[..]), "the file is back");
    assert!(outcome.verified >= 2 && outcome.repaired == 1, "{outcome:?}");
}

#[test]
fn a_watch_of_a_subtree_syncs_only_pushes_that_change_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    std::fs::create_dir(dir.path().join("docs")).expect("mkdir");
    commit(dir.path(), "docs/index.md", "one\n");
    let memory = MemoryBackend::new();
    let (seen, interrupt) = (Seen::default(), Arc::new(AtomicBool::new(false)));
    let handle =
        start(Repo::open(dir.path()).expect("repo"), "main:docs", memory.clone(), options(), &seen, &interrupt);

    seen.wait_for("the first sync", |e| e.iter().any(|e| matches!(e, Event::Synced { .. })));
    // A push outside docs/: the watch re-resolves main:docs, and the subtree did not change.
    commit(dir.path(), "README", "outside\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(seen.names(), ["watching", "synced"], "a push outside the subtree syncs nothing");
    let inside = commit(dir.path(), "docs/new.md", "two\n");
    seen.wait_for("the push into docs/", |e| e.iter().filter(|e| matches!(e, Event::Synced { .. })).count() == 2);
    interrupt.store(true, Ordering::SeqCst);
    handle.join().expect("watch thread");

    let events = seen.0.lock().expect("not poisoned");
    let Event::Synced { outcome } = &events[2] else { panic!("second sync: {:?}", seen.names()) };
    assert_eq!(outcome.commit.to_string(), inside);
    assert_eq!(outcome.tree.to_string(), git(dir.path(), &["rev-parse", "main:docs"]));
    assert_eq!(outcome.applied.write, 1, "only the new file: {:?}", outcome.applied);
    let files: Vec<Vec<u8>> = memory.snapshot().keys().map(|k| k.to_vec()).collect();
    assert!(files.contains(&b"new.md".to_vec()) && files.contains(&b"index.md".to_vec()), "docs/ as the root");
    assert!(!files.contains(&b"README".to_vec()), "nothing from outside docs/");
}
