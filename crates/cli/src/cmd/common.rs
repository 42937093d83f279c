//! What the commands share: opening the repository (local or remote) and the target, the
//! runtime, and the place the target is ([`treesync::Place`]).

use std::path::Path;

use anyhow::Context;

use treesync_core::Repo;

use crate::args::{SyncSpec, TargetArgs};

/// `--repo` as a remote repository when it is a URL ([`treesync_remote::is_url`]): its cache
/// repository under `cache_dir` (or the default cache directory), created if missing; `None` for
/// a local path. Does not touch the network.
pub(crate) fn remote(repo: &Path, cache_dir: Option<&Path>) -> anyhow::Result<Option<treesync_remote::Remote>> {
    let Some(url) = repo.to_str().filter(|r| treesync_remote::is_url(r)) else { return Ok(None) };
    let options = treesync_remote::OpenOptions { cache_dir: cache_dir.map(Path::to_path_buf) };
    Ok(Some(treesync_remote::Remote::open(url, &options)?))
}

/// Open `--repo`: a local repository as it is; a URL's cache repository after bringing `revs`
/// up to date in it (one request to the server, and one fetch when a ref moved).
pub(crate) fn open_repo(repo: &Path, cache_dir: Option<&Path>, revs: &[String]) -> anyhow::Result<Repo> {
    let Some(remote) = remote(repo, cache_dir)? else { return Ok(Repo::open(repo)?) };
    if !revs.is_empty() {
        let out = remote.update(revs)?;
        for r in &out.refs {
            let how = if r.fetched { "fetched" } else { "already in the cache" };
            tracing::info!("{}: {} is {} ({how}; {} request(s))", remote.url(), r.name, r.id, out.requests);
        }
    }
    Ok(Repo::open(remote.path())?)
}

/// Refuse a selection (`--include`/`--exclude`) that selects no path of the tree `rev` names
/// before anything is written: syncing it would empty the target
/// ([`treesync_core::select::Select::check_selects_some`]). A revision that does not resolve is
/// left to the sync, which says why.
pub(crate) fn check_selection(
    repo: &Repo,
    rev: &str,
    select: &treesync_core::select::Select,
    recurse_submodules: bool,
) -> anyhow::Result<()> {
    if select.is_all() {
        return Ok(());
    }
    let Ok(resolved) = repo.resolve(rev) else { return Ok(()) };
    Ok(select.check_selects_some(repo, rev, resolved, recurse_submodules)?)
}

/// What `sync` and `plan` work with: the revision, the repository (a URL's cache brought up to
/// date) and the target opened.
pub(crate) struct Opened {
    pub(crate) rev: String,
    pub(crate) repo: Repo,
    pub(crate) target: treesync::Opened,
}

/// Open what `spec` names; a selection that selects nothing is refused before the target is
/// opened.
pub(crate) fn open(spec: &SyncSpec) -> anyhow::Result<Opened> {
    let source = &spec.source;
    let rev = source.rev()?;
    let select = source.select()?;
    let repo = open_repo(source.repo(), source.cache.cache_dir.as_deref(), std::slice::from_ref(&rev))?;
    tracing::trace!("phase: repo opened");
    check_selection(&repo, &rev, &select, source.content.recurse_submodules.unwrap_or_default())?;
    let target = make_backend(&spec.target)?;
    tracing::trace!("phase: backend made");
    Ok(Opened { rev, repo, target })
}

/// The async runtime of one command.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // Blocking filesystem work runs on tokio's blocking pool; the async side is light, so one
    // thread drives it (and a sync of ten files starts no worker threads it does not need).
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// Open the target as the library's front door does ([`treesync::open`]), with the flags.
pub(crate) fn make_backend(args: &TargetArgs) -> anyhow::Result<treesync::Opened> {
    // The executor runs with `--jobs` when given, else the backend's policy: both are the
    // decided `budgets.jobs` (the library gives the backend that policy).
    Ok(treesync::open(&treesync::Target::parse(args.target())?, &target_options(args))?)
}

/// A target refused as not written by treesync, where `--force` would be refused too (the root,
/// a home, a repository: [`treesync::unmanaged_hint`]): that refusal instead, so the hint
/// does not offer `--force`.
pub(crate) fn place_hint<T>(
    result: anyhow::Result<T>,
    target: &treesync::Target,
    repo: &treesync_core::Repo,
) -> anyhow::Result<T> {
    result.map_err(|e| {
        let unmanaged =
            e.chain().any(|c| matches!(c.downcast_ref(), Some(treesync_core::sync::Error::Unmanaged { .. })));
        match treesync::unmanaged_hint(target, repo).filter(|_| unmanaged) {
            Some(refusal) => anyhow::Error::from(refusal),
            None => e,
        }
    })
}

/// What kind of place the target opened as `opened` is for `intent` ([`treesync::Place::of`]:
/// the one decision about generations; the backend [`make_backend`] chose stands, the mount
/// table is not read again).
pub(crate) fn place(
    args: &TargetArgs,
    opened: treesync::Opened,
    intent: treesync::Intent,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<treesync::Place> {
    let target = treesync::Target::parse(args.target())?;
    rt.block_on(treesync::Place::of(&target, opened, &target_options(args), intent)).map_err(|e| match e {
        treesync::PlaceError::Open(e) => e.into(),
        treesync::PlaceError::Generations(e) => unwrapped(e),
        e => e.into(),
    })
}

/// A failure of an operation on a [`treesync::Place`] as the error the core gave it, so that
/// exit codes and hints see the sync's or the verify's own error.
pub(crate) fn unwrapped(e: treesync_core::generation::Error) -> anyhow::Error {
    use treesync_core::{generation, sync};
    match e {
        generation::Error::Sync(sync::Error::Verify(e)) => e.into(),
        generation::Error::Sync(e) => e.into(),
        e => e.into(),
    }
}

/// The library's target options, from the flags.
pub(crate) fn target_options(args: &TargetArgs) -> treesync::TargetOptions {
    args.settings.options()
}
