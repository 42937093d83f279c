//! `treesync verify` and `--repair`: drift of every kind at the right level, repair, the git
//! index as a second opinion, and request counts on S3.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::treesync;
use crate::verify;
use treesync_testkit::cli::drift_of;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, Entry, Model};
use treesync_testkit::history::{executable, file};
use treesync_testkit::s3::Moto;
use treesync_testkit::{BareRepo, tree};

fn drift_paths(v: &serde_json::Value) -> Vec<String> {
    drift_of(&v["report"])
}

fn fixture() -> (BareRepo, String, tempfile::TempDir) {
    let m = Model::of(&[
        ("a.txt", "aaaa\n"),
        ("b.txt", "bbbbbbbb\n"),
        ("b2.txt", "b2\n"),
        ("s.txt", "hello\n"),
        ("t.txt", "touch me\n"),
        ("d/e.txt", "eee\n"),
        ("d/keep", "k\n"),
    ])
    .with([("c.sh", executable("#!/bin/sh\n")), ("link", Entry::Link { target: "a.txt".into() })]);
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[m]);
    let dir = tempfile::tempdir().expect("tempdir");
    let o =
        treesync(&["sync", "-q", "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&dir.path().join("t"))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (bare, commits[0].clone(), dir)
}

#[test]
fn drift_of_every_kind_is_found_at_the_right_level_and_repaired() {
    let (bare, commit, dir) = fixture();
    let t = dir.path().join("t");
    let repo = bare.path.clone();

    // What the sync recorded (all its files but those of its last clock tick, git's racy rule).
    let recorded = treesync_core::index_delta::Delta::of_dir(&t).recorded() as u64;
    let (code, v) = verify(&repo, &t, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["report"]["hashed"],
        8 - recorded,
        "the first stat-level verify proves every file the sync recorded: {v}"
    );
    assert_eq!(v["report"]["proven_by_stat"], recorded);
    let (code, v) = verify(&repo, &t, &[]);
    assert_eq!(code, 0);
    assert_eq!(v["report"]["hashed"], 0, "the second one by its own index: {v}");
    assert_eq!(v["report"]["proven_by_stat"], 8);

    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(t.join("s.txt"), "HELLO\n").expect("same-size edit");
    std::fs::write(t.join("b.txt"), "bb").expect("truncate");
    std::fs::remove_file(t.join("d/e.txt")).expect("delete");
    std::fs::write(t.join("x.new"), "extra").expect("extra file");
    std::fs::set_permissions(t.join("c.sh"), std::fs::Permissions::from_mode(0o644)).expect("chmod -x");
    std::fs::remove_file(t.join("a.txt")).expect("rm");
    std::os::unix::fs::symlink("b.txt", t.join("a.txt")).expect("file -> symlink");
    std::fs::remove_file(t.join("b2.txt")).expect("rm");
    std::fs::create_dir(t.join("b2.txt")).expect("file -> dir");
    std::fs::write(t.join("b2.txt/inner"), "x").expect("inside");
    let touched = std::fs::File::options().append(true).open(t.join("t.txt")).expect("open");
    touched.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).expect("touch");
    drop(touched);

    let mut quick = [
        "content_changed:b.txt",
        "extra:x.new",
        "missing:d/e.txt",
        "mode_changed:c.sh",
        "type_changed:a.txt",
        "type_changed:b2.txt",
    ];
    quick.sort();
    let (code, v) = verify(&repo, &t, &["--level", "quick"]);
    assert_eq!(code, 1);
    let mut got = drift_paths(&v);
    got.sort();
    assert_eq!(got, quick, "{v}");
    let mut stat: Vec<&str> = quick.to_vec();
    stat.push("content_changed:s.txt");
    stat.sort();
    for level in ["stat", "full"] {
        let (code, v) = verify(&repo, &t, &["--level", level]);
        assert_eq!(code, 1);
        let mut got = drift_paths(&v);
        got.sort();
        assert_eq!(got, stat, "level {level}: {v}");
    }

    // Repair without --delete-extra keeps the foreign file, so the tree still drifts.
    let (code, v) = verify(&repo, &t, &["--repair"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(drift_of(&v["after_repair"]), ["extra:x.new"], "{v}");
    assert!(t.join("x.new").exists());
    let (code, v) = verify(&repo, &t, &["--repair", "--delete-extra"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = verify(&repo, &t, &["--level", "full"]);
    assert_eq!(code, 0, "{v}");
    let expected = dir.path().join("expected");
    bare.archive(&commit, &expected);
    assert_eq!(tree::diff(&tree::read_dir(&expected), &tree::read_dir(&t)), None);

    // touch alone: hashed once, no rewrite.
    let f = std::fs::File::options().append(true).open(t.join("t.txt")).expect("open");
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60)).expect("touch");
    drop(f);
    let (code, v) = verify(&repo, &t, &["--repair"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["report"]["hashed"], 1, "{v}");
    assert_eq!(v["repaired"], serde_json::Value::Null, "touch must not cost a rewrite: {v}");
}

#[test]
fn git_status_with_treesyncs_index_is_a_second_opinion() {
    let (bare, _, dir) = fixture();
    let t = dir.path().join("t");
    let (code, _) = verify(&bare.path, &t, &[]);
    assert_eq!(code, 0);
    let status = || {
        let o = Command::new("git")
            .env("GIT_INDEX_FILE", t.join(".treesync/index"))
            .arg("--git-dir")
            .arg(&bare.path)
            .arg("--work-tree")
            .arg(&t)
            .args(["status", "--porcelain", "-uno"])
            .output()
            .expect("git status");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(status(), "", "git sees a clean tree with treesync's index");
    std::fs::write(t.join("d/e.txt"), "edited\n").expect("edit");
    assert_eq!(status(), " M d/e.txt\n");
}

/// On S3, verify lists (⌈N/1000⌉ LIST requests) and proves unchanged objects by their ETag:
/// no GET for them.
#[test]
fn s3_verify_lists_and_gets_only_what_differs() {
    let moto = Moto::start();
    moto.create_bucket("verify-bucket");
    let mut m = Model::default().with((0..1500).map(|i| (format!("d{}/f{i}", i % 9), file(format!("content {i}\n")))));
    m.insert("x", executable("exe\n"));
    m.insert("l", Entry::Link { target: "x".into() });
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[m]);
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_treesync"));
        c.args(args).args(["--target", "s3://verify-bucket/site", "--endpoint", &moto.endpoint, "--allow-http"]);
        for (k, v) in moto.env() {
            c.env(k, v);
        }
        c.output().expect("runs")
    };
    let o = run(&["sync", "-q", "--repo", s(&bare.path), "--ref", &commits[0]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mark = moto.mark();
    let o = run(&["verify", "--repo", s(&bare.path)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r = moto.requests_since(mark);
    assert_eq!((r.list, r.get, r.head, r.put), (2, 1, 0, 0), "2 LIST pages + the state GET: {r:?}");
    // Someone overwrites one object: found by its ETag, read once, repaired by one PUT.
    {
        use object_store::ObjectStoreExt;
        let config = treesync_backend_s3::Config {
            endpoint: Some(moto.endpoint.clone()),
            allow_http: true,
            credentials: Some(("testing".into(), "testing".into())),
            ..Default::default()
        };
        let b = treesync_backend_s3::open("s3://verify-bucket/site", &config, Default::default()).expect("open");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(b.store().put(&"site/d1/f1".into(), b"tampered\n".to_vec().into())).expect("overwrite");
    }
    let mark = moto.mark();
    let o = run(&["verify", "--repo", s(&bare.path), "--repair"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("d1/f1") && out.contains("content differs"), "{out}");
    let r = moto.requests_since(mark);
    assert_eq!(r.put, 3, "the repaired object and the journal before and after it: {r:?}");
}

/// A stat-level verify of N=3,000 files in 30 directories: one lstat per entry and about one
/// readdir per directory (plus gitoxide opening the repository), and no file read once the
/// stat index knows the files.
#[test]
fn verify_costs_one_readdir_per_directory_and_one_stat_per_entry() {
    treesync_testkit::missing::require_program("strace", "strace");
    let mut m = Model::default();
    for i in 0..3000 {
        m.insert(&format!("d{:02}/f{i}", i % 30), file(format!("{i}\n")));
    }
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[m]);
    let (dir, t) = temp_target("t");
    assert!(
        treesync(&["sync", "-q", "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&t)]).status.success()
    );
    assert_eq!(verify(&bare.path, &t, &[]).0, 0, "first verify writes the stat index");
    let out = dir.path().join("strace.txt");
    let o = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=/^(getdents64|statx|newfstatat|lstat|stat|fstat|openat|read)$", "-o"])
        .arg(&out)
        .arg(env!("CARGO_BIN_EXE_treesync"))
        .env_remove("LD_LIBRARY_PATH")
        .args(["verify", "--repo", s(&bare.path), "--target", s(&t)])
        .output()
        .expect("strace");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).expect("summary");
    let calls = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.split_whitespace().last() == Some(name))
            .and_then(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(3).and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    };
    let stats = calls("statx") + calls("newfstatat") + calls("lstat") + calls("stat") + calls("fstat");
    let entries = 3000 + 30;
    assert!(stats >= entries && stats <= entries + 120, "stat-family calls {stats} for {entries} entries:\n{text}");
    assert!(
        calls("getdents64") <= 2 * 31 + 4,
        "one readdir (a listing, then the empty read that ends it) per directory:\n{text}"
    );
    assert!(calls("openat") <= 31 + 80, "no file opened for hashing:\n{text}");
}

/// `verify --repair` and a sync started while it runs: the repair takes the target's lock and
/// compares under it, so it never writes the old tree back over files the sync just wrote. One
/// of them may be refused with exit 3 (the lock is held); whatever ran, the target equals
/// `git archive` of the commit its state records.
#[test]
fn repair_and_sync_running_together_never_leave_a_wrong_tree() {
    let mut a = Model::default();
    for d in 0..40 {
        for f in 0..50 {
            a.insert(&format!("d{d}/f{f}"), file(format!("a {d} {f}\n")));
        }
    }
    let mut c = a.clone();
    for d in 0..40 {
        for f in (0..50).filter(|f| f % 5 != 0) {
            c.insert(&format!("d{d}/f{f}"), file(format!("c {d} {f} changed\n")));
        }
    }
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[a, c]);
    let (dir, t) = temp_target("t");
    let repo = s(&bare.path).to_string();
    let expected: Vec<_> = commits
        .iter()
        .map(|commit| {
            let dest = dir.path().join(format!("archive-{commit}"));
            bare.archive(commit, &dest);
            tree::read_dir(&dest)
        })
        .collect();
    let mut both_ran = 0;
    for round in 0..10u64 {
        let o = treesync(&["sync", "-q", "--repo", &repo, "--ref", &commits[0], "--target", s(&t)]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let repair = Command::new(env!("CARGO_BIN_EXE_treesync"))
            .args(["verify", "--repo", &repo, "--target", s(&t), "--level", "full", "--repair"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("verify --repair starts");
        std::thread::sleep(std::time::Duration::from_millis(5 * round));
        let sync = treesync(&["sync", "-q", "--repo", &repo, "--ref", &commits[1], "--target", s(&t)]);
        let repaired = repair.wait_with_output().expect("verify --repair ends");
        let (sync_code, repair_code) = (sync.status.code(), repaired.status.code());
        assert!(
            matches!(sync_code, Some(0 | 3)),
            "round {round}: sync: {sync_code:?} {}",
            String::from_utf8_lossy(&sync.stderr)
        );
        assert!(
            matches!(repair_code, Some(0 | 3)),
            "round {round}: verify --repair: {repair_code:?} {}",
            String::from_utf8_lossy(&repaired.stderr)
        );
        if sync_code == Some(0) && repair_code == Some(0) {
            both_ran += 1;
        }
        let status = treesync(&["status", "--target", s(&t), "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
        let recorded = status["state"]["synced"]["commit"].as_str().expect("a synced commit").to_string();
        assert!(status["state"]["in_progress"].is_null(), "round {round}: {status}");
        let i = commits.iter().position(|c| *c == recorded).expect("a commit of the history");
        assert_eq!(sync_code == Some(0), i == 1, "round {round}: the state records the sync that succeeded");
        if let Some(d) = tree::diff(&expected[i], &tree::read_dir(&t)) {
            panic!("round {round}: the target differs from git archive of the recorded commit {recorded}:\n{d}");
        }
    }
    eprintln!("rounds in which both the repair and the sync ran (one after the other): {both_ran} of 10");
}
