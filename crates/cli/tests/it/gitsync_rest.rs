//! The rest of `treesync git-sync`'s flags, each against a real `git daemon`: `--git`, the
//! hooks' timeouts and backoffs, the webhook's timeout and `--webhook-success-status -1`,
//! `--git-config-add`, `--ssh-known-hosts-file`, `--cookie-file`, `--add-user`, `--http-bind`
//! without `--http-metrics`, `--version` and `--man`.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use treesync_testkit::cli::s;
use treesync_testkit::gitdaemon::Served;

use crate::gitsync::{exits, git_sync, run};
use crate::gitsync_run::webhook_server;

#[test]
fn git_is_the_one_named_and_its_config_adds_up() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    // --git: a wrapper that records each command, then runs the real git.
    let log = dir.join("git.log");
    let wrapper = dir.join("mygit");
    std::fs::write(&wrapper, format!("#!/bin/sh\necho \"$1\" >> {}\nexec git \"$@\"\n", log.display()))
        .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = dir.join("env.out");
    let script = dir.join("env.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ git config --global --get-all x.y; echo \"SSH=$GIT_SSH_COMMAND\"; }} > {}\n",
            out.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&dir.join("r")),
            "--one-time",
            "--git",
            s(&wrapper),
            "--git-config",
            "x.y:1",
            "--git-config-add",
            "x.y:2",
            "--git-config-add",
            "x.z:3",
            "--ssh-known-hosts-file",
            "/etc/kh",
            "--exechook-command",
            s(&script),
        ],
        0,
    );
    let ran = std::fs::read_to_string(&log).expect("the wrapper ran");
    for command in ["version", "config", "fetch"] {
        assert!(ran.lines().any(|l| l == command), "git {command} did not go through --git: {ran}");
    }
    let env = std::fs::read_to_string(&out).expect("the hook ran");
    // `git config --global` replaces a key's value: the last one given wins, as in git-sync.
    assert!(env.starts_with("2\n"), "{env}");
    assert!(env.contains("-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/kh"), "{env}");
}

#[test]
fn hook_timeouts_kill_and_backoffs_retry() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    // A hook that outlives --exechook-timeout is killed and counts as failed.
    let slow = dir.join("slow.sh");
    std::fs::write(&slow, "#!/bin/sh\nsleep 30\n").expect("script");
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let started = Instant::now();
    let err = exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&dir.join("r1")),
            "--one-time",
            "--exechook-command",
            s(&slow),
            "--exechook-timeout",
            "1s",
        ],
        1,
    );
    assert!(started.elapsed() < Duration::from_secs(20), "the hook was not killed at its timeout");
    assert!(err.contains("context deadline exceeded"), "{err}");
    // A failing hook is tried again after --exechook-backoff, with the same hash, until it
    // succeeds (here: the second try).
    let counter = dir.join("tries");
    let flaky = dir.join("flaky.sh");
    std::fs::write(&flaky, format!("#!/bin/sh\necho x >> {c}\n[ $(wc -l < {c}) -ge 2 ]\n", c = counter.display()))
        .expect("script");
    std::fs::set_permissions(&flaky, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut child = git_sync()
        .args([
            "--repo",
            &served.url,
            "--root",
            s(&dir.join("r2")),
            "--period",
            "1h",
            "--exechook-command",
            s(&flaky),
            "--exechook-backoff",
            "1s",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    treesync_testkit::cli::wait_for_up_to("the retried hook", Duration::from_secs(30), || {
        std::fs::read_to_string(&counter).is_ok_and(|t| t.lines().count() >= 2)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(std::fs::read_to_string(&counter).expect("tries").lines().count(), 2, "retried once, then done");
    // A webhook that never answers fails at --webhook-timeout.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/", silent.local_addr().expect("addr"));
    let started = Instant::now();
    let err = exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&dir.join("r3")),
            "--one-time",
            "--webhook-url",
            &url,
            "--webhook-timeout",
            "1s",
        ],
        1,
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{err}");
    assert!(err.contains("error sending webhook"), "{err}");
    drop(silent);
    // --webhook-success-status -1: any answer is a success.
    let (url, requests) = webhook_server(500);
    exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&dir.join("r4")),
            "--one-time",
            "--webhook-url",
            &url,
            "--webhook-success-status",
            "-1",
        ],
        0,
    );
    assert!(requests.recv_timeout(Duration::from_secs(5)).is_ok());
}

#[test]
fn cookie_file_add_user_http_bind_version_and_man() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    // --cookie-file needs /etc/git-secret/cookie_file (a fixed path, as in git-sync).
    if !std::path::Path::new("/etc/git-secret/cookie_file").exists() {
        let err = exits(&["--repo", &served.url, "--root", s(&dir.join("r1")), "--one-time", "--cookie-file"], 1);
        assert!(err.contains("can't access the cookie file"), "{err}");
    }
    // --add-user: a UID that /etc/passwd already has (root here) is left as it is.
    let before = std::fs::read("/etc/passwd").expect("passwd");
    exits(&["--repo", &served.url, "--root", s(&dir.join("r2")), "--one-time", "--add-user"], 0);
    assert_eq!(std::fs::read("/etc/passwd").expect("passwd"), before);
    // --http-bind without --http-metrics: the health answer everywhere, /metrics included.
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = git_sync()
        .args(["--repo", &served.url, "--root", s(&dir.join("r3")), "--period", "1h", "--http-bind", &addr])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let get = |path: &str| -> Option<(u16, String)> {
        let mut stream = std::net::TcpStream::connect(&addr).ok()?;
        std::io::Write::write_all(&mut stream, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some((text.split(' ').nth(1)?.parse().ok()?, text))
    };
    treesync_testkit::cli::wait_for("healthy", || get("/").is_some_and(|(code, _)| code == 200));
    let (code, text) = get("/metrics").expect("answers");
    assert_eq!(code, 200);
    assert!(!text.contains("git_sync_count_total"), "metrics without --http-metrics: {text}");
    let _ = child.kill();
    let _ = child.wait();
    // --version and --man print and exit 0.
    let o = run(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("treesync "));
    let o = run(&["--man"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--stale-worktree-timeout"));
}
