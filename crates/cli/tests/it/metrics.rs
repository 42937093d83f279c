//! `watch --metrics-addr`: Prometheus metrics and /healthz over real HTTP, read with a parser of
//! the text format; and systemd's notify protocol over a real Unix datagram socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cli;
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::Value as Json;
use treesync_testkit::cli::s;
use treesync_testkit::cli::wait_for;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::git;

/// A repository with a working tree and one commit on `main`.
fn repo(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(&repo, "a.txt", "one\n");
    repo
}

fn commit(repo: &Path, name: &str, content: &str) {
    if let Some(parent) = Path::new(name).parent() {
        std::fs::create_dir_all(repo.join(parent)).expect("mkdir");
    }
    std::fs::write(repo.join(name), content).expect("write");
    git(repo, &["add", "-A"]);
    git(repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name]);
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// One HTTP/1.1 request on a fresh connection: the status code and the body.
fn http(port: u16, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to --metrics-addr");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (status, head.to_string(), body.to_string())
}

/// Send `request` as it is on a fresh connection and read the response until the server closes
/// it, waiting at most `timeout` for each read: the status code and the whole response.
fn raw_request(port: u16, request: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split(' ').nth(1).and_then(|c| c.parse().ok());
    let status = status.ok_or_else(|| std::io::Error::other(format!("no status line: {response:?}")))?;
    Ok((status, response))
}

/// `GET /metrics`, parsed.
fn scrape(port: u16) -> Scrape {
    let (status, head, body) = http(port, "GET", "/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the text format parses")
}

/// The value of the one sample `name` with the labels `labels` (besides mirror and target).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "one sample {name}{labels:?}: {found:?}");
    match &found[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

/// `treesync watch ARGS`, its stdout lines collected as they come.
struct Watch {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Watch {
        let mut command = Command::new(env!("CARGO_BIN_EXE_treesync"));
        command.arg("watch").args(args).envs(env.iter().copied());
        Watch::spawn(command)
    }

    /// `treesync watch ARGS` with at most `nofile` file descriptors (`ulimit -n`).
    fn start_limited(nofile: u32, args: &[&str]) -> Watch {
        let mut command = Command::new("sh");
        command
            .args(["-c", &format!("ulimit -n {nofile} && exec \"$0\" watch \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_treesync"))
            .args(args);
        Watch::spawn(command)
    }

    fn spawn(mut command: Command) -> Watch {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("watch starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, seen) = (child.stdout.take().expect("stdout"), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                seen.lock().expect("lines").push(line);
            }
        });
        Watch { child, lines }
    }

    /// The `--json` events named `name` so far.
    fn events(&self, name: &str) -> Vec<Json> {
        let lines = self.lines.lock().expect("lines");
        lines
            .iter()
            .map(|l| serde_json::from_str::<Json>(l).expect("a JSON line"))
            .filter(|v| v["event"] == name)
            .collect()
    }

    fn wait_events(&self, name: &str, n: usize) -> Vec<Json> {
        wait_for(&format!("{n} {name} events"), || self.events(name).len() >= n);
        self.events(name)
    }

    /// SIGTERM, and the exit status and stderr.
    fn stop(self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        self.stop_waiting()
    }

    /// SIGTERM, and the watch must exit 0.
    fn stop_cleanly(self) {
        let (status, stderr) = self.stop();
        assert!(status.success(), "{stderr}");
    }
}

