//! `%(describe…)`: its options as git's `pretty.c` parses them, the description as
//! `git describe` makes it (computed with gitoxide, never by running git), and the one file of
//! an archive whose placeholder `git archive` expands.

use std::collections::HashMap;

use gix::bstr::{BStr, BString, ByteSlice};
use gix::prelude::ObjectIdExt;
use gix_hash::ObjectId;

use super::Error;

use super::person::split_ident;
use crate::source::Cause;

/// The options of one `%(describe:…)`, as the `git describe` arguments git's
/// `parse_describe_args` turns them into.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Args {
    /// `tags[=bool]`: lightweight tags count too (the last one given wins).
    pub tags: bool,
    /// `abbrev=N` as `git describe --abbrev=N` reads it (the last one given wins).
    pub abbrev: Option<i32>,
    /// `match=PATTERN`, each given: a tag counts only if one matches.
    pub matches: Vec<BString>,
    /// `exclude=PATTERN`, each given: a tag matching one does not count.
    pub excludes: Vec<BString>,
}

/// Parse what follows `(describe` in a placeholder: `)` or `:OPTIONS)`. Returns the options and
/// how many bytes the rest of the placeholder (through its `)`) takes, or `None` where git
/// leaves the placeholder as it is (an unknown option, an empty value, a number that is none,
/// no closing parenthesis).
pub(super) fn parse(p: &[u8]) -> Option<(Args, usize)> {
    let mut args = Args::default();
    let mut at = 0;
    if p.first() == Some(&b':') {
        at = 1;
        loop {
            // git tries the options in this order, each at where the one before left off.
            let mut found = false;
            for name in ["tags", "abbrev", "exclude", "match"] {
                if found {
                    break;
                }
                let Some((value, next)) = option_value(&p[at..], name) else { continue };
                // git has taken the option's text even where its value is then refused.
                at += next;
                match (name, value) {
                    ("tags", None) => (args.tags, found) = (true, true),
                    // A value that is no boolean is passed over: the option counts as absent.
                    ("tags", Some(v)) => {
                        if let Some(tags) = parse_maybe_bool(v) {
                            (args.tags, found) = (tags, true);
                        }
                    }
                    (_, None | Some(b"")) => return None,
                    ("abbrev", Some(v)) => {
                        let (n, used) = strtol(v);
                        if used != v.len() {
                            return None;
                        }
                        args.abbrev = Some(n as i32); // `git describe` keeps it in an int
                        found = true;
                    }
                    ("exclude", Some(v)) => (args.excludes.push(v.into()), found = true).1,
                    (_, Some(v)) => (args.matches.push(v.into()), found = true).1,
                }
            }
            if !found {
                break;
            }
        }
    }
    (p.get(at) == Some(&b')')).then_some((args, at + 1))
}

/// git's `match_placeholder_arg_value`: `NAME` or `NAME=VALUE` (the value ends at `,` or `)`),
/// then `,` (taken) or `)` (left). Returns the value and the bytes taken.
pub(super) fn option_value<'a>(p: &'a [u8], name: &str) -> Option<(Option<&'a [u8]>, usize)> {
    let rest = p.strip_prefix(name.as_bytes())?;
    let (value, after) = match rest.first() {
        Some(b'=') => {
            let len = rest[1..].iter().position(|b| matches!(b, b',' | b')')).unwrap_or(rest.len() - 1);
            (Some(&rest[1..1 + len]), name.len() + 1 + len)
        }
        Some(b',' | b')') => (None, name.len()),
        _ => return None,
    };
    match p.get(after) {
        Some(b',') => Some((value, after + 1)),
        Some(b')') => Some((value, after)),
        _ => None,
    }
}

/// C's `strtol` in base 10: leading white space, a sign, digits; the value (saturated) and how
/// many bytes it took (0: no number).
pub(super) fn strtol(s: &[u8]) -> (i64, usize) {
    let mut i = s.iter().take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')).count();
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return (0, 0);
    }
    let mut value: i64 = 0;
    for b in &s[i..i + digits] {
        let d = i64::from(b - b'0');
        value = if negative {
            value.saturating_mul(10).saturating_sub(d)
        } else {
            value.saturating_mul(10).saturating_add(d)
        };
    }
    (value, i + digits)
}

/// git's `git_parse_maybe_bool`: `true`/`yes`/`on`, `false`/`no`/`off` (any case), empty
/// (false), or an integer as git reads one (`strtoimax` in base 0, then `k`, `m` or `g`).
fn parse_maybe_bool(v: &[u8]) -> Option<bool> {
    let lower = v.to_ascii_lowercase();
    match lower.as_slice() {
        b"" | b"false" | b"no" | b"off" => return Some(false),
        b"true" | b"yes" | b"on" => return Some(true),
        _ => {}
    }
    let s = v.to_str().ok()?;
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, body) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    let len = body.bytes().take_while(|b| (*b as char).is_digit(radix)).count();
    if len == 0 && radix != 8 {
        return None;
    }
    let value = if len == 0 { 0 } else { i64::from_str_radix(&body[..len], radix).ok()? };
    let factor: i64 = match &body[len..] {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        _ => return None,
    };
    let value = value.checked_mul(factor)?;
    let value = if negative { -value } else { value };
    i32::try_from(value).ok().map(|v| v != 0)
}

/// A name `git describe` may give a commit (git's `struct commit_name`).
struct Name {
    /// The ref's name after `refs/tags/`.
    path: BString,
    /// 2: an annotated tag, 1: a lightweight one.
    prio: u8,
    /// The tag object's own name and date (annotated tags).
    tag: Option<(BString, i64)>,
}

