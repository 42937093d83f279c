//! Mirrors from a config file: `sync --all`, `sync NAME`, `status --all`, `verify --all`, and
//! clear errors for bad files.

use std::path::Path;
use std::process::{Command, Output};

use treesync_testkit::cli::text;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::conformance::History;
use treesync_testkit::history::{self, Model};
use treesync_testkit::tree;

fn treesync(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_treesync")).arg("--config").arg(config).args(args).output().expect("treesync runs")
}

fn setup() -> (History, tempfile::TempDir, std::path::PathBuf) {
    let a = history::wide_tree(200, 1);
    let (b, _) = history::change_some(&a, 5, 1, 1, 2);
    let h = History::from_trees(&[a, b] as &[Model]);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = ConfigFile::new()
        .defaults()
        .key("interval", "1s")
        .mirror("one", &h.bare.path, &h.commits[0], "out/one")
        .mirror("two", &h.bare.path, &h.commits[1], "out/two")
        .key("backend", "nfs")
        .key("write_jobs", 4)
        .write_in(dir.path());
    std::fs::create_dir(dir.path().join("out")).expect("mkdir");
    (h, dir, cfg)
}

#[test]
fn sync_all_then_status_all_and_verify_all() {
    let (h, dir, cfg) = setup();
    let o = treesync(&cfg, &["sync", "--all"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let (out, _) = text(&o);
    assert!(out.contains("local:") && out.contains("nfs:"), "one line per mirror, each with its backend: {out}");
    assert!(tree::diff(&h.expected(0), &tree::read_dir(&dir.path().join("out/one"))).is_none());
    assert!(tree::diff(&h.expected(1), &tree::read_dir(&dir.path().join("out/two"))).is_none());

    let o = treesync(&cfg, &["status", "--all", "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0]["mirror"].as_str(), rows[0]["backend"].as_str()), (Some("one"), Some("local")));
    assert_eq!((rows[1]["mirror"].as_str(), rows[1]["backend"].as_str()), (Some("two"), Some("nfs")));
    assert_eq!(rows[1]["state"]["synced"]["commit"].as_str(), Some(h.commits[1].as_str()));

    let o = treesync(&cfg, &["status", "--all"]);
    let (out, _) = text(&o);
    assert!(out.lines().next().is_some_and(|l| l.starts_with("MIRROR")), "{out}");
    assert!(out.lines().filter(|l| l.contains(" ok ")).count() == 2, "{out}");

    let o = treesync(&cfg, &["verify", "--all"]);
    assert!(o.status.success(), "{:?}", text(&o));
    // Drift in one mirror: verify --all exits 1 and still checks the other.
    std::fs::write(dir.path().join("out/one/dir000/sub00/file000000.txt"), "changed\n").expect("write");
    let o = treesync(&cfg, &["verify", "--all"]);
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(text(&o).0.contains("clean Budgets(lookups=adaptive(1..16), writes=4, scans=32, nfs:"), "{:?}", text(&o));
}

#[test]
fn one_mirror_by_name_and_flags_override_the_file() {
    let (h, dir, cfg) = setup();
    let o = treesync(&cfg, &["sync", "two", "--write-jobs", "2", "--json"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["backend"], "nfs");
    assert_eq!(v["budgets"]["writes"], "2", "the command line wins over write_jobs = 4: {v}");
    assert!(tree::diff(&h.expected(1), &tree::read_dir(&dir.path().join("out/two"))).is_none());
    assert!(!dir.path().join("out/one").exists(), "only the named mirror ran");
}

#[test]
fn bad_files_and_names_are_one_clear_error() {
    let (_h, dir, cfg) = setup();
    let o = treesync(&cfg, &["sync", "three"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("no mirror named \"three\"") && text(&o).1.contains("one, two"), "{:?}", text(&o));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[mirror.x]\nrepo = \".\"\nref = \"main\"\ntagret = \"/tmp/x\"\n").expect("write");
    let o = treesync(&bad, &["sync", "--all"]);
    assert_eq!(o.status.code(), Some(2));
    let (_, err) = text(&o);
    assert!(err.contains("bad.toml:4:1") && err.contains("tagret"), "points at the line: {err}");

    let o = treesync(&dir.path().join("missing.toml"), &["status", "--all"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("missing.toml"), "{:?}", text(&o));
}
