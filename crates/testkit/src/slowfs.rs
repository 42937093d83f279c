//! A slow FUSE passthrough filesystem: the test bed for backends that write to a NAS.
//!
//! [`SlowFs`] mirrors a backing directory through a FUSE mount and sleeps a configurable
//! latency before serving each request, so a local directory behaves like an NFS mount on a
//! slow network. The kernel's entry and attribute caches are off (TTL 0, like NFS with
//! `actimeo=0`), so every `lstat` is a round trip to the daemon. Requests are served
//! concurrently by a worker pool, as a NAS serves many calls at once; `max_concurrent` models
//! a server with few threads or one big lock. Every request is counted by kind, with the most
//! in flight at once, and optionally recorded with the path it touched, so tests can assert
//! how many round trips a sync costs and that unchanged paths were left alone.
//!
//! Mounting needs `/dev/fuse` and root (as root the mount is a direct `mount(2)` call; other
//! users go through `fusermount3`). The mount shows in `/proc/self/mountinfo` with fstype
//! `fuse.treesync-slowfs`, which is how treesync's detection sees a network filesystem.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{File, Metadata, Permissions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, MountOption, OpenFlags, PollEvents, PollFlags,
    PollNotifier, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyLock, ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow,
    WriteFlags,
};
use serde::{Deserialize, Serialize};

use crate::mountinfo;

/// fsname and subtype of the mount: `/proc/self/mountinfo` shows fstype `fuse.treesync-slowfs`.
pub const FS_NAME: &str = "treesync-slowfs";

/// Entry and attribute timeout given to the kernel: none, so nothing is cached (NFS `actimeo=0`).
const TTL: Duration = Duration::ZERO;

/// How the slow filesystem behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Sleep before serving each metadata request (lookup, getattr, create, rename, readdir…):
    /// the round trip of one NFS call.
    pub meta_latency: Duration,
    /// Sleep before serving each read or write request.
    pub data_latency: Duration,
    /// Worker threads serving requests; bounds how many requests overlap (default 64).
    pub threads: usize,
    /// At most this many requests served at once, latency included (a NAS with few server
    /// threads, or one lock); `None` for no limit beyond `threads`.
    pub max_concurrent: Option<usize>,
    /// Record `(kind, path)` for every request (see [`Stats::paths`]); can be switched later
    /// with [`SlowFs::set_recording`].
    pub record_paths: bool,
    /// Serve [`Stats`] to other processes on this unix socket (see [`query`]).
    pub control: Option<PathBuf>,
    /// Names that differ only by case are the same entry, like on APFS, NTFS or an SMB share
    /// (case-preserving: an entry keeps the spelling it was created with).
    pub case_insensitive: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            meta_latency: Duration::ZERO,
            data_latency: Duration::ZERO,
            threads: 64,
            max_concurrent: None,
            record_paths: false,
            control: None,
            case_insensitive: false,
        }
    }
}

/// Kinds of FUSE requests, as counted in [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Statfs,
    Access,
    Create,
    Getxattr,
    Setxattr,
    Listxattr,
    Removexattr,
    Fallocate,
    Lseek,
    CopyFileRange,
    /// ioctl, poll, bmap, getlk, setlk: answered ENOSYS.
    Other,
}

impl Op {
    /// Every kind, in declaration order.
    pub const ALL: [Op; 32] = [
        Op::Lookup,
        Op::Getattr,
        Op::Setattr,
        Op::Readlink,
        Op::Mknod,
        Op::Mkdir,
        Op::Unlink,
        Op::Rmdir,
        Op::Symlink,
        Op::Rename,
        Op::Link,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Release,
        Op::Fsync,
        Op::Opendir,
        Op::Readdir,
        Op::Releasedir,
        Op::Fsyncdir,
        Op::Statfs,
        Op::Access,
        Op::Create,
        Op::Getxattr,
        Op::Setxattr,
        Op::Listxattr,
        Op::Removexattr,
        Op::Fallocate,
        Op::Lseek,
        Op::CopyFileRange,
        Op::Other,
    ];

    /// Lower-case name, as in the JSON snapshot.
    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "lookup",
            Op::Getattr => "getattr",
            Op::Setattr => "setattr",
            Op::Readlink => "readlink",
            Op::Mknod => "mknod",
            Op::Mkdir => "mkdir",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Symlink => "symlink",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Release => "release",
            Op::Fsync => "fsync",
            Op::Opendir => "opendir",
            Op::Readdir => "readdir",
            Op::Releasedir => "releasedir",
            Op::Fsyncdir => "fsyncdir",
            Op::Statfs => "statfs",
            Op::Access => "access",
            Op::Create => "create",
            Op::Getxattr => "getxattr",
            Op::Setxattr => "setxattr",
            Op::Listxattr => "listxattr",
            Op::Removexattr => "removexattr",
            Op::Fallocate => "fallocate",
            Op::Lseek => "lseek",
            Op::CopyFileRange => "copy_file_range",
            Op::Other => "other",
        }
    }

    /// Read and write pay [`Config::data_latency`]; everything else [`Config::meta_latency`].
    pub fn is_data(self) -> bool {
        matches!(self, Op::Read | Op::Write)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Counts for one kind of request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStats {
    /// Requests received.
    pub count: u64,
    /// Most requests of this kind in flight at once, from receipt to reply.
    pub max_in_flight: u64,
}

/// A snapshot of the counters, as returned by [`SlowFs::stats`] and the control socket (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Counts by kind; kinds never seen since the last reset are absent.
    pub ops: BTreeMap<Op, OpStats>,
    /// Inodes forgotten (one per FORGET, one per entry of a BATCH_FORGET): the kernel dropping
    /// inodes from its cache, not requests made by a program, so not part of [`Stats::total`].
    pub forgets: u64,
    /// Most requests in flight at once, all kinds together.
    pub max_in_flight: u64,
    /// Most requests being served at once (holding a service slot, latency included); never
    /// above [`Config::max_concurrent`].
    pub max_in_service: u64,
    /// `(kind, path)` per request while recording was on, in order of receipt. Paths are
    /// relative to the mount root (`""` is the root itself); a rename or link records its
    /// source then its destination. An inode whose path is unknown shows as `<ino N>`.
    pub paths: Vec<(Op, String)>,
}

