//! Submodules for `--recurse-submodules`: where a gitlink's repository is, and reading blobs
//! from several repositories.
//!
//! A gitlink (mode 160000) records a commit of another repository. [`Submodules`] finds that
//! repository as git does for a superproject: by the submodule's name in the `.gitmodules` of
//! the synced commit's tree (read from the object database, never from a working tree), in
//! `modules/NAME` under the superproject's git directory, or at the `.gitmodules` URL when it
//! is a local path (`/srv/lib.git`, `file:///srv/lib.git`) or relative to the superproject
//! (`../lib.git`, resolved against the superproject's path and its `origin` URL). Nested
//! submodules are found the same way inside each submodule's repository.
//!
//! A repository read at a local path taken from a URL is git's `file` protocol, which git
//! refuses for submodules unless `protocol.file.allow` (or `protocol.allow`) is `always`, or
//! `GIT_ALLOW_PROTOCOL` lists `file` ([`FileProtocol`]): whoever can push a `.gitmodules`
//! could otherwise copy any repository of this host into the target. The superproject's own
//! clones (`modules/NAME`, the working tree's checkout) need no setting.
//!
//! It implements [`plan::Gitlinks`], so the planner diffs a submodule's two commits in the
//! submodule's own object database; [`Blobs`] then reads the plan's blobs from whichever
//! repository holds them (blob ids are content addresses: any repository that has one gives
//! the same bytes).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::FindExt;
use serde::Serialize;

use crate::path::RelPath;
use crate::plan::{self, Gitlinks, Visit};

mod blobs;
mod error;

use crate::source::{self, Cause, Repo};
pub use blobs::Blobs;
pub use error::{Error, LocalUrl, MAX_NESTING};

impl From<Error> for plan::Error {
    fn from(e: Error) -> Self {
        plan::Error::Submodule(Box::new(e))
    }
}

/// A submodule a plan read: where, which commit, from which repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "submodule")]
pub struct Used {
    /// Its path in the target.
    pub path: String,
    /// Its name in `.gitmodules`.
    pub name: String,
    /// The commit whose tree was read.
    #[serde(serialize_with = "crate::json::id")]
    #[schemars(with = "crate::json::schema::ObjectId")]
    pub commit: ObjectId,
    /// The repository it was read from.
    pub repo: PathBuf,
}

/// Whether a submodule's repository may be read at a local path taken from its URL: git's
/// rules for the `file` protocol when `git submodule update` clones a submodule, read once from
/// the superproject (its configuration as gitoxide reads it: the repository's, global and
/// system files and `GIT_CONFIG_COUNT`, the last value winning) and applied at every level of
/// nesting.
///
/// `GIT_ALLOW_PROTOCOL`, when set, decides alone: allowed when its `:`-separated list names
/// `file`. Else `protocol.file.allow`, else `protocol.allow`: `always` allows; `never` and
/// `user` refuse (git runs a submodule's clone with `GIT_PROTOCOL_FROM_USER=0`, so `user`
/// means refused there); unset is `user` (git's default since 2.38.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProtocol {
    /// Whether it is allowed.
    pub allowed: bool,
    /// What decided it, as a user would look it up (`protocol.file.allow is never`).
    pub why: String,
    /// `GIT_ALLOW_PROTOCOL` decided (setting the configuration changes nothing).
    by_env: bool,
}

impl FileProtocol {
    /// What `repo`'s configuration and this process's environment say now (the configuration
    /// read again: a long-running `watch` sees a setting made after it started).
    pub fn of(repo: &Repo) -> FileProtocol {
        let repo = gix::open(repo.git_dir()).unwrap_or_else(|_| repo.gix());
        let config = repo.config_snapshot();
        let value = |key: &str| config.string(key).map(|v| v.to_str_lossy().into_owned());
        let env = std::env::var_os("GIT_ALLOW_PROTOCOL").map(|v| v.to_string_lossy().into_owned());
        FileProtocol::decide(
            env.as_deref(),
            value("protocol.file.allow").as_deref(),
            value("protocol.allow").as_deref(),
        )
    }

