//! `treesync watch`: follows a ref as commits are pushed; SIGTERM mid-sync stops cleanly and the
//! next run completes the job.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::{cli, treesync};

use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::cli::wait_for;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history::{self, Model, file};
use treesync_testkit::matches;
use treesync_testkit::{BareRepo, git};

/// `treesync ARGS` (a watch), started with its stdout and stderr piped.
fn start(args: &[&str]) -> Child {
    cli().command().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("watch starts")
}

/// `treesync watch` of `rev` of `bare` into `target`, with `extra` arguments.
fn start_watch(bare: &Path, rev: &str, target: &Path, extra: &[&str]) -> Child {
    start(&[&["watch", "--repo", s(bare), "--ref", rev, "--target", s(target)], extra].concat())
}

/// [`start_watch`], once the watch has synced `first` into `target`.
fn start_synced(bare: &BareRepo, rev: &str, first: &str, target: &Path, extra: &[&str]) -> Child {
    let child = start_watch(&bare.path, rev, target, extra);
    wait_for("the first commit", || matches(bare, first, target));
    child
}

/// A bare repository holding `trees` as commits on `staging`, with `branch` at the first.
fn staged(trees: &[Model], branch: &str) -> (BareRepo, Vec<String>) {
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "staging", trees);
    move_ref(&bare, branch, &commits[0]);
    (bare, commits)
}

/// Point `branch` of `bare` at `commit`, as a push does.
fn move_ref(bare: &BareRepo, branch: &str, commit: &str) {
    git(&bare.path, &["update-ref", &format!("refs/heads/{branch}"), commit]);
}

/// Send `signal` (`-TERM`, `-INT`) to a watch and collect its output once it exits.
fn stop(child: Child, signal: &str) -> Output {
    assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().expect("kill").success());
    child.wait_with_output().expect("watch exits")
}

