//! The filesystem proper: each request done on the backing directory, inode numbers mapped
//! to backing paths, open files and directory listings kept by handle.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};

use super::pool::{Service, lock};
use super::stats::{Counters, N_OPS, Op, OpStats, Stats};

/// Names kept per inode (see [`Inner::nodes`]).
const NAMES_KEPT: usize = 16;

pub(super) type Res<T> = Result<T, Errno>;

/// A directory listing taken when a reader starts at offset 0; later offsets index into it.
pub(super) struct DirEnt {
    pub(super) ino: u64,
    pub(super) kind: FileType,
    pub(super) name: OsString,
}

pub(super) struct DirHandle {
    pub(super) ino: u64,
    pub(super) path: PathBuf,
    pub(super) listing: Mutex<Option<Arc<Vec<DirEnt>>>>,
}

pub(super) struct OpenFile {
    pub(super) ino: u64,
    pub(super) file: Arc<File>,
}

/// What a SETATTR request changes: each of these that is given.
pub(super) struct SetAttr {
    pub(super) mode: Option<u32>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) size: Option<u64>,
    pub(super) atime: Option<TimeOrNow>,
    pub(super) mtime: Option<TimeOrNow>,
}

/// State shared by the request loop, the workers and [`SlowFs`].
pub(super) struct Inner {
    pub(super) backing: PathBuf,
    /// st_ino of the backing root, shown to the kernel as inode 1.
    pub(super) root_ino: u64,
    pub(super) meta_latency: Duration,
    pub(super) data_latency: Duration,
    pub(super) case_insensitive: bool,
    pub(super) service: Service,
    pub(super) counters: Counters,
    pub(super) recording: AtomicBool,
    pub(super) paths: Mutex<Vec<(Op, String)>>,
    /// inode → its known names (parent inode, name), the one learnt last first; learnt from
    /// lookup/create/mkdir/… and kept current by rename/unlink/rmdir: how an inode number
    /// becomes a backing path. A file with hard links has several, and a request on it goes to
    /// a name that is still that inode ([`Inner::resolve`], [`Inner::open`]): one name only
    /// would send a reader who opened one link to the other after it was replaced.
    pub(super) nodes: RwLock<HashMap<u64, Vec<(u64, OsString)>>>,
    /// inode → generation. The backing filesystem reuses the inode number of a removed file
    /// for a new one; the kernel tells them apart by the generation (same number and
    /// generation = same inode, so a new directory would inherit the dead one's state and
    /// refuse entries with ENOENT). Every object created through the mount gets a new one.
    pub(super) generations: Mutex<HashMap<u64, u64>>,
    pub(super) files: Mutex<HashMap<u64, OpenFile>>,
    pub(super) dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    pub(super) next_fh: AtomicU64,
}

pub(super) fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

