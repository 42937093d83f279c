//! The slow FUSE filesystem: passthrough behaviour, counting, concurrency, control socket and
//! unmounting. Needs /dev/fuse and root or fusermount3; fails naming the command otherwise.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use treesync_testkit::git;
use treesync_testkit::slowfs::{self, Config, Op, SlowFs, Stats};

fn errno(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error()
}

fn raw(e: rustix::io::Errno) -> Option<i32> {
    Some(e.raw_os_error())
}

#[test]
fn passthrough_behaves_like_a_local_directory() {
    slowfs::require();
    let fs = SlowFs::temp(Config { threads: 8, ..Config::default() }).expect("mount");
    let mnt = fs.path();
    let back = fs.backing();
    assert_eq!(slowfs::mount_fstype(mnt).as_deref(), Some("fuse.treesync-slowfs"));

    // create, write, read back; the bytes land in the backing dir
    fs::write(mnt.join("f.txt"), b"hello").expect("write");
    assert_eq!(fs::read(mnt.join("f.txt")).expect("read"), b"hello");
    assert_eq!(fs::read(back.join("f.txt")).expect("read backing"), b"hello");
    let mut f = fs::OpenOptions::new().append(true).open(mnt.join("f.txt")).expect("open append");
    f.write_all(b", world").expect("append");
    drop(f);
    let mut s = String::new();
    fs::File::open(mnt.join("f.txt")).expect("open").read_to_string(&mut s).expect("read");
    assert_eq!(s, "hello, world");

    // bigger than one FUSE write or read (1 MiB)
    let big: Vec<u8> = (0..3_000_017u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    fs::write(mnt.join("big"), &big).expect("write big");
    assert!(fs::read(mnt.join("big")).expect("read big") == big);
    assert!(fs::read(back.join("big")).expect("read big backing") == big);
    fs::remove_file(mnt.join("big")).expect("unlink big");

    // O_EXCL on an existing file
    let e = fs::OpenOptions::new().write(true).create_new(true).open(mnt.join("f.txt")).expect_err("O_EXCL");
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    // the mode asked for is the mode given (the daemon's umask does not interfere)
    let f = fs::OpenOptions::new().write(true).create_new(true).mode(0o640).open(mnt.join("m.txt")).expect("create");
    drop(f);
    assert_eq!(fs::symlink_metadata(back.join("m.txt")).expect("lstat").mode() & 0o777, 0o640);

    // mkdir, and EEXIST / ENOTDIR / EISDIR / ENOENT
    fs::create_dir(mnt.join("d")).expect("mkdir");
    assert!(back.join("d").is_dir());
    assert_eq!(fs::create_dir(mnt.join("d")).expect_err("mkdir twice").kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(errno(&fs::write(mnt.join("f.txt/x"), b"").expect_err("under a file")), raw(rustix::io::Errno::NOTDIR));
    assert_eq!(errno(&fs::remove_file(mnt.join("d")).expect_err("unlink a dir")), raw(rustix::io::Errno::ISDIR));
    assert_eq!(fs::symlink_metadata(mnt.join("nope")).expect_err("missing").kind(), std::io::ErrorKind::NotFound);

    // symlink + readlink
    std::os::unix::fs::symlink("f.txt", mnt.join("l")).expect("symlink");
    assert_eq!(fs::read_link(mnt.join("l")).expect("readlink"), PathBuf::from("f.txt"));
    assert!(fs::symlink_metadata(mnt.join("l")).expect("lstat").file_type().is_symlink());
    assert_eq!(fs::read(mnt.join("l")).expect("read through link"), b"hello, world");
    assert_eq!(fs::read_link(back.join("l")).expect("readlink backing"), PathBuf::from("f.txt"));

    // chmod +x, seen through the mount and in the backing dir
    fs::set_permissions(mnt.join("f.txt"), fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(fs::symlink_metadata(mnt.join("f.txt")).expect("lstat").mode() & 0o7777, 0o755);
    assert_eq!(fs::symlink_metadata(back.join("f.txt")).expect("lstat").mode() & 0o7777, 0o755);

    // chown (root), truncate, times with nanoseconds
    std::os::unix::fs::chown(mnt.join("f.txt"), Some(1234), Some(5678)).expect("chown");
    let md = fs::symlink_metadata(mnt.join("f.txt")).expect("lstat");
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    let f = fs::OpenOptions::new().write(true).open(mnt.join("f.txt")).expect("open");
    f.set_len(5).expect("ftruncate");
    let when = std::time::UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
    f.set_modified(when).expect("futimens");
    drop(f);
    let md = fs::symlink_metadata(mnt.join("f.txt")).expect("lstat");
    assert_eq!(md.size(), 5);
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 123_456_789));
    let bmd = fs::symlink_metadata(back.join("f.txt")).expect("lstat backing");
    assert_eq!((bmd.ctime(), bmd.ctime_nsec()), (md.ctime(), md.ctime_nsec()));

    // rename over an existing file, then unlink
    fs::write(mnt.join("g.txt"), b"other").expect("write g");
    fs::rename(mnt.join("f.txt"), mnt.join("g.txt")).expect("rename");
    assert_eq!(fs::read(mnt.join("g.txt")).expect("read g"), b"hello");
    assert!(!mnt.join("f.txt").exists());
    assert_eq!(fs::symlink_metadata(mnt.join("g.txt")).expect("lstat").mode() & 0o777, 0o755);
    // renameat2 flags
    fs::write(mnt.join("h.txt"), b"h").expect("write h");
    let noreplace = rustix::fs::renameat_with(
        rustix::fs::CWD,
        mnt.join("h.txt"),
        rustix::fs::CWD,
        mnt.join("g.txt"),
        rustix::fs::RenameFlags::NOREPLACE,
    );
    assert_eq!(noreplace, Err(rustix::io::Errno::EXIST));
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        mnt.join("h.txt"),
        rustix::fs::CWD,
        mnt.join("g.txt"),
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .expect("exchange");
    assert_eq!(fs::read(mnt.join("g.txt")).expect("read g"), b"h");
    assert_eq!(fs::read(mnt.join("h.txt")).expect("read h"), b"hello");
    // a renamed directory keeps its children reachable
    fs::write(mnt.join("d/inner"), b"i").expect("write inner");
    fs::rename(mnt.join("d"), mnt.join("d2")).expect("rename dir");
    assert_eq!(fs::read(mnt.join("d2/inner")).expect("read inner"), b"i");
    // hard link
    fs::hard_link(mnt.join("h.txt"), mnt.join("h2.txt")).expect("link");
    assert_eq!(fs::symlink_metadata(mnt.join("h.txt")).expect("lstat").nlink(), 2);
    fs::remove_file(mnt.join("g.txt")).expect("unlink");
    assert!(!mnt.join("g.txt").exists() && !back.join("g.txt").exists());

    // rmdir: ENOTEMPTY, then empty
    assert_eq!(fs::remove_dir(mnt.join("d2")).expect_err("not empty").kind(), std::io::ErrorKind::DirectoryNotEmpty);
    fs::remove_file(mnt.join("d2/inner")).expect("unlink inner");
    fs::remove_dir(mnt.join("d2")).expect("rmdir");
    assert!(!back.join("d2").exists());

    // readdir lists the right names, across several READDIR calls for a big directory
    fs::create_dir(mnt.join("many")).expect("mkdir many");
    let mut want: Vec<String> = (0..300).map(|i| format!("entry-with-a-longish-name-{i:04}")).collect();
    for name in &want {
        fs::write(mnt.join("many").join(name), b"").expect("create");
    }
    let mut got: Vec<String> = fs::read_dir(mnt.join("many"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let mut top: Vec<String> = fs::read_dir(mnt)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["h.txt", "h2.txt", "l", "m.txt", "many"]);

    // mknod (a fifo), statfs, access, fsync, fsyncdir
    rustix::fs::mknodat(
        rustix::fs::CWD,
        mnt.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mknod");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &fs::symlink_metadata(back.join("fifo")).expect("lstat").file_type()
    ));
    fs::remove_file(mnt.join("fifo")).expect("unlink fifo");
    assert!(rustix::fs::statvfs(mnt).expect("statfs").f_blocks > 0);
    rustix::fs::access(mnt.join("h.txt"), rustix::fs::Access::READ_OK).expect("access");
    assert_eq!(rustix::fs::access(mnt.join("nope"), rustix::fs::Access::EXISTS), Err(rustix::io::Errno::NOENT));
    let f = fs::OpenOptions::new().write(true).open(mnt.join("h.txt")).expect("open");
    f.sync_all().expect("fsync");
    f.sync_data().expect("fdatasync");
    fs::File::open(mnt.join("many")).expect("opendir").sync_all().expect("fsyncdir");
    drop(f);

    // mount points nesting with their backing dir are refused
    let nested = SlowFs::mount(back, &back.join("many"), Config::default()).expect_err("nested");
    assert_eq!(nested.kind(), std::io::ErrorKind::InvalidInput);

    // written in the backing dir: visible through the mount, same inode number, same times
    fs::create_dir_all(back.join("x/y")).expect("mkdir backing");
    fs::write(back.join("x/y/z"), b"from the backing side").expect("write backing");
    let through = fs::symlink_metadata(mnt.join("x/y/z")).expect("lstat through");
    let direct = fs::symlink_metadata(back.join("x/y/z")).expect("lstat direct");
    assert_eq!(through.ino(), direct.ino());
    assert_eq!(
        (through.mtime(), through.mtime_nsec(), through.size(), through.mode()),
        (direct.mtime(), direct.mtime_nsec(), direct.size(), direct.mode())
    );
    assert_eq!(fs::read(mnt.join("x/y/z")).expect("read"), b"from the backing side");
    // and changes made directly there show at once (no attribute cache)
    fs::write(back.join("x/y/z"), b"changed").expect("rewrite backing");
    assert_eq!(fs::symlink_metadata(mnt.join("x/y/z")).expect("lstat").size(), 7);
    fs::remove_file(back.join("x/y/z")).expect("remove backing");
    assert!(!mnt.join("x/y/z").exists());

    fs.unmount().expect("unmount");
}

#[test]
fn git_works_on_the_mount() {
    slowfs::require();
    let fs = SlowFs::temp(Config { threads: 8, ..Config::default() }).expect("mount");
    let commit = ["-c", "user.name=slowfs", "-c", "user.email=slowfs@example.invalid", "commit", "-qm", "one"];

    // A work tree on the mount.
    let wt = fs.path().join("wt");
    fs::create_dir_all(wt.join("src/deep")).expect("mkdir");
    fs::write(wt.join("README"), b"readme\n").expect("write");
    fs::write(wt.join("src/deep/lib.rs"), b"fn main() {}\n").expect("write");
    fs::write(wt.join("run.sh"), b"#!/bin/sh\n").expect("write");
    fs::set_permissions(wt.join("run.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("README", wt.join("link")).expect("symlink");
    git(&wt, &["init", "-q", "-b", "main"]);
    git(&wt, &["add", "-A"]);
    git(&wt, &commit);
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");
    assert_eq!(git(&wt, &["ls-files", "-s", "run.sh"]).split(' ').next(), Some("100755"));
    fs::write(wt.join("README"), b"changed\n").expect("write");
    assert_eq!(git(&wt, &["status", "--porcelain"]), "M README");

    // A tree committed in the backing dir looks unchanged through the mount: same inode
    // numbers, sizes and times in git's index.
    let bt = fs.backing().join("bt");
    fs::create_dir_all(bt.join("a/b")).expect("mkdir");
    fs::write(bt.join("a/b/c"), b"c\n").expect("write");
    fs::write(bt.join("top"), b"top\n").expect("write");
    git(&bt, &["init", "-q", "-b", "main"]);
    git(&bt, &["add", "-A"]);
    git(&bt, &commit);
    git(&bt, &["update-index", "--refresh"]);
    let through = fs.path().join("bt");
    assert_eq!(git(&through, &["diff-files", "--name-only"]), "");
    assert_eq!(git(&through, &["status", "--porcelain"]), "");
}

/// Make `a/b/c.txt` and its sibling `a/b/sib.txt` in the backing dir.
fn small_tree(fs: &SlowFs) {
    fs::create_dir_all(fs.backing().join("a/b")).expect("mkdir");
    fs::write(fs.backing().join("a/b/c.txt"), b"c").expect("write");
    fs::write(fs.backing().join("a/b/sib.txt"), b"s").expect("write");
}

#[test]
fn every_lstat_reaches_the_daemon_and_is_recorded() {
    slowfs::require();
    let fs = SlowFs::temp(Config { threads: 8, record_paths: true, ..Config::default() }).expect("mount");
    small_tree(&fs);
    let file = fs.path().join("a/b/c.txt");
    fs::symlink_metadata(&file).expect("warm up");

    fs.reset();
    assert_eq!(fs.stats().total(), 0);
    const N: u64 = 25;
    for _ in 0..N {
        fs::symlink_metadata(&file).expect("lstat");
    }
    let stats = fs.stats();
    assert!(stats.count(Op::Lookup) + stats.count(Op::Getattr) >= N, "{stats}");
    assert!(stats.touched("a/b/c.txt"), "{:?}", stats.paths);
    assert!(!stats.touched("a/b/sib.txt"), "{:?}", stats.paths);
    assert!(!stats.touched_under("a/b/sib.txt"));
    assert!(stats.touched_under("a"));

    // Recording can be switched off; counting goes on.
    fs.set_recording(false);
    fs.reset();
    fs::symlink_metadata(fs.path().join("a/b/sib.txt")).expect("lstat");
    let stats = fs.stats();
    assert!(stats.total() > 0 && stats.paths.is_empty(), "{stats:?}");

    // What one lstat of a path at depth 2 costs, and one create + write + rename.
    fs.set_recording(true);
    fs.reset();
    fs::symlink_metadata(&file).expect("lstat");
    let lstat = fs.stats();
    eprintln!("one lstat(a/b/c.txt):\n{lstat}\n{:?}", lstat.paths);
    // (The first write on a mount also asks getxattr("security.capability") once; answered
    // ENOSYS, the kernel never asks again.)
    fs.reset();
    fs::write(fs.path().join("warm-up"), b"x").expect("write");
    releases(&fs, 1);
    fs.reset();
    fs::write(fs.path().join("a/b/new.tmp"), b"0123456789").expect("write");
    fs::rename(fs.path().join("a/b/new.tmp"), fs.path().join("a/b/new.txt")).expect("rename");
    let create = releases(&fs, 1);
    eprintln!("create + write + rename of a/b/new.txt:\n{create}\n{:?}", create.paths);
    assert!(create.count(Op::Create) == 1 && create.count(Op::Write) >= 1 && create.count(Op::Rename) == 1, "{create}");
    assert!(create.paths.contains(&(Op::Rename, "a/b/new.tmp".into())));
    assert!(create.paths.contains(&(Op::Rename, "a/b/new.txt".into())));
    assert!(!create.touched("a/b/c.txt") && !create.touched("a/b/sib.txt"), "{:?}", create.paths);
}

/// The kernel sends RELEASE in the background after close returns: wait (bounded) until `n`
/// have arrived since the last reset, so that counts taken next are complete.
fn releases(fs: &SlowFs, n: u64) -> Stats {
    for _ in 0..5000 {
        let stats = fs.stats();
        if stats.count(Op::Release) >= n {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("RELEASE never came: {}", fs.stats());
}

/// `threads` threads lstat'ing files in `a/b` 10 times each; returns the stats.
fn hammer(fs: &SlowFs, threads: usize) -> Stats {
    fs.reset();
    std::thread::scope(|s| {
        for t in 0..threads {
            let file = fs.path().join(if t % 2 == 0 { "a/b/c.txt" } else { "a/b/sib.txt" });
            s.spawn(move || {
                for _ in 0..10 {
                    fs::symlink_metadata(&file).expect("lstat");
                }
            });
        }
    });
    fs.stats()
}

#[test]
fn requests_overlap_unless_the_server_is_limited() {
    slowfs::require();
    let latency = Duration::from_millis(2);

    let limited =
        SlowFs::temp(Config { meta_latency: latency, max_concurrent: Some(1), ..Config::default() }).expect("mount");
    small_tree(&limited);
    let stats = hammer(&limited, 4);
    eprintln!("4 threads, max_concurrent 1:\n{stats}");
    assert!(stats.count(Op::Lookup) + stats.count(Op::Getattr) >= 40, "{stats}");
    assert_eq!(stats.max_in_service, 1, "{stats}");
    drop(limited);

    let free = SlowFs::temp(Config { meta_latency: latency, ..Config::default() }).expect("mount");
    small_tree(&free);
    let stats = hammer(&free, 4);
    eprintln!("4 threads, no limit:\n{stats}");
    assert!(stats.max_in_flight_of(Op::Lookup) > 1 || stats.max_in_flight_of(Op::Getattr) > 1, "{stats}");
    assert!(stats.max_in_service > 1, "{stats}");
}

#[test]
fn control_socket_serves_stats_and_reset() {
    slowfs::require();
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("slowfs.sock");
    let fs = SlowFs::temp(Config { threads: 4, control: Some(sock.clone()), ..Config::default() }).expect("mount");
    assert_eq!(fs.control_socket(), Some(sock.as_path()));
    small_tree(&fs);
    for _ in 0..5 {
        fs::symlink_metadata(fs.path().join("a/b/c.txt")).expect("lstat");
    }

    let stats: Stats = serde_json::from_str(&slowfs::query(&sock, "stats").expect("query")).expect("json");
    assert!(stats.count(Op::Getattr) + stats.count(Op::Lookup) >= 5, "{stats}");
    assert_eq!(stats.total(), stats.ops.values().map(|s| s.count).sum::<u64>());
    let raw: serde_json::Value = serde_json::from_str(&slowfs::query(&sock, "stats").expect("query")).expect("json");
    assert!(raw["ops"]["lookup"]["count"].as_u64().is_some_and(|n| n > 0), "{raw}");

    assert_eq!(slowfs::query(&sock, "reset").expect("reset"), "ok");
    let stats: Stats = serde_json::from_str(&slowfs::query(&sock, "stats").expect("query")).expect("json");
    assert_eq!(stats.total(), 0, "{stats}");
    assert!(slowfs::query(&sock, "bogus").expect("query").starts_with("error"));

    drop(fs);
    assert!(!sock.exists(), "the socket is removed on drop");
}

#[test]
fn a_panicking_test_leaves_no_mount_behind() {
    slowfs::require();
    let seen: Arc<Mutex<Vec<PathBuf>>> = Arc::default();

    let s = seen.clone();
    let result = std::panic::catch_unwind(move || {
        let fs = SlowFs::temp(Config { threads: 2, ..Config::default() }).expect("mount");
        s.lock().expect("lock").push(fs.path().to_path_buf());
        assert!(slowfs::mount_fstype(fs.path()).is_some());
        panic!("test failure inside a mount");
    });
    assert!(result.is_err());

    // Same, with a file still open on the mount while unwinding: the plain unmount gets EBUSY,
    // the drop detaches lazily.
    let s = seen.clone();
    let result = std::panic::catch_unwind(move || {
        let mut _open: Option<fs::File> = None;
        let fs = SlowFs::temp(Config { threads: 2, ..Config::default() }).expect("mount");
        s.lock().expect("lock").push(fs.path().to_path_buf());
        fs::write(fs.path().join("busy"), b"x").expect("write");
        _open = Some(fs::File::open(fs.path().join("busy")).expect("open"));
        panic!("test failure with a file open");
    });
    assert!(result.is_err());

    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 2);
    for mnt in seen.iter() {
        assert_eq!(slowfs::mount_fstype(mnt), None, "{} is still mounted", mnt.display());
    }
}

/// A file with two names (a hard link, as a generation of `sync --atomic` shares with the
/// next): opening it by one name opens that name's file, whatever happens to the other name
/// meanwhile. A path-keyed passthrough that remembered one name per inode opened the *other*
/// name when it was looked up last, and so read another file once that name was replaced (seen:
/// one mixed pass of the NAS reader test under CI load).
#[test]
fn a_file_opened_by_one_name_is_that_file_while_its_other_name_is_replaced() {
    slowfs::require();
    let fs = SlowFs::temp(Config { threads: 8, ..Config::default() }).expect("mount");
    let mnt = fs.path().to_path_buf();
    fs::create_dir(mnt.join("a")).expect("mkdir a");
    fs::create_dir(mnt.join("b")).expect("mkdir b");
    fs::write(mnt.join("a/f"), b"a's file").expect("write");
    fs::write(mnt.join("a/l-target"), b"").expect("write");
    std::os::unix::fs::symlink("old", mnt.join("a/l")).expect("symlink");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The other name: looked up, replaced by a new file (as a sync does in the next
    // generation), then made a hard link to a's file again.
    let writer = {
        let (mnt, stop) = (mnt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fs::hard_link(mnt.join("a/f"), mnt.join("b/f"));
                let _ = fs::hard_link(mnt.join("a/l"), mnt.join("b/l"));
                for _ in 0..3 {
                    let _ = fs::symlink_metadata(mnt.join("b/f"));
                    let _ = fs::symlink_metadata(mnt.join("b/l"));
                }
                fs::write(mnt.join("b/tmp"), b"b's new file").expect("write tmp");
                fs::rename(mnt.join("b/tmp"), mnt.join("b/f")).expect("rename over");
                std::os::unix::fs::symlink("new", mnt.join("b/ltmp")).expect("symlink tmp");
                fs::rename(mnt.join("b/ltmp"), mnt.join("b/l")).expect("rename over");
                fs::remove_file(mnt.join("b/f")).expect("rm");
                fs::remove_file(mnt.join("b/l")).expect("rm");
                rounds += 1;
            }
            rounds
        })
    };
    let mut wrong = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    let mut reads = 0u64;
    while std::time::Instant::now() < deadline {
        match fs::read(mnt.join("a/f")) {
            Ok(bytes) if bytes == b"a's file" => {}
            other => wrong.push(format!("a/f: {other:?}")),
        }
        match fs::read_link(mnt.join("a/l")) {
            Ok(t) if t == std::path::Path::new("old") => {}
            other => wrong.push(format!("a/l: {other:?}")),
        }
        reads += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().expect("writer");
    assert!(rounds >= 20 && reads >= 100, "the race ran: {rounds} replacements, {reads} reads");
    assert!(
        wrong.is_empty(),
        "{} of {reads} reads of a/f or a/l were not its own ({rounds} replacements): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}