    /// The decision for `GIT_ALLOW_PROTOCOL`, `protocol.file.allow` and `protocol.allow`
    /// (each `None` when unset).
    fn decide(env: Option<&str>, file: Option<&str>, all: Option<&str>) -> FileProtocol {
        if let Some(list) = env {
            let allowed = list.split(':').any(|p| p == "file");
            let listed = if allowed { "lists" } else { "does not list" };
            return FileProtocol { allowed, why: format!("GIT_ALLOW_PROTOCOL={list:?} {listed} file"), by_env: true };
        }
        let Some((key, value)) = file.map(|v| ("protocol.file.allow", v)).or(all.map(|v| ("protocol.allow", v))) else {
            return FileProtocol {
                allowed: false,
                why: "protocol.file.allow is unset: git's default, `user`, refuses local paths for submodules".into(),
                by_env: false,
            };
        };
        let (allowed, why) = match value.to_ascii_lowercase().as_str() {
            "always" => (true, format!("{key} is always")),
            "never" => (false, format!("{key} is never")),
            "user" => (false, format!("{key} is user, which git refuses for submodules")),
            _ => (false, format!("{key} is {value:?}, which git does not know (it stops on it)")),
        };
        FileProtocol { allowed, why, by_env: false }
    }
}

/// One entry of a `.gitmodules` file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Module {
    name: String,
    /// Its path, relative to the root of the repository holding the `.gitmodules`.
    path: Vec<u8>,
    /// Its URL as written.
    url: Option<String>,
}

/// A repository's git directory and a tree of it.
type ModulesKey = (PathBuf, ObjectId);

/// What is shared by every level of nesting: opened repositories, parsed `.gitmodules`, what
/// was used, and what the superproject says about local-path URLs.
/// The entries of a `.gitmodules` by their path (slashes at the ends trimmed).
type ByPath = HashMap<Vec<u8>, Vec<Module>>;

struct Shared {
    /// The superproject's [`FileProtocol`].
    file: FileProtocol,
    /// The superproject, where `protocol.file.allow` is set.
    top: PathBuf,
    /// Repositories opened so far, by the path they were opened from (`None`: not there).
    opened: Mutex<HashMap<PathBuf, Option<Repo>>>,
    /// `.gitmodules` of a tree, by repository git dir and tree: its entries by path.
    modules: Mutex<HashMap<ModulesKey, Arc<ByPath>>>,
    used: Mutex<Vec<Used>>,
}

/// The submodules of a superproject ([module docs](self)). Repositories are opened when a
/// plan first needs them and kept open.
pub struct Submodules {
    repo: Repo,
    /// Root trees of the superproject's commits whose `.gitmodules` name its submodules.
    trees: Vec<ObjectId>,
    /// The directory of those commits the target holds (a subtree sync), else empty.
    subtree: Vec<u8>,
    shared: Shared,
}

impl std::fmt::Debug for Submodules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submodules").field("repo", &self.repo).field("trees", &self.trees).finish_non_exhaustive()
    }
}

impl Submodules {
    /// The submodules of `repo` as the `.gitmodules` of `commits` name them (the commit the
    /// target holds and the one it goes to; the later ones win where they differ), for a
    /// target holding directory `subtree` of those commits (`None`: the whole tree). A commit
    /// that cannot be read is left out (the sync says what is wrong with it where it needs it;
    /// a gitlink no remaining `.gitmodules` names is reported with the places looked).
    pub fn new(repo: &Repo, commits: &[ObjectId], subtree: Option<&str>) -> Submodules {
        let mut trees = Vec::new();
        // The later commit's .gitmodules first: it describes the submodules to fill in.
        for commit in commits.iter().rev() {
            if let Ok(tree) = commit_tree(repo, *commit)
                && !trees.contains(&tree)
            {
                trees.push(tree);
            }
        }
        Submodules {
            repo: repo.clone(),
            trees,
            subtree: subtree.map(|s| s.trim_matches('/').as_bytes().to_vec()).unwrap_or_default(),
            shared: Shared {
                file: FileProtocol::of(repo),
                top: repo.path().to_path_buf(),
                opened: Mutex::default(),
                modules: Mutex::default(),
                used: Mutex::default(),
            },
        }
    }

