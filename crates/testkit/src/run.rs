//! Running the commands tests check against (git, tar, gzip…): without the machine's git
//! configuration, with input on stdin.

use std::path::Path;
use std::process::{Command, Stdio};

/// git in `dir`, without the system's or the user's config (what a test sees must not depend
/// on the machine's settings).
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null");
    cmd
}

/// Run `cmd` with `input` on its stdin, written from a thread of its own (a large input cannot
/// block against the output), and its output piped; panics, with its stderr, unless it
/// succeeds.
pub fn run_with_input(cmd: &mut Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the command runs");
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("the command finishes");
    writer.join().expect("writer thread").expect("stdin written");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}
