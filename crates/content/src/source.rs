//! [`Repo`]: the git repository a tree is synced from — revision lookup and blob reading.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gix_hash::ObjectId;
use gix_object::{FindExt, FindObjectOrHeader};

pub use treesync_backend::source::{
    BlobError, BlobSource, Cause, Content, Error, NotConverting, OUT_OF_DESCRIPTORS_HINT, OwnedContent, Sink,
};

/// The converting source, under the name it has always had here; it lives with the conversions.
pub use crate::convert::Converting;

/// `EMFILE` or `ENFILE` (the process's or the system's descriptors are all in use): what `e`
/// or one of its causes says, or else what opening `probe` says now (gitoxide does not always
/// keep the I/O error as a cause: a ref file it could not open reads as a missing ref).
fn out_of_descriptors(e: &(dyn std::error::Error + 'static), probe: &Path) -> Option<std::io::Error> {
    let exhausted = |io: &std::io::Error| {
        io.raw_os_error().filter(|c| [libc::EMFILE, libc::ENFILE].contains(c)).map(std::io::Error::from_raw_os_error)
    };
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(found) = c.downcast_ref::<std::io::Error>().and_then(exhausted) {
            return Some(found);
        }
        cause = c.source();
    }
    std::fs::File::open(probe).err().as_ref().and_then(exhausted)
}

/// What a revision resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The commit.
    pub commit: ObjectId,
    /// Its tree, or with `REV:PATH` the tree of that directory.
    pub tree: ObjectId,
}

/// An opened repository. Cheap to clone; usable from many threads.
#[derive(Clone)]
pub struct Repo {
    shared: gix::ThreadSafeRepository,
    pool: Arc<Mutex<Vec<gix::Repository>>>,
    path: PathBuf,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo").field("path", &self.path).finish()
    }
}

