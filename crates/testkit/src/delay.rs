//! A TCP delay line in user space, for network latency without netem.
//!
//! [`DelayProxy`] listens on 127.0.0.1 (port 0) in front of an upstream address. For each accepted
//! connection it opens one to the upstream, and each direction reads eagerly and delivers every
//! chunk `one_way` after it was read, in order. Reading goes on while earlier chunks wait, so
//! pipelined traffic is not serialized: a round trip costs about `2 × one_way` plus ~0.2–0.5 ms,
//! however many calls are in flight. End of stream is passed on (after the delay) as a half
//! close.
//!
//! The proxy runs on its own thread with its own single-threaded tokio runtime, so it serves
//! synchronous and asynchronous tests alike. Deliveries are not timed with tokio's timer, which
//! rounds every deadline up to the next whole millisecond (a 0 ms delay line measured 1.2–2.3 ms
//! round trips with it), but by a clock thread waiting on a condition variable.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// A chunk due this close to now is delivered at once: waking up costs about as much.
const EARLY: Duration = Duration::from_micros(50);

/// Orders for the proxy's thread.
enum Command {
    /// Close every current connection, then acknowledge.
    Cut(std::sync::mpsc::Sender<()>),
}

/// A running delay line; stopped (every connection closed) on drop.
pub struct DelayProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    one_way: Duration,
    connections: Arc<AtomicU64>,
    commands: Option<mpsc::UnboundedSender<Command>>,
    thread: Option<JoinHandle<()>>,
    clock: Arc<Clock>,
    clock_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DelayProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("one_way", &self.one_way)
            .finish()
    }
}

impl DelayProxy {
    /// Listen on 127.0.0.1 (a free port) and relay every connection to `upstream`, each
    /// direction delayed by `one_way`. TCP_NODELAY is set on both sides.
    pub fn start(upstream: SocketAddr, one_way: Duration) -> DelayProxy {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 for the delay proxy");
        let addr = std_listener.local_addr().expect("local address of the delay proxy");
        std_listener.set_nonblocking(true).expect("make the delay proxy's listener non-blocking");
        let connections = Arc::new(AtomicU64::new(0));
        let (commands, receiver) = mpsc::unbounded_channel();
        let counter = connections.clone();
        let clock = Arc::new(Clock::default());
        let clock_thread = {
            let clock = clock.clone();
            std::thread::Builder::new()
                .name(format!("delay-clock-{}", addr.port()))
                .spawn(move || clock.run())
                .expect("spawn the delay proxy's clock thread")
        };
        let ticks = clock.clone();
        let thread = std::thread::Builder::new()
            .name(format!("delay-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                    .expect("build the delay proxy's tokio runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("register the delay proxy's listener");
                    serve(listener, upstream, one_way, ticks, counter, receiver).await;
                });
                // Dropping the runtime drops the connection tasks, closing their sockets.
            })
            .expect("spawn the delay proxy's thread");
        DelayProxy {
            addr,
            upstream,
            one_way,
            connections,
            commands: Some(commands),
            thread: Some(thread),
            clock,
            clock_thread: Some(clock_thread),
        }
    }

    /// Where clients connect: 127.0.0.1 and the proxy's port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address every connection is relayed to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The delay of each direction.
    pub fn one_way(&self) -> Duration {
        self.one_way
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    /// Close every current connection, on both sides, and return once they are closed (data
    /// still in the delay line is dropped); clients see EOF or a reset. The proxy keeps accepting
    /// new connections, e.g. a client reconnecting.
    pub fn cut(&self) {
        let (ack, done) = std::sync::mpsc::channel();
        let sent = self.commands.as_ref().map(|c| c.send(Command::Cut(ack)));
        if let Some(Ok(())) = sent {
            let _ = done.recv_timeout(Duration::from_secs(10));
        }
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // Closing the channel ends the accept loop, then the runtime and every connection.
        drop(self.commands.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.clock.stop();
        if let Some(thread) = self.clock_thread.take() {
            let _ = thread.join();
        }
    }
}

/// Alarms at precise instants for the delay lines, on a thread of its own.
#[derive(Default)]
struct Clock {
    alarms: Mutex<Alarms>,
    changed: Condvar,
}

#[derive(Default)]
struct Alarms {
    queue: BinaryHeap<Reverse<Alarm>>,
    next: u64,
    stopped: bool,
}

/// Ordered by time, then by order of arrival.
struct Alarm {
    at: Instant,
    seq: u64,
    ring: oneshot::Sender<()>,
}

impl PartialEq for Alarm {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Alarm {}

impl PartialOrd for Alarm {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Alarm {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Clock {
    /// Returns at `at` (or at once if that is less than [`EARLY`] away).
    async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() + EARLY {
            return;
        }
        let (ring, rung) = oneshot::channel();
        {
            let mut alarms = self.alarms.lock().unwrap_or_else(PoisonError::into_inner);
            if alarms.stopped {
                return;
            }
            let seq = alarms.next;
            alarms.next += 1;
            alarms.queue.push(Reverse(Alarm { at, seq, ring }));
        }
        self.changed.notify_one();
        let _ = rung.await;
    }

    fn run(&self) {
        let mut alarms = self.alarms.lock().unwrap_or_else(PoisonError::into_inner);
        while !alarms.stopped {
            let now = Instant::now();
            while alarms.queue.peek().is_some_and(|Reverse(a)| a.at <= now + EARLY) {
                if let Some(Reverse(alarm)) = alarms.queue.pop() {
                    let _ = alarm.ring.send(());
                }
            }
            alarms = match alarms.queue.peek() {
                Some(Reverse(next)) => {
                    let wait = next.at - now;
                    self.changed.wait_timeout(alarms, wait).unwrap_or_else(PoisonError::into_inner).0
                }
                None => self.changed.wait(alarms).unwrap_or_else(PoisonError::into_inner),
            };
        }
        // Ring the rest (dropping the senders does it), so no delay line waits forever.
        alarms.queue.clear();
    }

    fn stop(&self) {
        self.alarms.lock().unwrap_or_else(PoisonError::into_inner).stopped = true;
        self.changed.notify_one();
    }
}

async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    one_way: Duration,
    clock: Arc<Clock>,
    connections: Arc<AtomicU64>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Cut(ack)) => {
                    relays.abort_all();
                    while relays.join_next().await.is_some() {}
                    let _ = ack.send(());
                }
                None => return,
            },
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.fetch_add(1, Ordering::SeqCst);
                    relays.spawn(relay(client, upstream, one_way, clock.clone()));
                }
                // E.g. out of file descriptors: wait rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            // Reap finished relays so the set does not grow.
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
}

/// One connection: both directions at once, each through its own delay line.
async fn relay(client: TcpStream, upstream: SocketAddr, one_way: Duration, clock: Arc<Clock>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return; // Dropping the client closes it: it sees the refusal as EOF.
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        delay_line(client_read, server_write, one_way, &clock),
        delay_line(server_read, client_write, one_way, &clock)
    );
}

/// Read eagerly from `from`; write each chunk to `to` `one_way` after it was read, in order.
async fn delay_line(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, one_way: Duration, clock: &Clock) {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if chunks.send((Instant::now() + one_way, buf[..n].to_vec())).is_err() {
                        break; // The writer gave up: the other side is gone.
                    }
                }
            }
        }
        // Dropping `chunks` lets the writer finish the queue, then half-close.
    };
    let writer = async move {
        while let Some((at, chunk)) = due.recv().await {
            clock.sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
