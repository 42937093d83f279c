//! `treesync git-sync` running: its hooks (exechook, pre-publish, webhook), touch file, HTTP
//! health and metrics, the sync signal, and SIGKILL at random points — all observed from outside
//! the process, against a real `git daemon`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use treesync_testkit::cli::{s, wait_for, wait_for_up_to};
use treesync_testkit::git;
use treesync_testkit::gitdaemon::Served;

use crate::gitsync::{assert_like_git, exits, git_sync, link_of};

/// An executable shell script `dir/name` running `body`.
fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("script");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    path
}

/// A script that appends `GITSYNC_HASH PWD` to `out` and exits `code`.
fn hook_script(dir: &Path, name: &str, out: &Path, code: i32) -> String {
    let body = format!("echo \"$GITSYNC_HASH $PWD\" >> {}\nexit {code}\n", out.display());
    script(dir, name, &body).display().to_string()
}

/// A one-shot HTTP server on 127.0.0.1 answering every request with `status`; each request's
/// head arrives on the channel.
pub(crate) fn webhook_server(status: u16) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(
                format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").as_bytes(),
            );
            if tx.send(String::from_utf8_lossy(&head).into_owned()).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

#[test]
fn one_time_runs_the_hooks_once_and_their_failure_is_the_exit_code() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let head = git(&served.bare, &["rev-parse", "main"]);
    let dir = served.dir.path();
    let root = dir.join("root");
    let (exec_out, pre_out) = (dir.join("exec.out"), dir.join("pre.out"));
    let exec = hook_script(dir, "exec.sh", &exec_out, 0);
    let pre = hook_script(dir, "pre.sh", &pre_out, 0);
    let (url, requests) = webhook_server(200);
    exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&root),
            "--link",
            "l",
            "--one-time",
            "--exechook-command",
            &exec,
            "--pre-publish-exechook-command",
            &pre,
            "--webhook-url",
            &url,
            "--webhook-method",
            "PUT",
            "--touch-file",
            "synced",
        ],
        0,
    );
    let worktree = std::fs::canonicalize(&root).expect("root").join(".worktrees").join(&head);
    assert_eq!(std::fs::read_to_string(&exec_out).expect("exechook ran"), format!("{head} {}\n", worktree.display()));
    assert_eq!(std::fs::read_to_string(&pre_out).expect("pre-publish ran"), format!("{head} {}\n", worktree.display()));
    let request = requests.recv_timeout(Duration::from_secs(10)).expect("the webhook was called");
    assert!(request.starts_with("PUT /hook "), "{request}");
    assert!(request.to_ascii_lowercase().contains(&format!("gitsync-hash: {head}")), "{request}");
    assert!(root.join("synced").is_file(), "touch file");
    // Again with the same hash: the exechook fires again (the first sync of a process), the
    // pre-publish hook does not (the link did not move), and the run does not wait for it.
    exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&root),
            "--link",
            "l",
            "--one-time",
            "--exechook-command",
            &exec,
            "--pre-publish-exechook-command",
            &pre,
        ],
        0,
    );
    assert_eq!(std::fs::read_to_string(&exec_out).expect("out").lines().count(), 2);
    assert_eq!(std::fs::read_to_string(&pre_out).expect("out").lines().count(), 1);
    // A failing exechook: one try, exit 1, the link still published.
    let root2 = dir.join("root2");
    let failing = hook_script(dir, "fail.sh", &dir.join("fail.out"), 3);
    let err = exits(&["--repo", &served.url, "--root", s(&root2), "--one-time", "--exechook-command", &failing], 1);
    assert!(err.contains("hook failed"), "{err}");
    assert_eq!(link_of(&root2.join("site.git")).0, head);
    // A webhook answering another status than the one asked for fails too.
    let (url, _requests) = webhook_server(500);
    let err = exits(&["--repo", &served.url, "--root", s(&dir.join("root3")), "--one-time", "--webhook-url", &url], 1);
    assert!(err.contains("received response code 500 expected 200"), "{err}");
}

