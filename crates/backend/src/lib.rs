//! # treesync-backend
//!
//! What a backend implementer needs, and nothing of how a plan is made: a target is written by
//! a [`Backend`] that executes [`Op`]s on [`RelPath`]s, reading file contents from a
//! [`BlobSource`](source::BlobSource). This crate holds that trait and its vocabulary, the
//! wrappers that compose over any backend ([`policy`]), [`MemoryBackend`] (the reference
//! backend), and the [`generation::Host`] trait for places that keep generations.
//!
//! Backends (`treesync-backend-local`, `-nfs`, `-s3`) need only this crate; the planner, the
//! executor and the sync (`treesync-core`) and the conversions of file contents
//! (`treesync-content`) build on it. It brings no HTTP client, no inotify and no git object
//! database.
//!
//! ```
//! use std::sync::Arc;
//! use treesync_backend::policy::Count;
//! use treesync_backend::source::{BlobError, BlobSource};
//! use treesync_backend::{Backend, MemoryBackend, ObjectId, Op, RelPath};
//!
//! /// Every blob is `hi\n`.
//! struct Hi;
//! impl BlobSource for Hi {
//!     fn read_blob(&self, _: &ObjectId, _: u64, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> Result<(), BlobError> {
//!         sink(b"hi\n").map_err(BlobError::Sink)
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let memory = MemoryBackend::new();
//! let backend = Count::new(memory.clone());
//! let blobs: Arc<dyn BlobSource> = Arc::new(Hi);
//! let op = Op::Write {
//!     path: RelPath::parse("hello.txt")?,
//!     blob: ObjectId::null(gix_hash::Kind::Sha1),
//!     size: 3,
//!     executable: false,
//!     conversion: None,
//!     reason: None,
//! };
//! tokio::runtime::Builder::new_current_thread().build()?.block_on(backend.execute(&op, &blobs))?;
//! assert_eq!(memory.snapshot()[&b"hello.txt"[..]], treesync_backend::memory::MemNode::File { data: b"hi\n".to_vec(), executable: false });
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod conversion;
mod delegate;
pub mod duration;
pub mod generation;
pub mod json;
pub mod lock;
pub mod memory;
pub mod op;
pub mod path;
pub mod policy;
pub mod source;

pub use backend::Backend;
pub use gix_hash::ObjectId;
pub use memory::MemoryBackend;
pub use op::{Op, OpCounts, OpKind, Phase, Plan};
pub use path::RelPath;
