//! A real NFSv3 server for tests: nfs-ganesha (FSAL VFS) on 127.0.0.1, exporting a fresh tmpfs.
//!
//! Each [`Ganesha`] is a private instance, so several can run at once (test binaries run in
//! parallel): its own ports (picked free on 127.0.0.1), its own rpcbind in its own mount and pid
//! namespaces (a private `/run` for rpcbind's unix socket, and a private `/etc/netconfig` holding
//! only the `local` and `unix` transports, so rpcbind listens on no network socket at all), and
//! every file ganesha writes (config, log, pid file, NFSv4 recovery directory) in the instance's
//! own temporary directory. Clients cannot ask rpcbind for the ports (it is unreachable by
//! design): they are given them, see [`Ganesha::url`].
//!
//! The export is configured like a NAS mounted with `actimeo=0`: `Attr_Expiration_Time = 0`
//! (changes made directly in [`Ganesha::dir`] are seen by clients at once), rsize/wsize capped at
//! 1 MiB ([`MAX_IO`]), `No_Root_Squash`, NFSv3 over TCP only (no UDP, NLM, RQUOTA or NFSv4).
//!
//! Nothing outlives the test process, even when it is killed with SIGKILL: the process tree is
//! ```text
//! test process
//!  └─ sh supervisor        own process group; stdin is a pipe whose write end only the test
//!     │                    process holds: EOF (drop, or death of the test process) means stop
//!     └─ unshare --mount --pid --kill-child   (parent-death signal SIGKILL, set by setpriv)
//!        └─ sh             pid 1 of a new pid namespace: when it dies the kernel kills the rest
//!           ├─ rpcbind -f
//!           └─ ganesha.nfsd -F
//! ```
//! On EOF the supervisor kills the namespace's init with SIGKILL (the kernel then kills rpcbind
//! and ganesha), waits for it, unmounts the export's tmpfs and removes the instance directory.
//! A parent-death signal set by a Rust thread would fire when that *thread* ends (tests run on
//! threads); the pipe belongs to the process, so it closes only when the process goes.
//!
//! Needs root (mounts, namespaces) and the Debian packages `nfs-ganesha nfs-ganesha-vfs` (which
//! bring `rpcbind`), plus `unshare` and `setpriv` from util-linux. A test fails when they are
//! missing, naming the command that provides them (see [`check`]); `cargo xtask test` installs
//! them.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;

use crate::missing::{Missing, find_program};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// ONC RPC program number of NFS.
pub const NFS_PROGRAM: u32 = 100_003;
/// ONC RPC program number of MOUNT.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The path a client passes to MOUNT (ganesha's `Pseudo` path, with `Mount_Path_Pseudo = true`).
pub const EXPORT_PATH: &str = "/treesync";
/// rsize/wsize cap of the export (`MaxRead`/`MaxWrite`), like a real NAS: 1 MiB.
pub const MAX_IO: u32 = 1 << 20;
/// Source name of the export's tmpfs in `/proc/self/mountinfo` (`cargo xtask cleanup` unmounts leftovers).
pub const TMPFS_SOURCE: &str = "treesync-ganesha";

/// How long [`Ganesha::start`] waits for the server to answer RPC NULL calls.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running nfs-ganesha exporting a fresh tmpfs; stopped (SIGKILL) and cleaned up on drop.
#[derive(Debug)]
pub struct Ganesha {
    nfs_port: u16,
    mount_port: u16,
    /// The instance directory (config, log, `export/`); removed by the supervisor.
    base: PathBuf,
    /// `base/export`, where the tmpfs is mounted.
    dir: PathBuf,
    supervisor: Child,
    /// Write end of the supervisor's lifeline; dropping it stops the instance.
    lifeline: Option<ChildStdin>,
    ready_after: Duration,
}

/// The programs an instance needs, found on this machine.
struct Tools {
    ganesha: PathBuf,
    rpcbind: PathBuf,
}

