//! systemd's notify protocol (`Type=notify`, `WatchdogSec=`), in a few lines over a Unix
//! datagram socket rather than a crate: `READY=1` once every mirror had its first look,
//! `STATUS=` lines, `WATCHDOG=1` while every mirror's loop shows signs of life, `STOPPING=1` on
//! SIGTERM.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::Monitor;

/// How often the notifier looks at the monitor (readiness, status, the watchdog's rhythm).
const TICK: Duration = Duration::from_millis(50);

/// The service manager's socket, from `$NOTIFY_SOCKET`.
#[derive(Debug)]
pub(crate) struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `$WATCHDOG_USEC` when it is meant for this process (`$WATCHDOG_PID` unset or ours).
    watchdog: Option<Duration>,
    warned: AtomicBool,
}

impl Notifier {
    /// The notifier systemd asked for, or `None` when `$NOTIFY_SOCKET` is unset (not started
    /// by systemd with `Type=notify`).
    pub(crate) fn from_env() -> anyhow::Result<Option<Notifier>> {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return Ok(None) };
        let path = path.to_string_lossy().into_owned();
        let addr = match path.strip_prefix('@') {
            // An abstract socket name (Linux).
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name.as_bytes())
            }
            None => SocketAddr::from_pathname(&path),
        }
        .with_context(|| format!("NOTIFY_SOCKET={path:?} is not a Unix socket address"))?;
        let socket = UnixDatagram::unbound().context("cannot create a socket for NOTIFY_SOCKET")?;
        let ours = std::env::var("WATCHDOG_PID").map_or(true, |pid| pid.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|us| us.trim().parse::<u64>().ok())
            .filter(|&us| us > 0 && ours)
            .map(Duration::from_micros);
        Ok(Some(Notifier { socket, addr, watchdog, warned: AtomicBool::new(false) }))
    }

    /// Send one message (`KEY=VALUE` lines).
    pub(crate) fn send(&self, message: &str) -> io::Result<()> {
        self.socket.send_to_addr(message.as_bytes(), &self.addr).map(drop)
    }

    /// `STOPPING=1`, on SIGTERM or SIGINT.
    pub(crate) fn stopping(&self) {
        self.warn(self.send("STOPPING=1\nSTATUS=stopping"));
    }

    /// Say once that systemd cannot be told (the service manager went away, or the socket is
    /// not for us); the watch goes on.
    fn warn(&self, r: io::Result<()>) {
        if let Err(e) = r
            && !self.warned.swap(true, Ordering::SeqCst)
        {
            eprintln!("treesync: warning: cannot tell systemd through NOTIFY_SOCKET: {e}");
        }
    }

    /// Until `interrupt` or every watch ended: `READY=1` once every mirror finished its first
    /// step; then `WATCHDOG=1` every `WATCHDOG_USEC/2` when every mirror's loop showed a sign of
    /// life since the last one (a hung loop stops them, and systemd restarts the service), and
    /// `STATUS=` whenever the status line changes.
    pub(crate) async fn run(self: Arc<Self>, monitor: Arc<Monitor>, interrupt: Arc<AtomicBool>) {
        let mut ready = false;
        let mut status = String::new();
        let mut last_ping = Instant::now();
        while !interrupt.load(Ordering::SeqCst) && !monitor.all_ended() {
            if !ready && monitor.looked_at_all() {
                ready = true;
                self.warn(self.send("READY=1"));
            }
            let now = monitor.status_line();
            if now != status {
                self.warn(self.send(&format!("STATUS={now}")));
                status = now;
            }
            if let Some(wd) = self.watchdog
                && last_ping.elapsed() >= wd / 2
                && monitor.alive_since(last_ping)
            {
                last_ping = Instant::now();
                self.warn(self.send("WATCHDOG=1"));
            }
            tokio::time::sleep(TICK).await;
        }
    }
}
