//! `--metrics-addr`: `GET /metrics` and `GET /healthz` over HTTP/1.1, answered by a small
//! responder on tokio's `TcpListener` (hyper's server would need its `server` feature and
//! `hyper-util`, rebuilding hyper and every crate above it for two fixed routes).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::Monitor;
use super::metrics::CONTENT_TYPE;

/// The most a request head may be; longer ones are refused (431).
const MAX_HEAD: usize = 16 * 1024;
/// How long a connection may take, from accept to the response written: reading the request
/// head and writing the answer together.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections served at once (each a descriptor). When all are taken, a new one
/// takes the place of the one that has waited longest for its request (see [`Slots`]).
const MAX_CONNECTIONS: usize = 64;
/// How long `accept` waits after running out of descriptors, at first and at most.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));
/// Running out of descriptors is told at most once in this long.
const TELL_EVERY: Duration = Duration::from_secs(600);

/// Listen on `addr` (bound before this returns: a port in use is an error here, not later)
/// and answer every connection on its own task, at most [`MAX_CONNECTIONS`] at once.
pub(crate) async fn serve<R: Routes>(addr: SocketAddr, monitor: Arc<R>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await.map_err(|source| BindError { addr, source })?;
    let local = listener.local_addr().context("the metrics listener's address")?;
    tokio::spawn(async move {
        let slots = Arc::new(Slots::new(MAX_CONNECTIONS));
        let (mut backoff, mut told) = (None, None::<Instant>);
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    backoff = None;
                    // None: every slot is answering a request; this connection is closed at once.
                    if let Some(slot) = slots.admit().await {
                        tokio::spawn(answer(stream, monitor.clone(), slot));
                    }
                }
                // Out of descriptors (the watch's or the system's): told once (again after
                // TELL_EVERY at the earliest), then the listener waits a little longer each
                // time and goes on.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    if told.is_none_or(|at| at.elapsed() >= TELL_EVERY) {
                        told = Some(Instant::now());
                        eprintln!(
                            "treesync: warning: the metrics listener cannot accept connections: {e}\n  hint: {}",
                            treesync_core::source::OUT_OF_DESCRIPTORS_HINT
                        );
                    }
                    let wait = backoff.map_or(BACKOFF.0, |last: Duration| BACKOFF.1.min(last * 2));
                    backoff = Some(wait);
                    tokio::time::sleep(wait).await;
                }
                // A connection reset before it was accepted and the like: the next one is fine.
                Err(_) => tokio::time::sleep(BACKOFF.0).await,
            }
        }
    });
    Ok(local)
}

/// The connection slots: a semaphore of [`MAX_CONNECTIONS`] permits, and the connections still
/// waiting for their request head, oldest first. When every permit is taken, the oldest of
/// those is closed to make room, so idle connections (a client that connects and sends
/// nothing, or a flood of them) can neither exhaust the process's descriptors nor keep a
/// scrape or `/healthz` out; a connection that is already being answered is never closed for
/// another (when all are, the new one is closed at once).
struct Slots {
    permits: Arc<Semaphore>,
    waiting: Mutex<BTreeMap<u64, oneshot::Sender<()>>>,
    next: AtomicU64,
}

/// A connection's place: its permit, and the signal that it was closed to make room.
struct Slot {
    slots: Arc<Slots>,
    id: u64,
    evicted: oneshot::Receiver<()>,
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    fn new(max: usize) -> Slots {
        Slots { permits: Arc::new(Semaphore::new(max)), waiting: Mutex::default(), next: AtomicU64::new(0) }
    }

    /// A slot for a new connection, making room if need be; `None` when every slot is answering.
    async fn admit(self: &Arc<Self>) -> Option<Slot> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let oldest = self.waiting.lock().expect("never poisoned: no code panics holding it").pop_first();
                let (_, evict) = oldest?;
                let _ = evict.send(());
                // The evicted task drops its permit as soon as it runs; one that had just read
                // its head writes its answer first (a few KiB into the socket buffer).
                let acquire = self.permits.clone().acquire_owned();
                tokio::time::timeout(Duration::from_secs(1), acquire).await.ok()?.ok()?
            }
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, evicted) = oneshot::channel();
        self.waiting.lock().expect("never poisoned: no code panics holding it").insert(id, tx);
        Some(Slot { slots: self.clone(), id, evicted, _permit: permit })
    }
}

