//! Generations of `nfs://` targets (`sync --atomic`): the [`Host`] of a target
//! `nfs://HOST/EXPORT/PATH/NAME`, on the server, through the built-in NFSv3 client.
//!
//! The home is `PATH/.NAME.treesync` on the server; every call is made relative to a directory
//! handle (the target's parent, the home, a directory being copied or removed), never by
//! resolving a path that could lead through a symlink. The one client of the target's backend
//! is shared by the host and the backends of its generations: one connection, one count of
//! calls ([`ClientHost::calls`]).
//!
//! | step | calls |
//! |---|---|
//! | switch | SYMLINK `HOME/tmp/link` (text `.NAME.treesync/SLOT`), RENAME over `NAME`: atomic for readers that look `NAME` up |
//! | switch of a target that is a real directory (becoming atomic) | RENAME `NAME` → `HOME/displaced`, then RENAME of the link → `NAME`: **between the two RENAMEs there is no target**; readers that look it up in that moment find nothing |
//! | exchange | not offered: NFSv3 has no call that swaps two directories ([`Host::can_exchange`] is `false`), so targets on `nfs://` are always switched with a symlink |
//! | leaving generations | REMOVE of the link, RENAME of the slot → `NAME` (a moment without a target) |
//! | a new generation (clone) | one READDIRPLUS per directory, MKDIR per directory, LINK per file (a hard-link farm: no data copied; READ + WRITE copies where the server answers NOTSUPP or MLINK), READLINK + SYMLINK per symlink; the state file is copied as a file of its own, last (READ + CREATE + WRITE + RENAME; not counted in `bytes_copied`, which counts tree files) |
//! | removal of a generation | READDIRPLUS per directory, REMOVE per file and symlink (never followed), RMDIR per directory, deepest first |
//! | lock | the lease lock of the `nfs://` backend as the file `HOME/lock` (guarded CREATE, renewed while held, taken over when stale) |
//! | record | CREATE of a temporary in the home, WRITE, RENAME over `HOME/generations` |
//!
//! The target's backend works on the hard-link farm safely because it never writes a file in
//! place: a write is CREATE of a temporary + RENAME, a mode change of a file with other links
//! is a rewrite, and the state file is a file of its own in every generation.//!
//! The cloning and the removal of a generation's tree are in `tree`.

mod tree;

use std::io::ErrorKind;

use super::ops::{create_new, read_all, write_all};
#[allow(clippy::wildcard_imports)]
use super::*;
use treesync_backend::generation::{At, AtTarget, CloneHow, Cloned, Host, Switch, Switched};

/// The home's folder for the link being made.
const TMP: &[u8] = b"tmp";
/// The link being made in `HOME/tmp`.
const LINK: &[u8] = b"link";
/// The record file in the home.
const RECORD: &[u8] = b"generations";
/// The lock file in the home.
const LOCK: &[u8] = b"lock";
/// Calls in flight while a directory is copied or removed.
const JOBS: usize = 32;

/// The generations of an `nfs://` target: its home `PATH/.NAME.treesync` on the server and
/// the switch of `NAME` (see the [module docs](self)). Open it with [`ClientHost::open`].
pub struct ClientHost {
    /// The target.
    url: NfsUrl,
    /// The options of every backend it opens.
    options: ClientOptions,
    /// The target's own backend; its client is the one every other backend here shares.
    target: ClientBackend,
    /// `NAME`.
    name: String,
    /// `.NAME.treesync`.
    home_name: String,
    /// The target's parent and the home, once the export is known.
    places: OnceCell<Places>,
}

struct Places {
    /// Rooted at `PATH`.
    parent: ClientBackend,
    /// Rooted at `PATH/.NAME.treesync`, its lock the file `lock` there.
    home: ClientBackend,
}