    /// The submodules the plans so far read, in the order they were first read.
    pub fn used(&self) -> Vec<Used> {
        self.shared.used.lock().expect("never poisoned: no code panics holding it").clone()
    }

    /// The superproject and every submodule repository the plans so far read from.
    pub fn repos(&self) -> Vec<Repo> {
        let mut out = vec![self.repo.clone()];
        let opened = self.shared.opened.lock().expect("never poisoned: no code panics holding it");
        let used = self.shared.used.lock().expect("never poisoned: no code panics holding it");
        for u in used.iter() {
            if let Some(Some(r)) = opened.get(&u.repo)
                && !out.iter().any(|o| o.git_dir() == r.git_dir())
            {
                out.push(r.clone());
            }
        }
        out
    }

    fn top(&self) -> Level<'_> {
        Level {
            shared: &self.shared,
            repo: self.repo.clone(),
            trees: self.trees.clone(),
            prefix: self.subtree.clone(),
            root: RelPath::root(),
            work: self.repo.work_dir(),
            depth: 0,
        }
    }
}

impl Gitlinks for Submodules {
    fn enter(
        &self,
        path: &RelPath,
        old: Option<ObjectId>,
        new: Option<ObjectId>,
        f: &mut Visit<'_>,
    ) -> Result<(), plan::Error> {
        self.top().enter(path, old, new, f)
    }
}

/// One repository whose gitlinks are being filled: the superproject, or a submodule (for
/// nested submodules).
struct Level<'s> {
    shared: &'s Shared,
    repo: Repo,
    /// Root trees whose `.gitmodules` name this repository's submodules.
    trees: Vec<ObjectId>,
    /// The directory of this repository's tree that is at `root` in the target.
    prefix: Vec<u8>,
    /// Where this repository's tree (its `prefix`) is in the target.
    root: RelPath,
    /// The superproject's work tree, if it has one: where `git submodule update` runs.
    work: Option<PathBuf>,
    /// How many submodules deep this repository is (0: the superproject).
    depth: usize,
}

/// A repository found for a gitlink's commit.
struct Found {
    repo: Repo,
    at: PathBuf,
    name: String,
}

