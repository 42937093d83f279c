//! A child process with its output captured, killed (SIGKILL) if it outlives a deadline —
//! std's `Command` waited for on tokio's blocking pool.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

/// Why a child gave no output.
#[derive(Debug)]
pub(crate) enum Failed {
    /// It could not be started or waited for.
    Io(std::io::Error),
    /// It was still running at the deadline and was killed.
    Deadline,
}

/// Run `cmd` (stdin from `input` or /dev/null, stdout and stderr captured) until it exits or
/// `deadline` passes.
pub(crate) async fn output(
    mut cmd: Command,
    input: Option<&[u8]>,
    deadline: Option<Instant>,
) -> Result<Output, Failed> {
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(Failed::Io)?;
    let pid = child.id();
    let input = input.map(<[u8]>::to_vec);
    let wait = tokio::task::spawn_blocking(move || {
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            let _ = stdin.write_all(&bytes);
        }
        child.wait_with_output()
    });
    let joined = match deadline {
        Some(d) => match tokio::time::timeout_at(d.into(), wait).await {
            Ok(j) => j,
            Err(_) => {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                return Err(Failed::Deadline);
            }
        },
        None => wait.await,
    };
    joined.map_err(|e| Failed::Io(std::io::Error::other(e)))?.map_err(Failed::Io)
}