/// Whether a REMOVE, RMDIR or RENAME met nothing to do (a call sent again found it done).
fn gone_ok(r: Result<(), NfsError>) -> Result<(), NfsError> {
    match r {
        Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
        Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A cell holding what `c` holds, if anything.
fn copied<T: Clone>(c: &OnceCell<T>) -> OnceCell<T> {
    OnceCell::new_with(c.get().cloned())
}

fn valid_slot(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/')
}

impl ClientBackend {
    /// A backend for the directory `path` (absolute on the server) of the same export, with
    /// the same options, sharing this backend's client (connection and counts) and what it
    /// knows of the export when it has connected already (else it connects on its own).
    fn derive(&self, path: &str, lock_in_root: Option<&'static [u8]>) -> ClientBackend {
        let from = &self.inner;
        let mut url = from.url.clone();
        url.path = path.to_string();
        let export = OnceCell::new();
        if let Some((fh, below)) = from.export.get() {
            let prefix = &from.url.path[..from.url.path.len() - below.iter().map(|c| c.len() + 1).sum::<usize>()];
            if let Some(rest) = path.strip_prefix(prefix)
                && (prefix.is_empty() || rest.is_empty() || rest.starts_with('/'))
            {
                let rest = rest.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect();
                let _ = export.set((fh.clone(), rest));
            }
        }
        ClientBackend {
            inner: Arc::new(Inner {
                lease: from.lease,
                nfs_addr: copied(&from.nfs_addr),
                nfs: copied(&from.nfs),
                export,
                wtmax: copied(&from.wtmax),
                case_sensitive: copied(&from.case_sensitive),
                lock_in_root,
                ..Inner::fresh(url, from.rpc.clone(), from.record)
            }),
        }
    }

    /// Forget the root's handle and everything below it (the directory was removed).
    async fn forget_root(&self) {
        *self.inner.root.lock().await = None;
        *self.inner.meta.lock().await = None;
        self.inner.dirs.clear();
    }
}

impl ClientHost {
    /// The host of the target `url` (`nfs://HOST/EXPORT/PATH/NAME`), whose backends all get
    /// `options`. Nothing is contacted until the first call; a target at the root of its
    /// export is refused then (its home would have to be outside the export).
    pub fn open(url: &str, options: ClientOptions) -> Result<ClientHost, Error> {
        let url = NfsUrl::parse(url).map_err(|detail| Error::BadUrl { detail })?;
        let name = url.components().last().map(|c| c.to_string()).expect("an NFS URL has an export path");
        let mut target = ClientBackend::new(url.clone(), options.record)?;
        Arc::get_mut(&mut target.inner).expect("not shared yet").lease = options.lease;
        Ok(ClientHost { home_name: format!(".{name}.treesync"), name, url, options, target, places: OnceCell::new() })
    }

    /// The target's own backend (what [`Host::open`] gives for [`At::Target`], without the
    /// budgets).
    pub fn target(&self) -> &ClientBackend {
        &self.target
    }

    /// NFS calls made so far by the host and every backend it opened, by procedure.
    pub fn calls(&self) -> Vec<(&'static str, u64)> {
        self.target.calls()
    }

    /// All NFS calls made so far by the host and every backend it opened.
    pub fn total_calls(&self) -> u64 {
        self.target.total_calls()
    }

    /// The target's parent directory on the server (`PATH`).
    fn parent_path(&self) -> &str {
        self.url.path.rsplit_once('/').map_or("", |(p, _)| p)
    }

    /// `HOME/rel` as messages show it.
    fn shown(&self, rel: &str) -> String {
        let url = self.url.to_string();
        let parent = url.rsplit_once('/').map_or(url.as_str(), |(p, _)| p);
        if rel.is_empty() {
            format!("{parent}/{}", self.home_name)
        } else {
            format!("{parent}/{}/{rel}", self.home_name)
        }
    }

    async fn places(&self) -> Result<&Places, Error> {
        self.places
            .get_or_try_init(|| async {
                let (_, below) = self.target.export().await?;
                if below.is_empty() {
                    return Err(Error::BadUrl {
                        detail: format!(
                            "cannot keep {} in generations: it is the root of its export, and a target's generations live next to it, in its parent directory (here outside the export)\n  hint: sync into a directory below the export, e.g. {}/site, or export the directory above",
                            self.url, self.url
                        ),
                    });
                }
                self.target.nfs().await?;
                let parent = self.parent_path().to_string();
                Ok(Places {
                    parent: self.target.derive(&parent, None),
                    home: self.target.derive(&format!("{parent}/{}", self.home_name), Some(LOCK)),
                })
            })
            .await
    }

    async fn nfs(&self) -> Result<&nfs::Nfs, Error> {
        self.target.nfs().await
    }

    /// The target's parent directory; it must exist.
    async fn parent_fh(&self) -> Result<Fh, Error> {
        let places = self.places().await?;
        places.parent.root(false).await?.ok_or_else(|| {
            io_error(
                "keep generations of",
                &self.url,
                ErrorKind::NotFound,
                "the directory that should hold the target does not exist on the server (create it first)",
            )
        })
    }

    /// The home's handle (`None`: it does not exist). Something else there is an error.
    async fn home_fh(&self) -> Result<Option<Fh>, Error> {
        let places = self.places().await?;
        places.home.root(false).await
    }

    async fn home_fh_or_missing(&self) -> Result<Fh, Error> {
        self.home_fh()
            .await?
            .ok_or_else(|| io_error("use", self.shown(""), ErrorKind::NotFound, "the home of the generations is gone"))
    }

    /// Fail when the home's lock was lost (its lease could not be renewed).
    fn check_lease(&self) -> Result<(), Error> {
        match self.places.get() {
            Some(p) => p.home.check_lease(),
            None => Ok(()),
        }
    }

    /// MKDIR `name` in `dir` with `mode`; with `exists_ok` a directory already there is used
    /// (anything else there is an error).
    async fn mkdir(&self, dir: &Fh, name: &[u8], mode: u32, exists_ok: bool, shown: &str) -> Result<Fh, Error> {
        let nfs = self.nfs().await?;
        match nfs.mkdir(dir, name, mode, shown.as_bytes()).await {
            Ok(Some(fh)) => Ok(fh),
            Ok(None) | Err(NfsError::DoneBefore(_)) => {
                nfs.lookup(dir, name, shown.as_bytes()).await.map(|(fh, _)| fh).map_err(|e| nfs_io("create", shown, e))
            }
            Err(e) if exists_ok && is(&e, nfsstat3::NFS3ERR_EXIST) => {
                let (fh, attr) = lookup_attr(nfs, dir, name, shown).await.map_err(|e| nfs_io("create", shown, e))?;
                if attr.type_ != ftype3::NF3DIR {
                    return Err(Error::not_a_directory_in_the_way(shown));
                }
                Ok(fh)
            }
            Err(e) => Err(nfs_io("create directory", shown, e)),
        }
    }

    /// The directory `HOME/slot`, or the target's own directory.
    async fn dir_of(&self, at: &At) -> Result<(Fh, fattr3, String), Error> {
        let nfs = self.nfs().await?;
        let (dir, name, shown) = match at {
            At::Target => (self.parent_fh().await?, self.name.as_bytes().to_vec(), self.url.to_string()),
            At::Slot(s) => (self.home_fh_or_missing().await?, s.as_bytes().to_vec(), self.shown(s)),
        };
        let (fh, attr) = lookup_attr(nfs, &dir, &name, &shown).await.map_err(|e| nfs_io("read", &shown, e))?;
        if attr.type_ != ftype3::NF3DIR {
            return Err(Error::NotBeneath { path: shown });
        }
        Ok((fh, attr, shown))
    }
}

impl fmt::Display for ClientHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.url)
    }
}

