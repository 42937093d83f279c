//! The control socket: other processes (treesync under test, `cargo xtask slowfs`) read and
//! reset the counters over a unix socket, one command per connection.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::passthrough::Inner;

/// Send one command to a slow filesystem's control socket and return its answer:
/// `stats` → the [`Stats`](super::Stats) as JSON, `reset` → `ok`, `record on` / `record off` → `ok`.
pub fn query(socket: &Path, cmd: &str) -> io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(format!("{}\n", cmd.trim()).as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.trim_end().to_string())
}

pub(super) struct ControlServer {
    pub(super) path: PathBuf,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    pub(super) fn start(path: &Path, inner: Arc<Inner>) -> io::Result<ControlServer> {
        // A socket left by a killed run would make bind fail with EADDRINUSE.
        if std::fs::symlink_metadata(path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            thread::Builder::new().name("slowfs-control".into()).spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let _ = serve_control(stream, &inner);
                    }
                }
            })?
        };
        Ok(ControlServer { path: path.to_path_buf(), stop, thread: Some(thread) })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

pub(super) fn serve_control(stream: UnixStream, inner: &Inner) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let answer = match line.trim() {
        "stats" => serde_json::to_string(&inner.stats()).map_err(io::Error::other)?,
        "reset" => {
            inner.reset();
            "ok".to_string()
        }
        "record on" => {
            inner.recording.store(true, Ordering::SeqCst);
            "ok".to_string()
        }
        "record off" => {
            inner.recording.store(false, Ordering::SeqCst);
            "ok".to_string()
        }
        other => format!("error: unknown command {other:?} (stats, reset, record on, record off)"),
    };
    (&stream).write_all(format!("{answer}\n").as_bytes())
}
