//! Holds the CLI's `--json` output to the JSON Schemas in `docs/schema/`, with the
//! [`jsonschema`] crate, and says what is wrong in lines a test failure can show.
//!
//! A schema must declare the draft it is written for (`$schema`, one the crate bundles) and is
//! checked against that draft's meta-schema before any value is looked at: a schema with a
//! misspelt type, a malformed keyword value or (for draft 2020-12) a keyword the draft does not
//! know — which it would silently ignore — is reported, not half applied. The crate is used
//! without its HTTP and file resolving: the schemas are self-contained (`$ref` to `#/$defs/…`).

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, ValidationError};
use serde_json::Value;

/// Validate `value` against `schema`. On failure, every violation, each starting with the JSON
/// pointer of the offending part of `value` (RFC 6901; `(root)` for the whole document); when
/// no alternative of a `oneOf`/`anyOf` matches, the violations of the closest one follow,
/// indented. If the schema itself is at fault (no or an unknown `$schema`, or it breaks its
/// draft's meta-schema), every such problem, starting with `schema ` and the pointer into the
/// schema.
pub fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let validator = validator(schema)?;
    let errors: Vec<String> = validator.iter_errors(value).flat_map(|e| render(&e, "")).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// The validator for `schema`, after checking it against the meta-schema of the draft it
/// declares.
fn validator(schema: &Value) -> Result<jsonschema::Validator, Vec<String>> {
    let declared = schema.get("$schema").and_then(Value::as_str);
    let Some(draft) = declared.and_then(draft_of) else {
        return Err(vec![match declared {
            None => "schema #: declares no draft: add \"$schema\": \"https://json-schema.org/draft/2020-12/schema\""
                .to_string(),
            Some(other) => format!(
                "schema #: declares the unknown draft {other:?}: use \"https://json-schema.org/draft/2020-12/schema\""
            ),
        }]);
    };
    let meta = jsonschema::meta::validator_for(schema).map_err(|e| vec![format!("schema #: {e}")])?;
    let mut problems: Vec<String> = meta
        .iter_errors(schema)
        .map(|e| format!("schema #{}: {e} (against the meta-schema of {draft:?})", e.instance_path()))
        .collect();
    if draft == Draft::Draft202012 {
        unknown_keywords(schema, "#", &mut problems);
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    jsonschema::options()
        .with_draft(draft)
        .build(schema)
        .map_err(|e| vec![format!("schema #{}: {e}", e.instance_path())])
}

/// The keywords of draft 2020-12's vocabularies (core, applicator, unevaluated, validation,
/// meta-data, format annotation, content).
const KEYWORDS_2020_12: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "$comment",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "items",
    "prefixItems",
    "contains",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "unevaluatedItems",
    "unevaluatedProperties",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// Keywords the draft does not know, anywhere in `schema`: the draft ignores them, so a
/// misspelt `requried` would check nothing and say nothing.
fn unknown_keywords(schema: &Value, at: &str, out: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else { return };
    for (key, v) in obj {
        let here = format!("{at}/{}", escape(key));
        if !KEYWORDS_2020_12.contains(&key.as_str()) {
            out.push(format!("schema {at}: unknown keyword {key:?} (draft 2020-12 would ignore it)"));
            continue;
        }
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "dependentSchemas" => {
                for (name, sub) in v.as_object().into_iter().flatten() {
                    unknown_keywords(sub, &format!("{here}/{}", escape(name)), out);
                }
            }
            "prefixItems" | "allOf" | "anyOf" | "oneOf" => {
                for (i, sub) in v.as_array().into_iter().flatten().enumerate() {
                    unknown_keywords(sub, &format!("{here}/{i}"), out);
                }
            }
            "items"
            | "additionalProperties"
            | "propertyNames"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "contentSchema" => unknown_keywords(v, &here, out),
            _ => {}
        }
    }
}

/// The draft a `$schema` URI names, if the crate bundles it.
fn draft_of(uri: &str) -> Option<Draft> {
    Some(Draft::from_schema_uri(uri)).filter(|d| *d != Draft::Unknown)
}

/// One violation as lines: `POINTER: what is wrong`, then, for a failed `oneOf`/`anyOf`, the
/// violations of its closest alternative indented below it.
fn render(error: &ValidationError<'_>, indent: &str) -> Vec<String> {
    let ptr = error.instance_path().to_string();
    let at = |p: &str, msg: String| format!("{indent}{}: {msg}", if p.is_empty() { "(root)" } else { p });
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().map_or_else(|| property.to_string(), |s| format!("{s:?}"));
            vec![at(&ptr, format!("required property {name} is missing"))]
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|name| {
                at(
                    &format!("{ptr}/{}", escape(name)),
                    "is not an allowed property (additionalProperties: false)".into(),
                )
            })
            .collect(),
        ValidationErrorKind::OneOfNotValid { context } => none_matched("oneOf", context, &ptr, indent),
        ValidationErrorKind::AnyOf { context } => none_matched("anyOf", context, &ptr, indent),
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            vec![at(&ptr, "matches more than one alternative of oneOf, but exactly one must match".into())]
        }
        ValidationErrorKind::FalseSchema => vec![at(&ptr, "no value is allowed here (false schema)".into())],
        _ => vec![at(&ptr, error.to_string())],
    }
}

