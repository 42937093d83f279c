//! [`Conversion`]: how a write op's blob becomes the file git would write, as data a backend
//! can carry and print without knowing how conversions are done.
//!
//! A plan records, for each file that is not written as its blob, the `.gitattributes`
//! assignments that apply to it. Backends only pass it on to the
//! [`BlobSource`](crate::source::BlobSource) that reads the content; the content layer
//! (`treesync-content`) makes the conversion and keeps what it compiles from the attributes in
//! the handle's [`Conversion::compiled`] slot, so every file sharing a conversion shares it.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use serde::Serialize;

/// How one file is written: the conversion attributes that apply to it, as one
/// `.gitattributes` line would assign them (`text eol=crlf`, `filter=lfs -text`), and whether
/// `git archive` placeholders are expanded in it (`export-subst`, with `--export` only).
#[derive(Clone, Serialize, schemars::JsonSchema)]
pub struct Conversion {
    /// The attributes, in git's order (`crlf ident filter eol text working-tree-encoding`);
    /// empty when only the repository's settings convert it (`core.autocrlf=true`).
    pub attributes: String,
    /// `filter=NAME`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// `export-subst`: `$Format:…$` placeholders are expanded (`--export`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub export_subst: bool,
    /// What the content layer made of the attributes, built on first use.
    #[serde(skip)]
    #[schemars(skip)]
    compiled: Arc<OnceLock<Box<dyn Any + Send + Sync>>>,
}

impl Conversion {
    /// The conversion `attributes` (and `filter`, as named in them) make, with `export-subst`
    /// when `export_subst`.
    pub fn new(attributes: String, filter: Option<String>, export_subst: bool) -> Conversion {
        Conversion { attributes, filter, export_subst, compiled: Default::default() }
    }

    /// Whether this is Git LFS's filter (`filter=lfs`).
    pub fn is_lfs(&self) -> bool {
        self.filter.as_deref() == Some("lfs")
    }

    /// What `compile` makes of this conversion, made once and shared by its clones: the content
    /// layer's own form of it (which attributes its pipeline runs, their compiled search).
    ///
    /// # Panics
    /// When one conversion is compiled to two different types (one content layer compiles it).
    pub fn compiled<T: Any + Send + Sync>(&self, compile: impl FnOnce(&Conversion) -> T) -> &T {
        self.compiled
            .get_or_init(|| Box::new(compile(self)))
            .downcast_ref()
            .expect("a conversion is compiled by one content layer, to one type")
    }
}

impl std::fmt::Debug for Conversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conversion({:?}{})", self.attributes, if self.export_subst { " export-subst" } else { "" })
    }
}

impl PartialEq for Conversion {
    fn eq(&self, other: &Self) -> bool {
        self.attributes == other.attributes && self.export_subst == other.export_subst
    }
}

impl Eq for Conversion {}

impl std::hash::Hash for Conversion {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.attributes.hash(state);
        self.export_subst.hash(state);
    }
}

impl std::fmt::Display for Conversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.attributes.is_empty(), self.export_subst) {
            (true, false) => f.write_str("core.autocrlf"),
            (true, true) => f.write_str("export-subst"),
            (false, false) => f.write_str(&self.attributes),
            (false, true) => write!(f, "{} export-subst", self.attributes),
        }
    }
}
