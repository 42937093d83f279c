//! `.treesync/index-delta`: the stat data of the files syncs wrote since the last verify, so
//! that the first verify after a sync proves them without reading them (issue 18).
//!
//! [`crate::verify`]'s stat index (`.treesync/index`) is a whole git index, written only by a
//! verify. A sync knows the stat data of every file it wrote — it just wrote them — so it
//! appends them here at O(changed) cost, whatever the delta holds already (one line per
//! record; a line cut short by a crash is skipped): each entry is a path, the blob it was written from,
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
//! racy-timestamp rule guards that. An entry is appended only if its mtime is older than the
//! mtime of the delta file after an append that followed the file's stat (both stamped by the
//! same filesystem clock); a sync with more than [`YOUNG_LEFT_OUT`] files that young waits for
//! the clock to move on and stamps the delta again (fewer are left out, and hashed once by the
//! next verify; a tick:
//! a few milliseconds on local disks, up to a second on filesystems with coarse timestamps),
//! and drops the entries still too young after [`RACY_WAIT`]. Any change after the sync then
//! gets a later mtime than the entry records: a same-size edit in the same second is drift.
//!
//! A plan applied in one piece records nothing when it is interrupted: paths it rewrote keep
//! their old entries, which no longer match the new files' stat data (they are hashed once);
//! the rerun finishes and records. A plan applied in chunks (a streamed initial checkout)
//! records each chunk once it is applied ([`Chunked`]), so an interrupted one keeps what its
//! finished chunks recorded, and a large tree's files are recorded too, holding about a
//! chunk's entries at a time.

use std::collections::BTreeMap;
use std::time::Duration;

use gix_hash::ObjectId;

use crate::backend::{self, Backend, FileStat, Written};
use crate::op::{Op, Plan};

pub use treesync_backend::backend::{INDEX_DELTA as NAME, RECORD_AT_MOST};

/// The state file, whose mtime is the first clock reading (see [`record`]).
const STATE: &str = "state";

/// How long a sync waits, at most, for the filesystem's clock to pass the mtime of the files it
/// wrote last (git's racy-timestamp rule, see the [module docs](self)).
pub const RACY_WAIT: Duration = Duration::from_millis(2500);

/// How many entries too young for the racy-timestamp rule a sync leaves out instead of waiting
/// for the clock: an incremental sync of a few files is not made to wait a clock tick (a few
/// milliseconds; a second on coarse filesystems) to spare the next verify hashing them.
pub const YOUNG_LEFT_OUT: usize = 64;

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
    /// A plan larger than [`RECORD_AT_MOST`] ops was applied: nothing is recorded (the next
    /// verify hashes what it rewrote, whose stat data no older entry matches).
    pub overflowed: bool,
}

impl Delta {
    /// Nothing recorded?
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// How many files it holds stat data of (the other paths are noted as removed).
    pub fn recorded(&self) -> usize {
        self.paths.values().filter(|e| e.is_some()).count()
    }

    /// The delta of the target directory `root` as its file holds it now (empty when there is
    /// none or it is not one this version reads): for tests and tools.
    pub fn of_dir(root: &std::path::Path) -> Delta {
        std::fs::read(root.join(crate::path::STATE_DIR).join(NAME))
            .ok()
            .and_then(|b| Delta::parse(&b))
            .unwrap_or_default()
    }

