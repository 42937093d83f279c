//! NFSv3 procedures (RFC 1813) on top of [`rpc`](super::rpc), counted by procedure, with the
//! server's status codes turned into errors that say what they mean.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use nfs3_types::nfs3::{
    self as n, Nfs3Option, Nfs3Result, diropargs3, filename3, ftype3, nfs_fh3, nfsstat3, sattr3, set_mtime, stable_how,
};
use nfs3_types::xdr_codec::{Opaque, Pack, Unpack};

use super::rpc::{Client, Reply, RpcError, RpcOptions};

/// A file handle.
pub type Fh = nfs_fh3;

/// What a call of the NFS program can fail with.
#[derive(Debug)]
pub enum NfsError {
    /// The server answered with this status.
    Status(nfsstat3),
    /// The call did not get an answer (or one that decodes).
    Rpc(RpcError),
    /// A call sent again (after a broken connection or a timeout) failed with EXIST (create,
    /// mkdir, symlink) or NOENT (remove, rmdir, rename): its first try was executed.
    DoneBefore(nfsstat3),
}

impl NfsError {
    /// The status, if the server gave one.
    pub fn status(&self) -> Option<nfsstat3> {
        match self {
            NfsError::Status(s) | NfsError::DoneBefore(s) => Some(*s),
            NfsError::Rpc(_) => None,
        }
    }

    /// As an I/O error whose kind carries the meaning (for the hints of `treesync_backend`).
    pub fn into_io(self) -> std::io::Error {
        match self {
            NfsError::Status(s) | NfsError::DoneBefore(s) => {
                let (kind, meaning) = meaning(s);
                std::io::Error::new(kind, format!("the NFS server answered {s} ({meaning})"))
            }
            NfsError::Rpc(e) => std::io::Error::new(e.kind(), e.to_string()),
        }
    }
}

impl fmt::Display for NfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NfsError::Status(s) | NfsError::DoneBefore(s) => {
                write!(f, "the NFS server answered {s} ({})", meaning(*s).1)
            }
            NfsError::Rpc(e) => write!(f, "{e}"),
        }
    }
}

fn meaning(s: nfsstat3) -> (std::io::ErrorKind, &'static str) {
    use nfsstat3::*;
    use std::io::ErrorKind as K;
    match s {
        NFS3ERR_PERM => (K::PermissionDenied, "not the owner"),
        NFS3ERR_ACCES => (K::PermissionDenied, "permission denied: check the export's options and --uid/--gid"),
        NFS3ERR_NOENT => (K::NotFound, "no such file or directory"),
        NFS3ERR_EXIST => (K::AlreadyExists, "it exists"),
        NFS3ERR_NOTDIR => (K::NotADirectory, "not a directory"),
        NFS3ERR_ISDIR => (K::IsADirectory, "is a directory"),
        NFS3ERR_NOSPC => (K::StorageFull, "no space left on the server"),
        NFS3ERR_DQUOT => (K::QuotaExceeded, "quota exceeded on the server"),
        NFS3ERR_ROFS => (K::ReadOnlyFilesystem, "the export is read-only"),
        NFS3ERR_NOTEMPTY => (K::DirectoryNotEmpty, "directory not empty"),
        NFS3ERR_NAMETOOLONG => (K::InvalidFilename, "name too long for the server"),
        NFS3ERR_STALE => {
            (K::StaleNetworkFileHandle, "stale file handle: the object was removed or the server restarted; run again")
        }
        NFS3ERR_BADHANDLE => (K::StaleNetworkFileHandle, "bad file handle"),
        NFS3ERR_JUKEBOX => (K::ResourceBusy, "the server is busy; try again later"),
        NFS3ERR_FBIG => (K::FileTooLarge, "file too large for the server"),
        NFS3ERR_IO => (K::Other, "I/O error on the server"),
        NFS3ERR_INVAL => (K::InvalidInput, "invalid argument"),
        NFS3ERR_NOTSUPP => (K::Unsupported, "not supported by the server"),
        NFS3ERR_SERVERFAULT => (K::Other, "server fault"),
        _ => (K::Other, "error"),
    }
}

