//! [`Select`]: which paths a sync writes (`--include` / `--exclude`).
//!
//! Patterns are gitignore patterns (one pattern per `--include`/`--exclude`, as one line of a
//! `.gitignore` file) and are matched by gitoxide (`gix-ignore`, `gix-glob`), so they mean what
//! git makes of them. The rules are in [`Select`] and in `docs/select.md`.

use gix::bstr::{BStr, ByteSlice};
use gix::glob::pattern::Case;
use gix::ignore::search::Ignore;

/// A pattern given to `--include` or `--exclude` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pattern is empty, a comment, or holds a line break: it would match nothing.
    #[error(
        "cannot use {option} {pattern:?}: {why}\n  hint: {option} takes one gitignore pattern (like `*.md`, `docs/`, `/build/`, `**/tmp`, `!keep.md`); repeat the option for more, and escape a leading `#` or `!` as `\\#`, `\\!`"
    )]
    Pattern {
        /// `--include` or `--exclude`.
        option: &'static str,
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The patterns are valid, but they select no path of the commit: a sync would make the
    /// target empty (a typo, or patterns written as paths of the file system).
    #[error(
        "refusing to sync: the selection {} selects no path of commit {commit}{in_path}\n  hint: patterns are gitignore patterns matched against the paths of the tree from its root (`git -C {repo} ls-tree -r --name-only {commit}` lists them): `docs/` is a directory named docs anywhere, `/docs/` the top one, `*.md` markdown files anywhere (see docs/select.md); nothing was written",
        shown(patterns),
        in_path = path.as_ref().map(|p| format!(" (in its directory {p})")).unwrap_or_default(),
        repo = repo.display(),
    )]
    SelectsNothing {
        /// The patterns.
        patterns: Patterns,
        /// The commit.
        commit: gix::ObjectId,
        /// The directory of the commit that is synced (`REV:PATH`), if not the whole tree.
        path: Option<String>,
        /// The repository, for the hint.
        repo: std::path::PathBuf,
    },
    /// The commit's tree could not be read to check the selection against it.
    #[error(transparent)]
    Source(#[from] crate::source::Error),
}

/// `--include "docs/" --exclude "*.tmp"`: the patterns as given.
fn shown(patterns: &Patterns) -> String {
    let options =
        patterns.include.iter().map(|p| ("--include", p)).chain(patterns.exclude.iter().map(|p| ("--exclude", p)));
    options.map(|(option, p)| format!("{option} {p:?}")).collect::<Vec<_>>().join(" ")
}

/// The patterns of a [`Select`], as the state file records them (both lists left out when empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Patterns {
    /// `--include` patterns, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    /// `--exclude` patterns, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

/// Which paths of the tree a sync writes.
///
/// Both lists hold gitignore patterns, matched as git matches a `.gitignore` file at the root of
/// the tree: `*.md` (a name anywhere), `/docs/` or `docs/api` (anchored at the root by a leading or
/// middle slash), `build/` (directories only), `**/tmp`, and `!keep.md` (negation). Inside each
/// list the last matching pattern wins, and as in git a path below a directory that the list
/// matches is matched too: a `!` pattern cannot take a path back out of a matched directory.
///
/// * With no include patterns every path is included. Otherwise a path is included when it or
///   one of its parent directories is matched by the include list: `--include docs/` takes the
///   whole `docs` directory, `--include '*.md'` takes markdown files everywhere.
/// * Then a path is left out when it or one of its parent directories is matched by the exclude
///   list.
///
/// A directory that is not itself included may still hold included paths (`src` with
/// `--include '*.md'`): [`Select::may_include_below`] tells whether a walk must descend into it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Patterns", into = "Patterns")]
pub struct Select {
    patterns: Patterns,
    include: gix::ignore::Search,
    exclude: gix::ignore::Search,
}

impl PartialEq for Select {
    fn eq(&self, other: &Select) -> bool {
        self.patterns == other.patterns
    }
}