    /// Read a delta; `None` for bytes this version does not understand (the delta is then left
    /// unused: every file it would have proven is hashed, which is always safe). A line cut
    /// short by a crash (without its closing ` ;`) is not a record and is skipped.
    pub fn parse(bytes: &[u8]) -> Option<Delta> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut paths = BTreeMap::new();
        let mut lines = text.split('\n').collect::<Vec<_>>();
        lines.pop(); // after the last newline: empty, or a torn tail
        for line in lines {
            let Some(line) = line.strip_suffix(" ;") else { continue };
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["-", path] => {
                    paths.insert(unhex(path)?, None);
                }
                ["+", id, x, size, ms, mns, cs, cns, dev, ino, uid, gid, path] => {
                    let id = ObjectId::from_hex(id.as_bytes()).ok()?;
                    let executable = match *x {
                        "x" => true,
                        "-" => false,
                        _ => return None,
                    };
                    let stat = FileStat {
                        mtime_secs: ms.parse().ok()?,
                        mtime_nsecs: mns.parse().ok()?,
                        ctime_secs: cs.parse().ok()?,
                        ctime_nsecs: cns.parse().ok()?,
                        dev: dev.parse().ok()?,
                        ino: ino.parse().ok()?,
                        uid: uid.parse().ok()?,
                        gid: gid.parse().ok()?,
                    };
                    let e = Entry { id, executable, size: size.parse().ok()?, stat };
                    paths.insert(unhex(path)?, Some(e));
                }
                _ => return None,
            }
        }
        Some(Delta { paths, overflowed: false })
    }

    /// The bytes of the file (each record a line; see [`Delta::parse`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (path, e) in &self.paths {
            line(&mut out, path, e.as_ref());
        }
        out
    }

    /// Whether applying `plan` next gets its files recorded ([`Delta::note_applied`]): a
    /// backend told otherwise ([`Backend::record_written`]) takes no stat data in vain.
    pub fn records(&self, plan: &Plan) -> bool {
        !self.overflowed && plan.counts.total() as usize <= RECORD_AT_MOST
    }

    /// Add what a plan applied in full did, `written` being what the backend wrote meanwhile
    /// ([`Backend::take_written`]): every path an op touched is noted as removed, then each file
    /// written from a blob by a write (or a mode change that rewrote it) gets its entry.
    pub fn note_applied(&mut self, plan: &Plan, written: Vec<Written>) {
        if self.overflowed || plan.counts.total() as usize > RECORD_AT_MOST {
            self.overflowed = true;
            self.paths.clear();
            return;
        }
        applied(&mut self.paths, plan, written);
    }
}

/// Note in `paths` what `plan`, applied in full, did (`written`: what the backend wrote
/// meanwhile): every path an op touched as removed, then an entry for each file written from a
/// blob by a write (or a mode change that rewrote it).
fn applied(paths: &mut BTreeMap<Vec<u8>, Option<Entry>>, plan: &Plan, written: Vec<Written>) {
    let mut blobs: BTreeMap<&[u8], (ObjectId, bool)> = BTreeMap::new();
    for op in plan.ops() {
        paths.insert(op.path().as_bytes().to_vec(), None);
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
            paths.insert(w.path, Some(e));
        }
    }
}

/// What one chunk of a run did, for [`Chunked::chunk`] (see [`Noted::of`]): its paths in the
/// order of its ops, each with the entry of the file written there (a later record of a path
/// wins, as in [`Delta::parse`]).
#[derive(Debug, Default)]
pub struct Noted(Vec<(Vec<u8>, Option<Entry>)>);

impl Noted {
    /// What `plan`, applied in full, did (`written`: what the backend wrote meanwhile), as
    /// [`Delta::note_applied`] notes it, without sorting (a chunk of an initial checkout names
    /// each path once; a path named twice ends with what its last op left).
    pub fn of(plan: &Plan, written: Vec<Written>) -> Noted {
        let mut stats: std::collections::HashMap<Vec<u8>, (u64, FileStat)> =
            written.into_iter().map(|w| (w.path, (w.size, w.stat))).collect();
        let mut paths = Vec::with_capacity(plan.len());
        for op in plan.ops() {
            let path = op.path().as_bytes();
            let written = match op {
                Op::Write { blob, executable, .. } | Op::Chmod { blob, executable, .. } => stats
                    .remove_entry(path)
                    .map(|(p, (size, stat))| (p, Entry { id: *blob, executable: *executable, size, stat })),
                _ => None,
            };
            paths.push(match written {
                Some((p, e)) => (p, Some(e)),
                None => (path.to_vec(), None),
            });
        }
        Noted(paths)
    }
}