#[test]
fn watch_follows_pushes_and_stops_cleanly_on_sigterm() {
    let mut trees = history::random_history(77, 4);
    // A last commit big enough that SIGTERM lands in the middle of its sync.
    let big = trees[3].with((0..12_000).map(|i| (format!("bulk/d{}/f{i}", i % 30), file(vec![b'x'; 2000 + i % 7]))));
    trees.push(big);
    let (bare, commits) = staged(&trees, "main");
    let (_dir, target) = temp_target("t");
    let extra = ["--interval", "100ms", "--jobs", "1", "--batch", "1"];
    let child = start_synced(&bare, "main", &commits[0], &target, &extra);
    for c in &commits[1..4] {
        move_ref(&bare, "main", c);
        wait_for("the pushed commit", || matches(&bare, c, &target));
    }
    // Push the big commit and stop the watcher while it syncs.
    move_ref(&bare, "main", &commits[4]);
    wait_for("the big sync to start", || target.join("bulk").exists());
    let out = stop(child, "-TERM");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "watch exits 0 on SIGTERM: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains(" synced ")).count(), 4, "one line per update: {stdout}");

    let o = treesync(&["status", "--target", s(&target)]);
    let status = String::from_utf8_lossy(&o.stdout);
    assert!(status.contains("INTERRUPTED"), "SIGTERM came mid-sync, the journal knows: {status}\nwatch said: {stderr}");
    let o = treesync(&["sync", "-q", "--repo", s(&bare.path), "--ref", "main", "--target", s(&target)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(matches(&bare, &commits[4], &target));
}

/// A ref deleted, then the repository moved away, while `watch` follows it: each is logged as
/// what it is (not "couldn't parse revision"), and watch keeps going.
#[test]
fn watch_says_when_the_ref_or_the_repository_is_gone() {
    let (bare, commits) = staged(&history::random_history(5, 1), "other");
    let (dir, target) = temp_target("t");
    let child = start_synced(&bare, "other", &commits[0], &target, &["--interval", "100ms"]);
    git(&bare.path, &["update-ref", "-d", "refs/heads/other"]);
    std::thread::sleep(Duration::from_millis(400));
    let moved = dir.path().join("moved.git");
    std::fs::rename(&bare.path, &moved).expect("move the repository away");
    std::thread::sleep(Duration::from_millis(600));
    std::fs::rename(&moved, &bare.path).expect("move it back");
    let out = stop(child, "-TERM");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no branch, tag or other ref of that name"), "{err}");
    assert!(err.contains("it is gone"), "{err}");
    assert!(!err.contains("couldn't parse revision"), "{err}");
}

/// `watch --json` on a ref that does not exist: one `watching` line, then `error` lines whose
/// waits double from the interval; the end (`stopped`) is a log line on stderr, never a JSON
/// line, and the exit code is 0.
#[test]
fn watch_json_reports_failed_tries_with_doubling_waits_and_stops_on_stderr() {
    let bare = BareRepo::new();
    history::import(&bare.path, "main", &history::random_history(3, 1));
    let (_dir, target) = temp_target("t");
    let child = start_watch(&bare.path, "no-such-branch", &target, &["--json", "--interval", "100ms"]);
    // 100 + 200 + 400 ms of waits: at least three tries in a second.
    std::thread::sleep(Duration::from_millis(1000));
    let out = stop(child, "-TERM");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let events: Vec<&str> = lines.iter().map(|v| v["event"].as_str().expect("event")).collect();
    assert_eq!(events[0], "watching", "{events:?}");
    assert!(events[1..].iter().all(|e| *e == "error"), "only failed tries: {events:?}");
    let waits: Vec<f64> = lines[1..].iter().map(|v| v["retry_in_secs"].as_f64().expect("retry_in_secs")).collect();
    assert!(waits.len() >= 3, "{waits:?}");
    assert_eq!(waits[..3], [0.1, 0.2, 0.4], "the wait doubles from the interval");
    for v in &lines {
        assert!(v["at"].is_string() && v["mirror"].is_null(), "{v}");
    }
    assert!(lines[1]["message"].as_str().expect("message").contains("no branch, tag or other ref of that name"));
    assert!(stderr.lines().last().is_some_and(|l| l.ends_with(" stopped")), "{stderr}");
    assert!(!stderr.contains('{'), "no JSON on stderr: {stderr}");
}

/// `watch --all`: one watch per mirror in one process, each event line tagged with its
/// mirror (`[name] …` in text, `mirror` in JSON), and each watch says when it stopped.
#[test]
fn watch_all_follows_every_mirror_and_tags_their_events() {
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &history::random_history(9, 2));
    move_ref(&bare, "other", &commits[0]);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = ConfigFile::new()
        .defaults()
        .key("interval", "100ms")
        .mirror("one", &bare.path, "main", dir.path().join("one"))
        .mirror("two", &bare.path, "other", dir.path().join("two"))
        .write_in(dir.path());
    for json in [false, true] {
        let mut args = vec!["--config", s(&cfg), "watch", "--all"];
        if json {
            args.push("--json");
        }
        let mut child = start(&args);
        // stdout read as it comes: with --json the targets are up to date from the first run
        // at once, and the interrupt waits for each mirror's first look to be reported.
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let reader = {
            let (lines, out) = (lines.clone(), child.stdout.take().expect("stdout"));
            std::thread::spawn(move || {
                for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
                    lines.lock().expect("lines").push(line);
                }
            })
        };
        let looked = |name: &str| {
            let tag = format!("\"mirror\":\"{name}\",\"event\":\"synced\"");
            !json || lines.lock().expect("lines").iter().any(|l| l.contains(&tag))
        };
        wait_for("both mirrors", || {
            matches(&bare, &commits[1], &dir.path().join("one"))
                && matches(&bare, &commits[0], &dir.path().join("two"))
                && looked("one")
                && looked("two")
        });
        let out = stop(child, "-INT");
        reader.join().expect("stdout read");
        let stdout = lines.lock().expect("lines").join("\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        for name in ["one", "two"] {
            assert!(stderr.contains(&format!("[{name}] stopped")), "{stderr}");
            if json {
                let synced: Vec<serde_json::Value> = stdout
                    .lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line"))
                    .filter(|v| v["mirror"] == name && v["event"] == "synced")
                    .collect();
                // The first run synced both; this one finds them up to date, and reports its
                // first look (with nothing applied) like every watch does.
                assert_eq!(synced.len(), 1, "{stdout}");
                assert_eq!(synced[0]["outcome"]["applied"]["write"], 0, "{stdout}");
                let watching = stdout
                    .lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line"))
                    .filter(|v| v["mirror"] == name && v["event"] == "watching")
                    .count();
                assert_eq!(watching, 1, "{stdout}");
            } else {
                assert!(stderr.contains(&format!("[{name}] watching")), "{stderr}");
                assert_eq!(stdout.lines().filter(|l| l.contains(&format!("[{name}] synced "))).count(), 1, "{stdout}");
            }
        }
    }
}

