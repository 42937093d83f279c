//! The CLI on a NAS stand-in (the slow FUSE filesystem, latency on every op, kernel caches
//! off): `--backend auto` picks nfs and says why, and an incremental sync of K changed files in
//! a 20,000-file tree costs at most 11·K+30 filesystem requests: 10·K+20 for the change itself,
//! one more (the lookup of `.t.treesync`, whether the target is kept in generations), three for
//! the generation mark (`t`, `t/.treesync`, `t/.treesync/generation`: is this a generation whose
//! home is gone? issue 29; to be folded into the state read the sync makes anyway), and, for
//! the next verify (issue 18), one GETATTR per written file (its stat data once in place) and
//! six per run for `.treesync/index-delta` (the clock: one GETATTR of the open state file; one
//! append through the held `.treesync` handle), none on an unchanged path. (Issue 18, target 4
//! cut five requests per run: the clock was a path lookup of the root, `.treesync` and the
//! state file, the append looked up the root and `.treesync` again, the case probe the root,
//! and the generations check resolved the target's path a third time.)

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::treesync;
use treesync_testkit::cli::s;
use treesync_testkit::conformance::History;
use treesync_testkit::history::{self, Model};
use treesync_testkit::slowfs::{self, Config, Op, SlowFs};
use treesync_testkit::tree;

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "treesync failed: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn counted_incremental_sync(modified: usize, added: usize, deleted: usize) {
    slowfs::require();
    let fs = SlowFs::temp(Config { meta_latency: Duration::from_micros(200), record_paths: true, ..Config::default() })
        .expect("mount");
    let base = history::wide_tree(20_000, 5);
    let (next, changed) = history::change_some(&base, modified, added, deleted, 6);
    let k = changed.len() as u64;
    assert_eq!(k as usize, modified + added + deleted);
    let h = History::from_trees(&[base, next] as &[Model]);
    let repo = h.bare.path.clone();
    // The initial checkout goes to the backing directory (fast, local backend); it is the same tree.
    ok(treesync(&["sync", "-q", "--repo", s(&repo), "--ref", &h.commits[0], "--target", s(&fs.backing().join("t"))]));
    let target = fs.path().join("t");

    // Auto-detection sees the FUSE network filesystem and says so.
    let st = ok(treesync(&["status", "--json", "--target", s(&target)]));
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).expect("json");
    assert_eq!(st["backend"], "nfs", "{st}");
    assert!(st["backend_reason"].as_str().expect("reason").contains("fuse.treesync-slowfs"), "{st}");

    fs.reset();
    let out = ok(treesync(&["sync", "--json", "--repo", s(&repo), "--ref", &h.commits[1], "--target", s(&target)]));
    let stats = fs.settled_stats();
    let out: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(out["backend"], "nfs");
    eprintln!("K={k}:\n{stats}");
    if std::env::var_os("SHOW_PATHS").is_some() {
        for (op, p) in &stats.paths {
            eprintln!("  {op:?} {p}");
        }
    }
    assert!(stats.total() <= 11 * k + 30, "{} filesystem ops for K={k}:\n{stats}", stats.total());

    // Allowed: the changed files (and their temporaries), the directories on their way, the
    // target root, the state folder, the case probe (one lookup of `.TREESYNC` per run) and the
    // home of generations next to the target (one lookup: is it kept in generations?).
    let mut allowed: BTreeSet<String> =
        ["t".to_string(), String::new(), "t/.TREESYNC".to_string(), ".t.treesync".to_string()].into();
    for c in &changed {
        let (dir, name) = c.rsplit_once('/').unwrap_or(("", c));
        allowed.insert(format!("t/{c}"));
        allowed.insert(format!("t/{dir}/.treesync-tmp.{name}"));
        let mut d = dir;
        while !d.is_empty() {
            allowed.insert(format!("t/{d}"));
            d = d.rsplit_once('/').map_or("", |(p, _)| p);
        }
    }
    let stray: Vec<&(Op, String)> =
        stats.paths.iter().filter(|(_, p)| !allowed.contains(p) && !p.starts_with("t/.treesync")).collect();
    assert!(stray.is_empty(), "ops on paths the change does not involve: {stray:?}");
    if let Some(d) = tree::diff(&h.expected(1), &tree::read_dir(&fs.backing().join("t"))) {
        panic!("target differs from git archive:\n{d}");
    }
}

/// The case: K=10 modified files, each in its own directory (the worst case: every
/// directory is looked up once).
#[test]
fn ten_modified_files_cost_at_most_140_filesystem_ops() {
    counted_incremental_sync(10, 0, 0);
}

/// The benchmark's change: 10 modified, 2 added, 2 deleted.
#[test]
fn the_benchmark_change_costs_at_most_11k_plus_30_filesystem_ops() {
    counted_incremental_sync(10, 2, 2);
}