impl Eq for Select {}

impl Default for Select {
    /// The selection of every path.
    fn default() -> Select {
        Select::all()
    }
}

/// A [`Select`] is recorded as its [`Patterns`].
impl schemars::JsonSchema for Select {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        Patterns::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Patterns::json_schema(generator)
    }
}

impl TryFrom<Patterns> for Select {
    type Error = Error;

    /// As recorded: only the checks of old (a state file written before a check was added
    /// stays readable; the sync that wrote it used the patterns as they were).
    fn try_from(patterns: Patterns) -> Result<Select, Error> {
        Select::build(&patterns.include, &patterns.exclude, false)
    }
}

impl From<Select> for Patterns {
    fn from(select: Select) -> Patterns {
        select.patterns
    }
}

impl Select {
    /// Every path (no include and no exclude patterns).
    pub fn all() -> Select {
        Select { patterns: Patterns::default(), include: Default::default(), exclude: Default::default() }
    }

    /// The selection of `include` and `exclude` patterns (see [`Select`] for what they mean).
    /// A pattern that can match no path is an [`Error::Pattern`]: empty, blank, a `#` comment,
    /// a lone `!`, one holding a line break, `/` alone, one with a `.` or `..` component (paths
    /// of the tree have none), an unclosed bracket expression (`[`) or a trailing lone `\`
    /// (git's matcher gives up on both: they match nothing).
    pub fn new(include: &[String], exclude: &[String]) -> Result<Select, Error> {
        Select::build(include, exclude, true)
    }

    /// [`Select::new`], with the checks of a pattern's text itself or only the old ones.
    fn build(include: &[String], exclude: &[String], strict: bool) -> Result<Select, Error> {
        Ok(Select {
            include: search("--include", include, strict)?,
            exclude: search("--exclude", exclude, strict)?,
            patterns: Patterns { include: include.to_vec(), exclude: exclude.to_vec() },
        })
    }

    /// Check that the selection selects some path of the tree `resolved` (of the commit named by
    /// `rev` in `repo`) before a sync writes anything: [`Error::SelectsNothing`] otherwise, as
    /// syncing would remove every path from the target. A submodule (gitlink) counts as selected
    /// when it is, or, with `recurse_submodules` (its tree is not read here), when a pattern may
    /// select a path inside it. The selection of every path passes without reading the tree.
    pub fn check_selects_some(
        &self,
        repo: &crate::Repo,
        rev: &str,
        resolved: crate::source::Resolved,
        recurse_submodules: bool,
    ) -> Result<(), Error> {
        if self.patterns.include.is_empty() && self.patterns.exclude.is_empty() {
            return Ok(());
        }
        if self.selects_some(&repo.thread_local(), resolved.tree, recurse_submodules)? {
            return Ok(());
        }
        Err(Error::SelectsNothing {
            patterns: self.patterns.clone(),
            commit: resolved.commit,
            path: crate::source::subtree_path(rev),
            repo: repo.path().to_path_buf(),
        })
    }

