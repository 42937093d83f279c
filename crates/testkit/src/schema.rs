//! A JSON Schema validator for exactly the subset of draft 2020-12 that `docs/schema/*.schema.json`
//! use, so tests can hold the CLI's `--json` output to its documented shape without a
//! dependency on a full implementation.
//!
//! Supported: `type` (one name or an array; `integer` is a number without a fractional part),
//! `properties`, `required`, `additionalProperties` (bool or schema), `items` (one schema for
//! every element), `enum`, `const`, `oneOf`, `anyOf`, `$ref` to `#/$defs/NAME`, `minimum`,
//! `pattern` (anchors `^` `$`, literals, `\`-escaped punctuation, `.`, classes like `[0-9a-f]`
//! or `[^/]`, and the quantifiers `*` `+` `?` `{n}` `{n,}` `{n,m}`), boolean schemas, and the
//! annotations `$schema`, `$id`, `$comment`, `title`, `description` and `$defs` (root only).
//!
//! Anything else is an error of the schema, reported before the value is looked at: a keyword
//! this validator does not know would otherwise be silently ignored, and a schema that checks
//! less than it says is worse than none.

use serde_json::{Map, Value};

/// Validate `value` against `schema`. On failure, every violation, each starting with the JSON
/// pointer of the offending part of `value` (RFC 6901; `(root)` for the whole document) — or,
/// if the schema itself uses something outside the supported subset, every such problem,
/// starting with `schema ` and the pointer into the schema.
pub fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    check_schema(schema, schema, "#", true, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut errors = Vec::new();
    Validator { root: schema }.check(schema, value, &mut String::new(), 0, &mut errors);
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

const TYPES: [&str; 7] = ["null", "boolean", "object", "array", "number", "integer", "string"];

/// `$ref` chains deeper than this are taken for a cycle.
const MAX_DEPTH: usize = 64;

// ---------------------------------------------------------------------------------------------
// The schema itself.

fn check_schema(root: &Value, schema: &Value, at: &str, is_root: bool, out: &mut Vec<String>) {
    let obj = match schema {
        Value::Bool(_) => return,
        Value::Object(o) => o,
        other => {
            out.push(format!("schema {at}: a schema must be an object or a boolean, not {}", kind(other)));
            return;
        }
    };
    let mut bad = |msg: String| out.push(format!("schema {at}: {msg}"));
    let mut subschemas: Vec<(String, &Value)> = Vec::new();
    for (key, v) in obj {
        let here = format!("{at}/{}", escape(key));
        match key.as_str() {
            "$schema" | "$id" if !is_root => bad(format!("{key} is only supported at the root")),
            "$schema" | "$id" | "$comment" | "title" | "description" => {
                if !v.is_string() {
                    bad(format!("{key} must be a string"));
                }
            }
            "$defs" if !is_root => bad("$defs is only supported at the root (refs are #/$defs/NAME)".into()),
            "$defs" => match v.as_object() {
                Some(defs) => subschemas.extend(defs.iter().map(|(k, s)| (format!("{here}/{}", escape(k)), s))),
                None => bad("$defs must be an object of schemas".into()),
            },
            "type" => {
                let names: Vec<&Value> = match v {
                    Value::Array(a) if !a.is_empty() => a.iter().collect(),
                    Value::String(_) => vec![v],
                    _ => {
                        bad("type must be a type name or a non-empty array of them".into());
                        continue;
                    }
                };
                for n in names {
                    if !n.as_str().is_some_and(|n| TYPES.contains(&n)) {
                        bad(format!("unknown type {n} (known: {})", TYPES.join(", ")));
                    }
                }
            }
            "properties" => match v.as_object() {
                Some(props) => subschemas.extend(props.iter().map(|(k, s)| (format!("{here}/{}", escape(k)), s))),
                None => bad("properties must be an object of schemas".into()),
            },
            "required" => {
                let names = v.as_array().filter(|a| a.iter().all(Value::is_string));
                match names {
                    None => bad("required must be an array of property names".into()),
                    Some(names) => {
                        // With additionalProperties: false, a required name that is not among the
                        // properties can never be satisfied.
                        let closed = obj.get("additionalProperties") == Some(&Value::Bool(false));
                        let props = obj.get("properties").and_then(Value::as_object);
                        for n in names.iter().filter_map(Value::as_str) {
                            if closed && !props.is_some_and(|p| p.contains_key(n)) {
                                bad(format!(
                                    "{n:?} is required but not among the properties, and no others are allowed"
                                ));
                            }
                        }
                    }
                }
            }
            "additionalProperties" | "items" => subschemas.push((here, v)),
            "oneOf" | "anyOf" => match v.as_array() {
                Some(a) if !a.is_empty() => {
                    subschemas.extend(a.iter().enumerate().map(|(i, s)| (format!("{here}/{i}"), s)));
                }
                _ => bad(format!("{key} must be a non-empty array of schemas")),
            },
            "enum" => {
                if v.as_array().is_none_or(Vec::is_empty) {
                    bad("enum must be a non-empty array".into());
                }
            }
            "const" => {}
            "minimum" => {
                if !v.is_number() {
                    bad("minimum must be a number".into());
                }
            }
            "pattern" => match v.as_str().map(Pattern::compile) {
                Some(Ok(_)) => {}
                Some(Err(e)) => bad(format!("pattern {v}: {e}")),
                None => bad("pattern must be a string".into()),
            },
            "$ref" => match v.as_str() {
                Some(r) => {
                    if let Err(e) = resolve(root, r) {
                        bad(e);
                    }
                }
                None => bad("$ref must be a string".into()),
            },
            other => bad(format!("unsupported keyword {other:?} (this validator would ignore it)")),
        }
    }
    for (at, s) in subschemas {
        check_schema(root, s, &at, false, out);
    }
}

fn resolve<'a>(root: &'a Value, r: &str) -> Result<&'a Value, String> {
    let name = r
        .strip_prefix("#/$defs/")
        .filter(|n| !n.is_empty() && !n.contains('/') && !n.contains('~'))
        .ok_or_else(|| format!("$ref {r:?}: only #/$defs/NAME is supported"))?;
    root.get("$defs").and_then(|d| d.get(name)).ok_or_else(|| format!("$ref {r:?}: no such definition"))
}

