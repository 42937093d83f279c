//! `export-subst`: expanding `$Format:…$` in files as `git archive` does (`--export`).
//!
//! A file with the `export-subst` attribute has every `$Format:PLACEHOLDERS$` replaced by the
//! commit's data, formatted as `git log --format=PLACEHOLDERS` would format it (git's
//! `archive.c` hands the text between `$Format:` and the next `$` to `format_commit_message`).
//! [`CommitInfo`] holds what the placeholders need; [`expand`] does the replacing. The
//! placeholders, and where treesync departs from git, are listed in `docs/export.md`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use gix::bstr::{BStr, BString, ByteSlice};
use gix::prelude::ObjectIdExt;
use gix_hash::ObjectId;

use crate::source::Cause;

mod describe;

/// Reading what the placeholders of a commit need failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The commit or its refs could not be read.
    #[error(
        "cannot read the {what} of commit {id} for export-subst: {source}\n  hint: the repository may be corrupt or incomplete; `git fsck` and `git log -1 --format=%d {id}` tell more"
    )]
    Read {
        /// `commit object` or `refs`.
        what: &'static str,
        /// The commit.
        id: ObjectId,
        /// Why: gitoxide's error, or what treesync found.
        #[source]
        source: Cause,
    },
    /// A file holds a placeholder `git archive` expands and treesync cannot expand as git does:
    /// the file is not written rather than written differently.
    #[error(
        "cannot expand `{placeholder}` in {path} (export-subst) as `git archive` does: {why}\n  hint: remove the placeholder from the file, or take `export-subst` off it in .gitattributes; `git archive` is the way to get this expansion"
    )]
    Unsupported {
        /// The file.
        path: String,
        /// The placeholder, as it is in the file (`%w(72)`).
        placeholder: String,
        /// What it needs that treesync does not do.
        why: &'static str,
    },
}

/// What the `$Format:…$` placeholders of one commit expand to: its ids, the raw identity lines
/// and message (parsed as git parses them), its ref names and description.
#[derive(Clone)]
pub struct CommitInfo {
    /// The commit (`%H`).
    pub id: ObjectId,
    /// Its shortest unique abbreviation as git makes it by default, at least 7 hex digits (`%h`).
    pub short_id: String,
    /// Its tree (`%T`).
    pub tree: ObjectId,
    /// The tree's abbreviation (`%t`).
    pub short_tree: String,
    /// Its parents in order (`%P`).
    pub parents: Vec<ObjectId>,
    /// The parents' abbreviations (`%p`).
    pub short_parents: Vec<String>,
    /// The author line of the commit object after `author ` (`Name <mail> 1700000000 +0100`).
    pub author: BString,
    /// The committer line after `committer `.
    pub committer: BString,
    /// The `encoding` header, if the commit has one (`%e`).
    pub encoding: Option<BString>,
    /// The raw message: everything after the blank line ending the header (`%B`).
    pub message: BString,
    /// The commit carries a signature (`gpgsig`), which `%G…` would have git check.
    pub signed: bool,
    /// Ref names pointing at the commit as `git log --decorate` shows them, in git's order
    /// (`HEAD -> main`, `tag: v1.0`, `origin/main`): `%D` joins them, `%d` too within ` (…)`.
    pub refs: Vec<String>,
    /// How `%(describe…)` is expanded: by `git describe` as gitoxide computes it, in every
    /// placeholder (as `git log --format` does) or, for an archive, in one ([`CommitInfo::archive`]).
    describe: Describer,
    /// The time relative dates (`%ar`, `%cr`) are counted to, in seconds since the epoch.
    pub now: i64,
}

impl std::fmt::Debug for CommitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitInfo")
            .field("id", &self.id)
            .field("refs", &self.refs)
            .field("archive", &self.describe.archive.as_ref().map(|a| a.tree))
            .finish_non_exhaustive()
    }
}