/// `--backend local` forces the local policy on the same mount, and `status` says so.
#[test]
fn backend_choice_can_be_forced_and_is_reported() {
    slowfs::require();
    let fs = SlowFs::temp(Config::default()).expect("mount");
    let target = fs.path().join("t");
    let st = ok(treesync(&["status", "--target", s(&target), "--backend", "local"]));
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("backend: local now, because --backend local"), "{text}");
    let st = ok(treesync(&["status", "--target", s(&target)]));
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("backend: nfs now, because auto:") && text.contains("a network filesystem"), "{text}");
    let local = tempfile::tempdir().expect("tempdir");
    let st = ok(treesync(&["status", "--target", s(local.path())]));
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("backend: local now, because auto:") && text.contains("not a network filesystem"), "{text}");
}

fn verify_report(repo: &Path, target: &Path) -> serde_json::Value {
    let o = treesync(&["verify", "--json", "--repo", s(repo), "--target", s(target)]);
    assert_eq!(o.status.code(), Some(0), "verify: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    v["report"].clone()
}

/// Files opened under the target, its state folder left out.
fn opened_files(stats: &slowfs::Stats) -> Vec<String> {
    stats
        .paths
        .iter()
        .filter(|(op, p)| matches!(op, Op::Open | Op::Read) && p.starts_with("t/") && !p.starts_with("t/.treesync/"))
        .map(|(_, p)| p.clone())
        .collect()
}

/// The files a sync left out of its delta (git's racy rule: those of its last clock tick),
/// which the next verify reads, as the FUSE filesystem names them.
fn left_out(target: &Path, model: &Model) -> BTreeSet<String> {
    let d = treesync_core::index_delta::Delta::of_dir(target);
    d.paths
        .iter()
        .filter(|(_, e)| e.is_none())
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .filter(|p| matches!(model.0.get(p), Some(history::Entry::File { .. })))
        .map(|p| format!("t/{p}"))
        .collect()
}

/// Issue 18 on the NAS stand-in: the sync records the stat data of what it wrote (taken after
/// close and rename, through the mount), so the first verify after an initial or an
/// incremental sync opens no file; a same-size edit right after a sync is still drift.
#[test]
fn the_first_verify_after_a_sync_through_the_mount_reads_no_file() {
    slowfs::require();
    let fs = SlowFs::temp(Config { meta_latency: Duration::from_micros(100), record_paths: true, ..Config::default() })
        .expect("mount");
    let base = history::wide_tree(300, 7);
    let (next, changed) = history::change_some(&base, 10, 5, 5, 8);
    let h = History::from_trees(&[base.clone(), next.clone()] as &[Model]);
    let repo = h.bare.path.clone();
    let target = fs.path().join("t");
    let files = |m: &Model| m.0.values().filter(|e| matches!(e, history::Entry::File { .. })).count() as u64;

    ok(treesync(&["sync", "-q", "--repo", s(&repo), "--ref", &h.commits[0], "--target", s(&target)]));
    let skipped = left_out(&target, &base);
    assert!(skipped.len() <= treesync_core::index_delta::YOUNG_LEFT_OUT, "{skipped:?}");
    fs.reset();
    let r = verify_report(&repo, &target);
    let stats = fs.settled_stats();
    let n = skipped.len() as u64;
    assert_eq!((r["hashed"].as_u64(), r["proven_by_stat"].as_u64()), (Some(n), Some(files(&base) - n)), "{r}");
    let opened: BTreeSet<String> = opened_files(&stats).into_iter().collect();
    assert_eq!(opened, skipped, "verify read files through the mount that the sync had recorded");

    ok(treesync(&["sync", "-q", "--repo", s(&repo), "--ref", &h.commits[1], "--target", s(&target)]));
    let skipped = left_out(&target, &next);
    fs.reset();
    let r = verify_report(&repo, &target);
    let n = skipped.len() as u64;
    assert_eq!((r["hashed"].as_u64(), r["proven_by_stat"].as_u64()), (Some(n), Some(files(&next) - n)), "{r}");
    let opened: BTreeSet<String> = opened_files(&fs.settled_stats()).into_iter().collect();
    assert_eq!(opened, skipped);

    // Right after a sync, through the mount: same size, mtime put back.
    ok(treesync(&["sync", "-q", "--repo", s(&repo), "--ref", &h.commits[0], "--target", s(&target)]));
    let edited = changed.iter().find(|c| base.0.contains_key(*c) && next.0.contains_key(*c)).expect("a modified file");
    let p = target.join(edited);
    let (len, mtime) = {
        let md = std::fs::metadata(&p).expect("stat");
        (md.len() as usize, md.modified().expect("mtime"))
    };
    std::fs::write(&p, vec![b'#'; len]).expect("same-size edit");
    std::fs::File::options().write(true).open(&p).expect("open").set_modified(mtime).expect("utime");
    let o = treesync(&["verify", "--json", "--repo", s(&repo), "--target", s(&target)]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["report"]["drift"], serde_json::json!([{ "kind": "content_changed", "path": edited }]), "{v}");
}
