//! The conformance suite on object stores: a real S3 server (moto on 127.0.0.1), `memory://`
//! and `file://`. The target is read back with GETs, modes from the `mode` metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{Attribute, ObjectStore, ObjectStoreExt, PutPayload};
use treesync_backend_s3::{Config, MODE_EXEC, MODE_LINK, ObjectStoreBackend, Options};
use treesync_core::Backend;
use treesync_testkit::conformance::Fixture;
use treesync_testkit::s3::Moto;
use treesync_testkit::tree::Node;

struct Store {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    #[allow(dead_code)]
    metadata: bool,
    make: Box<dyn Fn() -> ObjectStoreBackend + Send + Sync>,
    /// `file://`: the directory holding the prefix.
    local_root: Option<std::path::PathBuf>,
    _keep: Option<Box<dyn Send + Sync>>,
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

impl Fixture for Store {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new((self.make)())
    }
    fn read(&self) -> BTreeMap<String, Node> {
        block(async {
            let mut out = BTreeMap::new();
            let mut list = self.store.list(Some(&self.prefix));
            while let Some(meta) = list.next().await {
                let meta = meta.expect("list");
                let rel: Vec<String> = meta
                    .location
                    .prefix_match(&self.prefix)
                    .expect("under prefix")
                    .map(|p| p.as_ref().to_string())
                    .collect();
                if rel.first().map(String::as_str) == Some(".treesync") {
                    continue;
                }
                let got = self.store.get(&meta.location).await.expect("get");
                let mode: Option<u32> =
                    got.attributes.get(&Attribute::Metadata("mode".into())).and_then(|v| v.as_ref().parse().ok());
                let data = got.bytes().await.expect("body").to_vec();
                let node = match mode {
                    Some(MODE_LINK) => Node::Link(data),
                    Some(m) => Node::File(data, m == MODE_EXEC),
                    None => Node::File(data, false),
                };
                for i in 1..rel.len() {
                    out.insert(rel[..i].join("/"), Node::Dir);
                }
                out.insert(rel.join("/"), node);
            }
            out
        })
    }
    fn put_file(&self, path: &str, content: &[u8]) {
        let key = Path::parse(format!("{}/{path}", self.prefix)).expect("key");
        block(self.store.put(&key, PutPayload::from(content.to_vec()))).expect("put");
    }
    fn replace_dir_by_symlink(&self, path: &str, target: &std::path::Path) -> bool {
        let Some(root) = &self.local_root else { return false };
        let dir = root.join(self.prefix.as_ref()).join(path);
        std::fs::remove_dir_all(&dir).expect("remove directory");
        std::os::unix::fs::symlink(target, &dir).expect("symlink");
        true
    }
}

/// The prefix `site` of an in-process `store` (`url` names it): `capable`, it keeps metadata
/// and updates conditionally; `dir`, the directory behind a `file://` store.
fn site_in(store: Arc<dyn ObjectStore>, url: &'static str, capable: bool, dir: Option<tempfile::TempDir>) -> Store {
    let prefix = Path::from("site");
    let (s, p) = (store.clone(), prefix.clone());
    let root = dir.as_ref().map(|d| d.path().to_path_buf());
    let local_root = root.clone();
    Store {
        store,
        prefix,
        metadata: capable,
        make: Box::new(move || {
            let backend =
                ObjectStoreBackend::new(s.clone(), p.clone(), url.into(), capable, capable, Options::default());
            match &root {
                Some(root) => backend.with_local_root(root.clone()),
                None => backend,
            }
        }),
        local_root,
        _keep: dir.map(|d| Box::new(d) as Box<dyn Send + Sync>),
    }
}

fn memory() -> Store {
    site_in(Arc::new(object_store::memory::InMemory::new()), "memory://site", true, None)
}

fn file() -> Store {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("fs store");
    site_in(Arc::new(store), "file://site", false, Some(dir))
}

fn s3() -> Store {
    let moto = Moto::start();
    moto.create_bucket("bucket");
    let config = Config {
        endpoint: Some(moto.endpoint.clone()),
        allow_http: true,
        credentials: Some(("testing".into(), "testing".into())),
        ..Default::default()
    };
    let reader = treesync_backend_s3::open("s3://bucket/site", &config, Options::default()).expect("open");
    let store = reader.store().clone();
    Store {
        store,
        prefix: Path::from("site"),
        metadata: true,
        make: Box::new(move || {
            treesync_backend_s3::open("s3://bucket/site", &config, Options::default()).expect("open")
        }),
        local_root: None,
        _keep: Some(Box::new(moto)),
    }
}

mod in_memory {
    use super::*;
    treesync_testkit::conformance_suite!(memory());
}

mod local_files {
    use super::*;
    treesync_testkit::conformance_suite!(file());
}

mod moto_s3 {
    use super::*;
    treesync_testkit::conformance_suite!(s3());
}