// ---------------------------------------------------------------------------------------------
// Values.

struct Validator<'a> {
    root: &'a Value,
}

impl Validator<'_> {
    /// Check `value` (at JSON pointer `ptr`) against `schema`, appending violations to `out`.
    fn check(&self, schema: &Value, value: &Value, ptr: &mut String, depth: usize, out: &mut Vec<String>) {
        let obj = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => return out.push(at(ptr, "no value is allowed here".into())),
            Value::Object(o) => o,
            // Rejected by check_schema.
            _ => return,
        };
        if depth > MAX_DEPTH {
            return out.push(at(ptr, format!("$ref nesting deeper than {MAX_DEPTH}: a cycle in the schema?")));
        }
        if let Some(r) = obj.get("$ref").and_then(Value::as_str)
            && let Ok(target) = resolve(self.root, r)
        {
            self.check(target, value, ptr, depth + 1, out);
        }
        if let Some(t) = obj.get("type") {
            let names: Vec<&str> = match t {
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                Value::String(s) => vec![s.as_str()],
                _ => Vec::new(),
            };
            if !names.iter().any(|n| has_type(value, n)) {
                out.push(at(ptr, format!("expected {}, found {}", names.join(" or "), describe(value))));
                // The other keywords would only repeat the mismatch.
                return;
            }
        }
        if let Some(c) = obj.get("const")
            && !json_eq(c, value)
        {
            out.push(at(ptr, format!("expected {c}, found {}", short(value))));
        }
        if let Some(Value::Array(options)) = obj.get("enum")
            && !options.iter().any(|o| json_eq(o, value))
        {
            let list: Vec<String> = options.iter().map(Value::to_string).collect();
            out.push(at(ptr, format!("{} is not one of {}", short(value), list.join(", "))));
        }
        if let (Some(min), Some(n)) = (obj.get("minimum").and_then(Value::as_f64), value.as_f64())
            && n < min
        {
            out.push(at(ptr, format!("{value} is less than the minimum {min}")));
        }
        if let (Some(p), Some(s)) = (obj.get("pattern").and_then(Value::as_str), value.as_str())
            && let Ok(pattern) = Pattern::compile(p)
            && !pattern.is_match(s)
        {
            out.push(at(ptr, format!("{value} does not match the pattern {p:?}")));
        }
        if let Value::Object(map) = value {
            self.check_object(obj, map, ptr, depth, out);
        }
        if let (Value::Array(items), Some(schema)) = (value, obj.get("items")) {
            for (i, item) in items.iter().enumerate() {
                let len = ptr.len();
                ptr.push_str(&format!("/{i}"));
                self.check(schema, item, ptr, depth, out);
                ptr.truncate(len);
            }
        }
        if let Some(Value::Array(branches)) = obj.get("anyOf") {
            let results: Vec<Vec<String>> = branches.iter().map(|b| self.errors(b, value, ptr, depth)).collect();
            if results.iter().all(|e| !e.is_empty()) {
                self.none_matched("anyOf", branches, value, &results, ptr, out);
            }
        }
        if let Some(Value::Array(branches)) = obj.get("oneOf") {
            let results: Vec<Vec<String>> = branches.iter().map(|b| self.errors(b, value, ptr, depth)).collect();
            let matched: Vec<usize> = (0..results.len()).filter(|i| results[*i].is_empty()).collect();
            match matched.len() {
                0 => self.none_matched("oneOf", branches, value, &results, ptr, out),
                1 => {}
                _ => {
                    out.push(at(ptr, format!("matches alternatives {matched:?} of oneOf, but exactly one must match")))
                }
            }
        }
    }

    fn check_object(
        &self,
        schema: &Map<String, Value>,
        map: &Map<String, Value>,
        ptr: &mut String,
        depth: usize,
        out: &mut Vec<String>,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(name) {
                    out.push(at(ptr, format!("required property {name:?} is missing")));
                }
            }
        }
        for (key, v) in map {
            let len = ptr.len();
            ptr.push('/');
            ptr.push_str(&escape(key));
            match props.and_then(|p| p.get(key)) {
                Some(s) => self.check(s, v, ptr, depth, out),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        out.push(at(ptr, "is not an allowed property (additionalProperties: false)".into()))
                    }
                    Some(s) => self.check(s, v, ptr, depth, out),
                    None => {}
                },
            }
            ptr.truncate(len);
        }
    }

    /// No alternative matched: say so, with the reasons of the closest one: of those with the
    /// value's type and tag (see [`mismatch`]), the one with the fewest violations.
    fn none_matched(
        &self,
        keyword: &str,
        branches: &[Value],
        value: &Value,
        results: &[Vec<String>],
        ptr: &str,
        out: &mut Vec<String>,
    ) {
        let closest = (0..results.len()).min_by_key(|i| (mismatch(self.root, &branches[*i], value), results[*i].len()));
        let best = closest.expect("non-empty (checked by check_schema)");
        out.push(at(
            ptr,
            format!(
                "matches none of the {} alternatives of {keyword}; the closest, #{best}, fails with:",
                results.len()
            ),
        ));
        out.extend(results[best].iter().map(|e| format!("  {e}")));
    }

    fn errors(&self, schema: &Value, value: &Value, ptr: &str, depth: usize) -> Vec<String> {
        let mut errors = Vec::new();
        self.check(schema, value, &mut ptr.to_string(), depth, &mut errors);
        errors
    }
}

