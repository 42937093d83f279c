//! # treesync-backend-s3
//!
//! Publishes a git tree to object storage — S3 and anything `object_store` speaks (`s3://`,
//! `file://`, `memory://`) — doing only what the git diff says changed.
//!
//! * A file at path `P` is the object `PREFIX/P`. Directories are implicit: no marker objects,
//!   an emptied "directory" simply has no keys left (so gitlinks, which are empty directories
//!   in a checkout, leave nothing behind).
//! * Modes and symlinks follow s3fs-fuse's convention: user metadata `mode` (the header
//!   `x-amz-meta-mode`) holds the POSIX `st_mode` in decimal — `33188` (0100644) for files,
//!   `33261` (0100755) for executables, `41471` (0120777) for symlinks, whose body is the link
//!   target. A bucket mounted with s3fs shows the right exec bits and links. Stores without
//!   user metadata (`file://`) keep content only.
//! * Writes are PUTs, many in flight (default 32); files from 8 MiB on go up as multipart
//!   uploads. A phase of removals becomes bulk `DeleteObjects` requests of up to 1,000 keys.
//!   Mode changes rewrite the object (metadata cannot change in place).
//! * State lives in `PREFIX/.treesync/state`, written with conditional PUTs (`If-None-Match`
//!   on the first sync, `If-Match` with the ETag read before): two syncs of one prefix cannot
//!   both commit. Object stores have no locks, so a journal entry of another sync younger than
//!   its lease counts as that sync still running.
//! * An incremental sync makes K PUTs (changed and added files) + ⌈D/1000⌉ bulk deletes + 3
//!   requests for the state (one GET, two PUTs) — never a LIST or HEAD of unchanged keys.

mod target;

pub use target::{Config, OpenError, file_path, open};

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
    WriteMultipart,
};
use tokio::sync::Semaphore;
use treesync_backend::backend::{Backend, Batch, Capabilities, DirEntry, Error, Found, FoundKind, Policy, TargetState};
use treesync_backend::source::{BlobSource, OwnedContent};
use treesync_backend::{Op, RelPath};

/// `st_mode` of a regular file (0100644), as s3fs-fuse stores it.
pub const MODE_FILE: u32 = 0o100644;
/// `st_mode` of an executable file (0100755).
pub const MODE_EXEC: u32 = 0o100755;
/// `st_mode` of a symlink (0120777).
pub const MODE_LINK: u32 = 0o120777;
/// The user-metadata key holding the mode (`x-amz-meta-mode` on S3).
pub const MODE_KEY: &str = "mode";

/// Options of the [`ObjectStoreBackend`].
#[derive(Debug, Clone)]
pub struct Options {
    /// PUTs in flight at once.
    pub puts_in_flight: usize,
    /// Files of this size or more are uploaded in parts.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads.
    pub part_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { puts_in_flight: 32, multipart_threshold: 8 << 20, part_size: 8 << 20 }
    }
}

/// A prefix in an object store, as a treesync target.
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    display: String,
    metadata: bool,
    conditional_update: bool,
    options: Options,
    puts: Arc<Semaphore>,
    /// For `file://`: the directory behind the store, whose emptied directories are removed.
    local_root: Option<std::path::PathBuf>,
    /// The state as read by `prepare_target`, and the version to update it from.
    state: Mutex<StateCache>,
    /// Requests made, by kind (for the cost summary of a run).
    requests: Requests,
}

/// Requests sent to the store, by kind.
#[derive(Default)]
struct Requests {
    put: AtomicU64,
    multipart: AtomicU64,
    parts: AtomicU64,
    get: AtomicU64,
    delete: AtomicU64,
    bulk_delete: AtomicU64,
    list: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

#[derive(Default)]
struct StateCache {
    read: Option<Option<Bytes>>,
    version: Option<UpdateVersion>,
}

fn store_error(op: &'static str, path: impl fmt::Display, e: object_store::Error) -> Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => std::io::ErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            std::io::ErrorKind::PermissionDenied
        }
        _ => std::io::ErrorKind::Other,
    };
    Error::io(op, path, std::io::Error::new(kind, one_line(&e)))
}

