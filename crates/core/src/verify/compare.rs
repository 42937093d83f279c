//! The comparison: one merge of the tree, the target's listing and the stat index.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;

use super::blobs::{blob_data, blob_size, converted_data, kind_name, lookup};
use super::index::{IndexEntry, StatIndex, ToHash, blob_id, hash_files, index_stat, md5_hex, read_index, write_index};
use super::report::{Drift, OracleReport, Report, SliceReport};
use super::slices::{below, slice_dirs};
use super::walk::{Walked, walk_tree};
use super::{Against, Error, Level, Options, Oracle, Progress, Want, stop_if};
use crate::backend::{self, Backend, Capabilities, FoundKind};
use crate::convert::Converter;
use crate::path::RelPath;
use crate::slice::Slice;
use crate::source::Repo;

/// What a comparison starts from: the tree as a sync writes it, what the target holds, and
/// what the last verify and the syncs since recorded of it.
struct Gathered {
    /// Every path of the tree, sorted.
    want: Vec<(Vec<u8>, Want)>,
    /// The repositories the tree's blobs are in: the repository, then the submodules entered.
    repos: Vec<Repo>,
    /// What the listing found (of the slice's directories, for a slice), sorted by path.
    found: Vec<(Vec<u8>, FoundKind)>,
    /// The stat index of the last verify (empty: none, or not trusted).
    index: StatIndex,
    /// What syncs recorded since ([`crate::index_delta`]).
    delta: crate::index_delta::Delta,
    /// Directories the slice listed (0: the whole target was listed).
    slice_dirs: u64,
}

