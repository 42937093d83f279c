//! [`Resolver`]: the [`Conversion`] of each path at plan time, from the `.gitattributes` files
//! of the synced tree, and what gitoxide's pipeline makes of a conversion's attributes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use gix::attrs::StateRef;
use gix::attrs::search::{MetadataCollection, Outcome};
use gix::bstr::{BStr, BString, ByteSlice};
use gix::glob::pattern::Case;
use gix_hash::ObjectId;

use super::settings::Settings;
use super::{Conversion, Error, encoding};

/// The attributes that decide how a file is written, in the order git's pipeline reads them.
const FILTER_ATTRIBUTES: [&str; 6] = ["crlf", "ident", "filter", "eol", "text", "working-tree-encoding"];

/// Everything a lookup asks for: [`FILTER_ATTRIBUTES`] and the `git archive` ones.
const LOOKED_UP: [&str; 8] =
    ["crlf", "ident", "filter", "eol", "text", "working-tree-encoding", "export-ignore", "export-subst"];

/// What the pipeline makes of a [`Conversion`]'s attributes, compiled once per conversion
/// (kept in [`Conversion::compiled`], shared by every path that has it).
pub(super) struct Compiled {
    /// `ident`: `$Id$` is expanded, as git does (treesync's own [`ident`], before the
    /// pipeline: gitoxide's writes `$Id: …$` where git writes `$Id: … $`).
    pub(super) ident: bool,
    /// `working-tree-encoding=…`: re-encoded from UTF-8 after the line ends, as git does
    /// (treesync's own [`encode`](encoding::encode): gitoxide's goes through `encoding_rs`,
    /// which cannot write UTF-16).
    pub(super) encoding: Option<String>,
    /// What gitoxide's pipeline is given for line ends: `text`, `eol` and `crlf`.
    eol_attributes: String,
    /// The filter driver gitoxide's pipeline runs (never `lfs`: treesync reads LFS objects
    /// itself).
    pub(super) driver: Option<String>,
    /// The assignments as a search gitoxide's pipeline can read, built on first use.
    search: OnceLock<(gix::attrs::Search, MetadataCollection)>,
    /// The same for the filter driver alone (`-text filter=NAME`).
    driver_search: OnceLock<(gix::attrs::Search, MetadataCollection)>,
}

/// What the pipeline makes of `conversion` (compiled on first use).
pub(super) fn compiled(conversion: &Conversion) -> &Compiled {
    conversion.compiled(Compiled::new)
}

impl Compiled {
    fn new(conversion: &Conversion) -> Compiled {
        let attributes = &conversion.attributes;
        let parts = || attributes.split(' ').filter(|a| !a.is_empty());
        let ident = parts().any(|a| a == "ident");
        let encoding = parts()
            .find_map(|a| a.strip_prefix("working-tree-encoding="))
            .filter(|label| encoding::converts(label))
            .map(str::to_string);
        let eol: Vec<&str> = parts()
            .filter(|a| {
                let name = a.trim_start_matches('-').split('=').next().unwrap_or_default();
                matches!(name, "text" | "eol" | "crlf")
            })
            .collect();
        let driver = conversion.filter.clone().filter(|f| f != "lfs");
        Compiled {
            eol_attributes: eol.join(" "),
            driver,
            encoding,
            ident,
            search: Default::default(),
            driver_search: Default::default(),
        }
    }

    /// Fill `out` with this conversion's attributes (the callback of gitoxide's pipeline).
    ///
    /// Every conversion's search is made with the same attribute ids ([`canonical`]): the
    /// pipeline reuses one outcome for all paths, and an outcome keeps the ids it resolved.
    pub(super) fn fill(&self, stage: Stage, path: &BStr, out: &mut Outcome) {
        let (cell, line) = match stage {
            Stage::Eol => (&self.search, format!("* {}\n", self.eol_attributes)),
            Stage::Driver => {
                (&self.driver_search, format!("* -text filter={}\n", self.driver.as_deref().unwrap_or_default()))
            }
        };
        let (search, _) = cell.get_or_init(|| {
            let mut collection = canonical().clone();
            let mut search = gix::attrs::Search::default();
            search
                .add_patterns_buffer(line.as_bytes(), "<treesync>".into(), None, &mut collection, true)
                .expect("a line made of parsed assignments parses");
            (search, collection)
        });
        out.initialize(canonical());
        search.pattern_matching_relative_path(path, Case::Sensitive, Some(false), out);
    }
}

