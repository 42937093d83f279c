//! Slices of a tree, for a rolling verify: a full verify spread over N runs
//! ([`crate::verify::Options::slice`]), so that checking a large tree on a NAS is N small bursts
//! of lookups instead of one large one.
//!
//! # The partition
//!
//! Each directory of the tree (the root too) belongs to exactly one slice, chosen by a hash of
//! its path ([`Slice::of_dir`]). A slice checks the listing of each of its directories (so the
//! extras in them are found) and every path directly in them (files, symlinks,
//! subdirectories as entries). So every path and every directory's listing is checked in
//! exactly one of the N slices, and their union is the whole tree:
//! - *cheap*: a slice lists only its own directories; reaching one costs lookups of its
//!   ancestors, nothing else of the target is listed or stat'ed;
//! - *stable*: a directory's slice depends on its path alone, so adding or removing a
//!   directory moves no other one;
//! - *balanced* by directories (each lands in a slice with probability 1/N): slices cost about
//!   the same when directories are of similar size; one huge directory stays in one slice.
//!
//! Slices are numbered from 1 ("slice 2 of 4" is `2/4`).
//!
//! # The rolling position
//!
//! [`start`] picks the slice to check ([`Pick::Next`]: the one after the last checked, kept in
//! the target's `.treesync/verify-slice`); [`finish`] records it as checked, and records when
//! a full cycle (slices 1 to N, in order) completed.

use serde::{Deserialize, Serialize};

use crate::backend::{self, Backend};

/// The auxiliary file of the state folder that keeps the rolling position.
pub const POSITION_FILE: &str = "verify-slice";

/// Slice `k` of `n` (`1 <= k <= n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Slice {
    /// Which slice, from 1.
    pub k: u32,
    /// Of how many.
    pub n: u32,
}

impl std::fmt::Display for Slice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// Which slice a run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// This one.
    One(Slice),
    /// The one after the slice last checked with `Next` of the same `n` (the first if none):
    /// a rolling verify.
    Next {
        /// Of how many slices.
        n: u32,
    },
}

impl std::str::FromStr for Pick {
    type Err = Error;

    /// `K/N` (1 ≤ K ≤ N) or `next/N`.
    fn from_str(s: &str) -> Result<Pick, Error> {
        let bad = |reason: &str| Error::Invalid { given: s.to_string(), reason: reason.to_string() };
        let (k, n) = s.split_once('/').ok_or_else(|| bad("expected K/N or next/N"))?;
        let n: u32 = n.trim().parse().map_err(|_| bad("N is not a number"))?;
        if n == 0 {
            return Err(bad("N must be at least 1"));
        }
        match k.trim() {
            "next" => Ok(Pick::Next { n }),
            k => {
                let k: u32 = k.parse().map_err(|_| bad("K is neither a number nor `next`"))?;
                Ok(Pick::One(Slice::new(k, n)?))
            }
        }
    }
}

impl Slice {
    /// Slice `k` of `n`; an error unless `1 <= k <= n`.
    pub fn new(k: u32, n: u32) -> Result<Slice, Error> {
        if n == 0 || k == 0 || k > n {
            return Err(Error::Invalid {
                given: format!("{k}/{n}"),
                reason: format!("slices are numbered 1 to N: 1/{n} … {n}/{n}", n = n.max(1)),
            });
        }
        Ok(Slice { k, n })
    }

    /// The slice (of `n`, from 1) the directory `dir` belongs to (`/`-separated, the root is
    /// empty): a hash of its path.
    pub fn of_dir(dir: &[u8], n: u32) -> u32 {
        // FNV-1a, then a 64-bit finalizer (splitmix64) so that every bit of the path reaches
        // the low bits the modulo keeps. Fixed forever: the slices must not move between
        // versions (a rolling cycle would check some directories twice and others never).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in dir {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        (h % u64::from(n.max(1))) as u32 + 1
    }

    /// Does this slice list the directory `dir`?
    pub fn has_dir(&self, dir: &[u8]) -> bool {
        Slice::of_dir(dir, self.n) == self.k
    }

    /// Does this slice check `path` (an entry of its directory's listing)?
    pub fn has_path(&self, path: &[u8]) -> bool {
        self.has_dir(parent(path))
    }
}

/// The directory `path` is in (`""`: the root).
pub fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => &path[..i],
        None => b"",
    }
}

/// The rolling position, as kept in [`POSITION_FILE`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rolling {
    /// Slices in a cycle.
    pub n: u32,
    /// The slice the next rolling run checks (from 1).
    pub next: u32,
    /// When the current cycle's slice 1 was checked (Unix seconds); `None` before that.
    pub cycle_started_unix: Option<u64>,
    /// When a cycle of all `n` slices, checked in order, last completed (Unix seconds); `None`:
    /// never yet.
    pub last_full_cycle_unix: Option<u64>,
}

/// The rolling position could not be read or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `--slice` was not `K/N` or `next/N`.
    #[error(
        "invalid slice {given:?}: {reason}\n  hint: write K/N (e.g. 2/24: slice 2 of 24, numbered from 1) or next/N (the slice after the last one checked)"
    )]
    Invalid {
        /// What was given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The target keeps no auxiliary files (an object store), so no position.
    #[error(
        "{target} cannot keep a rolling verify position (it keeps no files in .treesync/)\n  hint: name the slice yourself, `--slice K/N`, e.g. from your scheduler's run counter"
    )]
    NoPlace {
        /// The target.
        target: String,
    },
    /// Reading or writing the position.
    #[error("reading or writing the rolling verify position .treesync/{POSITION_FILE}")]
    Backend(#[source] backend::Error),
}