#[async_trait]
impl Host for ClientHost {
    fn home_name(&self) -> String {
        self.home_name.clone()
    }

    async fn can_exchange(&self) -> Result<bool, Error> {
        // NFSv3 has no call that swaps two directories.
        Ok(false)
    }

    async fn at_target(&self) -> Result<AtTarget, Error> {
        // Every command starts here: the home is looked up afresh once per command, so a
        // long-lived host (watch) never keeps the handle of a home another run removed.
        self.places().await?.home.forget_root().await;
        let parent = self.parent_fh().await?;
        let nfs = self.nfs().await?;
        let shown = self.url.to_string();
        let (fh, attr) = match lookup_attr(nfs, &parent, self.name.as_bytes(), &shown).await {
            Ok(r) => r,
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Ok(AtTarget::Missing),
            Err(e) => return Err(nfs_io("look up", &shown, e)),
        };
        Ok(match attr.type_ {
            ftype3::NF3DIR => {
                let managed = match nfs.lookup(&fh, STATE_DIR.as_bytes(), shown.as_bytes()).await {
                    Ok(_) => true,
                    Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => false,
                    Err(e) => return Err(nfs_io("look up", &shown, e)),
                };
                let empty = !managed
                    && nfs
                        .readdirplus(&fh, shown.as_bytes())
                        .await
                        .map_err(|e| nfs_io("read directory", &shown, e))?
                        .is_empty();
                AtTarget::Dir { managed, empty }
            }
            ftype3::NF3LNK => {
                let text = nfs.readlink(&fh, shown.as_bytes()).await.map_err(|e| nfs_io("read symlink", &shown, e))?;
                let prefix = format!("{}/", self.home_name);
                let slot = text
                    .strip_prefix(prefix.as_bytes())
                    .filter(|s| valid_slot(s))
                    .map(|s| String::from_utf8_lossy(s).into_owned());
                AtTarget::Link { text, slot }
            }
            ftype3::NF3REG => AtTarget::Other("file"),
            _ => AtTarget::Other("special file"),
        })
    }

