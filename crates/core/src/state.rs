//! [`SyncState`]: what a target holds, kept in `.treesync/state` at its root.
//!
//! The journal is part of the state: before the first op of a sync the state says
//! `in_progress: from X to Y`, after the last op it says `synced: Y`. A sync that finds
//! `in_progress` finishes that transition first (every op is idempotent), so a killed run
//! never leaves a tree that is neither commit without the next run knowing how to finish it.

use gix_hash::ObjectId;
use serde::{Deserialize, Serialize};

/// The version of the state format written by this build.
pub const VERSION: u32 = 1;

/// A commit and its tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct Synced {
    /// The commit.
    #[serde(with = "hex")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub commit: ObjectId,
    /// Its tree.
    #[serde(with = "hex")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub tree: ObjectId,
    /// When it was reached (seconds since the epoch).
    pub at_unix: u64,
}

/// A sync that started and has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct InProgress {
    /// The tree the target held when it started (`None`: empty or taken over).
    #[serde(with = "hex_opt")]
    #[schemars(with = "Option<crate::json::schema::ObjectId>")]
    pub from_tree: Option<ObjectId>,
    /// The commit it was going to.
    #[serde(with = "hex")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub to_commit: ObjectId,
    /// That commit's tree.
    #[serde(with = "hex")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub to_tree: ObjectId,
    /// It was a takeover of an unmanaged target (`--force`), which must remove foreign entries.
    /// With `repair`: the repair removes entries the tree does not have.
    pub takeover: bool,
    /// It was a repair (`verify --repair`, or `sync --force` on a managed target): it is
    /// finished by comparing the target with `to_tree` again and repairing what differs,
    /// not by replaying a diff of two trees.
    #[serde(default)]
    pub repair: bool,
    /// When it started.
    pub started_unix: u64,
    /// Who is running it; `None` once it stopped with an error (so the next run need not wait).
    #[serde(default)]
    pub holder: Option<String>,
    /// The host and process id of the holder, to tell a dead holder on this host.
    #[serde(default)]
    pub host: Option<String>,
    /// See `host`.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// Who runs a sync: a process on a host, since a time. Written into lock files (as its
/// [`Display`](std::fmt::Display) line) and into the journal (as the `holder`, `host` and `pid`
/// fields of [`InProgress`]); read back with [`Holder::parse`], so that stale-lock detection
/// compares fields instead of searching free text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
pub struct Holder {
    /// The process id.
    pub pid: u32,
    /// The host's name (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// When the process took the lock (seconds since the epoch).
    pub started: u64,
}

impl Holder {
    /// This process, now.
    pub fn this_process() -> Holder {
        Holder { pid: std::process::id(), host: hostname(), started: now_unix() }
    }

    /// Read a holder line as [`Display`](std::fmt::Display) writes it (`pid 42 on host, started
    /// at unix time 1796000000`; earlier versions wrote the same line). `None` for anything else.
    pub fn parse(line: &str) -> Option<Holder> {
        let rest = line.trim().strip_prefix("pid ")?;
        let (pid, rest) = rest.split_once(" on ")?;
        let (host, started) = rest.rsplit_once(", started at unix time ")?;
        Some(Holder {
            pid: pid.trim().parse().ok()?,
            host: host.trim().to_string(),
            started: started.trim().parse().ok()?,
        })
    }

    /// The holder a lock file names, if it holds a holder line treesync wrote (padding and a
    /// final newline allowed); `None` for anything else (empty, binary, someone else's file),
    /// which is then never shown. The one reader of lock files, for all three locks (the local
    /// and the mounted NFS backend's `.treesync/lock`, the `nfs://` client's `lock.nfs`).
    pub fn from_lock_file(bytes: &[u8]) -> Option<Holder> {
        let text = std::str::from_utf8(bytes).ok()?.trim();
        if text.chars().any(|c| c.is_control()) {
            return None;
        }
        Holder::parse(text)
    }

    /// Is this holder a process of this host that no longer runs? (A holder on another host
    /// cannot be checked: `false`.)
    pub fn is_gone_here(&self) -> bool {
        self.host == hostname() && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {}, started at unix time {}", self.pid, self.host, self.started)
    }
}

/// This machine's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown host".into())
}

impl InProgress {
    /// Record `holder` as running this transition (the `holder`, `host` and `pid` fields).
    pub fn held_by(self, holder: &Holder) -> InProgress {
        InProgress { holder: Some(holder.to_string()), host: Some(holder.host.clone()), pid: Some(holder.pid), ..self }
    }