/// Compare `backend` with `against` as `options` say; see [`super::verify()`].
pub(super) async fn compare(
    repo: &Repo,
    backend: &dyn Backend,
    against: &Against,
    options: &Options,
    progress: &(dyn Fn(&Progress) + Send + Sync),
    interrupt: &AtomicBool,
) -> Result<Report, Error> {
    let by_git = options.oracle == Oracle::Git;
    // git judges bytes of its own making: what it proves is not treesync's to record.
    let record = options.record && !by_git;
    let converter = against.converter(repo)?.map(Arc::new);
    let g = gather(repo, backend, against, converter.clone(), options).await?;
    // git's bytes for every file, made before the comparison (`--oracle git`).
    let judged = match by_git {
        true => Some(judge_by_git(repo, against, &g.want).await?),
        false => None,
    };
    stop_if(interrupt, 0)?;
    let mut merge = Merge {
        level: options.level,
        caps: backend.capabilities(),
        repos: &g.repos,
        converter: converter.as_deref(),
        judged: judged.as_ref(),
        report: new_report(against, options, &g, judged.as_ref()),
        new_index: Vec::with_capacity(g.want.len()),
        to_hash: Vec::new(),
        buf: Vec::new(),
    };
    let extras = merge.run(backend, &g, options.slice).await?;
    let Merge { mut report, mut new_index, to_hash, .. } = merge;
    progress(&Progress {
        expected: report.expected,
        scanned: report.scanned,
        hashed: 0,
        to_hash: to_hash.len() as u64,
    });
    if !to_hash.is_empty() {
        let show = |wi: usize| g.want[wi].0.clone();
        hash_files(backend, to_hash, &mut report, &mut new_index, show, progress, interrupt).await?;
        // The index is written in path order.
        new_index.sort_by_key(|e| e.0);
    }
    extra_drift(&mut report, &g, extras);
    report.drift.sort_by(|a, b| a.path().cmp(b.path()));
    let Gathered { want, repos, mut found, index, delta, .. } = g;
    if options.slice.is_some() {
        // A slice listed one level: what is below a type-changed or extra directory (which a
        // repair removes) is listed now, only where drift is.
        found.extend(below(backend, &report.drift, &found).await?);
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    keep_for_repair(&mut report, &want, &found);
    report.repos = repos;
    // Rewrite the index only when it learned something (a steady tree costs no write).
    let index_entries = index.entries();
    let unchanged = new_index.len() == index_entries.len()
        && new_index.iter().zip(index_entries).all(|(n, o)| {
            want[n.0].0.as_slice() == o.path(&index).as_bytes() && n.1 == o.id && n.2 == o.mode && n.3 == o.stat
        });
    let merged = record && !delta.is_empty();
    let caps = backend.capabilities();
    if record && caps.aux_store && options.level != Level::Quick && !new_index.is_empty() && (!unchanged || merged) {
        backend.store_aux("index", &write_index(&want, &new_index)).await?;
    }
    if merged {
        backend.store_aux(crate::index_delta::NAME, b"").await?;
    }
    Ok(report)
}

/// Walk the tree, list the target and read the stat index at once.
async fn gather(
    repo: &Repo,
    backend: &dyn Backend,
    against: &Against,
    converter: Option<Arc<Converter>>,
    options: &Options,
) -> Result<Gathered, Error> {
    let (level, limits) = (options.level, options.limits);
    // Walking the tree (CPU, in the object database) overlaps with scanning the target
    // (mostly waiting on the filesystem or the network).
    let walker = {
        let (repo, against) = (repo.clone(), against.clone());
        tokio::task::spawn_blocking(move || walk_tree(&repo, &against, converter.as_deref(), limits))
    };
    let caps = backend.capabilities();
    // The stat index and what syncs recorded since (merged over it, see `crate::index_delta`)
    // are read while the target is listed. Only backends with an auxiliary store keep them; on
    // the others, files are proven by their ETag or by hashing them.
    // Stat data recorded under older conversion rules vouches for bytes those rules made: not
    // trusted until a sync has rewritten the converted files (and recorded the rules of now).
    let older_rules = against.conversions.as_ref().is_some_and(|s| s.rules != crate::convert::RULES);
    let recorded = async {
        if !(level == Level::Stat && caps.aux_store) || older_rules {
            return Ok::<_, Error>((None, Default::default()));
        }
        let index = backend.load_aux("index").await?.and_then(|b| read_index(&b));
        Ok((index, crate::index_delta::load(backend).await?))
    };
    let worker = |source| Error::Backend(backend::Error::Worker { source });
    let (want, repos, scanned, recorded, slice_dirs) = match options.slice {
        None => {
            let (scanned, recorded) = tokio::join!(backend.scan(backend.policy().scans), recorded);
            let Walked { want, repos } = walker.await.map_err(worker)??;
            (want, repos, scanned, recorded, 0)
        }
        // A slice lists only its directories: which they are, the walk tells.
        Some(s) => {
            let Walked { want, repos } = walker.await.map_err(worker)??;
            let dirs = slice_dirs(&want, s);
            let (scanned, recorded) = tokio::join!(backend.scan_dirs(&dirs, backend.policy().scans), recorded);
            (want, repos, scanned, recorded, dirs.len() as u64)
        }
    };
    let mut found: Vec<(Vec<u8>, FoundKind)> = scanned?.into_iter().map(|f| (f.path, f.kind)).collect();
    let (index, delta) = recorded?;
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let index = index.unwrap_or_else(|| gix_index::State::new(gix_hash::Kind::Sha1));
    Ok(Gathered { want, repos, found, index, delta, slice_dirs })
}

/// What git writes for every file of `want` (`--oracle git`), asked on a thread of its own.
async fn judge_by_git(
    repo: &Repo,
    against: &Against,
    want: &[(Vec<u8>, Want)],
) -> Result<crate::oracle::Written, Error> {
    let files: Vec<Vec<u8>> =
        want.iter().filter(|(_, w)| matches!(w, Want::File { .. })).map(|(p, _)| p.clone()).collect();
    let lfs_content = against.conversions.as_ref().is_some_and(|s| s.lfs == crate::lfs::LfsMode::Content)
        && want.iter().any(|(_, w)| matches!(w, Want::File { conversion: Some(c), .. } if c.is_lfs()));
    let (git_dir, commit, tree, path, settings) =
        (repo.git_dir(), against.commit, against.tree, against.path.clone(), against.conversions.clone());
    let written = tokio::task::spawn_blocking(move || {
        let refs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
        let tree = crate::oracle::Tree {
            git_dir: &git_dir,
            commit,
            tree,
            path: path.as_deref(),
            settings: settings.as_ref(),
            lfs_content,
        };
        crate::oracle::written(&tree, &refs)
    })
    .await
    .map_err(|source| Error::Backend(backend::Error::Worker { source }))??;
    Ok(written)
}

/// The report before the comparison: what was walked and listed, nothing found yet.
fn new_report(against: &Against, options: &Options, g: &Gathered, judged: Option<&crate::oracle::Written>) -> Report {
    let slice = options.slice;
    Report {
        commit: against.commit,
        interrupted: false,
        level: options.level,
        expected: match slice {
            Some(s) => g.want.iter().filter(|w| s.has_path(&w.0)).count() as u64,
            None => g.want.len() as u64,
        },
        scanned: g.found.len() as u64,
        hashed: 0,
        proven_by_stat: 0,
        drift: Vec::new(),
        slice: slice.map(|s| SliceReport {
            k: s.k,
            n: s.n,
            dirs: g.slice_dirs,
            next: None,
            last_full_cycle_unix: None,
        }),
        oracle: judged.map(|j| OracleReport { git: j.git.clone(), judged: 0, not_judged: 0 }),
        tree: against.tree,
        wanted: Vec::new(),
        found_below: Vec::new(),
        repos: Vec::new(),
    }
}

/// The merge of the tree with the listing and the index, and what it finds.
struct Merge<'a> {
    level: Level,
    caps: Capabilities,
    repos: &'a [Repo],
    /// What files are converted with (`None`: as blobs are).
    converter: Option<&'a Converter>,
    /// git's bytes for the files (`--oracle git`).
    judged: Option<&'a crate::oracle::Written>,
    report: Report,
    /// What the index will hold — no path copies.
    new_index: Vec<IndexEntry>,
    /// Files whose stat data does not prove them: read once the merge is done, many at once.
    to_hash: Vec<ToHash>,
    buf: Vec<u8>,
}

