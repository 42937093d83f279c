//! Mounting and unmounting: [`SlowFs`] owns the FUSE session, the worker pool and the control
//! socket, and unmounts on drop.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use fuser::{BackgroundSession, MountOption, SessionACL};

use super::FS_NAME;
use super::config::Config;
use super::control::ControlServer;
use super::fuse::Daemon;
use super::passthrough::Inner;
use super::pool::{self, Service};
use super::stats::{Counters, Op, Stats};
use crate::missing::{Missing, find_program};
use crate::mountinfo;

/// A mounted slow filesystem. Dropping it unmounts (lazily if something still uses the mount),
/// also while a test unwinds from a panic.
pub struct SlowFs {
    inner: Arc<Inner>,
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    backing: PathBuf,
    control: Option<ControlServer>,
    as_root: bool,
    /// Holds `backing/` and `mnt/` for [`SlowFs::temp`]; declared last so it is removed after
    /// the unmount.
    temp: Option<tempfile::TempDir>,
}

impl fmt::Debug for SlowFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlowFs").field("mountpoint", &self.mountpoint).field("backing", &self.backing).finish()
    }
}

impl SlowFs {
    /// Mount `backing` at `mountpoint` (existing directories, neither inside the other: the
    /// daemon's own calls would loop through the mount). Both are canonicalized, as
    /// [`SlowFs::path`] and `/proc/self/mountinfo` show them.
    ///
    /// Inode numbers seen through the mount are the backing ones (git's index compares them),
    /// except the root's, which FUSE fixes at 1; so the backing directory should be a single
    /// filesystem.
    pub fn mount(backing: &Path, mountpoint: &Path, config: Config) -> io::Result<SlowFs> {
        let backing = backing.canonicalize()?;
        let mountpoint = mountpoint.canonicalize()?;
        if mountpoint.starts_with(&backing) || backing.starts_with(&mountpoint) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} and {} must not nest", backing.display(), mountpoint.display()),
            ));
        }
        let root = std::fs::metadata(&backing)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", backing.display()),
            ));
        }
        let inner = Arc::new(Inner {
            backing: backing.clone(),
            root_ino: root.ino(),
            meta_latency: config.meta_latency,
            data_latency: config.data_latency,
            case_insensitive: config.case_insensitive,
            service: Service {
                limit: config.max_concurrent.map(|n| n.max(1)),
                busy: Mutex::new(0),
                freed: Condvar::new(),
            },
            counters: Counters::default(),
            recording: AtomicBool::new(config.record_paths),
            paths: Mutex::new(Vec::new()),
            nodes: RwLock::new(HashMap::new()),
            generations: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        });

        let threads = config.threads.max(1);
        let jobs = pool::start(threads)?;
        let daemon = Daemon { inner: inner.clone(), jobs, max_background: u16::try_from(threads).unwrap_or(u16::MAX) };

        let as_root = rustix::process::geteuid().is_root();
        let mut options = fuser::Config::default();
        options.mount_options = vec![
            MountOption::FSName(FS_NAME.to_string()),
            // fuser's direct mount (root) hands only "kernel" options to mount(2) and drops
            // Subtype, so pass it raw; fusermount3 (non-root) understands Subtype itself.
            if as_root {
                MountOption::CUSTOM(format!("subtype={FS_NAME}"))
            } else {
                MountOption::Subtype(FS_NAME.into())
            },
        ];
        // Let other users in (treesync under test may run as someone else); allow_other needs
        // root or `user_allow_other` in /etc/fuse.conf.
        options.acl = if as_root { SessionACL::All } else { SessionACL::Owner };
        let session = fuser::Session::new(daemon, &mountpoint, &options)?.spawn()?;

        let mut fs = SlowFs { inner, session: Some(session), mountpoint, backing, control: None, as_root, temp: None };
        if let Some(socket) = &config.control {
            fs.control = Some(ControlServer::start(socket, fs.inner.clone())?);
        }
        Ok(fs)
    }

    /// Mount over a fresh temporary directory holding `backing/` and `mnt/`, removed on drop.
    pub fn temp(config: Config) -> io::Result<SlowFs> {
        let temp = tempfile::Builder::new().prefix("slowfs-").tempdir()?;
        let backing = temp.path().join("backing");
        let mnt = temp.path().join("mnt");
        std::fs::create_dir(&backing)?;
        std::fs::create_dir(&mnt)?;
        let mut fs = SlowFs::mount(&backing, &mnt, config)?;
        fs.temp = Some(temp);
        Ok(fs)
    }

    /// The mount point: work here to pay the latency.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing directory: changes made here are free and uncounted.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// The control socket, if [`Config::control`] was set.
    pub fn control_socket(&self) -> Option<&Path> {
        self.control.as_ref().map(|c| c.path.as_path())
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The counts once the kernel's background requests have arrived: it sends RELEASE after
    /// `close` returns, so a count read right after a program finished can miss some. Waits
    /// (up to 2 s) until the total stops changing and every created file was released.
    pub fn settled_stats(&self) -> Stats {
        let mut last = self.stats();
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            let now = self.stats();
            if now.total() == last.total() && now.count(Op::Release) >= now.count(Op::Create) {
                return now;
            }
            last = now;
        }
        last
    }

    /// Zero the counts, the maxima and the recorded paths.
    pub fn reset(&self) {
        self.inner.reset();
    }

    /// Start or stop recording `(kind, path)` per request.
    pub fn set_recording(&self, on: bool) {
        self.inner.recording.store(on, Ordering::SeqCst);
    }

    /// Unmount now, lazily if the mount is busy (then the daemon serves the remaining users
    /// until they let go), reporting failure; drop does the same and only prints failures.
    pub fn unmount(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.control = None;
        let mut result = Ok(());
        if let Some(session) = self.session.take() {
            if self.as_root {
                // A plain umount, then wait for the request loop to end. Fails with EBUSY while
                // a file is open or a cwd is inside: detached below. The loop may also go on
                // serving a reference the kernel still holds (seen after RENAME_EXCHANGE of
                // directories with readers): after 10 s the connection is aborted through
                // /sys/fs/fuse/connections, which ends the loop, instead of waiting forever.
                let connection = rustix::fs::stat(&self.mountpoint)
                    .ok()
                    .filter(|_| mount_fstype(&self.mountpoint).is_some())
                    .map(|st| rustix::fs::minor(st.st_dev));
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = tx.send(session.umount_and_join());
                });
                result = match rx.recv_timeout(std::time::Duration::from_secs(10)) {
                    Ok(r) => r,
                    Err(_) => {
                        if let Some(minor) = connection {
                            let abort = format!("/sys/fs/fuse/connections/{minor}/abort");
                            if !std::path::Path::new(&abort).exists() {
                                // The FUSE control filesystem is not always mounted.
                                let _ = std::process::Command::new("mount")
                                    .args(["-t", "fusectl", "none", "/sys/fs/fuse/connections"])
                                    .stdout(std::process::Stdio::null())
                                    .stderr(std::process::Stdio::null())
                                    .status();
                            }
                            let _ = std::fs::write(&abort, "1");
                        }
                        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap_or_else(|_| {
                            Err(io::Error::other("the FUSE request loop did not end after the connection was aborted"))
                        })
                    }
                };
            } else {
                // fuser unmounts through `fusermount3 -u -z` (lazy): joining would wait for the
                // last user of a busy mount, so let the request loop end on its own.
                drop(session);
            }
        }
        if mount_fstype(&self.mountpoint).is_some() {
            // Detach it now; the kernel ends the session once the last user lets go, and the
            // (detached) daemon keeps serving those users until then.
            if rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::DETACH).is_err() {
                let _ = std::process::Command::new("fusermount3")
                    .args(["-u", "-z", "--"])
                    .arg(&self.mountpoint)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
            if mount_fstype(&self.mountpoint).is_some() {
                // Never let TempDir's cleanup walk into a live mount (it would delete through it).
                if let Some(temp) = self.temp.take() {
                    let _ = temp.keep();
                }
                return Err(io::Error::other(format!("{} is still mounted", self.mountpoint.display())));
            }
            result = Ok(());
        }
        result
    }
}