impl Stats {
    /// Requests of all kinds (FORGETs excluded).
    pub fn total(&self) -> u64 {
        self.ops.values().map(|s| s.count).sum()
    }

    /// Requests of one kind.
    pub fn count(&self, op: Op) -> u64 {
        self.ops.get(&op).map_or(0, |s| s.count)
    }

    /// Most requests of one kind in flight at once.
    pub fn max_in_flight_of(&self, op: Op) -> u64 {
        self.ops.get(&op).map_or(0, |s| s.max_in_flight)
    }

    /// Whether any recorded request touched exactly `path` (relative to the mount root).
    pub fn touched(&self, path: &str) -> bool {
        self.paths.iter().any(|(_, p)| p == path)
    }

    /// Whether any recorded request touched `path` or something below it.
    pub fn touched_under(&self, path: &str) -> bool {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        self.paths.iter().any(|(_, p)| p == path || p.starts_with(&prefix))
    }
}

/// The counts as a table: kind, count, max in flight, then the totals.
impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<16} {:>10} {:>14}", "kind", "count", "max in flight")?;
        for (op, s) in &self.ops {
            writeln!(f, "{:<16} {:>10} {:>14}", op.name(), s.count, s.max_in_flight)?;
        }
        writeln!(f, "{:<16} {:>10} {:>14}", "total", self.total(), self.max_in_flight)?;
        write!(f, "forgets: {}, max in service: {}", self.forgets, self.max_in_service)
    }
}

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
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..threads {
            let queue = queue.clone();
            thread::Builder::new().name(format!("slowfs-{i}")).stack_size(512 * 1024).spawn(move || worker(&queue))?;
        }
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
                // a file is open or a cwd is inside: detached below.
                result = session.umount_and_join();
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

/// Whether FUSE mounts can be made here (`/dev/fuse`, and root or `fusermount3`). Outside CI a
/// test may skip when not; under CI (`CI` set) that is a failure: `.ci/run` installs fuse3.
pub fn available() -> bool {
    let fusermount = || std::process::Command::new("fusermount3").arg("-V").output().is_ok();
    let ok = Path::new("/dev/fuse").exists() && (rustix::process::geteuid().is_root() || fusermount());
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("FUSE is not available (needs /dev/fuse, and root or fusermount3 from apt fuse3)");
        }
        eprintln!("skipped: needs /dev/fuse, and root or fusermount3");
    }
    ok
}

/// The fstype of what is mounted at `path` per `/proc/self/mountinfo` (the topmost mount), or
/// `None` if nothing is (or mountinfo cannot be read). `path` must be spelled as the kernel
/// shows it (canonical).
pub fn mount_fstype(path: &Path) -> Option<String> {
    mountinfo::at(path).ok().flatten().map(|m| m.fstype)
}

/// Send one command to a slow filesystem's control socket and return its answer:
/// `stats` → the [`Stats`] as JSON, `reset` → `ok`, `record on` / `record off` → `ok`.
pub fn query(socket: &Path, cmd: &str) -> io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(format!("{}\n", cmd.trim()).as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.trim_end().to_string())
}

// ---------------------------------------------------------------------------------------------
// Control socket

struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    fn start(path: &Path, inner: Arc<Inner>) -> io::Result<ControlServer> {
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

fn serve_control(stream: UnixStream, inner: &Inner) -> io::Result<()> {
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

// ---------------------------------------------------------------------------------------------
// Counters

const N_OPS: usize = Op::ALL.len();

struct Counters {
    count: [AtomicU64; N_OPS],
    in_flight: [AtomicU64; N_OPS],
    max_in_flight: [AtomicU64; N_OPS],
    all_in_flight: AtomicU64,
    all_max_in_flight: AtomicU64,
    in_service: AtomicU64,
    max_in_service: AtomicU64,
    forgets: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            in_flight: std::array::from_fn(|_| AtomicU64::new(0)),
            max_in_flight: std::array::from_fn(|_| AtomicU64::new(0)),
            all_in_flight: AtomicU64::new(0),
            all_max_in_flight: AtomicU64::new(0),
            in_service: AtomicU64::new(0),
            max_in_service: AtomicU64::new(0),
            forgets: AtomicU64::new(0),
        }
    }
}

