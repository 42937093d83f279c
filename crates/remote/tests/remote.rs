//! A `Remote` against a real `git daemon` on 127.0.0.1: what it asks, what it fetches, how it
//! fails, and the watch loop driven by it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use treesync_core::{MemoryBackend, Repo, sync};
use treesync_remote::{Error, OpenOptions, Remote};
use treesync_testkit::git;
use treesync_testkit::gitdaemon::Served;
use treesync_testkit::tree::read_memory;
use treesync_watch::watch::{self, Event, Origin, OriginError};

fn cache(s: &Served) -> OpenOptions {
    OpenOptions { cache_dir: Some(s.cache()) }
}

/// A served repository of one file, and a remote of it caching in the test's folder.
fn served() -> (Served, Remote) {
    let s = Served::new(&[("index.html", "one\n")]);
    let remote = Remote::open(&s.url, &cache(&s)).expect("open");
    (s, remote)
}

/// The commit `rev` names in the remote's cache.
fn cached(remote: &Remote, rev: &str) -> String {
    let repo = Repo::open(remote.path()).expect("the cache is a bare repository");
    repo.resolve(rev).expect("resolve").commit.to_string()
}

#[test]
fn update_fetches_only_when_the_ref_moved() {
    let (s, remote) = served();
    assert!(remote.path().starts_with(s.dir.path().join("cache/repos")), "{}", remote.path().display());
    let main = ["main".to_string()];
    let before = s.daemon.requests();

    let first = remote.update(&main).expect("update");
    assert_eq!((first.requests, first.refs[0].fetched), (2, true), "{first:?}");
    assert_eq!(first.refs[0].name, "refs/heads/main");
    assert_eq!(s.daemon.requests() - before, 2, "ls-remote and one fetch");

    for _ in 0..3 {
        let idle = remote.update(&main).expect("update");
        assert_eq!((idle.requests, idle.refs[0].fetched), (1, false), "{idle:?}");
    }
    assert_eq!(s.daemon.requests() - before, 5, "one ls-refs request per idle look");

    let id = s.commit(&[("news.html", "news\n")]);
    s.push(&["main"]);
    let moved = remote.update(&main).expect("update");
    assert_eq!((moved.requests, moved.refs[0].fetched, moved.refs[0].id.as_str()), (2, true, id.as_str()));
    assert_eq!(s.daemon.requests() - before, 7, "a push costs ls-refs and one fetch");

    assert_eq!(cached(&remote, "main"), id);
}

#[test]
fn a_force_push_is_followed() {
    let (s, remote) = served();
    let main = ["main".to_string()];
    s.commit(&[("a.txt", "a\n")]);
    s.push(&["main"]);
    remote.update(&main).expect("update");
    git(&s.work(), &["reset", "-q", "--hard", "HEAD~1"]);
    let rewritten = s.commit(&[("b.txt", "b\n")]);
    s.push(&["--force", "main"]);
    let out = remote.update(&main).expect("update after a force-push");
    assert!(out.refs[0].fetched);
    assert_eq!(cached(&remote, "main"), rewritten);
}

#[test]
fn tags_and_full_ref_names_are_followed_like_branches() {
    let s = Served::new(&[("index.html", "one\n")]);
    let v1 = git(&s.work(), &["rev-parse", "HEAD"]);
    git(&s.work(), &["-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "-m", "v1", "v1"]);
    s.push(&["v1"]);
    let remote = Remote::open(&s.url, &cache(&s)).expect("open");
    let out = remote.update(&["v1".to_string(), "refs/heads/main:".to_string()]).expect("update");
    assert_eq!(out.requests, 2, "both refs in one ls-refs and one fetch: {out:?}");
    assert_eq!(out.refs[0].name, "refs/tags/v1");
    assert_eq!(out.refs[1].name, "refs/heads/main");
    assert_eq!(cached(&remote, "v1"), v1, "an annotated tag resolves to its commit");
}

#[test]
fn a_missing_ref_is_a_clear_error() {
    let (s, remote) = served();
    let err = remote.update(&["nope".to_string()]).expect_err("no such ref");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&s.url) && text.contains("refs/heads/nope"), "{text}");
    assert!(text.contains(&format!("git ls-remote --heads --tags {}", s.url)), "{text}");
    let err = remote.update(&["HEAD".to_string()]).expect_err("HEAD is refused");
    assert!(err.to_string().contains("name a branch, a tag or a full ref"), "{err}");
}

#[test]
fn a_server_that_is_down_says_so_and_is_used_again_when_back() {
    let (mut s, remote) = served();
    let main = ["main".to_string()];
    remote.update(&main).expect("update");
    s.daemon.stop();
    let err = remote.update(&main).expect_err("the server is down");
    let text = err.to_string();
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(text.contains(&s.url) && text.contains("is the server up?"), "{text}");
    assert!(text.contains(&format!("`git ls-remote {}`", s.url)), "{text}");
    s.daemon.start_again();
    let id = s.commit(&[("c.txt", "c\n")]);
    s.push(&["main"]);
    let out = remote.update(&main).expect("the server is back");
    assert_eq!(out.refs[0].id, id);
}