impl Repo {
    /// Open a bare repository, a `.git` directory, or a working tree holding a `.git`.
    pub fn open(path: impl AsRef<Path>) -> Result<Repo, Error> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(Error::Open { path, source: Cause::found("no such file or directory") });
        }
        let repo = gix::open(&path).map_err(|e| match out_of_descriptors(&e, &path) {
            Some(source) => Error::Descriptors { doing: "opening", repo: path.clone(), source },
            None => Error::Open { path: path.clone(), source: Cause::gix(e) },
        })?;
        Ok(Repo { shared: repo.into_sync(), pool: Default::default(), path })
    }

    /// The path this repository was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// gitoxide's repository, for this thread.
    pub fn thread_local(&self) -> gix::Repository {
        self.shared.to_thread_local()
    }

    /// The repository's git directory (the repository itself when bare).
    pub fn git_dir(&self) -> PathBuf {
        self.shared.git_dir().to_path_buf()
    }

    /// A gitoxide handle on this repository for the calling thread (for reading what the object
    /// database alone does not hold: refs, configuration).
    pub fn gix(&self) -> gix::Repository {
        self.shared.to_thread_local()
    }

    /// The working tree of a non-bare repository.
    pub fn work_dir(&self) -> Option<PathBuf> {
        self.shared.work_dir().map(Path::to_path_buf)
    }

    /// The directory shared by all worktrees of the repository (objects, config, `lfs/`): the
    /// git directory itself unless this is a linked worktree.
    pub fn common_dir(&self) -> PathBuf {
        self.shared.to_thread_local().common_dir().to_path_buf()
    }

    /// A path-valued configuration key (`lfs.storage`) as git reads it (system, global and the
    /// repository's own config, the last value winning), taken verbatim; `None` when unset.
    pub fn config_path(&self, key: &str) -> Option<PathBuf> {
        self.with_repo(|repo| {
            let value = repo.config_snapshot().string(key)?;
            // Only non-Unicode bytes on Windows fail to be a path; git-lfs could not use them either.
            Some(gix::path::from_bstr(value).ok()?.into_owned())
        })
    }

    /// Resolve `rev` (branch, tag, full or short id, `main~3`, …) to a commit and its tree.
    ///
    /// `REV:PATH` (as `git rev-parse` spells a tree of a commit, e.g. `main:docs`) resolves to
    /// REV's commit and the tree at PATH: syncing it makes that directory the target's root.
    /// PATH must be a directory of the tree ([`Error::Subtree`] otherwise); an empty PATH
    /// (`main:`) is the whole tree.
    pub fn resolve(&self, rev: &str) -> Result<Resolved, Error> {
        match split_subtree(rev) {
            Some((base, path)) => self.resolve_subtree(base, path),
            None => self.resolve_commit(rev),
        }
    }

    /// REV's commit and the tree at `path` in it.
    fn resolve_subtree(&self, rev: &str, path: &str) -> Result<Resolved, Error> {
        let commit = self.resolve_commit(rev)?;
        let path = path.trim_matches('/');
        if path.is_empty() {
            return Ok(commit);
        }
        let subtree_err =
            |found: String| Error::Subtree { rev: rev.into(), path: path.into(), repo: self.path.clone(), found };
        self.with_repo(|repo| self.subtree_in(repo, commit, path, subtree_err))
    }

    fn subtree_in(
        &self,
        repo: &gix::Repository,
        commit: Resolved,
        path: &str,
        subtree_err: impl Fn(String) -> Error,
    ) -> Result<Resolved, Error> {
        let tree = repo
            .find_object(commit.tree)
            .map_err(|e| Error::Object { what: "tree", id: commit.tree, at: String::new(), source: Cause::gix(e) })?
            .into_tree();
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        if components.contains(&"..") {
            return Err(subtree_err("'..' cannot name a directory inside the tree".into()));
        }
        let entry = tree.lookup_entry(components.iter().map(|c| c.as_bytes())).map_err(|e| Error::Object {
            what: "tree",
            id: commit.tree,
            at: format!(" (looking up {path})"),
            source: Cause::gix(e),
        })?;
        let short = commit.commit.to_hex_with_len(12).to_string();
        let Some(entry) = entry else {
            return Err(subtree_err(format!("commit {short} has no {path}")));
        };
        let mode = entry.mode();
        if mode.is_tree() {
            return Ok(Resolved { commit: commit.commit, tree: entry.object_id() });
        }
        let what = if mode.is_link() {
            "a symlink"
        } else if mode.is_commit() {
            "a submodule (a gitlink)"
        } else {
            "a file"
        };
        Err(subtree_err(format!(
            "in commit {short}, {path} is {what} (object {}), not a directory",
            entry.object_id().to_hex_with_len(12)
        )))
    }

    /// Resolve a revision that names a commit.
    fn resolve_commit(&self, rev: &str) -> Result<Resolved, Error> {
        self.with_repo(|repo| self.resolve_commit_in(repo, rev))
    }

    fn resolve_commit_in(&self, repo: &gix::Repository, rev: &str) -> Result<Resolved, Error> {
        let err = |source: Cause| Error::Revision { rev: rev.into(), repo: self.path.clone(), source };
        let id = repo.rev_parse_single(rev).map_err(|e| {
            // Say what is really wrong where the parser only says it could not parse
            // (a long-running `watch` sees repositories and refs go away).
            if !repo.git_dir().exists() {
                return Error::Open {
                    path: self.path.clone(),
                    source: Cause::found("it is gone (no such directory; it was there when treesync opened it)"),
                };
            }
            // Out of descriptors, every ref looks missing: say so instead of blaming the revision.
            if let Some(source) = out_of_descriptors(&e, repo.git_dir()) {
                return Error::Descriptors { doing: "reading the refs of", repo: self.path.clone(), source };
            }
            let is_ref_name = !rev.is_empty() && !rev.contains(['~', '^', '@', ':']) && !rev.chars().all(|c| c.is_ascii_hexdigit());
            if is_ref_name && repo.try_find_reference(rev).ok().flatten().is_none() {
                return err(Cause::found(format!(
                    "no branch, tag or other ref of that name (deleted or renamed?); `git -C {} for-each-ref` lists them",
                    self.path.display()
                )));
            }
            err(Cause::found(plainly(&e)))
        })?;
        let objects = |e: &(dyn std::error::Error + 'static)| {
            let source = out_of_descriptors(e, repo.git_dir())?;
            Some(Error::Descriptors { doing: "reading objects of", repo: self.path.clone(), source })
        };
        let commit = id
            .object()
            .map_err(|e| objects(&e).unwrap_or_else(|| err(Cause::gix(e))))?
            .peel_to_commit()
            .map_err(|e| objects(&e).unwrap_or_else(|| err(Cause::gix_in("it does not point to a commit", e))))?;
        let tree = commit.tree_id().map_err(|e| err(Cause::gix(e)))?.detach();
        Ok(Resolved { commit: commit.id, tree })
    }

    /// Run `f` with an object finder for this thread (taken from a pool, returned afterwards).
    pub fn with_objects<T>(&self, f: impl FnOnce(&dyn FindObjectOrHeader) -> T) -> T {
        self.with_repo(|repo| f(&repo.objects))
    }

    /// Run `f` with a gitoxide handle taken from the pool (made when none is free) and given
    /// back afterwards, with its object caches: making a handle costs more than a sync's lookup
    /// of a ref (its configuration is copied, its caches are new).
    fn with_repo<T>(&self, f: impl FnOnce(&gix::Repository) -> T) -> T {
        let repo = self
            .pool
            .lock()
            .expect("pool lock is never poisoned: no code panics while holding it")
            .pop()
            .unwrap_or_else(|| self.shared.to_thread_local());
        let out = f(&repo);
        self.pool.lock().expect("pool lock is never poisoned").push(repo);
        out
    }
}