/// Procedure numbers and names, for counting.
pub const PROCS: [&str; 22] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];

/// Calls with the path each was about.
type Recorded = Mutex<Vec<(&'static str, Vec<u8>)>>;

/// The NFS program at one server, counted.
pub struct Nfs {
    rpc: Client,
    counts: [AtomicU64; 22],
    record: Option<Recorded>,
}

/// An entry of a directory listing.
pub struct Entry {
    /// Its name.
    pub name: Vec<u8>,
    /// Its attributes, if the server sent them.
    pub attr: Option<n::fattr3>,
    /// Its handle, if the server sent it.
    pub fh: Option<Fh>,
}

fn name(b: &[u8]) -> filename3<'_> {
    filename3(Opaque::borrowed(b))
}

fn dirop<'a>(dir: &Fh, b: &'a [u8]) -> diropargs3<'a> {
    diropargs3 { dir: dir.clone(), name: name(b) }
}

fn some<T: Pack + Unpack>(o: Nfs3Option<T>) -> Option<T> {
    match o {
        Nfs3Option::Some(v) => Some(v),
        Nfs3Option::None => None,
    }
}

/// `sattr3` that sets the mode (and the size, for truncating creates).
pub fn mode_attr(mode: u32, size: Option<u64>) -> sattr3 {
    sattr3 { mode: Nfs3Option::Some(mode), size: size.map_or(Nfs3Option::None, Nfs3Option::Some), ..Default::default() }
}

impl Nfs {
    /// The NFS program (100003 version 3) at `addr`.
    pub fn new(addr: SocketAddr, options: RpcOptions, record: bool) -> Self {
        Nfs {
            rpc: Client::new(addr, n::PROGRAM, n::VERSION, options),
            counts: Default::default(),
            record: record.then(|| Mutex::new(Vec::new())),
        }
    }

    /// The RPC client (connections, in-flight figures, test hooks).
    pub fn rpc(&self) -> &Client {
        &self.rpc
    }