/// object_store's messages nest their sources; keep them on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    let s = s.replace('\n', " ");
    // S3 answers with an XML body: keep its code and message, drop the rest.
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let start = s.find(&open)? + open.len();
        let end = s[start..].find(&format!("</{t}>"))? + start;
        Some(s[start..end].to_string())
    };
    match (tag("Code"), tag("Message"), s.find("<?xml").or_else(|| s.find("<Error>"))) {
        (Some(code), Some(message), Some(xml)) => {
            let hint = match code.as_str() {
                "NoSuchBucket" => " (check the bucket name, --endpoint and --region)",
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" => {
                    " (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"
                }
                "AccessDenied" => " (the credentials may not write to this bucket or prefix)",
                _ => "",
            };
            format!("{}{code}: {message}{hint}", s[..xml].trim_end_matches([' ', ':']).to_string() + ": ")
        }
        // No credentials in the environment or a profile: the client then asks the EC2
        // instance metadata service, which answers nothing useful off EC2.
        _ if s.contains("169.254.169.254") => no_credentials(&s),
        _ => s,
    }
}

/// The error of a client that found no credentials and asked the EC2 instance metadata
/// service (`detail`, which names its URL): what happened first, then where credentials go.
fn no_credentials(detail: &str) -> String {
    format!(
        "no S3 credentials were found: none in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) nor in the profile {} of ~/.aws/credentials, and the EC2 instance metadata service, asked next, gave none ({detail})\n  hint: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or write them as aws_access_key_id and aws_secret_access_key under [default] in ~/.aws/credentials (AWS_PROFILE picks another profile, AWS_SHARED_CREDENTIALS_FILE another file); treesync.toml has no credentials key",
        std::env::var("AWS_PROFILE").map_or_else(|_| "[default]".to_string(), |p| format!("[{p}]")),
    )
}