/// Limits how many requests are served at once.
struct Service {
    limit: Option<usize>,
    busy: Mutex<usize>,
    freed: Condvar,
}

/// One request from receipt to reply: counts it in flight until dropped.
struct Ticket {
    inner: Arc<Inner>,
    op: Op,
}

impl Ticket {
    fn new(inner: Arc<Inner>, op: Op) -> Ticket {
        let c = &inner.counters;
        let i = op as usize;
        c.count[i].fetch_add(1, Ordering::SeqCst);
        let now = c.in_flight[i].fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight[i].fetch_max(now, Ordering::SeqCst);
        let all = c.all_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.all_max_in_flight.fetch_max(all, Ordering::SeqCst);
        Ticket { inner, op }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let c = &self.inner.counters;
        c.in_flight[self.op as usize].fetch_sub(1, Ordering::SeqCst);
        c.all_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Holds a service slot; released on drop (also on panic).
struct Slot<'a>(&'a Inner);

impl<'a> Slot<'a> {
    fn take(inner: &'a Inner) -> Slot<'a> {
        let s = &inner.service;
        let mut busy = lock(&s.busy);
        if let Some(limit) = s.limit {
            while *busy >= limit {
                busy = s.freed.wait(busy).unwrap_or_else(|e| e.into_inner());
            }
        }
        *busy += 1;
        drop(busy);
        let c = &inner.counters;
        let now = c.in_service.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_service.fetch_max(now, Ordering::SeqCst);
        Slot(inner)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.counters.in_service.fetch_sub(1, Ordering::SeqCst);
        let s = &self.0.service;
        *lock(&s.busy) -= 1;
        s.freed.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The filesystem proper

type Res<T> = Result<T, Errno>;
type Job = Box<dyn FnOnce() + Send>;

fn worker(queue: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = lock(queue).recv();
        match job {
            // A panic drops the reply, which answers EIO; the worker lives on.
            Ok(job) => drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))),
            Err(_) => return,
        }
    }
}

/// A directory listing taken when a reader starts at offset 0; later offsets index into it.
struct DirEnt {
    ino: u64,
    kind: FileType,
    name: OsString,
}

struct DirHandle {
    ino: u64,
    path: PathBuf,
    listing: Mutex<Option<Arc<Vec<DirEnt>>>>,
}

struct OpenFile {
    ino: u64,
    file: Arc<File>,
}

/// State shared by the request loop, the workers and [`SlowFs`].
struct Inner {
    backing: PathBuf,
    /// st_ino of the backing root, shown to the kernel as inode 1.
    root_ino: u64,
    meta_latency: Duration,
    data_latency: Duration,
    case_insensitive: bool,
    service: Service,
    counters: Counters,
    recording: AtomicBool,
    paths: Mutex<Vec<(Op, String)>>,
    /// inode → (parent inode, name), learnt from lookup/create/mkdir/… and kept current by
    /// rename/unlink/rmdir: how an inode number becomes a backing path.
    nodes: RwLock<HashMap<u64, (u64, OsString)>>,
    /// inode → generation. The backing filesystem reuses the inode number of a removed file
    /// for a new one; the kernel tells them apart by the generation (same number and
    /// generation = same inode, so a new directory would inherit the dead one's state and
    /// refuse entries with ENOENT). Every object created through the mount gets a new one.
    generations: Mutex<HashMap<u64, u64>>,
    files: Mutex<HashMap<u64, OpenFile>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_fh: AtomicU64,
}

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

fn rerrno(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

fn system_time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsecs.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

fn timespec(t: Option<TimeOrNow>) -> rustix::fs::Timespec {
    match t {
        None => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        Some(TimeOrNow::Now) => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_NOW },
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => rustix::fs::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos().into() },
            Err(e) => {
                let d = e.duration();
                let (secs, nanos) = (d.as_secs() as i64, d.subsec_nanos());
                if nanos == 0 {
                    rustix::fs::Timespec { tv_sec: -secs, tv_nsec: 0 }
                } else {
                    rustix::fs::Timespec { tv_sec: -secs - 1, tv_nsec: (1_000_000_000 - nanos).into() }
                }
            }
        },
    }
}

/// Set the permission bits to exactly `mode & 0o777` when the daemon's umask took some away
/// (the kernel already applied the caller's umask).
fn fix_mode(path: &Path, mode: u32) -> io::Result<()> {
    let md = std::fs::symlink_metadata(path)?;
    if md.mode() & 0o777 != mode & 0o777 {
        std::fs::set_permissions(path, Permissions::from_mode((md.mode() & 0o7000) | (mode & 0o777)))?;
    }
    Ok(())
}

impl Inner {
    fn stats(&self) -> Stats {
        let c = &self.counters;
        let mut ops = BTreeMap::new();
        for op in Op::ALL {
            let i = op as usize;
            let count = c.count[i].load(Ordering::SeqCst);
            let max_in_flight = c.max_in_flight[i].load(Ordering::SeqCst);
            if count > 0 || max_in_flight > 0 {
                ops.insert(op, OpStats { count, max_in_flight });
            }
        }
        Stats {
            ops,
            forgets: c.forgets.load(Ordering::SeqCst),
            max_in_flight: c.all_max_in_flight.load(Ordering::SeqCst),
            max_in_service: c.max_in_service.load(Ordering::SeqCst),
            paths: lock(&self.paths).clone(),
        }
    }