    async fn home_exists(&self) -> Result<bool, Error> {
        let parent = self.parent_fh().await?;
        let nfs = self.nfs().await?;
        let shown = self.shown("");
        match lookup_attr(nfs, &parent, self.home_name.as_bytes(), &shown).await {
            Ok((_, a)) if a.type_ == ftype3::NF3DIR => Ok(true),
            Ok(_) => Err(io_error(
                "use",
                &shown,
                ErrorKind::AlreadyExists,
                "it is not a directory, but treesync keeps the target's generations there; remove it and run again",
            )),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => Ok(false),
            Err(e) => Err(nfs_io("look up", &shown, e)),
        }
    }

    async fn create_home(&self) -> Result<(), Error> {
        let parent = self.parent_fh().await?;
        let home = self.mkdir(&parent, self.home_name.as_bytes(), 0o755, true, &self.shown("")).await?;
        self.mkdir(&home, TMP, 0o755, true, &self.shown("tmp")).await?;
        Ok(())
    }

    async fn lock(&self, holder: &Holder) -> Result<LockGuard, Error> {
        self.places().await?.home.take_lock(holder).await
    }

    async fn unlock(&self, guard: LockGuard) -> Result<(), Error> {
        self.places().await?.home.release(guard).await
    }

    async fn load_record(&self) -> Result<Option<Vec<u8>>, Error> {
        let Some(home) = self.home_fh().await? else { return Ok(None) };
        let nfs = self.nfs().await?;
        let shown = self.shown("generations");
        let (fh, attr) = match lookup_attr(nfs, &home, RECORD, &shown).await {
            Ok(r) => r,
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => return Ok(None),
            Err(e) => return Err(nfs_io("read", &shown, e)),
        };
        if attr.type_ != ftype3::NF3REG {
            return Err(not_own_file(&self.url, &format!("{}/{}/generations", self.parent_path(), self.home_name)));
        }
        read_all(nfs, &fh, attr.size, shown.as_bytes()).await.map(Some).map_err(|e| nfs_io("read", &shown, e))
    }

    async fn store_record(&self, bytes: &[u8]) -> Result<(), Error> {
        self.check_lease()?;
        let home = self.home_fh_or_missing().await?;
        let nfs = self.nfs().await?;
        let shown = self.shown("generations");
        let tmp = Target::sibling_tmp(RECORD);
        let fh = create_new(nfs, &home, &tmp, 0o644, shown.as_bytes()).await.map_err(|e| nfs_io("write", &shown, e))?;
        let chunk = self.target.wtmax().await as usize;
        let result = async {
            for (i, part) in bytes.chunks(chunk).enumerate() {
                write_all(nfs, &fh, (i * chunk) as u64, part, stable_how::FILE_SYNC, shown.as_bytes()).await?;
            }
            match nfs.rename(&home, &tmp, &home, RECORD, shown.as_bytes()).await {
                Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
                Err(e) => Err(e),
            }
        }
        .await;
        if result.is_err() {
            let _ = nfs.remove(&home, &tmp, shown.as_bytes()).await;
        }
        result.map_err(|e| nfs_io("write", &shown, e))
    }

