//! The FUSE adapter: the [`Filesystem`] fuser calls, counting each request and handing it
//! with its reply to the worker pool.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek,
    ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::passthrough::Ticket;
use super::passthrough::{Inner, Res, SetAttr};
use super::pool::{Job, lock};
use super::stats::Op;

/// Entry and attribute timeout given to the kernel: none, so nothing is cached (NFS `actimeo=0`).
pub(super) const TTL: Duration = Duration::ZERO;

/// The [`Filesystem`] fuser calls from its request loop: it counts and records each request,
/// then hands it with its reply to the worker pool, so the loop never sleeps.
pub(super) struct Daemon {
    pub(super) inner: Arc<Inner>,
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) max_background: u16,
}

pub(super) fn reply_entry(reply: ReplyEntry) -> impl FnOnce(Res<(FileAttr, u64)>) + Send + 'static {
    move |r| match r {
        Ok((attr, generation)) => reply.entry(&TTL, &attr, Generation(generation)),
        Err(e) => reply.error(e),
    }
}

pub(super) fn reply_empty(reply: ReplyEmpty) -> impl FnOnce(Res<()>) + Send + 'static {
    move |r| match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

pub(super) fn reply_attr(reply: ReplyAttr) -> impl FnOnce(Res<FileAttr>) + Send + 'static {
    move |r| match r {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(e),
    }
}

pub(super) fn reply_open(reply: ReplyOpen) -> impl FnOnce(Res<u64>) + Send + 'static {
    move |r| match r {
        Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
        Err(e) => reply.error(e),
    }
}

impl Daemon {
    /// Count the request now (its receipt), then serve and answer it on a worker. The in-flight
    /// count ends before the reply is sent, so a program's next request never overlaps it.
    pub(super) fn run<T: Send + 'static>(
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

    pub(super) fn recording(&self) -> bool {
        self.inner.recording.load(Ordering::Relaxed)
    }

    pub(super) fn note(&self, op: Op, ino: INodeNo, name: Option<&OsStr>) {
        if self.recording() {
            let path = self.inner.describe(ino.0, name);
            lock(&self.inner.paths).push((op, path));
        }
    }

    pub(super) fn unsupported(&self, op: Op, ino: INodeNo, respond: impl FnOnce(Errno) + Send + 'static) {
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
        self.inner.counters.lookup_starts(parent.0);
        let inner = self.inner.clone();
        let reply = reply_entry(reply);
        self.run(
            Op::Lookup,
            move |fs| fs.lookup(parent.0, &name).map(|a| fs.known(a)),
            move |r| {
                inner.counters.lookup_ends(parent.0);
                reply(r)
            },
        );
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
            move |fs| fs.setattr(ino.0, SetAttr { mode, uid, gid, size, atime, mtime }, fh.map(|f| f.0)),
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
        self.run(Op::Release, move |fs| fs.release(fh.0), reply_empty(reply));
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
        self.run(Op::Releasedir, move |fs| fs.releasedir(fh.0), reply_empty(reply));
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
