//! `--repo URL`: sync, plan, verify and watch from a real `git daemon` on 127.0.0.1 (and from
//! `file://`), through treesync's cache repository.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::cli;
use serde_json::Value;
use treesync_testkit::cli::s;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::git;
use treesync_testkit::gitdaemon::Served;

/// A served repository with a page, a stylesheet and an executable.
fn served() -> Served {
    Served::new(&[("index.html", "one\n"), ("css/site.css", "body {}\n"), ("bin/run", "#!/bin/sh\n")])
}

#[test]
fn sync_from_git_and_file_urls_writes_what_git_archive_has() {
    let s_ = served();
    let cache = s_.cache();
    let t1 = s_.dir.path().join("t1");
    cli().ok(&["sync", "-q", "--repo", &s_.url, "--ref", "main", "--target", s(&t1), "--cache-dir", s(&cache)]);
    assert!(s_.matches("main", &t1));
    let file_url = format!("file://{}", s_.bare.display());
    let t2 = s_.dir.path().join("t2");
    cli().ok(&["sync", "-q", "--repo", &file_url, "--ref", "main", "--target", s(&t2), "--cache-dir", s(&cache)]);
    assert!(s_.matches("main", &t2));
    let repos = std::fs::read_dir(cache.join("repos"))
        .expect("cache")
        .filter(|e| e.as_ref().expect("entry").file_name().to_string_lossy().ends_with(".git"));
    assert_eq!(repos.count(), 2, "one cache repository per URL");
}

#[test]
fn a_second_sync_asks_once_and_fetches_nothing() {
    let s_ = served();
    let (cache, t) = (s_.cache(), s_.dir.path().join("t"));
    let args = ["sync", "-q", "--repo", &s_.url, "--ref", "main", "--target", s(&t), "--cache-dir", s(&cache)];
    let before = s_.daemon.requests();
    cli().ok(&args);
    assert_eq!(s_.daemon.requests() - before, 2, "ls-refs and the first fetch");
    cli().ok(&args);
    assert_eq!(s_.daemon.requests() - before, 3, "ls-refs only");
    s_.commit(&[("news.html", "news\n")]);
    s_.push(&["main"]);
    cli().ok(&args);
    assert_eq!(s_.daemon.requests() - before, 5, "a push costs ls-refs and one fetch");
    assert!(s_.matches("main", &t));
    // plan and verify read the same cache.
    let plan = cli().ok(&["plan", "--repo", &s_.url, "--ref", "main", "--target", s(&t), "--cache-dir", s(&cache)]);
    assert!(plan.contains("total: no changes"), "{plan}");
    cli().ok(&["verify", "--repo", &s_.url, "--target", s(&t), "--cache-dir", s(&cache)]);
}

#[test]
fn a_bad_ref_and_a_server_that_is_down_are_clear_errors() {
    let mut s_ = served();
    let (cache, t) = (s_.cache(), s_.dir.path().join("t"));
    let err =
        cli().fails(&["sync", "--repo", &s_.url, "--ref", "nope", "--target", s(&t), "--cache-dir", s(&cache)], 2);
    assert!(err.contains(&s_.url) && err.contains("refs/heads/nope"), "{err}");
    assert!(err.contains(&format!("git ls-remote --heads --tags {}", s_.url)), "{err}");
    s_.daemon.stop();
    let err =
        cli().fails(&["sync", "--repo", &s_.url, "--ref", "main", "--target", s(&t), "--cache-dir", s(&cache)], 2);
    assert!(err.contains(&s_.url) && err.contains("is the server up?"), "{err}");
}

#[test]
fn two_processes_syncing_from_one_url_share_the_cache() {
    let s_ = served();
    let cache = s_.cache();
    let before = s_.daemon.requests();
    let children: Vec<_> = (0..2)
        .map(|i| {
            let t = s_.dir.path().join(format!("t{i}"));
            Command::new(env!("CARGO_BIN_EXE_treesync"))
                .args(["sync", "-q", "--repo", &s_.url, "--ref", "main", "--target", s(&t), "--cache-dir", s(&cache)])
                .stderr(Stdio::piped())
                .spawn()
                .expect("sync starts")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("sync ends");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(s_.matches("main", &s_.dir.path().join("t0")) && s_.matches("main", &s_.dir.path().join("t1")));
    assert_eq!(s_.daemon.requests() - before, 3, "two asks, one fetch: the second found it fetched");
}

#[test]
fn config_repo_may_be_a_url_with_its_cache_dir() {
    let s_ = served();
    let t = s_.dir.path().join("t");
    let config = ConfigFile::new()
        .defaults()
        .key("cache_dir", "cache")
        .mirror("site", &s_.url, "main", "t")
        .write_in(s_.dir.path());
    cli().ok(&["--config", s(&config), "sync", "-q", "site"]);
    assert!(s_.matches("main", &t));
    assert!(s_.cache().join("repos").is_dir(), "cache_dir is relative to the config file");
}

/// `treesync watch --json` events, as they come.
fn events(child: &mut std::process::Child) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    rx
}

/// The next event named `name` (others are skipped), within a generous deadline.
fn next(rx: &mpsc::Receiver<Value>, name: &str) -> Value {
    loop {
        let v = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|e| panic!("no {name} event: {e}"));
        if v["event"] == name {
            return v;
        }
    }
}

#[test]
fn watch_follows_pushes_force_pushes_and_a_server_that_comes_back() {
    let mut s_ = served();
    let (cache, t) = (s_.cache(), s_.dir.path().join("t"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["watch", "--json", "--repo", &s_.url, "--ref", "main", "--target", s(&t), "--cache-dir", s(&cache)])
        .args(["--interval", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch starts");
    let rx = events(&mut child);
    let watching = next(&rx, "watching");
    assert_eq!(watching["waits"], format!("asking {} every 100ms", s_.url));
    next(&rx, "synced");
    assert!(s_.matches("main", &t));

    s_.commit(&[("two.html", "two\n")]);
    s_.push(&["main"]);
    next(&rx, "synced");
    assert!(s_.matches("main", &t));

    git(&s_.work(), &["reset", "-q", "--hard", "HEAD~1"]);
    s_.commit(&[("rewritten.html", "r\n")]);
    s_.push(&["--force", "main"]);
    next(&rx, "synced");
    assert!(s_.matches("main", &t), "the force-push is followed");

    s_.daemon.stop();
    let retries: Vec<f64> = (0..3)
        .map(|_| {
            let e = next(&rx, "error");
            let message = e["message"].as_str().expect("message");
            assert!(message.contains(&s_.url) && message.contains("is the server up?"), "{message}");
            e["retry_in_secs"].as_f64().expect("retry_in_secs")
        })
        .collect();
    assert!(retries.windows(2).all(|w| w[1] > w[0]), "backoff grows: {retries:?}");
    s_.daemon.start_again();
    s_.commit(&[("back.html", "back\n")]);
    s_.push(&["main"]);
    next(&rx, "synced");
    assert!(s_.matches("main", &t), "synced again once the server is back");

    kill_term(child.id());
    let out = child.wait_with_output().expect("watch exits");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn kill_term(pid: u32) {
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill").success());
}