/// What is wrong with a revision, for people: the innermost cause of the parser's error (the
/// outer ones name its internals: `delegate.traverse(NthAncestor(999)) failed, input="~999"`).
fn plainly(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        last = s.to_string();
        cur = s.source();
    }
    if let Some(prefix) = last.strip_prefix("An object prefixed ").and_then(|r| r.strip_suffix(" could not be found")) {
        return format!("no object whose id starts with {prefix} is in the repository (not fetched yet, or gone)");
    }
    if last.contains("input=") || last.contains("delegate.") {
        return "git's revision syntax does not read it that way".into();
    }
    if let Some((id, kind)) = last
        .strip_prefix("Last encountered object ")
        .and_then(|r| r.split_once(" was "))
        .and_then(|(id, r)| Some((id, r.split_once(" while trying to peel to ")?.0)))
    {
        return format!("it leads to a {kind} ({id}), not a commit");
    }
    last.replace("Commit ", "commit ")
}

/// Split `REV:PATH` into REV and PATH: at the first `:` outside `{…}` (`main^{/fix: typo}`
/// is one revision), when REV is not empty (`:/text` and `:0:path` are gitoxide's).
pub fn split_subtree(rev: &str) -> Option<(&str, &str)> {
    let mut depth = 0usize;
    for (i, c) in rev.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ':' if depth == 0 => return (i > 0).then(|| (&rev[..i], &rev[i + 1..])),
            _ => {}
        }
    }
    None
}

/// The directory a revision names (`main:docs/` → `docs`), as the state records it; `None` for
/// a revision of a whole tree (`main`, `main:`).
pub fn subtree_path(rev: &str) -> Option<String> {
    let (_, path) = split_subtree(rev)?;
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    (!components.is_empty()).then(|| components.join("/"))
}

/// Blobs from this size on are streamed from the object database in chunks instead of being
/// read whole into memory: gitoxide's object database hands out whole objects, so large loose
/// objects and undeltified pack entries (what git makes of files above `core.bigFileThreshold`,
/// 512 MiB by default) are located with `gix-pack` and inflated piecewise with `gix-zlib`.
/// A large blob stored as a delta is read whole (git itself does the same).
pub const STREAM_FROM: u64 = 64 << 20;

impl Repo {
    fn objects_dir(&self) -> PathBuf {
        self.shared.to_thread_local().common_dir().join("objects")
    }

    /// Stream a large blob in chunks of 1 MiB. `None` when it cannot be streamed (a delta, an
    /// alternate object store): the caller reads it whole.
    fn stream_blob(&self, id: &ObjectId, size: u64, sink: Sink<'_>) -> Option<Result<(), BlobError>> {
        use std::io::{BufReader, Seek, SeekFrom};
        let objects = self.objects_dir();
        let hex = id.to_hex().to_string();
        if let Ok(f) = std::fs::File::open(objects.join(&hex[..2]).join(&hex[2..])) {
            return Some(inflate_to(BufReader::with_capacity(1 << 20, f), id, size, true, sink));
        }
        let packs = std::fs::read_dir(objects.join("pack")).ok()?;
        for entry in packs.flatten() {
            let idx = entry.path();
            if idx.extension().is_none_or(|e| e != "idx") {
                continue;
            }
            let Ok(index) = gix_pack::index::File::at(&idx, id.kind()) else { continue };
            let Some(i) = index.lookup(id) else { continue };
            let offset = index.pack_offset_at_index(i);
            let pack_path = idx.with_extension("pack");
            let pack = gix_pack::data::File::at(&pack_path, id.kind()).ok()?;
            let e = pack.entry(offset).ok()?;
            if !matches!(e.header, gix_pack::data::entry::Header::Blob) || e.decompressed_size != size {
                return None;
            }
            // Read the pack through a file, not the mapping: touched pages of a mapping count
            // towards the resident set.
            let mut f = std::fs::File::open(&pack_path).ok()?;
            f.seek(SeekFrom::Start(e.data_offset)).ok()?;
            return Some(inflate_to(BufReader::with_capacity(1 << 20, f), id, size, false, sink));
        }
        None
    }
}