/// No alternative matched: say so, with the violations of the closest one — of those that ask
/// for the value's type and carry its tag (see [`mismatch`]), the one with the fewest.
fn none_matched(keyword: &str, branches: &[Vec<ValidationError<'static>>], ptr: &str, indent: &str) -> Vec<String> {
    let here = if ptr.is_empty() { "(root)" } else { ptr };
    let Some(best) = (0..branches.len()).min_by_key(|i| (mismatch(&branches[*i], ptr), branches[*i].len())) else {
        return vec![format!("{indent}{here}: matches none of the alternatives of {keyword}")];
    };
    let mut out = vec![format!(
        "{indent}{here}: matches none of the {} alternatives of {keyword}; the closest, #{best}, fails with:",
        branches.len()
    )];
    let deeper = format!("{indent}  ");
    out.extend(branches[best].iter().flat_map(|e| render(e, &deeper)));
    out
}

/// How far off an alternative is at `ptr`, judged by its violations: 2 if it asks for another
/// type than the value's (`null` against an object), 1 if the value carries another tag (a
/// property of it fails a `const`, as `{"op": {"const": "write"}}` does for a mkdir), else 0.
fn mismatch(errors: &[ValidationError<'_>], ptr: &str) -> u8 {
    let at_value = |e: &ValidationError<'_>| e.instance_path().to_string() == ptr;
    let at_property = |e: &ValidationError<'_>| {
        let p = e.instance_path().to_string();
        p.strip_prefix(ptr).and_then(|rest| rest.strip_prefix('/')).is_some_and(|name| !name.contains('/'))
    };
    if errors.iter().any(|e| at_value(e) && matches!(e.kind(), ValidationErrorKind::Type { .. })) {
        2
    } else if errors.iter().any(|e| at_property(e) && matches!(e.kind(), ValidationErrorKind::Constant { .. })) {
        1
    } else {
        0
    }
}

/// One reference token of a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

    fn with_draft(mut schema: Value) -> Value {
        schema["$schema"] = json!(DRAFT);
        schema
    }

    fn ok(schema: Value, value: Value) {
        if let Err(e) = validate(&with_draft(schema.clone()), &value) {
            panic!("{value} should satisfy {schema}: {e:?}");
        }
    }

    fn bad(schema: Value, value: Value, expected: &str) -> Vec<String> {
        let e = validate(&with_draft(schema.clone()), &value).expect_err(&format!("{value} should violate {schema}"));
        assert!(e.iter().any(|m| m.contains(expected)), "expected a violation containing {expected:?}: {e:?}");
        e
    }

    /// The schemas the CLI's output is held to.
    fn docs_schemas() -> Vec<(&'static str, Value)> {
        [
            ("adopt", include_str!("../../../docs/schema/adopt.schema.json")),
            ("plan", include_str!("../../../docs/schema/plan.schema.json")),
            ("status", include_str!("../../../docs/schema/status.schema.json")),
            ("sync", include_str!("../../../docs/schema/sync.schema.json")),
            ("verify", include_str!("../../../docs/schema/verify.schema.json")),
            ("watch-event", include_str!("../../../docs/schema/watch-event.schema.json")),
        ]
        .into_iter()
        .map(|(name, text)| (name, serde_json::from_str(text).expect("docs/schema holds JSON")))
        .collect()
    }

    #[test]
    fn docs_schemas_declare_a_draft_and_satisfy_its_meta_schema() {
        for (name, schema) in docs_schemas() {
            assert_eq!(schema["$schema"], DRAFT, "{name}");
            validator(&schema).unwrap_or_else(|e| panic!("docs/schema/{name}.schema.json: {e:?}"));
        }
    }

    #[test]
    fn docs_schemas_reject_a_wrong_document() {
        for (name, schema) in docs_schemas() {
            let e = validate(&schema, &json!({"surprise": 1})).expect_err("a document of nothing but an unknown field");
            assert!(e.iter().any(|m| m.trim_start().starts_with("(root): required property")), "{name}: {e:?}");
            let e = validate(&schema, &json!([])).expect_err("an array");
            assert!(e.iter().any(|m| m.trim_start().starts_with("(root): ")), "{name}: {e:?}");
        }
    }

    #[test]
    fn schema_without_or_with_an_unknown_draft_is_refused() {
        let e = validate(&json!({"type": "object"}), &json!({})).expect_err("no $schema");
        assert!(e[0].starts_with("schema #: declares no draft"), "{e:?}");
        let e = validate(&json!({"$schema": "https://example.invalid/mine", "type": "object"}), &json!({}))
            .expect_err("unknown draft");
        assert!(e[0].contains("unknown draft"), "{e:?}");
    }

    #[test]
    fn schema_that_breaks_its_meta_schema_is_refused_before_the_value() {
        let e = validate(&with_draft(json!({"type": "int"})), &json!(1)).expect_err("unknown type");
        assert!(e.iter().all(|m| m.starts_with("schema #/type: ")), "{e:?}");
        let e = validate(&with_draft(json!({"properties": {"a": {"required": "b"}}})), &json!({}))
            .expect_err("required must be an array");
        assert!(e.iter().any(|m| m.starts_with("schema #/properties/a/required: ")), "{e:?}");
    }

    #[test]
    fn unknown_keywords_are_refused_wherever_they_are() {
        let e = validate(&with_draft(json!({"type": "object", "requried": ["a"]})), &json!({})).expect_err("typo");
        assert_eq!(e, ["schema #: unknown keyword \"requried\" (draft 2020-12 would ignore it)"]);
        // Also deep inside, in branches the value never reaches.
        let s = with_draft(json!({"anyOf": [{"type": "null"}, {"properties": {"x": {"minimun": 1}}}]}));
        let e = validate(&s, &json!(null)).expect_err("unknown keyword below");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("schema #/anyOf/1/properties/x: unknown keyword \"minimun\""), "{e:?}");
        // Property names are names, not keywords.
        ok(json!({"properties": {"requried": {"type": "integer"}}}), json!({"requried": 1}));
    }

    #[test]
    fn schema_properties_required_and_additional() {
        let s = json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": false
        });
        ok(s.clone(), json!({"a": 1, "b": "x"}));
        let e = bad(s.clone(), json!({"b": "x"}), "(root): required property \"a\" is missing");
        assert_eq!(e.len(), 1, "{e:?}");
        bad(s.clone(), json!({"a": 1, "b": 2}), "/b: ");
        let e =
            bad(s, json!({"a": 1, "zz": 2, "y/z": 3}), "/zz: is not an allowed property (additionalProperties: false)");
        assert!(e.contains(&"/y~1z: is not an allowed property (additionalProperties: false)".to_string()), "{e:?}");
        bad(json!({"type": "integer"}), json!(1.5), "(root): ");
        ok(json!({"type": "integer"}), json!(2.0));
    }

    #[test]
    fn schema_items_report_every_violation() {
        let e = bad(json!({"type": "array", "items": {"type": "integer"}}), json!([1, "two", 3, null]), "/1: ");
        assert_eq!(e.len(), 2, "every violation is reported: {e:?}");
        assert!(e[1].starts_with("/3: "), "{e:?}");
    }

    #[test]
    fn schema_one_of_explains_the_closest_alternative() {
        let s = json!({"oneOf": [
            {"type": "object", "properties": {"op": {"const": "mkdir"}, "path": {"type": "string"}}, "required": ["op", "path"], "additionalProperties": false},
            {"type": "object", "properties": {"op": {"const": "write"}, "path": {"type": "string"}, "size": {"type": "integer"}}, "required": ["op", "path", "size"], "additionalProperties": false}
        ]});
        ok(s.clone(), json!({"op": "mkdir", "path": "d"}));
        ok(s.clone(), json!({"op": "write", "path": "f", "size": 3}));
        let e = bad(s.clone(), json!({"op": "write", "path": "f"}), "matches none of the 2 alternatives of oneOf");
        assert!(e.iter().any(|m| m.contains("the closest, #1")), "the branch with the right tag is shown: {e:?}");
        assert!(e.contains(&"  (root): required property \"size\" is missing".to_string()), "{e:?}");
        bad(json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}), json!(1), "exactly one must match");
        // A nullable object: the object alternative explains why an object fails.
        let nullable = json!({
            "$defs": {"o": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            "anyOf": [{"type": "null"}, {"$ref": "#/$defs/o"}],
        });
        let e = bad(nullable, json!({"n": "x"}), "the closest, #1, fails with:");
        assert!(e.iter().any(|m| m.starts_with("  /n: ")), "{e:?}");
    }

    #[test]
    fn schema_patterns_and_minimum() {
        let hex = json!({"type": "string", "pattern": "^[0-9a-f]{40}$"});
        ok(hex.clone(), json!("a644a6531d18884f4c1292c26a2d292d0afaaa17"));
        bad(hex, json!("A644A6531D18884F4C1292C26A2D292D0AFAAA17"), "(root): ");
        bad(json!({"type": "integer", "minimum": 0}), json!(-1), "(root): -1 is less than the minimum");
    }

    #[test]
    fn schema_errors_carry_json_pointers() {
        let s = json!({
            "type": "object",
            "properties": {"a/b": {"type": "object", "properties": {"m~n": {"type": "array", "items": {"type": "integer"}}}}},
        });
        let e = validate(&with_draft(s), &json!({"a/b": {"m~n": [0, "x"]}})).expect_err("bad item");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("/a~1b/m~0n/1: "), "{e:?}");
    }
}
