//! The comparison: one merge of the tree, the target's listing and the stat index.

use gix::bstr::ByteSlice;
use gix_hash::ObjectId;

use super::blobs::{blob_data, blob_size, converted_data, kind_name, lookup};
use super::index::{ToHash, blob_id, hash_files, index_stat, md5_hex, read_index, write_index};
use super::report::{Drift, OracleReport, Report, SliceReport};
use super::slices::{below, slice_dirs};
use super::walk::{Walked, walk_tree};
use super::{Against, Error, Level, Want};
use crate::backend::{self, Backend, FoundKind};
use crate::convert::Converter;
use crate::path::RelPath;
use crate::slice::Slice;
use crate::source::Repo;

#[allow(clippy::too_many_arguments)] // the public entry points' inputs, and who judges
pub(super) async fn verify_inner(
    repo: &Repo,
    backend: &dyn Backend,
    level: Level,
    against: &Against,
    record: bool,
    limits: crate::plan::Limits,
    slice: Option<Slice>,
    by_git: bool,
) -> Result<Report, Error> {
    let converter = match &against.conversions {
        Some(settings) => {
            let mut c = Converter::new(repo, settings.clone())?;
            if settings.export {
                let commit = crate::export::CommitInfo::from_commit(repo, against.commit)?;
                let select = against.select.clone().unwrap_or_default();
                c = c.with_commit(commit.archive(against.tree, settings, &select));
            }
            Some(std::sync::Arc::new(c))
        }
        None => None,
    };
    // Walking the tree (CPU, in the object database) overlaps with scanning the target
    // (mostly waiting on the filesystem or the network).
    let walker = {
        let (repo, against, converter) = (repo.clone(), against.clone(), converter.clone());
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
    let (want, repos, scanned, recorded, slice_dirs) = match slice {
        None => {
            let (scanned, recorded) = tokio::join!(backend.scan(backend.policy().scans), recorded);
            let Walked { want, repos } =
                walker.await.map_err(|source| Error::Backend(backend::Error::Worker { source }))??;
            (want, repos, scanned, recorded, 0)
        }
        // A slice lists only its directories: which they are, the walk tells.
        Some(s) => {
            let Walked { want, repos } =
                walker.await.map_err(|source| Error::Backend(backend::Error::Worker { source }))??;
            let dirs = slice_dirs(&want, s);
            let (scanned, recorded) = tokio::join!(backend.scan_dirs(&dirs, backend.policy().scans), recorded);
            (want, repos, scanned, recorded, dirs.len() as u64)
        }
    };
    // git's bytes for every file, made before the comparison (`--oracle git`).
    let judged = if by_git {
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
        Some(written)
    } else {
        None
    };
    let in_slice = |p: &[u8]| slice.is_none_or(|s| s.has_path(p));
    let mut found: Vec<(Vec<u8>, FoundKind)> = scanned?.into_iter().map(|f| (f.path, f.kind)).collect();
    let (index, delta) = recorded?;
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let index = index.unwrap_or_else(|| gix_index::State::new(gix_hash::Kind::Sha1));
    let index_entries = index.entries();
    let mut report = Report {
        commit: against.commit,
        interrupted: false,
        level,
        expected: if slice.is_some() {
            want.iter().filter(|w| in_slice(&w.0)).count() as u64
        } else {
            want.len() as u64
        },
        scanned: found.len() as u64,
        hashed: 0,
        proven_by_stat: 0,
        drift: Vec::new(),
        slice: slice.map(|s| SliceReport { k: s.k, n: s.n, dirs: slice_dirs, next: None, last_full_cycle_unix: None }),
        oracle: judged.as_ref().map(|j| OracleReport { git: j.git.clone(), judged: 0, not_judged: 0 }),
        tree: against.tree,
        wanted: Vec::new(),
        found_below: Vec::new(),
        repos: Vec::new(),
    };
    // What the index will hold: (position in `want`, id, mode, stat) — no path copies.
    let mut new_index: Vec<(usize, ObjectId, gix_index::entry::Mode, gix_index::entry::Stat)> =
        Vec::with_capacity(want.len());
    let show = |p: &[u8]| p.to_vec();
    let mut buf = Vec::new();
    let mut extras: Vec<usize> = Vec::new();
    let mut to_hash: Vec<ToHash> = Vec::new();
    let (mut fi, mut ii) = (0, 0);
    // Both lists are sorted by path: one merge over them (and over the index) finds everything.
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
        while ii < index_entries.len() && index_entries[ii].path(&index).as_bytes() < path.as_slice() {
            ii += 1;
        }
        let entry = index_entries.get(ii).filter(|e| e.path(&index).as_bytes() == path.as_slice());
        // What the sync's delta says of the path wins over the index (see `index_delta`).
        let recorded = match delta.paths.get(path.as_slice()) {
            Some(synced) => synced.map(|e| (e.id, index_stat(&e.stat, e.size))),
            None => entry.map(|e| (e.id, e.stat)),
        };
        if !in_slice(path) {
            // Another slice's path: what the index (or the sync's delta, which this run empties)
            // knows of it stays.
            let mode = match (w, entry) {
                (Want::File { executable: true, .. }, _) => Some(gix_index::entry::Mode::FILE_EXECUTABLE),
                (Want::File { .. }, _) => Some(gix_index::entry::Mode::FILE),
                (_, Some(e)) => Some(e.mode),
                _ => None,
            };
            if let (Some((id, st)), Some(mode)) = (recorded, mode) {
                new_index.push((wi, id, mode, st));
            }
            continue;
        }
        if let Want::Gitlink { id } = w {
            new_index.push((wi, *id, gix_index::entry::Mode::COMMIT, gix_index::entry::Stat::default()));
        }
        let Some(f) = f else {
            if matches!(w, Want::Dir | Want::Gitlink { .. }) && !caps.empty_dirs {
                continue; // implicit directories: their content is checked one by one
            }
            report.drift.push(Drift::Missing { path: show(path) });
            continue;
        };
        match (w, f) {
            (Want::Dir | Want::Gitlink { .. }, FoundKind::Dir) => {}
            (Want::File { id, executable, conversion }, FoundKind::File { size, executable: x, stat, etag, .. }) => {
                if caps.exec_bit && x.is_some_and(|x| x != *executable) {
                    report.drift.push(Drift::ModeChanged { path: show(path), executable: *executable });
                }
                let mode =
                    if *executable { gix_index::entry::Mode::FILE_EXECUTABLE } else { gix_index::entry::Mode::FILE };
                // Judged by git: its bytes, nothing of treesync's conversions.
                if let (Some(judged), Some(o)) = (&judged, report.oracle.as_mut()) {
                    match judged.files.get(path.as_slice()) {
                        Some(&(want_size, content)) => {
                            o.judged += 1;
                            if want_size != *size {
                                report.drift.push(Drift::ContentChanged { path: show(path) });
                            } else {
                                let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                                to_hash.push(ToHash { wi, rel, content, id: *id, mode, stat: None, size: *size });
                            }
                            continue;
                        }
                        None => o.not_judged += 1,
                    }
                }
                // The common case first: the index proves the file (its stat includes the size).
                if let (Level::Stat, Some(st)) = (level, stat) {
                    let st = index_stat(st, *size);
                    if recorded == Some((*id, st)) {
                        report.proven_by_stat += 1;
                        new_index.push((wi, *id, mode, st));
                        continue;
                    }
                }
                // A converted file: what a sync writes is the converted blob (read and converted
                // here, as only a sync's conversion tells its size and content).
                let expected = match (conversion, &converter) {
                    (Some(c), Some(converter)) => Some(converted_data(&repos, converter, id, path, c, &mut buf)?),
                    _ => None,
                };
                let want_size = match &expected {
                    Some(data) => data.len() as u64,
                    None => blob_size(&repos, id, path)?,
                };
                if want_size != *size {
                    report.drift.push(Drift::ContentChanged { path: show(path) });
                    continue;
                }
                let proven = match (level, stat, etag) {
                    (Level::Quick, _, _) => true,
                    (Level::Stat, None, Some(etag)) => match &expected {
                        Some(data) => md5_hex(data) == *etag,
                        None => md5_hex(&blob_data(&repos, id, path, &mut buf)?) == *etag,
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
                    to_hash.push(ToHash {
                        wi,
                        rel,
                        content,
                        id: *id,
                        mode,
                        stat: stat.as_ref().map(|s| index_stat(s, *size)),
                        size: *size,
                    });
                    continue;
                }
                if level != Level::Quick {
                    report.proven_by_stat += 1;
                }
                if let Some(s) = stat {
                    new_index.push((wi, *id, mode, index_stat(s, *size)));
                }
            }
            (Want::Link { id }, FoundKind::Link { target, stat }) => {
                let ok = blob_data(&repos, id, path, &mut buf)? == target.as_slice();
                if !ok {
                    report.drift.push(Drift::LinkChanged { path: show(path) });
                } else if let Some(s) = stat {
                    new_index.push((wi, *id, gix_index::entry::Mode::SYMLINK, index_stat(s, target.len() as u64)));
                }
            }
            // Listings that cannot tell a symlink from a file: compare the link target as content.
            (Want::Link { id }, FoundKind::File { size, etag, typed: false, .. }) => {
                let target = blob_data(&repos, id, path, &mut buf)?;
                let mut same = *size == target.len() as u64;
                if same && level != Level::Quick && etag.as_deref().is_none_or(|e| e != md5_hex(&target)) {
                    // No ETag, or one that is not an MD5 (stores other than S3): read it.
                    let rel = RelPath::parse_bytes(path).map_err(crate::plan::Error::from)?;
                    same = backend.read_file(&rel).await? == target;
                    report.hashed += 1;
                }
                if !same {
                    report.drift.push(Drift::LinkChanged { path: show(path) });
                }
            }
            (w, f) => report.drift.push(Drift::TypeChanged {
                path: show(path),
                expected: match w {
                    Want::Dir | Want::Gitlink { .. } => "directory",
                    Want::File { .. } => "file",
                    Want::Link { .. } => "symlink",
                },
                found: kind_name(f),
            }),
        }
    }
    extras.extend(fi..found.len());
    if !to_hash.is_empty() {
        hash_files(backend, to_hash, &mut report, &mut new_index, |wi| show(&want[wi].0)).await?;
        // The index is written in path order.
        new_index.sort_by_key(|e| e.0);
    }
    // Extra entries; below an extra directory only the directory is reported, and below a
    // path the tree has as a file or link (found as a directory) the type change covers it.
    let mut extra_dirs: Vec<&[u8]> = Vec::new();
    for i in extras {
        let (path, f) = (&found[i].0, &found[i].1);
        let below = |d: &[u8]| path.starts_with(d) && path.get(d.len()) == Some(&b'/');
        if extra_dirs.iter().any(|d| below(d)) {
            continue;
        }
        let mut p = path.as_slice();
        let mut covered = false;
        while let Some(i) = p.rfind_byte(b'/') {
            p = &p[..i];
            if matches!(lookup(&want, p), Some(Want::File { .. } | Want::Link { .. })) {
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
        report.drift.push(Drift::Extra { path: show(path), dir: *f == FoundKind::Dir });
    }
    report.drift.sort_by(|a, b| a.path().cmp(b.path()));
    if slice.is_some() {
        // A slice listed one level: what is below a type-changed or extra directory (which a
        // repair removes) is listed now, only where drift is.
        found.extend(below(backend, &report.drift, &found).await?);
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    for d in &report.drift {
        let key = d.path();
        if let Some(w) = lookup(&want, key) {
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
    report.repos = repos;
    // Rewrite the index only when it learned something (a steady tree costs no write).
    let unchanged = new_index.len() == index_entries.len()
        && new_index.iter().zip(index_entries).all(|(n, o)| {
            want[n.0].0.as_slice() == o.path(&index).as_bytes() && n.1 == o.id && n.2 == o.mode && n.3 == o.stat
        });
    let merged = record && !delta.is_empty();
    if record && caps.aux_store && level != Level::Quick && !new_index.is_empty() && (!unchanged || merged) {
        backend.store_aux("index", &write_index(&want, &new_index)).await?;
    }
    if merged {
        backend.store_aux(crate::index_delta::NAME, b"").await?;
    }
    Ok(report)
}
