//! [`Converting`]: the [`BlobSource`] a sync reads file contents through — each blob as its
//! conversion makes it, within the sync's byte budget.

use gix_hash::ObjectId;

use crate::limits::Limits;
use crate::source::{BlobError, BlobSource, Content, Sink};

/// A [`BlobSource`] that converts what ops ask to be converted ([`Content::conversion`]) with
/// a [`Converter`](crate::convert::Converter): what a sync reads file contents from.
///
/// Every byte it hands out counts toward one budget ([`Converting::within`]): what the plan
/// could not know (a filter driver's output, line ends, encodings, LFS objects) is cut at
/// `--max-bytes` while it is written, not after.
pub struct Converting {
    raw: std::sync::Arc<dyn BlobSource>,
    converter: std::sync::Arc<crate::convert::Converter>,
    /// Bytes handed out so far (shared by the sources of one sync).
    written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    limits: Limits,
}

impl Converting {
    /// Blobs from `raw`, converted by `converter`, within the default limits.
    pub fn new(raw: std::sync::Arc<dyn BlobSource>, converter: std::sync::Arc<crate::convert::Converter>) -> Self {
        Converting { raw, converter, written: Default::default(), limits: Limits::default() }
    }

    /// Within `limits` (bytes and filter time), counting in `written` (one counter for all
    /// the sources of a sync).
    pub fn within(mut self, limits: Limits, written: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Self {
        self.limits = limits;
        self.written = written;
        self
    }

    /// `sink`, counting what goes through it against `--max-bytes`.
    fn counted<'s>(
        &'s self,
        path: &'s treesync_backend::path::RelPath,
        sink: &'s mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> impl FnMut(&[u8]) -> std::io::Result<()> + 's {
        move |chunk: &[u8]| {
            let n = chunk.len() as u64;
            let total = self.written.fetch_add(n, std::sync::atomic::Ordering::Relaxed).saturating_add(n);
            let max = self.limits.max_bytes;
            if total > max {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::FileTooLarge,
                    format!(
                        "writing {} took this sync past --max-bytes ({} bytes, more than the limit of {max}): conversions (a filter driver, an LFS object, line ends or an encoding) made more than the plan counted\n  hint: raise --max-bytes if this much is expected, else look at the filter or attributes of {}",
                        path.display(),
                        total,
                        path.display(),
                    ),
                ));
            }
            sink(chunk)
        }
    }
}

impl BlobSource for Converting {
    fn read_blob(&self, id: &ObjectId, size: u64, sink: Sink<'_>) -> Result<(), BlobError> {
        self.raw.read_blob(id, size, sink)
    }

    fn read_content(&self, content: &Content<'_>, sink: Sink<'_>) -> Result<(), BlobError> {
        let mut sink = self.counted(content.path, sink);
        let Some(conversion) = content.conversion else {
            return self.raw.read_blob(content.blob, content.size, &mut sink);
        };
        // Conversions work on the whole blob (as git's do).
        let mut data = Vec::with_capacity(usize::try_from(content.size).unwrap_or(0));
        self.raw.read_blob(content.blob, content.size, &mut |chunk| {
            data.extend_from_slice(chunk);
            Ok(())
        })?;
        let timeout = self.limits.filter_timeout;
        let left = self.limits.max_bytes.saturating_sub(self.written.load(std::sync::atomic::Ordering::Relaxed));
        let input = crate::convert::Input { data: &data, path: content.path.as_bstr(), blob: content.blob, conversion };
        self.converter.convert_within(input, timeout, left, &mut sink)?;
        Ok(())
    }
}