impl Level<'_> {
    /// `path` (in the target) as a path in this repository's tree.
    fn path_in_repo(&self, path: &RelPath) -> Vec<u8> {
        let rest = &path.as_bytes()[self.root.as_bytes().len()..];
        let rest = rest.strip_prefix(b"/").unwrap_or(rest);
        match (self.prefix.is_empty(), rest.is_empty()) {
            (true, _) => rest.to_vec(),
            (false, true) => self.prefix.clone(),
            (false, false) => [&self.prefix[..], b"/", rest].concat(),
        }
    }

    /// The `.gitmodules` entries of tree `tree` (none without the file).
    fn modules_of(&self, tree: ObjectId) -> Result<Arc<ByPath>, Error> {
        let key = (self.repo.git_dir(), tree);
        if let Some(m) = self.shared.modules.lock().expect("never poisoned").get(&key) {
            return Ok(m.clone());
        }
        let bytes = self.repo.with_objects(|odb| -> Result<Option<Vec<u8>>, Error> {
            let mut buf = Vec::new();
            let entries =
                odb.find_tree_iter(&tree, &mut buf).map_err(|e| object_error("tree", tree, "", Cause::gix(e)))?;
            let mut blob = None;
            for e in entries {
                let e = e.map_err(|e| object_error("tree", tree, "", Cause::gix(e)))?;
                if e.filename == ".gitmodules" && e.mode.is_blob() {
                    blob = Some(e.oid.to_owned());
                }
            }
            let Some(blob) = blob else { return Ok(None) };
            let mut buf = Vec::new();
            let data =
                odb.find_blob(&blob, &mut buf).map_err(|e| object_error("blob", blob, ".gitmodules", Cause::gix(e)))?;
            Ok(Some(data.data.to_vec()))
        })?;
        // By path (as `modules_at` looks them up): one lookup per gitlink, not a scan of them
        // all (11,110 gitlinks made planning quadratic).
        let mut modules = ByPath::new();
        if let Some(bytes) = bytes {
            let bad = |message: String| Error::Gitmodules { tree, repo: self.repo.path().to_path_buf(), message };
            let file = gix::submodule::File::from_bytes(&bytes, None, &gix::config::File::default())
                .map_err(|e| bad(e.to_string()))?;
            for name in file.names() {
                // A name that would lead out of `modules/` (`../x`), or an entry without a
                // usable path, is no gitlink's: git refuses and skips them too.
                if gix_validate::submodule::name(name).is_err() {
                    continue;
                }
                let Ok(path) = file.path(name) else { continue };
                let url =
                    file.config().string_by("submodule", Some(name), "url").map(|u| u.to_str_lossy().into_owned());
                let m = Module { name: name.to_str_lossy().into_owned(), path: path.to_vec(), url };
                modules.entry(trim_slashes(&m.path).to_vec()).or_default().push(m);
            }
        }
        let modules = Arc::new(modules);
        self.shared.modules.lock().expect("never poisoned").insert(key, modules.clone());
        Ok(modules)
    }

    /// The submodules that may be at `in_repo`: named there by any of the `.gitmodules`
    /// (the later commit's first), without repeats.
    fn modules_at(&self, in_repo: &[u8]) -> Result<Vec<Module>, Error> {
        let mut out: Vec<Module> = Vec::new();
        for tree in &self.trees {
            for m in self.modules_of(*tree)?.get(in_repo).into_iter().flatten() {
                if !out.contains(m) {
                    out.push(m.clone());
                }
            }
        }
        Ok(out)
    }

    /// A repository at `at`, opened once (`None` when there is none).
    fn open(&self, at: &Path) -> Option<Repo> {
        let mut opened = self.shared.opened.lock().expect("never poisoned");
        if let Some(r) = opened.get(at) {
            return r.clone();
        }
        let r = if at.exists() { Repo::open(at).ok() } else { None };
        opened.insert(at.to_path_buf(), r.clone());
        r
    }

    /// Where the submodule `m` may be, in the order git would look, each with whether it is
    /// the local path its URL names (`false`: the superproject's own clone of it).
    fn candidates(&self, m: &Module, in_repo: &[u8]) -> Vec<(PathBuf, bool)> {
        let mut out = vec![(self.repo.git_dir().join("modules").join(&m.name), false)];
        if let Some(work) = self.repo.work_dir() {
            out.push((work.join(in_repo.to_path_lossy()), false));
        }
        if let Some(p) = m.url.as_deref().and_then(|url| self.local(url)) {
            out.push((p, true));
        }
        let mut unique: Vec<(PathBuf, bool)> = Vec::new();
        for (p, from_url) in out {
            if !unique.iter().any(|(u, _)| *u == p) {
                unique.push((p, from_url));
            }
        }
        unique
    }

    /// Where the URL `url` of a submodule of this repository is: relative URLs against this
    /// repository's path, as git resolves them for a superproject without a remote (a mirror
    /// whose submodules sit beside it).
    fn local(&self, url: &str) -> Option<PathBuf> {
        local_path(&resolve_url(url, &self.repo.path().to_string_lossy()))
    }

    /// Where `git clone` would fetch submodule URL `url` from: relative URLs against this
    /// repository's `origin` (its upstream, as `git submodule update` resolves them), else
    /// against its path.
    fn clone_url(&self, url: &str) -> String {
        let origin = gix::open(self.repo.git_dir())
            .ok()
            .and_then(|r| r.config_snapshot().string("remote.origin.url").map(|u| u.to_str_lossy().into_owned()));
        let base = origin.unwrap_or_else(|| self.repo.path().to_string_lossy().into_owned());
        let url = resolve_url(url, &base);
        local_path(&url).map_or(url, |p| p.display().to_string())
    }

    /// Find the repository holding `commit` for the gitlink at `path` (`in_repo` in this
    /// repository's tree).
    fn find(&self, path: &RelPath, in_repo: &[u8], modules: &[Module], commit: ObjectId) -> Result<Found, Error> {
        let mut looked = Vec::new();
        if modules.is_empty() {
            looked.push(format!(
                "the .gitmodules of {} (no submodule there has path {:?})",
                self.repo.path().display(),
                in_repo.to_str_lossy()
            ));
        }
        let file = &self.shared.file;
        let mut refused = None;
        for m in modules {
            for (at, from_url) in self.candidates(m, in_repo) {
                // git's `file` protocol: not even opened unless allowed.
                if from_url && !file.allowed && at.exists() {
                    looked.push(format!(
                        "{} (not read: the local path of URL {})",
                        at.display(),
                        m.url.as_deref().unwrap_or_default()
                    ));
                    refused.get_or_insert((m, at));
                    continue;
                }
                match self.open(&at) {
                    None if at.exists() => looked.push(format!("{} (not a git repository)", at.display())),
                    None => looked.push(format!("{} (no such directory)", at.display())),
                    Some(repo) => {
                        if has_commit(&repo, commit) {
                            return Ok(Found { repo, at, name: m.name.clone() });
                        }
                        looked.push(format!("{} (does not have commit {commit})", at.display()));
                    }
                }
            }
            if let Some(url) = &m.url
                && self.local(url).is_none()
            {
                looked.push(format!("URL {url} (not a local path; treesync does not fetch)"));
            }
        }
        if let Some((m, at)) = refused {
            return Err(Error::LocalUrl(Box::new(LocalUrl {
                name: m.name.clone(),
                path: path.display(),
                url: m.url.clone().unwrap_or_default(),
                why: file.why.clone(),
                hint: self.allow_hint(m, &at),
                at,
                looked,
            })));
        }
        let module = modules.first();
        Err(Error::NotFound {
            name: module.map(|m| m.name.clone()),
            path: path.display(),
            commit,
            looked,
            hint: self.hint(module, in_repo),
        })
    }

    /// A command that makes submodule `m` available here.
    fn hint(&self, m: Option<&Module>, in_repo: &[u8]) -> String {
        let Some(m) = m else {
            return format!(
                "the gitlink at {:?} has no entry in .gitmodules; add one (`git submodule add URL {}`) in the repository",
                in_repo.to_str_lossy(),
                in_repo.to_str_lossy()
            );
        };
        if let Some(work) = &self.work {
            return format!("run `git -C {} submodule update --init --recursive`", work.display());
        }
        let modules = self.repo.git_dir().join("modules").join(&m.name);
        if modules.exists() {
            return format!(
                "fetch the missing commit into it: `git -C {} fetch origin +refs/heads/*:refs/heads/* +refs/tags/*:refs/tags/*`",
                modules.display()
            );
        }
        let url = m.url.as_deref().map_or_else(|| "URL".into(), |u| self.clone_url(u));
        format!("clone the submodule there: `git clone --bare {url} {}`", modules.display())
    }

    /// How to let treesync read submodule `m` from `at`, the local path of its URL: allow
    /// the `file` protocol in the superproject, or clone it where the superproject's own
    /// clones are.
    fn allow_hint(&self, m: &Module, at: &Path) -> String {
        let modules = self.repo.git_dir().join("modules").join(&m.name);
        let own = format!(
            "or make it the superproject's own clone, read without that: `git clone --bare {} {}`",
            at.display(),
            modules.display()
        );
        if self.shared.file.by_env {
            return format!(
                "if you trust the local repositories submodule URLs name, add file to GIT_ALLOW_PROTOCOL; {own}"
            );
        }
        format!(
            "if you trust the local repositories this repository's submodule URLs name, allow them: `git -C {} config protocol.file.allow always` (--global for every repository); {own}",
            self.shared.top.display()
        )
    }

    /// Run `f` in `found`'s object database, from `old` to `new` (commits of it).
    fn run(
        &self,
        path: &RelPath,
        found: &Found,
        old: Option<ObjectId>,
        new: Option<ObjectId>,
        f: &mut Visit<'_>,
    ) -> Result<(), plan::Error> {
        {
            let mut used = self.shared.used.lock().expect("never poisoned");
            for commit in [old, new].into_iter().flatten() {
                let u = Used { path: path.display(), name: found.name.clone(), commit, repo: found.at.clone() };
                if !used.contains(&u) {
                    used.push(u);
                }
            }
        }
        let old_tree = old.map(|c| commit_tree(&found.repo, c)).transpose().map_err(Error::from)?;
        let new_tree = new.map(|c| commit_tree(&found.repo, c)).transpose().map_err(Error::from)?;
        let nested = Level {
            shared: self.shared,
            repo: found.repo.clone(),
            trees: [new_tree, old_tree].into_iter().flatten().collect(),
            prefix: Vec::new(),
            root: path.clone(),
            work: self.work.clone(),
            depth: self.depth + 1,
        };
        found.repo.with_objects(|odb| f(odb, old_tree, new_tree, &nested))
    }
}