    fn reset(&self) {
        let c = &self.counters;
        for i in 0..N_OPS {
            c.count[i].store(0, Ordering::SeqCst);
            // Requests still in flight stay counted as in flight.
            c.max_in_flight[i].store(c.in_flight[i].load(Ordering::SeqCst), Ordering::SeqCst);
        }
        c.all_max_in_flight.store(c.all_in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
        c.max_in_service.store(c.in_service.load(Ordering::SeqCst), Ordering::SeqCst);
        c.forgets.store(0, Ordering::SeqCst);
        lock(&self.paths).clear();
    }

    /// Sleep the latency while holding a service slot, then do the work.
    fn serve<T>(&self, op: Op, work: impl FnOnce(&Inner) -> T) -> T {
        let _slot = Slot::take(self);
        let latency = if op.is_data() { self.data_latency } else { self.meta_latency };
        if !latency.is_zero() {
            thread::sleep(latency);
        }
        work(self)
    }

    // --- inode numbers and paths

    fn fuse_ino(&self, st_ino: u64) -> u64 {
        if st_ino == self.root_ino { INodeNo::ROOT.0 } else { st_ino }
    }

    /// An existing object's attributes with its current generation.
    fn known(&self, attr: FileAttr) -> (FileAttr, u64) {
        let g = self.generations.lock().expect("never poisoned").get(&attr.ino.0).copied().unwrap_or(0);
        (attr, g)
    }

    /// A new object's attributes with a new generation for its (possibly reused) number.
    fn born(&self, attr: FileAttr) -> (FileAttr, u64) {
        let mut gens = self.generations.lock().expect("never poisoned");
        let g = gens.entry(attr.ino.0).or_insert(0);
        *g += 1;
        (attr, *g)
    }

    fn attr(&self, md: &Metadata) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.fuse_ino(md.ino())),
            size: md.size(),
            blocks: md.blocks(),
            atime: system_time(md.atime(), md.atime_nsec()),
            mtime: system_time(md.mtime(), md.mtime_nsec()),
            ctime: system_time(md.ctime(), md.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: FileType::from_std(md.file_type()).unwrap_or(FileType::RegularFile),
            perm: (md.mode() & 0o7777) as u16,
            nlink: u32::try_from(md.nlink()).unwrap_or(u32::MAX),
            uid: md.uid(),
            gid: md.gid(),
            rdev: md.rdev() as u32,
            blksize: u32::try_from(md.blksize()).unwrap_or(4096),
            flags: 0,
        }
    }

    /// Path of `ino` relative to the backing root.
    fn rel(&self, ino: u64) -> Option<PathBuf> {
        if ino == INodeNo::ROOT.0 {
            return Some(PathBuf::new());
        }
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        let mut names = Vec::new();
        let mut cur = ino;
        while cur != INodeNo::ROOT.0 {
            let (parent, name) = nodes.get(&cur)?;
            names.push(name.as_os_str());
            cur = *parent;
            if names.len() > 4096 {
                return None;
            }
        }
        Some(names.iter().rev().collect())
    }

    fn path(&self, ino: u64) -> Res<PathBuf> {
        self.rel(ino).map(|rel| self.backing.join(rel)).ok_or(Errno::ESTALE)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Res<PathBuf> {
        let dir = self.path(parent)?;
        let exact = dir.join(name);
        if !self.case_insensitive || std::fs::symlink_metadata(&exact).is_ok() {
            return Ok(exact);
        }
        // Case-insensitive: an existing entry spelled differently is this one.
        let want = name.to_string_lossy().to_lowercase();
        let found = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().to_lowercase() == want);
        Ok(found.map_or(exact, |e| dir.join(e.file_name())))
    }

    fn describe(&self, ino: u64, name: Option<&OsStr>) -> String {
        match (self.rel(ino), name) {
            (Some(rel), Some(name)) => rel.join(name).to_string_lossy().into_owned(),
            (Some(rel), None) => rel.to_string_lossy().into_owned(),
            (None, Some(name)) => format!("<ino {ino}>/{}", name.to_string_lossy()),
            (None, None) => format!("<ino {ino}>"),
        }
    }

    fn remember(&self, ino: u64, parent: u64, name: &OsStr) {
        if ino != INodeNo::ROOT.0 {
            self.nodes.write().unwrap_or_else(|e| e.into_inner()).insert(ino, (parent, name.to_owned()));
        }
    }

    /// Forget `ino` if it is known under (parent, name) (a hard link elsewhere stays known).
    fn forget_name(&self, ino: u64, parent: u64, name: &OsStr) {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if nodes.get(&ino).is_some_and(|(p, n)| *p == parent && n == name) {
            nodes.remove(&ino);
        }
    }

    /// Stat `parent/name` and remember where its inode lives.
    fn entry(&self, parent: u64, name: &OsStr, path: &Path) -> Res<FileAttr> {
        let md = std::fs::symlink_metadata(path).map_err(errno)?;
        let attr = self.attr(&md);
        // The spelling on disk (it differs from `name` on a case-insensitive filesystem).
        self.remember(attr.ino.0, parent, path.file_name().unwrap_or(name));
        Ok(attr)
    }

    fn open_file(&self, ino: u64) -> Option<Arc<File>> {
        lock(&self.files).get(&ino).map(|f| f.file.clone())
    }

    fn handle(&self, fh: u64) -> Res<Arc<File>> {
        lock(&self.files).get(&fh).map(|f| f.file.clone()).ok_or(Errno::EBADF)
    }

    fn add_handle(&self, ino: u64, file: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        lock(&self.files).insert(fh, OpenFile { ino, file: Arc::new(file) });
        fh
    }

    // --- operations, run by the workers after the latency

    fn lookup(&self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        self.entry(parent, name, &path)
    }

    fn getattr(&self, ino: u64, fh: Option<u64>) -> Res<FileAttr> {
        if let Some(file) = fh.and_then(|fh| self.open_file(fh)) {
            return Ok(self.attr(&file.metadata().map_err(errno)?));
        }
        let by_path = self.path(ino).and_then(|p| std::fs::symlink_metadata(p).map_err(errno));
        match by_path {
            Ok(md) if self.fuse_ino(md.ino()) == ino => Ok(self.attr(&md)),
            other => {
                // Unlinked while open, or moved behind our back: an open handle still knows it.
                let open = lock(&self.files).values().find(|f| f.ino == ino).map(|f| f.file.clone());
                match (open, other) {
                    (Some(file), _) => Ok(self.attr(&file.metadata().map_err(errno)?)),
                    (None, Err(e)) => Err(e),
                    (None, Ok(_)) => Err(Errno::ESTALE),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<u64>,
    ) -> Res<FileAttr> {
        let file = fh.and_then(|fh| self.open_file(fh));
        let path = self.path(ino);
        if let Some(mode) = mode {
            let perm = Permissions::from_mode(mode & 0o7777);
            match &file {
                Some(f) => f.set_permissions(perm),
                None => std::fs::set_permissions(path.clone()?, perm),
            }
            .map_err(errno)?;
        }
        if uid.is_some() || gid.is_some() {
            match &file {
                Some(f) => std::os::unix::fs::fchown(f.as_ref(), uid, gid),
                None => std::os::unix::fs::lchown(path.clone()?, uid, gid),
            }
            .map_err(errno)?;
        }
        if let Some(size) = size {
            match &file {
                Some(f) => f.set_len(size),
                None => std::fs::OpenOptions::new().write(true).open(path.clone()?).and_then(|f| f.set_len(size)),
            }
            .map_err(errno)?;
        }
        if atime.is_some() || mtime.is_some() {
            let times = rustix::fs::Timestamps { last_access: timespec(atime), last_modification: timespec(mtime) };
            match &file {
                Some(f) => rustix::fs::futimens(f.as_ref(), &times),
                None => rustix::fs::utimensat(
                    rustix::fs::CWD,
                    path.clone()?.as_path(),
                    &times,
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                ),
            }
            .map_err(rerrno)?;
        }
        match &file {
            Some(f) => Ok(self.attr(&f.metadata().map_err(errno)?)),
            None => Ok(self.attr(&std::fs::symlink_metadata(path?).map_err(errno)?)),
        }
    }

    fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let target = std::fs::read_link(self.path(ino)?).map_err(errno)?;
        Ok(target.into_os_string().into_encoded_bytes())
    }

    fn mknod(&self, parent: u64, name: &OsStr, mode: u32, rdev: u32) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        let file_type = rustix::fs::FileType::from_raw_mode(mode);
        if file_type == rustix::fs::FileType::RegularFile {
            std::fs::OpenOptions::new().write(true).create_new(true).mode(mode & 0o7777).open(&path).map_err(errno)?;
        } else {
            let perm = rustix::fs::Mode::from_raw_mode(mode & 0o7777);
            rustix::fs::mknodat(rustix::fs::CWD, &path, file_type, perm, rdev.into()).map_err(rerrno)?;
        }
        fix_mode(&path, mode).map_err(errno)?;
        self.entry(parent, name, &path)
    }

    fn mkdir(&self, parent: u64, name: &OsStr, mode: u32) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        std::fs::DirBuilder::new().mode(mode & 0o7777).create(&path).map_err(errno)?;
        fix_mode(&path, mode).map_err(errno)?;
        self.entry(parent, name, &path)
    }

    fn unlink(&self, parent: u64, name: &OsStr, dir: bool) -> Res<()> {
        let path = self.child(parent, name)?;
        let ino = std::fs::symlink_metadata(&path).map(|md| self.fuse_ino(md.ino())).ok();
        if dir { std::fs::remove_dir(&path) } else { std::fs::remove_file(&path) }.map_err(errno)?;
        if let Some(ino) = ino {
            self.forget_name(ino, parent, path.file_name().unwrap_or(name));
        }
        Ok(())
    }

    fn symlink(&self, parent: u64, name: &OsStr, target: &Path) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        std::os::unix::fs::symlink(target, &path).map_err(errno)?;
        self.entry(parent, name, &path)
    }

    fn rename(&self, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Res<()> {
        let from = self.child(parent, name)?;
        let to = self.child(newparent, newname)?;
        let ino_of = |p: &Path| std::fs::symlink_metadata(p).map(|md| self.fuse_ino(md.ino())).ok();
        let (from_ino, to_ino) = (ino_of(&from), ino_of(&to));
        let flags = rustix::fs::RenameFlags::from_bits_retain(flags);
        rustix::fs::renameat_with(rustix::fs::CWD, &from, rustix::fs::CWD, &to, flags).map_err(rerrno)?;
        let exchanged = flags.contains(rustix::fs::RenameFlags::EXCHANGE);
        if let Some(ino) = to_ino.filter(|&ino| Some(ino) != from_ino) {
            if exchanged {
                self.remember(ino, parent, from.file_name().unwrap_or(name));
            } else {
                self.forget_name(ino, newparent, to.file_name().unwrap_or(newname));
            }
        }
        if let Some(ino) = from_ino {
            self.remember(ino, newparent, to.file_name().unwrap_or(newname));
        }
        Ok(())
    }

    fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> Res<FileAttr> {
        let from = self.path(ino)?;
        let to = self.child(newparent, newname)?;
        std::fs::hard_link(&from, &to).map_err(errno)?;
        let md = std::fs::symlink_metadata(&to).map_err(errno)?;
        Ok(self.attr(&md))
    }

    fn open(&self, ino: u64, flags: i32) -> Res<u64> {
        use rustix::fs::OFlags;
        let path = self.path(ino)?;
        let flags = (OFlags::from_bits_retain(flags as u32)
            - (OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::DIRECT))
            | OFlags::CLOEXEC;
        let fd = rustix::fs::open(&path, flags, rustix::fs::Mode::empty()).map_err(rerrno)?;
        Ok(self.add_handle(ino, File::from(fd)))
    }

    fn create(&self, parent: u64, name: &OsStr, mode: u32, flags: i32) -> Res<(FileAttr, u64)> {
        use rustix::fs::OFlags;
        let path = self.child(parent, name)?;
        let asked = OFlags::from_bits_retain(flags as u32);
        let base = (asked - (OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::DIRECT)) | OFlags::CLOEXEC;
        let perm = rustix::fs::Mode::from_raw_mode(mode & 0o7777);
        // Create exclusively to know whether we made it (only then fix its mode); fall back to
        // opening the existing file unless the caller asked for O_EXCL.
        let (fd, created) = match rustix::fs::open(&path, base | OFlags::CREATE | OFlags::EXCL, perm) {
            Ok(fd) => (fd, true),
            Err(rustix::io::Errno::EXIST) if !asked.contains(OFlags::EXCL) => {
                (rustix::fs::open(&path, base, perm).map_err(rerrno)?, false)
            }
            Err(e) => return Err(rerrno(e)),
        };
        let file = File::from(fd);
        let mut md = file.metadata().map_err(errno)?;
        if created && md.mode() & 0o7777 != mode & 0o7777 {
            file.set_permissions(Permissions::from_mode(mode & 0o7777)).map_err(errno)?;
            md = file.metadata().map_err(errno)?;
        }
        let attr = self.attr(&md);
        self.remember(attr.ino.0, parent, name);
        Ok((attr, self.add_handle(attr.ino.0, file)))
    }

    fn read(&self, fh: u64, offset: u64, size: u32) -> Res<Vec<u8>> {
        let file = self.handle(fh)?;
        let mut buf = vec![0; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(errno(e)),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Res<u32> {
        let file = self.handle(fh)?;
        file.write_all_at(data, offset).map_err(errno)?;
        Ok(data.len() as u32)
    }

    fn fsync(&self, fh: u64, datasync: bool) -> Res<()> {
        let file = self.handle(fh)?;
        if datasync { file.sync_data() } else { file.sync_all() }.map_err(errno)
    }

    fn opendir(&self, ino: u64) -> Res<u64> {
        let path = self.path(ino)?;
        if !std::fs::symlink_metadata(&path).map_err(errno)?.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        lock(&self.dirs).insert(fh, Arc::new(DirHandle { ino, path, listing: Mutex::new(None) }));
        Ok(fh)
    }

    fn readdir(&self, fh: u64, offset: u64) -> Res<Arc<Vec<DirEnt>>> {
        let dir = lock(&self.dirs).get(&fh).cloned().ok_or(Errno::EBADF)?;
        let mut listing = lock(&dir.listing);
        if let Some(l) = listing.as_ref().filter(|_| offset != 0) {
            return Ok(l.clone());
        }
        let parent = if dir.ino == INodeNo::ROOT.0 {
            INodeNo::ROOT.0
        } else {
            self.nodes.read().unwrap_or_else(|e| e.into_inner()).get(&dir.ino).map_or(INodeNo::ROOT.0, |(p, _)| *p)
        };
        let mut entries = vec![
            DirEnt { ino: dir.ino, kind: FileType::Directory, name: ".".into() },
            DirEnt { ino: parent, kind: FileType::Directory, name: "..".into() },
        ];
        for entry in std::fs::read_dir(&dir.path).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            let kind = entry.file_type().ok().and_then(FileType::from_std).unwrap_or(FileType::RegularFile);
            entries.push(DirEnt {
                ino: self.fuse_ino(std::os::unix::fs::DirEntryExt::ino(&entry)),
                kind,
                name: entry.file_name(),
            });
        }
        let entries = Arc::new(entries);
        *listing = Some(entries.clone());
        Ok(entries)
    }

    fn fsyncdir(&self, fh: u64) -> Res<()> {
        let dir = lock(&self.dirs).get(&fh).cloned().ok_or(Errno::EBADF)?;
        File::open(&dir.path).and_then(|f| f.sync_all()).map_err(errno)
    }

    fn statfs(&self) -> Res<rustix::fs::StatVfs> {
        rustix::fs::statvfs(&self.backing).map_err(rerrno)
    }

    fn access(&self, ino: u64, mask: i32) -> Res<()> {
        let access = rustix::fs::Access::from_bits_retain(mask as u32);
        rustix::fs::accessat(rustix::fs::CWD, &self.path(ino)?, access, rustix::fs::AtFlags::empty()).map_err(rerrno)
    }
}

/// The [`Filesystem`] fuser calls from its request loop: it counts and records each request,
/// then hands it with its reply to the worker pool, so the loop never sleeps.
struct Daemon {
    inner: Arc<Inner>,
    jobs: mpsc::Sender<Job>,
    max_background: u16,
}

fn reply_entry(reply: ReplyEntry) -> impl FnOnce(Res<(FileAttr, u64)>) + Send + 'static {
    move |r| match r {
        Ok((attr, generation)) => reply.entry(&TTL, &attr, Generation(generation)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty) -> impl FnOnce(Res<()>) + Send + 'static {
    move |r| match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn reply_attr(reply: ReplyAttr) -> impl FnOnce(Res<FileAttr>) + Send + 'static {
    move |r| match r {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(e),
    }
}

fn reply_open(reply: ReplyOpen) -> impl FnOnce(Res<u64>) + Send + 'static {
    move |r| match r {
        Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
        Err(e) => reply.error(e),
    }
}

