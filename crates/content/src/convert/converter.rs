//! [`Converter`]: a blob's bytes after its conversion, at write time.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::Mutex;

use gix::bstr::{BStr, ByteSlice};
use gix::filter::plumbing as filter;
use gix_hash::ObjectId;
use serde::Serialize;

use super::attributes::{Stage, compiled};
use super::settings::Settings;
use super::{Conversion, Error, Refusal, encoding, ident};
use crate::lfs::{self, LfsMode, Pointer};

/// Converts blobs for the working tree at write time: gitoxide's pipelines (one per thread
/// converting at once; a long-running filter process is started once per pipeline) under
/// one [`Settings`]. With [`LfsMode::Content`] it also holds the repository's Git LFS store,
/// opened once, and writes the object of each `filter=lfs` pointer.
pub struct Converter {
    settings: Settings,
    lfs: Option<lfs::Store>,
    context: gix::command::Context,
    object_hash: gix_hash::Kind,
    pool: Mutex<Vec<filter::Pipeline>>,
    /// The commit `export-subst` placeholders are expanded with.
    commit: Option<crate::export::CommitInfo>,
    /// The files written unconverted because git refuses their `working-tree-encoding`.
    unconverted: Mutex<BTreeMap<String, Unconverted>>,
}

/// A file git writes unconverted, after an error, and so does treesync: its
/// `working-tree-encoding` cannot be converted to (git's "failed to encode").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Unconverted {
    /// The file.
    pub path: String,
    /// The encoding its attributes name.
    pub encoding: String,
    /// Why it cannot be converted.
    pub why: Refusal,
}

impl std::fmt::Display for Unconverted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: working-tree-encoding={}: {}", self.path, self.encoding, self.why)
    }
}

