//! `cargo xtask ganesha`: run the NFS test bed (treesync_testkit::ganesha) by hand, optionally
//! behind a TCP delay line, to try treesync or libnfs's tools against a real NFSv3 server.

use treesync_testkit::delay::DelayProxy;
use treesync_testkit::ganesha::{self, Ganesha, MOUNT_PROGRAM, NFS_PROGRAM};

use crate::slowfs::Signals;

pub fn run(args: &[String]) -> Result<(), String> {
    let mut delay = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--delay" => {
                let v = it.next().ok_or("--delay needs a value (e.g. 2ms)")?;
                delay = Some(treesync_core::duration::parse(v).map_err(|e| format!("--delay: {e}"))?);
            }
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }

    // Before any thread exists, so that every thread inherits the mask and the signal waits for
    // sigwait below: dropping the server then unmounts and removes its directory.
    let signals = Signals::block();
    ganesha::check().map_err(|m| format!("the nfs-ganesha test bed cannot run here: {m}"))?;
    let g = Ganesha::start();
    println!("ganesha: ready in {:?}; NFSv3 over TCP on 127.0.0.1, export {}", g.ready_after(), g.export_path());
    println!("  exported directory: {}", g.dir().display());
    println!("  url:                {}", g.url(""));
    println!(
        "  libnfs:             nfs-ls 'nfs://127.0.0.1{}?nfsport={}&mountport={}&version=3'",
        g.export_path(),
        g.nfs_port(),
        g.mount_port()
    );
    let proxies = delay.map(|d| (DelayProxy::start(g.nfs_addr(), d), DelayProxy::start(g.mount_addr(), d)));
    if let Some((nfs, mount)) = &proxies {
        let rtt = (0..5)
            .filter_map(|_| ganesha::rpc_null(nfs.addr(), NFS_PROGRAM, 3).ok())
            .min()
            .ok_or("no NULL call through the delay line answered")?;
        ganesha::rpc_null(mount.addr(), MOUNT_PROGRAM, 3).map_err(|e| format!("MOUNT through the delay line: {e}"))?;
        let (n, m) = (nfs.addr().port(), mount.addr().port());
        println!("  through a {:?} one-way delay line (NULL round trip {rtt:?}):", nfs.one_way());
        println!("  url:                nfs://127.0.0.1:{n}{}?mountport={m}&nfsport={n}", g.export_path());
    }
    println!("Ctrl-C or SIGTERM stops the server");
    let sig = signals.wait();
    eprintln!("ganesha: signal {sig}, stopping");
    drop(proxies);
    g.stop();
    Ok(())
}