fn tools() -> Result<Tools, Missing> {
    if !rustix::process::geteuid().is_root() {
        return Err(Missing::new(
            "root (the nfs-ganesha testbed mounts a tmpfs and makes namespaces)",
            "run the tests as root",
        ));
    }
    let missing = |what: &str| Missing::new(what, "apt-get install nfs-ganesha nfs-ganesha-vfs");
    let ganesha = find_program("ganesha.nfsd").ok_or_else(|| missing("ganesha.nfsd"))?;
    let rpcbind = find_program("rpcbind").ok_or_else(|| missing("rpcbind"))?;
    if !Path::new("/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so").exists()
        && !Path::new("/usr/lib/ganesha/libfsalvfs.so").exists()
        && !Path::new("/usr/lib64/ganesha/libfsalvfs.so").exists()
    {
        return Err(Missing::new("ganesha's VFS FSAL (libfsalvfs.so)", "apt-get install nfs-ganesha-vfs"));
    }
    for util in ["unshare", "setpriv", "mount", "umount"] {
        if find_program(util).is_none() {
            return Err(Missing::new(util, "apt-get install util-linux mount"));
        }
    }
    if !Path::new("/etc/netconfig").is_file() {
        return Err(Missing::new("/etc/netconfig", "apt-get install libtirpc-common"));
    }
    Ok(Tools { ganesha, rpcbind })
}

/// Whether a ganesha testbed can run here (root, nfs-ganesha with its VFS FSAL, rpcbind,
/// util-linux); if not, what is missing and the command that provides it.
pub fn check() -> Result<(), Missing> {
    tools().map(|_| ())
}

/// Fails the test (panics) when a ganesha testbed cannot run here, naming what is missing and
/// the command that provides it ([`check`] says it without panicking).
#[track_caller]
pub fn require() {
    if let Err(m) = tools() {
        m.fail()
    }
}

/// Runs in the test's mount namespace: mounts the export's tmpfs, starts the namespaces, waits
/// for EOF on stdin, then kills and cleans up. `$1` is the instance directory.
const SUPERVISOR: &str = r#"
base=$1
shift
mount -t tmpfs -o "mode=0777${TMPFS_SIZE:+,size=$TMPFS_SIZE}" "$TMPFS_SOURCE" "$base/export" || { echo "supervisor: cannot mount a tmpfs on $base/export" >> "$base/exited"; exit 1; }
setpriv --pdeathsig KILL unshare --mount --propagation private --pid --kill-child=KILL sh "$base/init.sh" "$base" "$@" </dev/null >>"$base/init.log" 2>&1 &
ns=$!
# The lifeline: returns when the test process drops the instance or dies.
while read -r _; do :; done
init=$(cat "$base/init.pid" 2>/dev/null)
# Killing the namespace's init makes the kernel kill everything else in it; unshare then reaps
# it and exits, after the namespace is empty. Without the init's pid yet, kill unshare itself
# (--kill-child passes the SIGKILL on).
if [ -n "$init" ]; then kill -KILL "$init" 2>/dev/null; else kill -KILL "$ns" 2>/dev/null; fi
wait "$ns"
umount -l "$base/export" 2>/dev/null
rm -rf "$base"
"#;

/// pid 1 of the instance's pid namespace, in its private mount namespace. `$1` is the instance
/// directory, `$2` rpcbind, `$3` ganesha.nfsd.
const INIT: &str = r#"
base=$1 rpcbind=$2 ganesha=$3
# The host pid (/proc is the parent namespace's), for the supervisor to kill.
read -r pid _ < /proc/self/stat && echo "$pid" > "$base/init.pid"
# rpcbind gets only the local transports (no socket on 111) and a private /run for its socket.
mount --bind "$base/netconfig" /etc/netconfig || exit 1
mount -t tmpfs -o mode=0755 treesync-ganesha-run /run || exit 1
"$rpcbind" -f &
i=0
while [ ! -S /run/rpcbind.sock ]; do
    i=$((i + 1))
    if [ "$i" -gt 1000 ]; then echo "rpcbind did not create /run/rpcbind.sock in 10 s" >> "$base/exited"; exit 1; fi
    sleep 0.01
