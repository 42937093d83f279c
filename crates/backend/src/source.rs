//! What a backend reads file contents from: [`BlobSource`] and the [`Content`] a write op asks
//! for, and the errors of reading them ([`BlobError`], [`Error`]). The git side (`Repo`, and the
//! source that converts for the working tree) lives in `treesync-content`, whose `source`
//! module re-exports these.

use std::path::PathBuf;

use gix_hash::ObjectId;

use crate::conversion::Conversion;

/// Errors while opening the repository or reading objects from it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository could not be opened.
    #[error(
        "cannot open git repository at {path}: {source}\n  hint: --repo takes a bare repository or a working tree that has a .git"
    )]
    Open {
        /// What was given.
        path: PathBuf,
        /// Why: gitoxide's error, or what treesync found.
        #[source]
        source: Cause,
    },
    /// The revision does not name a commit.
    #[error(
        "cannot resolve revision {rev:?} in {repo}: {source}\n  hint: use a branch, tag, commit id or an expression like main~3 (git rev-parse {rev} should work)"
    )]
    Revision {
        /// The revision.
        rev: String,
        /// The repository.
        repo: PathBuf,
        /// Why: gitoxide's error, or what treesync found.
        #[source]
        source: Cause,
    },
    /// A subtree revision (`REV:PATH`) whose PATH is not a directory of REV's tree.
    #[error(
        "cannot sync {path:?} of {rev:?} in {repo}: {found}\n  hint: PATH in REV:PATH (or --path) is a directory of the commit's tree, relative to its root; `git -C {} ls-tree -d --name-only {rev}:{}` lists the directories there",
        repo.display(), path.rsplit_once('/').map_or("", |(parent, _)| parent)
    )]
    Subtree {
        /// The revision the path was looked up in (`main`).
        rev: String,
        /// The path (`docs`).
        path: String,
        /// The repository.
        repo: PathBuf,
        /// What is there instead (nothing, a file, a symlink, a submodule).
        found: String,
    },
    /// The process ran out of file descriptors (`EMFILE`, `ENFILE`) while opening the
    /// repository or reading its refs: nothing is wrong with the repository or the revision.
    #[error("out of file descriptors while {doing} {}: {source}\n  hint: {OUT_OF_DESCRIPTORS_HINT}", repo.display())]
    Descriptors {
        /// `opening`, `reading the refs of`.
        doing: &'static str,
        /// The repository.
        repo: PathBuf,
        /// `EMFILE` or `ENFILE`.
        #[source]
        source: std::io::Error,
    },
    /// An object needed for the sync is missing, corrupt or of the wrong kind.
    #[error(
        "cannot read {what} {id}{at}: {source}\n  hint: the repository may be corrupt or incomplete; `git fsck` tells more"
    )]
    Object {
        /// `tree`, `blob`, …
        what: &'static str,
        /// The object.
        id: ObjectId,
        /// ` (at path)` or empty.
        at: String,
        /// Why: gitoxide's error, or what treesync found.
        #[source]
        source: Cause,
    },
}

/// What to do when the process runs out of file descriptors, wherever that happens.
pub const OUT_OF_DESCRIPTORS_HINT: &str =
    "raise the descriptor limit: LimitNOFILE= in the unit (systemd's default soft limit is 1024), ulimit -n in a shell";

/// Why a repository operation failed: gitoxide's error, kept whole as the source (with its own
/// causes), or what treesync found out itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Cause {
    /// gitoxide's error (finding, decoding, inflating, resolving, opening), possibly after
    /// what it means here (see [`Cause::gix_in`]).
    #[error(transparent)]
    Gix(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// What treesync found out (an object that is not there or of the wrong kind, a truncated
    /// stream, a repository that is gone).
    #[error("{0}")]
    Found(String),
}

impl Cause {
    /// gitoxide's error `e`.
    pub fn gix(e: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause::Gix(Box::new(e))
    }

    /// gitoxide's error `e`, after `context` (`it does not point to a commit: …`); `e` stays
    /// the source.
    pub fn gix_in(context: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause::Gix(Box::new(InContext { context, source: Box::new(e) }))
    }

    /// What treesync found out.
    pub fn found(what: impl Into<String>) -> Cause {
        Cause::Found(what.into())
    }
}

