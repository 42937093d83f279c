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
    /// Its tree, or the tree of one of its directories (a subtree sync, `REV:PATH`).
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
    /// That commit's tree, or the tree of one of its directories (a subtree sync, `REV:PATH`).
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
    /// The directory of `to_commit` whose tree `to_tree` is (a subtree sync: `REV:PATH` or
    /// `--path`); absent for the whole tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_path: Option<String>,
    /// The conversion settings it writes files with ([`SyncState::conversions`]); absent in
    /// journals of versions before conversions (which wrote blobs as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_conversions: Option<crate::convert::Settings>,
    /// The paths it writes (`--include`/`--exclude`); absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_select: Option<crate::select::Select>,
    /// It fills gitlinks with their submodules' trees (`--recurse-submodules`); absent: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recurse_submodules: bool,
    /// When it started.
    pub started_unix: u64,
    /// Who is running it; `None` once it stopped with an error (so the next run need not wait).
    /// Written as three fields beside the others, as every version wrote them: `holder` (its
    /// line, e.g. `pid 4242 on build-01, started at unix time 1796006406`), `host` and `pid`
    /// (null when released); see [`journal_holder`] for how they are read back.
    #[serde(flatten, with = "journal_holder")]
    #[schemars(with = "journal_holder::Fields")]
    pub holder: Option<Holder>,
}

pub use treesync_backend::lock::{Holder, hostname, now_unix};

impl InProgress {
    /// Record `holder` as running this transition.
    pub fn held_by(self, holder: &Holder) -> InProgress {
        InProgress { holder: Some(holder.clone()), ..self }
    }

    /// Record whether this transition fills gitlinks with their submodules' trees.
    pub fn recursing(self, recurse_submodules: bool) -> InProgress {
        InProgress { recurse_submodules, ..self }
    }

    /// Record the paths this transition selects (`None`: all).
    pub fn selecting(self, to_select: Option<crate::select::Select>) -> InProgress {
        InProgress { to_select, ..self }
    }
}

/// The journal's holder as the state file (and `status --json`) spells it: the `holder` line
/// with `host` and `pid` beside it, all three null when nobody holds the entry.
///
/// Read back: a null (or absent) `holder` is released, whatever `host` and `pid` say (earlier
/// versions kept them when they released an entry). Otherwise the line gives the holder, and
/// `host` and `pid`, when both are there, take precedence over what the line says (they are
/// what stale-holder detection compares). A line treesync did not write, with `host` and
/// `pid`, gives a holder that started at unix time 0; without them the state file is refused
/// (no version of treesync wrote one).
pub mod journal_holder {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Holder;