pub(super) fn rerrno(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

pub(super) fn system_time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsecs.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

pub(super) fn timespec(t: Option<TimeOrNow>) -> rustix::fs::Timespec {
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
pub(super) fn fix_mode(path: &Path, mode: u32) -> io::Result<()> {
    let md = std::fs::symlink_metadata(path)?;
    if md.mode() & 0o777 != mode & 0o777 {
        std::fs::set_permissions(path, Permissions::from_mode((md.mode() & 0o7000) | (mode & 0o777)))?;
    }
    Ok(())
}

impl Inner {
    // --- inode numbers and paths

    pub(super) fn fuse_ino(&self, st_ino: u64) -> u64 {
        if st_ino == self.root_ino { INodeNo::ROOT.0 } else { st_ino }
    }

    /// An existing object's attributes with its current generation.
    pub(super) fn known(&self, attr: FileAttr) -> (FileAttr, u64) {
        let g = self.generations.lock().expect("never poisoned").get(&attr.ino.0).copied().unwrap_or(0);
        (attr, g)
    }

    /// A new object's attributes with a new generation for its (possibly reused) number.
    pub(super) fn born(&self, attr: FileAttr) -> (FileAttr, u64) {
        let mut gens = self.generations.lock().expect("never poisoned");
        let g = gens.entry(attr.ino.0).or_insert(0);
        *g += 1;
        (attr, *g)
    }

    pub(super) fn attr(&self, md: &Metadata) -> FileAttr {
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
    pub(super) fn rel(&self, ino: u64) -> Option<PathBuf> {
        if ino == INodeNo::ROOT.0 {
            return Some(PathBuf::new());
        }
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        let mut names = Vec::new();
        let mut cur = ino;
        while cur != INodeNo::ROOT.0 {
            let (parent, name) = nodes.get(&cur)?.first()?;
            names.push(name.as_os_str());
            cur = *parent;
            if names.len() > 4096 {
                return None;
            }
        }
        Some(names.iter().rev().collect())
    }

    pub(super) fn path(&self, ino: u64) -> Res<PathBuf> {
        self.rel(ino).map(|rel| self.backing.join(rel)).ok_or(Errno::ESTALE)
    }

    /// Every known backing path of `ino` (the name learnt last first): more than one for a
    /// file with hard links. A name may have been replaced since; callers check the inode.
    pub(super) fn paths(&self, ino: u64) -> Vec<PathBuf> {
        if ino == INodeNo::ROOT.0 {
            return vec![self.backing.clone()];
        }
        let names = self.nodes.read().unwrap_or_else(|e| e.into_inner()).get(&ino).cloned().unwrap_or_default();
        names.into_iter().filter_map(|(parent, name)| Some(self.backing.join(self.rel(parent)?).join(name))).collect()
    }

    /// A backing path of `ino` that is `ino` now (checked with `lstat`) and its metadata.
    pub(super) fn resolve(&self, ino: u64) -> Res<(PathBuf, Metadata)> {
        let mut last = Errno::ESTALE;
        for path in self.paths(ino) {
            match std::fs::symlink_metadata(&path) {
                Ok(md) if self.fuse_ino(md.ino()) == ino => return Ok((path, md)),
                Ok(_) => last = Errno::ESTALE,
                Err(e) => last = errno(e),
            }
        }
        Err(last)
    }

    /// Open a backing path of `ino` with `flags` and keep the descriptor only if it is `ino`:
    /// a name can be replaced between finding it and opening it.
    fn open_as(&self, ino: u64, flags: rustix::fs::OFlags) -> Res<rustix::fd::OwnedFd> {
        let mut last = Errno::ESTALE;
        for path in self.paths(ino) {
            match rustix::fs::open(&path, flags, rustix::fs::Mode::empty()) {
                Ok(fd) => match rustix::fs::fstat(&fd) {
                    Ok(st) if self.fuse_ino(st.st_ino) == ino => return Ok(fd),
                    Ok(_) => last = Errno::ESTALE,
                    Err(e) => last = rerrno(e),
                },
                Err(e) => last = rerrno(e),
            }
        }
        Err(last)
    }

    /// The backing path of `name` in the directory `parent`. Like a server that works by file
    /// handle, it acts on that directory or on nothing: when the directory's backing name now
    /// leads elsewhere (renamed away, or replaced by a symlink planted in the backing tree), the
    /// call fails with ESTALE instead of following the new name.
    pub(super) fn child(&self, parent: u64, name: &OsStr) -> Res<PathBuf> {
        let dir = self.path(parent)?;
        let here = std::fs::symlink_metadata(&dir).map_err(errno)?;
        if !here.is_dir() || self.fuse_ino(here.ino()) != parent {
            return Err(Errno::ESTALE);
        }
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

    pub(super) fn describe(&self, ino: u64, name: Option<&OsStr>) -> String {
        match (self.rel(ino), name) {
            (Some(rel), Some(name)) => rel.join(name).to_string_lossy().into_owned(),
            (Some(rel), None) => rel.to_string_lossy().into_owned(),
            (None, Some(name)) => format!("<ino {ino}>/{}", name.to_string_lossy()),
            (None, None) => format!("<ino {ino}>"),
        }
    }

    /// `ino` has the name (parent, name), now the first of its names. At most [`NAMES_KEPT`]
    /// are kept (a name dropped, or replaced behind the daemon's back, is found again by the
    /// kernel's next lookup).
    pub(super) fn remember(&self, ino: u64, parent: u64, name: &OsStr) {
        if ino != INodeNo::ROOT.0 {
            let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
            let names = nodes.entry(ino).or_default();
            names.retain(|(p, n)| !(*p == parent && n == name));
            names.insert(0, (parent, name.to_owned()));
            names.truncate(NAMES_KEPT);
        }
    }

    /// `ino` no longer has the name (parent, name) (its other names stay known).
    pub(super) fn forget_name(&self, ino: u64, parent: u64, name: &OsStr) {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(names) = nodes.get_mut(&ino) {
            names.retain(|(p, n)| !(*p == parent && n == name));
            if names.is_empty() {
                nodes.remove(&ino);
            }
        }
    }

    /// Stat `parent/name` and remember where its inode lives.
    pub(super) fn entry(&self, parent: u64, name: &OsStr, path: &Path) -> Res<FileAttr> {
        let md = std::fs::symlink_metadata(path).map_err(errno)?;
        let attr = self.attr(&md);
        // The spelling on disk (it differs from `name` on a case-insensitive filesystem).
        self.remember(attr.ino.0, parent, path.file_name().unwrap_or(name));
        Ok(attr)
    }

    pub(super) fn open_file(&self, ino: u64) -> Option<Arc<File>> {
        lock(&self.files).get(&ino).map(|f| f.file.clone())
    }

    pub(super) fn handle(&self, fh: u64) -> Res<Arc<File>> {
        lock(&self.files).get(&fh).map(|f| f.file.clone()).ok_or(Errno::EBADF)
    }

    pub(super) fn add_handle(&self, ino: u64, file: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        lock(&self.files).insert(fh, OpenFile { ino, file: Arc::new(file) });
        fh
    }

    // --- operations, run by the workers after the latency

    pub(super) fn lookup(&self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        self.entry(parent, name, &path)
    }

    pub(super) fn getattr(&self, ino: u64, fh: Option<u64>) -> Res<FileAttr> {
        if let Some(file) = fh.and_then(|fh| self.open_file(fh)) {
            return Ok(self.attr(&file.metadata().map_err(errno)?));
        }
        match self.resolve(ino) {
            Ok((_, md)) => Ok(self.attr(&md)),
            Err(e) => {
                // Unlinked while open, or moved behind our back: an open handle still knows it.
                let open = lock(&self.files).values().find(|f| f.ino == ino).map(|f| f.file.clone());
                match open {
                    Some(file) => Ok(self.attr(&file.metadata().map_err(errno)?)),
                    None => Err(e),
                }
            }
        }
    }

    pub(super) fn setattr(&self, ino: u64, change: SetAttr, fh: Option<u64>) -> Res<FileAttr> {
        use std::os::fd::AsRawFd;
        let SetAttr { mode, uid, gid, size, atime, mtime } = change;
        let file = fh.and_then(|fh| self.open_file(fh));
        // Without an open file: a descriptor of this very inode (a name can be replaced while
        // the request runs), reached again through /proc for what needs a path.
        let pinned =
            match &file {
                Some(_) => None,
                None => Some(self.open_as(
                    ino,
                    rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
                )?),
            };
        let path = || -> Res<PathBuf> {
            let fd = pinned.as_ref().ok_or(Errno::EBADF)?;
            Ok(PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())))
        };
        if let Some(mode) = mode {
            let perm = Permissions::from_mode(mode & 0o7777);
            match &file {
                Some(f) => f.set_permissions(perm),
                None => std::fs::set_permissions(path()?, perm),
            }
            .map_err(errno)?;
        }
        if uid.is_some() || gid.is_some() {
            match &file {
                Some(f) => std::os::unix::fs::fchown(f.as_ref(), uid, gid),
                None => std::os::unix::fs::chown(path()?, uid, gid),
            }
            .map_err(errno)?;
        }
        if let Some(size) = size {
            match &file {
                Some(f) => f.set_len(size),
                None => std::fs::OpenOptions::new().write(true).open(path()?).and_then(|f| f.set_len(size)),
            }
            .map_err(errno)?;
        }
        if atime.is_some() || mtime.is_some() {
            let times = rustix::fs::Timestamps { last_access: timespec(atime), last_modification: timespec(mtime) };
            match &file {
                Some(f) => rustix::fs::futimens(f.as_ref(), &times),
                None => rustix::fs::utimensat(rustix::fs::CWD, path()?.as_path(), &times, rustix::fs::AtFlags::empty()),
            }
            .map_err(rerrno)?;
        }
        match &file {
            Some(f) => Ok(self.attr(&f.metadata().map_err(errno)?)),
            None => {
                let fd = pinned.as_ref().ok_or(Errno::EBADF)?;
                Ok(self.attr(&File::from(fd.try_clone().map_err(errno)?).metadata().map_err(errno)?))
            }
        }
    }

    pub(super) fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        use rustix::fs::OFlags;
        // Read the link through a descriptor of this inode, not a name another may hold now.
        let fd = self.open_as(ino, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC)?;
        let target = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(rerrno)?;
        Ok(target.into_bytes())
    }

    pub(super) fn mknod(&self, parent: u64, name: &OsStr, mode: u32, rdev: u32) -> Res<FileAttr> {
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

    pub(super) fn mkdir(&self, parent: u64, name: &OsStr, mode: u32) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        std::fs::DirBuilder::new().mode(mode & 0o7777).create(&path).map_err(errno)?;
        fix_mode(&path, mode).map_err(errno)?;
        self.entry(parent, name, &path)
    }

    pub(super) fn unlink(&self, parent: u64, name: &OsStr, dir: bool) -> Res<()> {
        let path = self.child(parent, name)?;
        let ino = std::fs::symlink_metadata(&path).map(|md| self.fuse_ino(md.ino())).ok();
        if dir { std::fs::remove_dir(&path) } else { std::fs::remove_file(&path) }.map_err(errno)?;
        if let Some(ino) = ino {
            self.forget_name(ino, parent, path.file_name().unwrap_or(name));
        }
        Ok(())
    }

    pub(super) fn symlink(&self, parent: u64, name: &OsStr, target: &Path) -> Res<FileAttr> {
        let path = self.child(parent, name)?;
        std::os::unix::fs::symlink(target, &path).map_err(errno)?;
        self.entry(parent, name, &path)
    }

    pub(super) fn rename(&self, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Res<()> {
        let from = self.child(parent, name)?;
        let to = self.child(newparent, newname)?;
        let ino_of = |p: &Path| std::fs::symlink_metadata(p).map(|md| self.fuse_ino(md.ino())).ok();
        let (from_ino, to_ino) = (ino_of(&from), ino_of(&to));
        let flags = rustix::fs::RenameFlags::from_bits_retain(flags);
        rustix::fs::renameat_with(rustix::fs::CWD, &from, rustix::fs::CWD, &to, flags).map_err(rerrno)?;
        let exchanged = flags.contains(rustix::fs::RenameFlags::EXCHANGE);
        let (from_name, to_name) = (from.file_name().unwrap_or(name), to.file_name().unwrap_or(newname));
        if from_ino.is_some() && from_ino == to_ino {
            // Two links of one file: rename(2) leaves both names as they are.
            return Ok(());
        }
        if let Some(ino) = to_ino {
            self.forget_name(ino, newparent, to_name);
            if exchanged {
                self.remember(ino, parent, from_name);
            }
        }
        if let Some(ino) = from_ino {
            self.forget_name(ino, parent, from_name);
            self.remember(ino, newparent, to_name);
        }
        Ok(())
    }

    pub(super) fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> Res<FileAttr> {
        let (from, _) = self.resolve(ino)?;
        let to = self.child(newparent, newname)?;
        std::fs::hard_link(&from, &to).map_err(errno)?;
        let md = std::fs::symlink_metadata(&to).map_err(errno)?;
        if self.fuse_ino(md.ino()) != ino {
            // The name was replaced between finding it and linking it: not this file.
            let _ = std::fs::remove_file(&to);
            return Err(Errno::ESTALE);
        }
        // The kernel makes the new name's entry from this reply, with no lookup of it.
        self.remember(ino, newparent, to.file_name().unwrap_or(newname));
        Ok(self.attr(&md))
    }

    pub(super) fn open(&self, ino: u64, flags: i32) -> Res<u64> {
        use rustix::fs::OFlags;
        let flags = (OFlags::from_bits_retain(flags as u32)
            - (OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::DIRECT))
            | OFlags::CLOEXEC;
        let fd = self.open_as(ino, flags)?;
        Ok(self.add_handle(ino, File::from(fd)))
    }

    pub(super) fn create(&self, parent: u64, name: &OsStr, mode: u32, flags: i32) -> Res<(FileAttr, u64)> {
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

    pub(super) fn read(&self, fh: u64, offset: u64, size: u32) -> Res<Vec<u8>> {
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

    pub(super) fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Res<u32> {
        let file = self.handle(fh)?;
        file.write_all_at(data, offset).map_err(errno)?;
        Ok(data.len() as u32)
    }

    pub(super) fn fsync(&self, fh: u64, datasync: bool) -> Res<()> {
        let file = self.handle(fh)?;
        if datasync { file.sync_data() } else { file.sync_all() }.map_err(errno)
    }

    /// Forget the open file `fh`.
    pub(super) fn release(&self, fh: u64) -> Res<()> {
        lock(&self.files).remove(&fh);
        Ok(())
    }

    pub(super) fn opendir(&self, ino: u64) -> Res<u64> {
        let (path, md) = self.resolve(ino)?;
        if !md.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        lock(&self.dirs).insert(fh, Arc::new(DirHandle { ino, path, listing: Mutex::new(None) }));
        Ok(fh)
    }

    pub(super) fn readdir(&self, fh: u64, offset: u64) -> Res<Arc<Vec<DirEnt>>> {
        let dir = lock(&self.dirs).get(&fh).cloned().ok_or(Errno::EBADF)?;
        let mut listing = lock(&dir.listing);
        if let Some(l) = listing.as_ref().filter(|_| offset != 0) {
            return Ok(l.clone());
        }
        let parent = if dir.ino == INodeNo::ROOT.0 {
            INodeNo::ROOT.0
        } else {
            let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
            nodes.get(&dir.ino).and_then(|names| names.first()).map_or(INodeNo::ROOT.0, |(p, _)| *p)
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

    /// Forget the open directory `fh`.
    pub(super) fn releasedir(&self, fh: u64) -> Res<()> {
        lock(&self.dirs).remove(&fh);
        Ok(())
    }

    pub(super) fn fsyncdir(&self, fh: u64) -> Res<()> {
        let dir = lock(&self.dirs).get(&fh).cloned().ok_or(Errno::EBADF)?;
        File::open(&dir.path).and_then(|f| f.sync_all()).map_err(errno)
    }

    pub(super) fn statfs(&self) -> Res<rustix::fs::StatVfs> {
        rustix::fs::statvfs(&self.backing).map_err(rerrno)
    }

    pub(super) fn access(&self, ino: u64, mask: i32) -> Res<()> {
        let access = rustix::fs::Access::from_bits_retain(mask as u32);
        rustix::fs::accessat(rustix::fs::CWD, &self.resolve(ino)?.0, access, rustix::fs::AtFlags::empty())
            .map_err(rerrno)
    }
}

/// One request from receipt to reply: counts it in flight until dropped.
pub(super) struct Ticket {
    pub(super) inner: Arc<Inner>,
    pub(super) op: Op,
}

impl Ticket {
    pub(super) fn new(inner: Arc<Inner>, op: Op) -> Ticket {
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
pub(super) struct Slot<'a>(&'a Inner);

impl<'a> Slot<'a> {
    pub(super) fn take(inner: &'a Inner) -> Slot<'a> {
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

impl Inner {
    /// Sleep the latency while holding a service slot, then do the work.
    pub(super) fn serve<T>(&self, op: Op, work: impl FnOnce(&Inner) -> T) -> T {
        let _slot = Slot::take(self);
        let latency = if op.is_data() { self.data_latency } else { self.meta_latency };
        if !latency.is_zero() {
            thread::sleep(latency);
        }
        work(self)
    }
}

impl Inner {
    pub(super) fn stats(&self) -> Stats {
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
            max_lookups_in_one_dir: c.max_lookups_in_one_dir.load(Ordering::SeqCst),
            paths: lock(&self.paths).clone(),
        }
    }

    pub(super) fn reset(&self) {
        let c = &self.counters;
        for i in 0..N_OPS {
            c.count[i].store(0, Ordering::SeqCst);
            // Requests still in flight stay counted as in flight.
            c.max_in_flight[i].store(c.in_flight[i].load(Ordering::SeqCst), Ordering::SeqCst);
        }
        c.all_max_in_flight.store(c.all_in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
        c.max_in_service.store(c.in_service.load(Ordering::SeqCst), Ordering::SeqCst);
        c.forgets.store(0, Ordering::SeqCst);
        let busiest = lock(&c.lookups_in).values().copied().max().unwrap_or(0);
        c.max_lookups_in_one_dir.store(busiest, Ordering::SeqCst);
        lock(&self.paths).clear();
    }
}
