//! The NFS testbed: a real nfs-ganesha per test (or one shared per process), reached by RPC NULL
//! calls, directly and through the TCP delay line; and the delay line itself, on an echo server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use treesync_testkit::delay::DelayProxy;
use treesync_testkit::ganesha::{self, Ganesha, MOUNT_PROGRAM, NFS_PROGRAM};
use treesync_testkit::mountinfo;

/// Connected to `addr`, with TCP_NODELAY and a 5 s read timeout.
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    s
}

/// Whether something on this machine listens on 127.0.0.1:`port` (a refused connect says no).
fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(1)).is_ok()
}

fn mounted(path: &std::path::Path) -> bool {
    mountinfo::at(path).expect("read /proc/self/mountinfo").is_some()
}

#[test]
fn nfs_and_mount_answer_null_calls() {
    let g = Ganesha::start();
    eprintln!("ganesha ready after {:?} on {} ({})", g.ready_after(), g.nfs_addr(), g.url(""));
    let nfs = ganesha::rpc_null(g.nfs_addr(), NFS_PROGRAM, 3).expect("NFS v3 NULL");
    let mount = ganesha::rpc_null(g.mount_addr(), MOUNT_PROGRAM, 3).expect("MOUNT v3 NULL");
    eprintln!("NULL round trips on loopback: NFS {nfs:?}, MOUNT {mount:?}");
    assert_eq!(g.host(), "127.0.0.1");
    assert_eq!(g.export_path(), "/treesync");
    assert_eq!(
        g.url("a/b"),
        format!("nfs://127.0.0.1:{0}/treesync/a/b?mountport={1}&nfsport={0}", g.nfs_port(), g.mount_port())
    );
    // Only what was asked for: NFSv4 and NLM are off.
    let v4 = ganesha::rpc_null(g.nfs_addr(), NFS_PROGRAM, 4).expect_err("NFSv4 is not served");
    assert!(v4.to_string().contains("PROG_MISMATCH"), "{v4}");
    assert!(ganesha::rpc_null(g.nfs_addr(), 100_021, 4).is_err(), "NLM is not served");
    // The export is a tmpfs mounted at dir().
    assert!(mounted(g.dir()), "{} is not a mount point", g.dir().display());
    // ganesha answers calls a moment before it logs that it is up: give the line time to come.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !g.log().contains("NFS SERVER INITIALIZED") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(g.log().contains("NFS SERVER INITIALIZED"), "{}", g.log());
}

#[test]
fn two_servers_at_once() {
    let a = Ganesha::start();
    let b = Ganesha::start();
    assert_ne!(a.nfs_port(), b.nfs_port());
    assert_ne!(a.dir(), b.dir());
    for g in [&a, &b] {
        ganesha::rpc_null(g.nfs_addr(), NFS_PROGRAM, 3).expect("NFS NULL");
        ganesha::rpc_null(g.mount_addr(), MOUNT_PROGRAM, 3).expect("MOUNT NULL");
    }
    std::fs::write(a.dir().join("only-in-a"), b"a").expect("write into a");
    assert!(!b.dir().join("only-in-a").exists());
    // Stopping one leaves the other running, and stopping is quick (SIGKILL).
    let (a_port, a_dir) = (a.nfs_port(), a.dir().to_path_buf());
    let t = Instant::now();
    a.stop();
    eprintln!("stopped in {:?}", t.elapsed());
    assert!(!listening(a_port), "ganesha still listens on {a_port} after stop");
    assert!(!mounted(&a_dir) && !a_dir.exists(), "{} left behind", a_dir.display());
    ganesha::rpc_null(b.nfs_addr(), NFS_PROGRAM, 3).expect("the other server still answers");
}