#[test]
fn metrics_count_what_the_synced_events_report_and_healthz_names_a_broken_target() {
    let Served { _dir, repo, target, port, watch } = served(None);
    commit(&repo, "b/c.txt", "two, a longer file\n");
    watch.wait_events("synced", 2);
    std::fs::remove_file(repo.join("a.txt")).expect("rm");
    commit(&repo, "d.txt", "three\n");
    let synced = watch.wait_events("synced", 3);
    // Wait for the step after the third sync, so that its success is told to /healthz.
    wait_for("healthz ok", || http(port, "GET", "/healthz").0 == 200);

    let m = scrape(port);
    let sum =
        |field: &str| synced.iter().map(|e| e["outcome"]["applied"][field].as_u64().expect("a count")).sum::<u64>();
    assert_eq!(value(&m, "treesync_syncs_total", &[("mirror", "main")]), 3.0, "the first sync and one per commit");
    for kind in ["mkdir", "write", "symlink", "chmod", "unlink", "rmdir"] {
        assert_eq!(value(&m, "treesync_ops_total", &[("kind", kind)]), sum(kind) as f64, "{kind} ops as --json says");
    }
    assert_eq!((sum("write"), sum("unlink"), sum("mkdir")), (3, 1, 1), "the three commits' changes");
    assert_eq!(value(&m, "treesync_bytes_total", &[]), sum("bytes") as f64);
    let histogram = m.samples.iter().find(|s| s.metric == "treesync_sync_duration_seconds").expect("the histogram");
    match &histogram.value {
        Value::Histogram(buckets) => {
            let inf = buckets.iter().find(|b| b.less_than == f64::INFINITY).expect("+Inf bucket");
            assert_eq!(inf.count, 3.0, "{buckets:?}");
            assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count), "cumulative: {buckets:?}");
        }
        other => panic!("not a histogram: {other:?}"),
    }
    let head_time: f64 = git(&repo, &["log", "-1", "--format=%ct"]).parse().expect("a commit time");
    assert_eq!(value(&m, "treesync_synced_commit_timestamp_seconds", &[]), head_time);
    assert!(value(&m, "treesync_last_sync_timestamp_seconds", &[]) > 1.7e9);
    assert_eq!(value(&m, "treesync_lag_seconds", &[]), 0.0, "at the ref");
    assert_eq!(value(&m, "treesync_failures_total", &[]), 0.0);
    assert_eq!(value(&m, "treesync_healthy", &[]), 1.0);
    assert_eq!(http(port, "GET", "/healthz").2, "ok\n");
    assert_eq!(http(port, "GET", "/nope").0, 404);
    assert_eq!(http(port, "POST", "/metrics").0, 405);
    let (status, head, body) = http(port, "HEAD", "/metrics");
    assert_eq!((status, body.as_str()), (200, ""), "{head}");

    // Break the target (a file where its directory was) and push: the sync fails and is retried.
    std::fs::remove_dir_all(&target).expect("rm target");
    std::fs::write(&target, "not a directory").expect("write");
    commit(&repo, "e.txt", "four\n");
    watch.wait_events("error", 1);
    let (status, _, body) = http(port, "GET", "/healthz");
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("main: "), "names the failing mirror: {body}");
    let m = scrape(port);
    assert!(value(&m, "treesync_failures_total", &[]) >= 1.0);
    assert!(value(&m, "treesync_lag_seconds", &[]) > 0.0, "behind the ref since the push");
    assert_eq!(value(&m, "treesync_healthy", &[]), 0.0);
    assert_eq!(value(&m, "treesync_syncs_total", &[]), 3.0);

    watch.stop_cleanly();
}

#[test]
fn a_metrics_address_in_use_is_named_with_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let target = dir.path().join("t");
    let err = cli()
        .fails(&["watch", "--repo", s(&repo), "--ref", "main", "--target", s(&target), "--metrics-addr", &addr], 2);
    assert!(err.contains(&format!("cannot listen on {addr} for --metrics-addr")), "{err}");
    assert!(err.contains("hint: another process listens on"), "{err}");
    assert!(!target.exists(), "nothing synced before the listener is up");
}

#[test]
fn metrics_addr_of_the_config_serves_every_mirror_of_watch_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    let port = free_port();
    let config = ConfigFile::new()
        .defaults()
        .key("interval", "100ms")
        .key("metrics_addr", format!("127.0.0.1:{port}"))
        .mirror("one", &repo, "main", dir.path().join("one"))
        .mirror("two", &repo, "main", dir.path().join("two"))
        .write_in(dir.path());
    let watch = Watch::start(&["--config", s(&config), "--all", "--json"], &[]);
    watch.wait_events("synced", 2);
    wait_for("healthz ok", || http(port, "GET", "/healthz").0 == 200);
    let m = scrape(port);
    for mirror in ["one", "two"] {
        assert_eq!(value(&m, "treesync_syncs_total", &[("mirror", mirror)]), 1.0, "{mirror}");
    }
    watch.stop_cleanly();
}

