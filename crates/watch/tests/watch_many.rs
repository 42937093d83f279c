//! `watch::watch_many` on MemoryBackends with real git repositories: one look at the refs per
//! group (not per mirror), every mirror synced, and a failing target left to its own backoff
//! while the others follow.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treesync_core::backend::{Backend, Error, TargetState};
use treesync_core::{MemoryBackend, Repo, sync};
use treesync_watch::watch::{self, Event, Group, Mirror, Origin, OriginError, Place};

mod common;
use common::{commit, git};

/// [`watch::Poll`], counting the looks: every `refresh` with the refs it was given, and every
/// `wait`.
#[derive(Debug, Default)]
struct Counting {
    refreshes: Mutex<Vec<Vec<String>>>,
    waits: AtomicU64,
}

#[async_trait::async_trait]
impl Origin for Counting {
    async fn refresh(&self, revs: &[String]) -> Result<(), OriginError> {
        self.refreshes.lock().expect("not poisoned").push(revs.to_vec());
        Ok(())
    }
    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        self.waits.fetch_add(1, Ordering::SeqCst);
        watch::Poll.wait(max, interrupt).await
    }
    fn describe(&self, interval: Duration) -> String {
        format!("counting every {interval:?}")
    }
}

/// A MemoryBackend whose target is unreachable while `broken` is set (as a directory replaced
/// by a file would be).
struct Breakable {
    inner: MemoryBackend,
    broken: Arc<AtomicBool>,
}

impl fmt::Display for Breakable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Breakable({})", self.inner)
    }
}

#[async_trait::async_trait]
impl Backend for Breakable {
    treesync_core::delegate_backend!(inner, except prepare_target);

    async fn prepare_target(&self, create: bool) -> Result<TargetState, Error> {
        if self.broken.load(Ordering::SeqCst) {
            let e = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory (test)");
            return Err(Error::io("open the target", "memory", e));
        }
        self.inner.prepare_target(create).await
    }
}

/// The events seen so far, with their mirror.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, Event)>>>);