impl Daemon {
    /// Count the request now (its receipt), then serve and answer it on a worker. The in-flight
    /// count ends before the reply is sent, so a program's next request never overlaps it.
    fn run<T: Send + 'static>(
        &self,
        op: Op,
        work: impl FnOnce(&Inner) -> T + Send + 'static,
        respond: impl FnOnce(T) + Send + 'static,
    ) {
        let ticket = Ticket::new(self.inner.clone(), op);
        let job: Job = Box::new(move || {
            let result = ticket.inner.serve(op, work);
            drop(ticket);
            respond(result);
        });
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            job();
        }
    }

    fn recording(&self) -> bool {
        self.inner.recording.load(Ordering::Relaxed)
    }

    fn note(&self, op: Op, ino: INodeNo, name: Option<&OsStr>) {
        if self.recording() {
            let path = self.inner.describe(ino.0, name);
            lock(&self.inner.paths).push((op, path));
        }
    }

    fn unsupported(&self, op: Op, ino: INodeNo, respond: impl FnOnce(Errno) + Send + 'static) {
        self.note(op, ino, None);
        self.run(op, |_| Errno::ENOSYS, respond);
    }
}

impl Filesystem for Daemon {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Lookups and readdirs in one directory may overlap, as on NFS; without this the kernel
        // serializes them per directory.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_background(self.max_background);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.note(Op::Lookup, parent, Some(name));
        let name = name.to_owned();
        self.run(Op::Lookup, move |fs| fs.lookup(parent.0, &name).map(|a| fs.known(a)), reply_entry(reply));
    }

    // fuser 0.18 does not export `ForgetOne`, so `batch_forget` cannot be overridden; its
    // default calls this once per inode.
    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {
        self.inner.counters.forgets.fetch_add(1, Ordering::SeqCst);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.note(Op::Getattr, ino, None);
        self.run(Op::Getattr, move |fs| fs.getattr(ino.0, fh.map(|f| f.0)), reply_attr(reply));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.note(Op::Setattr, ino, None);
        self.run(
            Op::Setattr,
            move |fs| fs.setattr(ino.0, mode, uid, gid, size, atime, mtime, fh.map(|f| f.0)),
            reply_attr(reply),
        );
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.note(Op::Readlink, ino, None);
        self.run(
            Op::Readlink,
            move |fs| fs.readlink(ino.0),
            move |r| match r {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(e),
            },
        );
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.note(Op::Mknod, parent, Some(name));
        let name = name.to_owned();
        self.run(Op::Mknod, move |fs| fs.mknod(parent.0, &name, mode, rdev).map(|a| fs.born(a)), reply_entry(reply));
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        self.note(Op::Mkdir, parent, Some(name));
        let name = name.to_owned();
        self.run(Op::Mkdir, move |fs| fs.mkdir(parent.0, &name, mode).map(|a| fs.born(a)), reply_entry(reply));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.note(Op::Unlink, parent, Some(name));
        let name = name.to_owned();
        self.run(Op::Unlink, move |fs| fs.unlink(parent.0, &name, false), reply_empty(reply));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.note(Op::Rmdir, parent, Some(name));
        let name = name.to_owned();
        self.run(Op::Rmdir, move |fs| fs.unlink(parent.0, &name, true), reply_empty(reply));
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.note(Op::Symlink, parent, Some(link_name));
        let (name, target) = (link_name.to_owned(), target.to_owned());
        self.run(Op::Symlink, move |fs| fs.symlink(parent.0, &name, &target).map(|a| fs.born(a)), reply_entry(reply));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.note(Op::Rename, parent, Some(name));
        self.note(Op::Rename, newparent, Some(newname));
        let (name, newname) = (name.to_owned(), newname.to_owned());
        self.run(
            Op::Rename,
            move |fs| fs.rename(parent.0, &name, newparent.0, &newname, flags.bits()),
            reply_empty(reply),
        );
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.note(Op::Link, ino, None);
        self.note(Op::Link, newparent, Some(newname));
        let newname = newname.to_owned();
        self.run(Op::Link, move |fs| fs.link(ino.0, newparent.0, &newname).map(|a| fs.known(a)), reply_entry(reply));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.note(Op::Open, ino, None);
        self.run(Op::Open, move |fs| fs.open(ino.0, flags.0), reply_open(reply));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.note(Op::Read, ino, None);
        self.run(
            Op::Read,
            move |fs| fs.read(fh.0, offset, size),
            move |r| match r {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e),
            },
        );
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.note(Op::Write, ino, None);
        let data = data.to_vec();
        self.run(
            Op::Write,
            move |fs| fs.write(fh.0, offset, &data),
            move |r| match r {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            },
        );
    }

    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        self.note(Op::Flush, ino, None);
        self.run(Op::Flush, |_| Ok(()), reply_empty(reply));
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.note(Op::Release, ino, None);
        self.run(
            Op::Release,
            move |fs| {
                lock(&fs.files).remove(&fh.0);
                Ok(())
            },
            reply_empty(reply),
        );
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.note(Op::Fsync, ino, None);
        self.run(Op::Fsync, move |fs| fs.fsync(fh.0, datasync), reply_empty(reply));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.note(Op::Opendir, ino, None);
        self.run(Op::Opendir, move |fs| fs.opendir(ino.0), reply_open(reply));
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.note(Op::Readdir, ino, None);
        self.run(
            Op::Readdir,
            move |fs| fs.readdir(fh.0, offset),
            move |r| match r {
                Ok(entries) => {
                    // Each entry's offset is the index of the next one: where to resume.
                    for (i, e) in entries.iter().enumerate().skip(offset as usize) {
                        if reply.add(INodeNo(e.ino), i as u64 + 1, e.kind, &e.name) {
                            break;
                        }
                    }
                    reply.ok();
                }
                Err(e) => reply.error(e),
            },
        );
    }

    fn releasedir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.note(Op::Releasedir, ino, None);
        self.run(
            Op::Releasedir,
            move |fs| {
                lock(&fs.dirs).remove(&fh.0);
                Ok(())
            },
            reply_empty(reply),
        );
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.note(Op::Fsyncdir, ino, None);
        self.run(Op::Fsyncdir, move |fs| fs.fsyncdir(fh.0), reply_empty(reply));
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.note(Op::Statfs, ino, None);
        self.run(
            Op::Statfs,
            |fs| fs.statfs(),
            move |r| match r {
                Ok(s) => reply.statfs(
                    s.f_blocks,
                    s.f_bfree,
                    s.f_bavail,
                    s.f_files,
                    s.f_ffree,
                    u32::try_from(s.f_bsize).unwrap_or(4096),
                    u32::try_from(s.f_namemax).unwrap_or(255),
                    u32::try_from(s.f_frsize).unwrap_or(4096),
                ),
                Err(e) => reply.error(e),
            },
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.unsupported(Op::Setxattr, ino, move |e| reply.error(e));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        self.unsupported(Op::Getxattr, ino, move |e| reply.error(e));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, _size: u32, reply: ReplyXattr) {
        self.unsupported(Op::Listxattr, ino, move |e| reply.error(e));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        self.unsupported(Op::Removexattr, ino, move |e| reply.error(e));
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.note(Op::Access, ino, None);
        self.run(Op::Access, move |fs| fs.access(ino.0, mask.bits()), reply_empty(reply));
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.note(Op::Create, parent, Some(name));
        let name = name.to_owned();
        self.run(
            Op::Create,
            move |fs| fs.create(parent.0, &name, mode, flags).map(|(a, fh)| (fs.born(a), fh)),
            move |r| match r {
                Ok(((attr, generation), fh)) => {
                    reply.created(&TTL, &attr, Generation(generation), FileHandle(fh), FopenFlags::empty())
                }
                Err(e) => reply.error(e),
            },
        );
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        self.unsupported(Op::Other, ino, move |e| reply.error(e));
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        _sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.unsupported(Op::Other, ino, move |e| reply.error(e));
    }

    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.unsupported(Op::Other, ino, move |e| reply.error(e));
    }

    fn poll(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        _events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        self.unsupported(Op::Other, ino, move |e| reply.error(e));
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        self.unsupported(Op::Fallocate, ino, move |e| reply.error(e));
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _offset: i64, _whence: i32, reply: ReplyLseek) {
        self.unsupported(Op::Lseek, ino, move |e| reply.error(e));
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.unsupported(Op::CopyFileRange, ino_in, move |e| reply.error(e));
    }
}
