//! `.gitattributes` conversions, as `git checkout` applies them on Linux: `text`, `text=auto`,
//! `eol`, the legacy `crlf`, `ident`, `working-tree-encoding` and filter drivers
//! (`filter=NAME` with `filter.NAME.smudge` or `.process`).
//!
//! Attributes are looked up by gitoxide ([`gix::worktree::Stack`] over the `.gitattributes`
//! blobs of the synced tree, never the target's files) and converted by gitoxide's filter
//! pipeline ([`gix::filter::plumbing::Pipeline`]). treesync adds what a checkout needs around
//! them:
//!
//! * [`Settings`]: the repository-wide inputs (`core.autocrlf`, `core.eol`, `core.attributesFile`,
//!   `info/attributes`, the filter drivers), recorded in the target's state so that a later run
//!   knows how the files it wrote were converted;
//! * [`Resolver`]: at plan time, the [`Conversion`] of each path written (the attributes that
//!   apply to it), from the `.gitattributes` files the diff passed on its way;
//! * [`Converter`]: at write time, the bytes of a blob after its conversion.
//!
//! `info/attributes` takes precedence over every `.gitattributes` file, as in git (gitoxide's
//! stack puts it below deeper directories' files; treesync matches it on its own and lays it
//! over the stack's result).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use gix::attrs::StateRef;
use gix::attrs::search::{MetadataCollection, Outcome};
use gix::bstr::{BStr, BString, ByteSlice};
use gix::filter::plumbing as filter;
use gix::glob::pattern::Case;
use gix_hash::ObjectId;
use serde::{Deserialize, Serialize};

use crate::lfs::{self, LfsMode, Pointer};

mod encoding;
mod ident;

pub use encoding::Refusal;

/// The version of the conversion rules: recorded in the state with the settings, so that files
/// an older treesync wrote with rules since corrected (0: before attribute macros, iconv
/// encodings and git's two `ident` rule sets) are written again once.
pub const RULES: u32 = 1;

/// The attributes that decide how a file is written, in the order git's pipeline reads them.
const FILTER_ATTRIBUTES: [&str; 6] = ["crlf", "ident", "filter", "eol", "text", "working-tree-encoding"];

/// Everything a lookup asks for: [`FILTER_ATTRIBUTES`] and the `git archive` ones.
const LOOKED_UP: [&str; 8] =
    ["crlf", "ident", "filter", "eol", "text", "working-tree-encoding", "export-ignore", "export-subst"];

/// Converting failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository's configuration could not be read.
    #[error(
        "cannot read the conversion settings of repository {repo}: {message}\n  hint: `git -C {repo} config --list` shows what git reads; fix the value it names"
    )]
    Config {
        /// The repository.
        repo: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An attributes file could not be read or parsed.
    #[error(
        "cannot read attributes {what}: {source}\n  hint: the file must be readable; `git check-attr -a PATH` shows what git makes of it"
    )]
    Attributes {
        /// Which file.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A `filter.NAME.required` driver has no command configured.
    #[error(
        "the filter driver {name:?} is required (filter.{name}.required) but has no smudge or process command configured, and {count} path(s) use it: {paths}\n  hint: configure it (`git -C {repo} config filter.{name}.smudge COMMAND`, or .process) or remove filter={name} from .gitattributes; nothing was written",
        repo = repo.display(), paths = first_paths.join(", "), count = count
    )]
    RequiredFilter {
        /// The driver.
        name: String,
        /// The repository whose config names it.
        repo: PathBuf,
        /// The first paths that use it.
        first_paths: Vec<String>,
        /// How many paths use it.
        count: usize,
    },
    /// An `export-subst` placeholder git expands and treesync cannot (`--export`): the error
    /// names the file and the placeholder, with its own hint.
    #[error(transparent)]
    Placeholder(crate::export::Error),
    /// `working-tree-encoding` is set or unset without naming an encoding (git dies on it).
    #[error(
        "{path} has the attribute {attribute}, which names no encoding (git stops with \"true/false are no valid working-tree-encodings\")\n  hint: give it a value (`working-tree-encoding=UTF-16`) or remove it from the .gitattributes line that matches {path} (`git check-attr --source=REV working-tree-encoding -- {path}` in the repository shows what git sees); nothing was written"
    )]
    EncodingNotNamed {
        /// The file.
        path: String,
        /// How the attribute is written (`working-tree-encoding` or `-working-tree-encoding`).
        attribute: String,
    },
    /// A conversion failed while writing a file.
    #[error(
        "cannot convert {path} for the working tree ({attributes}): {message}\n  hint: a filter driver named by the attributes must succeed on this file: run its command on the file by hand to see why it fails (`git config --get-regexp '^filter[.]'` in the repository lists the drivers)"
    )]
    Convert {
        /// The file.
        path: String,
        /// Its attributes.
        attributes: String,
        /// What failed.
        message: String,
    },
    /// A Git LFS object could not be read (missing, corrupt, unreadable).
    #[error(transparent)]
    Lfs(#[from] lfs::Error),
}

