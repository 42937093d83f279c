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

/// An optional duration as fractional seconds, or `null`.
pub fn opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// The JSON schemas of these forms, for `#[schemars(with = …)]` on fields serialized by the
/// functions above (the output types derive [`schemars::JsonSchema`]; `docs/schema` is
/// generated from them).
pub mod schema {
    use std::borrow::Cow;

    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

    /// An object id: 40 lowercase hex digits ([`super::id`]).
    pub struct ObjectId;

    impl JsonSchema for ObjectId {
        fn schema_name() -> Cow<'static, str> {
            "objectId".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "pattern": "^[0-9a-f]{40}$",
                "description": "A git object id (SHA-1): 40 lowercase hexadecimal digits."
            })
        }
    }

    /// Seconds, fractional ([`super::secs`]).
    pub struct Seconds;

    impl JsonSchema for Seconds {
        fn inline_schema() -> bool {
            true
        }
        fn schema_name() -> Cow<'static, str> {
            "seconds".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "number", "minimum": 0 })
        }
    }

    /// A path relative to the target root in its JSON form ([`crate::path::json_form`]).
    pub struct Path;

    impl JsonSchema for Path {
        fn schema_name() -> Cow<'static, str> {
            "path".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "description": "A path relative to the target root, `/`-separated, without a leading `/`. A name that is not UTF-8, or holds `\"` or `\\`, is written C-quoted like git's core.quotePath: the whole path in double quotes with octal escapes (see docs/json.md)."
            })
        }
    }

    impl JsonSchema for crate::path::RelPath {
        fn schema_name() -> Cow<'static, str> {
            "path".into()
        }
        fn json_schema(generator: &mut SchemaGenerator) -> Schema {
            Path::json_schema(generator)
        }
    }
}
