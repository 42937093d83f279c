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

use std::path::PathBuf;

use crate::lfs::{self};

mod attributes;
mod converter;
mod converting;
mod encoding;
mod ident;
mod settings;

pub use attributes::{AttributeFiles, Resolver};
pub use converter::{ConvertError, Converter, Input, Unconverted};
pub use converting::Converting;
pub use encoding::Refusal;
pub use settings::{DriverConfig, Settings};
pub use treesync_backend::conversion::Conversion;

/// The version of the conversion rules: recorded in the state with the settings, so that files
/// an older treesync wrote with rules since corrected (0: before attribute macros, iconv
/// encodings and git's two `ident` rule sets) are written again once.
pub const RULES: u32 = 1;

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