    /// The three fields as they are written (and their schema).
    #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    pub struct Fields {
        /// Who ran it, e.g. `pid 4242 on build-01, started at unix time 1796006406`; null once
        /// it stopped with an error it recorded (object stores), so the next run need not wait
        /// for its lease.
        #[serde(default)]
        holder: Option<String>,
        /// The host name of the holder; null as for `holder`.
        #[serde(default)]
        host: Option<String>,
        /// The process id of the holder on `host`; null as for `holder`.
        #[serde(default)]
        pid: Option<u32>,
    }

    /// Write `holder` as the three fields.
    pub fn serialize<S: Serializer>(holder: &Option<Holder>, s: S) -> Result<S::Ok, S::Error> {
        match holder {
            Some(h) => Fields { holder: Some(h.to_string()), host: Some(h.host.clone()), pid: Some(h.pid) },
            None => Fields { holder: None, host: None, pid: None },
        }
        .serialize(s)
    }

    /// Read the three fields (see the [module docs](self)).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Holder>, D::Error> {
        let f = Fields::deserialize(d)?;
        let Some(line) = f.holder else { return Ok(None) };
        let parsed = Holder::parse(&line);
        match (f.host, f.pid, parsed) {
            (Some(host), Some(pid), parsed) => Ok(Some(Holder { pid, host, started: parsed.map_or(0, |h| h.started) })),
            (_, _, Some(parsed)) => Ok(Some(parsed)),
            (_, _, None) => Err(serde::de::Error::custom(format_args!(
                "in_progress.holder {line:?} is not a holder line treesync writes (`pid N on HOST, started at unix time T`) and no host and pid are given"
            ))),
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
    /// The directory of the synced commit whose tree the target holds (a subtree sync:
    /// `REV:PATH` or `--path`), e.g. `docs`; absent for the whole tree (and in state files of
    /// versions before subtree syncs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The repository-wide conversion settings the synced tree's files were written with
    /// (`.gitattributes` conversions, see [`crate::convert::Settings`]); absent in state files
    /// of versions before conversions, whose files are their blobs as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversions: Option<crate::convert::Settings>,
    /// The paths the target holds were selected by these `--include`/`--exclude` patterns;
    /// absent: every path of the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select: Option<crate::select::Select>,
    /// With `--export`: the files whose `$Format:…$` placeholders were expanded; they name the
    /// commit, so the next sync to another commit writes them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub export_subst: Vec<String>,
    /// The gitlinks of the synced tree hold their submodules' trees (`--recurse-submodules`);
    /// absent (state files of earlier versions): false, they are empty directories.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recurse_submodules: bool,
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
    use serde_json::Value;

    fn entry(json: &str) -> InProgress {
        let state = format!(
            r#"{{"version":1,"synced":null,"backend":"local","in_progress":{{"from_tree":null,
            "to_commit":"{z}","to_tree":"{z}","takeover":false,"started_unix":5,{json}}}}}"#,
            z = "0".repeat(40)
        );
        SyncState::parse(state.as_bytes()).expect("parses").in_progress.expect("in progress")
    }

    #[test]
    fn a_subtree_path_is_written_only_for_a_subtree_and_old_files_read_without_it() {
        let z = "0".repeat(40);
        let old = format!(
            r#"{{"version":1,"synced":{{"commit":"{z}","tree":"{z}","at_unix":1}},"in_progress":null,"backend":"local"}}"#
        );
        let state = SyncState::parse(old.as_bytes()).expect("a state file without path parses");
        assert_eq!(state.path, None);
        assert!(!String::from_utf8_lossy(&state.to_bytes()).contains("path"), "no path for the whole tree");
        let sub = SyncState { path: Some("docs".into()), ..state };
        let back = SyncState::parse(&sub.to_bytes()).expect("round trip");
        assert_eq!(back.path.as_deref(), Some("docs"));
        let p = entry(r#""holder":null,"to_path":"docs/guide""#);
        assert_eq!(p.to_path.as_deref(), Some("docs/guide"));
        assert_eq!(entry(r#""holder":null"#).to_path, None);
    }

    #[test]
    fn journal_holders_of_every_version_read_as_fields() {
        // This version: written as the line and the fields, read back the same.
        let h = Holder { pid: 42, host: "box".into(), started: 7 };
        let p = entry(r#""holder":null,"host":null,"pid":null"#).held_by(&h);
        assert_eq!(p.holder, Some(h.clone()));
        let back = SyncState::parse(
            &SyncState {
                version: VERSION,
                synced: None,
                in_progress: Some(p),
                path: None,
                conversions: None,
                select: None,
                export_subst: Vec::new(),
                recurse_submodules: false,
                backend: "local".into(),
            }
            .to_bytes(),
        )
        .expect("round trip");
        assert_eq!(back.in_progress.and_then(|p| p.holder), Some(h));
        // An entry with the line only (no host and pid fields).
        let p = entry(r#""holder":"pid 4242 on elsewhere, started at unix time 1796000000""#);
        assert_eq!(p.holder, Some(Holder { pid: 4242, host: "elsewhere".into(), started: 1_796_000_000 }));
        // The fields take precedence over the line.
        let p = entry(r#""holder":"pid 4242 on elsewhere, started at unix time 9","host":"box","pid":1"#);
        assert_eq!(p.holder, Some(Holder { pid: 1, host: "box".into(), started: 9 }));
        // Fields with a line this version did not write: the fields count, started unknown.
        let p = entry(r#""holder":"h","host":"elsewhere","pid":1"#);
        assert_eq!(p.holder, Some(Holder { pid: 1, host: "elsewhere".into(), started: 0 }));
        // Released (the sync stopped with an error): nobody holds it, whatever the fields say
        // (earlier versions kept them), and none of the three is written.
        let p = entry(r#""holder":null,"host":"elsewhere","pid":1"#);
        assert_eq!(p.holder, None);
        let p = entry(r#""repair":false"#);
        assert_eq!(p.holder, None, "an entry from before the holder fields existed");
        let json = serde_json::to_value(&p).expect("serializes");
        assert_eq!((&json["holder"], &json["host"], &json["pid"]), (&Value::Null, &Value::Null, &Value::Null));
    }

    #[test]
    fn a_line_no_treesync_wrote_without_fields_is_refused() {
        let state = format!(
            r#"{{"version":1,"synced":null,"backend":"local","in_progress":{{"from_tree":null,
            "to_commit":"{z}","to_tree":"{z}","takeover":false,"started_unix":5,"holder":"someone"}}}}"#,
            z = "0".repeat(40)
        );
        let e = SyncState::parse(state.as_bytes()).expect_err("refused");
        assert!(e.to_string().contains("\"someone\" is not a holder line treesync writes"), "{e}");
    }

    /// The bytes of a state file the previous version wrote for an interrupted S3 sync (the
    /// holder line, host and pid; `repair` absent as before it existed): read with the holder
    /// as fields, and written back byte for byte the same.
    #[test]
    fn a_state_file_of_the_previous_version_reads_and_writes_back_the_same() {
        let old = br#"{
  "version": 1,
  "synced": {
    "commit": "1111111111111111111111111111111111111111",
    "tree": "2222222222222222222222222222222222222222",
    "at_unix": 1796000000
  },
  "in_progress": {
    "from_tree": "2222222222222222222222222222222222222222",
    "to_commit": "3333333333333333333333333333333333333333",
    "to_tree": "4444444444444444444444444444444444444444",
    "takeover": false,
    "repair": false,
    "started_unix": 1796000100,
    "holder": "pid 4242 on build-01, started at unix time 1796000099",
    "host": "build-01",
    "pid": 4242
  },
  "backend": "s3"
}
"#;
        let state = SyncState::parse(old).expect("the previous version's state file reads");
        let p = state.in_progress.as_ref().expect("in progress");
        assert_eq!(p.holder, Some(Holder { pid: 4242, host: "build-01".into(), started: 1_796_000_099 }));
        assert_eq!(p.started_unix, 1_796_000_100);
        assert_eq!(String::from_utf8_lossy(&state.to_bytes()), String::from_utf8_lossy(old), "written back the same");
    }
}