/// The two passes through gitoxide's pipeline: line ends, then the filter driver (git's
/// order is ident, line ends, encoding, driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    Eol,
    Driver,
}

/// The attribute ids every [`Conversion`]'s search uses: the pipeline's attributes, in its
/// order.
fn canonical() -> &'static MetadataCollection {
    static CANONICAL: OnceLock<MetadataCollection> = OnceLock::new();
    CANONICAL.get_or_init(|| {
        let mut collection = MetadataCollection::default();
        let line = format!("* {}\n", FILTER_ATTRIBUTES.join(" "));
        gix::attrs::Search::default()
            .add_patterns_buffer(line.as_bytes(), "<treesync>".into(), None, &mut collection, true)
            .expect("attribute names parse");
        collection
    })
}

/// The `.gitattributes` files of one tree that a plan has seen: path (`dir/.gitattributes`)
/// → blob. Every directory a diff enters is listed, so every written path's directories are.
pub type AttributeFiles = Vec<(BString, ObjectId)>;

/// `info/attributes`, matched on its own and laid over the stack's result (it takes precedence
/// over every `.gitattributes`).
struct Info {
    /// The file.
    text: String,
    /// The top-level `.gitattributes` blob, whose macros the file may use.
    root: Option<ObjectId>,
    search: gix::attrs::Search,
    collection: MetadataCollection,
    out: Outcome,
    /// Whether `search` holds the top-level macros and the file yet ([`Resolver::info_search`]).
    ready: bool,
}

/// A fault for the tests of `verify --oracle git`, in debug builds only: with
/// `TREESYNC_FAULT_FORGET_BUILTIN_MACROS=1`, `binary` is not a macro (the bug issue 30 found),
/// in syncs and in treesync's own verify alike — which then cannot see it; git can.
fn forget_builtin_macros() -> bool {
    cfg!(debug_assertions) && std::env::var_os("TREESYNC_FAULT_FORGET_BUILTIN_MACROS").is_some_and(|v| v == "1")
}

