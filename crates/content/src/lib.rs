//! # treesync-content
//!
//! What treesync writes for a blob, as git would write it: the repository it reads from
//! ([`Repo`], [`source`]), the `.gitattributes` conversions ([`convert`]: line ends, `ident`,
//! encodings, filter drivers run by [`smudge`]), Git LFS objects ([`lfs`]), `git archive`'s
//! `export-ignore` and `export-subst` ([`export`]), the `--include`/`--exclude` selection of
//! paths ([`select`]) and the [`limits`] a plan and its writes stay within.
//!
//! The planner (`treesync-core`) asks this crate which [`Conversion`](convert::Conversion)
//! each path gets ([`convert::Resolver`]), and the executor reads the converted bytes through
//! [`source::Converting`]; backends see only the conversion's name
//! (`treesync_backend::conversion::Conversion`).
#![deny(missing_docs)]

pub mod convert;
pub mod export;
pub mod lfs;
pub mod limits;
pub mod select;
pub mod smudge;
pub mod source;

pub use source::Repo;