    async fn slots(&self) -> Result<Vec<String>, Error> {
        let Some(home) = self.home_fh().await? else { return Ok(Vec::new()) };
        let nfs = self.nfs().await?;
        let shown = self.shown("");
        let mut out = Vec::new();
        for e in nfs.readdirplus(&home, shown.as_bytes()).await.map_err(|e| nfs_io("read directory", &shown, e))? {
            if e.name == TMP {
                continue;
            }
            let kind = match &e.attr {
                Some(a) => a.type_,
                None => {
                    let p = self.shown(&String::from_utf8_lossy(&e.name));
                    lookup_attr(nfs, &home, &e.name, &p).await.map_err(|er| nfs_io("look up", &p, er))?.1.type_
                }
            };
            if kind == ftype3::NF3DIR {
                out.push(String::from_utf8_lossy(&e.name).into_owned());
            }
        }
        out.sort();
        Ok(out)
    }

    fn open(&self, at: &At) -> Arc<dyn Backend> {
        let backend = match at {
            At::Target => self.target.clone(),
            At::Slot(s) => self.target.derive(&format!("{}/{}/{s}", self.parent_path(), self.home_name), None),
        };
        Arc::new(with_budgets(backend, &self.options))
    }

    async fn clone_tree(&self, from: &At, to: &str) -> Result<Cloned, Error> {
        self.clone_tree_at(from, to).await
    }

