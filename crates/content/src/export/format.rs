//! `$Format:…$` expanded as git's `format_commit_message` does ([`expand`]), and the one
//! `%(describe…)` of an archive found as `git archive` finds it.

use std::borrow::Cow;

use gix::bstr::{BStr, BString, ByteSlice};
use gix_hash::ObjectId;

use super::Error;
use super::commit::{Archive, CommitInfo};
use super::describe::{self, Holder};
use super::person::{person, split_ident, trim_end};
use crate::source::Cause;

impl CommitInfo {
    /// For an archive: the file holding its `%(describe…)` and that placeholder's options.
    fn holder<'a>(&self, archive: &'a Archive) -> Result<Option<&'a Holder>, Error> {
        archive
            .holder
            .get_or_init(|| find_holder(&self.describe.repo, self, archive).map_err(|e| e.to_string()))
            .as_ref()
            .map(Option::as_ref)
            .map_err(|message| Error::Read {
                what: "tree (for its first %(describe))",
                id: archive.tree,
                source: Cause::found(message.clone()),
            })
    }
}

/// Replace every `$Format:PLACEHOLDERS$` in `data`, the content of the file at `path`, as
/// `git archive` does for a file with the `export-subst` attribute. Data without `$Format:` is
/// returned as it is. A placeholder git expands and treesync cannot is refused
/// ([`Error::Unsupported`]); one git leaves as it is stays as it is.
pub fn expand<'a>(data: &'a [u8], path: &BStr, commit: &CommitInfo) -> Result<Cow<'a, [u8]>, Error> {
    let mut f = Formatter { c: commit, path, probe: false, reached: false, probed: None, error: None };
    let out = f.run(data);
    match f.error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The options of the first `%(describe…)` placeholder git would reach in `data` (`Some(None)`:
/// one it leaves as it is, which still uses up the archive's one), `None` without any.
fn first_describe(data: &[u8], commit: &CommitInfo) -> Option<Option<describe::Args>> {
    let mut f = Formatter { c: commit, path: b"".as_bstr(), probe: true, reached: false, probed: None, error: None };
    f.run(data);
    f.probed
}

/// git's `format_subst` and `repo_format_commit_message` over one file.
struct Formatter<'c> {
    c: &'c CommitInfo,
    path: &'c BStr,
    /// Only looking for the first `%(describe…)` ([`first_describe`]).
    probe: bool,
    /// A `%(describe…)` was reached in this file already.
    reached: bool,
    /// What [`first_describe`] looks for.
    probed: Option<Option<describe::Args>>,
    /// The first placeholder refused.
    error: Option<Error>,
}

