//! `.treesync/index-delta`: the stat data of the files syncs wrote since the last verify, so
//! that the first verify after a sync proves them without reading them (issue 18).
//!
//! [`crate::verify`]'s stat index (`.treesync/index`) is a whole git index, written only by a
//! verify. A sync knows the stat data of every file it wrote — it just wrote them — so it
//! records them here at O(changed) cost: each entry is a path, the blob it was written from,
//! and the stat data of the file taken after it was complete and in place (closed, renamed over
//! its name: [`crate::backend::Written`]); every other path a sync touched (removed, replaced by a
//! symlink, its mode changed) is noted as removed. A verify merges the delta over its index
//! (a removal drops the index's entry, an entry replaces it), proves files by it exactly as by
//! the index, writes the merged index and empties the delta.
//!
//! Why an entry may prove a file (verify's rule: only bytes known to be the converted blob):
//! the backend stats the file right after writing the blob's bytes (converted as the state
//! records) into it, and the sync records entries only for plans that were applied in full. A
//! file changed afterwards has other stat data (a replaced file another inode and ctime), unless
//! it was changed within the same tick of the filesystem's clock as it was written: git's
//! racy-timestamp rule guards that. An entry is kept only if its mtime is older than the mtime
//! of the delta file written after it (both stamped by the same filesystem clock); a sync whose
//! last files are that young waits for the clock to move on and writes the delta again (a tick:
//! a few milliseconds on local disks, up to a second on filesystems with coarse timestamps),
//! and drops the entries still too young after [`RACY_WAIT`]. Any change after the sync then
//! gets a later mtime than the entry records: a same-size edit in the same second is drift.
//!
//! An interrupted sync records nothing: its entries would be for a plan that was not applied
//! in full. Paths it rewrote keep their old entries, which no longer match the new files'
//! stat data (they are hashed once); the rerun finishes and records.

use std::collections::BTreeMap;
use std::time::Duration;

use gix_hash::ObjectId;

use crate::backend::{self, Backend, FileStat, Written};
use crate::op::{Op, Plan};

/// The auxiliary file of the state folder.
pub const NAME: &str = "index-delta";

const HEADER: &str = "treesync index-delta 1\n";

/// How long a sync waits, at most, for the filesystem's clock to pass the mtime of the files it
/// wrote last (git's racy-timestamp rule, see the [module docs](self)).
pub const RACY_WAIT: Duration = Duration::from_millis(2500);

/// What a sync recorded of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The blob it was written from.
    pub id: ObjectId,
    /// Written with exec bits.
    pub executable: bool,
    /// Its size (after conversions).
    pub size: u64,
    /// Its stat data after it was in place.
    pub stat: FileStat,
}

/// Entries by path; `None`: the path was removed or replaced by something else than a file a
/// sync wrote, so the index's entry for it (if any) is dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// By path (`/`-separated bytes below the target root).
    pub paths: BTreeMap<Vec<u8>, Option<Entry>>,
}

