//! The CLI on a NAS stand-in (the slow FUSE filesystem, latency on every op, kernel caches
//! off): `--backend auto` picks nfs and says why, and an incremental sync of K changed files in
//! a 20,000-file tree costs at most 10·K+21 filesystem requests (the one beyond 10·K+20: the lookup
//! of `.t.treesync`, whether the target is kept in generations), none on an unchanged path.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use treesync_testkit::conformance::History;
use treesync_testkit::history::{self, Model};
use treesync_testkit::slowfs::{self, Config, Op, SlowFs};
use treesync_testkit::tree;

fn treesync(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_treesync")).args(args).output().expect("treesync runs")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

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
    assert!(stats.total() <= 10 * k + 21, "{} filesystem ops for K={k}:\n{stats}", stats.total());

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
fn ten_modified_files_cost_at_most_121_filesystem_ops() {
    counted_incremental_sync(10, 0, 0);
}

/// The benchmark's change: 10 modified, 2 added, 2 deleted.
#[test]
fn the_benchmark_change_costs_at_most_10k_plus_21_filesystem_ops() {
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
