//! Gitlinks filled with their submodules' trees: what the planner asks of whoever knows where
//! the submodules are ([`crate::submodule::Submodules`]).

use gix_hash::ObjectId;
use gix_object::FindObjectOrHeader;

use super::Error;
use crate::path::RelPath;

/// What [`Gitlinks::enter`] runs: given a submodule's object database, its old and new trees,
/// and the gitlinks of that repository.
pub type Visit<'f> =
    dyn FnMut(&dyn FindObjectOrHeader, Option<ObjectId>, Option<ObjectId>, &dyn Gitlinks) -> Result<(), Error> + 'f;

/// Where the trees of submodules come from when gitlinks are recursed into
/// ([`plan_checkout`](super::plan_checkout)); implemented by [`crate::submodule::Submodules`].
pub trait Gitlinks: Sync {
    /// Run `f` with the object database of the submodule at `path` (the path in the target)
    /// that holds `old` and `new` (the commits the gitlink records before and after; at least
    /// one is `Some`), the trees of those commits, and the gitlinks of that repository (nested
    /// submodules). When no one repository holds both commits, `f` runs twice: once to empty
    /// the old tree, once to fill in the new one.
    fn enter(
        &self,
        path: &RelPath,
        old: Option<ObjectId>,
        new: Option<ObjectId>,
        f: &mut Visit<'_>,
    ) -> Result<(), Error>;
}

/// Whether each side of a diff has its gitlinks filled with the submodules' trees
/// ([`plan_checkout`](super::plan_checkout)).
#[derive(Clone, Copy)]
pub struct Recurse<'a> {
    /// The target holds the submodules' trees in its gitlinks now (the state says so).
    pub old: bool,
    /// The target is to hold them.
    pub new: bool,
    /// Where the submodules are found.
    pub gitlinks: &'a dyn Gitlinks,
}

impl std::fmt::Debug for Recurse<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recurse").field("old", &self.old).field("new", &self.new).finish_non_exhaustive()
    }
}