done
# ganesha itself insists on tcp and udp entries in netconfig (FATAL otherwise, even without UDP).
umount /etc/netconfig || exit 1
"$ganesha" -F -f "$base/ganesha.conf" -L "$base/ganesha.log" -p "$base/ganesha.pid" &
wait $!
echo "ganesha.nfsd exited with status $?" >> "$base/exited"
"#;

fn config(base: &Path, nfs_port: u16, mount_port: u16) -> String {
    let export = base.join("export");
    let recovery = base.join("recovery");
    format!(
        r#"NFS_CORE_PARAM {{
    Protocols = 3;
    NFS_Port = {nfs_port};
    MNT_Port = {mount_port};
    Bind_addr = 127.0.0.1;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    # MOUNT takes the Pseudo path ("{EXPORT_PATH}"), not the directory on this machine.
    Mount_Path_Pseudo = true;
}}
NFS_KRB5 {{
    Active_krb5 = false;
}}
NFSV4 {{
    Graceless = true;
    RecoveryBackend = fs;
    RecoveryRoot = "{recovery}";
}}
EXPORT {{
    Export_Id = 1;
    Path = "{export}";
    Pseudo = "{EXPORT_PATH}";
    Protocols = 3;
    Transports = TCP;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    MaxRead = {MAX_IO};
    MaxWrite = {MAX_IO};
    PrefRead = {MAX_IO};
    PrefWrite = {MAX_IO};
    # Without this, changes made directly in the directory stay invisible to clients for 60 s.
    Attr_Expiration_Time = 0;
    FSAL {{
        Name = VFS;
    }}
}}
"#,
        recovery = recovery.display(),
        export = export.display(),
    )
}

/// Two distinct free TCP ports on 127.0.0.1 (both bound at once, so they differ).
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    (
        a.local_addr().expect("local address of a bound socket").port(),
        b.local_addr().expect("local address of a bound socket").port(),
    )
}

impl Ganesha {
    /// Start a private instance and wait until NFS and MOUNT answer an RPC NULL call.
    /// Panics when the testbed cannot run here, naming what is missing and the command that
    /// provides it (see [`check`]), and, with the tail of ganesha's log, if the server does not
    /// answer within 10 s.
    #[track_caller]
    pub fn start() -> Ganesha {
        let tools = match tools() {
            Ok(t) => t,
            Err(m) => m.fail(),
        };
        Ganesha::start_with(&tools, None)
    }

    /// Like [`Ganesha::start`], with an export of `bytes` bytes at most: writes beyond it fail
    /// with NFS3ERR_NOSPC (a full disk on the server).
    #[track_caller]
    pub fn start_sized(bytes: u64) -> Ganesha {
        let tools = match tools() {
            Ok(t) => t,
            Err(m) => m.fail(),
        };
        Ganesha::start_with(&tools, Some(bytes))
    }