#[test]
fn a_repository_the_server_does_not_have_names_the_url() {
    let s = Served::new(&[("index.html", "one\n")]);
    let url = s.daemon.url("missing.git");
    let remote = Remote::open(&url, &cache(&s)).expect("open");
    let text = remote.update(&["main".to_string()]).expect_err("no such repository").to_string();
    assert!(text.contains(&url) && text.contains("check the URL"), "{text}");
}

#[test]
fn the_cache_records_its_url() {
    let (s, remote) = served();
    git(remote.path(), &["config", "remote.origin.url", "git://elsewhere/site.git"]);
    let err = Remote::open(&s.url, &cache(&s)).expect_err("another URL recorded");
    assert!(matches!(err, Error::OtherUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("rm -r"), "{err}");
}

#[test]
fn concurrent_updates_share_the_cache_and_fetch_once() {
    let s = Served::new(&[("index.html", "one\n")]);
    let before = s.daemon.requests();
    let cache = cache(&s);
    let url = s.url.clone();
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let remote = Remote::open(&url, &cache).expect("open");
                    remote.update(&["main".to_string()]).expect("update").refs[0].id.clone()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
    assert_eq!(s.daemon.requests() - before, 4 + 1, "four asks, one fetch (the others found it fetched)");
    let repos: Vec<_> = std::fs::read_dir(s.dir.path().join("cache/repos"))
        .expect("cache")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".git"))
        .collect();
    assert_eq!(repos.len(), 1, "{repos:?}");
}

/// Counts the looks of a watch and ends it after `stop_after` of them.
#[derive(Debug)]
struct Counting {
    inner: Remote,
    looks: AtomicUsize,
    stop_after: usize,
    stop: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl Origin for Counting {
    async fn refresh(&self, revs: &[String]) -> Result<(), OriginError> {
        if self.looks.fetch_add(1, Ordering::SeqCst) + 1 >= self.stop_after {
            self.stop.store(true, Ordering::SeqCst);
        }
        self.inner.refresh(revs).await
    }
    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        self.inner.wait(max, interrupt).await
    }
    fn describe(&self, interval: Duration) -> String {
        self.inner.describe(interval)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn an_idle_watch_asks_once_per_look() {
    let (s, remote) = served();
    remote.update(&["main".to_string()]).expect("first fetch");
    let repo = Repo::open(remote.path()).expect("open");
    let before = s.daemon.requests();
    let stop = Arc::new(AtomicBool::new(false));
    let origin = Arc::new(Counting { inner: remote, looks: AtomicUsize::new(0), stop_after: 6, stop: stop.clone() });
    let options = watch::Options {
        interval: Duration::from_millis(20),
        sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
        origin: Some(origin.clone()),
        ..Default::default()
    };
    let target = MemoryBackend::new();
    let out = runtime().block_on(watch::watch(&repo, "main", &target, &options, &mut |_| {}, &stop));
    assert_eq!((out.synced, out.errors), (1, 0));
    let looks = origin.looks.load(Ordering::SeqCst);
    assert_eq!(looks, 6);
    assert_eq!(s.daemon.requests() - before, looks, "one upload-pack request per look, no fetch");
}

#[test]
fn a_watch_follows_pushes_and_survives_the_server_going_away() {
    let (s, remote) = served();
    remote.update(&["main".to_string()]).expect("first fetch");
    let repo = Repo::open(remote.path()).expect("open");
    let description = remote.describe(Duration::from_millis(50));
    assert_eq!(description, format!("asking {} every 50ms", s.url));
    let stop = AtomicBool::new(false);
    let options = watch::Options {
        interval: Duration::from_millis(50),
        max_backoff: Duration::from_millis(400),
        sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
        origin: Some(Arc::new(remote)),
        ..Default::default()
    };
    let target = MemoryBackend::new();
    let daemon = Mutex::new(s.daemon);
    let work = s.dir.path().join("work");
    let url = s.url.clone();
    let push = |path: &str| {
        std::fs::write(work.join(path), path).expect("write");
        git(&work, &["add", "-A"]);
        git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", path]);
        git(&work, &["push", "-q", &url, "main"]);
    };
    // The script, driven by the events: first sync → push; second → stop the server;
    // four errors → start it and push; third sync → stop.
    let mut synced = 0;
    let mut retries = Vec::new();
    let mut on_event = |event: &Event| match event {
        Event::Synced { .. } => {
            synced += 1;
            match synced {
                1 => push("two.txt"),
                2 => daemon.lock().expect("daemon").stop(),
                _ => stop.store(true, Ordering::SeqCst),
            }
        }
        Event::Error { message, retry_in, .. } => {
            assert!(message.contains(&url) && message.contains("is the server up?"), "{message}");
            retries.push(*retry_in);
            if retries.len() == 4 {
                daemon.lock().expect("daemon").start_again();
                push("three.txt");
            }
        }
        _ => {}
    };
    let out = runtime().block_on(watch::watch(&repo, "main", &target, &options, &mut on_event, &stop));
    assert_eq!((out.synced, out.errors), (3, 4), "{retries:?}");
    let ms = |v: u64| Duration::from_millis(v);
    assert_eq!(retries, [ms(50), ms(100), ms(200), ms(400)], "doubling up to max_backoff");
    let files: Vec<String> = read_memory(&target.snapshot()).into_keys().collect();
    assert_eq!(files, ["index.html", "three.txt", "two.txt"]);
}