#[test]
fn files_written_into_the_export_are_there() {
    let g = Ganesha::shared();
    let sub = g.dir().join("sanity");
    std::fs::create_dir_all(&sub).expect("mkdir in the export");
    std::fs::write(sub.join("f.txt"), b"hello nfs").expect("write into the export");
    assert_eq!(std::fs::read(sub.join("f.txt")).expect("read back"), b"hello nfs");
    // The shared instance is one per process.
    let again = Ganesha::shared();
    assert!(std::ptr::eq(g, again));
}

#[test]
fn null_through_the_delay_proxy_is_delayed_and_pipelines() {
    let g = Ganesha::shared();
    let one_way = Duration::from_millis(2);
    let proxy = DelayProxy::start(g.nfs_addr(), one_way);
    // The best of a few round trips (the first pays for the upstream connect).
    let rtt = (0..5)
        .map(|_| ganesha::rpc_null(proxy.addr(), NFS_PROGRAM, 3).expect("NULL through the proxy"))
        .min()
        .expect("five round trips");
    assert!(rtt >= 2 * one_way, "round trip {rtt:?} through a {one_way:?} one-way delay line");
    assert_eq!(proxy.connections(), 5);

    // 32 calls in flight on one connection: about one round trip, not 32.
    let mut s = connect(proxy.addr());
    ganesha::rpc_null_on(&mut s, NFS_PROGRAM, 3).expect("warm-up call");
    let calls: Vec<u8> = (1..=32).flat_map(|xid| ganesha::null_call(xid, NFS_PROGRAM, 3)).collect();
    let t = Instant::now();
    s.write_all(&calls).expect("send 32 calls");
    let mut xids: Vec<u32> = (0..32).map(|_| ganesha::read_reply(&mut s).expect("reply")).collect();
    let pipelined = t.elapsed();
    xids.sort_unstable();
    assert_eq!(xids, (1..=32).collect::<Vec<u32>>());
    eprintln!(
        "through a {one_way:?} one-way delay: NULL round trip {rtt:?}, 32 pipelined NULLs {pipelined:?} ({:.1} RTT)",
        pipelined.as_secs_f64() / rtt.as_secs_f64()
    );
    assert!(pipelined < 8 * rtt, "32 pipelined calls took {pipelined:?}, one round trip {rtt:?}");
}

#[test]
fn cut_closes_connections_and_new_ones_work() {
    let g = Ganesha::shared();
    let proxy = DelayProxy::start(g.nfs_addr(), Duration::from_millis(1));
    let mut s = connect(proxy.addr());
    ganesha::rpc_null_on(&mut s, NFS_PROGRAM, 3).expect("call before the cut");
    proxy.cut();
    assert_cut(&mut s);
    // A client reconnecting gets through.
    ganesha::rpc_null(proxy.addr(), NFS_PROGRAM, 3).expect("call after the cut");
    assert_eq!(proxy.connections(), 2);
}

/// `s` was closed by a cut: it reads the end of the stream or an error, not a timeout.
fn assert_cut(s: &mut TcpStream) {
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("read {n} bytes after the cut"),
        Err(e) => assert!(
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            "the connection stayed open after the cut: {e}"
        ),
    }
}

/// An echo server on 127.0.0.1: each connection gets back what it sends.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut r = s.try_clone().expect("clone");
                let _ = std::io::copy(&mut r, &mut s);
            });
        }
    });
    addr
}

#[test]
fn delay_proxy_keeps_order_and_delays_each_direction() {
    let one_way = Duration::from_millis(20);
    let proxy = DelayProxy::start(echo_server(), one_way);
    let mut s = connect(proxy.addr());
    let t = Instant::now();
    s.write_all(b"ping").expect("send");
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).expect("echo");
    let rtt = t.elapsed();
    assert_eq!(&buf, b"ping");
    assert!(rtt >= 2 * one_way && rtt < 2 * one_way + Duration::from_millis(200), "round trip {rtt:?}");

    // Many writes in a row, each a separate chunk: back in order, about one round trip in all.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let t = Instant::now();
    let writer = {
        let mut w = s.try_clone().expect("clone");
        let data = data.clone();
        std::thread::spawn(move || {
            for chunk in data.chunks(1000) {
                w.write_all(chunk).expect("send chunk");
            }
        })
    };
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).expect("echo of all chunks");
    writer.join().expect("writer");
    let elapsed = t.elapsed();
    assert!(back == data, "bytes reordered or altered through the proxy");
    assert!(elapsed < 10 * rtt, "200 chunks took {elapsed:?}: serialized by the proxy? (round trip {rtt:?})");

    // End of stream goes through as a half close: the echo server ends, and so do we.
    s.shutdown(std::net::Shutdown::Write).expect("half close");
    assert_eq!(s.read(&mut buf).expect("EOF"), 0);
}

