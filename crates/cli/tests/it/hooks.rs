//! `--exec-after` and `--webhook` on `sync` and `watch`: real `sh` commands, a real HTTP
//! listener, the retry rule, the timeout, and a target that stays right whatever a hook does.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cli;
use crate::schema::SYNC;
use crate::schema::WATCH_EVENT;
use serde_json::Value;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::cli::wait_for;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history::file;
use treesync_testkit::history::{self, Model};
use treesync_testkit::{BareRepo, git, schema};

/// `sync --repo BARE --ref REV --target TARGET EXTRA…`.
fn sync_args<'a>(bare: &'a BareRepo, rev: &'a str, target: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["sync", "--repo", s(&bare.path), "--ref", rev, "--target", s(target)];
    args.extend_from_slice(extra);
    args
}

/// A repository with three commits on `staging` (main points at the first): two files, then
/// one of them changed, then one added.
fn repo() -> (BareRepo, Vec<String>) {
    let a = Model::of(&[("index.html", "one\n"), ("css/site.css", "body {}\n")]);
    let b = a.with([("index.html", file("two\n"))]);
    let c = b.with([("about.html", file("about\n"))]);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "staging", &[a, b, c]);
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[0]]);
    (bare, commits)
}

fn valid(schema_text: &str, v: &Value) {
    let schema: Value = serde_json::from_str(schema_text).expect("schema is JSON");
    if let Err(errors) = schema::validate(&schema, v) {
        panic!("violates its schema:\n{}\n{v:#}", errors.join("\n"));
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// An exec hook that appends `COMMIT|PREVIOUS|TARGET|CHANGED|MIRROR` to `log`.
fn env_hook(log: &Path) -> String {
    format!(
        "printf '%s|%s|%s|%s|%s\\n' \"$TREESYNC_COMMIT\" \"$TREESYNC_PREVIOUS\" \"$TREESYNC_TARGET\" \"$TREESYNC_CHANGED\" \"${{TREESYNC_MIRROR-unset}}\" >> {}",
        log.display()
    )
}

fn applied_total(v: &Value) -> u64 {
    ["mkdir", "write", "symlink", "chmod", "unlink", "rmdir"].iter().map(|k| v["applied"][k].as_u64().expect(k)).sum()
}

#[test]
fn exec_hook_gets_the_sync_in_its_environment_and_runs_only_when_something_changed() {
    let (bare, commits) = repo();
    let (dir, target) = temp_target("site");
    let log = dir.path().join("runs.log");
    let hook = env_hook(&log);
    let sync = |rev: &str| {
        let out = cli().ok(&sync_args(&bare, rev, &target, &["--exec-after", &hook, "--json"]));
        serde_json::from_str::<Value>(&out).expect("sync --json")
    };
    let first = sync(&commits[0]);
    let t = s(&target);
    assert_eq!(lines(&log), [format!("{}||{t}|{}|unset", commits[0], applied_total(&first))]);
    assert_eq!(applied_total(&first), 3, "two files and css/: {first:#}");
    sync(&commits[1]);
    assert_eq!(lines(&log)[1], format!("{}|{}|{t}|1|unset", commits[1], commits[0]), "one file rewritten");
    sync(&commits[1]);
    assert_eq!(lines(&log).len(), 2, "a sync that changes nothing runs no hook");
    cli().ok(&[
        "sync",
        "--repo",
        s(&bare.path),
        "--ref",
        &commits[2],
        "--target",
        t,
        "--exec-after",
        &hook,
        "--dry-run",
    ]);
    assert_eq!(lines(&log).len(), 2, "a dry run runs no hook");
}

#[test]
fn a_mirror_hook_from_the_config_file_gets_the_mirror_name() {
    let (bare, commits) = repo();
    let (dir, target) = temp_target("site");
    let log = dir.path().join("runs.log");
    let mirror = ConfigFile::new().mirror("site", &bare.path, &commits[0], &target);
    let config = mirror.key("exec_after", env_hook(&log)).write_in(dir.path());
    cli().ok(&["sync", "--config", s(&config), "site", "-q"]);
    assert_eq!(lines(&log), [format!("{}||{}|3|site", commits[0], s(&target))]);
}

#[test]
fn failing_exec_hook_is_retried_then_given_up_and_the_sync_stands() {
    let (bare, commits) = repo();
    let (dir, target) = temp_target("site");
    let tries = dir.path().join("tries");
    let hook = format!("echo \"$TREESYNC_COMMIT\" >> {}; echo 'reload failed' >&2; exit 3", tries.display());
    let extra = ["--exec-after", hook.as_str(), "--hook-retries", "2"];
    let stderr = cli().fails(&sync_args(&bare, &commits[0], &target, &extra), 5);
    assert_eq!(lines(&tries).len(), 3, "one try and two retries: {stderr}");
    assert!(stderr.contains("reload failed"), "the hook's output is on stderr: {stderr}");
    assert!(stderr.contains("(try 1 of 3): FAILED, exited with status 3; retrying in 1s"), "{stderr}");
    assert!(stderr.contains("(try 2 of 3): FAILED, exited with status 3; retrying in 2s"), "{stderr}");
    assert!(stderr.contains("(try 3 of 3): FAILED, exited with status 3; gave up"), "{stderr}");
    assert!(stderr.contains("the exec hook gave up after 3 tries"), "{stderr}");
    // The target holds the commit and its state says so: the next sync is incremental.
    let status = cli().ok(&["status", "--target", s(&target), "--json"]);
    assert!(status.contains(&commits[0]), "{status}");
    assert_eq!(std::fs::read_to_string(target.join("index.html")).expect("synced"), "one\n");
    let out = cli().ok(&sync_args(&bare, &commits[1], &target, &["--json"]));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["from"]["commit"], commits[0].as_str());
    assert_eq!(applied_total(&v), 1);
}

#[test]
fn hanging_exec_hook_is_killed_at_the_timeout() {
    let (bare, commits) = repo();
    let (dir, target) = temp_target("site");
    let pid = dir.path().join("pid");
    // A child in the background and a wait: the kill must reach the whole process group.
    let hook = format!("sleep 600 & echo $! > {}; wait", pid.display());
    let started = Instant::now();
    let stderr = cli().fails(
        &sync_args(
            &bare,
            &commits[0],
            &target,
            &["--exec-after", &hook, "--hook-timeout", "1s", "--hook-retries", "0"],
        ),
        5,
    );
    assert!(started.elapsed() < Duration::from_secs(300), "the hook was not stopped");
    assert!(stderr.contains("still running after 1s (the hook timeout, --hook-timeout): killed; gave up"), "{stderr}");
    let sleeper = std::fs::read_to_string(&pid).expect("the hook started").trim().to_string();
    // Gone, or a zombie nobody reaped (its parent died too; pid 1 of a container may not reap).
    let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
    assert!(matches!(state, None | Some("Z")), "the hook's child {sleeper} was killed too: {stat}");
    assert_eq!(std::fs::read_to_string(target.join("index.html")).expect("synced"), "one\n");
}

/// One request as the listener read it.
#[derive(Debug, Clone)]
struct Request {
    line: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// A real HTTP listener on 127.0.0.1 answering the n-th request (from 0) with `status(n)`.
fn listener(status: impl Fn(usize) -> u16 + Send + 'static) -> (String, Arc<Mutex<Vec<Request>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hooks/site", l.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (n, conn) in l.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut line = String::new();
            reader.read_line(&mut line).expect("request line");
            let (mut length, mut content_type) = (0, None);
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).expect("header");
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (name, value) = h.split_once(':').expect("a header");
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().expect("length"),
                    "content-type" => content_type = Some(value.trim().to_string()),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("body");
            log.lock().expect("lock").push(Request { line: line.trim_end().to_string(), content_type, body });
            let code = status(n);
            let _ = write!(conn, "HTTP/1.1 {code} Status\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (url, seen)
}

#[test]
fn webhook_posts_the_sync_json_and_retries_a_failure() {
    let (bare, commits) = repo();
    let (_dir, target) = temp_target("site");
    let (url, seen) = listener(|n| if n == 0 { 500 } else { 200 });
    let out = cli().run(&sync_args(&bare, &commits[0], &target, &["--webhook", &url, "--json"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("hook webhook after"), "{stderr}");
    assert!(stderr.contains("(try 1 of 4): FAILED, HTTP 500 Internal Server Error; retrying in 1s"), "{stderr}");
    assert!(stderr.contains("(try 2 of 4): ok, HTTP 200 OK"), "{stderr}");
    let printed: Value = serde_json::from_slice(&out.stdout).expect("sync --json");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2, "one failure, one success: {seen:?}");
    for r in &seen {
        assert_eq!(r.line, "POST /hooks/site HTTP/1.1");
        assert_eq!(r.content_type.as_deref(), Some("application/json"));
        let body: Value = serde_json::from_slice(&r.body).expect("the body is JSON");
        valid(SYNC, &body);
        assert_eq!(body, printed, "the webhook gets what sync --json prints");
    }
}

#[test]
fn webhook_that_keeps_failing_is_given_up_and_sync_exits_5() {
    let (bare, commits) = repo();
    let (_dir, target) = temp_target("site");
    let (url, seen) = listener(|_| 503);
    let stderr = cli().fails(&sync_args(&bare, &commits[0], &target, &["--webhook", &url, "--hook-retries", "1"]), 5);
    assert_eq!(seen.lock().expect("lock").len(), 2, "{stderr}");
    assert!(stderr.contains("the webhook hook gave up after 2 tries (HTTP 503 Service Unavailable)"), "{stderr}");
    // Nothing changes now, so nothing is posted again, and the sync succeeds.
    cli().ok(&sync_args(&bare, &commits[0], &target, &["--webhook", &url]));
    assert_eq!(seen.lock().expect("lock").len(), 2);
}

#[test]
fn a_webhook_that_is_no_url_stops_the_sync_before_it_writes() {
    let (bare, commits) = repo();
    let (_dir, target) = temp_target("site");
    let stderr = cli().fails(&sync_args(&bare, &commits[0], &target, &["--webhook", "example.com/x"]), 2);
    assert!(stderr.contains("is not an http:// or https:// URL"), "{stderr}");
    assert!(!target.exists());
}

/// Read `watch --json` lines from `stdout` into `events` as they come.
fn collect(stdout: std::process::ChildStdout) -> Arc<Mutex<Vec<Value>>> {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let v: Value = serde_json::from_str(&line).expect("one JSON object per line");
            valid(WATCH_EVENT, &v);
            sink.lock().expect("lock").push(v);
        }
    });
    events
}