/// How far off `schema` is for `value` at the top, for picking the alternative to explain: 2 if
/// `value` has another type than it asks for (`null` against an object), 1 if it carries another
/// tag (a property whose schema is a `const`, as in `{"op": {"const": "write"}}`), else 0.
fn mismatch(root: &Value, schema: &Value, value: &Value) -> u8 {
    let schema = match schema.get("$ref").and_then(Value::as_str).map(|r| resolve(root, r)) {
        Some(Ok(target)) => target,
        _ => schema,
    };
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| has_type(value, t)) {
        return 2;
    }
    let (Some(props), Some(map)) = (schema.get("properties").and_then(Value::as_object), value.as_object()) else {
        return 0;
    };
    let wrong_tag = props.iter().any(|(k, s)| match (s.get("const"), map.get(k)) {
        (Some(c), Some(v)) => !json_eq(c, v),
        _ => false,
    });
    u8::from(wrong_tag)
}

fn at(ptr: &str, msg: String) -> String {
    format!("{}: {msg}", if ptr.is_empty() { "(root)" } else { ptr })
}

/// One reference token of a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn has_type(v: &Value, name: &str) -> bool {
    match name {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => match v {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
            }
            _ => false,
        },
        _ => false,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null | Value::Array(_) | Value::Object(_) => kind(v).to_string(),
        _ => format!("{} {}", kind(v), short(v)),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 { format!("{}…", s.chars().take(60).collect::<String>()) } else { s }
}