#[test]
fn delay_proxy_cut_closes_the_client() {
    let proxy = DelayProxy::start(echo_server(), Duration::from_millis(1));
    let mut a = connect(proxy.addr());
    let mut b = connect(proxy.addr());
    a.write_all(b"x").expect("send");
    let mut buf = [0u8; 1];
    a.read_exact(&mut buf).expect("echo");
    proxy.cut();
    for s in [&mut a, &mut b] {
        assert_cut(s);
    }
    let mut c = connect(proxy.addr());
    c.write_all(b"y").expect("send after the cut");
    c.read_exact(&mut buf).expect("echo after the cut");
    assert_eq!(&buf, b"y");
    assert_eq!(proxy.connections(), 3);
}

/// Run by `killed_test_process_leaves_nothing` in a child process (ignored otherwise): start a
/// server, say where it is, then wait to be killed.
#[test]
#[ignore = "helper: run by killed_test_process_leaves_nothing"]
fn hold_a_server_until_killed() {
    if std::env::var_os("TREESYNC_GANESHA_HOLDER").is_none() {
        return;
    }
    let g = Ganesha::start();
    // From a thread that ends at once: the cleanup must not depend on the starting thread.
    let shared = std::thread::spawn(Ganesha::shared).join().expect("start the shared one");
    println!("HOLDING {} {} {} {}", g.nfs_port(), g.dir().display(), shared.nfs_port(), shared.dir().display());
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn killed_test_process_leaves_nothing() {
    ganesha::require();
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "hold_a_server_until_killed", "--ignored", "--nocapture"])
        .env("TREESYNC_GANESHA_HOLDER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run this test binary again");
    // libtest prints its own lines first: wait for ours.
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let line = lines.by_ref().map_while(Result::ok).find_map(|l| l.strip_prefix("HOLDING ").map(str::to_string));
    let Some(line) = line else {
        let _ = child.kill();
        panic!("the holder exited without reporting its servers");
    };
    let fields: Vec<&str> = line.split(' ').collect();
    let servers: Vec<(u16, std::path::PathBuf)> =
        fields.chunks(2).map(|f| (f[0].parse().expect("port"), std::path::PathBuf::from(f[1]))).collect();
    for (port, dir) in &servers {
        assert!(listening(*port), "holder's server on {port} not up");
        assert!(mounted(dir), "{} not mounted", dir.display());
    }
    child.kill().expect("SIGKILL the holder");
    child.wait().expect("reap the holder");
    let deadline = Instant::now() + Duration::from_secs(10);
    for (port, dir) in &servers {
        let base = dir.parent().expect("instance directory").to_path_buf();
        while listening(*port) || mounted(dir) || base.exists() || process_mentions(&base) {
            assert!(
                Instant::now() < deadline,
                "left behind after SIGKILL: listening {}, mounted {}, {} exists {}, processes {}",
                listening(*port),
                mounted(dir),
                base.display(),
                base.exists(),
                process_mentions(&base)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether a process's command line mentions `path` (ganesha's does: `-f PATH/ganesha.conf`).
fn process_mentions(path: &std::path::Path) -> bool {
    let needle = path.to_str().expect("utf-8 path").as_bytes();
    std::fs::read_dir("/proc")
        .expect("list /proc")
        .flatten()
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle)))
}
