//! The record of a target's generations, `HOME/generations` (JSON).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Switch;

/// The record file of a target's generations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    /// The format version (1).
    pub version: u32,
    /// How the target is switched, once decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<Switch>,
    /// The number of the next new slot (`gN`).
    pub next: u64,
    /// The slots of the home by name. The current generation in symlink mode is one of them;
    /// in exchange mode it is the target itself and every slot is retired or being prepared.
    pub slots: BTreeMap<String, SlotRecord>,
    /// The slot the target is being switched to: set before the switch, cleared after. A run
    /// that finds it set cannot tell whether the switch happened, so it treats that slot as
    /// having been current a moment ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switching: Option<String>,
    /// The record as its file holds it (as read, or as written last by this process), so an
    /// unchanged record is not written again.
    #[serde(skip)]
    #[schemars(skip)]
    pub stored: Option<Vec<u8>>,
}

/// What the record says of one slot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlotRecord {
    /// When it stopped being current (seconds since the epoch); `None` while current or being
    /// prepared, `0` for a slot that was never current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired: Option<u64>,
    /// A sync is preparing it (it is not complete until it is switched to).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preparing: bool,
    /// It is being copied from another generation (a copy cut short is removed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cloning: bool,
}

impl Record {
    /// A new record.
    pub fn new() -> Self {
        Record { version: 1, next: 1, ..Default::default() }
    }

    /// Parse a record file.
    pub fn parse(bytes: &[u8]) -> Result<Record, String> {
        let r: Record = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if r.version != 1 {
            return Err(format!("version {} (this treesync knows version 1)", r.version));
        }
        Ok(r)
    }

    /// The record as its file holds it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a record serializes");
        v.push(b'\n');
        v
    }

    /// A new slot name, `gN`.
    pub fn new_slot(&mut self) -> String {
        self.next = self.next.max(1);
        let name = format!("g{}", self.next);
        self.next += 1;
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_refuses_other_versions() {
        let mut r = Record::new();
        assert_eq!(r.new_slot(), "g1");
        r.slots.insert("g1".into(), SlotRecord { retired: Some(5), ..Default::default() });
        r.switch = Some(Switch::Exchange);
        let back = Record::parse(&r.to_bytes()).expect("parses");
        assert_eq!(back, r);
        assert!(String::from_utf8_lossy(&r.to_bytes()).contains("\"switch\": \"exchange\""));
        assert!(Record::parse(br#"{"version":2,"next":1,"slots":{}}"#).expect_err("v2").contains("version 2"));
    }
}