/// What `%(describe…)` needs: the repository, and for an archive which file expands one.
#[derive(Clone)]
struct Describer {
    repo: crate::Repo,
    archive: Option<Arc<Archive>>,
    /// Descriptions made so far, by their options.
    made: Arc<Mutex<HashMap<describe::Args, String>>>,
}

/// The archive `%(describe…)` is expanded in once (git's `max_invocations = 1`).
struct Archive {
    tree: ObjectId,
    settings: crate::convert::Settings,
    select: crate::select::Select,
    /// The file whose first `%(describe…)` reached is the archive's one, with its options
    /// (`None`: malformed, left as it is), found on first need; an error as its message.
    holder: OnceLock<Result<Option<describe::Holder>, String>>,
}

impl CommitInfo {
    /// Expand `%(describe…)` as `git archive` of tree `tree` does, written with `settings`
    /// (with `--export`) and the paths `select` selects: only the first placeholder reached,
    /// in the archive's order (depth first, entries in tree order; within a file, in order),
    /// expands; every later one stays as it is. Without this, every placeholder expands, as
    /// `git log --format` does.
    pub fn archive(
        mut self,
        tree: ObjectId,
        settings: &crate::convert::Settings,
        select: &crate::select::Select,
    ) -> Self {
        self.describe.archive = Some(Arc::new(Archive {
            tree,
            settings: settings.clone(),
            select: select.clone(),
            holder: OnceLock::new(),
        }));
        self
    }

    /// What `git describe` with `args` says of the commit, empty where it fails.
    fn described(&self, args: &describe::Args) -> Result<String, Error> {
        let d = &self.describe;
        if let Some(made) = d.made.lock().expect("never poisoned").get(args) {
            return Ok(made.clone());
        }
        let made = describe::describe(&d.repo.gix(), self.id, args)?;
        d.made.lock().expect("never poisoned").insert(args.clone(), made.clone());
        Ok(made)
    }

    /// For an archive: the file holding its `%(describe…)` and that placeholder's options.
    fn holder<'a>(&self, archive: &'a Archive) -> Result<Option<&'a describe::Holder>, Error> {
        archive
            .holder
            .get_or_init(|| describe::find_holder(&self.describe.repo, self, archive).map_err(|e| e.to_string()))
            .as_ref()
            .map(Option::as_ref)
            .map_err(|message| Error::Read {
                what: "tree (for its first %(describe))",
                id: archive.tree,
                source: Cause::found(message.clone()),
            })
    }

    /// Read commit `id` of `repo`: the commit object, the refs pointing at it, its description,
    /// with relative dates counted to the current time (as `git archive` does).
    pub fn from_commit(repo: &crate::Repo, id: ObjectId) -> Result<CommitInfo, Error> {
        let describe = Describer { repo: repo.clone(), archive: None, made: Default::default() };
        let repo = repo.gix();
        let err = |what, source| Error::Read { what, id, source };
        let object = repo.find_object(id).map_err(|e| err("commit object", Cause::gix(e)))?;
        if object.kind != gix::object::Kind::Commit {
            return Err(err("commit object", Cause::found(format!("it is a {}, not a commit", object.kind))));
        }
        let commit = object.into_commit();
        let tree = commit.tree_id().map_err(|e| err("commit object", Cause::gix(e)))?.detach();
        let parents: Vec<ObjectId> = commit.parent_ids().map(gix::Id::detach).collect();
        // Like git's `core.abbrev=auto`: long enough for the object count, at least 7, unique.
        let short = |oid: ObjectId| oid.attach(&repo).shorten_or_id().to_string();
        // git reads the commit object as a C string: it ends at a NUL.
        let data = commit.data.split(|b| *b == 0).next().unwrap_or_default();
        let header = parse_header(data);
        Ok(CommitInfo {
            id,
            short_id: short(id),
            tree,
            short_tree: short(tree),
            short_parents: parents.iter().map(|p| short(*p)).collect(),
            parents,
            author: header.author.into(),
            committer: header.committer.into(),
            encoding: header.encoding.map(Into::into),
            message: header.message.into(),
            signed: header.signed,
            refs: decorations(&repo, id).map_err(|e| err("refs", e))?,
            describe,
            now: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        })
    }
}