/// A running `treesync git-sync` (killed on drop), its stderr drained.
struct Running {
    child: Child,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = git_sync().args(args).stderr(Stdio::piped()).stdout(Stdio::null()).spawn().expect("spawn");
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).for_each(drop));
        Running { child }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("response");
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

#[test]
fn the_signal_syncs_at_once_and_health_and_metrics_say_so() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let root = served.dir.path().join("root");
    let addr = format!("127.0.0.1:{}", free_port());
    let exec_out = served.dir.path().join("exec.out");
    let exec = hook_script(served.dir.path(), "exec.sh", &exec_out, 0);
    let running = Running::start(&[
        "--repo",
        &served.url,
        "--root",
        s(&root),
        "--link",
        "l",
        "--period",
        "1h",
        "--sync-on-signal",
        "SIGHUP",
        "--http-bind",
        &addr,
        "--http-metrics",
        "--exechook-command",
        &exec,
    ]);
    let link = root.join("l");
    wait_for("the first sync", || link.exists());
    wait_for("healthy", || std::net::TcpStream::connect(&addr).is_ok() && http_get(&addr, "/").0 == 200);
    assert_eq!(http_get(&addr, "/any/path").0, 200, "health answers at every path");
    let first = git(&served.bare, &["rev-parse", "main"]);
    let second = served.commit(&[("b.txt", "b\n")]);
    served.push(&["main"]);
    // --period is an hour: only the signal can bring the new commit in.
    running.signal(libc::SIGHUP);
    wait_for_up_to("the signalled sync", Duration::from_secs(30), || link_of(&link).0 == second);
    assert_like_git(&served.bare, &second, &link);
    wait_for("the exechook of the second commit", || {
        std::fs::read_to_string(&exec_out).is_ok_and(|t| t.lines().count() == 2)
    });
    let ran: Vec<String> = std::fs::read_to_string(&exec_out)
        .expect("out")
        .lines()
        .map(|l| l.split(' ').next().expect("hash").to_string())
        .collect();
    assert_eq!(ran, [first, second]);
    // git-sync's metrics, read with a parser of the text format.
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                prometheus_parse::Value::Gauge(v) => v,
                _ => f64::NAN,
            })
            .unwrap_or_else(|| panic!("no {name} {label:?} in\n{body}"))
    };
    assert_eq!(value("git_sync_count_total", Some(("status", "success"))), 2.0);
    assert_eq!(value("git_fetch_count_total", None), 2.0);
    assert_eq!(value("git_sync_hook_run_count_total", Some(("name", "exechook"))), 2.0);
    assert_eq!(value("treesync_gitsync_worktrees_total", Some(("how", "clone"))), 1.0);
    assert!(body.contains("git_sync_duration_seconds_count{status=\"success\"} 2"), "{body}");
    drop(running);
}

