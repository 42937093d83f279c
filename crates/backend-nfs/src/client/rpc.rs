//! ONC RPC (RFC 5531) over TCP with many calls in flight on one connection.
//!
//! Calls are framed with record marking, written by one writer task (which coalesces whatever
//! is queued into one `write`) and matched to their replies by xid in a reader task, so replies
//! may come back in any order. A connection that breaks, or a call that gets no reply within
//! the timeout, makes every pending call of that connection go again on a new connection with
//! the same xid (a server's duplicate-request cache can then answer it); the reply tells the
//! caller whether it was retransmitted, so non-idempotent procedures can read `NOENT` after a
//! retransmitted REMOVE as "done by the first try".

use std::collections::HashMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nfs3_types::rpc::{accept_stat_data, auth_unix, opaque_auth, rejected_reply};
use nfs3_types::xdr_codec::{Opaque, Pack, Unpack};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Largest reply we accept (a READ or READDIRPLUS of the server's maximum plus headers).
const MAX_RECORD: usize = 64 << 20;

/// How a [`Client`] behaves.
#[derive(Debug, Clone)]
pub struct RpcOptions {
    /// A call without a reply within this time is sent again on a new connection.
    pub timeout: Duration,
    /// How many times a call is sent again (after a timeout or a broken connection).
    pub retries: u32,
    /// Calls in flight at once on this client, at most.
    pub max_in_flight: usize,
    /// AUTH_UNIX user id.
    pub uid: u32,
    /// AUTH_UNIX group id.
    pub gid: u32,
}

impl Default for RpcOptions {
    fn default() -> Self {
        RpcOptions { timeout: Duration::from_secs(30), retries: 3, max_in_flight: 128, uid: 0, gid: 0 }
    }
}

/// A call failed below the NFS layer.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// No connection could be made, or it broke and could not be made again.
    #[error("cannot reach {addr}: {source}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No reply after all tries.
    #[error("no reply from {addr} to {what} after {tries} tries ({last})")]
    NoReply {
        /// The server.
        addr: SocketAddr,
        /// The call.
        what: String,
        /// Tries made.
        tries: u32,
        /// What happened to the last one.
        last: String,
    },
    /// The server refused the call.
    #[error("{addr} refused {what}: {why}")]
    Refused {
        /// The server.
        addr: SocketAddr,
        /// The call.
        what: String,
        /// The RPC-level reason (e.g. `AUTH_ERROR(AUTH_TOOWEAK)`, `PROG_UNAVAIL`).
        why: String,
    },
    /// A reply that does not decode.
    #[error("garbled reply from {addr} to {what}: {why}")]
    Garbled {
        /// The server.
        addr: SocketAddr,
        /// The call.
        what: String,
        /// The decoding error.
        why: String,
    },
}

impl RpcError {
    /// The closest [`std::io::ErrorKind`], for the hints of the backend's errors.
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            RpcError::Connect { source, .. } => source.kind(),
            RpcError::NoReply { .. } => std::io::ErrorKind::TimedOut,
            RpcError::Refused { .. } => std::io::ErrorKind::PermissionDenied,
            RpcError::Garbled { .. } => std::io::ErrorKind::InvalidData,
        }
    }
}

/// A successful reply: the bytes of the procedure's result.
pub struct Reply {
    bytes: Vec<u8>,
    at: usize,
    /// The call was sent more than once (its first try may have been executed).
    pub retransmitted: bool,
}

impl Reply {
    /// Decode the result.
    pub fn decode<T: Unpack>(&self) -> Result<T, String> {
        let mut cur = Cursor::new(&self.bytes[self.at..]);
        T::unpack(&mut cur).map(|(v, _)| v).map_err(|e| format!("{e:?}"))
    }
}

struct Conn {
    id: u64,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<Pending>>,
    tasks: [tokio::task::AbortHandle; 2],
}

#[derive(Default)]
struct Pending {
    closed: bool,
    calls: HashMap<u32, oneshot::Sender<Vec<u8>>>,
}

