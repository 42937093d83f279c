//! Issue 30: a verify that can disagree with the sync. `verify --oracle git` judges every file
//! by what the git program writes for the synced tree, so a conversion treesync gets wrong —
//! in the sync and in its own verify alike — is drift. Also here: files git refuses to
//! re-encode are written unconverted, as git writes them, and reported; and a target written
//! by older conversion rules is rewritten once.
//!
//! The wrong conversion is planted with a fault only debug builds have
//! (`TREESYNC_FAULT_FORGET_BUILTIN_MACROS=1`: `binary` is no macro, the bug the issue found).

use std::process::{Command, Output};

use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::file;
use treesync_testkit::history::{self, Model};
use treesync_testkit::{BareRepo, gitcheck, tree};

const FAULT: &str = "TREESYNC_FAULT_FORGET_BUILTIN_MACROS";

/// treesync with no system or global git configuration (as [`gitcheck::expected`] runs git),
/// and `env` set.
fn treesync(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_treesync"));
    c.args(args).env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("treesync runs")
}

fn json(o: &Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)))
}

/// The paths of a `verify --json` output's drift.
fn drift(output: &serde_json::Value) -> Vec<String> {
    let all = output["report"]["drift"].as_array().expect("report.drift");
    all.iter().map(|d| d["path"].as_str().expect("path").to_string()).collect()
}

/// `* text eol=crlf` and `*.png binary` (the common idiom), and a macro of the tree's own.
fn binary_idiom() -> (BareRepo, String) {
    let mut m = Model::default();
    m.insert(".gitattributes", file(b"[attr]opaque -text\n* text eol=crlf\n*.png binary\n*.dat opaque\n"));
    m.insert("logo.png", file(b"\x89PNG\r\n\x1a\nline\nend\n"));
    m.insert("raw.dat", file(b"a\nb\n"));
    m.insert("readme.txt", file(b"one\ntwo\n"));
    let bare = BareRepo::new();
    let commit = history::import(&bare.path, "main", &[m]).remove(0);
    (bare, commit)
}