#[test]
fn sigkill_at_random_points_never_leaves_the_link_on_a_partial_worktree() {
    let files: Vec<(String, String)> =
        (0..400).map(|i| (format!("d{}/f{i}", i % 13), format!("{i}\n").repeat(50))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let served = Served::new(&refs);
    let root = served.dir.path().join("root");
    let link = root.join("l");
    let args = ["--repo", &served.url, "--root", s(&root), "--link", "l", "--period", "10ms", "--max-failures", "-1"];
    let mut rng = treesync_testkit::Rng::new(7);
    // Each trial: a new commit rewriting half the files, a run killed after a random delay
    // within how long a whole run takes (measured first), so kills land in every step: the
    // fetch, the copy or reuse, the sync, the index, the switch, the cleanup.
    let mut trial = 0;
    let mut push = |rng: &mut treesync_testkit::Rng| {
        trial += 1;
        let changes: Vec<(String, String)> = (0..200)
            .map(|k| (format!("d{}/f{}", k % 13, rng.below(400)), format!("trial {trial} {k}\n").repeat(40)))
            .collect();
        let change_refs: Vec<(&str, &str)> = changes.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
        served.commit(&change_refs);
        served.push(&["main"]);
    };
    let one_time: Vec<&str> = args.iter().copied().chain(["--one-time"]).collect();
    exits(&one_time, 0);
    push(&mut rng);
    let started = std::time::Instant::now();
    exits(&one_time, 0);
    let whole = started.elapsed().as_millis() as usize;
    let trials = std::env::var("TREESYNC_GITSYNC_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let mut killed_before_switch = 0;
    for _ in 0..trials {
        push(&mut rng);
        let running = Running::start(&args);
        std::thread::sleep(Duration::from_millis(rng.below(whole * 6 / 5 + 1) as u64));
        running.signal(libc::SIGKILL);
        drop(running);
        // Whatever LINK points at is a whole worktree of its commit.
        let (hash, _) = link_of(&link);
        assert_like_git(&served.bare, &hash, &link);
        killed_before_switch += usize::from(hash != git(&served.bare, &["rev-parse", "main"]));
    }
    // Some kills came before the switch (else the test proves nothing about it).
    assert!(killed_before_switch > 0, "every run finished before its kill: {whole} ms per run");
    // A plain rerun finishes the job.
    exits(&["--repo", &served.url, "--root", s(&root), "--link", "l", "--one-time"], 0);
    let head = git(&served.bare, &["rev-parse", "main"]);
    assert_eq!(link_of(&link).0, head);
    assert_like_git(&served.bare, &head, &link);
}

#[test]
fn as_pid_1_it_runs_itself_as_a_child_and_passes_its_exit_code_on() {
    // A new PID namespace (as a container gives): treesync is PID 1 there.
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let ps_out = dir.join("ps.out");
    let ps = script(dir, "ps.sh", &format!("ps -eo pid,ppid,args > {}\nsleep 0.2 &\nexit 0\n", ps_out.display()));
    let in_namespace = |root: &str, hook: &str| -> i32 {
        std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", env!("CARGO_BIN_EXE_treesync"), "git-sync"])
            .args(["--repo", &served.url, "--root", root, "--one-time", "--exechook-command", hook])
            .stderr(Stdio::null())
            .status()
            .expect("unshare (util-linux) runs")
            .code()
            .unwrap_or(-1)
    };
    assert_eq!(in_namespace(s(&dir.join("r1")), s(&ps)), 0);
    let ps = std::fs::read_to_string(&ps_out).expect("the hook ran");
    let init = ps.lines().find(|l| l.split_whitespace().next() == Some("1")).expect("PID 1");
    assert!(init.contains("treesync git-sync"), "{ps}");
    assert!(
        ps.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"1") && l.contains("git-sync")
        }),
        "the syncing process is PID 1's child: {ps}"
    );
    assert_eq!(in_namespace(s(&dir.join("r2")), "/bin/false"), 1, "a failed hook's exit code, through PID 1");
}

/// The cleanup after a sync (`git worktree prune`, `git reflog expire`, `git gc`) runs within
/// `--sync-timeout`, as git-sync runs it within the iteration's deadline: a `git gc` that
/// does not end is killed there and logged, and `--one-time` still exits.
#[test]
fn the_cleanup_git_runs_is_killed_at_the_sync_timeout() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let wrapper =
        script(dir, "git-wrapper", "for a in \"$@\"; do [ \"$a\" = gc ] && exec sleep 600; done\nexec git \"$@\"\n");
    let root = dir.join("root");
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time", "--git", s(&wrapper), "--sync-timeout", "3s"];
    exits(&args, 0);
    // A stray entry: the cleanup removes it, then prunes and collects garbage.
    std::fs::write(root.join(".worktrees/stray"), "x").expect("stray");
    let mut running =
        Running { child: git_sync().args(args).stderr(Stdio::piped()).stdout(Stdio::null()).spawn().expect("spawn") };
    let mut stderr = running.child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let err = rx.recv_timeout(Duration::from_secs(60)).expect("the run ends within a minute");
    assert_eq!(running.child.wait().expect("exited").code(), Some(0), "{err}");
    let failed = crate::gitsync::lines_with(&err, "git cleanup failed");
    assert!(
        failed.iter().any(|l| l["error"].as_str().is_some_and(|e| e.contains("gc") && e.contains("deadline"))),
        "{err}"
    );
    assert!(!root.join(".worktrees/stray").exists());
}