impl Seen {
    fn count(&self, mirror: &str, event: &str) -> usize {
        self.0.lock().expect("not poisoned").iter().filter(|(m, e)| m == mirror && e.name() == event).count()
    }
    fn wait_for(&self, what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn options() -> watch::Options {
    watch::Options {
        interval: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
        ..Default::default()
    }
}

/// The files of a MemoryBackend (its `.treesync` state left out), as `name=content`.
fn files(b: &MemoryBackend) -> Vec<String> {
    b.snapshot()
        .into_iter()
        .filter(|(k, _)| !k.starts_with(b".treesync"))
        .map(|(k, v)| format!("{}={v:?}", String::from_utf8_lossy(&k)))
        .collect()
}

#[test]
fn mirrors_of_one_repository_share_each_look_and_a_failing_one_does_not_hold_the_others_back() {
    let (a, b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    git(a.path(), &["init", "-q"]);
    git(b.path(), &["init", "-q"]);
    commit(a.path(), "a.txt", "one\n");
    git(a.path(), &["branch", "other"]);
    commit(b.path(), "b.txt", "bee\n");
    let (repo_a, repo_b) = (Repo::open(a.path()).expect("repo"), Repo::open(b.path()).expect("repo"));

    // Group A: 8 mirrors of main (the first one breakable) and 2 of other; group B: 1 of main.
    let broken = Arc::new(AtomicBool::new(false));
    let breakable = Breakable { inner: MemoryBackend::new(), broken: broken.clone() };
    let mains: Vec<MemoryBackend> = (0..7).map(|_| MemoryBackend::new()).collect();
    let others: Vec<MemoryBackend> = (0..2).map(|_| MemoryBackend::new()).collect();
    let solo = MemoryBackend::new();
    let (origin_a, origin_b) = (Arc::new(Counting::default()), Arc::new(Counting::default()));

    let seen = Seen::default();
    let interrupt = Arc::new(AtomicBool::new(false));
    let outcomes = std::thread::scope(|scope| {
        let handle = scope.spawn(|| {
            let mirror = |name: String, rev: &str, place| Mirror { name, rev: rev.into(), place, options: options() };
            let mut a_mirrors = vec![mirror("broken".into(), "main", Place::Plain(&breakable))];
            a_mirrors
                .extend(mains.iter().enumerate().map(|(i, m)| mirror(format!("main{i}"), "main", Place::Plain(m))));
            a_mirrors
                .extend(others.iter().enumerate().map(|(i, m)| mirror(format!("other{i}"), "other", Place::Plain(m))));
            let groups = [
                Group { repo: &repo_a, origin: origin_a.clone(), mirrors: a_mirrors },
                Group {
                    repo: &repo_b,
                    origin: origin_b.clone(),
                    mirrors: vec![mirror("solo".into(), "main", Place::Plain(&solo))],
                },
            ];
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let mut handler =
                |m: &str, e: &Event| seen.0.lock().expect("not poisoned").push((m.to_string(), e.clone()));
            rt.block_on(watch::watch_many(&groups, &mut handler, &interrupt))
        });

        let all_main = || (0..7).all(|i| seen.count(&format!("main{i}"), "synced") >= 1);
        seen.wait_for("the first syncs", || {
            all_main() && seen.count("other1", "synced") == 1 && seen.count("solo", "synced") == 1
        });
        assert_eq!(files(&breakable.inner), files(&mains[0]), "the breakable mirror synced too");

        // The breakable target fails; the others follow two more commits.
        broken.store(true, Ordering::SeqCst);
        let second = commit(a.path(), "c.txt", "two\n");
        seen.wait_for("the second commit", || (0..7).all(|i| seen.count(&format!("main{i}"), "synced") == 2));
        seen.wait_for("two errors of the broken mirror", || seen.count("broken", "error") >= 2);
        let third = commit(a.path(), "d.txt", "three\n");
        seen.wait_for("the third commit", || (0..7).all(|i| seen.count(&format!("main{i}"), "synced") == 3));
        for m in &mains {
            assert_eq!(files(m), files(&mains[0]));
            assert!(m.snapshot().contains_key(&b"d.txt"[..]));
        }
        assert_eq!(seen.count("broken", "synced"), 1, "the broken mirror synced nothing since");
        assert!(!breakable.inner.snapshot().contains_key(&b"c.txt"[..]));

        // Fixed, it catches up with the newest commit on its next try.
        broken.store(false, Ordering::SeqCst);
        seen.wait_for("the broken mirror to recover", || seen.count("broken", "synced") == 2);
        assert_eq!(files(&breakable.inner), files(&mains[0]));
        let synced_to = |mirror: &str| {
            let events = seen.0.lock().expect("not poisoned");
            events.iter().rev().find_map(|(m, e)| match e {
                Event::Synced { outcome } if m == mirror => Some(outcome.commit.to_string()),
                _ => None,
            })
        };
        assert_eq!(synced_to("broken").as_deref(), Some(third.as_str()));
        assert_eq!(synced_to("main3").as_deref(), Some(third.as_str()));
        assert_ne!(second, third);
        interrupt.store(true, Ordering::SeqCst);
        handle.join().expect("watch thread")
    });

    // One refresh per look for the whole group, with its distinct refs; one wait between looks.
    let refreshes = origin_a.refreshes.lock().expect("not poisoned").clone();
    assert!(refreshes.iter().all(|r| *r == ["main", "other"]), "{refreshes:?}");
    let waits = origin_a.waits.load(Ordering::SeqCst) as usize;
    assert!(refreshes.len() == waits || refreshes.len() == waits + 1, "{} refreshes, {waits} waits", refreshes.len());
    assert!(origin_b.refreshes.lock().expect("not poisoned").iter().all(|r| *r == ["main"]));

    // The broken mirror's errors are its own, with its backoff; nobody else has any.
    let events = seen.0.lock().expect("not poisoned");
    let waits: Vec<Duration> = events
        .iter()
        .filter_map(|(m, e)| match e {
            Event::Error { retry_in, message, .. } => {
                assert_eq!(m, "broken", "only the broken mirror fails: {message}");
                assert!(message.contains("not a directory (test)"), "{message}");
                Some(*retry_in)
            }
            _ => None,
        })
        .collect();
    let ms = Duration::from_millis;
    assert_eq!(waits[..2], [ms(50), ms(100)], "doubling from its interval");
    let names: Vec<&str> = outcomes.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names[..2], ["broken", "main0"]);
    assert_eq!(names.last(), Some(&"solo"));
    let broken_outcome = &outcomes[0].outcome;
    assert_eq!((broken_outcome.synced, broken_outcome.errors), (2, waits.len() as u64));
    assert!(outcomes[1..].iter().all(|o| o.outcome.errors == 0));
    assert_eq!(outcomes[1].outcome.synced, 3);
    for name in ["broken", "main0", "other1", "solo"] {
        assert_eq!(seen_names(&events, name).first(), Some(&"watching"));
        assert_eq!(seen_names(&events, name).last(), Some(&"stopped"));
    }
}

fn seen_names<'a>(events: &'a [(String, Event)], mirror: &str) -> Vec<&'a str> {
    events.iter().filter(|(m, _)| m == mirror).map(|(_, e)| e.name()).collect()
}