    /// Whether some file, symlink or gitlink below `tree` is selected; walks only directories
    /// that may hold a selected path, and stops at the first one.
    fn selects_some(
        &self,
        repo: &gix::Repository,
        tree: gix::ObjectId,
        recurse_submodules: bool,
    ) -> Result<bool, crate::source::Error> {
        use crate::source::{Cause, Error};
        let mut dirs = vec![(gix::bstr::BString::default(), tree)];
        while let Some((dir, id)) = dirs.pop() {
            let read = |source: Cause| Error::Object {
                what: "tree",
                id,
                at: if dir.is_empty() { String::new() } else { format!(" (at {dir})") },
                source,
            };
            let object = repo.find_object(id).map_err(|e| read(Cause::gix(e)))?;
            let tree = object.try_into_tree().map_err(|e| read(Cause::gix(e)))?;
            let decoded = tree.decode().map_err(|e| read(Cause::gix(e)))?;
            for entry in &decoded.entries {
                let mut path = dir.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(entry.filename);
                let path = path.as_bstr();
                let mode = entry.mode;
                if mode.is_tree() {
                    if self.includes(path, true) || self.may_include_below(path) {
                        dirs.push((path.to_owned(), entry.oid.to_owned()));
                    }
                } else if mode.is_commit() {
                    if self.includes(path, true) || (recurse_submodules && self.may_include_below(path)) {
                        return Ok(true);
                    }
                } else if self.includes(path, false) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The patterns this selection was made of.
    pub fn patterns(&self) -> &Patterns {
        &self.patterns
    }

    /// True when every path is included (no patterns at all).
    pub fn is_all(&self) -> bool {
        self.patterns.include.is_empty() && self.patterns.exclude.is_empty()
    }

    /// Whether the sync writes `path` (relative to the tree's root, `/`-separated, without a
    /// leading or trailing slash); `is_dir` tells whether it is a directory of the tree.
    pub fn includes(&self, path: &BStr, is_dir: bool) -> bool {
        (self.patterns.include.is_empty() || matches(&self.include, path, is_dir))
            && !matches(&self.exclude, path, is_dir)
    }

    /// Whether some path below the directory `dir` may be included; `false` only when none can
    /// be, so a walk can skip the directory. That is when `dir` is matched by the exclude list
    /// (a `!` pattern cannot take anything below it back), or when there are include patterns,
    /// `dir` is not matched by them and none of them can match a path below `dir`. When unsure
    /// (a pattern with `**`, or a bracket expression holding a `/`) the answer is `true`.
    pub fn may_include_below(&self, dir: &BStr) -> bool {
        if matches(&self.exclude, dir, true) {
            return false;
        }
        if self.patterns.include.is_empty() || matches(&self.include, dir, true) {
            return true;
        }
        let components: Vec<&[u8]> = dir.split_str("/").filter(|c| !c.is_empty()).collect();
        self.include.patterns.iter().flat_map(|list| &list.patterns).any(|mapping| {
            let pattern = &mapping.pattern;
            !pattern.is_negative() && may_match_below(pattern, &components)
        })
    }
}

/// The patterns of one list as a gitoxide search, each pattern checked on its own (`strict`:
/// also [`never_matches`]).
fn search(option: &'static str, patterns: &[String], strict: bool) -> Result<gix::ignore::Search, Error> {
    for pattern in patterns {
        let err = |why| Error::Pattern { option, pattern: pattern.clone(), why };
        if pattern.contains(['\n', '\r']) {
            return Err(err("it holds a line break"));
        }
        if gix::ignore::parse(pattern.as_bytes(), false).count() != 1 {
            return Err(err("it is empty, blank, a lone `!` or a `#` comment, and would match nothing"));
        }
        if let Some(why) = never_matches(pattern).filter(|_| strict) {
            return Err(err(why));
        }
    }
    Ok(gix::ignore::Search::from_overrides(patterns.iter().map(String::as_str), Ignore::default()))
}

/// Whether `list` matches `path` as git matches an ignore file: a parent directory the list
/// matches (its last matching pattern not a negation) matches everything below it; otherwise
/// the last pattern matching the path itself decides.
fn matches(list: &gix::ignore::Search, path: &BStr, is_dir: bool) -> bool {
    let path = path.trim_start_with(|c| c == '/').trim_end_with(|c| c == '/').as_bstr();
    if path.is_empty() {
        return false;
    }
    let decides = |p: &BStr, is_dir: bool| {
        list.pattern_matching_relative_path(p, Some(is_dir), Case::Sensitive).is_some_and(|m| !m.pattern.is_negative())
    };
    let parents = path.find_iter("/").map(|at| path[..at].as_bstr());
    for parent in parents {
        if decides(parent, true) {
            return true;
        }
    }
    decides(path, is_dir)
}

/// Whether `pattern` can match a path strictly below the directory whose path `dir` lists.
/// A pattern without a slash matches names at any depth; an anchored one must match `dir`
/// component by component and go deeper. Conservative: `true` when the pattern cannot be
/// split into components cleanly.
fn may_match_below(pattern: &gix::glob::Pattern, dir: &[&[u8]]) -> bool {
    use gix::glob::pattern::Mode;
    if pattern.mode.contains(Mode::NO_SUB_DIR) && !pattern.mode.contains(Mode::ABSOLUTE) {
        return true;
    }
    let text: &[u8] = pattern.text.as_ref();
    if text.find(b"**").is_some() || !splits_cleanly(text) {
        return true;
    }
    let parts: Vec<&[u8]> = text.split_str("/").collect();
    if parts.len() <= dir.len() {
        // It matches paths no deeper than `dir` itself: `dir` or its parents, whose match is
        // the same for every path below and was looked at already.
        return false;
    }
    parts.iter().zip(dir).all(|(part, name)| {
        gix::glob::wildmatch(part.as_bstr(), name.as_bstr(), gix::glob::wildmatch::Mode::NO_MATCH_SLASH_LITERAL)
    })
}

/// Why a pattern that gitoxide parses can still match no path, if it cannot.
fn never_matches(pattern: &str) -> Option<&'static str> {
    let text = pattern.trim_start();
    let text = text.strip_prefix('!').unwrap_or(text);
    // Trailing spaces are dropped unless escaped; what is left is matched.
    let trimmed = text.trim_end_matches(' ');
    let text = if trimmed.ends_with('\\') && trimmed.len() < text.len() { &text[..trimmed.len() + 1] } else { trimmed };
    if text.trim_matches('/').is_empty() {
        return Some(
            "`/` alone names no path (patterns match paths inside the tree; without --include every path is synced)",
        );
    }
    if text.trim_matches('/').split('/').any(|c| c == "." || c == "..") {
        return Some(
            "the paths of a tree have no `.` or `..` component: a pattern is matched against the paths from the tree's root, like a line of the root's .gitignore",
        );
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 == bytes.len() => {
                return Some("it ends with a lone `\\`, which escapes nothing (git matches nothing with it)");
            }
            b'\\' => i += 2,
            b'[' => match bracket_end(bytes, i) {
                Some(end) => i = end + 1,
                None => {
                    return Some(
                        "the bracket expression `[` is not closed by a `]`, so git matches nothing with it (write `\\[` for a literal `[`)",
                    );
                }
            },
            _ => i += 1,
        }
    }
    None
}

/// Where the bracket expression opened at `bytes[open]` ends (its `]`), as git's wildmatch
/// reads it: a `!` or `^` first negates, a `]` right after is a member, `\\` escapes the next
/// byte and `[:class:]` is one member. `None` when it is not closed.
fn bracket_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(bytes.get(i), Some(b'!' | b'^')) {
        i += 1;
    }
    if bytes.get(i) == Some(&b']') {
        i += 1;
    }
    while i < bytes.len() {
        match bytes[i] {
            b']' => return Some(i),
            b'\\' => i += 2,
            b'[' if bytes.get(i + 1) == Some(&b':') => {
                let close = bytes[i + 2..].windows(2).position(|w| w == b":]");
                i = close.map_or(i + 1, |at| i + 2 + at + 2);
            }
            _ => i += 1,
        }
    }
    None
}

/// True when every `/` in a pattern separates components: none inside a bracket expression or
/// after a backslash.
fn splits_cleanly(text: &[u8]) -> bool {
    let mut in_bracket = false;
    let mut escaped = false;
    for &c in text {
        match c {
            _ if escaped => {
                if c == b'/' {
                    return false;
                }
                escaped = false;
            }
            b'\\' => escaped = true,
            b'[' => in_bracket = true,
            b']' => in_bracket = false,
            b'/' if in_bracket => return false,
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests;