/// Records, chunk by chunk, a run applied in chunks (a streamed initial checkout, which may
/// write more files than a run holds entries of: [`RECORD_AT_MOST`]). Each chunk but the last
/// costs one append and one reading of the delta's mtime, made once the next chunk is applied:
/// the append notes the chunk's paths (as removed, for now) and adds the entries of earlier
/// chunks that the filesystem's clock has passed (the racy-timestamp rule of [`record`], with
/// the delta's mtime after the previous append as the clock). What is held is the last chunk
/// and the entries not yet known to be older than the clock — about a chunk's each — and
/// [`Chunked::rest`] hands them to [`record`] after the run's last state write (a run of one
/// chunk records as a plan applied in one piece does).
///
/// Unlike a plan applied in one piece, an interrupted run keeps what its finished chunks
/// recorded. That is safe: an entry only says that the file with exactly that stat data holds
/// the blob it names, converted as the run's destination says (the journal's, which the next
/// sync finishes and the next verify compares with); a file rewritten or changed afterwards
/// has other stat data.
#[derive(Debug, Default)]
pub struct Chunked {
    /// The last chunk applied, not appended yet.
    last: Option<Noted>,
    /// Entries of chunks appended, not yet known to be older than the clock.
    young: Vec<(Vec<u8>, Entry)>,
    /// The filesystem's clock as last read; `None` before the first append.
    clock: Option<(i64, u32)>,
    /// The storage has no clock to read (or a failure stopped the recording): nothing more is
    /// recorded but the last chunk (by [`record`], as a plan applied in one piece).
    off: bool,
}

impl Chunked {
    /// Record what a chunk applied in full did ([`Noted::of`]): the chunk before it is appended
    /// now. A failure stops the recording (what is recorded stays true; the next verify hashes
    /// the rest).
    pub async fn chunk(&mut self, backend: &dyn Backend, chunk: Noted) -> Result<(), backend::Error> {
        let Some(Noted(paths)) = self.last.replace(chunk) else { return Ok(()) };
        if self.off {
            return Ok(());
        }
        // Each append starts on a new line: a tail torn by a crash stays a line of its own.
        let mut out = b"\n".to_vec();
        if let Some(now) = self.clock {
            self.young.retain(|(path, e)| {
                let older = (e.stat.mtime_secs, e.stat.mtime_nsecs) < now;
                if older {
                    line(&mut out, path, Some(e));
                }
                !older
            });
        }
        for (path, e) in paths {
            line(&mut out, &path, None);
            if let Some(e) = e {
                self.young.push((path, e));
            }
        }
        let r = async {
            backend.append_aux(NAME, &out).await?;
            match backend.aux_mtime(NAME).await {
                Err(backend::Error::Unsupported { .. }) => Ok(None),
                r => r,
            }
        }
        .await;
        match &r {
            Ok(Some(now)) => self.clock = Some(*now),
            Ok(None) | Err(_) => {
                self.off = true;
                self.young = Vec::new();
            }
        }
        r.map(|_| ())
    }

    /// What is left for [`record`] after the run's last state write: the last chunk, and the
    /// entries still waiting for the clock.
    pub fn rest(self) -> Vec<(Vec<u8>, Option<Entry>)> {
        let mut rest: Vec<(Vec<u8>, Option<Entry>)> = self.young.into_iter().map(|(p, e)| (p, Some(e))).collect();
        if let Some(Noted(paths)) = self.last {
            rest.extend(paths);
        }
        rest
    }
}

