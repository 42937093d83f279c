//! `docs/schema/*.schema.json` are generated from the output types (`schemars`): this test
//! fails when a file differs from what the types say, and rewrites the files when run with
//! `UPDATE_SCHEMAS=1`:
//!
//! ```sh
//! UPDATE_SCHEMAS=1 cargo test -p treesync-cli --bin treesync docs_schema
//! ```
//!
//! The generator follows the conventions of the documents: every field an output always has
//! is required (`null` where it may be absent: schemars' serialize contract), unknown fields
//! are refused, shared definitions are named in lowerCamelCase, and each document says what
//! prints it.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value};

use crate::cmd::{adopt::AdoptOutput, document::SyncOutput, plan::PlanOutput, status::StatusOutput};
use crate::cmd::{verify::VerifyOutput, watch::WatchLine};

/// One document: its file name, its title and description, and its schema.
fn document<T: JsonSchema>(file: &str, title: &str, description: &str) -> (String, Value) {
    let schema: Schema = SchemaSettings::draft2020_12().for_serialize().into_generator().into_root_schema_for::<T>();
    let mut v = schema.to_value();
    tidy(&mut v, false);
    rename_defs(&mut v);
    let body = v.as_object_mut().expect("an object schema");
    let mut out = Map::new();
    out.insert("$schema".into(), body.remove("$schema").expect("$schema"));
    out.insert("$id".into(), Value::from(format!("https://example.invalid/treesync/schema/{file}")));
    out.insert("title".into(), title.into());
    body.remove("title");
    out.insert("description".into(), description.into());
    body.remove("description");
    out.extend(std::mem::take(body));
    (file.to_string(), Value::Object(out))
}

fn documents() -> Vec<(String, Value)> {
    vec![
        document::<SyncOutput<'static>>(
            "sync.schema.json",
            "treesync sync --json",
            "The outcome of `treesync sync --json`, printed on stdout when the sync succeeds (exit 0). On failure stdout is empty and the error is on stderr.",
        ),
        document::<PlanOutput<'static>>(
            "plan.schema.json",
            "treesync plan --json",
            "What `treesync plan --json` prints on stdout: what `treesync sync` would do, changing nothing.",
        ),
        document::<StatusOutput>(
            "status.schema.json",
            "treesync status --json",
            "What `treesync status --json` prints on stdout: what is synced at a target, and whether a sync was interrupted or is running. Reads the state and probes the lock; changes nothing.",
        ),
        document::<VerifyOutput<'static>>(
            "verify.schema.json",
            "treesync verify --json",
            "What `treesync verify --json` prints on stdout: whether the target holds exactly the synced tree, and with `--repair` what was fixed. Printed with exit 0 (clean, or repaired) and exit 1 (drift remains); nothing on stdout with exit 2.",
        ),
        document::<AdoptOutput<'static>>(
            "adopt.schema.json",
            "treesync adopt --json",
            "What `treesync adopt` recorded (or, with --dry-run, would record) as the target's synced state.",
        ),
        document::<WatchLine<'static>>(
            "watch-event.schema.json",
            "treesync watch --json: one object per line",
            "`treesync watch --json` prints one JSON object per line on stdout, one per event.",
        ),
    ]
}

/// Drop what the documents do not use (`format` of integers: the range says it) and refuse
/// unknown fields: `additionalProperties: false` on plain objects; on an object whose fields are
/// completed by `oneOf` alternatives (a flattened tagged enum), `unevaluatedProperties: false`
/// on it, since each alternative sees only its own fields.
fn tidy(v: &mut Value, in_alternative_of_object: bool) {
    match v {
        Value::Object(o) => {
            if o.get("format").and_then(Value::as_str).is_some_and(|f| f.starts_with("uint") || f.starts_with("int")) {
                o.remove("format");
            }
            if let Some(Value::String(d)) = o.get_mut("description") {
                *d = prose(d);
            }
            let has_props = o.contains_key("properties");
            let has_alternatives = o.contains_key("oneOf") || o.contains_key("anyOf");
            for (k, child) in o.iter_mut() {
                match k.as_str() {
                    "oneOf" | "anyOf" => {
                        for alt in child.as_array_mut().into_iter().flatten() {
                            tidy(alt, has_props);
                        }
                    }
                    _ => tidy(child, false),
                }
            }
            if has_props && !o.contains_key("additionalProperties") {
                if has_alternatives {
                    o.insert("unevaluatedProperties".into(), false.into());
                } else if !in_alternative_of_object {
                    o.insert("additionalProperties".into(), false.into());
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| tidy(x, false)),
        _ => {}
    }
}

/// A doc comment as a description: lines of a paragraph joined, rustdoc links as plain code
/// (`` [`Level::Stat`] `` → `` `Level::Stat` ``).
fn prose(doc: &str) -> String {
    let joined = doc
        .split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut out = String::with_capacity(joined.len());
    let mut rest = joined.as_str();
    while let Some(i) = rest.find("[`") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find("`]") {
            Some(j) => {
                out.push_str(&after[..=j]);
                rest = &after[j + 2..];
                // A link target that follows: [`x`](path) or [`x`][path].
                if let Some(r) = rest.strip_prefix('(').and_then(|r| r.split_once(')')) {
                    rest = r.1;
                }
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `OpCounts` → `opCounts` in `$defs` and every `$ref`.
fn rename_defs(v: &mut Value) {
    fn lower(name: &str) -> String {
        let mut c = name.chars();
        c.next().map(|f| f.to_lowercase().chain(c).collect()).unwrap_or_default()
    }
    fn walk(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get_mut("$ref")
                    && let Some(name) = r.strip_prefix("#/$defs/")
                {
                    *r = format!("#/$defs/{}", lower(name));
                }
                o.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    if let Some(Value::Object(defs)) = v.get_mut("$defs") {
        let old = std::mem::take(defs);
        defs.extend(old.into_iter().map(|(k, d)| (lower(&k), d)));
    }
    walk(v);
}

#[test]
fn docs_schema_is_generated_from_the_output_types() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema");
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (file, schema) in documents() {
        let text = serde_json::to_string_pretty(&schema).expect("a schema is JSON") + "\n";
        let path = dir.join(&file);
        if update {
            std::fs::write(&path, &text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/schema/{{{}}} differ from the output types; regenerate them with\n  UPDATE_SCHEMAS=1 cargo test -p treesync-cli --bin treesync docs_schema",
        stale.join(",")
    );
}