impl Slot {
    /// The request head arrived: from now on the connection is answered, not evicted.
    fn answering(&self) {
        self.slots.waiting.lock().expect("never poisoned: no code panics holding it").remove(&self.id);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.answering();
    }
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

/// Read one request head, write one response, close: all within [`REQUEST_TIMEOUT`], unless
/// the connection is closed to make room for another first.
async fn answer<R: Routes>(mut stream: TcpStream, monitor: Arc<R>, mut slot: Slot) {
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let head = tokio::select! {
            head = read_head(&mut stream) => head,
            _ = &mut slot.evicted => None,
        };
        let Some(head) = head else { return };
        slot.answering();
        respond(&mut stream, &head, &*monitor).await;
    })
    .await;
}

/// The request head, up to and with the empty line that ends it (`\r\n\r\n`, or `\n\n` as
/// HTTP servers commonly accept: RFC 9112 2.2 lets a bare LF end a line), or more than
/// [`MAX_HEAD`] bytes of it; `None` when the client closes first.
async fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    while !ends_head(&head) && head.len() <= MAX_HEAD {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(head)
}

/// Does `head` hold the empty line that ends a request head?
fn ends_head(head: &[u8]) -> bool {
    head.windows(2).any(|w| w == b"\n\n") || head.windows(3).any(|w| w == b"\n\r\n")
}

/// Write the response to `head`, then shut the connection down.
async fn respond<R: Routes>(stream: &mut TcpStream, head: &[u8], monitor: &R) {
    let (status, content_type, body, head_only) = if head.len() > MAX_HEAD {
        (431, PLAIN, "request head too large\n".to_string(), false)
    } else {
        route(head, monitor)
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

/// What an endpoint answers (`watch`'s monitor, `git-sync`'s health and metrics).
pub(crate) trait Routes: Send + Sync + 'static {
    /// The status, content type and body for `method` on `path` (without the query).
    fn route(&self, method: &str, path: &str) -> (u16, &'static str, String);
}

/// Plain text, for bodies that are not metrics.
pub(crate) const PLAIN: &str = "text/plain; charset=utf-8";

impl Routes for Monitor {
    fn route(&self, method: &str, path: &str) -> (u16, &'static str, String) {
        if method != "GET" && method != "HEAD" {
            return (405, PLAIN, "only GET and HEAD\n".into());
        }
        match path {
            "/metrics" => (200, CONTENT_TYPE, self.render(SystemTime::now())),
            "/healthz" => match self.health() {
                Ok(body) => (200, PLAIN, body),
                Err(body) => (503, PLAIN, body),
            },
            _ => (404, PLAIN, "not found: try /metrics or /healthz\n".into()),
        }
    }
}

/// The status, content type and body for a request head, and whether only the head is sent.
fn route<R: Routes>(head: &[u8], routes: &R) -> (u16, &'static str, String, bool) {
    let text = String::from_utf8_lossy(head);
    let mut first = text.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (first.next().unwrap_or_default(), first.next().unwrap_or_default());
    let path = target.split('?').next().unwrap_or_default();
    let (status, content_type, body) = routes.route(method, path);
    (status, content_type, body, method == "HEAD" && status != 405)
}

/// `--metrics-addr` and `metrics_addr`: `IP:PORT` (`127.0.0.1:9273`, `[::]:9273`, `0.0.0.0:9273`),
/// `HOST:PORT` with a name that resolves (`localhost:9273`; its first address), or a port alone
/// (`9273`: this host only, `127.0.0.1:9273`). `:9273` is refused: some tools read it as every
/// interface, others as this host, so the message asks for one of the two.
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let port = |p: &str| p.parse::<u16>().map_err(|_| format!("{s:?}: {p} is no port (a port is 1 to 65535)"));
    if digits(s) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port(s)?)));
    }
    if let Some(p) = s.strip_prefix(':').filter(|p| digits(p)) {
        port(p)?;
        return Err(format!(
            "{s:?} names a port but no host: write 127.0.0.1:{p} (this host only; {p} alone means the same) or 0.0.0.0:{p} (every interface)"
        ));
    }
    let expected = "write HOST:PORT, e.g. 127.0.0.1:9273 (this host only) or 0.0.0.0:9273 (every interface), or a port alone (9273) for this host only";
    if !s.contains(':') {
        return Err(format!("{s:?} names no port: {expected}"));
    }
    use std::net::ToSocketAddrs;
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| format!("{s:?} resolves to no address: {expected}")),
        Err(e) => Err(format!("cannot resolve {s:?} ({e}): {expected}")),
    }
}