/// The conversion error a [`BlobSource`](crate::source::BlobSource) carried
/// ([`BlobError::Convert`](crate::source::BlobError::Convert)), as this module's error again.
impl From<Box<dyn std::error::Error + Send + Sync + 'static>> for Error {
    fn from(e: Box<dyn std::error::Error + Send + Sync + 'static>) -> Error {
        let e = match e.downcast::<Error>() {
            Ok(e) => return *e,
            Err(e) => e,
        };
        match e.downcast::<crate::source::NotConverting>() {
            Ok(n) => Error::Convert {
                path: n.path,
                attributes: n.attributes,
                message: "this blob source does not convert (read through source::Converting)".into(),
            },
            Err(e) => Error::Convert { path: String::new(), attributes: String::new(), message: e.to_string() },
        }
    }
}

/// A filter driver as the repository's config defines it (`filter.NAME.*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriverConfig {
    /// `filter.NAME.smudge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smudge: Option<String>,
    /// `filter.NAME.process`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Whether `filter.NAME.clean` is set (git then converts the file in memory, which
    /// changes its `ident` rules).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clean: bool,
    /// `filter.NAME.required`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// The repository-wide inputs of the conversions, as the state records them: two runs with
/// equal settings convert every file the same way, so only paths whose blob or attributes
/// changed are written. When they differ, every file is re-evaluated once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Settings {
    /// `core.autocrlf` (`true`, `input`, `false`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autocrlf: Option<String>,
    /// `core.eol` (`lf`, `crlf`, `native`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eol: Option<String>,
    /// The text of the global attributes file (`core.attributesFile`, else
    /// `$XDG_CONFIG_HOME/git/attributes`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes_file: Option<String>,
    /// The text of the repository's `info/attributes`, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_attributes: Option<String>,
    /// The filter drivers of the repository's config, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drivers: BTreeMap<String, DriverConfig>,
    /// `git archive` semantics (`--export`): `export-ignore` paths are left out and
    /// `export-subst` placeholders expanded. Not read from the repository: the sync sets it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub export: bool,
    /// What files git stores as Git LFS pointers (`filter=lfs`) are written as: their content
    /// from the repository's LFS store (`content`, the default, left out of the state) or the
    /// pointer files (`pointers`). Not read from the repository: the sync's `--lfs` sets it.
    #[serde(default, skip_serializing_if = "is_content")]
    pub lfs: LfsMode,
    /// The conversion rules the files were written with ([`RULES`]; 0 in a state an older
    /// treesync wrote).
    #[serde(default)]
    pub rules: u32,
}

/// Whether `mode` is the default, [`LfsMode::Content`] (not recorded).
fn is_content(mode: &LfsMode) -> bool {
    *mode == LfsMode::Content
}

impl Settings {
    /// The settings `repo` has now.
    pub fn of(repo: &crate::Repo) -> Result<Settings, Error> {
        let r = repo.thread_local();
        let config_err = |message: String| Error::Config { repo: repo.path().to_path_buf(), message };
        let snapshot = r.config_snapshot();
        let get = |key: &str| snapshot.string(key).map(|v| v.to_str_lossy().into_owned());
        let options = gix::filter::Pipeline::options(&r).map_err(|e| config_err(e.to_string()))?;
        let drivers = options
            .drivers
            .iter()
            .map(|d| {
                let s = |v: &Option<BString>| v.as_ref().map(|v| v.to_str_lossy().into_owned());
                (
                    d.name.to_str_lossy().into_owned(),
                    DriverConfig {
                        smudge: s(&d.smudge),
                        process: s(&d.process),
                        clean: d.clean.is_some(),
                        required: d.required,
                    },
                )
            })
            .collect();
        let attributes_path = match snapshot.trusted_path("core.attributesFile") {
            Ok(Some(p)) => Some(p),
            Ok(None) => std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
                .map(|d| d.join("git").join("attributes")),
            Err(e) => return Err(config_err(format!("core.attributesFile: {e}"))),
        };
        let read = |p: Option<PathBuf>| -> Result<Option<String>, Error> {
            let Some(p) = p else { return Ok(None) };
            match std::fs::read(&p) {
                Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(Error::Attributes { what: p.display().to_string(), source }),
            }
        };
        Ok(Settings {
            autocrlf: get("core.autocrlf"),
            eol: get("core.eol"),
            attributes_file: read(attributes_path)?,
            info_attributes: read(Some(r.common_dir().join("info").join("attributes")))?,
            drivers,
            export: false,
            lfs: LfsMode::Content,
            rules: RULES,
        })
    }