#[test]
fn watch_runs_hooks_after_each_sync_a_newer_sync_supersedes_a_retry_and_failures_never_stop_it() {
    let (bare, commits) = repo();
    let (dir, target) = temp_target("site");
    let log = dir.path().join("runs.log");
    // The exec hook fails for the second commit only (and would retry for minutes); the
    // webhook fails once.
    let hook = format!("{}; [ \"$TREESYNC_COMMIT\" != {} ]", env_hook(&log), commits[1]);
    let (url, posts) = listener(|n| if n == 0 { 500 } else { 200 });
    let mut child = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["watch", "--json", "--interval", "100ms", "--repo", s(&bare.path), "--ref", "main", "--target"])
        .arg(&target)
        .args(["--exec-after", &hook, "--webhook", &url, "--hook-retries", "9"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch starts");
    let events = collect(child.stdout.take().expect("piped"));
    let hooks = |kind: &str, commit: &str| -> Vec<Value> {
        events
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| e["event"] == "hook" && e["hook"] == kind && e["commit"] == commit)
            .cloned()
            .collect()
    };
    wait_for("the first sync's hooks", || {
        !hooks("exec", &commits[0]).is_empty() && hooks("webhook", &commits[0]).len() == 2
    });
    let exec = hooks("exec", &commits[0]);
    assert_eq!(
        (exec[0]["result"].as_str(), exec[0]["status"].as_u64(), exec[0]["attempt"].as_u64()),
        (Some("ok"), Some(0), Some(1))
    );
    let web = hooks("webhook", &commits[0]);
    assert_eq!(web[0]["result"], "retrying");
    assert_eq!(web[0]["retry_in_secs"], 1.0);
    assert_eq!(web[0]["status"], 500);
    assert_eq!(
        (web[1]["result"].as_str(), web[1]["status"].as_u64(), web[1]["attempt"].as_u64()),
        (Some("ok"), Some(200), Some(2))
    );
    assert_eq!(lines(&log), [format!("{}||{}|3|unset", commits[0], s(&target))]);

    // The next commit is synced; its exec hook fails, and the watch goes on.
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[1]]);
    wait_for("the second sync's failing hook", || !hooks("exec", &commits[1]).is_empty());
    assert_eq!(hooks("exec", &commits[1])[0]["result"], "retrying");
    assert_eq!(hooks("exec", &commits[1])[0]["status"], 1);
    // A newer sync while the hook waits to retry: the retry is dropped, the newer hook runs.
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[2]]);
    wait_for("the third sync's hook", || !hooks("exec", &commits[2]).is_empty());
    let older = hooks("exec", &commits[1]);
    assert_eq!(older.last().expect("reports")["result"], "superseded", "{older:#?}");
    assert!(older.iter().all(|e| e["result"] != "gave_up"));
    assert_eq!(hooks("exec", &commits[2])[0]["result"], "ok");
    let runs = lines(&log);
    assert_eq!(runs.last().expect("runs"), &format!("{}|{}|{}|1|unset", commits[2], commits[1], s(&target)));
    assert_eq!(runs.len(), 1 + older.len() - 1 + 1, "each try ran once: {runs:?}");
    assert_eq!(std::fs::read_to_string(target.join("about.html")).expect("synced"), "about\n");

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let out = child.wait_with_output().expect("watch exits");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let synced = events.lock().expect("lock").iter().filter(|e| e["event"] == "synced").count();
    assert_eq!(synced, 3);
    assert_eq!(posts.lock().expect("lock").len(), 2 + 2, "the webhook ran once for each later sync");
}