#[test]
fn systemd_is_told_ready_then_watchdog_pings_then_stopping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let target = dir.path().join("t");
    let watch = Watch::start(
        &["--repo", s(&repo), "--ref", "main", "--target", s(&target), "--interval", "100ms"],
        &[("NOTIFY_SOCKET", s(&socket_path)), ("WATCHDOG_USEC", "200000")],
    );
    let mut messages: Vec<String> = Vec::new();
    let mut receive = |until: &dyn Fn(&[String]) -> bool| {
        while !until(&messages) {
            let mut buf = [0u8; 4096];
            let n = socket.recv(&mut buf).expect("a message from the watch within 30s");
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        messages.clone()
    };
    let got = receive(&|m| m.iter().filter(|m| *m == "WATCHDOG=1").count() >= 3);
    let ready = got.iter().position(|m| m == "READY=1").expect("READY=1 before the pings");
    assert!(target.join("a.txt").exists(), "READY=1 comes after the first sync");
    assert!(got[..ready].iter().all(|m| !m.starts_with("STOPPING")), "{got:?}");
    assert!(got.iter().any(|m| m.starts_with("STATUS=1 mirror: 1 ok; last sync ")), "{got:?}");

    let pid = watch.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    receive(&|m| m.iter().any(|m| m.starts_with("STOPPING=1")));
    let (status, stderr) = watch.stop_waiting();
    assert!(status.success(), "{stderr}");
}

#[test]
fn the_watchdog_is_silent_while_a_sync_hangs_and_pings_again_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    // A smudge filter that hangs until the test lets it go: a sync stuck on a dead server.
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let smudge = format!("touch {}; while [ ! -e {} ]; do sleep 0.05; done; cat", s(&started), s(&go));
    git(&repo, &["config", "filter.slow.smudge", &smudge]);
    commit(&repo, ".gitattributes", "*.slow filter=slow\n");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let target = dir.path().join("t");
    let watch = Watch::start(
        &["--repo", s(&repo), "--ref", "main", "--target", s(&target), "--interval", "100ms"],
        &[("NOTIFY_SOCKET", s(&socket_path)), ("WATCHDOG_USEC", "200000")],
    );
    let recv = |timeout: Duration| -> Option<String> {
        socket.set_read_timeout(Some(timeout)).expect("timeout");
        let mut buf = [0u8; 4096];
        socket.recv(&mut buf).ok().map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let pings_within = |window: Duration| {
        let end = Instant::now() + window;
        let mut pings = 0;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match recv(left.max(Duration::from_millis(1))) {
                Some(m) if m == "WATCHDOG=1" => pings += 1,
                Some(_) => {}
                None => break,
            }
        }
        pings
    };
    let mut pings = 0;
    wait_for("three pings while idle", || {
        pings += pings_within(Duration::from_millis(100));
        pings >= 3
    });

    commit(&repo, "x.slow", "slow\n");
    wait_for("the sync to hang in the filter", || started.exists());
    // A ping may still be on its way for the beats before the hang; after that, silence.
    pings_within(Duration::from_millis(300));
    assert_eq!(pings_within(Duration::from_secs(1)), 0, "no WATCHDOG=1 while the loop is stuck (5 periods)");

    std::fs::write(&go, "").expect("let the filter go");
    let mut pings = 0;
    wait_for("pings after the sync", || {
        pings += pings_within(Duration::from_millis(100));
        pings >= 2
    });
    assert_eq!(std::fs::read_to_string(target.join("x.slow")).expect("synced"), "slow\n");
    watch.stop_cleanly();
}

impl Watch {
    /// Wait for a watch that was already sent SIGTERM.
    fn stop_waiting(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("watch exits");
        let mut stderr = String::new();
        self.child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("stderr");
        (status, stderr)
    }
}

/// A repository, a target, and a watch of it (`--interval 100ms --json`, with at most `nofile`
/// descriptors if given) serving metrics on a free port, after its first sync.
struct Served {
    _dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    target: std::path::PathBuf,
    port: u16,
    watch: Watch,
}