    /// Calls made so far by procedure (procedures never called left out).
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        PROCS.iter().zip(&self.counts).map(|(p, c)| (*p, c.load(Ordering::Relaxed))).filter(|(_, c)| *c > 0).collect()
    }

    /// All calls so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Calls with the path each was about, when recording was asked for.
    pub fn recorded(&self) -> Vec<(&'static str, Vec<u8>)> {
        self.record.as_ref().map(|r| r.lock().expect("never poisoned").clone()).unwrap_or_default()
    }

    async fn call<R: Unpack>(&self, proc: u32, args: &(impl Pack + Sync), about: &[u8]) -> Result<(R, bool), NfsError> {
        let p = PROCS[proc as usize];
        self.counts[proc as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(r) = &self.record {
            r.lock().expect("never poisoned").push((p, about.to_vec()));
        }
        let what = || format!("NFS {p} of {}", String::from_utf8_lossy(about));
        let reply: Reply = self.rpc.call(proc, args, &what).await.map_err(NfsError::Rpc)?;
        let value = reply
            .decode::<R>()
            .map_err(|why| NfsError::Rpc(RpcError::Garbled { addr: self.rpc.addr(), what: what(), why }))?;
        Ok((value, reply.retransmitted))
    }

    /// Call `proc` and decode its result; a status other than OK is an error (see
    /// [`NfsError::DoneBefore`] for those of a call sent again).
    async fn res<T: Unpack, E: Unpack>(
        &self,
        proc: u32,
        args: &(impl Pack + Sync),
        about: &[u8],
    ) -> Result<T, NfsError> {
        match self.call::<Nfs3Result<T, E>>(proc, args, about).await? {
            (Nfs3Result::Ok(v), _) => Ok(v),
            (Nfs3Result::Err((s, _)), true)
                if (s == nfsstat3::NFS3ERR_EXIST && matches!(proc, 8..=10))
                    || (s == nfsstat3::NFS3ERR_NOENT && matches!(proc, 12..=14)) =>
            {
                Err(NfsError::DoneBefore(s))
            }
            (Nfs3Result::Err((s, _)), _) => Err(NfsError::Status(s)),
        }
    }

    /// NULL: is the server there?
    pub async fn null(&self) -> Result<(), NfsError> {
        self.call::<nfs3_types::xdr_codec::Void>(0, &nfs3_types::xdr_codec::Void, b"").await.map(|_| ())
    }

    /// GETATTR.
    pub async fn getattr(&self, fh: &Fh, about: &[u8]) -> Result<n::fattr3, NfsError> {
        let args = n::GETATTR3args { object: fh.clone() };
        self.res::<n::GETATTR3resok, nfs3_types::xdr_codec::Void>(1, &args, about).await.map(|r| r.obj_attributes)
    }

    /// LOOKUP `name` in `dir`: its handle and attributes.
    pub async fn lookup(&self, dir: &Fh, nm: &[u8], about: &[u8]) -> Result<(Fh, Option<n::fattr3>), NfsError> {
        let args = n::LOOKUP3args { what: dirop(dir, nm) };
        let r = self.res::<n::LOOKUP3resok, n::LOOKUP3resfail>(3, &args, about).await?;
        Ok((r.object, some(r.obj_attributes)))
    }

    /// SETATTR of the mode, or of the modification time to the server's clock.
    pub async fn setattr(&self, fh: &Fh, mode: Option<u32>, touch: bool, about: &[u8]) -> Result<(), NfsError> {
        let mut attr = sattr3::default();
        if let Some(m) = mode {
            attr.mode = Nfs3Option::Some(m);
        }
        if touch {
            attr.mtime = set_mtime::SET_TO_SERVER_TIME;
        }
        let args = n::SETATTR3args { object: fh.clone(), new_attributes: attr, guard: Nfs3Option::None };
        self.res::<n::SETATTR3resok, n::SETATTR3resfail>(2, &args, about).await.map(|_| ())
    }

    /// READLINK.
    pub async fn readlink(&self, fh: &Fh, about: &[u8]) -> Result<Vec<u8>, NfsError> {
        let args = n::READLINK3args { symlink: fh.clone() };
        let r = self.res::<n::READLINK3resok<'static>, n::READLINK3resfail>(5, &args, about).await?;
        Ok(r.data.0.into_owned())
    }

    /// READ up to `count` bytes at `offset`: the data and whether it reached the end.
    pub async fn read(&self, fh: &Fh, offset: u64, count: u32, about: &[u8]) -> Result<(Vec<u8>, bool), NfsError> {
        let args = n::READ3args { file: fh.clone(), offset, count };
        let r = self.res::<n::READ3resok<'static>, n::READ3resfail>(6, &args, about).await?;
        Ok((r.data.into_owned(), r.eof))
    }

    /// WRITE `data` at `offset`; returns how it was committed and the server's write verifier.
    pub async fn write(
        &self,
        fh: &Fh,
        offset: u64,
        data: &[u8],
        stable: stable_how,
        about: &[u8],
    ) -> Result<(u32, stable_how, [u8; 8]), NfsError> {
        let count = u32::try_from(data.len()).expect("chunks are at most wtmax");
        let args = n::WRITE3args { file: fh.clone(), offset, count, stable, data: Opaque::borrowed(data) };
        let r = self.res::<n::WRITE3resok, n::WRITE3resfail>(7, &args, about).await?;
        Ok((r.count, r.committed, r.verf.0))
    }

    /// CREATE `name` in `dir` (UNCHECKED truncates an existing file; GUARDED fails with EXIST).
    pub async fn create(
        &self,
        dir: &Fh,
        nm: &[u8],
        attr: sattr3,
        guarded: bool,
        about: &[u8],
    ) -> Result<Option<Fh>, NfsError> {
        let how = if guarded { n::createhow3::GUARDED(attr) } else { n::createhow3::UNCHECKED(attr) };
        let args = n::CREATE3args { where_: dirop(dir, nm), how };
        self.res::<n::CREATE3resok, n::CREATE3resfail>(8, &args, about).await.map(|r| some(r.obj))
    }

    /// MKDIR `name` in `dir`: the new directory's handle, if the server sent it.
    pub async fn mkdir(&self, dir: &Fh, nm: &[u8], mode: u32, about: &[u8]) -> Result<Option<Fh>, NfsError> {
        let args = n::MKDIR3args { where_: dirop(dir, nm), attributes: mode_attr(mode, None) };
        self.res::<n::MKDIR3resok, n::MKDIR3resfail>(9, &args, about).await.map(|r| some(r.obj))
    }

    /// The handle of what a CREATE or MKDIR of `name` in `dir` gave (`result`): from its reply,
    /// or by LOOKUP when the reply carries none or a call sent again found it made
    /// ([`NfsError::DoneBefore`]); with `exists_ok`, also when it was there before.
    pub async fn made(
        &self,
        dir: &Fh,
        nm: &[u8],
        about: &[u8],
        result: Result<Option<Fh>, NfsError>,
        exists_ok: bool,
    ) -> Result<Fh, NfsError> {
        match result {
            Ok(Some(fh)) => Ok(fh),
            Ok(None) | Err(NfsError::DoneBefore(_)) => self.lookup(dir, nm, about).await.map(|(fh, _)| fh),
            Err(e) if exists_ok && e.status() == Some(nfsstat3::NFS3ERR_EXIST) => {
                self.lookup(dir, nm, about).await.map(|(fh, _)| fh)
            }
            Err(e) => Err(e),
        }
    }

    /// SYMLINK `name` in `dir` pointing at `target`.
    pub async fn symlink(&self, dir: &Fh, nm: &[u8], target: &[u8], about: &[u8]) -> Result<(), NfsError> {
        let args = n::SYMLINK3args {
            where_: dirop(dir, nm),
            symlink: n::symlinkdata3 {
                symlink_attributes: mode_attr(0o777, None),
                symlink_data: n::nfspath3(Opaque::borrowed(target)),
            },
        };
        self.res::<n::SYMLINK3resok, n::SYMLINK3resfail>(10, &args, about).await.map(drop)
    }

    /// LINK: a new name `nm` in `dir` for the file `fh` (fails with EXIST if `nm` is taken:
    /// unlike RENAME it never replaces anything).
    pub async fn link(&self, fh: &Fh, dir: &Fh, nm: &[u8], about: &[u8]) -> Result<(), NfsError> {
        let args = n::LINK3args { file: fh.clone(), link: dirop(dir, nm) };
        self.res::<n::LINK3resok, n::LINK3resfail>(15, &args, about).await.map(drop)
    }

    /// REMOVE `name` from `dir`.
    pub async fn remove(&self, dir: &Fh, nm: &[u8], about: &[u8]) -> Result<(), NfsError> {
        let args = n::REMOVE3args { object: dirop(dir, nm) };
        self.res::<n::REMOVE3resok, n::REMOVE3resfail>(12, &args, about).await.map(drop)
    }

    /// RMDIR `name` from `dir`.
    pub async fn rmdir(&self, dir: &Fh, nm: &[u8], about: &[u8]) -> Result<(), NfsError> {
        let args = n::RMDIR3args { object: dirop(dir, nm) };
        self.res::<n::RMDIR3resok, n::RMDIR3resfail>(13, &args, about).await.map(drop)
    }

    /// RENAME `from` in `fdir` to `to` in `tdir`.
    pub async fn rename(&self, fdir: &Fh, from: &[u8], tdir: &Fh, to: &[u8], about: &[u8]) -> Result<(), NfsError> {
        let args = n::RENAME3args { from: dirop(fdir, from), to: dirop(tdir, to) };
        self.res::<n::RENAME3resok, n::RENAME3resfail>(14, &args, about).await.map(drop)
    }

    /// READDIRPLUS of a whole directory (as many calls as it takes), without `.` and `..`.
    pub async fn readdirplus(&self, dir: &Fh, about: &[u8]) -> Result<Vec<Entry>, NfsError> {
        let mut out = Vec::new();
        let mut cookie = 0;
        let mut verf = n::cookieverf3::default();
        loop {
            let args = n::READDIRPLUS3args {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: 64 << 10,
                maxcount: 256 << 10,
            };
            let r = self.res::<n::READDIRPLUS3resok<'static>, n::READDIRPLUS3resfail>(17, &args, about).await?;
            verf = r.cookieverf;
            let entries = r.reply.entries.into_inner();
            let empty = entries.is_empty();
            for e in entries {
                cookie = e.cookie;
                let nm = e.name.0.to_vec();
                if nm == b"." || nm == b".." {
                    continue;
                }
                out.push(Entry { name: nm, attr: some(e.name_attributes), fh: some(e.name_handle) });
            }
            if r.reply.eof || empty {
                return Ok(out);
            }
        }
    }

    /// FSINFO: the server's preferred and largest read and write sizes.
    pub async fn fsinfo(&self, root: &Fh) -> Result<n::FSINFO3resok, NfsError> {
        let args = n::FSINFO3args { fsroot: root.clone() };
        self.res::<n::FSINFO3resok, n::FSINFO3resfail>(19, &args, b"").await
    }

    /// PATHCONF: name limits and whether the server tells names apart by case.
    pub async fn pathconf(&self, fh: &Fh) -> Result<n::PATHCONF3resok, NfsError> {
        let args = n::PATHCONF3args { object: fh.clone() };
        self.res::<n::PATHCONF3resok, n::PATHCONF3resfail>(20, &args, b"").await
    }

    /// COMMIT everything written to `fh`; returns the write verifier.
    pub async fn commit(&self, fh: &Fh, about: &[u8]) -> Result<[u8; 8], NfsError> {
        let args = n::COMMIT3args { file: fh.clone(), offset: 0, count: 0 };
        self.res::<n::COMMIT3resok, n::COMMIT3resfail>(21, &args, about).await.map(|r| r.verf.0)
    }
}