    /// `core.autocrlf` and `core.eol` as gitoxide's pipeline takes them (values git does not
    /// know count as unset, as they do for git).
    fn eol_config(&self) -> filter::eol::Configuration {
        let truthy = |v: &str| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1");
        let auto_crlf = match self.autocrlf.as_deref() {
            Some(v) if v.eq_ignore_ascii_case("input") => filter::eol::AutoCrlf::Input,
            Some(v) if truthy(v) => filter::eol::AutoCrlf::Enabled,
            _ => filter::eol::AutoCrlf::Disabled,
        };
        let eol = match self.eol.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("lf") => Some(filter::eol::Mode::Lf),
            Some("crlf") => Some(filter::eol::Mode::CrLf),
            _ => None,
        };
        filter::eol::Configuration { auto_crlf, eol }
    }

    /// Whether files without any attribute are converted too (`core.autocrlf=true`: text files
    /// get CRLF).
    fn converts_every_file(&self) -> bool {
        self.eol_config().auto_crlf == filter::eol::AutoCrlf::Enabled
    }

    /// The pipeline options these settings make.
    fn pipeline_options(&self) -> filter::pipeline::Options {
        filter::pipeline::Options {
            drivers: self
                .drivers
                .iter()
                .map(|(name, d)| filter::Driver {
                    name: name.as_str().into(),
                    clean: None,
                    smudge: d.smudge.as_deref().map(Into::into),
                    process: d.process.as_deref().map(Into::into),
                    required: d.required,
                })
                .collect(),
            eol_config: self.eol_config(),
            ..Default::default()
        }
    }
}

pub use treesync_backend::conversion::Conversion;

/// What the pipeline makes of a [`Conversion`]'s attributes, compiled once per conversion
/// (kept in [`Conversion::compiled`], shared by every path that has it).
struct Compiled {
    /// `ident`: `$Id$` is expanded, as git does (treesync's own [`ident`], before the
    /// pipeline: gitoxide's writes `$Id: …$` where git writes `$Id: … $`).
    ident: bool,
    /// `working-tree-encoding=…`: re-encoded from UTF-8 after the line ends, as git does
    /// (treesync's own [`encode`](encoding::encode): gitoxide's goes through `encoding_rs`,
    /// which cannot write UTF-16).
    encoding: Option<String>,
    /// What gitoxide's pipeline is given for line ends: `text`, `eol` and `crlf`.
    eol_attributes: String,
    /// The filter driver gitoxide's pipeline runs (never `lfs`: treesync reads LFS objects
    /// itself).
    driver: Option<String>,
    /// The assignments as a search gitoxide's pipeline can read, built on first use.
    search: OnceLock<(gix::attrs::Search, MetadataCollection)>,
    /// The same for the filter driver alone (`-text filter=NAME`).
    driver_search: OnceLock<(gix::attrs::Search, MetadataCollection)>,
}