impl Pending {
    fn close(&mut self) {
        self.closed = true;
        self.calls.clear();
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.pending.lock().expect("never poisoned").close();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One program (NFS, MOUNT, portmap) at one server address, many calls in flight.
pub struct Client {
    addr: SocketAddr,
    prog: u32,
    vers: u32,
    cred: Vec<u8>,
    options: RpcOptions,
    next_xid: AtomicU32,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    conns: AtomicU64,
    limit: Semaphore,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    retransmits: AtomicU64,
    /// Test hook: fail the next `n` sends by closing the connection right after them.
    drop_next: AtomicU32,
    cut: AtomicBool,
}

impl Client {
    /// A client for program `prog` version `vers` at `addr`; connects on the first call.
    pub fn new(addr: SocketAddr, prog: u32, vers: u32, options: RpcOptions) -> Self {
        let machine = treesync_backend::lock::hostname();
        let auth = auth_unix {
            stamp: 0,
            machinename: Opaque::owned(machine.into_bytes()),
            uid: options.uid,
            gid: options.gid,
            gids: vec![options.gid],
        };
        let mut cred = Vec::new();
        opaque_auth::auth_unix(&auth).pack(&mut cred).expect("packing into a Vec does not fail");
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let xid = (seed.subsec_nanos() ^ std::process::id().rotate_left(16)) & 0x7fff_ffff;
        Client {
            addr,
            prog,
            vers,
            cred,
            limit: Semaphore::new(options.max_in_flight.max(1)),
            options,
            next_xid: AtomicU32::new(xid),
            conn: tokio::sync::Mutex::new(None),
            conns: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            retransmits: AtomicU64::new(0),
            drop_next: AtomicU32::new(0),
            cut: AtomicBool::new(false),
        }
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections made so far (1 unless one broke).
    pub fn connections(&self) -> u64 {
        self.conns.load(Ordering::Relaxed)
    }

    /// The most calls that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::Relaxed)
    }

    /// Calls sent again after a timeout or a broken connection.
    pub fn retransmits(&self) -> u64 {
        self.retransmits.load(Ordering::Relaxed)
    }

    /// Close the connection right after each of the next `n` calls is sent (tests: a dropped
    /// connection mid-call).
    pub fn drop_connection_after(&self, n: u32) {
        self.drop_next.store(n, Ordering::Relaxed);
    }

    /// Close the current connection now (tests); pending calls go again on a new one.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
    }

    async fn connection(&self) -> Result<Arc<Conn>, RpcError> {
        let mut slot = self.conn.lock().await;
        if self.cut.swap(false, Ordering::Relaxed) {
            *slot = None;
        }
        if let Some(c) = &*slot
            && !c.pending.lock().expect("never poisoned").closed
        {
            return Ok(c.clone());
        }
        *slot = None;
        let connect = tokio::time::timeout(self.options.timeout, TcpStream::connect(self.addr));
        let stream = match connect.await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(RpcError::Connect { addr: self.addr, source }),
            Err(_) => {
                return Err(RpcError::Connect {
                    addr: self.addr,
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {:?}", self.options.timeout),
                    ),
                });
            }
        };
        let _ = stream.set_nodelay(true);
        let (mut rd, mut wr) = stream.into_split();
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let p = pending.clone();
        let writer = tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(first) = rx.recv().await {
                buf.clear();
                buf.extend_from_slice(&first);
                while buf.len() < (1 << 20)
                    && let Ok(more) = rx.try_recv()
                {
                    buf.extend_from_slice(&more);
                }
                if wr.write_all(&buf).await.is_err() {
                    break;
                }
            }
            p.lock().expect("never poisoned").close();
        });
        let p = pending.clone();
        let reader = tokio::spawn(async move {
            let _ = read_replies(&mut rd, &p).await;
            p.lock().expect("never poisoned").close();
        });
        let id = self.conns.fetch_add(1, Ordering::Relaxed) + 1;
        let conn = Arc::new(Conn { id, tx, pending, tasks: [writer.abort_handle(), reader.abort_handle()] });
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn forget(&self, id: u64) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| c.id == id) {
            *slot = None;
        }
    }

    /// Call procedure `proc` with `args`; `what` names the call in errors.
    pub async fn call(
        &self,
        proc: u32,
        args: &(impl Pack + Sync),
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Reply, RpcError> {
        let _permit = self.limit.acquire().await.expect("the semaphore is never closed");
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        let result = self.call_inner(proc, args, what).await;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        result
    }

    async fn call_inner(
        &self,
        proc: u32,
        args: &(impl Pack + Sync),
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Reply, RpcError> {
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let message = self.encode(xid, proc, args).map_err(|why| RpcError::Garbled {
            addr: self.addr,
            what: what(),
            why: format!("cannot encode the call: {why}"),
        })?;
        let mut last = String::new();
        let tries = self.options.retries + 1;
        for attempt in 0..tries {
            if attempt > 0 {
                self.retransmits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target: "treesync::nfs", call = %what(), attempt, %last, "sending again");
            }
            let conn = match self.connection().await {
                Ok(c) => c,
                Err(e) if attempt + 1 < tries => {
                    last = e.to_string();
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(4))).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let (tx, rx) = oneshot::channel();
            let closed = {
                let mut p = conn.pending.lock().expect("never poisoned");
                if !p.closed {
                    p.calls.insert(xid, tx);
                }
                p.closed
            };
            if closed {
                self.forget(conn.id).await;
                last = "connection closed".into();
                continue;
            }
            if conn.tx.send(message.clone()).is_err() {
                self.forget(conn.id).await;
                last = "connection closed".into();
                continue;
            }
            if self.drop_next.load(Ordering::Relaxed) > 0 {
                self.drop_next.fetch_sub(1, Ordering::Relaxed);
                // Give the writer a moment to send it, then break the connection under it.
                tokio::task::yield_now().await;
                conn.pending.lock().expect("never poisoned").close();
                self.forget(conn.id).await;
            }
            match tokio::time::timeout(self.options.timeout, rx).await {
                Ok(Ok(bytes)) => return self.parse(bytes, attempt > 0, what),
                Ok(Err(_)) => {
                    last = "the connection broke".into();
                    self.forget(conn.id).await;
                }
                Err(_) => {
                    last = format!("no reply within {:?}", self.options.timeout);
                    conn.pending.lock().expect("never poisoned").calls.remove(&xid);
                    // The connection may be wedged: every call on it goes again on a new one.
                    conn.pending.lock().expect("never poisoned").close();
                    self.forget(conn.id).await;
                }
            }
        }
        Err(RpcError::NoReply { addr: self.addr, what: what(), tries, last })
    }

    fn encode(&self, xid: u32, proc: u32, args: &(impl Pack + Sync)) -> Result<Vec<u8>, String> {
        let mut m = Vec::with_capacity(64 + self.cred.len() + args.packed_size());
        m.extend_from_slice(&[0; 4]);
        for word in [xid, 0, 2, self.prog, self.vers, proc] {
            m.extend_from_slice(&word.to_be_bytes());
        }
        m.extend_from_slice(&self.cred);
        m.extend_from_slice(&[0; 8]); // verifier: AUTH_NULL
        args.pack(&mut m).map_err(|e| format!("{e:?}"))?;
        let len = u32::try_from(m.len() - 4).map_err(|_| "call too large".to_string())?;
        m[..4].copy_from_slice(&(len | 0x8000_0000).to_be_bytes());
        Ok(m)
    }

    fn parse(
        &self,
        bytes: Vec<u8>,
        retransmitted: bool,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Reply, RpcError> {
        let garbled = |why: String| RpcError::Garbled { addr: self.addr, what: what(), why };
        let mut cur = Cursor::new(&bytes[..]);
        let mut word = || u32::unpack(&mut cur).map(|(v, _)| v).map_err(|e| garbled(format!("{e:?}")));
        let (_xid, kind, stat) = (word()?, word()?, word()?);
        if kind != 1 {
            return Err(garbled(format!("message type {kind} instead of a reply")));
        }
        if stat == 0 {
            let (_verf, _) = opaque_auth::unpack(&mut cur).map_err(|e| garbled(format!("{e:?}")))?;
            let (data, _) = accept_stat_data::unpack(&mut cur).map_err(|e| garbled(format!("{e:?}")))?;
            let why = match data {
                accept_stat_data::SUCCESS => {
                    let at = usize::try_from(cur.position()).expect("within the buffer");
                    return Ok(Reply { bytes, at, retransmitted });
                }
                accept_stat_data::PROG_MISMATCH { low, high } => {
                    format!("program version mismatch (the server has versions {low} to {high})")
                }
                other => format!("{other:?}"),
            };
            return Err(RpcError::Refused { addr: self.addr, what: what(), why });
        }
        let (rejected, _) = rejected_reply::unpack(&mut cur).map_err(|e| garbled(format!("{e:?}")))?;
        let why = match rejected {
            rejected_reply::AUTH_ERROR(stat) => format!("credentials rejected ({stat})"),
            rejected_reply::RPC_MISMATCH { low, high } => format!("RPC version mismatch ({low}..{high})"),
        };
        Err(RpcError::Refused { addr: self.addr, what: what(), why })
    }
}

async fn read_replies(rd: &mut tokio::net::tcp::OwnedReadHalf, pending: &Mutex<Pending>) -> std::io::Result<()> {
    let mut record = Vec::new();
    loop {
        let mut head = [0u8; 4];
        rd.read_exact(&mut head).await?;
        let head = u32::from_be_bytes(head);
        let len = (head & 0x7fff_ffff) as usize;
        if record.len() + len > MAX_RECORD {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "reply too large"));
        }
        let start = record.len();
        record.resize(start + len, 0);
        rd.read_exact(&mut record[start..]).await?;
        if head & 0x8000_0000 == 0 {
            continue;
        }
        let message = std::mem::take(&mut record);
        if message.len() < 4 {
            continue;
        }
        let xid = u32::from_be_bytes([message[0], message[1], message[2], message[3]]);
        let waiter = pending.lock().expect("never poisoned").calls.remove(&xid);
        if let Some(w) = waiter {
            let _ = w.send(message);
        }
    }
}