impl Gitlinks for Level<'_> {
    fn enter(
        &self,
        path: &RelPath,
        old: Option<ObjectId>,
        new: Option<ObjectId>,
        f: &mut Visit<'_>,
    ) -> Result<(), plan::Error> {
        if self.depth >= MAX_NESTING {
            return Err(Error::TooDeep { path: path.display() }.into());
        }
        let in_repo = self.path_in_repo(path);
        let modules = self.modules_at(&in_repo)?;
        match (old, new) {
            (Some(a), Some(b)) => {
                let found = self.find(path, &in_repo, &modules, b)?;
                if has_commit(&found.repo, a) {
                    return self.run(path, &found, Some(a), Some(b), f);
                }
                // The submodule moved to another repository: empty it from the old one first.
                let was = self.find(path, &in_repo, &modules, a)?;
                self.run(path, &was, Some(a), None, f)?;
                self.run(path, &found, None, Some(b), f)
            }
            (Some(a), None) => {
                let was = self.find(path, &in_repo, &modules, a)?;
                self.run(path, &was, Some(a), None, f)
            }
            (None, Some(b)) => {
                let found = self.find(path, &in_repo, &modules, b)?;
                self.run(path, &found, None, Some(b), f)
            }
            (None, None) => Ok(()),
        }
    }
}