/// Equality as JSON Schema means it: numbers by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(x), Some(y), _, _) => x == y,
            (_, _, Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------------
// Patterns: a tiny backtracking matcher for the forms listed in the module docs.

#[derive(Debug, Clone)]
enum Atom {
    Char(char),
    Any,
    Class { negated: bool, ranges: Vec<(char, char)> },
}

impl Atom {
    fn matches(&self, c: char) -> bool {
        match self {
            Atom::Char(x) => *x == c,
            Atom::Any => c != '\n',
            Atom::Class { negated, ranges } => ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated,
        }
    }
}

#[derive(Debug, Clone)]
struct Piece {
    atom: Atom,
    min: usize,
    max: Option<usize>,
}

/// A compiled `pattern`.
#[derive(Debug, Clone)]
struct Pattern {
    start: bool,
    end: bool,
    pieces: Vec<Piece>,
}

impl Pattern {
    fn compile(src: &str) -> Result<Pattern, String> {
        let chars: Vec<char> = src.chars().collect();
        let mut i = 0;
        let start = chars.first() == Some(&'^');
        if start {
            i = 1;
        }
        let mut end = false;
        let mut pieces: Vec<Piece> = Vec::new();
        while i < chars.len() {
            let c = chars[i];
            i += 1;
            let atom = match c {
                '$' if i == chars.len() => {
                    end = true;
                    break;
                }
                '.' => Atom::Any,
                '\\' => {
                    let e = *chars.get(i).ok_or("a trailing backslash")?;
                    i += 1;
                    if !e.is_ascii_punctuation() {
                        return Err(format!("the escape \\{e} is not supported (only escaped punctuation)"));
                    }
                    Atom::Char(e)
                }
                '[' => {
                    let negated = chars.get(i) == Some(&'^');
                    if negated {
                        i += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        let lo = *chars.get(i).ok_or("an unclosed [")?;
                        i += 1;
                        let lo = match lo {
                            ']' if !ranges.is_empty() => break,
                            '\\' => {
                                let e = *chars.get(i).ok_or("an unclosed [")?;
                                i += 1;
                                if !e.is_ascii_punctuation() {
                                    return Err(format!("the escape \\{e} is not supported in a class"));
                                }
                                e
                            }
                            '[' => return Err("nested [ or POSIX classes are not supported".into()),
                            c => c,
                        };
                        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|c| *c != ']') {
                            let hi = chars[i + 1];
                            if hi == '\\' || hi == '[' {
                                return Err("escapes as range ends are not supported".into());
                            }
                            if hi < lo {
                                return Err(format!("the range {lo}-{hi} is reversed"));
                            }
                            ranges.push((lo, hi));
                            i += 2;
                        } else {
                            ranges.push((lo, lo));
                        }
                    }
                    Atom::Class { negated, ranges }
                }
                '(' | ')' | '|' | '^' | '$' => {
                    return Err(format!("{c:?} (groups, alternation, inner anchors) is not supported"));
                }
                '*' | '+' | '?' | '{' | '}' | ']' => return Err(format!("{c:?} has nothing to repeat or close")),
                c => Atom::Char(c),
            };
            let (min, max) = match chars.get(i) {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    let close = chars[i..].iter().position(|c| *c == '}').ok_or("an unclosed {")? + i;
                    let body: String = chars[i + 1..close].iter().collect();
                    let num = |s: &str| s.parse::<usize>().map_err(|_| format!("a bad repetition {{{body}}}"));
                    let (min, max) = match body.split_once(',') {
                        None => (num(&body)?, Some(num(&body)?)),
                        Some((lo, "")) => (num(lo)?, None),
                        Some((lo, hi)) => (num(lo)?, Some(num(hi)?)),
                    };
                    if max.is_some_and(|m| m < min) {
                        return Err(format!("the repetition {{{body}}} is reversed"));
                    }
                    i = close;
                    (min, max)
                }
                _ => {
                    pieces.push(Piece { atom, min: 1, max: Some(1) });
                    continue;
                }
            };
            i += 1;
            if matches!(chars.get(i), Some('*' | '+' | '?' | '{')) {
                return Err("lazy or possessive quantifiers are not supported".into());
            }
            pieces.push(Piece { atom, min, max });
        }
        Ok(Pattern { start, end, pieces })
    }

    /// ECMA-262 semantics: a search, unless anchored.
    fn is_match(&self, s: &str) -> bool {
        let chars: Vec<char> = s.chars().collect();
        let starts = if self.start { 0..=0 } else { 0..=chars.len() };
        starts.into_iter().any(|from| self.match_here(0, &chars, from))
    }

    fn match_here(&self, piece: usize, s: &[char], pos: usize) -> bool {
        let Some(p) = self.pieces.get(piece) else {
            return !self.end || pos == s.len();
        };
        // Greedy: take as many as allowed, then give back.
        let mut n = 0;
        while p.max.is_none_or(|m| n < m) && s.get(pos + n).is_some_and(|c| p.atom.matches(*c)) {
            n += 1;
        }
        (p.min..=n).rev().any(|k| self.match_here(piece + 1, s, pos + k))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ok(schema: Value, value: Value) {
        if let Err(e) = validate(&schema, &value) {
            panic!("{value} should match {schema}:\n{}", e.join("\n"));
        }
    }

    /// Fails, and the first violation contains `needle`.
    fn bad(schema: Value, value: Value, needle: &str) -> Vec<String> {
        match validate(&schema, &value) {
            Ok(()) => panic!("{value} should not match {schema}"),
            Err(e) => {
                assert!(e.iter().any(|m| m.contains(needle)), "expected a violation mentioning {needle:?}: {e:#?}");
                e
            }
        }
    }

    #[test]
    fn schema_type_single_and_array() {
        ok(json!({"type": "string"}), json!("x"));
        bad(json!({"type": "string"}), json!(1), "(root): expected string, found a number 1");
        ok(json!({"type": ["object", "null"]}), json!(null));
        ok(json!({"type": ["object", "null"]}), json!({}));
        bad(json!({"type": ["object", "null"]}), json!([]), "expected object or null, found an array");
        ok(json!({"type": "boolean"}), json!(false));
        bad(json!({"type": "boolean"}), json!("false"), "expected boolean");
        ok(json!({"type": "array"}), json!([]));
        bad(json!({"type": "null"}), json!(0), "expected null");
    }

    #[test]
    fn schema_type_integer_vs_number() {
        ok(json!({"type": "integer"}), json!(3));
        ok(json!({"type": "integer"}), json!(u64::MAX));
        ok(json!({"type": "integer"}), json!(-2));
        ok(json!({"type": "integer"}), json!(2.0));
        bad(json!({"type": "integer"}), json!(1.5), "expected integer, found a number 1.5");
        ok(json!({"type": "number"}), json!(1.5));
        ok(json!({"type": "number"}), json!(3));
        bad(json!({"type": "number"}), json!("3"), "expected number");
    }

    #[test]
    fn schema_properties_and_required() {
        let s = json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"]
        });
        ok(s.clone(), json!({"a": 1}));
        ok(s.clone(), json!({"a": 1, "b": "x", "other": true}));
        bad(s.clone(), json!({"b": "x"}), "(root): required property \"a\" is missing");
        bad(s, json!({"a": 1, "b": 2}), "/b: expected string");
    }

    #[test]
    fn schema_additional_properties_bool_and_schema() {
        let closed = json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false});
        ok(closed.clone(), json!({"a": 1}));
        bad(closed, json!({"a": 1, "zz": 2}), "/zz: is not an allowed property");
        let ints = json!({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}});
        ok(ints.clone(), json!({"PUT": 3, "directory lookups": 0}));
        bad(ints, json!({"PUT": 3, "GET": "many"}), "/GET: expected integer");
        ok(json!({"additionalProperties": true}), json!({"x": 1}));
    }

    #[test]
    fn schema_items() {
        let s = json!({"type": "array", "items": {"type": "integer"}});
        ok(s.clone(), json!([1, 2, 3]));
        ok(s.clone(), json!([]));
        let e = bad(s, json!([1, "two", 3, null]), "/1: expected integer");
        assert_eq!(e.len(), 2, "every violation is reported: {e:?}");
        assert!(e[1].starts_with("/3: "), "{e:?}");
    }

    #[test]
    fn schema_enum() {
        let s = json!({"type": "string", "enum": ["local", "nfs", "s3"]});
        ok(s.clone(), json!("nfs"));
        bad(s, json!("ftp"), "\"ftp\" is not one of \"local\", \"nfs\", \"s3\"");
        ok(json!({"enum": [1, null]}), json!(1.0));
        bad(json!({"enum": [1, null]}), json!(2), "is not one of");
    }

    #[test]
    fn schema_const() {
        ok(json!({"const": "write"}), json!("write"));
        bad(json!({"const": "write"}), json!("mkdir"), "expected \"write\", found \"mkdir\"");
        ok(json!({"const": {"a": [1]}}), json!({"a": [1.0]}));
        bad(json!({"const": {"a": [1]}}), json!({"a": [1], "b": 2}), "expected");
    }

    #[test]
    fn schema_one_of() {
        let s = json!({"oneOf": [
            {"type": "object", "properties": {"op": {"const": "mkdir"}, "path": {"type": "string"}}, "required": ["op", "path"], "additionalProperties": false},
            {"type": "object", "properties": {"op": {"const": "write"}, "path": {"type": "string"}, "size": {"type": "integer"}}, "required": ["op", "path", "size"], "additionalProperties": false}
        ]});
        ok(s.clone(), json!({"op": "mkdir", "path": "d"}));
        ok(s.clone(), json!({"op": "write", "path": "f", "size": 3}));
        let e = bad(s.clone(), json!({"op": "write", "path": "f"}), "matches none of the 2 alternatives of oneOf");
        assert!(e.iter().any(|m| m.contains("the closest, #1")), "the branch with the right tag is shown: {e:?}");
        assert!(e.iter().any(|m| m.contains("required property \"size\" is missing")), "{e:?}");
        // Both alternatives match: not exactly one.
        bad(json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}), json!(1), "exactly one must match");
        ok(json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}), json!(1.5));
    }

    #[test]
    fn schema_any_of() {
        let s = json!({"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^[0-9a-f]{40}$"}]});
        ok(s.clone(), json!(null));
        ok(s.clone(), json!("0123456789abcdef0123456789abcdef01234567"));
        bad(s, json!("HEAD"), "matches none of the 2 alternatives of anyOf");
        ok(json!({"anyOf": [{"type": "integer"}, {"type": "number"}]}), json!(1));
        // A nullable object: the object alternative explains why an object fails.
        let nullable = json!({
            "$defs": {"o": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            "anyOf": [{"type": "null"}, {"$ref": "#/$defs/o"}],
        });
        let e = bad(nullable, json!({"n": "x"}), "the closest, #1, fails with:");
        assert!(e.iter().any(|m| m == "  /n: expected integer, found a string \"x\""), "{e:?}");
    }

    #[test]
    fn schema_ref_to_defs() {
        let s = json!({
            "$defs": {"id": {"type": "string", "pattern": "^[0-9a-f]{40}$"}},
            "type": "object",
            "properties": {"commit": {"$ref": "#/$defs/id", "description": "siblings of $ref apply too"}},
        });
        ok(s.clone(), json!({"commit": "a".repeat(40)}));
        bad(s, json!({"commit": "a".repeat(39)}), "/commit: \"aaa");
        let e = validate(&json!({"$ref": "#/$defs/nope"}), &json!(1)).expect_err("dangling ref");
        assert!(e[0].contains("no such definition"), "{e:?}");
        let e = validate(&json!({"$ref": "other.json#/x"}), &json!(1)).expect_err("external ref");
        assert!(e[0].contains("only #/$defs/NAME"), "{e:?}");
        let cyclic = json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
        bad(cyclic, json!(1), "a cycle");
    }

    #[test]
    fn schema_minimum() {
        ok(json!({"type": "integer", "minimum": 0}), json!(0));
        bad(json!({"type": "integer", "minimum": 0}), json!(-1), "-1 is less than the minimum 0");
        ok(json!({"type": "number", "minimum": 0}), json!(0.001));
        bad(json!({"type": "number", "minimum": 0}), json!(-0.5), "less than the minimum");
        // Applies to numbers only.
        ok(json!({"minimum": 5}), json!("abc"));
    }

    #[test]
    fn schema_pattern() {
        let hex = json!({"type": "string", "pattern": "^[0-9a-f]{40}$"});
        ok(hex.clone(), json!("a644a6531d18884f4c1292c26a2d292d0afaaa17"));
        bad(hex.clone(), json!("A644A6531D18884F4C1292C26A2D292D0AFAAA17"), "does not match the pattern");
        bad(hex.clone(), json!("a644a6531d18884f4c1292c26a2d292d0afaaa1"), "does not match");
        bad(hex, json!("a644a6531d18884f4c1292c26a2d292d0afaaa170"), "does not match");
        let n = json!({"pattern": "^[1-9][0-9]*$"});
        ok(n.clone(), json!("8"));
        ok(n.clone(), json!("128"));
        bad(n.clone(), json!("08"), "does not match");
        bad(n.clone(), json!(""), "does not match");
        // Applies to strings only.
        ok(n, json!(8));
    }

    #[test]
    fn schema_pattern_matcher_forms() {
        let m = |p: &str, s: &str| Pattern::compile(p).expect("compiles").is_match(s);
        assert!(m("b+", "abbbc"), "unanchored is a search");
        assert!(!m("^b+", "abbbc"));
        assert!(m("^a.c$", "abc") && !m("^a.c$", "ac"));
        assert!(m("^a\\.c$", "a.c") && !m("^a\\.c$", "abc"));
        assert!(m("^[^/]+$", "name") && !m("^[^/]+$", "a/b"));
        assert!(m("^x?y*$", "") && m("^x?y*$", "xyyy") && !m("^x?y*$", "xx"));
        assert!(m("^a{2,}$", "aaaa") && !m("^a{2,}$", "a"));
        assert!(m("^a{1,2}b$", "aab") && !m("^a{1,2}b$", "aaab"));
        assert!(m("^[a-c-]+$", "a-b") && !m("^[a-c-]+$", "d"));
        assert!(m("^a*a$", "aaa"), "greedy repetition gives back");
        assert!(m("^ü+$", "üü"), "characters, not bytes");
        for unsupported in ["(a|b)", "a|b", "\\d+", "a{2", "[abc", "a**", "*a", "a+?", "[z-a]", "a^b"] {
            assert!(Pattern::compile(unsupported).is_err(), "{unsupported:?} must be refused");
        }
    }

    #[test]
    fn schema_boolean_schemas() {
        ok(json!(true), json!({"anything": [1]}));
        bad(json!(false), json!(null), "no value is allowed");
        bad(json!({"properties": {"gone": false}}), json!({"gone": 1}), "/gone: no value is allowed");
    }

    #[test]
    fn schema_unknown_keywords_fail_loudly() {
        let e = validate(&json!({"type": "object", "maxProperties": 1}), &json!({})).expect_err("unknown keyword");
        assert_eq!(e, vec!["schema #: unsupported keyword \"maxProperties\" (this validator would ignore it)"]);
        // Also deep inside, in branches the value never reaches.
        let s = json!({"anyOf": [{"type": "null"}, {"properties": {"x": {"format": "date-time"}}}]});
        let e = validate(&s, &json!(null)).expect_err("unknown keyword below");
        assert!(e[0].starts_with("schema #/anyOf/1/properties/x: unsupported keyword \"format\""), "{e:?}");
        let e = validate(&json!({"type": "int"}), &json!(1)).expect_err("unknown type");
        assert!(e[0].contains("unknown type \"int\""), "{e:?}");
        let e = validate(&json!({"pattern": "^(a|b)$"}), &json!("a")).expect_err("unsupported pattern");
        assert!(e[0].contains("not supported"), "{e:?}");
        let e = validate(&json!({"properties": {"a": {"$defs": {}}}}), &json!({})).expect_err("nested $defs");
        assert!(e[0].contains("only supported at the root"), "{e:?}");
        let s = json!({"properties": {"a": {}}, "required": ["b"], "additionalProperties": false});
        let e = validate(&s, &json!({})).expect_err("unsatisfiable required");
        assert!(e[0].contains("\"b\" is required but not among the properties"), "{e:?}");
        // Annotations are fine.
        ok(
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "t", "$comment": "c", "description": "d"}),
            json!(1),
        );
    }

    #[test]
    fn schema_errors_carry_json_pointers() {
        let s = json!({
            "type": "object",
            "properties": {"a/b": {"type": "object", "properties": {"m~n": {"type": "array", "items": {"type": "integer"}}}}},
        });
        let e = validate(&s, &json!({"a/b": {"m~n": [0, "x"]}})).expect_err("bad item");
        assert_eq!(e, vec!["/a~1b/m~0n/1: expected integer, found a string \"x\""]);
    }
}