/// The position kept in `backend`, if any (an unreadable one counts as none: it only tells
/// where to go on, and starting a cycle over is safe).
pub async fn position(backend: &dyn Backend) -> Result<Option<Rolling>, Error> {
    if !backend.capabilities().aux_store {
        return Ok(None);
    }
    let bytes = backend.load_aux(POSITION_FILE).await.map_err(Error::Backend)?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}

/// The slice `pick` names on `backend`: for [`Pick::Next`], the one after the slice last
/// checked (slice 1 when there is no position, or one of another `n`).
pub async fn start(backend: &dyn Backend, pick: Pick) -> Result<Slice, Error> {
    match pick {
        Pick::One(s) => Ok(s),
        Pick::Next { n } => {
            if !backend.capabilities().aux_store {
                return Err(Error::NoPlace { target: backend.to_string() });
            }
            let k = match position(backend).await? {
                Some(r) if r.n == n && (1..=n).contains(&r.next) => r.next,
                _ => 1,
            };
            Slice::new(k, n)
        }
    }
}

/// Record that `slice` was checked by a rolling run at `now_unix`: the next one is the slice
/// after it (1 after N), and checking N after 1..N−1 in order completes a cycle. Returns the
/// position as kept.
pub async fn finish(backend: &dyn Backend, slice: Slice, now_unix: u64) -> Result<Rolling, Error> {
    if !backend.capabilities().aux_store {
        return Err(Error::NoPlace { target: backend.to_string() });
    }
    let before = position(backend).await?.unwrap_or_default();
    let after = advance(before, slice, now_unix);
    let bytes = serde_json::to_vec_pretty(&after).expect("a position serializes");
    backend.store_aux(POSITION_FILE, &bytes).await.map_err(Error::Backend)?;
    Ok(after)
}

/// The position after `slice` was checked at `now`.
pub fn advance(before: Rolling, slice: Slice, now: u64) -> Rolling {
    // Another N: a new cycle (a completed one of the old N still was one).
    let in_order = before.n == slice.n && before.next == slice.k;
    let mut cycle_started_unix = if in_order { before.cycle_started_unix } else { None };
    if slice.k == 1 {
        cycle_started_unix = Some(now);
    }
    let mut last_full_cycle_unix = before.last_full_cycle_unix;
    if slice.k == slice.n && cycle_started_unix.is_some() {
        last_full_cycle_unix = Some(now);
        cycle_started_unix = None;
    }
    Rolling { n: slice.n, next: slice.k % slice.n + 1, cycle_started_unix, last_full_cycle_unix }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_k_of_n_and_next() {
        assert_eq!("2/4".parse::<Pick>().expect("valid"), Pick::One(Slice { k: 2, n: 4 }));
        assert_eq!("next/24".parse::<Pick>().expect("valid"), Pick::Next { n: 24 });
        for bad in ["0/4", "5/4", "1/0", "4", "x/4", "next/0", "2/y"] {
            let e = bad.parse::<Pick>().expect_err(bad).to_string();
            assert!(e.contains("hint: write K/N"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_directory_is_in_exactly_one_slice_and_slices_are_balanced() {
        let dirs: Vec<Vec<u8>> = (0..4000).map(|i| format!("d{}/sub{}", i / 40, i % 40).into_bytes()).collect();
        for n in [1u32, 2, 3, 7, 24] {
            let mut counts = vec![0u32; n as usize];
            for d in &dirs {
                let k = Slice::of_dir(d, n);
                assert!((1..=n).contains(&k));
                let owners = (1..=n).filter(|k| Slice { k: *k, n }.has_dir(d)).count();
                assert_eq!(owners, 1, "{d:?} in exactly one slice of {n}");
                counts[(k - 1) as usize] += 1;
            }
            let mean = dirs.len() as f64 / f64::from(n);
            for c in &counts {
                assert!((f64::from(*c) - mean).abs() <= mean * 0.25, "slices of {n}: {counts:?}");
            }
        }
    }

    #[test]
    fn a_directory_keeps_its_slice() {
        // Fixed values: the hash must never change between versions (a rolling cycle would
        // check some directories twice and others never).
        let of = |n| ["", "a", "a/b", "src/lib"].map(|d| Slice::of_dir(d.as_bytes(), n));
        assert_eq!(of(24), [4, 17, 6, 8]);
        assert_eq!(of(4), [4, 1, 2, 4]);
        assert!(Slice { k: 6, n: 24 }.has_path(b"a/b/file.txt"));
        assert!(Slice { k: 4, n: 24 }.has_path(b"README"));
    }

    #[test]
    fn advancing_wraps_and_completes_a_cycle_only_in_order() {
        let s = |k| Slice { k, n: 3 };
        let mut r = Rolling::default();
        r = advance(r, s(1), 10);
        assert_eq!((r.next, r.cycle_started_unix, r.last_full_cycle_unix), (2, Some(10), None));
        r = advance(r, s(2), 11);
        r = advance(r, s(3), 12);
        assert_eq!((r.next, r.cycle_started_unix, r.last_full_cycle_unix), (1, None, Some(12)));
        // Starting in the middle (another N before): no cycle until 1..N ran in order.
        let r = advance(Rolling { n: 5, next: 2, ..Default::default() }, s(3), 20);
        assert_eq!((r.next, r.last_full_cycle_unix), (1, None));
        let r = advance(advance(r, s(1), 21), s(3), 22);
        assert_eq!(r.last_full_cycle_unix, None, "slice 2 was skipped");
    }
}