/// `url` resolved against `base` as git resolves a submodule's URL against its superproject's:
/// a relative URL (`./x`, `../x`) takes one component off `base` for each `../`; any other URL
/// is returned as it is.
fn resolve_url(url: &str, base: &str) -> String {
    let url = url.trim_end_matches('/');
    if !(url.starts_with("./") || url.starts_with("../")) {
        return url.to_string();
    }
    let mut base = base.trim_end_matches('/').to_string();
    let mut rest = url;
    loop {
        if let Some(r) = rest.strip_prefix("./") {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("../") {
            rest = r;
            match base.rfind('/') {
                Some(i) => base.truncate(i),
                None => base.clear(),
            }
        } else {
            break;
        }
    }
    if base.is_empty() { rest.to_string() } else { format!("{base}/{rest}") }
}

/// `url` as a local path, when it is one: absolute or `file://`.
fn local_path(url: &str) -> Option<PathBuf> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    path.starts_with('/').then(|| normalize(Path::new(path)))
}

/// `p` without `.` and `..` components (resolved lexically).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn trim_slashes(p: &[u8]) -> &[u8] {
    let p = p.strip_prefix(b"./").unwrap_or(p);
    let end = p.iter().rposition(|b| *b != b'/').map_or(0, |i| i + 1);
    &p[..end]
}

