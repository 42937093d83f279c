//! How core's output types appear in JSON (`--json`, docs/json.md): object ids as full hex
//! strings, durations as seconds. One place for each, used by `#[serde(serialize_with)]`.

use std::time::Duration;

use gix_hash::ObjectId;

/// An object id as its full hex string.
pub fn id<S: serde::Serializer>(id: &ObjectId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

/// An optional object id as its hex string, or `null`.
pub fn opt_id<S: serde::Serializer>(id: &Option<ObjectId>, s: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => s.collect_str(id),
        None => s.serialize_none(),
    }
}

/// A duration as fractional seconds.
pub fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