/// One record: `- PATH ;` or `+ ID X SIZE MTIME MTIME_NS CTIME CTIME_NS DEV INO UID GID PATH ;`
/// (the path in hex: any bytes, no separator inside).
fn line(out: &mut Vec<u8>, path: &[u8], e: Option<&Entry>) {
    use std::io::Write as _;
    match e {
        None => out.extend_from_slice(b"- "),
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
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(path.len() * 2 + 3);
    for b in path {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
    out.extend_from_slice(b" ;\n");
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Load the target's delta; an absent or unreadable one is empty.
pub async fn load(backend: &dyn Backend) -> Result<Delta, backend::Error> {
    Ok(backend.load_aux(NAME).await?.and_then(|b| Delta::parse(&b)).unwrap_or_default())
}

/// Append what a sync did (`new`) to the target's delta, applying the racy-timestamp rule (see
/// the [module docs](self)). Call it after the sync's last state write: the state file's mtime
/// is the first reading of the filesystem's clock, taken after every file's stat. One append
/// then holds every path the sync touched (as removed) and the entries older than that clock,
/// so the file never holds an entry not yet known to be older than it; younger entries (the
/// sync's last tick) follow after the clock, read from the delta's own mtime, has passed them.
/// Costs what the sync changed, whatever the delta holds already. Does nothing on backends
/// without an auxiliary store or when there is nothing to record; returns how many entries were
/// dropped as racy.
pub async fn record(backend: &dyn Backend, new: Delta) -> Result<usize, backend::Error> {
    if new.is_empty() || !backend.capabilities().aux_store {
        return Ok(0);
    }
    // Each append starts on a new line: a tail torn by a crash stays a line of its own.
    let mut chunk = b"\n".to_vec();
    let mut pending: Vec<(Vec<u8>, Entry)> = Vec::new();
    for (path, e) in new.paths {
        line(&mut chunk, &path, None);
        if let Some(e) = e {
            pending.push((path, e));
        }
    }
    let deadline = std::time::Instant::now() + RACY_WAIT;
    let mut pause = Duration::from_millis(2);
    let mut clock_file = STATE;
    loop {
        let clock = match backend.aux_mtime(clock_file).await {
            Ok(c) => c,
            Err(backend::Error::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(now) = clock {
            pending.retain(|(path, e)| {
                let older = (e.stat.mtime_secs, e.stat.mtime_nsecs) < now;
                if older {
                    line(&mut chunk, path, Some(e));
                }
                !older
            });
        }
        // Without the filesystem's clock the rule cannot be applied: those entries are left out.
        // A few young entries are left out rather than waited for (the next verify hashes them
        // once): an incremental sync takes no longer for the rule.
        let last = pending.len() <= YOUNG_LEFT_OUT || clock.is_none() || std::time::Instant::now() >= deadline;
        // An append also stamps the delta with the clock for the next round.
        backend.append_aux(NAME, &chunk).await?;
        if last {
            return Ok(pending.len());
        }
        chunk = b"\n".to_vec();
        clock_file = NAME;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_larger_than_what_is_recorded_records_nothing() {
        let id = ObjectId::from_hex(b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391").expect("hex");
        let op = |i: usize| Op::Mkdir { path: crate::path::RelPath::parse(&format!("d{i}")).expect("path") };
        let small = Plan::from_ops(None, id, (0..3).map(op));
        let mut d = Delta::default();
        assert!(d.records(&small));
        d.note_applied(&small, Vec::new());
        assert_eq!((d.paths.len(), d.overflowed), (3, false));
        let large = Plan::from_ops(None, id, (0..=RECORD_AT_MOST).map(op));
        assert!(!d.records(&large), "the backend is told not to record a plan this large");
        d.note_applied(&large, Vec::new());
        assert!(!d.records(&small), "nor anything after it in the same run");
        assert!(d.is_empty() && d.overflowed, "nothing of either plan is kept");
        d.note_applied(&small, Vec::new());
        assert!(d.is_empty(), "and nothing after it in the same run");
    }

    #[test]
    fn a_delta_reads_back_as_written_and_refuses_what_it_does_not_know() {
        let mut d = Delta::default();
        let stat =
            FileStat { mtime_secs: 1, mtime_nsecs: 2, ctime_secs: 3, ctime_nsecs: 4, dev: 5, ino: 6, uid: 7, gid: 8 };
        let id = ObjectId::from_hex(b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391").expect("hex");
        d.paths.insert(b"a b/\n c".to_vec(), Some(Entry { id, executable: true, size: 9, stat }));
        d.paths.insert(b"gone".to_vec(), None);
        assert_eq!(Delta::parse(&d.to_bytes()), Some(d.clone()));
        assert_eq!(Delta::parse(b""), Some(Delta::default()));
        assert_eq!(Delta::parse(b"* 61 ;\n"), None, "a record of another version");
        assert_eq!(Delta::parse(b"+ nothex ;\n"), None);
        // A tail torn by a crash, and a torn line another append continued: not records.
        let mut torn = d.to_bytes();
        torn.extend_from_slice(b"- 6162");
        assert_eq!(Delta::parse(&torn), Some(d.clone()));
        torn.extend_from_slice(b"\n- 63 ;\n");
        let mut more = d.clone();
        more.paths.insert(b"c".to_vec(), None);
        assert_eq!(Delta::parse(&torn), Some(more));
    }
}
