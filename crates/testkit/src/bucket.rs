//! What a bucket on a [`Moto`] server holds, read back with GETs through treesync's own S3
//! backend: the tests compare it with `git archive`.

use std::collections::BTreeMap;

use treesync_backend_s3::{Config, Options};
use treesync_core::Backend;
use treesync_core::backend::Capabilities;

use crate::conformance::reduce;
use crate::s3::Moto;
use crate::tree::{self, Node};

impl Moto {
    /// What the bucket holds under `url` (`s3://BUCKET/PREFIX`), read back with GETs, as a
    /// tree; and the S3 backend's capabilities (what a tree must be reduced to before it is
    /// compared, [`crate::conformance::reduce`]).
    pub fn read_back(&self, url: &str) -> (BTreeMap<String, Node>, Capabilities) {
        let config = Config {
            endpoint: Some(self.endpoint.clone()),
            allow_http: true,
            credentials: Some(("testing".into(), "testing".into())),
            ..Default::default()
        };
        let backend = treesync_backend_s3::open(url, &config, Options::default()).expect("open");
        let objects = crate::runtime().block_on(backend.read_all()).expect("read back");
        (tree::read_objects(objects.into_iter().map(|o| (o.path, o.mode, o.data))), backend.capabilities())
    }

    /// Panic unless the bucket holds `expected` under `url` (reduced to what S3 can hold),
    /// showing the difference; `what` names `expected` in the message (`git archive REV`).
    #[track_caller]
    pub fn assert_bucket_is(&self, url: &str, expected: &BTreeMap<String, Node>, what: &str) {
        let (actual, capabilities) = self.read_back(url);
        if let Some(d) = tree::diff(&reduce(expected, capabilities), &actual) {
            panic!("the bucket at {url} differs from {what}:\n{d}");
        }
    }
}