/// A listener on 127.0.0.1 that answers every request with `302 Found` and a `Location` of its
/// own URL (a redirect loop); the URL and how many requests came.
fn redirect_loop() -> (String, Arc<Mutex<usize>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hooks/site", l.local_addr().expect("addr"));
    let count = Arc::new(Mutex::new(0));
    let (seen, location) = (count.clone(), url.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut length = 0;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 {
                    break;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((name, value)) = h.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().expect("length");
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            *seen.lock().expect("lock") += 1;
            let _ = write!(
                conn,
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (url, count)
}

#[test]
fn a_webhook_that_redirects_is_not_followed_and_the_try_fails_naming_the_location() {
    let (bare, commits) = repo();
    let (_dir, target) = temp_target("site");
    let (url, posts) = redirect_loop();
    let stderr = cli().fails(&sync_args(&bare, &commits[0], &target, &["--webhook", &url, "--hook-retries", "1"]), 5);
    assert_eq!(*posts.lock().expect("lock"), 2, "one POST per try, no redirect followed: {stderr}");
    assert!(stderr.contains(&format!("HTTP 302 Found, redirected to {url} (not followed")), "{stderr}");
    assert_eq!(std::fs::read_to_string(target.join("index.html")).expect("synced"), "one\n");
}

/// The pid written to `path` by a hook, once it is there.
fn pid_in(path: &Path) -> String {
    wait_for("the hook to start", || std::fs::read_to_string(path).is_ok_and(|p| p.ends_with('\n')));
    std::fs::read_to_string(path).expect("pid").trim().to_string()
}

/// Whether process `pid` is gone (or a zombie nobody reaped).
fn gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    matches!(stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]), None | Some("Z"))
}