impl Drop for SlowFs {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("slowfs: unmounting {}: {e}", self.mountpoint.display());
        }
    }
}

/// Whether FUSE mounts can be made here (`/dev/fuse`, and root or `fusermount3`); if not,
/// what is missing and the command that provides it.
pub fn check() -> Result<(), Missing> {
    if !Path::new("/dev/fuse").exists() {
        return Err(Missing::new(
            "/dev/fuse",
            "load the fuse module (modprobe fuse); in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN",
        ));
    }
    if !rustix::process::geteuid().is_root() && find_program("fusermount3").is_none() {
        return Err(Missing::new("fusermount3 (FUSE mounts without root)", "apt-get install fuse3, or run as root"));
    }
    Ok(())
}

/// Fails the test (panics) when FUSE mounts cannot be made here, naming what is missing and the
/// command that provides it ([`check`] says it without panicking).
#[track_caller]
pub fn require() {
    if let Err(m) = check() {
        m.fail()
    }
}

/// The fstype of what is mounted at `path` per `/proc/self/mountinfo` (the topmost mount), or
/// `None` if nothing is (or mountinfo cannot be read). `path` must be spelled as the kernel
/// shows it (canonical).
pub fn mount_fstype(path: &Path) -> Option<String> {
    mountinfo::at(path).ok().flatten().map(|m| m.fstype)
}