/// What `git describe [--tags] [--abbrev=N] [--match P…] [--exclude P…] COMMIT` prints for
/// `args`, without its line feed; empty where it fails (no tag describes the commit), as
/// `git archive` then expands the placeholder to nothing.
pub(super) fn describe(repo: &gix::Repository, commit: ObjectId, args: &Args) -> Result<String, Error> {
    let err = |source| Error::Read { what: "tags", id: commit, source };
    // git's `get_name` over the refs in name order, `add_to_known_names` keeping one per commit.
    let mut refs: Vec<(BString, ObjectId)> = Vec::new();
    let platform = repo.references().map_err(|e| err(Cause::gix(e)))?;
    for reference in platform.tags().map_err(|e| err(Cause::gix(e)))? {
        let reference = reference.map_err(|e| err(Cause::gix(e)))?;
        let Some(target) = reference.try_id() else { continue };
        refs.push((reference.name().as_bstr().to_owned(), target.detach()));
    }
    refs.sort();
    let glob = |pattern: &BString, name: &BStr| {
        gix::glob::wildmatch(pattern.as_bstr(), name, gix::glob::wildmatch::Mode::empty())
    };
    let mut names: HashMap<ObjectId, Name> = HashMap::new();
    for (full, target) in refs {
        let path: BString = full.strip_prefix(b"refs/tags/").unwrap_or(&full).into();
        if args.excludes.iter().any(|p| glob(p, path.as_bstr())) {
            continue;
        }
        if !args.matches.is_empty() && !args.matches.iter().any(|p| glob(p, path.as_bstr())) {
            continue;
        }
        let Ok(peeled) = target.attach(repo).object().and_then(|o| o.peel_tags_to_end()) else { continue };
        let peeled = peeled.id;
        let tag = if peeled == target { None } else { tag_of(repo, target) };
        let prio = if peeled == target { 1 } else { 2 };
        let replace = match names.get(&peeled) {
            None => true,
            Some(e) if e.prio < prio => true,
            // Several annotated tags: the newer one (an unreadable one is replaced).
            Some(e) if e.prio == 2 && prio == 2 => match (&e.tag, &tag) {
                (None, _) => true,
                (_, None) => false,
                (Some((_, old)), Some((_, new))) => old < new,
            },
            Some(_) => false,
        };
        if replace {
            names.insert(peeled, Name { path, prio, tag });
        }
    }
    // Without `--tags` only annotated tags describe (a lightweight one still takes its commit
    // from no annotated one: an annotated tag of the same commit wins above).
    names.retain(|_, n| args.tags || n.prio == 2);
    // The name printed: an annotated tag's own name, which may differ from its ref's
    // ("misnamed": then the long form is always printed).
    let shown = |n: &Name| -> (BString, bool) {
        match &n.tag {
            Some((own, _)) => (own.clone(), *own != n.path),
            None => (n.path.clone(), false),
        }
    };
    let name_by_oid = names.iter().map(|(id, n)| (*id, std::borrow::Cow::Owned(shown(n).0))).collect();
    let cache = repo.commit_graph_if_enabled().map_err(|e| err(Cause::gix(e)))?;
    let mut graph = repo.revision_graph(cache.as_ref());
    let options = gix::revision::plumbing::describe::Options { name_by_oid, ..Default::default() };
    let Ok(Some(outcome)) = gix::revision::plumbing::describe(&commit, &mut graph, options) else {
        return Ok(String::new());
    };
    let Some(name) = outcome.name else { return Ok(String::new()) };
    let misnamed = names.values().any(|n| {
        let (shown, misnamed) = shown(n);
        misnamed && shown == *name
    });
    let abbrev = match args.abbrev {
        None => None,
        Some(0) => Some(0),
        Some(n) if n < 4 => Some(4),
        Some(n) => Some((n as usize).min(commit.kind().len_in_hex())),
    };
    if !misnamed && (abbrev == Some(0) || outcome.depth == 0) {
        return Ok(name.to_string());
    }
    let hex = match abbrev {
        // `--abbrev=0` on a misnamed tag: git asks for a 0-digit abbreviation, which is the
        // whole id.
        Some(0) => commit.to_string(),
        Some(n) => {
            let candidate =
                gix::odb::store::prefix::disambiguate::Candidate::new(commit, n).map_err(|e| err(Cause::gix(e)))?;
            match repo.objects.disambiguate_prefix(candidate) {
                Ok(Some(prefix)) => prefix.to_string(),
                _ => commit.to_hex_with_len(n).to_string(),
            }
        }
        None => commit.attach(repo).shorten_or_id().to_string(),
    };
    Ok(format!("{name}-{}-g{hex}", outcome.depth))
}

/// The name and date of tag object `id`, `None` when it cannot be read.
fn tag_of(repo: &gix::Repository, id: ObjectId) -> Option<(BString, i64)> {
    let tag = repo.find_object(id).ok()?.try_into_tag().ok()?;
    let decoded = tag.decode().ok()?;
    // git's `parse_tag_buffer`: the number after the tagger's `>`, 0 without one.
    let date = decoded
        .tagger
        .and_then(|t| split_ident(t).and_then(|i| i.date))
        .and_then(|(digits, _)| digits.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    Some((decoded.name.to_owned(), date))
}

/// The file holding an archive's `%(describe…)`, with that placeholder's options (`None`:
/// malformed, left as it is).
pub(super) type Holder = (BString, Option<Args>);
