//! `cargo xtask slowfs`: mount the slow FUSE filesystem (treesync_testkit::slowfs) by hand, to
//! try treesync or git on a "NAS" with a chosen latency, then print what it was asked.

use std::path::PathBuf;

use treesync_testkit::slowfs::{Config, SlowFs};

pub fn run(args: &[String]) -> Result<(), String> {
    let mut config = Config::default();
    let (mut backing, mut mount) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--latency" => {
                config.meta_latency = treesync_core::duration::parse(value()?).map_err(|e| format!("--latency: {e}"))?
            }
            "--data-latency" => {
                config.data_latency =
                    treesync_core::duration::parse(value()?).map_err(|e| format!("--data-latency: {e}"))?
            }
            "--max-concurrent" => {
                let n: usize = value()?.parse().map_err(|e| format!("--max-concurrent: {e}"))?;
                config.max_concurrent = Some(n.max(1));
            }
            "--threads" => config.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--backing" => backing = Some(PathBuf::from(value()?)),
            "--mount" => mount = Some(PathBuf::from(value()?)),
            "--control" => config.control = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let backing = backing.ok_or("slowfs needs --backing DIR")?;
    let mount = mount.ok_or("slowfs needs --mount DIR")?;

    // Before any thread exists, so that every thread inherits the mask and the signal waits
    // for sigwait below instead of killing the process with the mount still up.
    let signals = Signals::block();
    let fs = SlowFs::mount(&backing, &mount, config.clone())
        .map_err(|e| format!("cannot mount {} at {}: {e}", backing.display(), mount.display()))?;
    println!(
        "slowfs: {} mounted at {} (fuse.treesync-slowfs): latency {:?} metadata, {:?} data; {} threads; {}{}; \
         Ctrl-C or SIGTERM unmounts",
        fs.backing().display(),
        fs.path().display(),
        config.meta_latency,
        config.data_latency,
        config.threads,
        config.max_concurrent.map_or("no concurrency limit".to_string(), |n| format!("at most {n} served at once")),
        config.control.as_ref().map_or(String::new(), |c| format!("; control socket {}", c.display())),
    );
    let sig = signals.wait();
    eprintln!("slowfs: signal {sig}, unmounting");
    let stats = fs.stats();
    let unmounted = fs.unmount();
    println!("{stats}");
    unmounted.map_err(|e| format!("unmount: {e}"))
}

/// SIGINT, SIGTERM and SIGHUP, blocked so that they can be waited for.
pub(crate) struct Signals(libc::sigset_t);

#[allow(unsafe_code)]
impl Signals {
    pub(crate) fn block() -> Signals {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; the calls only
        // read and write this local set and the calling thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Signals(set)
        }
    }

    pub(crate) fn wait(&self) -> i32 {
        let mut sig = 0;
        // SAFETY: the set was initialised in `block`; sig is a live local.
        unsafe { libc::sigwait(&self.0, &mut sig) };
        sig
    }
}