#[test]
fn a_wrong_conversion_treesyncs_own_verify_cannot_see_is_drift_for_git() {
    let (bare, commit) = binary_idiom();
    let (_dir, target) = temp_target("t");
    let (repo, t) = (s(&bare.path), s(&target));
    let faulty = [(FAULT, "1")];
    let o = treesync(&["sync", "--repo", repo, "--ref", &commit, "--target", t], &faulty);
    assert!(o.status.success(), "sync: {}", String::from_utf8_lossy(&o.stderr));
    let git = gitcheck::expected(&bare.path, &commit, &[]);
    let differs = gitcheck::diff(&git, &target);
    assert!(
        differs.len() == 1 && differs[0].starts_with("logo.png"),
        "the fault corrupts exactly the PNG (as the bug did): {differs:?}"
    );
    // treesync's own verify shares the sync's conversion: blind to it.
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--level", "full", "--json"], &faulty);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(drift(&json(&o, "verify")).is_empty());
    // git is not.
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--oracle", "git", "--json"], &faulty);
    assert_eq!(o.status.code(), Some(1), "drift: {}", String::from_utf8_lossy(&o.stderr));
    let report = json(&o, "verify --oracle git");
    assert_eq!(drift(&report), ["logo.png"]);
    let oracle = &report["report"]["oracle"];
    assert_eq!(oracle["judged"], 4, "every file judged by git: {report:#}");
    assert_eq!(oracle["not_judged"], 0);
    assert!(oracle["git"].as_str().expect("git version").starts_with("git version "));
    let text = treesync(&["verify", "--repo", repo, "--target", t, "--oracle", "git"], &faulty);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("logo.png") && out.contains("judged by git version"), "{out}");
    // Fixed (no fault): a full repair writes git's bytes (at the stat level, the stat data the
    // faulty full verify recorded would still vouch for the file), and git finds it clean.
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--level", "full", "--repair"], &[]);
    assert!(o.status.success(), "repair: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(gitcheck::diff(&git, &target), Vec::<String>::new());
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--oracle", "git", "--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn the_oracle_is_refused_where_it_cannot_judge_and_with_repair() {
    let (bare, commit) = binary_idiom();
    let (_dir, target) = temp_target("t");
    let (repo, t) = (s(&bare.path), s(&target));
    assert!(treesync(&["sync", "--repo", repo, "--ref", &commit, "--target", t], &[]).status.success());
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--oracle", "git", "--repair"], &[]);
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", String::from_utf8_lossy(&o.stderr));
    // A changed info/attributes: git would judge with other attributes than the sync used.
    std::fs::create_dir_all(bare.path.join("info")).expect("mkdir info");
    std::fs::write(bare.path.join("info/attributes"), "*.txt -text\n").expect("write info/attributes");
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--oracle", "git"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("info/attributes changed") && err.contains("hint:"), "{err}");
}

#[test]
fn encodings_git_refuses_are_written_unconverted_as_git_does_and_reported() {
    let mut m = Model::default();
    m.insert(
        ".gitattributes",
        file(b"*.l1 working-tree-encoding=ISO-8859-1\n*.as working-tree-encoding=US-ASCII\n*.no working-tree-encoding=NO-SUCH-ENC\n*.u16 working-tree-encoding=UTF-16\n"),
    );
    m.insert("ok.l1", file("caf\u{e9}\n".as_bytes()));
    m.insert("euro.l1", file("\u{20ac}5\n".as_bytes()));
    m.insert("accent.as", file("caf\u{e9}\n".as_bytes()));
    m.insert("plain.as", file(b"cafe\n"));
    m.insert("any.no", file(b"text\n"));
    m.insert("text.u16", file("h\u{e9}\n".as_bytes()));
    let bare = BareRepo::new();
    let commit = history::import(&bare.path, "main", &[m]).remove(0);
    let (dir, target) = temp_target("t");
    let o = treesync(&["sync", "--json", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&target)], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (git, messages) = gitcheck::expected_reporting(&bare.path, &commit, &[]);
    assert_eq!(gitcheck::diff(&git, &target), Vec::<String>::new(), "the bytes git writes");
    let refused: Vec<String> = gitcheck::refused_paths(&messages).into_iter().collect();
    assert_eq!(refused, ["accent.as", "any.no", "euro.l1"], "what git refuses: {messages}");
    let outcome = json(&o, "sync");
    let reported: Vec<&str> = outcome["unconverted"]
        .as_array()
        .expect("unconverted")
        .iter()
        .map(|u| u["path"].as_str().expect("path"))
        .collect();
    assert_eq!(reported, refused, "treesync reports what git refuses: {outcome:#}");
    assert_eq!(outcome["unconverted"][1]["why"], "unknown-encoding");
    assert_eq!(outcome["unconverted"][0]["why"], "unconvertible");
    // UTF-16 as glibc's iconv writes it: a byte-order mark and the machine's byte order.
    let Some(tree::Node::File(bytes, _)) = tree::read_dir(&target).remove("text.u16") else { panic!("a file") };
    assert_eq!(bytes[..2], [0xFF, 0xFE], "little-endian BOM on this machine");
    // Without --json, a warning on stderr names them, once.
    let again = dir.path().join("t2");
    let o = treesync(&["sync", "--repo", s(&bare.path), "--ref", &commit, "--target", s(&again)], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success()
            && err.contains("3 file(s) written as UTF-8, unconverted")
            && err.contains("euro.l1: working-tree-encoding=ISO-8859-1"),
        "{err}"
    );
}

#[test]
fn a_target_written_by_older_conversion_rules_is_rewritten_once() {
    let (bare, commit) = binary_idiom();
    let (_dir, target) = temp_target("t");
    let (repo, t) = (s(&bare.path), s(&target));
    let o = treesync(&["sync", "--repo", repo, "--ref", &commit, "--target", t], &[(FAULT, "1")]);
    assert!(o.status.success());
    // What an older treesync leaves: its wrong bytes, and a state without the rules version.
    let state_path = target.join(".treesync/state");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("state")).expect("json");
    state["conversions"].as_object_mut().expect("settings").remove("rules");
    std::fs::write(&state_path, serde_json::to_vec_pretty(&state).expect("json")).expect("write state");
    let git = gitcheck::expected(&bare.path, &commit, &[]);
    assert_eq!(gitcheck::diff(&git, &target).len(), 1);
    // Before that sync, verify does not take the stat data recorded under the older rules as
    // proof: it hashes, and finds the file.
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--json"], &[(FAULT, "1")]);
    assert_eq!(json(&o, "verify")["report"]["proven_by_stat"], 0, "faulty verify records its stat data, unused");
    let o = treesync(&["verify", "--repo", repo, "--target", t, "--json"], &[]);
    assert_eq!(drift(&json(&o, "verify")), ["logo.png"]);
    let o = treesync(&["sync", "--json", "--repo", repo, "--ref", &commit, "--target", t], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let outcome = json(&o, "sync");
    assert_eq!(gitcheck::diff(&git, &target), Vec::<String>::new(), "rewritten with the rules of now");
    // Every converted file once (`* text eol=crlf`: all four), never again.
    assert_eq!(outcome["applied"]["write"], 4, "{outcome:#}");
    let o = treesync(&["sync", "--json", "--repo", repo, "--ref", &commit, "--target", t], &[]);
    assert_eq!(json(&o, "sync")["applied"]["write"], 0);
}