/// The type of an object from its attributes.
pub fn kind(attr: &Option<n::fattr3>) -> Option<ftype3> {
    attr.as_ref().map(|a| a.type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind as K;

    /// The executor tells drift apart by these kinds (something missing, a file where a
    /// directory should be, …): each status maps to the one that says the same.
    #[test]
    fn statuses_map_to_the_io_error_kinds_that_mean_the_same() {
        for (status, kind) in [
            (nfsstat3::NFS3ERR_NOENT, K::NotFound),
            (nfsstat3::NFS3ERR_NOTDIR, K::NotADirectory),
            (nfsstat3::NFS3ERR_ISDIR, K::IsADirectory),
            (nfsstat3::NFS3ERR_EXIST, K::AlreadyExists),
            (nfsstat3::NFS3ERR_NOTEMPTY, K::DirectoryNotEmpty),
            (nfsstat3::NFS3ERR_ACCES, K::PermissionDenied),
            (nfsstat3::NFS3ERR_NOSPC, K::StorageFull),
            (nfsstat3::NFS3ERR_ROFS, K::ReadOnlyFilesystem),
            (nfsstat3::NFS3ERR_STALE, K::StaleNetworkFileHandle),
        ] {
            assert_eq!(NfsError::Status(status).into_io().kind(), kind, "{status}");
            assert_eq!(NfsError::DoneBefore(status).into_io().kind(), kind, "{status}, sent again");
        }
    }
}