/// What the pipeline makes of `conversion` (compiled on first use).
fn compiled(conversion: &Conversion) -> &Compiled {
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
    fn fill(&self, stage: Stage, path: &BStr, out: &mut Outcome) {
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
enum Stage {
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

/// Converts blobs for the working tree at write time: gitoxide's pipelines (one per thread
/// converting at once; a long-running filter process is started once per pipeline) under
/// one [`Settings`]. With [`LfsMode::Content`] it also holds the repository's Git LFS store,
/// opened once, and writes the object of each `filter=lfs` pointer.
pub struct Converter {
    settings: Settings,
    lfs: Option<lfs::Store>,
    context: gix::command::Context,
    object_hash: gix_hash::Kind,
    pool: Mutex<Vec<filter::Pipeline>>,
    /// The commit `export-subst` placeholders are expanded with.
    commit: Option<crate::export::CommitInfo>,
    /// The files written unconverted because git refuses their `working-tree-encoding`.
    unconverted: Mutex<BTreeMap<String, Unconverted>>,
}

/// A file git writes unconverted, after an error, and so does treesync: its
/// `working-tree-encoding` cannot be converted to (git's "failed to encode").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Unconverted {
    /// The file.
    pub path: String,
    /// The encoding its attributes name.
    pub encoding: String,
    /// Why it cannot be converted.
    pub why: Refusal,
}

impl std::fmt::Display for Unconverted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: working-tree-encoding={}: {}", self.path, self.encoding, self.why)
    }
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Converter {
    /// A converter for `repo` (its command context: the git dir filter drivers run with)
    /// under `settings`; with [`LfsMode::Content`], `repo`'s LFS store is opened
    /// ([`lfs::Store::open`]: fails only when the repository is gone).
    pub fn new(repo: &crate::Repo, settings: Settings) -> Result<Converter, Error> {
        let r = repo.thread_local();
        let context = r
            .command_context()
            .map_err(|e| Error::Config { repo: repo.path().to_path_buf(), message: e.to_string() })?;
        let lfs = match settings.lfs {
            LfsMode::Content => Some(lfs::Store::open(repo)?),
            LfsMode::Pointers => None,
        };
        Ok(Converter {
            settings,
            lfs,
            context,
            object_hash: r.object_hash(),
            pool: Mutex::new(Vec::new()),
            commit: None,
            unconverted: Mutex::new(BTreeMap::new()),
        })
    }

    /// Expand `export-subst` placeholders with `commit` (with [`Settings::export`]).
    pub fn with_commit(mut self, commit: crate::export::CommitInfo) -> Converter {
        self.commit = Some(commit);
        self
    }

    /// Record (and log) that `path` is written unconverted, as git writes it.
    fn refused(&self, path: &BStr, encoding: &str, why: Refusal) {
        let path = path.to_str_lossy().into_owned();
        let mut all = self.unconverted.lock().expect("never poisoned");
        if let std::collections::btree_map::Entry::Vacant(slot) = all.entry(path.clone()) {
            let u = Unconverted { path, encoding: encoding.to_string(), why };
            tracing::debug!(target: "treesync::convert", "written unconverted, as git writes it: {u}");
            slot.insert(u);
        }
    }

    /// The files written unconverted so far (git refuses their `working-tree-encoding` too).
    pub fn unconverted(&self) -> Vec<Unconverted> {
        self.unconverted.lock().expect("never poisoned").values().cloned().collect()
    }

    /// Whether `git checkout` streams a file converted by `conversion` (`get_stream_filter`):
    /// no filter driver with a command, no `working-tree-encoding`, no line-end detection
    /// (`text=auto` unless `eol=lf`, legacy `crlf=auto`, `core.autocrlf=true` without a text
    /// attribute). `git archive` never streams. It decides which `ident` rules apply.
    fn streams(&self, conversion: &Conversion) -> bool {
        if self.settings.export || compiled(conversion).encoding.is_some() {
            return false;
        }
        if let Some(d) = conversion.filter.as_deref().and_then(|f| self.settings.drivers.get(f))
            && (d.process.is_some() || d.smudge.is_some() || d.clean)
        {
            return false;
        }
        let value = |name: &str| {
            conversion.attributes.split(' ').find_map(|a| {
                if a == name {
                    Some("true")
                } else if a.strip_prefix('-') == Some(name) {
                    Some("false")
                } else {
                    a.strip_prefix(name).and_then(|v| v.strip_prefix('='))
                }
            })
        };
        // git's `git_path_check_crlf` on `text`, then on the legacy `crlf` (a value it does not
        // know counts as unset). Only its "auto" actions convert in memory.
        let known = |v: &&str| matches!(*v, "true" | "false" | "input" | "auto");
        match value("text").filter(known).or_else(|| value("crlf").filter(known)) {
            Some("auto") => value("eol") == Some("lf"),
            Some(_) => true,
            None => {
                matches!(value("eol"), Some("lf" | "crlf"))
                    || self.settings.eol_config().auto_crlf != filter::eol::AutoCrlf::Enabled
            }
        }
    }

    /// The settings it converts with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// This converter reading LFS objects from `store` (with [`LfsMode::Content`]; a converter
    /// writing pointer files stays as it is).
    pub fn with_lfs_store(mut self, store: lfs::Store) -> Converter {
        if self.lfs.is_some() {
            self.lfs = Some(store);
        }
        self
    }

    /// The LFS store the content of `filter=lfs` pointers is read from; `None` with
    /// [`LfsMode::Pointers`] (pointer files are written as they are).
    pub fn lfs_store(&self) -> Option<&lfs::Store> {
        self.lfs.as_ref()
    }

    /// The pointer whose object is written instead of `data` (the blob at a path converted by
    /// `conversion`): with `filter=lfs`, [`LfsMode::Content`] and a blob that is a pointer.
    /// Anything else is converted as it is (git-lfs passes blobs that are not pointers through).
    pub fn lfs_pointer(&self, data: &[u8], conversion: &Conversion) -> Option<Pointer> {
        if self.lfs.is_none() || !conversion.is_lfs() {
            return None;
        }
        Pointer::parse(data)
    }

    /// Feed `data` (the blob `blob` at `path`), converted by `conversion`, to `sink`: `$Id$`
    /// expanded, line ends converted, re-encoded, then the filter driver — git's order. A Git
    /// LFS pointer ([`Converter::lfs_pointer`]) is replaced by its object, streamed from the
    /// store in chunks (its size and sha256 checked on the way), as `git lfs smudge` does.
    /// Then, with `export-subst`, `$Format:…$` is expanded as `git archive` does.
    pub fn convert(
        &self,
        data: &[u8],
        path: &BStr,
        blob: &ObjectId,
        conversion: &Conversion,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), ConvertError> {
        self.convert_within(data, path, blob, conversion, crate::smudge::DEFAULT_TIMEOUT, u64::MAX, sink)
    }

    /// [`Converter::convert`], a single-file filter driver given `filter_timeout` per file
    /// ([`crate::smudge`]); what is held to expand `export-subst` placeholders (the only
    /// conversion that needs the whole output) is refused past `max_held` bytes.
    #[allow(clippy::too_many_arguments)] // the inputs of one conversion and its two bounds
    pub fn convert_within(
        &self,
        data: &[u8],
        path: &BStr,
        blob: &ObjectId,
        conversion: &Conversion,
        filter_timeout: std::time::Duration,
        max_held: u64,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), ConvertError> {
        match (&self.commit, conversion.export_subst) {
            (Some(commit), true) => {
                let mut out = Vec::with_capacity(data.len());
                // Expanded whole, as `git archive` does; held only up to the bound.
                self.convert_for_worktree(data, path, blob, conversion, filter_timeout, &mut |chunk| {
                    if (out.len() + chunk.len()) as u64 > max_held {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::FileTooLarge,
                            format!(
                                "converting {} for export-subst took more than --max-bytes ({max_held} bytes left)\n  hint: raise --max-bytes if this much is expected, else look at the filter or attributes of {}",
                                path.to_str_lossy(),
                                path.to_str_lossy()
                            ),
                        ));
                    }
                    out.extend_from_slice(chunk);
                    Ok(())
                })?;
                // (export-subst) A placeholder git expands and treesync cannot: refused, by name.
                let expanded = crate::export::expand(&out, path, commit)
                    .map_err(|e| ConvertError::Convert(Error::Placeholder(e)))?;
                sink(&expanded).map_err(ConvertError::Sink)
            }
            _ => self.convert_for_worktree(data, path, blob, conversion, filter_timeout, sink),
        }
    }

    fn convert_for_worktree(
        &self,
        data: &[u8],
        path: &BStr,
        blob: &ObjectId,
        conversion: &Conversion,
        filter_timeout: std::time::Duration,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), ConvertError> {
        let failed = |message: String| {
            ConvertError::Convert(Error::Convert {
                path: path.to_str_lossy().into_owned(),
                attributes: conversion.to_string(),
                message,
            })
        };
        if let Some(pointer) = self.lfs_pointer(data, conversion) {
            let store = self.lfs.as_ref().expect("lfs_pointer is Some only with a store");
            return store.stream(&pointer, sink).map_err(|e| match e {
                lfs::Error::Sink(e) => ConvertError::Sink(e),
                e => ConvertError::Convert(Error::Lfs(e)),
            });
        }
        let expanded;
        let data = if compiled(conversion).ident {
            expanded =
                if self.streams(conversion) { ident::streamed(data, *blob) } else { ident::in_core(data, *blob) };
            expanded.as_deref().unwrap_or(data)
        } else {
            data
        };
        let mut pipeline = self.pool.lock().expect("never poisoned").pop().unwrap_or_else(|| {
            filter::Pipeline::new(self.context.clone(), self.object_hash, self.settings.pipeline_options())
        });
        pipeline.driver_context_mut().blob = Some(*blob);
        let result = (|| {
            use filter::pipeline::convert::ToWorktreeOutcome;
            let eol = pipeline
                .convert_to_worktree(
                    data,
                    path,
                    &mut |p, out| compiled(conversion).fill(Stage::Eol, p, out),
                    Default::default(),
                )
                .map_err(|e| failed(e.to_string()))?;
            let Some(lines) = eol.as_bytes() else { unreachable!("the line-end pass runs no driver") };
            let encoded = match &compiled(conversion).encoding {
                Some(label) => match encoding::encode(lines, label) {
                    encoding::Encoded::Same => None,
                    encoding::Encoded::Converted(bytes) => Some(bytes),
                    encoding::Encoded::Refused(why) => {
                        self.refused(path, label, why);
                        None
                    }
                },
                None => None,
            };
            let Some(name) = compiled(conversion).driver.as_deref() else {
                return sink(encoded.as_deref().unwrap_or(lines)).map_err(ConvertError::Sink);
            };
            // A single-file smudge command: run by treesync, streamed and bounded in time.
            if let Some(d) = self.settings.drivers.get(name).filter(|d| d.process.is_none()) {
                let input = encoded.as_deref().unwrap_or(lines);
                let Some(command) = &d.smudge else { return sink(input).map_err(ConvertError::Sink) };
                return crate::smudge::run(command, &self.context, path, input, filter_timeout, sink).map_err(
                    |f| match f {
                        crate::smudge::Failure::Sink(e) => ConvertError::Sink(e),
                        f => failed(format!("the filter driver {name} (`{command}`): {f}")),
                    },
                );
            }
            let staged = encoded.unwrap_or_else(|| lines.to_vec());
            drop(eol);
            // A `process` driver runs in gitoxide's pipeline: a watchdog stops it (and so this
            // file) past the timeout.
            let process = self.settings.drivers.get(name).and_then(|d| d.process.clone());
            let watchdog = process.as_deref().map(|cmd| crate::smudge::Watchdog::start(cmd, filter_timeout));
            let out = pipeline.convert_to_worktree(
                &staged,
                path,
                &mut |p, out| compiled(conversion).fill(Stage::Driver, p, out),
                Default::default(),
            );
            let streamed = match out {
                Err(e) => Err(failed(e.to_string())),
                Ok(ToWorktreeOutcome::Unchanged(b) | ToWorktreeOutcome::Buffer(b)) => {
                    sink(b).map_err(ConvertError::Sink)
                }
                Ok(ToWorktreeOutcome::Process(filter::driver::apply::MaybeDelayed::Immediate(mut read))) => {
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        match read.read(&mut buf) {
                            Err(e) => break Err(failed(format!("the filter's output: {e}"))),
                            Ok(0) => break Ok(()),
                            Ok(n) => {
                                if let Err(e) = sink(&buf[..n]) {
                                    break Err(ConvertError::Sink(e));
                                }
                            }
                        }
                    }
                }
                Ok(ToWorktreeOutcome::Process(filter::driver::apply::MaybeDelayed::Delayed(_))) => {
                    Err(failed("the filter delayed the file, which treesync does not ask for".into()))
                }
            };
            if watchdog.is_some_and(crate::smudge::Watchdog::stop) {
                return Err(failed(format!(
                    "the filter driver {name} (`{}`): {}",
                    process.as_deref().unwrap_or_default(),
                    crate::smudge::Failure::Timeout(filter_timeout)
                )));
            }
            streamed
        })();
        if result.is_ok() {
            self.pool.lock().expect("never poisoned").push(pipeline);
        }
        result
    }

    /// `data` converted, in memory (for comparisons at plan and verify time).
    pub fn converted(
        &self,
        data: &[u8],
        path: &BStr,
        blob: &ObjectId,
        conversion: &Conversion,
    ) -> Result<Vec<u8>, ConvertError> {
        let mut out = Vec::with_capacity(data.len());
        self.convert(data, path, blob, conversion, &mut |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(out)
    }
}

use std::io::Read as _;

/// Converting a blob for the working tree failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The conversion itself.
    #[error(transparent)]
    Convert(Error),
    /// The sink (the backend writing the file).
    #[error("{0}")]
    Sink(#[source] std::io::Error),
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