/// The parts of a commit object's header git's formatting reads.
struct Header<'a> {
    author: &'a [u8],
    committer: &'a [u8],
    encoding: Option<&'a [u8]>,
    message: &'a [u8],
    signed: bool,
}

/// Parse the header as git's `parse_commit_header` does: the last `author`/`committer` line
/// counts, the message starts after the first empty line.
fn parse_header(data: &[u8]) -> Header<'_> {
    let mut header = Header { author: b"", committer: b"", encoding: None, message: b"", signed: false };
    let mut rest = data;
    while !rest.is_empty() {
        let (line, next) = match rest.find_byte(b'\n') {
            Some(eol) => (&rest[..eol], &rest[eol + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        if line.is_empty() {
            header.message = next;
            break;
        }
        if let Some(v) = line.strip_prefix(b"author ") {
            header.author = v;
        } else if let Some(v) = line.strip_prefix(b"committer ") {
            header.committer = v;
        } else if let Some(v) = line.strip_prefix(b"encoding ") {
            header.encoding.get_or_insert(v);
        } else if line.starts_with(b"gpgsig ") || line.starts_with(b"gpgsig-sha256 ") {
            header.signed = true;
        }
        rest = next;
    }
    header
}

/// The kind of a ref name in a decoration (git's `enum decoration_type`, as far as it matters).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Head,
    Branch,
    Tag,
    Other,
}

/// The ref names pointing at `id`, rendered and ordered as git's `%D` shows them: git loads
/// every ref in name order and then `HEAD`, each put in front of the earlier ones, shows
/// `refs/tags/…` (and refs reaching the commit through a tag object) as `tag: …`, and `HEAD`
/// and the branch it points to as `HEAD -> branch`.
fn decorations(repo: &gix::Repository, id: ObjectId) -> Result<Vec<String>, Cause> {
    let mut found: Vec<(Kind, String)> = Vec::new();
    let mut refs: Vec<(BString, ObjectId)> = Vec::new();
    let platform = repo.references().map_err(Cause::gix)?;
    for reference in platform.all().map_err(Cause::gix)? {
        let mut reference = reference.map_err(Cause::gix)?;
        let name: BString = reference.name().as_bstr().to_owned();
        // A symbolic ref whose target is missing is no decoration (git skips it too).
        let Ok(target) = reference.follow_to_object() else { continue };
        refs.push((name, target.detach()));
    }
    refs.sort();
    let mut add = |name: &[u8], mut target: ObjectId, kind: Kind| -> Result<(), Cause> {
        if target == id {
            found.push((kind, name.to_str_lossy().into_owned()));
        }
        // Follow tag objects: their targets are decorated as tags.
        loop {
            let Ok(object) = repo.find_object(target) else { return Ok(()) };
            if object.kind != gix::object::Kind::Tag {
                return Ok(());
            }
            let Ok(tag) = object.try_into_tag() else { return Ok(()) };
            let Ok(tagged) = tag.target_id() else { return Ok(()) };
            target = tagged.detach();
            if target == id {
                found.push((Kind::Tag, name.to_str_lossy().into_owned()));
            }
        }
    };
    for (name, target) in &refs {
        if name.starts_with(b"refs/replace/") {
            continue;
        }
        let kind = if name.starts_with(b"refs/heads/") {
            Kind::Branch
        } else if name.starts_with(b"refs/tags/") {
            Kind::Tag
        } else {
            Kind::Other
        };
        add(name, *target, kind)?;
    }
    if let Ok(mut head) = repo.find_reference("HEAD")
        && let Ok(target) = head.follow_to_object()
    {
        add(b"HEAD", target.detach(), Kind::Head)?;
    }
    found.reverse();
    let current = repo.head_name().ok().flatten().map(|n| n.as_bstr().to_str_lossy().into_owned());
    let current = found
        .iter()
        .any(|(kind, _)| *kind == Kind::Head)
        .then_some(current)
        .flatten()
        .filter(|branch| found.iter().any(|(kind, name)| *kind == Kind::Branch && name == branch));
    let pretty = |name: &str| -> String {
        ["refs/heads/", "refs/tags/", "refs/remotes/"]
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix))
            .unwrap_or(name)
            .to_owned()
    };
    let mut out = Vec::new();
    for (kind, name) in &found {
        match kind {
            Kind::Branch if current.as_ref() == Some(name) => {}
            Kind::Head => match &current {
                Some(branch) => out.push(format!("HEAD -> {}", pretty(branch))),
                None => out.push("HEAD".into()),
            },
            Kind::Tag => out.push(format!("tag: {}", pretty(name))),
            Kind::Branch | Kind::Other => out.push(pretty(name)),
        }
    }
    Ok(out)
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