impl Formatter<'_> {
    fn run<'a>(&mut self, data: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out = Vec::new();
        let mut rest = data;
        while let Some(start) = rest.find(b"$Format:") {
            let Some(len) = rest[start + 8..].find_byte(b'$') else { break };
            let format = &rest[start + 8..start + 8 + len];
            out.extend_from_slice(&rest[..start]);
            // git hands the format on as a C string: it ends at a NUL.
            let format = format.split(|b| *b == 0).next().unwrap_or_default();
            self.format_commit(&mut out, format);
            rest = &rest[start + 8 + len + 1..];
            if self.probe && self.probed.is_some() {
                break;
            }
        }
        if rest.len() == data.len() {
            return Cow::Borrowed(data);
        }
        out.extend_from_slice(rest);
        Cow::Owned(out)
    }

    /// git's `repo_format_commit_message`: text is copied, `%%` is `%`, a placeholder expands,
    /// and a `%` starting no placeholder stays as it is.
    fn format_commit(&mut self, out: &mut Vec<u8>, mut format: &[u8]) {
        while let Some(percent) = format.find_byte(b'%') {
            out.extend_from_slice(&format[..percent]);
            format = &format[percent + 1..];
            if let Some(rest) = format.strip_prefix(b"%") {
                out.push(b'%');
                format = rest;
                continue;
            }
            match self.item(out, format) {
                0 => out.push(b'%'),
                consumed => format = &format[consumed..],
            }
        }
        out.extend_from_slice(format);
    }

    /// One placeholder with git's optional `-` (drop line feeds before it when it is empty),
    /// `+` (a line feed before it when not empty) or ` ` (a space before it when not empty).
    /// Returns how many bytes of `p` it took (0: not a placeholder).
    fn item(&mut self, out: &mut Vec<u8>, p: &[u8]) -> usize {
        let magic = match p.first() {
            Some(m @ (b'-' | b'+' | b' ')) => *m,
            _ => return self.one(out, p),
        };
        let p = &p[1..];
        if p.first() == Some(&b'w') {
            return 0;
        }
        let before = out.len();
        let consumed = self.one(out, p);
        if out.len() == before {
            if magic == b'-' {
                while out.last() == Some(&b'\n') {
                    out.pop();
                }
            }
        } else if magic == b'+' {
            out.insert(before, b'\n');
        } else if magic == b' ' {
            out.insert(before, b' ');
        }
        // As git does: the modifier is taken even when what follows is no placeholder.
        consumed + 1
    }

    /// Refuse the placeholder `%` + `p[..len]` (the first refusal is kept); returns `len`, so
    /// that what follows is read as git reads it.
    fn refuse(&mut self, p: &[u8], len: usize, why: &'static str) -> usize {
        if self.error.is_none() && !self.probe {
            self.error = Some(Error::Unsupported {
                path: self.path.to_str_lossy().into_owned(),
                placeholder: format!("%{}", p[..len].as_bstr()),
                why,
            });
        }
        len
    }

    /// One placeholder (git's `format_commit_one`), 0 when it is none git knows.
    ///
    /// Long (130 lines) on purpose: one `match` arm per placeholder letter, in git's order, so it
    /// reads side by side with `format_commit_one` in git's `pretty.c`.
    fn one(&mut self, out: &mut Vec<u8>, p: &[u8]) -> usize {
        let c = self.c;
        let Some(&first) = p.first() else { return 0 };
        match first {
            b'C' => return self.color(p),
            b'w' => {
                return match wrap_len(p) {
                    Some(len) => self.refuse(p, len, "treesync does not rewrap text (`%w(…)`)"),
                    None => 0,
                };
            }
            b'<' | b'>' => {
                return match padding_len(p) {
                    Some(len) => self.refuse(p, len, "treesync does not pad or truncate (`%<(…)`, `%>(…)`)"),
                    None => 0,
                };
            }
            _ => {}
        }
        if let Some(rest) = p.strip_prefix(b"(describe") {
            return self.describe(out, rest);
        }
        if let Some(rest) = p.strip_prefix(b"(decorate") {
            if rest.first() == Some(&b')') {
                decorate(out, c, " (", ")");
                return "(decorate)".len();
            }
            let Some(options) = rest.strip_prefix(b":") else { return 0 };
            let mut at = 0;
            while let Some((_, next)) = ["prefix", "suffix", "separator", "pointer", "tag"]
                .iter()
                .find_map(|name| describe::option_value(&options[at..], name))
            {
                at += next;
            }
            return match options.get(at) {
                Some(b')') => {
                    let len = "(decorate:".len() + at + 1;
                    self.refuse(p, len, "treesync expands `%(decorate)` without options only")
                }
                _ => 0,
            };
        }
        if let Some(rest) = p.strip_prefix(b"(trailers") {
            let len = match rest.first() {
                Some(b')') => Some(1),
                Some(b':') => rest.find_byte(b')').map(|end| end + 1),
                _ => None,
            };
            return match len {
                Some(len) => self.refuse(p, "(trailers".len() + len, "treesync does not parse trailers"),
                None => 0,
            };
        }
        let abbrev_list = |out: &mut Vec<u8>, items: &[String]| {
            out.extend_from_slice(items.join(" ").as_bytes());
        };
        match first {
            b'n' => out.push(b'\n'),
            b'x' => {
                let hex = |i: usize| p.get(i).and_then(|b| (*b as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(1), hex(2)) else { return 0 };
                out.push((hi * 16 + lo) as u8);
                return 3;
            }
            b'H' => out.extend_from_slice(c.id.to_hex().to_string().as_bytes()),
            b'h' => out.extend_from_slice(c.short_id.as_bytes()),
            b'T' => out.extend_from_slice(c.tree.to_hex().to_string().as_bytes()),
            b't' => out.extend_from_slice(c.short_tree.as_bytes()),
            b'P' => abbrev_list(out, &c.parents.iter().map(|p| p.to_hex().to_string()).collect::<Vec<_>>()),
            b'p' => abbrev_list(out, &c.short_parents),
            // git marks a commit shown without a revision walk as a right-hand one.
            b'm' => out.push(b'>'),
            b'd' => decorate(out, c, " (", ")"),
            b'D' => decorate(out, c, "", ""),
            // Reflog placeholders: an archive has no reflog walk, they expand to nothing.
            b'g' => {
                return match p.get(1) {
                    Some(b'd' | b'D' | b's' | b'n' | b'N' | b'e' | b'E') => 2,
                    _ => 0,
                };
            }
            // Signatures: git checks them (running gpg); a commit without one is `N` and the
            // rest expand to nothing.
            b'G' => {
                return match p.get(1) {
                    Some(b'?' | b'G' | b'S' | b'K' | b'F' | b'P' | b'T') if c.signed => {
                        self.refuse(p, 2, "git checks the commit's signature with gpg, treesync does not")
                    }
                    Some(b'T') => self.refuse(p, 2, "git names the trust level of a signature check"),
                    Some(b'?') => {
                        out.push(b'N');
                        2
                    }
                    Some(b'G' | b'S' | b'K' | b'F' | b'P') => 2,
                    _ => 0,
                };
            }
            b'a' | b'c' => {
                let line = if first == b'a' { &c.author } else { &c.committer };
                if p.get(1) == Some(&b'h') && split_ident(line).is_some_and(|i| i.date.is_some()) {
                    return self.refuse(p, 2, "a human date depends on the time zone of the machine running git");
                }
                return person(out, p.get(1).copied(), line, c.now);
            }
            b'e' => {
                if let Some(encoding) = &c.encoding {
                    out.extend_from_slice(encoding);
                }
            }
            b'B' => out.extend_from_slice(&c.message),
            b's' => {
                let (subject, _) = subject(&c.message);
                let mut lines = subject.lines_with_terminator().map(trim_end).peekable();
                while let Some(line) = lines.next() {
                    out.extend_from_slice(line);
                    if lines.peek().is_some() {
                        out.push(b' ');
                    }
                }
            }
            b'f' => {
                let (subject, _) = subject(&c.message);
                sanitized_subject(out, subject.lines().next().unwrap_or_default());
            }
            b'b' => out.extend_from_slice(subject(&c.message).1),
            _ => return 0,
        }
        1
    }

    /// `%(describe…)`, `rest` what follows `(describe`. Every one expands, as `git log` has it;
    /// for an archive, only the first reached in the archive (it is used up even where git then
    /// leaves it as it is: malformed options).
    fn describe(&mut self, out: &mut Vec<u8>, rest: &[u8]) -> usize {
        let parsed = describe::parse(rest);
        if self.probe {
            self.probed.get_or_insert(parsed.map(|(args, _)| args));
            return 0;
        }
        if let Some(archive) = &self.c.describe.archive {
            if std::mem::replace(&mut self.reached, true) {
                return 0;
            }
            match self.c.holder(archive) {
                Ok(Some((path, _))) if path.as_bstr() == self.path => {}
                Ok(_) => return 0,
                Err(e) => {
                    self.error.get_or_insert(e);
                    return 0;
                }
            }
        }
        let Some((args, len)) = parsed else { return 0 };
        match self.c.described(&args) {
            Ok(text) => out.extend_from_slice(text.as_bytes()),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        "(describe".len() + len
    }

    /// `%C…`: colors, which `git archive` never writes (it formats without color): the
    /// placeholder is taken and expands to nothing, except `%C(always,…)`, which git writes.
    fn color(&mut self, p: &[u8]) -> usize {
        let spec = &p[1..];
        if spec.starts_with(b"(auto)") {
            return 7;
        }
        if let Some(inner) = spec.strip_prefix(b"(") {
            return match inner.find_byte(b')') {
                Some(end) if inner.starts_with(b"always,") => {
                    self.refuse(p, 1 + 1 + end + 1, "git writes the color's escape sequence")
                }
                Some(end) => 1 + 1 + end + 1,
                None => 0,
            };
        }
        ["red", "green", "blue", "reset"]
            .iter()
            .find(|name| spec.starts_with(name.as_bytes()))
            .map_or(0, |name| 1 + name.len())
    }
}

/// The length of a `%w(…)` git reads (`w(WIDTH[,INDENT1[,INDENT2]])`, all optional numbers),
/// `None` where it leaves the text as it is.
fn wrap_len(p: &[u8]) -> Option<usize> {
    let inner = p.strip_prefix(b"w(")?;
    let end = inner.find_byte(b')')?;
    let mut args = &inner[..end];
    if !args.is_empty() {
        for i in 0..3 {
            let (_, used) = describe::strtol(args);
            args = &args[used..];
            match args.first() {
                None => break,
                Some(b',') if i < 2 => args = &args[1..],
                _ => return None,
            }
        }
    }
    Some(2 + end + 1)
}

/// The length of a padding placeholder git reads (`<(N)`, `<|(N)`, `>(N)`, `>>(N)`, `><(N)`,
/// `>|(N)`, with `,trunc`, `,ltrunc` or `,mtrunc`), `None` where it leaves the text as it is.
fn padding_len(p: &[u8]) -> Option<usize> {
    let mut at = 1;
    if p[0] == b'>' && matches!(p.get(1), Some(b'<' | b'>')) {
        at += 1;
    }
    let to_column = p.get(at) == Some(&b'|');
    if to_column {
        at += 1;
    }
    if p.get(at) != Some(&b'(') {
        return None;
    }
    let start = at + 1;
    let end = start + p[start..].iter().position(|b| matches!(b, b',' | b')'))?;
    if end == start {
        return None;
    }
    let (width, used) = describe::strtol(&p[start..end]);
    // A negative width counts from the terminal's right edge (`|`), else it is none.
    if used == 0 || width == 0 || width.abs() > 16_384 || (width < 0 && !to_column) {
        return None;
    }
    if p[end] == b')' {
        return Some(end + 1);
    }
    let close = end + 1 + p[end + 1..].find_byte(b')')?;
    let mode = &p[end + 1..close];
    matches!(mode, b"trunc" | b"ltrunc" | b"mtrunc").then_some(close + 1)
}

/// `%d` and `%D`: the ref names joined by `, ` within `prefix` and `suffix`, nothing without refs.
fn decorate(out: &mut Vec<u8>, c: &CommitInfo, prefix: &str, suffix: &str) {
    if c.refs.is_empty() {
        return;
    }
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(c.refs.join(", ").as_bytes());
    out.extend_from_slice(suffix.as_bytes());
}

/// Lines (with their line feed) from the start of `text` while they are blank.
fn skip_blank_lines(mut text: &[u8]) -> &[u8] {
    while let Some(line) = text.lines_with_terminator().next() {
        if !trim_end(line).is_empty() {
            break;
        }
        text = &text[line.len()..];
    }
    text
}

/// The subject paragraph of a message (its first lines up to a blank one, after leading blank
/// lines) and the body (the rest, after the blank lines that follow the subject).
fn subject(message: &[u8]) -> (&[u8], &[u8]) {
    let start = skip_blank_lines(message);
    let mut len = 0;
    for line in start.lines_with_terminator() {
        if trim_end(line).is_empty() {
            break;
        }
        len += line.len();
    }
    let (subject, rest) = start.split_at(len);
    (subject, skip_blank_lines(rest))
}

/// `%f`: the subject line with runs of other characters than `[A-Za-z0-9._]` turned into one
/// `-`, runs of `.` into one `.`, and trailing `.` and `-` dropped (git's
/// `format_sanitized_subject`).
fn sanitized_subject(out: &mut Vec<u8>, line: &[u8]) {
    let start = out.len();
    let mut space = 2;
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' {
            if space == 1 {
                out.push(b'-');
            }
            space = 0;
            out.push(b);
            if b == b'.' {
                while line.get(i + 1) == Some(&b'.') {
                    i += 1;
                }
            }
        } else {
            space |= 1;
        }
        i += 1;
    }
    while out.len() > start && matches!(out.last(), Some(b'.' | b'-')) {
        out.pop();
    }
}