impl Merge<'_> {
    /// Both lists are sorted by path: one merge over them (and over the index) finds
    /// everything. Returns the positions in `g.found` of entries the tree does not have.
    async fn run(&mut self, backend: &dyn Backend, g: &Gathered, slice: Option<Slice>) -> Result<Vec<usize>, Error> {
        let (want, found, index) = (&g.want, &g.found, &g.index);
        let index_entries = index.entries();
        let mut extras: Vec<usize> = Vec::new();
        let (mut fi, mut ii) = (0, 0);
        for (wi, (path, w)) in want.iter().enumerate() {
            while fi < found.len() && found[fi].0 < *path {
                extras.push(fi);
                fi += 1;
            }
            let f = if fi < found.len() && found[fi].0 == *path {
                fi += 1;
                Some(&found[fi - 1].1)
            } else {
                None
            };
            while ii < index_entries.len() && index_entries[ii].path(index).as_bytes() < path.as_slice() {
                ii += 1;
            }
            let entry = index_entries.get(ii).filter(|e| e.path(index).as_bytes() == path.as_slice());
            // What the sync's delta says of the path wins over the index (see `index_delta`).
            let recorded = match g.delta.paths.get(path.as_slice()) {
                Some(synced) => synced.map(|e| (e.id, index_stat(&e.stat, e.size))),
                None => entry.map(|e| (e.id, e.stat)),
            };
            if slice.is_some_and(|s| !s.has_path(path)) {
                self.keep(wi, w, entry, recorded);
                continue;
            }
            if let Want::Gitlink { id } = w {
                self.new_index.push((wi, *id, gix_index::entry::Mode::COMMIT, gix_index::entry::Stat::default()));
            }
            let Some(f) = f else {
                if matches!(w, Want::Dir | Want::Gitlink { .. }) && !self.caps.empty_dirs {
                    continue; // implicit directories: their content is checked one by one
                }
                self.report.drift.push(Drift::Missing { path: path.clone() });
                continue;
            };
            self.entry(backend, wi, path, w, f, recorded).await?;
        }
        extras.extend(fi..found.len());
        Ok(extras)
    }

    /// Another slice's path: what the index (or the sync's delta, which this run empties)
    /// knows of it stays.
    fn keep(
        &mut self,
        wi: usize,
        w: &Want,
        entry: Option<&gix_index::Entry>,
        recorded: Option<(ObjectId, gix_index::entry::Stat)>,
    ) {
        let mode = match (w, entry) {
            (Want::File { executable: true, .. }, _) => Some(gix_index::entry::Mode::FILE_EXECUTABLE),
            (Want::File { .. }, _) => Some(gix_index::entry::Mode::FILE),
            (_, Some(e)) => Some(e.mode),
            _ => None,
        };
        if let (Some((id, st)), Some(mode)) = (recorded, mode) {
            self.new_index.push((wi, id, mode, st));
        }
    }

    /// Compare what the tree wants at `path` with what the listing found there.
    async fn entry(
        &mut self,
        backend: &dyn Backend,
        wi: usize,
        path: &[u8],
        w: &Want,
        f: &FoundKind,
        recorded: Option<(ObjectId, gix_index::entry::Stat)>,
    ) -> Result<(), Error> {
        let (repos, level) = (self.repos, self.level);
        match (w, f) {
            (Want::Dir | Want::Gitlink { .. }, FoundKind::Dir) => {}
            (Want::File { id, executable, conversion }, FoundKind::File { size, executable: x, stat, etag, .. }) => {
                if self.caps.exec_bit && x.is_some_and(|x| x != *executable) {
                    self.report.drift.push(Drift::ModeChanged { path: path.to_vec(), executable: *executable });
                }
                let file = File { wi, path, id, executable: *executable, conversion: conversion.as_deref() };
                self.file(&file, *size, stat.as_ref(), etag.as_deref(), recorded)?;
            }
            (Want::Link { id }, FoundKind::Link { target, stat }) => {
                let ok = blob_data(repos, id, path, &mut self.buf)? == target.as_slice();
                if !ok {
                    self.report.drift.push(Drift::LinkChanged { path: path.to_vec() });
                } else if let Some(s) = stat {
                    let st = index_stat(s, target.len() as u64);
                    self.new_index.push((wi, *id, gix_index::entry::Mode::SYMLINK, st));
                }
            }
            // Listings that cannot tell a symlink from a file: compare the link target as content.
            (Want::Link { id }, FoundKind::File { size, etag, typed: false, .. }) => {
                let target = blob_data(repos, id, path, &mut self.buf)?;
                let mut same = *size == target.len() as u64;
                if same && level != Level::Quick && etag.as_deref().is_none_or(|e| e != md5_hex(&target)) {
                    // No ETag, or one that is not an MD5 (stores other than S3): read it.
                    let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                    same = backend.read_file(&rel).await? == target;
                    self.report.hashed += 1;
                }
                if !same {
                    self.report.drift.push(Drift::LinkChanged { path: path.to_vec() });
                }
            }
            (w, f) => self.report.drift.push(Drift::TypeChanged {
                path: path.to_vec(),
                expected: match w {
                    Want::Dir | Want::Gitlink { .. } => "directory",
                    Want::File { .. } => "file",
                    Want::Link { .. } => "symlink",
                },
                found: kind_name(f),
            }),
        }
        Ok(())
    }

    /// A file of the tree found as a file of `size`: proven by git's judgement, the stat
    /// index, its ETag or its size alone (at [`Level::Quick`]), or left to be hashed.
    fn file(
        &mut self,
        file: &File<'_>,
        size: u64,
        stat: Option<&backend::FileStat>,
        etag: Option<&str>,
        recorded: Option<(ObjectId, gix_index::entry::Stat)>,
    ) -> Result<(), Error> {
        let File { wi, path, id, executable, conversion } = *file;
        let (repos, level) = (self.repos, self.level);
        let mode = if executable { gix_index::entry::Mode::FILE_EXECUTABLE } else { gix_index::entry::Mode::FILE };
        // Judged by git: its bytes, nothing of treesync's conversions.
        if let (Some(judged), Some(o)) = (self.judged, self.report.oracle.as_mut()) {
            match judged.files.get(path) {
                Some(&(want_size, content)) => {
                    o.judged += 1;
                    if want_size != size {
                        self.report.drift.push(Drift::ContentChanged { path: path.to_vec() });
                    } else {
                        let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                        self.to_hash.push(ToHash { wi, rel, content, id: *id, mode, stat: None, size });
                    }
                    return Ok(());
                }
                None => o.not_judged += 1,
            }
        }
        // The common case first: the index proves the file (its stat includes the size).
        if let (Level::Stat, Some(st)) = (level, stat) {
            let st = index_stat(st, size);
            if recorded == Some((*id, st)) {
                self.report.proven_by_stat += 1;
                self.new_index.push((wi, *id, mode, st));
                return Ok(());
            }
        }
        // A converted file: what a sync writes is the converted blob (read and converted
        // here, as only a sync's conversion tells its size and content).
        let expected = match (conversion, self.converter) {
            (Some(c), Some(converter)) => Some(converted_data(repos, converter, id, path, c, &mut self.buf)?),
            _ => None,
        };
        let want_size = match &expected {
            Some(data) => data.len() as u64,
            None => blob_size(repos, id, path)?,
        };
        if want_size != size {
            self.report.drift.push(Drift::ContentChanged { path: path.to_vec() });
            return Ok(());
        }
        let proven = match (level, stat, etag) {
            (Level::Quick, _, _) => true,
            (Level::Stat, None, Some(etag)) => match &expected {
                Some(data) => md5_hex(data) == etag,
                None => md5_hex(&blob_data(repos, id, path, &mut self.buf)?) == etag,
            },
            _ => false,
        };
        if !proven {
            // Read once the merge is done, many at once (see `hash_files`).
            let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
            let content = match &expected {
                Some(data) => blob_id(data),
                None => *id,
            };
            let stat = stat.map(|s| index_stat(s, size));
            self.to_hash.push(ToHash { wi, rel, content, id: *id, mode, stat, size });
            return Ok(());
        }
        if level != Level::Quick {
            self.report.proven_by_stat += 1;
        }
        if let Some(s) = stat {
            self.new_index.push((wi, *id, mode, index_stat(s, size)));
        }
        Ok(())
    }
}