impl ObjectStoreBackend {
    /// A backend for `prefix` in `store`. `display` names it in messages (e.g. `s3://bucket/site`);
    /// `metadata` says whether the store keeps user metadata (modes, symlinks);
    /// `conditional_update` whether it supports `PutMode::Update`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        display: String,
        metadata: bool,
        conditional_update: bool,
        options: Options,
    ) -> Self {
        let puts = Arc::new(Semaphore::new(options.puts_in_flight.max(1)));
        ObjectStoreBackend {
            store,
            prefix,
            display,
            metadata,
            conditional_update,
            options,
            puts,
            local_root: None,
            state: Default::default(),
            requests: Requests::default(),
        }
    }

    /// For a store on a local directory (`file://`): remove directories that plans remove,
    /// since the filesystem keeps them after their last object is gone, and refuse to write or
    /// remove anything whose path below the prefix passes through a symlink
    /// ([`Error::NotBeneath`]).
    pub fn with_local_root(mut self, root: std::path::PathBuf) -> Self {
        self.local_root = Some(root);
        self
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key of a target path: `PREFIX/PATH`, verbatim UTF-8 (as s3fs and the AWS tools
    /// name objects). Names object_store cannot carry verbatim (ASCII control characters) are
    /// percent-encoded, the same way on every run.
    pub fn key(&self, path: &RelPath) -> Path {
        let rel = String::from_utf8_lossy(path.as_bytes());
        let raw = if self.prefix.as_ref().is_empty() { rel.to_string() } else { format!("{}/{rel}", self.prefix) };
        if let Ok(key) = Path::parse(&raw) {
            return key;
        }
        let mut key = self.prefix.clone();
        for c in path.components() {
            key = key.clone().join(String::from_utf8_lossy(c).as_ref());
        }
        key
    }

    /// `file://` stores: object_store's local store resolves keys as paths and follows every
    /// symlink on the way, so a directory below the target replaced by a symlink would send
    /// writes and removals outside the target. Before each one, every directory between the
    /// target and the key is `lstat`ed: a symlink or anything but a directory there refuses the
    /// op; a missing one ends the check (the store creates it). A symlink at the key itself is
    /// harmless: a write renames over it, a removal unlinks the link.
    ///
    /// Residual race: a local user who swaps a checked directory for a symlink between this
    /// check and the store's own syscalls still wins; the local backend (`openat2` beneath the
    /// target) has no such window.
    fn check_beneath(&self, key: &Path, shown: &dyn fmt::Display) -> Result<(), Error> {
        let Some(root) = &self.local_root else { return Ok(()) };
        let parts: Vec<_> = key.parts().collect();
        let below = parts.get(self.prefix.parts().count()..parts.len().saturating_sub(1)).unwrap_or_default();
        let mut dir = root.join(self.prefix.as_ref());
        for part in below {
            dir.push(part.as_ref());
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(Error::NotBeneath { path: shown.to_string() }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(Error::io("look up", dir.display(), e)),
            }
        }
        Ok(())
    }

    fn state_key(&self) -> Path {
        self.prefix.clone().join(treesync_backend::path::STATE_DIR).join("state")
    }

    fn attributes(&self, mode: u32) -> Attributes {
        let mut a = Attributes::new();
        if self.metadata {
            a.insert(Attribute::Metadata(MODE_KEY.into()), AttributeValue::from(mode.to_string()));
        }
        a
    }

    async fn put(&self, path: &RelPath, data: Bytes, mode: u32) -> Result<(), Error> {
        let _permit = self.puts.acquire().await.expect("never closed");
        let opts = PutOptions { attributes: self.attributes(mode), ..Default::default() };
        let key = self.key(path);
        self.check_beneath(&key, path)?;
        bump(&self.requests.put, 1);
        self.store.put_opts(&key, PutPayload::from(data), opts).await.map_err(|e| store_error("upload", path, e))?;
        Ok(())
    }

    async fn write_blob(
        &self,
        path: &RelPath,
        content: OwnedContent,
        mode: u32,
        blobs: &Arc<dyn BlobSource>,
    ) -> Result<(), Error> {
        if content.size < self.options.multipart_threshold {
            let data = read_blob(path, content, blobs).await?;
            return self.put(path, data, mode).await;
        }
        // Large files: parts are read from the repository as they go up (a few in flight),
        // never the whole file in memory.
        let part = self.options.part_size.max(1);
        let _permit = self.puts.acquire().await.expect("never closed");
        let opts = object_store::PutMultipartOptions { attributes: self.attributes(mode), ..Default::default() };
        let key = self.key(path);
        self.check_beneath(&key, path)?;
        let upload =
            self.store.put_multipart_opts(&key, opts).await.map_err(|e| store_error("start upload of", path, e))?;
        bump(&self.requests.multipart, 1);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(2);
        let source = blobs.clone();
        let p = path.clone();
        let reader = tokio::task::spawn_blocking(move || {
            let mut buf = Vec::with_capacity(part);
            source
                .read_content(&content.as_content(), &mut |mut chunk| {
                    while !chunk.is_empty() {
                        let take = (part - buf.len()).min(chunk.len());
                        buf.extend_from_slice(&chunk[..take]);
                        chunk = &chunk[take..];
                        if buf.len() == part {
                            let full = std::mem::replace(&mut buf, Vec::with_capacity(part));
                            tx.blocking_send(Bytes::from(full))
                                .map_err(|_| std::io::Error::other("the upload stopped"))?;
                        }
                    }
                    Ok(())
                })
                .map_err(|e| Error::from_blob("read", &p, e))?;
            if !buf.is_empty() {
                let _ = tx.blocking_send(Bytes::from(buf));
            }
            Ok::<(), Error>(())
        });
        let mut w = WriteMultipart::new_with_chunk_size(upload, part);
        let mut parts = 0u64;
        let mut failed = None;
        while let Some(chunk) = rx.recv().await {
            if let Err(e) = w.wait_for_capacity(4).await {
                failed = Some(store_error("upload", path, e));
                break;
            }
            w.put(chunk);
            parts += 1;
        }
        drop(rx);
        let read = reader.await.unwrap_or_else(|source| Err(Error::Worker { source }));
        bump(&self.requests.parts, parts);
        if let Some(e) = failed {
            let _ = w.abort().await;
            return Err(e);
        }
        if let Err(e) = read {
            let _ = w.abort().await;
            return Err(e);
        }
        w.finish().await.map_err(|e| store_error("upload", path, e))?;
        Ok(())
    }

    async fn run(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        match op {
            // Directories are implicit.
            Op::Mkdir { .. } => Ok(()),
            Op::Rmdir { path } => {
                if let Some(root) = &self.local_root {
                    let key = self.key(path);
                    self.check_beneath(&key, path)?;
                    let dir = root.join(key.as_ref());
                    match std::fs::remove_dir(&dir) {
                        Err(e)
                            if e.kind() != std::io::ErrorKind::NotFound
                                && e.kind() != std::io::ErrorKind::DirectoryNotEmpty =>
                        {
                            return Err(Error::io("remove directory", path, e));
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            Op::Write { path, executable, .. } | Op::Chmod { path, executable, .. } => {
                let content = op.owned_content().expect("writes and mode changes have content");
                self.write_blob(path, content, if *executable { MODE_EXEC } else { MODE_FILE }, blobs).await
            }
            Op::Symlink { path, target } => self.put(path, Bytes::from(target.clone()), MODE_LINK).await,
            Op::Unlink { path } => {
                bump(&self.requests.delete, 1);
                self.delete_one(path).await
            }
        }
    }

    async fn delete_one(&self, path: &RelPath) -> Result<(), Error> {
        let key = self.key(path);
        self.check_beneath(&key, path)?;
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("delete", path, e)),
        }
    }

    async fn delete_many(&self, paths: Vec<&RelPath>) -> Result<(), Error> {
        let mut keys: Vec<object_store::Result<Path>> = Vec::with_capacity(paths.len());
        for p in &paths {
            let key = self.key(p);
            self.check_beneath(&key, p)?;
            keys.push(Ok(key));
        }
        // S3 takes up to 1,000 keys per DeleteObjects request.
        bump(&self.requests.bulk_delete, keys.len().div_ceil(1000) as u64);
        let mut results = self.store.delete_stream(futures::stream::iter(keys).boxed());
        while let Some(r) = results.next().await {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error("delete", paths.first().map(|p| p.display()).unwrap_or_default(), e)),
            }
        }
        Ok(())
    }
}

async fn read_blob(path: &RelPath, content: OwnedContent, blobs: &Arc<dyn BlobSource>) -> Result<Bytes, Error> {
    let blobs = blobs.clone();
    let p = path.clone();
    tokio::task::spawn_blocking(move || {
        let mut data = Vec::new();
        blobs
            .read_content(&content.as_content(), &mut |chunk| {
                data.extend_from_slice(chunk);
                Ok(())
            })
            .map_err(|e| Error::from_blob("read", &p, e))?;
        Ok(Bytes::from(data))
    })
    .await
    .unwrap_or_else(|source| Err(Error::Worker { source }))
}

impl fmt::Display for ObjectStoreBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

#[async_trait]
impl Backend for ObjectStoreBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            symlinks: self.metadata,
            exec_bit: self.metadata,
            empty_dirs: false,
            case_sensitive: true,
            exclusive_lock: false,
            aux_store: false,
        }
    }

    fn cost(&self) -> Vec<(&'static str, u64)> {
        let r = &self.requests;
        let get = |c: &AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        [
            ("PUT", get(&r.put)),
            ("multipart uploads", get(&r.multipart)),
            ("multipart parts", get(&r.parts)),
            ("GET", get(&r.get)),
            ("DELETE", get(&r.delete)),
            ("bulk DELETE", get(&r.bulk_delete)),
            ("LIST", get(&r.list)),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    fn policy(&self) -> Policy {
        // One batch is up to 1,000 ops: removals become one bulk delete per batch; writes
        // inside a batch run concurrently, bounded by `puts_in_flight` across all batches.
        Policy { jobs: 4, batch: 1000, min_batch: 1000, lookups: 4, scans: 4, spread: false }
    }

    async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        self.run(op, blobs).await
    }

    async fn execute_batch(&self, batch: Batch, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
        let unlinks: Vec<&RelPath> =
            batch.iter().filter(|&op| matches!(op, Op::Unlink { .. })).map(|op| op.path()).collect();
        if !unlinks.is_empty() {
            self.delete_many(unlinks).await?;
        }
        let others: Vec<Op> = batch.iter().filter(|op| !matches!(op, Op::Unlink { .. })).cloned().collect();
        let mut runs = futures::stream::iter(others.into_iter().map(|op| async move { self.run(&op, blobs).await }))
            .buffer_unordered(self.options.puts_in_flight.max(1));
        while let Some(r) = runs.next().await {
            r?;
        }
        Ok(())
    }

    async fn prepare_target(&self, _create: bool) -> Result<TargetState, Error> {
        let state = self.fetch_state().await?;
        if state.is_some() {
            return Ok(TargetState::Managed);
        }
        // Only when there is no state: is anything else under the prefix? (one LIST)
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let mut list = self.store.list(prefix);
        bump(&self.requests.list, 1);
        Ok(match list.next().await {
            None => TargetState::Empty,
            Some(Ok(_)) => TargetState::Unmanaged,
            Some(Err(e)) => return Err(store_error("list", &self.display, e)),
        })
    }

    async fn read_dir(&self, dir: &RelPath) -> Result<Vec<DirEntry>, Error> {
        let key = self.key(dir);
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        bump(&self.requests.list, 1);
        let list = self.store.list_with_delimiter(prefix).await.map_err(|e| store_error("list", dir, e))?;
        let name = |p: &Path| p.filename().unwrap_or_default().as_bytes().to_vec();
        let mut out: Vec<DirEntry> = list
            .common_prefixes
            .iter()
            .map(|p| DirEntry { name: name(p), is_dir: true })
            .chain(list.objects.iter().map(|o| DirEntry { name: name(&o.location), is_dir: false }))
            .filter(|e| !(dir.is_root() && e.name == treesync_backend::path::STATE_DIR.as_bytes()))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn load_state(&self) -> Result<Option<Vec<u8>>, Error> {
        let cached = self.state.lock().expect("never poisoned").read.clone();
        let bytes = match cached {
            Some(b) => b,
            None => self.fetch_state().await?,
        };
        Ok(bytes.map(|b| b.to_vec()))
    }

    async fn store_state(&self, bytes: &[u8]) -> Result<(), Error> {
        let version = self.state.lock().expect("never poisoned").version.clone();
        let mode = match version {
            Some(v) if self.conditional_update => PutMode::Update(v),
            Some(_) => PutMode::Overwrite,
            None => PutMode::Create,
        };
        let opts = PutOptions { mode, ..Default::default() };
        let key = self.state_key();
        self.check_beneath(&key, &key)?;
        bump(&self.requests.put, 1);
        let r = match self.store.put_opts(&key, PutPayload::from(bytes.to_vec()), opts).await {
            Ok(r) => r,
            Err(e @ (object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. })) => {
                // The client retries a request whose answer did not arrive (a dropped
                // connection, a timeout); when the first attempt had landed, the retry's
                // precondition fails against our own write. Only a state that holds other
                // bytes is another writer's: read it back to tell (the read also refreshes
                // the cached version).
                if self.fetch_state().await?.is_some_and(|now| now.as_ref() == bytes) {
                    return Ok(());
                }
                return Err(Error::Conflict { detail: one_line(&e) });
            }
            Err(e) => return Err(store_error("write state", &key, e)),
        };
        let mut cache = self.state.lock().expect("never poisoned");
        cache.version = Some(UpdateVersion { e_tag: r.e_tag, version: r.version });
        cache.read = Some(Some(Bytes::copy_from_slice(bytes)));
        Ok(())
    }

    async fn scan(&self, _jobs: usize) -> Result<Vec<Found>, Error> {
        // One LIST request per 1,000 keys; the listing tells size and ETag, not the mode.
        let mut out = Vec::new();
        for (rel, meta) in self.list_tree().await? {
            out.push(Found {
                path: rel.into_bytes(),
                kind: FoundKind::File {
                    size: meta.size,
                    executable: None,
                    stat: None,
                    etag: meta.e_tag.map(|e| e.trim_matches('"').to_string()),
                    typed: false,
                },
            });
        }
        Ok(out)
    }

    async fn read_file(&self, path: &RelPath) -> Result<Vec<u8>, Error> {
        let key = self.key(path);
        bump(&self.requests.get, 1);
        let got = self.store.get(&key).await.map_err(|e| store_error("read", path, e))?;
        Ok(got.bytes().await.map_err(|e| store_error("read", path, e))?.to_vec())
    }

    // No `lock`: object stores have none (`exclusive_lock: false`); conditional state writes
    // and the journal's lease do the job (see the crate docs). Nor `load_aux`/`store_aux`:
    // verify proves files by their ETags instead of a stat index (`aux_store: false`).
}