    /// The instance shared by every test of this process (started on first use), for tests that
    /// each work in their own subdirectory of the export. Stopped when the process exits.
    /// Panics like [`Ganesha::start`] when the testbed cannot run here (in every test that asks).
    #[track_caller]
    pub fn shared() -> &'static Ganesha {
        if let Err(m) = tools() {
            m.fail();
        }
        static SHARED: OnceLock<Ganesha> = OnceLock::new();
        SHARED.get_or_init(Ganesha::start)
    }

    fn start_with(tools: &Tools, size: Option<u64>) -> Ganesha {
        let started = Instant::now();
        let base = tempfile::Builder::new()
            .prefix("treesync-ganesha-")
            .tempdir()
            .expect("create a temporary directory for ganesha (check TMPDIR)")
            // The supervisor removes it, after unmounting the export (also if this process dies).
            .keep();
        let base = base.canonicalize().expect("canonicalize the ganesha instance directory");
        let dir = base.join("export");
        std::fs::create_dir(&dir).expect("create the export directory");
        std::fs::create_dir(base.join("recovery")).expect("create ganesha's recovery directory");
        let netconfig = std::fs::read_to_string("/etc/netconfig").expect("read /etc/netconfig");
        let local: String = netconfig
            .lines()
            .filter(|l| l.starts_with("local") || l.starts_with("unix"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(!local.is_empty(), "/etc/netconfig has no `local` or `unix` line for rpcbind");
        std::fs::write(base.join("netconfig"), local).expect("write the private netconfig");
        std::fs::write(base.join("init.sh"), INIT).expect("write init.sh");
        std::fs::write(base.join("supervisor.sh"), SUPERVISOR).expect("write supervisor.sh");
        let (nfs_port, mount_port) = free_ports();
        std::fs::write(base.join("ganesha.conf"), config(&base, nfs_port, mount_port)).expect("write ganesha.conf");

        let log = std::fs::File::create(base.join("supervisor.log")).expect("create supervisor.log");
        let mut supervisor = Command::new("sh")
            .arg(base.join("supervisor.sh"))
            .arg(&base)
            .arg(&tools.rpcbind)
            .arg(&tools.ganesha)
            .env("TMPFS_SOURCE", TMPFS_SOURCE)
            .env("TMPFS_SIZE", size.map(|b| b.to_string()).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            // Out of the terminal's process group: Ctrl-C kills the test process only, and the
            // supervisor then cleans up instead of dying with it.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                let _ = std::fs::remove_dir_all(&base);
                panic!("cannot start sh for the ganesha supervisor: {e}")
            });
        let lifeline = supervisor.stdin.take();
        let mut g = Ganesha { nfs_port, mount_port, base, dir, supervisor, lifeline, ready_after: Duration::ZERO };
        g.wait_ready(started);
        g
    }

    fn wait_ready(&mut self, started: Instant) {
        let deadline = started + READY_TIMEOUT;
        let mut last_error;
        loop {
            if let Ok(text) = std::fs::read_to_string(self.base.join("exited")) {
                panic!("nfs-ganesha did not start: {}\n{}", text.trim(), self.diagnostics());
            }
            if let Ok(Some(status)) = self.supervisor.try_wait() {
                panic!("the ganesha supervisor exited early ({status})\n{}", self.diagnostics());
            }
            let nfs = rpc_null(self.nfs_addr(), NFS_PROGRAM, 3);
            let mount = nfs.and_then(|_| rpc_null(self.mount_addr(), MOUNT_PROGRAM, 3));
            match mount {
                Ok(_) => break,
                Err(e) => last_error = e,
            }
            if Instant::now() > deadline {
                panic!(
                    "nfs-ganesha did not answer RPC NULL on 127.0.0.1:{} (NFS) and :{} (MOUNT) within {:?}: {}\n{}",
                    self.nfs_port,
                    self.mount_port,
                    READY_TIMEOUT,
                    last_error,
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.ready_after = started.elapsed();
    }

    /// What went wrong at start: the tails of ganesha's and the scripts' logs.
    fn diagnostics(&self) -> String {
        let tail = |name: &str| {
            let text = std::fs::read_to_string(self.base.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        format!(
            "--- ganesha.log (tail) ---\n{}\n--- init.log ---\n{}\n--- supervisor.log ---\n{}",
            tail("ganesha.log"),
            tail("init.log"),
            tail("supervisor.log")
        )
    }

    /// The server's address: `"127.0.0.1"`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// TCP port of NFS (program 100003, version 3).
    pub fn nfs_port(&self) -> u16 {
        self.nfs_port
    }

    /// TCP port of MOUNT (program 100005, version 3).
    pub fn mount_port(&self) -> u16 {
        self.mount_port
    }

    /// `127.0.0.1:`[`Ganesha::nfs_port`].
    pub fn nfs_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.nfs_port))
    }

    /// `127.0.0.1:`[`Ganesha::mount_port`].
    pub fn mount_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.mount_port))
    }

    /// The path a client passes to MOUNT: [`EXPORT_PATH`] (`"/treesync"`).
    pub fn export_path(&self) -> &'static str {
        EXPORT_PATH
    }

    /// The exported directory on this machine (a tmpfs): put fixtures here, read results back.
    /// Changes made here are visible to clients at once (`Attr_Expiration_Time = 0`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `nfs://127.0.0.1:NFS/treesync/SUB?mountport=MOUNT&nfsport=NFS` (`SUB` may be empty; its
    /// slashes at either end are trimmed).
    pub fn url(&self, sub: &str) -> String {
        nfs_url(self.nfs_port, self.mount_port, sub)
    }

    /// How long the start took, from spawning to the first answered NULL calls.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// ganesha's log so far (level EVENT: start-up messages and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("ganesha.log")).unwrap_or_default()
    }

    /// Stop the server (SIGKILL to ganesha and rpcbind), unmount the export and remove the
    /// instance directory; returns when that is done. Same as dropping it.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        // EOF on the supervisor's stdin: it kills the namespace, unmounts and removes `base`.
        drop(self.lifeline.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.supervisor.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                _ => break,
            }
        }
        eprintln!("ganesha: the supervisor did not finish within 10 s; killing it ({})", self.base.display());
        // Its child unshare has parent-death signal SIGKILL, which takes the namespace down.
        let _ = self.supervisor.kill();
        let _ = self.supervisor.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn nfs_url(nfs: u16, mount: u16, sub: &str) -> String {
    let sub = sub.trim_matches('/');
    let path = if sub.is_empty() { EXPORT_PATH.to_string() } else { format!("{EXPORT_PATH}/{sub}") };
    format!("nfs://127.0.0.1:{nfs}{path}?mountport={mount}&nfsport={nfs}")
}

