//! `git-sync` as a container's first process (PID 1), as git-sync runs there: the process
//! starts itself again as its child, passes every signal on to it, reaps every orphan the
//! kernel hands to PID 1 (git's credential cache daemon, a hook's background jobs), and exits
//! with the child's code (128 + N when a signal N ended it). Without this, orphans would stay
//! zombies, and signals without a handler would be ignored (PID 1 has no default actions).

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// Run this program again as a child with the same arguments and act as its init; the child's
/// exit code.
#[allow(unsafe_code)]
pub(crate) fn supervise() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // SAFETY: plain libc calls on a local, fully initialised signal set; called first thing in
    // main, while this is the only thread (the mask is per thread and inherited by none).
    let all = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    // std resets the child's signal mask to empty before it runs this program again.
    let child = Command::new("/proc/self/exe")
        .arg0(args.first().cloned().unwrap_or_default())
        .args(args.iter().skip(1))
        .env("TREESYNC_GIT_SYNC_CHILD", "1")
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("FATAL: unhandled pid1 error: can't start the child: {e}");
            return ExitCode::from(127);
        }
    };
    let pid = child.id() as libc::pid_t;
    loop {
        // SAFETY: `all` is a valid set; `info` is written by the call.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(&all, &mut info)
        };
        if sig < 0 {
            continue;
        }
        if sig == libc::SIGCHLD {
            loop {
                let mut status = 0;
                // SAFETY: reaping any child of ours, without blocking.
                let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if reaped <= 0 {
                    break;
                }
                if reaped == pid {
                    let code = if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else if libc::WIFSIGNALED(status) {
                        128 + libc::WTERMSIG(status)
                    } else {
                        continue;
                    };
                    return ExitCode::from(u8::try_from(code).unwrap_or(1));
                }
            }
        } else {
            // SAFETY: passing the signal on to our own child.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

/// Whether this process should be the init of a child: it is PID 1 and not already the child.
pub(crate) fn is_init() -> bool {
    std::process::id() == 1 && std::env::var_os("TREESYNC_GIT_SYNC_CHILD").is_none()
}
