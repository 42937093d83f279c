//! [`CommitInfo`]: what the placeholders of one commit expand to, read from the repository.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use gix::bstr::{BString, ByteSlice};
use gix::prelude::ObjectIdExt;
use gix_hash::ObjectId;

use super::{Error, describe};
use crate::source::Cause;

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
    pub(super) describe: Describer,
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
pub(super) struct Describer {
    pub(super) repo: crate::Repo,
    pub(super) archive: Option<Arc<Archive>>,
    /// Descriptions made so far, by their options.
    made: Arc<Mutex<HashMap<describe::Args, String>>>,
}

/// The archive `%(describe…)` is expanded in once (git's `max_invocations = 1`).
pub(super) struct Archive {
    pub(super) tree: ObjectId,
    pub(super) settings: crate::convert::Settings,
    pub(super) select: crate::select::Select,
    /// The file whose first `%(describe…)` reached is the archive's one, with its options
    /// (`None`: malformed, left as it is), found on first need; an error as its message.
    pub(super) holder: OnceLock<Result<Option<describe::Holder>, String>>,
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
    pub(super) fn described(&self, args: &describe::Args) -> Result<String, Error> {
        let d = &self.describe;
        if let Some(made) = d.made.lock().expect("never poisoned").get(args) {
            return Ok(made.clone());
        }
        let made = describe::describe(&d.repo.gix(), self.id, args)?;
        d.made.lock().expect("never poisoned").insert(args.clone(), made.clone());
        Ok(made)
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
