//! `watch --all` with many mirrors: one process follows 20 mirrors of one repository and one of
//! another; a target that fails (locked by another process, or replaced by a file) is reported
//! with its own backoff while the others keep following every push, and a released one catches
//! up.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use treesync_testkit::cli::wait_for_up_to;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history;
use treesync_testkit::matches;
use treesync_testkit::{BareRepo, git};

/// Up to two minutes: 21 mirrors on a busy machine.
fn wait_for(what: &str, f: impl FnMut() -> bool) {
    wait_for_up_to(what, Duration::from_secs(120), f)
}

/// The JSON lines of the watch so far.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<serde_json::Value>>>);

impl Lines {
    fn count(&self, mirror: &str, event: &str) -> usize {
        self.0.lock().expect("not poisoned").iter().filter(|v| v["mirror"] == mirror && v["event"] == event).count()
    }
}

/// `treesync --config CFG watch --all --json`, its JSON lines collected as they come.
fn watch_all(cfg: &Path) -> (std::process::Child, Lines, std::thread::JoinHandle<()>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .arg("--config")
        .arg(cfg)
        .args(["watch", "--all", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch starts");
    let lines = Lines::default();
    let stdout = child.stdout.take().expect("stdout");
    let collected = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("utf8 line");
            let v = serde_json::from_str(&line).unwrap_or_else(|e| panic!("a JSON line: {e}: {line}"));
            collected.0.lock().expect("not poisoned").push(v);
        }
    });
    (child, lines, reader)
}

#[test]
fn watch_all_follows_twenty_mirrors_of_one_repository_and_isolates_a_failing_target() {
    let (bare, solo) = (BareRepo::new(), BareRepo::new());
    // The history to push, one commit at a time, waits on a branch of its own.
    let commits = history::import(&bare.path, "later", &history::random_history(21, 4));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[0]]);
    let solo_commit = history::import(&solo.path, "main", &history::random_history(5, 1)).remove(0);

    let dir = tempfile::tempdir().expect("tempdir");
    let target = |name: &str| dir.path().join("targets").join(name);
    std::fs::create_dir(dir.path().join("targets")).expect("targets' parent");
    let mut cfg = ConfigFile::new().defaults().key("interval", "100ms");
    let names: Vec<String> = (0..20).map(|i| format!("m{i:02}")).collect();
    for name in &names {
        cfg = cfg.mirror(name, &bare.path, "main", target(name));
    }
    let cfg_path = cfg.mirror("solo", &solo.path, "main", target("solo")).write_in(dir.path());

    let (mut child, lines, reader) = watch_all(&cfg_path);
    let all_at = |commit: &str| names.iter().all(|n| matches(&bare, commit, &target(n)));

    wait_for("all 21 mirrors", || all_at(&commits[0]) && matches(&solo, &solo_commit, &target("solo")));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[1]]);
    wait_for("the 20 mirrors at the second commit", || all_at(&commits[1]));

    // Two targets fail: another process holds m07's lock, and m13's directory is replaced by a
    // file. Both report errors with their own backoff; the 18 others follow two commits.
    // `flock LOCK cat` holds the lock until its stdin closes.
    let mut holder = Command::new("flock")
        .arg(target("m07").join(".treesync/lock"))
        .arg("cat")
        .stdin(Stdio::piped())
        .spawn()
        .expect("flock runs");
    wait_for("flock to hold m07's lock", || {
        Command::new("flock")
            .args(["-n"])
            .arg(target("m07").join(".treesync/lock"))
            .arg("true")
            .status()
            .is_ok_and(|s| !s.success())
    });
    std::fs::remove_dir_all(target("m13")).expect("remove");
    std::fs::write(target("m13"), "not a directory\n").expect("file");
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[2]]);
    let others: Vec<&String> = names.iter().filter(|n| *n != "m07" && *n != "m13").collect();
    wait_for("the others at the third commit", || others.iter().all(|n| matches(&bare, &commits[2], &target(n))));
    wait_for("m07's and m13's errors", || lines.count("m07", "error") >= 2 && lines.count("m13", "error") >= 2);
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[3]]);
    wait_for("the others at the fourth commit", || others.iter().all(|n| matches(&bare, &commits[3], &target(n))));
    assert!(target("m13").is_file(), "the broken target was left alone");
    assert!(matches(&bare, &commits[1], &target("m07")), "the locked target was left alone");
    assert!(matches(&solo, &solo_commit, &target("solo")));

    // Released, m07 catches up with the newest commit on its next try.
    drop(holder.stdin.take());
    assert!(holder.wait().expect("flock exits").success());
    wait_for("m07 to recover", || matches(&bare, &commits[3], &target("m07")));

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success());
    let status = child.wait().expect("watch exits");
    reader.join().expect("reader");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    assert!(status.success(), "{stderr}");

    let all = lines.0.lock().expect("not poisoned").clone();
    let errors: Vec<&serde_json::Value> = all.iter().filter(|v| v["event"] == "error").collect();
    assert!(errors.iter().all(|v| v["mirror"] == "m07" || v["mirror"] == "m13"), "only m07 and m13 failed: {errors:?}");
    for (name, says) in [("m07", "lock"), ("m13", "not a directory")] {
        let theirs: Vec<&&serde_json::Value> = errors.iter().filter(|v| v["mirror"] == name).collect();
        assert!(theirs.iter().all(|v| v["message"].as_str().is_some_and(|m| m.contains(says))), "{name}: {theirs:?}");
        let waits: Vec<f64> = theirs.iter().map(|v| v["retry_in_secs"].as_f64().expect("retry_in_secs")).collect();
        assert_eq!(waits[..2], [0.1, 0.2], "{name}: its own backoff, doubling from its interval");
    }
    for n in names.iter().chain(["solo".to_string()].iter()) {
        assert_eq!(lines.count(n, "watching"), 1, "{n}");
        assert!(stderr.contains(&format!("[{n}] stopped")), "{n}: {stderr}");
    }
    // Every mirror of main synced each of its four commits once (m07: the first two, then the
    // newest; m13: the first two); solo its one.
    for n in &others {
        assert_eq!(lines.count(n, "synced"), 4, "{n}");
    }
    assert_eq!(lines.count("m07", "synced"), 3);
    assert_eq!(lines.count("m13", "synced"), 2);
    assert_eq!(lines.count("solo", "synced"), 1);
}