    /// The holder of this transition as fields: from `host` and `pid` (and the start time the
    /// holder line gives, else `started_unix`), or, for entries that have only the line, from
    /// the line. `None` when nobody holds it (it stopped with an error) or the entry does not
    /// say who.
    pub fn holder(&self) -> Option<Holder> {
        let line = self.holder.as_deref()?;
        let parsed = Holder::parse(line);
        match (&self.host, self.pid) {
            (Some(host), Some(pid)) => Some(Holder {
                pid,
                host: host.clone(),
                started: parsed.map(|h| h.started).unwrap_or(self.started_unix),
            }),
            _ => parsed,
        }
    }
}

/// The whole state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "state")]
pub struct SyncState {
    /// Format version.
    pub version: u32,
    /// What the target held after the last completed sync.
    pub synced: Option<Synced>,
    /// A sync that has not finished, if any.
    pub in_progress: Option<InProgress>,
    /// The backend that wrote it, e.g. `local`.
    pub backend: String,
}

/// The state file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// It is not a state file (damaged, or something else in its place).
    #[error(
        "the state file .treesync/state is unreadable: {source}\n  hint: if the target was damaged, sync again with --force to take it over anew"
    )]
    Json {
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// A newer treesync wrote it.
    #[error(
        "the state file .treesync/state is unreadable: it has format version {found}, this treesync understands up to {VERSION}\n  hint: upgrade treesync"
    )]
    Version {
        /// The version it has.
        found: u32,
    },
}

impl SyncState {
    /// Parse the state file.
    pub fn parse(bytes: &[u8]) -> Result<SyncState, ParseError> {
        let s: SyncState = serde_json::from_slice(bytes).map_err(|source| ParseError::Json { source })?;
        if s.version > VERSION {
            return Err(ParseError::Version { found: s.version });
        }
        Ok(s)
    }

    /// Serialize the state file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("state serializes");
        v.push(b'\n');
        v
    }

    /// The tree the target is known to be based on: the synced tree, or for an interrupted
    /// sync, the tree it started from.
    pub fn base_tree(&self) -> Option<ObjectId> {
        match &self.in_progress {
            Some(p) => p.from_tree,
            None => self.synced.map(|s| s.tree),
        }
    }
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

mod hex {
    use gix_hash::ObjectId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &ObjectId, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(id)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectId, D::Error> {
        let s = String::deserialize(d)?;
        ObjectId::from_hex(s.as_bytes()).map_err(serde::de::Error::custom)
    }
}

mod hex_opt {
    use gix_hash::ObjectId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &Option<ObjectId>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => s.collect_str(id),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ObjectId>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| ObjectId::from_hex(s.as_bytes()).map_err(serde::de::Error::custom)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(json: &str) -> InProgress {
        let state = format!(
            r#"{{"version":1,"synced":null,"backend":"local","in_progress":{{"from_tree":null,
            "to_commit":"{z}","to_tree":"{z}","takeover":false,"started_unix":5,{json}}}}}"#,
            z = "0".repeat(40)
        );
        SyncState::parse(state.as_bytes()).expect("parses").in_progress.expect("in progress")
    }

    #[test]
    fn journal_holders_of_every_version_read_as_fields() {
        // This version: the line and the fields.
        let h = Holder { pid: 42, host: "box".into(), started: 7 };
        let p = entry(r#""holder":null,"host":null,"pid":null"#).held_by(&h);
        assert_eq!(p.holder(), Some(h.clone()));
        let back = SyncState::parse(
            &SyncState { version: VERSION, synced: None, in_progress: Some(p), backend: "local".into() }.to_bytes(),
        )
        .expect("round trip");
        assert_eq!(back.in_progress.and_then(|p| p.holder()), Some(h));
        // An entry with the line only (no host and pid fields).
        let p = entry(r#""holder":"pid 4242 on elsewhere, started at unix time 1796000000""#);
        assert_eq!(p.holder(), Some(Holder { pid: 4242, host: "elsewhere".into(), started: 1_796_000_000 }));
        // Fields with a line this version did not write: the fields count, started from the entry.
        let p = entry(r#""holder":"h","host":"elsewhere","pid":1"#);
        assert_eq!(p.holder(), Some(Holder { pid: 1, host: "elsewhere".into(), started: 5 }));
        // Released (the sync stopped with an error): nobody holds it.
        let p = entry(r#""holder":null,"host":"elsewhere","pid":1"#);
        assert_eq!(p.holder(), None);
    }
}