/// The `[attr]NAME …` lines of an attributes file (macro definitions), with line ends.
fn macro_lines(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with(b"[attr]") {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

/// Looks up the [`Conversion`] of paths of one tree, at plan time.
pub struct Resolver {
    stack: gix::worktree::Stack,
    info: Option<Info>,
    every_file: bool,
    export: bool,
    /// No `.gitattributes` file, global attributes file or `info/attributes`: no path has an
    /// attribute, so [`Resolver::at`] needs no lookup (on 100,000 files, the lookups were ~40%
    /// of a warm verify's user CPU).
    no_patterns: bool,
    out: Outcome,
    interned: HashMap<(String, Option<String>, bool), Arc<Conversion>>,
}

impl Resolver {
    /// A resolver for a tree whose `.gitattributes` files are `files`, under `settings`
    /// (with [`Settings::export`], `export-ignore` and `export-subst` count).
    pub fn new(settings: &Settings, mut files: AttributeFiles) -> Result<Resolver, Error> {
        let export = settings.export;
        let attributes_err = |what: &str, source| Error::Attributes { what: what.into(), source };
        let mut collection = MetadataCollection::default();
        // git's built-in macro first (`[attr]binary -diff -merge -text`), then the global file.
        let mut globals = if forget_builtin_macros() {
            gix::attrs::Search::default()
        } else {
            gix::attrs::Search::new_globals(None::<PathBuf>, &mut Vec::new(), &mut collection)
                .map_err(|e| attributes_err("the built-in macros", e))?
        };
        if let Some(text) = &settings.attributes_file {
            globals
                .add_patterns_buffer(text.as_bytes(), "core.attributesFile".into(), None, &mut collection, true)
                .map_err(|e| attributes_err("core.attributesFile", e))?;
        }
        // Macros `info/attributes` defines apply in every `.gitattributes` too: the stack
        // learns their definitions (with the lowest precedence: only their `[attr]` lines).
        if let Some(text) = &settings.info_attributes {
            let macros = macro_lines(text.as_bytes());
            if !macros.is_empty() {
                globals
                    .add_patterns_buffer(&macros, "info/attributes".into(), None, &mut collection, true)
                    .map_err(|e| attributes_err("info/attributes", e))?;
            }
        }
        let info = match &settings.info_attributes {
            Some(text) => {
                // The built-in macros, those the global file and the top-level `.gitattributes`
                // define (added on first use: [`Resolver::info_search`]), then the file.
                let mut c = MetadataCollection::default();
                let mut s = gix::attrs::Search::new_globals(None::<PathBuf>, &mut Vec::new(), &mut c)
                    .map_err(|e| attributes_err("the built-in macros", e))?;
                if let Some(global) = &settings.attributes_file {
                    let macros = macro_lines(global.as_bytes());
                    s.add_patterns_buffer(&macros, "core.attributesFile".into(), None, &mut c, true)
                        .map_err(|e| attributes_err("core.attributesFile", e))?;
                }
                let root = files.iter().find(|(p, _)| p == ".gitattributes").map(|(_, id)| *id);
                Some(Info { text: text.clone(), root, search: s, collection: c, out: Outcome::default(), ready: false })
            }
            None => None,
        };
        let state = gix::worktree::stack::State::AttributesStack(gix::worktree::stack::state::Attributes::new(
            globals,
            None,
            gix::worktree::stack::state::attributes::Source::IdMapping,
            collection,
        ));
        files.sort_by(|a, b| a.0.cmp(&b.0));
        files.dedup_by(|a, b| a.0 == b.0);
        // No attribute anywhere (the common tree): every path resolves alike, with no lookup.
        let no_patterns = files.is_empty() && settings.attributes_file.is_none() && info.is_none();
        let stack = gix::worktree::Stack::new("", state, Case::Sensitive, Vec::new(), files);
        let mut out = Outcome::default();
        out.initialize_with_selection(&MetadataCollection::default(), LOOKED_UP);
        Ok(Resolver {
            stack,
            info,
            every_file: settings.converts_every_file(),
            export,
            no_patterns,
            out,
            interned: HashMap::new(),
        })
    }

    /// The conversion of the file at `path` (`None`: written as the blob is), and whether
    /// `git archive` leaves it out (`export-ignore`).
    pub fn at(&mut self, path: &BStr, odb: &dyn gix_object::Find) -> Result<(Option<Arc<Conversion>>, bool), Error> {
        if self.no_patterns {
            return Ok((self.every_file.then(|| self.conversion(Vec::new(), None, false)), false));
        }
        let platform = self
            .stack
            .at_entry(path, Some(gix::index::entry::Mode::FILE), odb)
            .map_err(|source| Error::Attributes { what: format!(".gitattributes above {path}"), source })?;
        platform.matching_attributes(&mut self.out);
        // name → assignment, the stack's first, then info/attributes over it.
        let mut found: [Option<String>; LOOKED_UP.len()] = Default::default();
        let show = |name: &str, state: StateRef<'_>| match state {
            StateRef::Set => Some(name.to_string()),
            StateRef::Unset => Some(format!("-{name}")),
            StateRef::Value(v) => Some(format!("{name}={}", v.as_bstr())),
            StateRef::Unspecified => None,
        };
        for (i, m) in self.out.iter_selected().enumerate() {
            found[i] = show(LOOKED_UP[i], m.assignment.state);
        }
        if let Some(Info { search, collection, out, .. }) = self.info_search(odb)? {
            out.initialize(collection);
            search.pattern_matching_relative_path(path, Case::Sensitive, Some(false), out);
            for (i, m) in out.iter_selected().enumerate() {
                if let Some(a) = show(LOOKED_UP[i], m.assignment.state) {
                    found[i] = Some(a);
                }
            }
        }
        if let Some(a @ ("working-tree-encoding" | "-working-tree-encoding")) = found[5].as_deref() {
            return Err(Error::EncodingNotNamed { path: path.to_str_lossy().into_owned(), attribute: a.to_string() });
        }
        let export_ignore = self.export && matches!(found[6].as_deref(), Some("export-ignore"));
        let export_subst = self.export && matches!(found[7].as_deref(), Some("export-subst"));
        let filter = found[2].as_deref().and_then(|f| f.strip_prefix("filter=")).map(str::to_string);
        let attributes: Vec<&str> = found[..FILTER_ATTRIBUTES.len()].iter().flatten().map(String::as_str).collect();
        if attributes.is_empty() && !export_subst && !self.every_file {
            return Ok((None, export_ignore));
        }
        Ok((Some(self.conversion(attributes, filter, export_subst)), export_ignore))
    }

    /// The `info/attributes` search, complete: on first use, the macros of the top-level
    /// `.gitattributes` (read from `odb`) are added below the file's own lines.
    fn info_search(&mut self, odb: &dyn gix_object::Find) -> Result<Option<&mut Info>, Error> {
        let Some(info) = &mut self.info else { return Ok(None) };
        if !info.ready {
            let attributes_err = |what: &str, source| Error::Attributes { what: what.into(), source };
            if let Some(id) = info.root {
                let mut buf = Vec::new();
                let blob = gix_object::FindExt::find_blob(odb, &id, &mut buf)
                    .map_err(|e| attributes_err(".gitattributes", std::io::Error::other(e)))?;
                let macros = macro_lines(blob.data);
                info.search
                    .add_patterns_buffer(&macros, ".gitattributes".into(), None, &mut info.collection, true)
                    .map_err(|e| attributes_err(".gitattributes", e))?;
            }
            info.search
                .add_patterns_buffer(info.text.as_bytes(), "info/attributes".into(), None, &mut info.collection, true)
                .map_err(|e| attributes_err("info/attributes", e))?;
            info.out.initialize_with_selection(&info.collection, LOOKED_UP);
            info.ready = true;
        }
        Ok(self.info.as_mut())
    }

    /// The one [`Conversion`] of these attributes (interned: paths alike share it).
    fn conversion(&mut self, attributes: Vec<&str>, filter: Option<String>, export_subst: bool) -> Arc<Conversion> {
        let key = (attributes.join(" "), filter, export_subst);
        self.interned
            .entry(key)
            .or_insert_with_key(|(a, f, x)| Arc::new(Conversion::new(a.clone(), f.clone(), *x)))
            .clone()
    }

    /// Whether `git archive` leaves out the entry at `path` itself (`export-ignore` on it; a
    /// directory's applies to all below it, which the caller checks). Always `false` without
    /// [`Settings::export`].
    pub fn export_ignored(&mut self, path: &BStr, is_dir: bool, odb: &dyn gix_object::Find) -> Result<bool, Error> {
        if !self.export || self.no_patterns {
            return Ok(false);
        }
        if !is_dir {
            return Ok(self.at(path, odb)?.1);
        }
        let platform = self
            .stack
            .at_entry(path, Some(gix::index::entry::Mode::DIR), odb)
            .map_err(|source| Error::Attributes { what: format!(".gitattributes above {path}"), source })?;
        platform.matching_attributes(&mut self.out);
        let mut ignored =
            self.out.iter_selected().nth(6).map(|m| matches!(m.assignment.state, StateRef::Set)).unwrap_or(false);
        if let Some(Info { search, collection, out, .. }) = self.info_search(odb)? {
            out.initialize(collection);
            search.pattern_matching_relative_path(path, Case::Sensitive, Some(true), out);
            if let Some(m) = out.iter_selected().nth(6)
                && !matches!(m.assignment.state, StateRef::Unspecified)
            {
                ignored = matches!(m.assignment.state, StateRef::Set);
            }
        }
        Ok(ignored)
    }

    /// Refuse `filter=NAME` paths whose driver is required but has no command
    /// ([`Error::RequiredFilter`]); `uses`: (driver name, path) of every converted path planned.
    pub fn check_required<'a>(
        settings: &Settings,
        repo: &std::path::Path,
        uses: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), Error> {
        let mut broken: BTreeMap<&str, (Vec<String>, usize)> = BTreeMap::new();
        for (name, path) in uses {
            if name == "lfs" {
                continue; // treesync reads LFS objects itself
            }
            if let Some(d) = settings.drivers.get(name)
                && d.required
                && d.smudge.is_none()
                && d.process.is_none()
            {
                let e = broken.entry(name).or_default();
                if e.0.len() < 5 {
                    e.0.push(path.to_string());
                }
                e.1 += 1;
            }
        }
        match broken.into_iter().next() {
            Some((name, (first_paths, count))) => {
                Err(Error::RequiredFilter { name: name.into(), repo: repo.to_path_buf(), first_paths, count })
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod macro_tests {
    use super::*;

    #[test]
    fn binary_in_info_attributes_is_the_builtin_macro() {
        let settings = Settings { info_attributes: Some("*.png binary\n".into()), ..Default::default() };
        let mut r = Resolver::new(&settings, Vec::new()).expect("parses");
        let odb = gix_object::find::Never;
        let (c, _) = r.at("x.png".into(), &odb).expect("resolves");
        assert_eq!(c.expect("a conversion").attributes, "-text", "binary is -diff -merge -text");
    }
}