fn object_error(what: &'static str, id: ObjectId, at: &str, source: Cause) -> Error {
    Error::Object(source::Error::Object {
        what,
        id,
        at: if at.is_empty() { String::new() } else { format!(" (at {at})") },
        source,
    })
}

/// Does `repo` hold commit `id`?
fn has_commit(repo: &Repo, id: ObjectId) -> bool {
    repo.with_objects(|odb| matches!(odb.try_header(&id), Ok(Some(h)) if h.kind == gix_object::Kind::Commit))
}

/// The tree of commit `id` in `repo`.
fn commit_tree(repo: &Repo, id: ObjectId) -> Result<ObjectId, source::Error> {
    repo.with_objects(|odb| {
        let mut buf = Vec::new();
        odb.find_commit(&id, &mut buf).map(|c| c.tree()).map_err(|e| source::Error::Object {
            what: "commit",
            id,
            at: format!(" (in {})", repo.path().display()),
            source: Cause::gix(e),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_urls_resolve_against_the_superproject_as_git_does() {
        let base = "/srv/git/super.git";
        let local = |url: &str| local_path(&resolve_url(url, base));
        assert_eq!(local("../lib.git"), Some(PathBuf::from("/srv/git/lib.git")));
        assert_eq!(local("../../other/lib.git/"), Some(PathBuf::from("/srv/other/lib.git")));
        assert_eq!(local("./lib"), Some(PathBuf::from("/srv/git/super.git/lib")));
        assert_eq!(local("/abs/lib.git"), Some(PathBuf::from("/abs/lib.git")));
        assert_eq!(local("file:///abs/lib.git"), Some(PathBuf::from("/abs/lib.git")));
        assert_eq!(local("https://example.com/lib.git"), None);
        assert_eq!(local("git@example.com:lib.git"), None);
        assert_eq!(resolve_url("../lib.git", "https://example.com/team/super.git"), "https://example.com/team/lib.git");
    }

    #[test]
    fn local_path_submodule_urls_are_allowed_as_git_allows_the_file_protocol_for_submodules() {
        let allowed = |env, file, all| FileProtocol::decide(env, file, all).allowed;
        // git's default since 2.38.1 is `user`, and submodules are no user's: refused.
        assert!(!allowed(None, None, None));
        assert!(allowed(None, Some("always"), None));
        assert!(allowed(None, Some("Always"), None), "git compares case-insensitively");
        assert!(!allowed(None, Some("user"), None));
        assert!(!allowed(None, Some("never"), None));
        assert!(!allowed(None, Some("yes"), None), "a value git does not know");
        // protocol.allow is the fallback for a protocol without its own setting.
        assert!(allowed(None, None, Some("always")));
        assert!(!allowed(None, Some("never"), Some("always")), "never, even when every protocol is allowed");
        assert!(!allowed(None, Some("user"), Some("always")));
        assert!(allowed(None, Some("always"), Some("never")));
        // GIT_ALLOW_PROTOCOL overrides every setting.
        assert!(allowed(Some("ssh:file:https"), Some("never"), None));
        assert!(!allowed(Some("ssh:https"), Some("always"), Some("always")));
        assert!(!allowed(Some(""), Some("always"), None));
        let why = |env, file, all| FileProtocol::decide(env, file, all).why;
        assert_eq!(why(None, Some("never"), Some("always")), "protocol.file.allow is never");
        assert_eq!(why(None, None, Some("user")), "protocol.allow is user, which git refuses for submodules");
        assert!(why(None, None, None).starts_with("protocol.file.allow is unset"));
        assert_eq!(why(Some("ssh"), None, None), "GIT_ALLOW_PROTOCOL=\"ssh\" does not list file");
    }
}
