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

    fn try_from(patterns: Patterns) -> Result<Select, Error> {
        Select::new(&patterns.include, &patterns.exclude)
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
    /// A pattern that matches nothing (empty, blank, a `#` comment, a lone `!`) or holds a line
    /// break is an [`Error::Pattern`].
    pub fn new(include: &[String], exclude: &[String]) -> Result<Select, Error> {
        Ok(Select {
            include: search("--include", include)?,
            exclude: search("--exclude", exclude)?,
            patterns: Patterns { include: include.to_vec(), exclude: exclude.to_vec() },
        })
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

/// The patterns of one list as a gitoxide search, each pattern checked on its own.
fn search(option: &'static str, patterns: &[String]) -> Result<gix::ignore::Search, Error> {
    for pattern in patterns {
        let err = |why| Error::Pattern { option, pattern: pattern.clone(), why };
        if pattern.contains(['\n', '\r']) {
            return Err(err("it holds a line break"));
        }
        if gix::ignore::parse(pattern.as_bytes(), false).count() != 1 {
            return Err(err("it is empty, blank, a lone `!` or a `#` comment, and would match nothing"));
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