/// One object read back by [`ObjectStoreBackend::read_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    /// Path below the prefix.
    pub path: String,
    /// The `mode` metadata, if any.
    pub mode: Option<u32>,
    /// The body.
    pub data: Vec<u8>,
}

impl ObjectStoreBackend {
    /// Every object under the prefix (the state folder left out), with its path below the
    /// prefix: one LIST request per 1,000 keys.
    async fn list_tree(&self) -> Result<Vec<(String, object_store::ObjectMeta)>, Error> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let metas: Vec<_> = self.store.list(prefix).collect().await;
        // One LIST request per page of 1,000 keys.
        bump(&self.requests.list, (metas.len() as u64).div_ceil(1000).max(1));
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let meta = meta.map_err(|e| store_error("list", &self.display, e))?;
            let rel: Vec<String> = match prefix {
                Some(p) => meta
                    .location
                    .prefix_match(p)
                    .map(|it| it.map(|x| x.as_ref().to_string()).collect())
                    .unwrap_or_default(),
                None => meta.location.parts().map(|x| x.as_ref().to_string()).collect(),
            };
            if rel.first().map(String::as_str) != Some(treesync_backend::path::STATE_DIR) {
                out.push((rel.join("/"), meta));
            }
        }
        Ok(out)
    }

    /// Read the whole prefix back, state folder excluded (one LIST per 1,000 keys and one GET
    /// per object): for tests and checks, never used by a sync.
    pub async fn read_all(&self) -> Result<Vec<StoredObject>, Error> {
        let mut out = Vec::new();
        for (rel, meta) in self.list_tree().await? {
            bump(&self.requests.get, 1);
            let got = self.store.get(&meta.location).await.map_err(|e| store_error("read", &meta.location, e))?;
            let mode = got.attributes.get(&Attribute::Metadata(MODE_KEY.into())).and_then(|v| v.as_ref().parse().ok());
            let data = got.bytes().await.map_err(|e| store_error("read", &meta.location, e))?.to_vec();
            out.push(StoredObject { path: rel, mode, data });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn fetch_state(&self) -> Result<Option<Bytes>, Error> {
        let key = self.state_key();
        bump(&self.requests.get, 1);
        let (bytes, version) = match self.store.get(&key).await {
            Ok(r) => {
                let version = UpdateVersion { e_tag: r.meta.e_tag.clone(), version: r.meta.version.clone() };
                let bytes = r.bytes().await.map_err(|e| store_error("read state", &key, e))?;
                (Some(bytes), Some(version))
            }
            Err(object_store::Error::NotFound { .. }) => (None, None),
            Err(e) => return Err(store_error("read state", &key, e)),
        };
        let mut cache = self.state.lock().expect("never poisoned");
        cache.read = Some(bytes.clone());
        cache.version = version;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_credentials_says_where_they_go_before_the_metadata_url() {
        let source = std::io::Error::other(
            "Error performing PUT http://169.254.169.254/latest/api/token in 1.9ms - Server returned non-2xx status code: 403 Forbidden",
        );
        let e = object_store::Error::Generic { store: "S3", source: Box::new(source) };
        let text = super::one_line(&e);
        let (message, hint) = text.split_once("\n  hint: ").expect("a hint on its own line");
        assert!(message.starts_with("no S3 credentials were found: "), "{text}");
        assert!(message.contains("169.254.169.254"), "the detail stays: {text}");
        for needle in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "~/.aws/credentials", "AWS_PROFILE"] {
            assert!(hint.contains(needle), "{needle}: {text}");
        }
        assert!(!hint.contains('\n'), "{text}");
    }
}