/// Inflate a zlib stream from `rd` into `sink` in chunks; a loose object starts with its header
/// (`blob SIZE\0`), which is skipped.
fn inflate_to(
    mut rd: impl std::io::BufRead,
    id: &ObjectId,
    size: u64,
    loose: bool,
    sink: Sink<'_>,
) -> Result<(), BlobError> {
    let failed = |source: Cause| BlobError::Source(Error::Object { what: "blob", id: *id, at: String::new(), source });
    let mut state = gix_zlib::Decompress::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut header = loose;
    let mut written = 0u64;
    while written < size || header {
        let n = gix_zlib::stream::inflate::read(&mut rd, &mut state, &mut buf)
            .map_err(|e| failed(Cause::gix_in("cannot inflate it", e)))?;
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        if header {
            // The header is a few bytes: the first read has it whole.
            let Some(nul) = chunk.iter().position(|b| *b == 0) else {
                return Err(failed(Cause::found("its loose object header is garbled")));
            };
            chunk = &chunk[nul + 1..];
            header = false;
        }
        let take = chunk.len().min(usize::try_from(size - written).unwrap_or(usize::MAX));
        written += take as u64;
        sink(&chunk[..take]).map_err(BlobError::Sink)?;
    }
    if written != size {
        return Err(failed(Cause::found(format!("it ends after {written} of {size} bytes (truncated?)"))));
    }
    Ok(())
}

impl BlobSource for Repo {
    fn read_blob(&self, id: &ObjectId, size: u64, sink: Sink<'_>) -> Result<(), BlobError> {
        if size >= STREAM_FROM
            && let Some(done) = self.stream_blob(id, size, sink)
        {
            return done;
        }
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            let data = self.with_objects(|odb| {
                odb.find_blob(id, &mut buf).map(|b| b.data.len()).map_err(|e| Error::Object {
                    what: "blob",
                    id: *id,
                    at: String::new(),
                    source: Cause::gix(e),
                })
            })?;
            // Large buffers are not kept around between files.
            let out = sink(&buf[..data]).map_err(BlobError::Sink);
            if buf.capacity() > 8 << 20 {
                *buf = Vec::new();
            }
            out
        })
    }
}

/// Give back the pages of the mapped pack and index files (`objects/pack/*.{pack,idx}`) that
/// this process has read so far, and return how many bytes of mappings were released.
///
/// The object database maps its packs; every page read stays in the process's resident set
/// until the mapping goes, so a walk that reads every blob of an 80 MiB pack once (an initial
/// checkout of a million files) would end holding all of it. The pages are only dropped from
/// this process (`MADV_DONTNEED` on a read-only file mapping): they stay in the page cache,
/// and a later read maps them again. A no-op where `/proc/self/maps` cannot be read.
///
/// Call it only from a thread that holds an object database handle of the repository (see the
/// SAFETY note inside).
pub fn release_mapped_packs() -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return 0 };
    let mut released = 0;
    for line in maps.lines() {
        // `start-end perms offset dev inode path`
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        let Some(path) = fields.nth(3) else { continue };
        let is_pack = path.contains("/objects/pack/") && (path.ends_with(".pack") || path.ends_with(".idx"));
        // Read-only and private: nothing written to them could be lost.
        if !is_pack || !perms.starts_with("r-") || !perms.ends_with('p') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16)) else { continue };
        if end <= start {
            continue;
        }
        // SAFETY: the range is a whole read-only private file mapping of this process, as the
        // kernel lists it; MADV_DONTNEED on such a mapping only drops its resident pages (a
        // later access faults them in again from the file, which stays in the page cache), so
        // no reader sees other bytes. What must not happen is the mapping being unmapped, and
        // something else mapped at its address, between the read of /proc/self/maps and this
        // call: DONTNEED would zero anonymous memory. So this runs only on the thread walking
        // the object database, while it holds its handle: the store and its pack mappings live
        // at least as long, and gitoxide unmaps a pack otherwise only when a refresh after a
        // missing object finds it deleted (it is not called from the threads that apply ops).
        // (MADV_PAGEOUT, which never loses bytes, was tried: it also evicts the pages from the
        // page cache, and the 1,000,000-file checkout from a repository on disk took 119 s
        // instead of 22 s, reading the index from the disk again and again.)
        #[allow(unsafe_code)]
        let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if r == 0 {
            released += end - start;
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::split_subtree;

    #[test]
    fn a_subtree_revision_splits_at_its_first_colon_outside_braces() {
        assert_eq!(split_subtree("main:docs"), Some(("main", "docs")));
        assert_eq!(split_subtree("v1.0~2:docs/guide/"), Some(("v1.0~2", "docs/guide/")));
        assert_eq!(split_subtree("main:"), Some(("main", "")));
        assert_eq!(split_subtree("main:a:b"), Some(("main", "a:b")), "a colon in the path is the path's");
        assert_eq!(split_subtree("main^{/fix: typo}"), None, "a colon inside braces is the revision's");
        assert_eq!(split_subtree("main^{/fix: typo}:docs"), Some(("main^{/fix: typo}", "docs")));
        assert_eq!(split_subtree(":/message"), None, "gitoxide's own forms stay whole");
        assert_eq!(split_subtree("main"), None);
    }
}