/// gitoxide's error after what it means here.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
struct InContext {
    context: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

/// Where a [`BlobSource`] puts what it reads: one chunk after the other, in order; an error
/// stops the read ([`BlobError::Sink`]).
pub type Sink<'a> = &'a mut dyn FnMut(&[u8]) -> std::io::Result<()>;

/// Where the executor gets file contents from. The callback receives the content in one or
/// more chunks, in order.
pub trait BlobSource: Send + Sync {
    /// Feed the bytes of blob `id` to `sink`. `size` is the blob's size as the plan recorded it
    /// (every op that writes content carries it), so large blobs can be streamed without
    /// asking the object database for the size again.
    fn read_blob(&self, id: &ObjectId, size: u64, sink: Sink<'_>) -> Result<(), BlobError>;

    /// Feed what a write op writes to `sink`: the blob, converted when
    /// [`Content::conversion`] says so. Sources that do not convert (this default) refuse
    /// converted content; a sync reads through `treesync_content::source::Converting`.
    fn read_content(&self, content: &Content<'_>, sink: Sink<'_>) -> Result<(), BlobError> {
        match content.conversion {
            None => self.read_blob(content.blob, content.size, sink),
            Some(c) => Err(BlobError::Convert(Box::new(NotConverting {
                path: content.path.display(),
                attributes: c.to_string(),
            }))),
        }
    }
}

/// What an op that writes a file asks a [`BlobSource`] for: a blob, converted for the working
/// tree when the op says so.
#[derive(Debug, Clone, Copy)]
pub struct Content<'a> {
    /// The blob.
    pub blob: &'a ObjectId,
    /// Its size, as the plan recorded it (the file's size when there is no conversion).
    pub size: u64,
    /// Where it is written (filter drivers are told the path).
    pub path: &'a crate::path::RelPath,
    /// How it is converted (`None`: written as it is).
    pub conversion: Option<&'a Conversion>,
}

/// [`Content`] that owns its parts, for work that outlives the op (a blocking task reading a
/// large file while its chunks go out).
#[derive(Debug, Clone)]
pub struct OwnedContent {
    /// The blob.
    pub blob: ObjectId,
    /// Its size, as the plan recorded it.
    pub size: u64,
    /// Where it is written.
    pub path: crate::path::RelPath,
    /// How it is converted.
    pub conversion: Option<std::sync::Arc<Conversion>>,
}

impl OwnedContent {
    /// Borrowed, for [`BlobSource::read_content`].
    pub fn as_content(&self) -> Content<'_> {
        Content { blob: &self.blob, size: self.size, path: &self.path, conversion: self.conversion.as_deref() }
    }

    /// Whether the file may hold bytes: a non-empty blob, or a conversion (which may make bytes
    /// of none, e.g. a filter driver).
    pub fn may_have_bytes(&self) -> bool {
        self.size > 0 || self.conversion.is_some()
    }
}

impl crate::op::Op {
    /// [`Op::content`](crate::op::Op::content), owned.
    pub fn owned_content(&self) -> Option<OwnedContent> {
        use crate::op::Op;
        match self {
            Op::Write { path, blob, size, conversion, .. } | Op::Chmod { path, blob, size, conversion, .. } => {
                Some(OwnedContent { blob: *blob, size: *size, path: path.clone(), conversion: conversion.clone() })
            }
            _ => None,
        }
    }

    /// What this op writes, for [`Op::Write`](crate::op::Op::Write) and
    /// [`Op::Chmod`](crate::op::Op::Chmod) (which backends that cannot change modes turn into a
    /// write).
    pub fn content(&self) -> Option<Content<'_>> {
        use crate::op::Op;
        match self {
            Op::Write { path, blob, size, conversion, .. } | Op::Chmod { path, blob, size, conversion, .. } => {
                Some(Content { blob, size: *size, path, conversion: conversion.as_deref() })
            }
            _ => None,
        }
    }
}

/// Reading a blob for the executor failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The object database could not give the blob.
    #[error(transparent)]
    Source(#[from] Error),
    /// The sink (the backend writing the file) failed.
    #[error("{0}")]
    Sink(#[source] std::io::Error),
    /// The blob could not be converted for the working tree: the content layer's error
    /// (`treesync_content::convert::Error`), carried as it is.
    #[error(transparent)]
    Convert(Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// A converted write asked of a [`BlobSource`] that does not convert (the default
/// [`BlobSource::read_content`]); worded as the content layer words a failed conversion.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot convert {path} for the working tree ({attributes}): this blob source does not convert (read through source::Converting)\n  hint: a filter driver named by the attributes must succeed on this file: run its command on the file by hand to see why it fails (`git config --get-regexp '^filter[.]'` in the repository lists the drivers)"
)]
pub struct NotConverting {
    /// The file.
    pub path: String,
    /// Its conversion.
    pub attributes: String,
}
