//! A real S3-compatible server for tests: `moto_server` on 127.0.0.1, started per test, with its
//! request log parsed into counts by kind of request.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

use crate::missing::Missing;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The virtualenv `cargo xtask test` installs `moto[server]` into, relative to the workspace
/// root (xtask's `test.rs` names the same place).
pub const VENV: &str = "target/treesync-venv";

/// Where `moto_server` is: `$TREESYNC_MOTO_SERVER` if set, then the project's virtualenv
/// ([`VENV`], made by `cargo xtask test`), then `PATH`.
pub fn moto_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TREESYNC_MOTO_SERVER") {
        return Some(p.into());
    }
    let venv = workspace_root().join(VENV).join("bin/moto_server");
    if venv.is_file() {
        return Some(venv);
    }
    crate::missing::find_program("moto_server")
}

/// The `moto_server` to start; if there is none, what provides it.
pub fn check() -> Result<PathBuf, Missing> {
    match moto_binary() {
        Some(p) if p.is_file() => Ok(p),
        Some(p) => Err(Missing::new(
            format!("moto_server at {} ($TREESYNC_MOTO_SERVER)", p.display()),
            "point TREESYNC_MOTO_SERVER at an installed moto_server, or unset it",
        )),
        None => Err(Missing::new(
            "moto_server (a local S3 server)",
            format!(
                "`python3 -m venv {VENV} && {VENV}/bin/pip install 'moto[server]'` in the workspace, or set TREESYNC_MOTO_SERVER"
            ),
        )),
    }
}

/// The workspace root, where [`VENV`] is.
fn workspace_root() -> PathBuf {
    let testkit = Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().and_then(Path::parent).unwrap_or(testkit).to_path_buf()
}

/// A running moto server; killed on drop.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Requests seen by the server, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Requests {
    /// PUT of an object (including multipart part uploads).
    pub put: u64,
    /// GET of an object.
    pub get: u64,
    /// HEAD of an object.
    pub head: u64,
    /// Listings (GET on the bucket).
    pub list: u64,
    /// Bulk deletes (`POST ?delete`).
    pub bulk_delete: u64,
    /// Single DELETEs.
    pub delete: u64,
    /// Other POSTs (multipart create/complete).
    pub post: u64,
    /// Anything else.
    pub other: u64,
}

impl Requests {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.put + self.get + self.head + self.list + self.bulk_delete + self.delete + self.post + self.other
    }
}

impl Moto {
    /// Start a server. Panics when moto is not installed, naming the command that installs it
    /// (see [`check`]).
    #[track_caller]
    pub fn start() -> Moto {
        let bin = match check() {
            Ok(t) => t,
            Err(m) => m.fail(),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("moto.log");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
            l.local_addr().expect("addr").port()
        };
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}"), log, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        // Ready when it answers HTTP, not merely when the port accepts (a loaded machine can
        // take a while between the two).
        while TcpStream::connect(("127.0.0.1", port)).is_err() || moto.raw("GET", "/") == 0 {
            assert!(Instant::now() < deadline, "moto did not start: {}", moto.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    fn port(&self) -> u16 {
        self.endpoint.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port")
    }

    /// Send one raw HTTP request and return the status code (moto does not check signatures).
    pub fn raw(&self, method: &str, path: &str) -> u16 {
        let mut s = TcpStream::connect(("127.0.0.1", self.port())).expect("connect");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port()
        )
        .expect("send");
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
    }

    /// The server's process id (benchmarks read its CPU time from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Create a bucket.
    pub fn create_bucket(&self, name: &str) {
        let code = self.raw("PUT", &format!("/{name}"));
        assert_eq!(code, 200, "create bucket {name}: HTTP {code}");
    }

    /// The server's access log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A mark in the log: requests after it are counted by [`Moto::requests_since`].
    pub fn mark(&self) -> usize {
        self.log_text().lines().count()
    }

    /// Requests logged after `mark`, by kind.
    pub fn requests_since(&self, mark: usize) -> Requests {
        let mut r = Requests::default();
        for line in self.log_text().lines().skip(mark) {
            let Some(req) = line.split('"').nth(1) else { continue };
            let mut parts = req.split_whitespace();
            let (Some(method), Some(target)) = (parts.next(), parts.next()) else { continue };
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let object = path.trim_start_matches('/').contains('/');
            match method {
                "PUT" if object => r.put += 1,
                "GET" if object => r.get += 1,
                "GET" => r.list += 1,
                "HEAD" if object => r.head += 1,
                "POST" if query.starts_with("delete") => r.bulk_delete += 1,
                "POST" => r.post += 1,
                "DELETE" if object => r.delete += 1,
                _ => r.other += 1,
            }
        }
        r
    }

    /// The environment a client needs: dummy credentials, region; `AWS_CA_BUNDLE` removed.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
        ]
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP proxy in front of a server that answers every `every`-th request with
/// `503 Slow Down` itself (S3's throttling answer) and forwards the rest.
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT` of the proxy.
    pub endpoint: String,
    /// How many requests were answered with 503.
    pub injected: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FaultProxy {
    /// Start a proxy to `upstream` (`http://127.0.0.1:PORT`).
    pub fn start(upstream: &str, every: u64) -> FaultProxy {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let up_port: u16 = upstream.rsplit(':').next().and_then(|p| p.parse().ok()).expect("upstream port");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let injected = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU64::new(0));
        let (inj, st) = (injected.clone(), stop.clone());
        listener.set_nonblocking(true).expect("nonblocking");
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (inj, seen) = (inj.clone(), seen.clone());
                        std::thread::spawn(move || {
                            let _ = serve(client, up_port, every, &seen, &inj);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FaultProxy { endpoint, injected, stop }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn read_message(s: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Ok(None);
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    buf.extend_from_slice(&body);
    Ok(Some(buf))
}

fn serve(
    mut client: TcpStream,
    up_port: u16,
    every: u64,
    seen: &std::sync::atomic::AtomicU64,
    injected: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    client.set_nonblocking(false)?;
    while let Some(request) = read_message(&mut client)? {
        let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
        if every > 0 && n.is_multiple_of(every) {
            injected.fetch_add(1, Ordering::SeqCst);
            let body = "<Error><Code>SlowDown</Code><Message>injected</Message></Error>";
            write!(
                client,
                "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
            continue;
        }
        let mut up = TcpStream::connect(("127.0.0.1", up_port))?;
        up.write_all(&request)?;
        let response = read_message(&mut up)?.unwrap_or_default();
        client.write_all(&response)?;
    }
    Ok(())
}