    async fn switch(&self, slot: &str, how: Switch, displaced: &str) -> Result<Switched, Error> {
        if how == Switch::Exchange {
            return Err(Error::Unsupported {
                ability: "atomic exchange of two directories (NFSv3 has no such call; switch with a symlink)",
                backend: self.url.to_string(),
            });
        }
        self.check_lease()?;
        let nfs = self.nfs().await?;
        let parent = self.parent_fh().await?;
        let home = self.home_fh_or_missing().await?;
        let tmp = self.mkdir(&home, TMP, 0o755, true, &self.shown("tmp")).await?;
        let link_shown = self.shown("tmp/link");
        let about = link_shown.as_bytes();
        let text = format!("{}/{slot}", self.home_name);
        // A link left by a run that was killed.
        gone_ok(nfs.remove(&tmp, LINK, about).await).map_err(|e| nfs_io("remove", &link_shown, e))?;
        match nfs.symlink(&tmp, LINK, text.as_bytes(), about).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => {}
            Err(e) => return Err(nfs_io("create symlink", &link_shown, e)),
        }
        let target = self.url.to_string();
        let name = self.name.as_bytes();
        let previous = match self.at_target().await? {
            AtTarget::Missing => None,
            AtTarget::Link { slot, .. } => slot,
            AtTarget::Dir { .. } => {
                // No exchange on NFS: the directory goes first, then the link takes its name.
                // Between the two RENAMEs there is no target.
                match nfs.rename(&parent, name, &home, displaced.as_bytes(), target.as_bytes()).await {
                    Ok(()) | Err(NfsError::DoneBefore(_)) => {}
                    Err(e) => return Err(nfs_io("move aside", &target, e)),
                }
                Some(displaced.to_string())
            }
            AtTarget::Other(what) => {
                let _ = nfs.remove(&tmp, LINK, about).await;
                return Err(io_error("switch", &target, ErrorKind::AlreadyExists, format!("it is a {what}")));
            }
        };
        match nfs.rename(&tmp, LINK, &parent, name, target.as_bytes()).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(Switched { previous }),
            Err(e) => Err(nfs_io("switch", &target, e)),
        }
    }

    async fn unlink_target(&self, slot: &str) -> Result<(), Error> {
        self.check_lease()?;
        let nfs = self.nfs().await?;
        let parent = self.parent_fh().await?;
        let home = self.home_fh_or_missing().await?;
        let target = self.url.to_string();
        let name = self.name.as_bytes();
        match self.at_target().await? {
            AtTarget::Link { .. } => {
                gone_ok(nfs.remove(&parent, name, target.as_bytes()).await).map_err(|e| nfs_io("remove", &target, e))?
            }
            AtTarget::Missing => {}
            AtTarget::Dir { .. } => {
                return Err(io_error("restore", &target, ErrorKind::AlreadyExists, "it is a directory already"));
            }
            AtTarget::Other(what) => {
                return Err(io_error("restore", &target, ErrorKind::AlreadyExists, format!("it is a {what}")));
            }
        }
        // From here until the RENAME there is no target.
        match nfs.rename(&home, slot.as_bytes(), &parent, name, target.as_bytes()).await {
            Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
            Err(e) => Err(nfs_io("restore", &target, e)),
        }
    }

    async fn rename_slot(&self, from: &str, to: &str) -> Result<(), Error> {
        self.check_lease()?;
        let nfs = self.nfs().await?;
        let home = self.home_fh_or_missing().await?;
        let shown = self.shown(from);
        // Gone already (removed by hand): what the rename was for, removing it, is done.
        gone_ok(nfs.rename(&home, from.as_bytes(), &home, to.as_bytes(), shown.as_bytes()).await)
            .map_err(|e| nfs_io("rename", &shown, e))
    }

    async fn remove_slot(&self, slot: &str) -> Result<u64, Error> {
        self.check_lease()?;
        let Some(home) = self.home_fh().await? else { return Ok(0) };
        self.remove_tree(&home, slot.as_bytes(), &self.shown(slot)).await
    }

    async fn remove_home(&self) -> Result<(), Error> {
        let Some(home) = self.home_fh().await? else { return Ok(()) };
        let nfs = self.nfs().await?;
        let shown = self.shown("");
        for e in nfs.readdirplus(&home, shown.as_bytes()).await.map_err(|e| nfs_io("read directory", &shown, e))? {
            let p = self.shown(&String::from_utf8_lossy(&e.name));
            let kind = match &e.attr {
                Some(a) => a.type_,
                None => lookup_attr(nfs, &home, &e.name, &p).await.map_err(|er| nfs_io("look up", &p, er))?.1.type_,
            };
            if kind == ftype3::NF3DIR {
                if e.name != TMP {
                    return Err(Error::NotEmpty { path: shown });
                }
                self.remove_tree(&home, TMP, &p).await?;
            } else if e.name == LOCK {
                // Released by the caller: a lock here now is another run's, unless its holder
                // is gone.
                let (fh, attr) = match lookup_attr(nfs, &home, LOCK, &p).await {
                    Ok(r) => r,
                    Err(er) if is(&er, nfsstat3::NFS3ERR_NOENT) => continue,
                    Err(er) => return Err(nfs_io("look up", &p, er)),
                };
                let holder = lock::lock_holder(nfs, &fh, &attr, p.as_bytes()).await;
                if !self.places().await?.home.stale(holder.as_ref(), Some(&attr)) {
                    return Err(treesync_backend_local::lockfile::locked_by(holder.as_ref(), || {
                        format!("lock file {p}")
                    }));
                }
                gone_ok(nfs.remove(&home, LOCK, p.as_bytes()).await).map_err(|er| nfs_io("remove", &p, er))?;
            } else {
                gone_ok(nfs.remove(&home, &e.name, p.as_bytes()).await).map_err(|er| nfs_io("remove", &p, er))?;
            }
        }
        let parent = self.parent_fh().await?;
        let r = nfs.rmdir(&parent, self.home_name.as_bytes(), shown.as_bytes()).await;
        self.places().await?.home.forget_root().await;
        match r {
            Ok(()) | Err(NfsError::DoneBefore(_)) => Ok(()),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) => Ok(()),
            Err(e) if is(&e, nfsstat3::NFS3ERR_NOTEMPTY) || is(&e, nfsstat3::NFS3ERR_EXIST) => {
                Err(Error::NotEmpty { path: shown })
            }
            Err(e) => Err(nfs_io("remove directory", &shown, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_of_links_are_plain_names() {
        assert!(valid_slot(b"g12"));
        for bad in [&b""[..], b".", b"..", b"g1/x"] {
            assert!(!valid_slot(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_home_is_next_to_the_target() {
        let h = ClientHost::open("nfs://nas:2049/export/www/site?mountport=20048", ClientOptions::default())
            .expect("valid URL");
        assert_eq!(h.home_name(), ".site.treesync");
        assert_eq!(h.parent_path(), "/export/www");
        assert_eq!(h.shown("g1"), "nfs://nas:2049/export/www/.site.treesync/g1");
        assert_eq!(h.to_string(), "nfs://nas:2049/export/www/site");
        let slot = h.target.derive("/export/www/.site.treesync/g1", None);
        assert_eq!(slot.to_string(), "nfs://nas:2049/export/www/.site.treesync/g1");
    }
}