/// A file of the tree, as [`Merge::file`] compares it.
#[derive(Clone, Copy)]
struct File<'a> {
    /// Its position in the tree's list.
    wi: usize,
    path: &'a [u8],
    id: &'a ObjectId,
    executable: bool,
    /// How a sync writes it (`None`: as the blob is).
    conversion: Option<&'a crate::convert::Conversion>,
}

/// Extra entries (positions `extras` in `g.found`); below an extra directory only the
/// directory is reported, and below a path the tree has as a file or link (found as a
/// directory) the type change covers it.
fn extra_drift(report: &mut Report, g: &Gathered, extras: Vec<usize>) {
    let mut extra_dirs: Vec<&[u8]> = Vec::new();
    for i in extras {
        let (path, f) = (&g.found[i].0, &g.found[i].1);
        let below = |d: &[u8]| path.starts_with(d) && path.get(d.len()) == Some(&b'/');
        if extra_dirs.iter().any(|d| below(d)) {
            continue;
        }
        let mut p = path.as_slice();
        let mut covered = false;
        while let Some(i) = p.rfind_byte(b'/') {
            p = &p[..i];
            if matches!(lookup(&g.want, p), Some(Want::File { .. } | Want::Link { .. })) {
                covered = true;
                break;
            }
        }
        if covered {
            continue;
        }
        if *f == FoundKind::Dir {
            extra_dirs.push(path);
        }
        report.drift.push(Drift::Extra { path: path.clone(), dir: *f == FoundKind::Dir });
    }
}

/// Keep in `report` what [`super::repair_plan`] needs: what the tree wants at each drifted
/// path, and what the listing found at and below type-changed and extra paths.
fn keep_for_repair(report: &mut Report, want: &[(Vec<u8>, Want)], found: &[(Vec<u8>, FoundKind)]) {
    for d in &report.drift {
        let key = d.path();
        if let Some(w) = lookup(want, key) {
            report.wanted.push((key.to_vec(), w.clone()));
        }
        if matches!(d, Drift::TypeChanged { .. } | Drift::Extra { .. }) {
            let start = found.partition_point(|e| e.0.as_slice() < key);
            for (p, k) in &found[start..] {
                if !p.starts_with(key) {
                    break;
                }
                if p.as_slice() == key || p.get(key.len()) == Some(&b'/') {
                    report.found_below.push((p.clone(), *k == FoundKind::Dir));
                }
            }
        }
    }
    report.found_below.sort_unstable();
    report.found_below.dedup();
}
