//! `verify --slice` and `watch --verify-slices`: slices of a real synced tree check every path
//! and every listing exactly once, a rolling run advances and wraps, a repair of a slice
//! repairs what it found, and watch runs one slice per verify.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::PathBuf;

use crate::cli;
use crate::schema::VERIFY as VERIFY_SCHEMA;
use crate::schema::WATCH_EVENT as WATCH_SCHEMA;
use serde_json::Value;
use treesync_core::slice::Slice;
use treesync_testkit::cli::drift_of;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, Entry, Model};
use treesync_testkit::{BareRepo, schema};

/// The directories of the fixture's tree (the root is "").
fn dirs() -> Vec<String> {
    let mut d = vec![String::new()];
    for a in 0..4 {
        d.push(format!("a{a}"));
        for b in 0..2 {
            d.push(format!("a{a}/b{b}"));
        }
    }
    d
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

struct Fixture {
    bare: BareRepo,
    commit: String,
    _dir: tempfile::TempDir,
    target: PathBuf,
}

impl Fixture {
    /// A tree of 13 directories with two files each, synced with real git into a local target.
    fn new() -> Fixture {
        let mut m = Model::default();
        for d in dirs() {
            for f in ["f1.txt", "f2.txt"] {
                let p = join(&d, f);
                m.insert(&p, Entry::File { content: format!("{p}\n").into_bytes(), executable: false });
            }
        }
        let bare = BareRepo::new();
        let commits = history::import(&bare.path, "main", &[m]);
        let (dir, target) = temp_target("t");
        cli().ok(&["sync", "-q", "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&target)]);
        Fixture { bare, commit: commits[0].clone(), _dir: dir, target }
    }

    /// `verify ARGS --json`: exit code (0 clean, 1 drift) and the document, checked against
    /// its schema.
    fn verify(&self, extra: &[&str]) -> (i32, Value) {
        let mut args = vec!["verify", "--repo", s(&self.bare.path), "--target", s(&self.target), "--json"];
        args.extend_from_slice(extra);
        let o = cli().run(&args);
        let code = o.status.code().expect("exit code");
        assert!(code == 0 || code == 1, "verify {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
        let schema: Value = serde_json::from_str(VERIFY_SCHEMA).expect("schema");
        if let Err(e) = schema::validate(&schema, &v) {
            panic!("verify {extra:?} --json violates verify.schema.json: {e:?}\n{v:#}");
        }
        (code, v)
    }

    /// Drift in every directory: one file rewritten, one extra file.
    fn plant_drift(&self) -> BTreeSet<String> {
        let mut planted = BTreeSet::new();
        for d in dirs() {
            let f1 = join(&d, "f1.txt");
            std::fs::write(self.target.join(&f1), "changed by hand\n").expect("write");
            planted.insert(format!("content_changed:{f1}"));
            let extra = join(&d, "extra.txt");
            std::fs::write(self.target.join(&extra), "not in the tree\n").expect("write");
            planted.insert(format!("extra:{extra}"));
        }
        planted
    }
}

/// The drift of a report, as a set.
fn drift(report: &Value) -> BTreeSet<String> {
    drift_of(report).into_iter().collect()
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("a number: {v}"))
}

#[test]
fn drift_in_every_directory_is_found_by_exactly_one_slice_and_by_all_of_them_together() {
    let f = Fixture::new();
    let planted = f.plant_drift();
    let (code, whole) = f.verify(&[]);
    assert_eq!(code, 1);
    assert_eq!(drift(&whole["report"]), planted, "the whole verify finds what was planted");
    assert_eq!(whole["report"]["slice"], Value::Null);
    for n in [1u32, 3, 5] {
        let mut union = BTreeSet::new();
        let (mut expected, mut scanned, mut listed) = (0, 0, 0);
        for k in 1..=n {
            let (_, v) = f.verify(&["--slice", &format!("{k}/{n}")]);
            let report = &v["report"];
            assert_eq!((num(&report["slice"]["k"]), num(&report["slice"]["n"])), (u64::from(k), u64::from(n)));
            assert_eq!(report["slice"]["next"], Value::Null, "an explicit slice moves no position");
            for d in drift(report) {
                let path = d.split_once(':').expect("kind:path").1;
                assert_eq!(Slice::of_dir(parent(path).as_bytes(), n), k, "{d} found by slice {k}/{n}, its directory's");
                assert!(union.insert(d.clone()), "{d} found by two slices of {n}");
            }
            expected += num(&report["expected"]);
            scanned += num(&report["scanned"]);
            listed += num(&report["slice"]["dirs"]);
        }
        assert_eq!(union, planted, "the {n} slices together find all the drift");
        assert_eq!(expected, num(&whole["report"]["expected"]), "every path checked once over {n} slices");
        assert_eq!(scanned, num(&whole["report"]["scanned"]), "every entry listed once over {n} slices");
        assert_eq!(listed, dirs().len() as u64, "every directory listed once over {n} slices");
    }
}

#[test]
fn a_rolling_verify_advances_wraps_and_tells_when_a_cycle_completed() {
    let f = Fixture::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (code, v) = f.verify(&["--slice", "next/3"]);
        assert_eq!(code, 0, "{v}");
        let s = &v["report"]["slice"];
        seen.push((num(&s["k"]), num(&s["next"]), s["last_full_cycle_unix"].as_u64()));
    }
    let cycle = seen[2].2.expect("slice 3 of 3 completes a cycle");
    assert_eq!(seen, [(1, 2, None), (2, 3, None), (3, 1, Some(cycle)), (1, 2, Some(cycle))]);
    assert!(f.target.join(".treesync/verify-slice").is_file(), "the position is kept in the target");
    // A named slice reads the position (the last cycle) and moves nothing.
    let (_, v) = f.verify(&["--slice", "3/3"]);
    assert_eq!(v["report"]["slice"]["last_full_cycle_unix"].as_u64(), Some(cycle));
    let (_, v) = f.verify(&["--slice", "next/3"]);
    assert_eq!(num(&v["report"]["slice"]["k"]), 2, "still the slice after the last rolling one");
    // Another N starts over at 1; the text report says which slice and when.
    let text = cli().run(&["verify", "--repo", s(&f.bare.path), "--target", s(&f.target), "--slice", "next/4"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("slice 1/4: "), "{text}");
    assert!(text.contains("next: 2/4") && text.contains("the last full cycle completed"), "{text}");
    let bad = cli().run(&["verify", "--repo", s(&f.bare.path), "--target", s(&f.target), "--slice", "4/3"]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("numbered 1 to N") && stderr.contains("hint: write K/N"), "{stderr}");
}

#[test]
fn repairing_a_slice_repairs_what_it_found_and_all_slices_repair_the_tree() {
    let f = Fixture::new();
    let mut planted = f.plant_drift();
    // An extra directory with content: its slice lists below it to remove it.
    std::fs::create_dir_all(f.target.join("a1/b0/junk/deep")).expect("mkdir");
    std::fs::write(f.target.join("a1/b0/junk/deep/x.txt"), "x\n").expect("write");
    planted.insert("extra:a1/b0/junk".into());
    let n = 3;
    let mut left = planted.clone();
    for k in 1..=n {
        let slice = format!("{k}/{n}");
        let (code, v) = f.verify(&["--repair", "--delete-extra", "--slice", &slice]);
        assert_eq!(code, 0, "the slice ends clean: {v}");
        let found = drift(&v["report"]);
        assert!(
            found.iter().all(|d| Slice::of_dir(parent(d.split_once(':').expect("kind:path").1).as_bytes(), n) == k)
        );
        assert_eq!(drift(&v["after_repair"]), BTreeSet::new(), "{v}");
        left.retain(|d| !found.contains(d));
        let (_, whole) = f.verify(&[]);
        assert_eq!(drift(&whole["report"]), left, "after repairing {slice}, the other slices' drift remains");
    }
    assert!(left.is_empty(), "every planted drift was repaired by its slice: {left:?}");
    assert!(!f.target.join("a1/b0/junk").exists(), "the extra directory was removed with its content");
    let (code, _) = f.verify(&["--level", "full"]);
    assert_eq!(code, 0, "the whole tree is clean after one repair per slice");
}

#[test]
fn watch_with_verify_slices_runs_one_slice_per_verify() {
    let f = Fixture::new();
    std::fs::write(f.target.join("a0/b1/extra.txt"), "x\n").expect("write");
    let owner = Slice::of_dir(b"a0/b1", 3);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_treesync"))
        .args(["watch", "--json", "--interval", "100ms", "--verify-every", "600ms", "--verify-slices", "3"])
        .args(["--repo", s(&f.bare.path), "--ref", &f.commit, "--target", s(&f.target)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("watch runs");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let schema: Value = serde_json::from_str(WATCH_SCHEMA).expect("schema");
    let mut verified = Vec::new();
    // A generous deadline after which the test fails (no timing is asserted).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while verified.len() < 4 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = rx.recv_timeout(left) else { break };
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if let Err(e) = schema::validate(&schema, &v) {
            panic!("watch --json line violates watch-event.schema.json: {e:?}\n{v:#}");
        }
        if v["event"] == "verified" {
            verified.push(v);
        }
    }
    child.kill().expect("stop the watch");
    child.wait().expect("reap the watch");
    assert_eq!(verified.len(), 4, "four verifies within the deadline");
    let ks: Vec<u64> = verified.iter().map(|v| num(&v["report"]["slice"]["k"])).collect();
    assert_eq!(ks, [1, 2, 3, 1], "one slice per verify, in order, wrapping");
    for v in &verified {
        let k = num(&v["report"]["slice"]["k"]) as u32;
        assert_eq!(num(&v["report"]["slice"]["n"]), 3);
        let found = drift(&v["report"]);
        let expect: BTreeSet<String> =
            if k == owner { ["extra:a0/b1/extra.txt".to_string()].into() } else { BTreeSet::new() };
        assert_eq!(found, expect, "slice {k}: the extra file is found by its directory's slice only");
        assert_eq!(v["clean"], Value::Bool(k != owner));
    }
    assert!(verified[2]["report"]["slice"]["last_full_cycle_unix"].is_u64(), "three slices make a cycle");
}
