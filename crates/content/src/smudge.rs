//! A single-file smudge filter (`filter.NAME.smudge`), run by treesync rather than handed to
//! gitoxide's pipeline, so that it is bounded as every other input is:
//!
//! * **Streamed**: the output goes to the sink (the temporary file being written) as it
//!   comes; nothing holds it whole (gitoxide buffers the whole output of a driver that is not
//!   `required`, to fall back on the blob).
//! * **In time**: a filter still running after the timeout (`--filter-timeout`, default
//!   [`DEFAULT_TIMEOUT`]) is killed with its process group, and the sync fails naming the
//!   filter and the file.
//! * **As git runs it**: `sh -c` with `%f` replaced by the quoted path, in the working tree (or
//!   the git directory of a bare repository) with git's environment, the blob on its standard
//!   input, its standard error shown; a filter that exits 0 without reading all its input is
//!   fine (git ignores the broken pipe too).
//!
//! A `process` driver (git's long-running filter protocol) runs in gitoxide's pipeline; a
//! [`Watchdog`] gives it the same timeout per file, killing the driver's process (and what it
//! started) when it runs past it.
//!
//! A filter that fails (exit status, signal, timeout) fails the sync whether or not it is
//! `required`: git then writes the blob as it is with an error on its standard error and exit
//! status 0, which leaves a file that is not what the filter would make; treesync never writes
//! a wrong file silently (docs/attributes.md).

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The default of [`crate::limits::Limits::filter_timeout`]: how long one filter may take on
/// one file.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why a filter did not produce a file.
#[derive(Debug)]
pub enum Failure {
    /// It could not be started.
    Spawn(std::io::Error),
    /// Reading its output or writing its input failed.
    Pipe(std::io::Error),
    /// It exited with this status.
    Exit(i32),
    /// It was killed by this signal (not by treesync).
    Signal(i32),
    /// It ran past the timeout and was killed.
    Timeout(Duration),
    /// The sink refused the output (e.g. `--max-bytes`): the filter was stopped.
    Sink(std::io::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Spawn(e) => write!(f, "it could not be started: {e}"),
            Failure::Pipe(e) => write!(f, "talking to it failed: {e}"),
            Failure::Exit(code) => write!(f, "it exited with status {code}"),
            Failure::Signal(signal) => write!(f, "it was killed by signal {signal}"),
            Failure::Timeout(t) => {
                write!(
                    f,
                    "it was still running after {} (--filter-timeout) and was killed",
                    humantime::format_duration(*t)
                )
            }
            Failure::Sink(e) => write!(f, "its output was refused: {e}"),
        }
    }
}

/// `command` with each `%f` replaced by `path` quoted for the shell, as git does.
fn substitute(command: &str, path: &[u8]) -> String {
    let quoted = {
        let mut q = String::from("'");
        for c in String::from_utf8_lossy(path).chars() {
            match c {
                '\'' => q.push_str("'\\''"),
                '!' => q.push_str("'\\!'"),
                c => q.push(c),
            }
        }
        q.push('\'');
        q
    };
    command.replace("%f", &quoted)
}

/// Run the smudge command `command` on `input` (the blob at `path`, already through the line
/// ends and encoding), feeding its output to `sink` in chunks, within `timeout`.
pub fn run(
    command: &str,
    context: &gix::command::Context,
    path: &[u8],
    input: &[u8],
    timeout: Duration,
    sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<(), Failure> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let prepared = gix::command::prepare(substitute(command, path))
        .command_may_be_shell_script()
        .with_context(context.clone())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut cmd =
        std::process::Command::try_from(prepared).map_err(|e| Failure::Spawn(std::io::Error::other(e.to_string())))?;
    if let Some(dir) = &context.worktree_dir {
        cmd.current_dir(dir);
    } else if let Some(dir) = &context.git_dir {
        cmd.current_dir(dir);
    }
    // Its own process group, so the timeout stops what the command started too.
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(Failure::Spawn)?;
    let group = rustix::process::Pid::from_child(&child);
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let timed_out = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            let r = stdin.write_all(input);
            drop(stdin);
            r
        });
        let flag = timed_out.clone();
        scope.spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(timeout) {
                flag.store(true, Ordering::SeqCst);
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
        });
        let stop = |child: &mut std::process::Child| {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            let _ = child.wait();
        };
        let mut buf = vec![0u8; 1 << 16];
        let read = loop {
            match stdout.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    if let Err(e) = sink(&buf[..n]) {
                        break Err(Failure::Sink(e));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(Failure::Pipe(e)),
            }
        };
        if read.is_err() {
            stop(&mut child);
        }
        let status = child.wait();
        let _ = done_tx.send(());
        let written = writer.join().unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")));
        if timed_out.load(Ordering::SeqCst) {
            return Err(Failure::Timeout(timeout));
        }
        read?;
        let status = status.map_err(Failure::Pipe)?;
        match (status.code(), status.signal()) {
            (Some(0), _) => {}
            (Some(code), _) => return Err(Failure::Exit(code)),
            (None, Some(signal)) => return Err(Failure::Signal(signal)),
            (None, None) => return Err(Failure::Exit(-1)),
        }
        match written {
            // Exited 0 without reading all of its input: git ignores that too.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Pipe(e)),
            _ => Ok(()),
        }
    })
}

/// Stops a `process` driver that runs past its time on one file: started before the file is
/// handed to it, [`Watchdog::stop`]ped after. Past the timeout it kills every child of this
/// process running `command` (the driver gitoxide started, with what it started), which ends
/// the pipeline's read or write with an error.
pub struct Watchdog {
    done: Option<std::sync::mpsc::Sender<()>>,
    fired: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Watch the driver `command` for `timeout`.
    pub fn start(command: &str, timeout: Duration) -> Watchdog {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let command = command.to_string();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(timeout) {
                flag.store(true, Ordering::SeqCst);
                kill_children_running(&command);
            }
        });
        Watchdog { done: Some(done), fired, thread: Some(thread) }
    }

    /// Stop watching; whether the timeout struck (the driver was killed).
    pub fn stop(mut self) -> bool {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.fired.load(Ordering::SeqCst)
    }
}

/// Kill this process's children whose command line holds `command`, and their children.
fn kill_children_running(command: &str) {
    let me = std::process::id();
    let procs: Vec<(u32, u32, String)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
            let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, ppid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
        })
        .collect();
    let mut doomed: Vec<u32> =
        procs.iter().filter(|(_, ppid, cmd)| *ppid == me && cmd.contains(command.trim())).map(|p| p.0).collect();
    let mut i = 0;
    while i < doomed.len() {
        let parent = doomed[i];
        doomed.extend(procs.iter().filter(|(_, ppid, _)| *ppid == parent).map(|p| p.0));
        i += 1;
    }
    for pid in doomed {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_quoted_as_git_quotes_it() {
        assert_eq!(substitute("f %f x", b"a b"), "f 'a b' x");
        assert_eq!(substitute("%f", b"it's!"), "'it'\\''s'\\!''");
        assert_eq!(substitute("no path", b"a"), "no path");
    }
}