/// git's `isspace` (its own ctype table: space, tab, line feed, carriage return).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn trim_end(line: &[u8]) -> &[u8] {
    let end = line.iter().rposition(|b| !is_space(*b)).map_or(0, |i| i + 1);
    &line[..end]
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

/// An identity line split as git's `split_ident_line` splits it.
struct Ident<'a> {
    name: &'a [u8],
    mail: &'a [u8],
    /// The digits of the timestamp and the zone (`+0100`), when the line has both.
    date: Option<(&'a [u8], &'a [u8])>,
}

fn split_ident(line: &[u8]) -> Option<Ident<'_>> {
    let line = line.split(|b| *b == 0).next().unwrap_or_default();
    let lt = line.find_byte(b'<')?;
    let name = trim_end(&line[..lt]);
    let mail_len = line[lt + 1..].find_byte(b'>')?;
    let mail = &line[lt + 1..lt + 1 + mail_len];
    let last_gt = line.rfind_byte(b'>')?;
    let after = &line[last_gt + 1..];
    let after = &after[after.iter().take_while(|b| is_space(**b)).count()..];
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let date = (|| {
        let date_len = digits(after);
        if date_len == 0 {
            return None;
        }
        let rest = &after[date_len..];
        let rest = &rest[rest.iter().take_while(|b| is_space(**b)).count()..];
        let sign = *rest.first()?;
        if sign != b'+' && sign != b'-' {
            return None;
        }
        let tz_len = digits(&rest[1..]);
        (tz_len > 0).then(|| (&after[..date_len], &rest[..1 + tz_len]))
    })();
    Some(Ident { name, mail, date })
}

