//! The stat index (`.treesync/index`) and the files it does not prove, hashed many at once.

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;

use std::sync::atomic::AtomicBool;

use super::report::{Drift, Report};
use super::stop_if;
use super::{Error, Progress, Want};
use crate::backend::{Backend, FileStat};
use crate::path::RelPath;

/// The stat index as recorded by the last verify (entries sorted by path).
pub(super) type StatIndex = gix_index::State;

pub(super) fn read_index(bytes: &[u8]) -> Option<StatIndex> {
    let (state, _) = gix_index::State::from_bytes(
        bytes,
        std::time::SystemTime::UNIX_EPOCH.into(),
        gix_hash::Kind::Sha1,
        Default::default(),
    )
    .ok()?;
    Some(state)
}

pub(super) fn index_stat(s: &FileStat, size: u64) -> gix_index::entry::Stat {
    use gix_index::entry::stat::Time;
    gix_index::entry::Stat {
        mtime: Time { secs: s.mtime_secs as u32, nsecs: s.mtime_nsecs },
        ctime: Time { secs: s.ctime_secs as u32, nsecs: s.ctime_nsecs },
        dev: s.dev as u32,
        ino: s.ino as u32,
        uid: s.uid,
        gid: s.gid,
        size: size as u32,
    }
}

pub(super) fn write_index(want: &[(Vec<u8>, Want)], entries: &[IndexEntry]) -> Vec<u8> {
    let mut state = gix_index::State::new(gix_hash::Kind::Sha1);
    for (i, id, mode, stat) in entries {
        state.dangerously_push_entry(*stat, *id, gix_index::entry::Flags::empty(), *mode, want[*i].0.as_bstr());
    }
    state.sort_entries();
    let mut out = Vec::new();
    gix_index::File::from_state(state, "index")
        .write_to(&mut out, Default::default())
        .expect("writing an index to memory cannot fail");
    out
}

/// An entry of the stat index to write: (position in the tree's list, id, mode, stat) — no
/// path copies.
pub(super) type IndexEntry = (usize, ObjectId, gix_index::entry::Mode, gix_index::entry::Stat);

/// A file of the tree whose stat data does not prove it: its content is read and hashed.
pub(super) struct ToHash {
    /// Its position in the tree's list.
    pub(super) wi: usize,
    pub(super) rel: RelPath,
    /// The blob id of what it must hold (after conversions, which change it).
    pub(super) content: ObjectId,
    /// The blob id the index records for it.
    pub(super) id: ObjectId,
    pub(super) mode: gix_index::entry::Mode,
    /// Its stat data from the scan, for the index.
    pub(super) stat: Option<gix_index::entry::Stat>,
    /// Its size, as the scan found it.
    pub(super) size: u64,
}

/// Read the files of `to_hash`, up to the backend's scan width at once (its budgets gate each
/// read further) and at most [`HASH_BYTES_IN_FLIGHT`] of them in memory, and compare each with
/// the blob it must hold: on a NAS or over `nfs://` every read is round trips, which one file at
/// a time would pay in series.
/// Each file read is reported to `progress`; `interrupt` stops the reads between files.
pub(super) async fn hash_files(
    backend: &dyn Backend,
    to_hash: Vec<ToHash>,
    report: &mut Report,
    new_index: &mut Vec<IndexEntry>,
    show: impl Fn(usize) -> Vec<u8>,
    progress: &(dyn Fn(&Progress) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<(), Error> {
    use futures::StreamExt;
    const UNIT: u64 = 1 << 20;
    let units = (HASH_BYTES_IN_FLIGHT / UNIT) as u32;
    let bytes = tokio::sync::Semaphore::new(units as usize);
    let width = backend.policy().scans.max(1);
    let total = to_hash.len() as u64;
    let mut reads = futures::stream::iter(to_hash)
        .map(|job| {
            let bytes = &bytes;
            async move {
                // Reserved by the size the scan found (a file larger than the whole allowance
                // takes all of it).
                let need = job.size.div_ceil(UNIT).clamp(1, u64::from(units)) as u32;
                let _held = bytes.acquire_many(need).await.expect("never closed");
                let data = backend.read_file(&job.rel).await;
                (job, data.map(|d| blob_id(&d)))
            }
        })
        .buffer_unordered(width);
    let mut done = 0;
    while let Some((job, hashed)) = reads.next().await {
        report.hashed += 1;
        if hashed? != job.content {
            report.drift.push(Drift::ContentChanged { path: show(job.wi) });
        } else if let Some(st) = job.stat {
            new_index.push((job.wi, job.id, job.mode, st));
        }
        done += 1;
        progress(&Progress { expected: report.expected, scanned: report.scanned, hashed: done, to_hash: total });
        stop_if(interrupt, report.hashed)?;
    }
    Ok(())
}

/// Bytes of files being hashed that a verify holds at once, at most (plus one file larger).
const HASH_BYTES_IN_FLIGHT: u64 = 64 << 20;

pub(super) fn blob_id(data: &[u8]) -> ObjectId {
    gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, data).expect("sha1 of memory")
}

pub(super) fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    let d = md5::Md5::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}