impl Delta {
    /// Nothing recorded?
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Read a delta; `None` for bytes this version does not understand (the delta is then left
    /// unused: every file it would have proven is hashed, which is always safe).
    pub fn parse(bytes: &[u8]) -> Option<Delta> {
        if bytes.is_empty() {
            return Some(Delta::default());
        }
        let text = std::str::from_utf8(bytes).ok()?;
        let rest = text.strip_prefix(HEADER)?;
        let mut paths = BTreeMap::new();
        for line in rest.lines() {
            let mut f = line.split(' ');
            match f.next()? {
                "-" => {
                    paths.insert(unhex(f.next()?)?, None);
                }
                "+" => {
                    let id = ObjectId::from_hex(f.next()?.as_bytes()).ok()?;
                    let executable = match f.next()? {
                        "x" => true,
                        "-" => false,
                        _ => return None,
                    };
                    let mut n = || f.next().and_then(|v| v.parse::<i64>().ok());
                    let size = u64::try_from(n()?).ok()?;
                    let stat = FileStat {
                        mtime_secs: n()?,
                        mtime_nsecs: u32::try_from(n()?).ok()?,
                        ctime_secs: n()?,
                        ctime_nsecs: u32::try_from(n()?).ok()?,
                        dev: u64::try_from(n()?).ok()?,
                        ino: u64::try_from(n()?).ok()?,
                        uid: u32::try_from(n()?).ok()?,
                        gid: u32::try_from(n()?).ok()?,
                    };
                    let path = unhex(f.next()?)?;
                    paths.insert(path, Some(Entry { id, executable, size, stat }));
                }
                _ => return None,
            }
        }
        Some(Delta { paths })
    }

    /// The bytes of the file.
    pub fn to_bytes(&self) -> Vec<u8> {
        use std::fmt::Write as _;
        let mut out = String::from(HEADER);
        for (path, e) in &self.paths {
            match e {
                None => out.push_str("- "),
                Some(e) => {
                    let s = &e.stat;
                    let _ = write!(
                        out,
                        "+ {} {} {} {} {} {} {} {} {} {} {} ",
                        e.id,
                        if e.executable { "x" } else { "-" },
                        e.size,
                        s.mtime_secs,
                        s.mtime_nsecs,
                        s.ctime_secs,
                        s.ctime_nsecs,
                        s.dev,
                        s.ino,
                        s.uid,
                        s.gid
                    );
                }
            }
            for b in path {
                let _ = write!(out, "{b:02x}");
            }
            out.push('\n');
        }
        out.into_bytes()
    }

    /// Add what a plan applied in full did, `written` being what the backend wrote meanwhile
    /// ([`Backend::take_written`]): every path an op touched is noted as removed, then each file
    /// written from a blob by a write (or a mode change that rewrote it) gets its entry.
    pub fn note_applied(&mut self, plan: &Plan, written: Vec<Written>) {
        let mut blobs: BTreeMap<&[u8], (ObjectId, bool)> = BTreeMap::new();
        for op in plan.ops() {
            self.paths.insert(op.path().as_bytes().to_vec(), None);
            match op {
                Op::Write { path, blob, executable, .. } | Op::Chmod { path, blob, executable, .. } => {
                    blobs.insert(path.as_bytes(), (*blob, *executable));
                }
                _ => {}
            }
        }
        for w in written {
            // Files a backend wrote that the plan does not name (none today) stay unproven.
            if let Some((id, executable)) = blobs.get(w.path.as_slice()) {
                let e = Entry { id: *id, executable: *executable, size: w.size, stat: w.stat };
                self.paths.insert(w.path, Some(e));
            }
        }
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Load the target's delta; an absent or unreadable one is empty.
pub async fn load(backend: &dyn Backend) -> Result<Delta, backend::Error> {
    Ok(backend.load_aux(NAME).await?.and_then(|b| Delta::parse(&b)).unwrap_or_default())
}

/// Merge what a sync did (`new`) into the target's delta, applying the racy-timestamp rule (see
/// the [module docs](self)). The file never holds an entry not yet known to be older than the
/// clock: each round writes the entries proven so far, reads the clock from the file's mtime,
/// and moves the entries older than it over. Does nothing on backends without an auxiliary
/// store or when there is nothing to record; returns how many entries were dropped as racy.
pub async fn record(backend: &dyn Backend, new: Delta) -> Result<usize, backend::Error> {
    if new.is_empty() || !backend.capabilities().aux_store {
        return Ok(0);
    }
    let mut delta = load(backend).await?;
    let mut pending: Vec<(Vec<u8>, Entry)> = Vec::new();
    for (path, e) in new.paths {
        if let Some(e) = e {
            pending.push((path.clone(), e));
        }
        delta.paths.insert(path, None);
    }
    let deadline = std::time::Instant::now() + RACY_WAIT;
    let mut pause = Duration::from_millis(2);
    loop {
        backend.store_aux(NAME, &delta.to_bytes()).await?;
        if pending.is_empty() {
            return Ok(0);
        }
        let clock = match backend.aux_mtime(NAME).await {
            Ok(c) => c,
            Err(backend::Error::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(now) = clock {
            pending.retain(|(path, e)| {
                let older = (e.stat.mtime_secs, e.stat.mtime_nsecs) < now;
                if older {
                    delta.paths.insert(path.clone(), Some(*e));
                }
                !older
            });
            if pending.is_empty() {
                continue; // write the entries just proven
            }
        }
        // Without the filesystem's clock the rule cannot be applied: those entries are left out.
        if clock.is_none() || std::time::Instant::now() >= deadline {
            let dropped = pending.len();
            pending.clear();
            backend.store_aux(NAME, &delta.to_bytes()).await?;
            return Ok(dropped);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_reads_back_as_written_and_refuses_what_it_does_not_know() {
        let mut d = Delta::default();
        let stat = FileStat {
            mtime_secs: 1,
            mtime_nsecs: 2,
            ctime_secs: 3,
            ctime_nsecs: 4,
            dev: 5,
            ino: 6,
            uid: 7,
            gid: 8,
        };
        let id = ObjectId::from_hex(b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391").expect("hex");
        d.paths.insert(b"a b/\n c".to_vec(), Some(Entry { id, executable: true, size: 9, stat }));
        d.paths.insert(b"gone".to_vec(), None);
        assert_eq!(Delta::parse(&d.to_bytes()), Some(d.clone()));
        assert_eq!(Delta::parse(b""), Some(Delta::default()));
        assert_eq!(Delta::parse(b"treesync index-delta 2\n"), None);
        assert_eq!(Delta::parse(format!("{HEADER}+ nothex\n").as_bytes()), None);
    }
}