/// `%a?` and `%c?` (git's `format_person_part`). Returns 2 when `part` is a placeholder, 0
/// otherwise — and, as in git, also when it needs a part the line lacks, except for the
/// parts git then expands to nothing.
fn person(out: &mut Vec<u8>, part: Option<u8>, line: &[u8], now: i64) -> usize {
    let Some(part) = part else { return 0 };
    let skip = || if b"netdDri".contains(&part) { 2 } else { 0 };
    let Some(ident) = split_ident(line) else { return skip() };
    match part {
        // The mailmap is not read: %aN, %aE and %aL are %an, %ae and %al.
        b'n' | b'N' => out.extend_from_slice(ident.name),
        b'e' | b'E' => out.extend_from_slice(ident.mail),
        b'l' | b'L' => out.extend_from_slice(ident.mail.split(|b| *b == b'@').next().unwrap_or_default()),
        b't' | b'd' | b'D' | b'r' | b'i' | b'I' | b's' => {
            let Some((digits, zone)) = ident.date else { return skip() };
            if part == b't' {
                out.extend_from_slice(digits);
                return 2;
            }
            // git's show_ident_date: a timestamp that overflows is 0 (in UTC), an absurd zone 0.
            let zone = || {
                zone.to_str()
                    .ok()
                    .and_then(|z| z.parse::<i64>().ok())
                    .and_then(|z| i32::try_from(z).ok())
                    .filter(|z| *z != i32::MAX && *z != i32::MIN)
                    .unwrap_or(0)
            };
            let (time, zone) = match digits.to_str().ok().and_then(|d| d.parse::<i64>().ok()) {
                Some(time) => (time, zone()),
                None => (0, 0),
            };
            out.extend_from_slice(show_date(time, zone, part, now).as_bytes());
        }
        _ => return 0,
    }
    2
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// A date as git's `show_date` shows it in the commit's own zone: `zone` is the zone as git
/// reads it (`-0130` is -130), `mode` the placeholder letter (`d` git's default format, `D`
/// RFC 2822, `i` ISO 8601-like, `I` strict ISO 8601, `s` short, `r` relative to `now`).
fn show_date(time: i64, zone: i32, mode: u8, now: i64) -> String {
    if mode == b'r' {
        return relative(time, now);
    }
    let minutes = i64::from(zone.signum()) * (i64::from(zone.abs() / 100) * 60 + i64::from(zone.abs() % 100));
    let (local, zone) = match time.checked_add(minutes * 60) {
        Some(local) if local >= 0 => (local, zone),
        // git refuses a time before the epoch here; the epoch in UTC is what it falls back to.
        _ => (0, 0),
    };
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let (y, mo, d) = civil_from_days(days);
    let weekday = WEEKDAYS[(days + 4).rem_euclid(7) as usize];
    let month = MONTHS[(mo - 1) as usize];
    match mode {
        b's' => format!("{y:04}-{mo:02}-{d:02}"),
        b'i' => format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} {zone:+05}"),
        b'I' if zone == 0 => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        b'I' => {
            let sign = if zone >= 0 { '+' } else { '-' };
            let abs = zone.abs();
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{sign}{:02}:{:02}", abs / 100, abs % 100)
        }
        b'D' => format!("{weekday}, {d} {month} {y} {h:02}:{mi:02}:{s:02} {zone:+05}"),
        // git's default format hides the zone when it equals the "human" zone, which it
        // leaves at -1 outside --date=human.
        _ if zone == -1 => format!("{weekday} {month} {d} {h:02}:{mi:02}:{s:02} {y}"),
        _ => format!("{weekday} {month} {d} {h:02}:{mi:02}:{s:02} {y} {zone:+05}"),
    }
}

/// Year, month (1-12) and day (1-31) of a day counted from 1970-01-01 (the proleptic Gregorian
/// calendar, as `gmtime` computes it).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// git's `show_date_relative` (in English).
fn relative(time: i64, now: i64) -> String {
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if now < time {
        return "in the future".into();
    }
    let mut diff = now - time;
    if diff < 90 {
        return format!("{} ago", plural(diff, "second"));
    }
    diff = (diff + 30) / 60;
    if diff < 90 {
        return format!("{} ago", plural(diff, "minute"));
    }
    diff = (diff + 30) / 60;
    if diff < 36 {
        return format!("{} ago", plural(diff, "hour"));
    }
    diff = (diff + 12) / 24;
    if diff < 14 {
        return format!("{} ago", plural(diff, "day"));
    }
    if diff < 70 {
        return format!("{} ago", plural((diff + 3) / 7, "week"));
    }
    if diff < 365 {
        return format!("{} ago", plural((diff + 15) / 30, "month"));
    }
    if diff < 1825 {
        let total = (diff * 12 * 2 + 365) / (365 * 2);
        let (years, months) = (total / 12, total % 12);
        if months > 0 {
            return format!("{}, {} ago", plural(years, "year"), plural(months, "month"));
        }
        return format!("{} ago", plural(years, "year"));
    }
    format!("{} ago", plural((diff + 183) / 365, "year"))
}

#[cfg(test)]
mod tests;