#[test]
fn sigterm_ends_a_hanging_hook_and_treesync_at_once() {
    let (bare, commits) = repo();
    let (dir, target) = temp_target("site");
    for command in ["sync", "watch"] {
        let pid = dir.path().join(format!("{command}.pid"));
        let _ = std::fs::remove_file(&pid);
        // A child in the background and a wait: the kill must reach the whole process group.
        let hook = format!("sleep 600 & echo $! > {}; wait", pid.display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_treesync"))
            .args([command, "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&target)])
            .args(["--exec-after", &hook, "--hook-timeout", "10m"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("treesync starts");
        let sleeper = pid_in(&pid);
        let asked = Instant::now();
        assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success());
        while child.try_wait().expect("wait").is_none() {
            assert!(asked.elapsed() < Duration::from_secs(20), "{command} still runs 20 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("exits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(asked.elapsed() < Duration::from_secs(5), "{command} took {:?} to stop: {stderr}", asked.elapsed());
        assert!(gone(&sleeper), "{command}: the hook's child {sleeper} was killed too");
        match command {
            "sync" => {
                assert_eq!(out.status.code(), Some(5), "{stderr}");
                assert!(stderr.contains("stopped by a signal"), "{stderr}");
            }
            _ => assert!(out.status.success(), "{stderr}"),
        }
        assert_eq!(std::fs::read_to_string(target.join("index.html")).expect("synced"), "one\n");
    }
}
