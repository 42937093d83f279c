//! `--metrics-addr`: `GET /metrics` and `GET /healthz` over HTTP/1.1, answered by a small
//! responder on tokio's `TcpListener` (hyper's server would need its `server` feature and
//! `hyper-util`, rebuilding hyper and every crate above it for two fixed routes).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Monitor;
use super::metrics::CONTENT_TYPE;

/// The most a request head may be; longer ones are refused (431).
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Listen on `addr` (bound before this returns: a port in use is an error here, not later)
/// and answer every connection on its own task.
pub(crate) async fn serve(addr: SocketAddr, monitor: Arc<Monitor>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await.map_err(|source| BindError { addr, source })?;
    let local = listener.local_addr().context("the metrics listener's address")?;
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, monitor.clone()));
                }
                // Out of file descriptors and the like: wait a little, the watch goes on.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    Ok(local)
}

/// `--metrics-addr` cannot be listened on: what the system said, and what to do.
#[derive(Debug)]
pub(crate) struct BindError {
    addr: SocketAddr,
    source: std::io::Error,
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addr = self.addr;
        let hint = match self.source.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "another process listens on {addr} (`ss -ltnp 'sport = :{}'` names it): stop it or pick another port",
                addr.port()
            ),
            std::io::ErrorKind::PermissionDenied => {
                "ports below 1024 need privileges: pick one above 1024 (exporters use 9100-9999)".into()
            }
            std::io::ErrorKind::AddrNotAvailable => {
                format!("{} is no address of this host: use 127.0.0.1 (this host) or 0.0.0.0 (all)", addr.ip())
            }
            _ => "check --metrics-addr (or metrics_addr in [defaults])".into(),
        };
        write!(f, "cannot listen on {addr} for --metrics-addr: {}\n  hint: {hint}", self.source)
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Read one request head, write one response, close.
async fn answer(mut stream: TcpStream, monitor: Arc<Monitor>) {
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() <= MAX_HEAD {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let (status, content_type, body, head_only) = if head.len() > MAX_HEAD {
        (431, "text/plain; charset=utf-8", "request head too large\n".to_string(), false)
    } else {
        route(&head, &monitor)
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status == 405 { "Allow: GET, HEAD\r\n" } else { "" }
    );
    if !head_only {
        response.push_str(&body);
    }
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The status, content type and body for a request head, and whether only the head is sent.
fn route(head: &[u8], monitor: &Monitor) -> (u16, &'static str, String, bool) {
    let text = String::from_utf8_lossy(head);
    let mut first = text.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (first.next().unwrap_or_default(), first.next().unwrap_or_default());
    let path = target.split('?').next().unwrap_or_default();
    let plain = "text/plain; charset=utf-8";
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (405, plain, "only GET and HEAD\n".into(), false);
    }
    match path {
        "/metrics" => (200, CONTENT_TYPE, monitor.render(SystemTime::now()), head_only),
        "/healthz" => match monitor.health() {
            Ok(body) => (200, plain, body, head_only),
            Err(body) => (503, plain, body, head_only),
        },
        _ => (404, plain, "not found: try /metrics or /healthz\n".into(), head_only),
    }
}

/// `--metrics-addr` and `metrics_addr`: `IP:PORT` (`127.0.0.1:9273`, `[::]:9273`, `0.0.0.0:9273`)
/// or `HOST:PORT` with a name that resolves (`localhost:9273`; its first address).
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let expected = "expected HOST:PORT, e.g. 127.0.0.1:9273 (this host only) or 0.0.0.0:9273 (every interface)";
    if !s.contains(':') {
        return Err(format!("{s:?} has no port: {expected}"));
    }
    use std::net::ToSocketAddrs;
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| format!("{s:?} resolves to no address: {expected}")),
        Err(e) => Err(format!("cannot resolve {s:?} ({e}): {expected}")),
    }
}