/// An ONC RPC call of procedure 0 (NULL) with `AUTH_NULL`, record-marked for TCP (one last
/// fragment), ready to write to a stream.
pub fn null_call(xid: u32, prog: u32, vers: u32) -> Vec<u8> {
    // xid, CALL, RPC version 2, program, version, procedure 0, credential and verifier AUTH_NULL.
    let words = [xid, 0, 2, prog, vers, 0, 0, 0, 0, 0];
    let mut call = Vec::with_capacity(4 + 4 * words.len());
    call.extend_from_slice(&(0x8000_0000 | (4 * words.len() as u32)).to_be_bytes());
    for w in words {
        call.extend_from_slice(&w.to_be_bytes());
    }
    call
}

/// Read one record-marked RPC reply and check that the call was accepted and succeeded
/// (`MSG_ACCEPTED`, `SUCCESS`); returns its xid. Errors say how it was refused.
pub fn read_reply(stream: &mut impl Read) -> io::Result<u32> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let mut msg = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        stream.read_exact(&mut mark)?;
        let mark = u32::from_be_bytes(mark);
        let len = (mark & 0x7fff_ffff) as usize;
        if msg.len() + len > 1 << 24 {
            return Err(invalid(format!("RPC reply fragment of {len} bytes: not an RPC stream?")));
        }
        let start = msg.len();
        msg.resize(start + len, 0);
        stream.read_exact(&mut msg[start..])?;
        if mark & 0x8000_0000 != 0 {
            break;
        }
    }
    let word = |i: usize| msg.get(4 * i..4 * i + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let short = || invalid(format!("RPC reply too short ({} bytes)", msg.len()));
    let xid = word(0).ok_or_else(short)?;
    if word(1).ok_or_else(short)? != 1 {
        return Err(invalid("not an RPC reply (msg_type is not REPLY)".into()));
    }
    match word(2).ok_or_else(short)? {
        0 => {}
        1 => {
            let why = match word(3) {
                Some(0) => "RPC_MISMATCH".to_string(),
                Some(1) => format!("AUTH_ERROR (auth_stat {})", word(4).unwrap_or(0)),
                other => format!("reject_stat {other:?}"),
            };
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("RPC call denied: {why}")));
        }
        other => return Err(invalid(format!("bad reply_stat {other}"))),
    }
    // Verifier: flavor, length, body padded to 4 bytes; then accept_stat.
    let verf_len = word(4).ok_or_else(short)? as usize;
    let accept = word(5 + verf_len.div_ceil(4)).ok_or_else(short)?;
    if accept != 0 {
        let name = match accept {
            1 => "PROG_UNAVAIL",
            2 => "PROG_MISMATCH",
            3 => "PROC_UNAVAIL",
            4 => "GARBAGE_ARGS",
            5 => "SYSTEM_ERR",
            _ => "unknown accept_stat",
        };
        return Err(io::Error::other(format!("RPC call not executed: {name} ({accept})")));
    }
    Ok(xid)
}

