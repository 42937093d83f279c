//! `watch` with the [`Events`] origin on a real bare repository and an interval of an hour: every
//! way git moves a ref (update-ref, a push, pack-refs then a move, a branch created later in a
//! new directory, a force push) is synced without a single periodic look. The same steps with
//! polling every hour sync nothing after the first look: the test can fail.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use treesync_core::{MemoryBackend, Repo, sync};
use treesync_testkit::{BareRepo, git, history};
use treesync_watch::watch::{self, Event, Events, NoEvents, Origin};

const HOUR: Duration = Duration::from_secs(3600);
/// The failure deadline of each step (never reached when events work).
const DEADLINE: Duration = Duration::from_secs(30);

/// A watch of one ref on its own thread: the commits it synced arrive on `synced`.
struct Run {
    synced: Receiver<String>,
    errors: Arc<Mutex<Vec<String>>>,
    interrupt: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<watch::Outcome>>,
}

impl Run {
    fn start(repo: &Path, rev: &str, origin: Option<Arc<dyn Origin>>) -> Run {
        let (tx, synced) = channel();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let interrupt = Arc::new(AtomicBool::new(false));
        let (repo, rev, errs, stop) = (repo.to_path_buf(), rev.to_string(), errors.clone(), interrupt.clone());
        let thread = std::thread::spawn(move || {
            let repo = Repo::open(&repo).expect("open the repository");
            let options = watch::Options {
                interval: HOUR,
                sync: sync::Options { backend_name: "memory".into(), ..Default::default() },
                origin,
                ..Default::default()
            };
            let mut on_event = |e: &Event| match e {
                Event::Synced { outcome } => {
                    let _ = tx.send(outcome.commit.to_string());
                }
                Event::Error { message, .. } => errs.lock().expect("not poisoned").push(message.clone()),
                _ => {}
            };
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(watch::watch(&repo, &rev, &MemoryBackend::new(), &options, &mut on_event, &stop))
        });
        Run { synced, errors, interrupt, thread: Some(thread) }
    }

    /// Wait (up to the failure deadline) until the watch syncs `commit`.
    fn expect_synced(&self, what: &str, commit: &str) {
        loop {
            match self.synced.recv_timeout(DEADLINE) {
                Ok(c) if c == commit => return,
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{what}: {commit} not synced; errors: {:?}", self.errors.lock().expect("not poisoned"))
                }
                Err(RecvTimeoutError::Disconnected) => panic!("{what}: the watch ended"),
            }
        }
    }

    fn stop(mut self) -> watch::Outcome {
        self.interrupt.store(true, Ordering::SeqCst);
        self.thread.take().expect("running").join().expect("the watch does not panic")
    }
}

/// A bare repository with a history on `staging` (not followed), `main` at its first commit.
fn repo() -> (BareRepo, Vec<String>) {
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "staging", &history::random_history(17, 6));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[0]]);
    (bare, commits)
}

fn events(bare: &BareRepo, rev: &str) -> Arc<Events> {
    Arc::new(Events::open(&bare.path, &[rev.to_string()]).expect("inotify on a local repository"))
}

#[test]
fn events_follow_every_way_git_moves_a_ref_without_polling() {
    let (bare, commits) = repo();
    let main_events = events(&bare, "main");
    let main = Run::start(&bare.path, "main", Some(main_events.clone()));
    main.expect_synced("the first look", &commits[0]);
    // A branch in a directory that does not exist yet: its watch fails until it appears.
    let team = Run::start(&bare.path, "team/feature", Some(events(&bare, "team/feature")));

    git(&bare.path, &["update-ref", "refs/heads/main", &commits[1]]);
    main.expect_synced("git update-ref", &commits[1]);

    // A push from a clone, with a new commit (objects written, then the ref).
    let work = tempfile::tempdir().expect("tempdir");
    let clone = work.path().join("clone");
    git(work.path(), &["clone", "-q", "-b", "main", bare.path.to_str().expect("utf8"), "clone"]);
    std::fs::write(clone.join("pushed.txt"), "pushed\n").expect("write");
    git(&clone, &["add", "."]);
    git(&clone, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "pushed"]);
    git(&clone, &["push", "-q", "origin", "main"]);
    let pushed = git(&clone, &["rev-parse", "HEAD"]).trim().to_string();
    main.expect_synced("git push", &pushed);

    // Packed: the loose file is gone, the ref lives in packed-refs; then it moves again.
    git(&bare.path, &["pack-refs", "--all", "--prune"]);
    assert!(!bare.path.join("refs/heads/main").exists(), "pack-refs removed the loose ref");
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[2]]);
    main.expect_synced("a move after pack-refs", &commits[2]);
    // Packed again (the watch wakes, looks, finds the same commit), then moved.
    git(&bare.path, &["pack-refs", "--all", "--prune"]);
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[3]]);
    main.expect_synced("a move of a packed ref", &commits[3]);

    git(&bare.path, &["update-ref", "refs/heads/team/feature", &commits[4]]);
    team.expect_synced("a branch created after the watch started", &commits[4]);

    git(&clone, &["push", "-q", "-f", "origin", &format!("{}:refs/heads/main", commits[0])]);
    main.expect_synced("a force push back to the first commit", &commits[0]);

    let wakes = main_events.wakes();
    let outcome = main.stop();
    assert_eq!((outcome.synced, outcome.errors), (6, 0), "one sync per move");
    assert!(wakes >= 5, "each move woke the watch: {wakes}");
    let team_outcome = team.stop();
    assert_eq!(team_outcome.synced, 1);
    assert!(team_outcome.errors >= 1, "the branch did not exist at first");
}