/// CPU ticks (user + system) the process `pid` has used, from /proc/PID/stat.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the command name (which may hold spaces) in parentheses: utime is the 14th
    // field of the line, stime the 15th.
    let after = &stat[stat.rfind(')').expect("(comm)") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// A local repository wakes `watch` by inotify: with an interval of an hour it follows an
/// update-ref and a push at once, says so in its first line, and uses (nearly) no CPU while
/// nothing moves — no busy loop, no periodic look.
#[test]
fn watch_is_woken_by_pushes_and_idles_without_cpu() {
    let (bare, commits) = staged(&history::random_history(31, 3), "main");
    let (_dir, target) = temp_target("t");
    let child = start_synced(&bare, "main", &commits[0], &target, &["--interval", "1h"]);
    // Idle: 3 s of nothing moving. 2 ticks (20 ms at USER_HZ 100) is what a loop waking every
    // 50 ms for the interrupt check costs at most; a busy loop takes ~300.
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_ticks(child.id());
    std::thread::sleep(Duration::from_secs(3));
    let idle = cpu_ticks(child.id()) - before;
    move_ref(&bare, "main", &commits[1]);
    wait_for("the updated ref", || matches(&bare, &commits[1], &target));
    let work = tempfile::tempdir().expect("tempdir");
    git(work.path(), &["clone", "-q", "-b", "main", s(&bare.path), "c"]);
    git(&work.path().join("c"), &["push", "-q", "origin", &format!("{}:refs/heads/main", commits[2])]);
    wait_for("the pushed commit", || matches(&bare, &commits[2], &target));
    let out = stop(child, "-TERM");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("woken by changes to the refs (inotify)"), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains(" synced ")).count(), 3, "{stdout}");
    // A loop that looked at the ref without waiting would take ~300 ticks (100 per second);
    // a loaded machine charges a few ticks to an idle process's timers.
    assert!(idle <= 10, "{idle} CPU ticks in 3 s of idle watching");
}

/// `--poll`, or `poll = true` in the config file, polls every --interval and says so: with an
/// hour, a move is not seen.
#[test]
fn watch_poll_polls_and_says_so() {
    let (bare, commits) = staged(&history::random_history(32, 2), "main");
    let dir = tempfile::tempdir().expect("tempdir");
    let mirror = ConfigFile::new().mirror("m", &bare.path, "main", dir.path().join("m"));
    let cfg = mirror.key("interval", "1h").key("poll", true).write_in(dir.path());
    let (f, m) = (dir.path().join("f"), dir.path().join("m"));
    let flag = ["watch", "--repo", s(&bare.path), "--ref", "main", "--target", s(&f), "--interval", "1h", "--poll"];
    let config = ["--config", s(&cfg), "watch", "m"];
    for (args, target) in [(&flag[..], &f), (&config[..], &m)] {
        move_ref(&bare, "main", &commits[0]);
        let child = start(args);
        wait_for("the first commit", || matches(&bare, &commits[0], target));
        move_ref(&bare, "main", &commits[1]);
        std::thread::sleep(Duration::from_secs(2));
        let out = stop(child, "-TERM");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains(", polling every 3600s\n"), "{args:?}: {stderr}");
        assert!(matches(&bare, &commits[0], target), "{args:?}: polling every hour saw no move");
    }
}