/// Connect to `addr` over TCP, make one NULL call to program `prog` version `vers`, and return
/// its round trip (from sending the call to the reply; connecting not included). Each step has a
/// 2 s timeout.
pub fn rpc_null(addr: SocketAddr, prog: u32, vers: u32) -> io::Result<Duration> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    rpc_null_on(&mut stream, prog, vers)
}

/// One NULL call on an open connection (nothing else in flight on it); returns its round trip.
/// Timeouts are the stream's.
pub fn rpc_null_on(stream: &mut TcpStream, prog: u32, vers: u32) -> io::Result<Duration> {
    static XID: AtomicU32 = AtomicU32::new(0x7472_0000);
    let xid = XID.fetch_add(1, Ordering::Relaxed);
    let sent = Instant::now();
    stream.write_all(&null_call(xid, prog, vers))?;
    let got = read_reply(stream)?;
    let rtt = sent.elapsed();
    if got != xid {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("reply xid {got:#x}, expected {xid:#x}")));
    }
    Ok(rtt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_call_layout() {
        let call = null_call(7, NFS_PROGRAM, 3);
        assert_eq!(call.len(), 44);
        assert_eq!(&call[..4], &(0x8000_0000u32 | 40).to_be_bytes());
        assert_eq!(&call[4..8], &7u32.to_be_bytes());
        assert_eq!(&call[16..20], &NFS_PROGRAM.to_be_bytes());
    }

    #[test]
    fn replies_parse() {
        let reply = |words: &[u32]| {
            let mut r = (0x8000_0000 | (4 * words.len() as u32)).to_be_bytes().to_vec();
            words.iter().for_each(|w| r.extend_from_slice(&w.to_be_bytes()));
            r
        };
        // xid 9, REPLY, MSG_ACCEPTED, verifier AUTH_NULL (0, 0), SUCCESS.
        assert_eq!(read_reply(&mut &reply(&[9, 1, 0, 0, 0, 0])[..]).expect("accepted"), 9);
        // A verifier with a 5-byte body (padded to 8), then PROG_UNAVAIL.
        let e = read_reply(&mut &reply(&[9, 1, 0, 1, 5, 0, 0, 1])[..]).expect_err("PROG_UNAVAIL");
        assert!(e.to_string().contains("PROG_UNAVAIL"), "{e}");
        // MSG_DENIED, AUTH_ERROR, AUTH_TOOWEAK (5).
        let e = read_reply(&mut &reply(&[9, 1, 1, 1, 5])[..]).expect_err("denied");
        assert!(e.to_string().contains("AUTH_ERROR (auth_stat 5)"), "{e}");
        // Two fragments.
        let mut two = (4u32).to_be_bytes().to_vec();
        two.extend_from_slice(&3u32.to_be_bytes());
        two.extend_from_slice(&(0x8000_0000u32 | 20).to_be_bytes());
        [1u32, 0, 0, 0, 0].iter().for_each(|w| two.extend_from_slice(&w.to_be_bytes()));
        assert_eq!(read_reply(&mut &two[..]).expect("two fragments"), 3);
    }

    #[test]
    fn urls() {
        assert_eq!(nfs_url(1, 2, ""), "nfs://127.0.0.1:1/treesync?mountport=2&nfsport=1");
        assert_eq!(nfs_url(1, 2, "/a/b/"), "nfs://127.0.0.1:1/treesync/a/b?mountport=2&nfsport=1");
    }
}