/// Mirrors of one repository share one inotify watch, which covers every mirror's ref — also
/// a top-level one (`RELEASE`, beside `HEAD`) that only the second mirror follows — and the
/// group polls only when one of its mirrors asks (`poll = true`, said in its `watching` line).
#[test]
fn one_event_watch_per_repository_covers_the_refs_of_all_its_mirrors() {
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "later", &history::random_history(3, 3));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[0]]);
    git(&bare.path, &["update-ref", "RELEASE", &commits[0]]);
    let dir = tempfile::tempdir().expect("tempdir");
    let target = |name: &str| dir.path().join(name);
    // An hour between looks: only events make the mirrors follow.
    let mut cfg = ConfigFile::new().defaults().key("interval", "1h");
    for (name, rev) in [("a", "main"), ("b", "RELEASE")] {
        cfg = cfg.mirror(name, &bare.path, rev, target(name));
    }
    let cfg_path = cfg.write_in(dir.path());
    let (mut child, lines, reader) = watch_all(&cfg_path);
    wait_for("both mirrors", || matches(&bare, &commits[0], &target("a")) && matches(&bare, &commits[0], &target("b")));
    git(&bare.path, &["update-ref", "RELEASE", &commits[1]]);
    wait_for("b to follow RELEASE", || matches(&bare, &commits[1], &target("b")));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[2]]);
    wait_for("a to follow main", || matches(&bare, &commits[2], &target("a")));
    assert!(matches(&bare, &commits[1], &target("b")));
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success());
    assert!(child.wait().expect("watch exits").success());
    reader.join().expect("reader");
    let all = lines.0.lock().expect("not poisoned").clone();
    let watching: Vec<&serde_json::Value> = all.iter().filter(|v| v["event"] == "watching").collect();
    assert_eq!(watching.len(), 2, "{watching:?}");
    for w in watching {
        let waits = w["waits"].as_str().expect("the watching line says how it waits");
        assert!(!waits.contains("polling"), "events, not polling: {w}");
    }
}