/// One blob to convert: its bytes, where it is written, its id and its conversion.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    /// The blob's bytes, as stored.
    pub data: &'a [u8],
    /// The path it is written at (filter drivers and messages are told it).
    pub path: &'a BStr,
    /// The blob (`$Id$` expands to it; filter drivers are told it).
    pub blob: &'a ObjectId,
    /// How it is converted.
    pub conversion: &'a Conversion,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Converter {
    /// A converter for `repo` (its command context: the git dir filter drivers run with)
    /// under `settings`; with [`LfsMode::Content`], `repo`'s LFS store is opened
    /// ([`lfs::Store::open`]: fails only when the repository is gone).
    pub fn new(repo: &crate::Repo, settings: Settings) -> Result<Converter, Error> {
        let r = repo.thread_local();
        let context = r
            .command_context()
            .map_err(|e| Error::Config { repo: repo.path().to_path_buf(), message: e.to_string() })?;
        let lfs = match settings.lfs {
            LfsMode::Content => Some(lfs::Store::open(repo)?),
            LfsMode::Pointers => None,
        };
        Ok(Converter {
            settings,
            lfs,
            context,
            object_hash: r.object_hash(),
            pool: Mutex::new(Vec::new()),
            commit: None,
            unconverted: Mutex::new(BTreeMap::new()),
        })
    }

    /// Expand `export-subst` placeholders with `commit` (with [`Settings::export`]).
    pub fn with_commit(mut self, commit: crate::export::CommitInfo) -> Converter {
        self.commit = Some(commit);
        self
    }

    /// Record (and log) that `path` is written unconverted, as git writes it.
    fn refused(&self, path: &BStr, encoding: &str, why: Refusal) {
        let path = path.to_str_lossy().into_owned();
        let mut all = self.unconverted.lock().expect("never poisoned");
        if let std::collections::btree_map::Entry::Vacant(slot) = all.entry(path.clone()) {
            let u = Unconverted { path, encoding: encoding.to_string(), why };
            tracing::debug!(target: "treesync::convert", "written unconverted, as git writes it: {u}");
            slot.insert(u);
        }
    }

    /// The files written unconverted so far (git refuses their `working-tree-encoding` too).
    pub fn unconverted(&self) -> Vec<Unconverted> {
        self.unconverted.lock().expect("never poisoned").values().cloned().collect()
    }

    /// Whether `git checkout` streams a file converted by `conversion` (`get_stream_filter`):
    /// no filter driver with a command, no `working-tree-encoding`, no line-end detection
    /// (`text=auto` unless `eol=lf`, legacy `crlf=auto`, `core.autocrlf=true` without a text
    /// attribute). `git archive` never streams. It decides which `ident` rules apply.
    fn streams(&self, conversion: &Conversion) -> bool {
        if self.settings.export || compiled(conversion).encoding.is_some() {
            return false;
        }
        if let Some(d) = conversion.filter.as_deref().and_then(|f| self.settings.drivers.get(f))
            && (d.process.is_some() || d.smudge.is_some() || d.clean)
        {
            return false;
        }
        let value = |name: &str| {
            conversion.attributes.split(' ').find_map(|a| {
                if a == name {
                    Some("true")
                } else if a.strip_prefix('-') == Some(name) {
                    Some("false")
                } else {
                    a.strip_prefix(name).and_then(|v| v.strip_prefix('='))
                }
            })
        };
        // git's `git_path_check_crlf` on `text`, then on the legacy `crlf` (a value it does not
        // know counts as unset). Only its "auto" actions convert in memory.
        let known = |v: &&str| matches!(*v, "true" | "false" | "input" | "auto");
        match value("text").filter(known).or_else(|| value("crlf").filter(known)) {
            Some("auto") => value("eol") == Some("lf"),
            Some(_) => true,
            None => {
                matches!(value("eol"), Some("lf" | "crlf"))
                    || self.settings.eol_config().auto_crlf != filter::eol::AutoCrlf::Enabled
            }
        }
    }

    /// The settings it converts with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// This converter reading LFS objects from `store` (with [`LfsMode::Content`]; a converter
    /// writing pointer files stays as it is).
    pub fn with_lfs_store(mut self, store: lfs::Store) -> Converter {
        if self.lfs.is_some() {
            self.lfs = Some(store);
        }
        self
    }

    /// The LFS store the content of `filter=lfs` pointers is read from; `None` with
    /// [`LfsMode::Pointers`] (pointer files are written as they are).
    pub fn lfs_store(&self) -> Option<&lfs::Store> {
        self.lfs.as_ref()
    }

    /// The pointer whose object is written instead of `data` (the blob at a path converted by
    /// `conversion`): with `filter=lfs`, [`LfsMode::Content`] and a blob that is a pointer.
    /// Anything else is converted as it is (git-lfs passes blobs that are not pointers through).
    pub fn lfs_pointer(&self, data: &[u8], conversion: &Conversion) -> Option<Pointer> {
        if self.lfs.is_none() || !conversion.is_lfs() {
            return None;
        }
        Pointer::parse(data)
    }

    /// Feed `input.data`, converted, to `sink`: `$Id$` expanded, line ends converted,
    /// re-encoded, then the filter driver — git's order. A Git LFS pointer
    /// ([`Converter::lfs_pointer`]) is replaced by its object, streamed from the store in chunks
    /// (its size and sha256 checked on the way), as `git lfs smudge` does. Then, with
    /// `export-subst`, `$Format:…$` is expanded as `git archive` does.
    pub fn convert(
        &self,
        input: Input<'_>,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), ConvertError> {
        self.convert_within(input, crate::smudge::DEFAULT_TIMEOUT, u64::MAX, sink)
    }

    /// [`Converter::convert`], a single-file filter driver given `filter_timeout` per file
    /// ([`crate::smudge`]); what is held to expand `export-subst` placeholders (the only
    /// conversion that needs the whole output) is refused past `max_held` bytes.
    pub fn convert_within(
        &self,
        input: Input<'_>,
        filter_timeout: std::time::Duration,
        max_held: u64,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), ConvertError> {
        let path = input.path;
        match (&self.commit, input.conversion.export_subst) {
            (Some(commit), true) => {
                let mut out = Vec::with_capacity(input.data.len());
                // Expanded whole, as `git archive` does; held only up to the bound.
                self.convert_for_worktree(input, filter_timeout, &mut |chunk| {
                    if (out.len() + chunk.len()) as u64 > max_held {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::FileTooLarge,
                            format!(
                                "converting {} for export-subst took more than --max-bytes ({max_held} bytes left)\n  hint: raise --max-bytes if this much is expected, else look at the filter or attributes of {}",
                                path.to_str_lossy(),
                                path.to_str_lossy()
                            ),
                        ));
                    }
                    out.extend_from_slice(chunk);
                    Ok(())
                })?;
                // (export-subst) A placeholder git expands and treesync cannot: refused, by name.
                let expanded = crate::export::expand(&out, path, commit)
                    .map_err(|e| ConvertError::Convert(Error::Placeholder(e)))?;
                sink(&expanded).map_err(ConvertError::Sink)
            }
            _ => self.convert_for_worktree(input, filter_timeout, sink),
        }
    }

    /// git's checkout pipeline for one blob, in git's order: LFS, `ident`, line ends,
    /// `working-tree-encoding`, then the filter driver. 120 lines, kept whole so that the order
    /// is read in one place.
    fn convert_for_worktree(
        &self,
        input: Input<'_>,
        filter_timeout: std::time::Duration,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), ConvertError> {
        let Input { data, path, blob, conversion } = input;
        let failed = |message: String| {
            ConvertError::Convert(Error::Convert {
                path: path.to_str_lossy().into_owned(),
                attributes: conversion.to_string(),
                message,
            })
        };
        if let Some(pointer) = self.lfs_pointer(data, conversion) {
            let store = self.lfs.as_ref().expect("lfs_pointer is Some only with a store");
            return store.stream(&pointer, sink).map_err(|e| match e {
                lfs::Error::Sink(e) => ConvertError::Sink(e),
                e => ConvertError::Convert(Error::Lfs(e)),
            });
        }
        let expanded;
        let data = if compiled(conversion).ident {
            expanded =
                if self.streams(conversion) { ident::streamed(data, *blob) } else { ident::in_core(data, *blob) };
            expanded.as_deref().unwrap_or(data)
        } else {
            data
        };
        let mut pipeline = self.pool.lock().expect("never poisoned").pop().unwrap_or_else(|| {
            filter::Pipeline::new(self.context.clone(), self.object_hash, self.settings.pipeline_options())
        });
        pipeline.driver_context_mut().blob = Some(*blob);
        let result = (|| {
            use filter::pipeline::convert::ToWorktreeOutcome;
            let eol = pipeline
                .convert_to_worktree(
                    data,
                    path,
                    &mut |p, out| compiled(conversion).fill(Stage::Eol, p, out),
                    Default::default(),
                )
                .map_err(|e| failed(e.to_string()))?;
            let Some(lines) = eol.as_bytes() else { unreachable!("the line-end pass runs no driver") };
            let encoded = match &compiled(conversion).encoding {
                Some(label) => match encoding::encode(lines, label) {
                    encoding::Encoded::Same => None,
                    encoding::Encoded::Converted(bytes) => Some(bytes),
                    encoding::Encoded::Refused(why) => {
                        self.refused(path, label, why);
                        None
                    }
                },
                None => None,
            };
            let Some(name) = compiled(conversion).driver.as_deref() else {
                return sink(encoded.as_deref().unwrap_or(lines)).map_err(ConvertError::Sink);
            };
            // A single-file smudge command: run by treesync, streamed and bounded in time.
            if let Some(d) = self.settings.drivers.get(name).filter(|d| d.process.is_none()) {
                let input = encoded.as_deref().unwrap_or(lines);
                let Some(command) = &d.smudge else { return sink(input).map_err(ConvertError::Sink) };
                return crate::smudge::run(command, &self.context, path, input, filter_timeout, sink).map_err(
                    |f| match f {
                        crate::smudge::Failure::Sink(e) => ConvertError::Sink(e),
                        f => failed(format!("the filter driver {name} (`{command}`): {f}")),
                    },
                );
            }
            let staged = encoded.unwrap_or_else(|| lines.to_vec());
            drop(eol);
            // A `process` driver runs in gitoxide's pipeline: a watchdog stops it (and so this
            // file) past the timeout.
            let process = self.settings.drivers.get(name).and_then(|d| d.process.clone());
            let watchdog = process.as_deref().map(|cmd| crate::smudge::Watchdog::start(cmd, filter_timeout));
            let out = pipeline.convert_to_worktree(
                &staged,
                path,
                &mut |p, out| compiled(conversion).fill(Stage::Driver, p, out),
                Default::default(),
            );
            let streamed = match out {
                Err(e) => Err(failed(e.to_string())),
                Ok(ToWorktreeOutcome::Unchanged(b) | ToWorktreeOutcome::Buffer(b)) => {
                    sink(b).map_err(ConvertError::Sink)
                }
                Ok(ToWorktreeOutcome::Process(filter::driver::apply::MaybeDelayed::Immediate(mut read))) => {
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        match read.read(&mut buf) {
                            Err(e) => break Err(failed(format!("the filter's output: {e}"))),
                            Ok(0) => break Ok(()),
                            Ok(n) => {
                                if let Err(e) = sink(&buf[..n]) {
                                    break Err(ConvertError::Sink(e));
                                }
                            }
                        }
                    }
                }
                Ok(ToWorktreeOutcome::Process(filter::driver::apply::MaybeDelayed::Delayed(_))) => {
                    Err(failed("the filter delayed the file, which treesync does not ask for".into()))
                }
            };
            if watchdog.is_some_and(crate::smudge::Watchdog::stop) {
                return Err(failed(format!(
                    "the filter driver {name} (`{}`): {}",
                    process.as_deref().unwrap_or_default(),
                    crate::smudge::Failure::Timeout(filter_timeout)
                )));
            }
            streamed
        })();
        if result.is_ok() {
            self.pool.lock().expect("never poisoned").push(pipeline);
        }
        result
    }

    /// `data` converted, in memory (for comparisons at plan and verify time).
    pub fn converted(
        &self,
        data: &[u8],
        path: &BStr,
        blob: &ObjectId,
        conversion: &Conversion,
    ) -> Result<Vec<u8>, ConvertError> {
        let mut out = Vec::with_capacity(data.len());
        self.convert(Input { data, path, blob, conversion }, &mut |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(out)
    }
}

/// Converting a blob for the working tree failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The conversion itself.
    #[error(transparent)]
    Convert(Error),
    /// The sink (the backend writing the file).
    #[error("{0}")]
    Sink(#[source] std::io::Error),
}

/// A failed conversion as a [`BlobSource`](crate::source::BlobSource) reports it.
impl From<ConvertError> for crate::source::BlobError {
    fn from(e: ConvertError) -> Self {
        match e {
            ConvertError::Convert(e) => crate::source::BlobError::Convert(Box::new(e)),
            ConvertError::Sink(e) => crate::source::BlobError::Sink(e),
        }
    }
}