fn served(nofile: Option<u32>) -> Served {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = repo(dir.path());
    let target = dir.path().join("target");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let args = ["--repo", s(&repo), "--ref", "main", "--target", s(&target), "--interval", "100ms", "--json"];
    let args = [&args[..], &["--metrics-addr", &addr]].concat();
    let watch = match nofile {
        Some(n) => Watch::start_limited(n, &args),
        None => Watch::start(&args, &[]),
    };
    watch.wait_events("synced", 1);
    Served { _dir: dir, repo, target, port, watch }
}

/// The listener's connection cap (docs/metrics.md).
const MAX_CONNECTIONS: usize = 64;

#[test]
fn healthz_answers_and_pushes_sync_while_more_idle_connections_than_the_cap_are_open() {
    // 256 descriptors (systemd's default is 1024): more idle connections than that would
    // leave none for the watch and the listener without a cap.
    let Served { _dir, repo, target, port, watch } = served(Some(256));
    wait_for("healthz ok", || http(port, "GET", "/healthz").0 == 200);

    // Idle connections that never send a byte: more than the cap, and than the descriptors.
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect an idle client")
        })
        .collect();
    assert!(idle.len() > MAX_CONNECTIONS);
    // Each attempt waits 1 s at most, all of them far less than the 10 s after which the
    // listener drops a connection that sent nothing: an answer here is no timeout's doing.
    let mut answers = Vec::new();
    for _ in 0..5 {
        let answer = raw_request(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(1));
        let answered = matches!(answer, Ok((200, _)));
        answers.push(answer.map(|(status, _)| status).map_err(|e| e.to_string()));
        if answered {
            break;
        }
    }
    assert!(answers.last().is_some_and(|a| *a == Ok(200)), "/healthz answers 200 within 5 attempts: {answers:?}");

    // The watch still has descriptors: a push is synced while the idle connections stay open.
    commit(&repo, "b.txt", "two\n");
    watch.wait_events("synced", 2);
    assert_eq!(std::fs::read_to_string(target.join("b.txt")).expect("synced"), "two\n");
    assert!(watch.events("error").is_empty(), "no step failed: {:?}", watch.events("error"));
    drop(idle);
    watch.stop_cleanly();
}

#[test]
fn a_request_head_ending_in_bare_newlines_is_answered_at_once() {
    let Served { _dir, repo: _, target: _, port, watch } = served(None);
    wait_for("healthz ok", || http(port, "GET", "/healthz").0 == 200);
    // `\n\n` ends the head as `\r\n\r\n` does; the 3 s read timeout is well below the
    // listener's 10 s timeout for a head that never ends.
    for request in
        ["GET /healthz HTTP/1.1\nHost: x\n\n", "GET /healthz HTTP/1.0\n\n", "GET /healthz HTTP/1.1\nHost: x\r\n\r\n"]
    {
        let (status, response) = raw_request(port, request, Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("{request:?} is answered within 3 s: {e}"));
        assert_eq!(status, 200, "{request:?}: {response}");
        assert!(response.ends_with("\r\n\r\nok\n"), "{request:?}: {response}");
    }
    watch.stop_cleanly();
}

#[test]
fn running_out_of_descriptors_is_named_with_a_hint_and_the_watch_goes_on_after() {
    // The watch itself holds about 20 descriptors: 48 leave fewer than the listener's cap.
    let Served { _dir, repo, target, port, watch } = served(Some(48));
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect an idle client")
        })
        .collect();
    commit(&repo, "b.txt", "two\n");
    let errors = watch.wait_events("error", 1);
    let message = errors[0]["message"].as_str().expect("a message");
    assert!(message.starts_with("out of file descriptors while "), "{message}");
    assert!(message.contains("hint: raise the descriptor limit: LimitNOFILE= in the unit"), "{message}");
    assert!(!message.contains("revision"), "the revision is not to blame: {message}");

    drop(idle);
    watch.wait_events("synced", 2);
    assert_eq!(std::fs::read_to_string(target.join("b.txt")).expect("synced"), "two\n");
    let (status, stderr) = watch.stop();
    assert!(status.success(), "{stderr}");
    let told = "treesync: warning: the metrics listener cannot accept connections: Too many open files";
    assert_eq!(stderr.matches(told).count(), 1, "told once: {stderr}");
    assert!(stderr.contains("hint: raise the descriptor limit: LimitNOFILE= in the unit"), "{stderr}");
}