#[test]
fn polling_every_hour_syncs_nothing_after_the_first_look() {
    let (bare, commits) = repo();
    let main = Run::start(&bare.path, "main", None);
    main.expect_synced("the first look", &commits[0]);
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[1]]);
    assert_eq!(
        main.synced.recv_timeout(Duration::from_secs(3)),
        Err(RecvTimeoutError::Timeout),
        "polling every hour saw a move within seconds"
    );
    assert_eq!(main.stop().synced, 1);
}

/// Lock files come and go (a transaction that was aborted, `git gc` writing packed-refs.lock
/// and giving up) and reads of the refs are no change: they wake nobody.
#[test]
fn lock_files_and_reads_do_not_wake_the_watch() {
    let (bare, commits) = repo();
    let events = events(&bare, "main");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let stop = AtomicBool::new(false);
    for lock in ["refs/heads/main.lock", "packed-refs.lock", "HEAD.lock"] {
        std::fs::write(bare.path.join(lock), "x\n").expect("write a lock");
        std::fs::remove_file(bare.path.join(lock)).expect("remove it");
    }
    let _ = std::fs::read(bare.path.join("refs/heads/main")).expect("read the ref");
    git(&bare.path, &["rev-parse", "main"]);
    rt.block_on(events.wait(Duration::from_millis(500), &stop));
    assert_eq!(events.wakes(), 0, "no change woke the watch");
    // With a reflog, git appends to it before the rename: the append wakes nobody (a wake
    // there would look before the ref moved), the rename does, at once.
    git(&bare.path, &["config", "core.logAllRefUpdates", "always"]);
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[1]]);
    assert!(bare.path.join("logs/refs/heads/main").is_file(), "git wrote a reflog");
    rt.block_on(events.wait(HOUR, &stop));
    assert_eq!(events.wakes(), 1, "one update-ref (lock, reflog, rename) is one wake");
    rt.block_on(events.wait(Duration::from_millis(300), &stop));
    assert_eq!(events.wakes(), 1, "nothing of that update-ref was left to wake a second wait");
}

/// A repository on a FUSE filesystem (the slow FUSE testbed): events are refused, saying why.
#[test]
fn a_repository_on_fuse_gets_no_events() {
    use treesync_testkit::slowfs::{self, Config, SlowFs};
    if slowfs::check().is_err() {
        eprintln!("skipped: no FUSE here ({:?})", slowfs::check());
        return;
    }
    let fs = SlowFs::temp(Config::default()).expect("mount slowfs");
    let repo = fs.path().join("repo.git");
    std::fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "--bare"]);
    match Events::open(&repo, &["main".to_string()]) {
        Err(e @ NoEvents::Network { fs: "fuse", .. }) => {
            assert_eq!(e.to_string(), "the repository is on fuse (inotify sees no pushes from other hosts)")
        }
        other => panic!("expected NoEvents::Network on fuse, got {other:?}"),
    }
    let origin = watch::events::origin(&repo, &["main".to_string()], false);
    assert!(origin.polls());
    assert_eq!(
        origin.describe(Duration::from_secs(5)),
        "polling every 5s: the repository is on fuse (inotify sees no pushes from other hosts)"
    );
}
