//! The `ident` attribute on checkout: `$Id$` becomes `$Id: <blob id> $`. git has two rule
//! sets for it, and which one a file gets depends on its other conversions:
//!
//! * [`streamed`] (`convert.c`, `ident_filter_fn`): what `git checkout` uses when the file's
//!   conversion can stream (no filter driver with a command, no `working-tree-encoding`, no
//!   `text=auto`/`core.autocrlf=true` line-end detection);
//! * [`in_core`] (`ident_to_worktree`): everywhere else, and always in `git archive`.
//!
//! They differ at the edges: `$$Id$` and `$I$Id$` (the streamed rules do not restart a match
//! on the `$` that broke one), `$Id:a b$` (the streamed rules call a keyword foreign only when
//! it starts `$Id: `, and count any white space, not only spaces).

use gix_hash::ObjectId;

/// The replacement text after `$Id`: `: <hex> $`.
fn expansion(blob: ObjectId) -> String {
    format!(": {} $", blob.to_hex())
}

/// `data` with git's in-core rules (`ident_to_worktree`): every `$Id$`, and every `$Id:…$`
/// holding no line break and no space other than right after the colon or right before the
/// closing `$`, becomes `$Id: <blob> $`. `None`: nothing changes.
pub fn in_core(data: &[u8], blob: ObjectId) -> Option<Vec<u8>> {
    let replacement = expansion(blob);
    let mut out: Option<Vec<u8>> = None;
    let mut copied_upto = 0usize;
    let mut pos = 0usize;
    while let Some(d) = data[pos..].iter().position(|b| *b == b'$') {
        let after = pos + d + 1; // just past the '$'
        pos = after;
        let rest = &data[after..];
        if rest.len() < 3 || &rest[..2] != b"Id" {
            continue;
        }
        let end = match rest[2] {
            b'$' => after + 3,
            b':' => {
                let body = &rest[3..];
                let Some(close) = body.iter().position(|b| *b == b'$') else { break };
                let inner = &body[..close];
                if inner.contains(&b'\n') {
                    continue;
                }
                // A space anywhere but first or last: another system's keyword, kept.
                if inner.len() > 2 && inner[1..inner.len() - 1].contains(&b' ') {
                    continue;
                }
                after + 3 + close + 1
            }
            _ => continue,
        };
        let buf = out.get_or_insert_with(|| Vec::with_capacity(data.len() + 48));
        buf.extend_from_slice(&data[copied_upto..after]);
        buf.extend_from_slice(b"Id");
        buf.extend_from_slice(replacement.as_bytes());
        copied_upto = end;
        pos = end;
    }
    let mut buf = out?;
    buf.extend_from_slice(&data[copied_upto..]);
    Some(buf)
}

/// git's `is_foreign_ident`: a `$Id: …$` keyword whose text holds white space not right
/// before the closing `$` belongs to another system and is kept.
fn is_foreign(keyword: &[u8]) -> bool {
    let Some(rest) = keyword.strip_prefix(b"$Id: ") else { return false };
    // git reads the keyword as a C string: it ends at a NUL.
    let rest = &rest[..rest.iter().position(|b| *b == 0).unwrap_or(rest.len())];
    rest.iter().enumerate().any(|(i, c)| c.is_ascii_whitespace_c() && rest.get(i + 1) != Some(&b'$'))
}

/// C's `isspace` in the C locale (Rust's `is_ascii_whitespace` leaves out `\v`).
trait CSpace {
    fn is_ascii_whitespace_c(&self) -> bool;
}

impl CSpace for u8 {
    fn is_ascii_whitespace_c(&self) -> bool {
        matches!(self, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
    }
}

/// `data` with git's streaming rules (`ident_filter_fn`), as `git checkout` writes a file whose
/// conversion streams. `None`: nothing changes.
pub fn streamed(data: &[u8], blob: ObjectId) -> Option<Vec<u8>> {
    const HEAD: &[u8] = b"$Id";
    if !data.windows(3).any(|w| w == HEAD) {
        return None;
    }
    let replacement = expansion(blob);
    let mut out = Vec::with_capacity(data.len() + 48);
    // How much of `$Id` matched (0..=3), or skipping a `$Id:` keyword held in `left`.
    let mut matched = 0usize;
    let mut skipping = false;
    let mut left: Vec<u8> = Vec::new();
    for &ch in data {
        if skipping {
            left.push(ch);
            if ch != b'\n' && ch != b'$' {
                continue;
            }
            if ch == b'$' && !is_foreign(&left) {
                left.truncate(HEAD.len());
                left.extend_from_slice(replacement.as_bytes());
            }
            out.append(&mut left);
            skipping = false;
            continue;
        }
        if matched < HEAD.len() && HEAD[matched] == ch {
            matched += 1;
            continue;
        }
        left.extend_from_slice(&HEAD[..matched]);
        if matched == HEAD.len() {
            matched = 0;
            match ch {
                b':' => {
                    left.push(ch);
                    skipping = true;
                    continue;
                }
                b'$' => left.extend_from_slice(replacement.as_bytes()),
                _ => left.push(ch),
            }
        } else {
            matched = 0;
            left.push(ch);
        }
        out.append(&mut left);
    }
    // At the end: a partial match, or a keyword never closed, is written as it was.
    left.extend_from_slice(&HEAD[..matched]);
    out.append(&mut left);
    (out != data).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> ObjectId {
        ObjectId::from_hex(b"0123456789abcdef0123456789abcdef01234567").expect("hex")
    }

    fn run(f: fn(&[u8], ObjectId) -> Option<Vec<u8>>, s: &str) -> String {
        String::from_utf8(f(s.as_bytes(), id()).unwrap_or_else(|| s.as_bytes().to_vec())).expect("utf8")
    }

    const X: &str = "$Id: 0123456789abcdef0123456789abcdef01234567 $";

    #[test]
    fn both_rule_sets_expand_the_plain_forms() {
        for f in [in_core as fn(&[u8], ObjectId) -> Option<Vec<u8>>, streamed] {
            assert_eq!(run(f, "a $Id$ b"), format!("a {X} b"));
            assert_eq!(run(f, "$Id: old $"), X);
            assert_eq!(run(f, "$Id:old$"), X);
            assert_eq!(run(f, "$Id: a b $"), "$Id: a b $");
            assert_eq!(run(f, "$Id:x\n$"), "$Id:x\n$");
            assert_eq!(run(f, "end $Id"), "end $Id");
            assert_eq!(run(f, "no keyword"), "no keyword");
        }
    }

    #[test]
    fn where_the_rule_sets_differ() {
        // The stream does not restart on the `$` that broke a match.
        assert_eq!(run(in_core, "$$Id$"), format!("${X}"));
        assert_eq!(run(streamed, "$$Id$"), "$$Id$");
        assert_eq!(run(in_core, "$I$Id$"), format!("$I{X}"));
        assert_eq!(run(streamed, "$I$Id$"), "$I$Id$");
        // Foreign keywords: in core, a space not first or last; streamed, `$Id: ` and any white space.
        assert_eq!(run(in_core, "$Id:a b$"), "$Id:a b$");
        assert_eq!(run(streamed, "$Id:a b$"), X);
        assert_eq!(run(in_core, "$Id: a\tb $"), X);
        assert_eq!(run(streamed, "$Id: a\tb $"), "$Id: a\tb $");
    }
}