/// One entry of the archived tree, in the order `git archive` writes them.
enum Entry {
    Dir(BString),
    File(BString, ObjectId),
}

/// The file of `archive` whose first `%(describe…)` reached is the archive's one (git's
/// `max_invocations = 1`), with that placeholder's options (`None`: malformed). `git archive`
/// walks the tree depth first, entries in tree order, leaving out `export-ignore` paths, and
/// expands the `export-subst` regular files after their conversions; the files are read here as
/// their blobs re-encoded by `working-tree-encoding` (a filter driver's output is not run for
/// this). Without `export-subst` in any attributes, no walk of the files is needed.
pub(super) fn find_holder(
    repo: &crate::Repo,
    commit: &super::CommitInfo,
    archive: &Archive,
) -> Result<Option<Holder>, Error> {
    let gix = repo.gix();
    let err = |source| Error::Read { what: "tree (for its first %(describe))", id: archive.tree, source };
    let mut entries = Vec::new();
    let mut attributes: crate::convert::AttributeFiles = Vec::new();
    // Depth first in tree order: a directory's entries are read when it is reached.
    let read = |id: ObjectId, dir: &BStr| -> Result<Vec<(gix::objs::tree::EntryMode, BString, ObjectId)>, Error> {
        let tree = gix.find_tree(id).map_err(|e| err(Cause::gix(e)))?;
        let decoded = tree.decode().map_err(|e| err(Cause::gix(e)))?;
        Ok(decoded
            .entries
            .iter()
            .map(|e| {
                let path: BString = if dir.is_empty() {
                    e.filename.to_owned()
                } else {
                    let mut p = dir.to_owned();
                    p.push(b'/');
                    p.extend_from_slice(e.filename);
                    p
                };
                (e.mode, path, e.oid.to_owned())
            })
            .collect())
    };
    let mut pending = vec![read(archive.tree, b"".as_bstr())?.into_iter()];
    while let Some(level) = pending.last_mut() {
        let Some((mode, path, id)) = level.next() else {
            pending.pop();
            continue;
        };
        if mode.is_tree() {
            entries.push(Entry::Dir(path.clone()));
            pending.push(read(id, path.as_bstr())?.into_iter());
        } else if mode.is_blob() {
            if path.rsplit_str("/").next() == Some(b".gitattributes".as_slice()) {
                attributes.push((path.clone(), id));
            }
            entries.push(Entry::File(path, id));
        }
    }
    // No attributes name `export-subst` (macros too are defined in these): no file has it.
    let settings = &archive.settings;
    let mut named = [&settings.attributes_file, &settings.info_attributes]
        .into_iter()
        .any(|t| t.as_deref().is_some_and(|t| t.contains("export-subst")));
    for (_, id) in &attributes {
        if named {
            break;
        }
        let blob = gix.find_blob(*id).map_err(|e| err(Cause::gix(e)))?;
        named = blob.data.find(b"export-subst").is_some();
    }
    if !named {
        return Ok(None);
    }
    let mut resolver =
        crate::convert::Resolver::new(settings, attributes).map_err(|e| err(Cause::found(e.to_string())))?;
    let find = &gix.objects;
    let mut ignored: Option<BString> = None;
    for entry in entries {
        let (path, is_dir) = match &entry {
            Entry::Dir(p) => (p, true),
            Entry::File(p, _) => (p, false),
        };
        if let Some(dir) = &ignored {
            if path.starts_with(dir) && path.get(dir.len()) == Some(&b'/') {
                continue;
            }
            ignored = None;
        }
        let Entry::File(path, id) = &entry else {
            if resolver.export_ignored(path.as_bstr(), true, find).map_err(|e| err(Cause::found(e.to_string())))? {
                ignored = Some(path.clone());
            }
            continue;
        };
        debug_assert!(!is_dir);
        if !archive.select.includes(path.as_bstr(), false) {
            continue;
        }
        let (conversion, export_ignored) =
            resolver.at(path.as_bstr(), find).map_err(|e| err(Cause::found(e.to_string())))?;
        let Some(conversion) = conversion.filter(|c| c.export_subst && !export_ignored) else { continue };
        let blob = gix.find_blob(*id).map_err(|e| err(Cause::gix(e)))?;
        // Re-encoded as UTF-16 or UTF-32 (what git can encode: text that is UTF-8), no
        // `$Format:` is left in the file's bytes for git to find. Other encodings keep ASCII.
        let label = conversion.attributes.split(' ').find_map(|a| a.strip_prefix("working-tree-encoding="));
        if label.is_some_and(is_wide) && !blob.data.is_empty() && std::str::from_utf8(&blob.data).is_ok() {
            continue;
        }
        if let Some(args) = first_describe(&blob.data, commit) {
            return Ok(Some((path.clone(), args)));
        }
    }
    Ok(None)
}

/// Whether `working-tree-encoding=label` writes two or four bytes per ASCII character.
fn is_wide(label: &str) -> bool {
    let l: String = label.trim().chars().filter(|c| !matches!(c, '-' | '_')).collect::<String>().to_ascii_uppercase();
    ["UTF16", "UTF32", "UCS2", "UCS4"].iter().any(|w| l.starts_with(w))
}