/// The webhook follows redirects, as git-sync's (Go's default HTTP client) does: a URL that
/// answers 307 with a Location gets the request there, and its 200 is the success.
#[test]
fn the_webhook_follows_a_redirect() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let head = git(&served.bare, &["rev-parse", "main"]);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let answer = if head.starts_with("POST /moved ") {
                format!(
                    "HTTP/1.1 307 X\r\nLocation: http://{addr}/here\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            } else {
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            };
            let _ = stream.write_all(answer.as_bytes());
            if tx.send(head).is_err() {
                return;
            }
        }
    });
    let url = format!("http://{addr}/moved");
    let root = served.dir.path().join("root");
    exits(&["--repo", &served.url, "--root", s(&root), "--one-time", "--webhook-url", &url], 0);
    let first = rx.recv_timeout(Duration::from_secs(10)).expect("the webhook was called");
    assert!(first.starts_with("POST /moved "), "{first}");
    let second = rx.recv_timeout(Duration::from_secs(10)).expect("the redirect was followed");
    assert!(second.starts_with("POST /here "), "{second}");
    assert!(second.to_ascii_lowercase().contains(&format!("gitsync-hash: {head}")), "{second}");
}

/// A process started on a root LINK already names the remote's commit counts its first sync as
/// git-sync does: `update required` logged and `git_fetch_count_total` 1 (git-sync counts the
/// first sync of a process as an update, whatever the hash).
#[test]
fn the_first_sync_of_a_process_is_counted_as_an_update() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let root = served.dir.path().join("root");
    exits(&["--repo", &served.url, "--root", s(&root), "--one-time"], 0);
    let addr = format!("127.0.0.1:{}", free_port());
    let running = Running::start(&[
        "--repo",
        &served.url,
        "--root",
        s(&root),
        "--period",
        "1h",
        "--http-bind",
        &addr,
        "--http-metrics",
    ]);
    wait_for("healthy", || std::net::TcpStream::connect(&addr).is_ok() && http_get(&addr, "/").0 == 200);
    let (_, body) = http_get(&addr, "/metrics");
    assert!(body.lines().any(|l| l == "git_fetch_count_total 1"), "{body}");
    assert!(body.lines().any(|l| l == "git_sync_count_total{status=\"success\"} 1"), "{body}");
    drop(running);
}

/// At `--sync-timeout` the whole git command is killed, with the programs it runs (ssh, a
/// remote helper: here a `sleep` child of the git program), not only git itself: those kept
/// the output pipes open, and the run waited for them (`--one-time` exited 30 s later).
#[test]
fn the_sync_timeout_kills_what_git_runs_too() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let wrapper = script(
        dir,
        "git-wrapper",
        "for a in \"$@\"; do [ \"$a\" = fetch ] && { sleep 30; exit 1; }; done\nexec git \"$@\"\n",
    );
    let root = dir.join("root");
    let started = std::time::Instant::now();
    let err = exits(
        &["--repo", &served.url, "--root", s(&root), "--one-time", "--git", s(&wrapper), "--sync-timeout", "1s"],
        1,
    );
    assert!(err.contains("--sync-timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "exited after {:?}: {err}", started.elapsed());
}
