//! `treesync verify`, `verify --repair` and `sync --force` on a target whose files are
//! converted by `.gitattributes` (issue 15): they compare with what a sync writes (and git
//! checks out), not with the raw blobs.

use std::path::Path;

use crate::treesync;
use crate::verify;
use treesync_testkit::cli::drift_of;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, Entry, Model};
use treesync_testkit::{BareRepo, gitcheck, tree};

fn sync(repo: &Path, rev: &str, target: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["sync", "--json", "--repo", s(repo), "--ref", rev, "--target", s(target)];
    args.extend_from_slice(extra);
    let o = treesync(&args);
    assert!(o.status.success(), "sync {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON outcome")
}

/// A repository whose files are converted every way `git checkout` converts them.
fn converted_repo() -> (BareRepo, String) {
    let file = |s: &[u8]| Entry::File { content: s.to_vec(), executable: false };
    let mut m = Model::default();
    m.insert(
        ".gitattributes",
        file(b"* text=auto\n*.bat text eol=crlf\n*.c ident\n*.u16 text working-tree-encoding=UTF-16LE-BOM\n"),
    );
    m.insert("run.bat", file(b"echo one\necho two\n"));
    m.insert("main.c", file(b"/* $Id$ */\nint main(void) { return 0; }\n"));
    m.insert("notes.u16", file("h\u{e9}llo\nw\u{f6}rld\n".as_bytes()));
    m.insert("readme.txt", file(b"plain\ntext\n"));
    m.insert("sub/data.bin", file(b"\x00\x01binary\n\x00"));
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[m]);
    (bare, commits[0].clone())
}

/// Set `core.autocrlf=true` in `bare` if `on`; the repository configuration git checks out with.
fn set_autocrlf(bare: &BareRepo, on: bool) -> &'static [(&'static str, &'static str)] {
    if !on {
        return &[];
    }
    treesync_testkit::git(&bare.path, &["config", "core.autocrlf", "true"]);
    &[("core.autocrlf", "true")]
}

#[test]
fn converted_files_verify_clean_and_a_repair_writes_them_converted_again() {
    for autocrlf in [false, true] {
        let (bare, commit) = converted_repo();
        let config = set_autocrlf(&bare, autocrlf);
        let context = format!("core.autocrlf={autocrlf}");
        let (_dir, t) = temp_target("t");
        let expected = gitcheck::expected(&bare.path, &commit, config);
        sync(&bare.path, &commit, &t, &[]);
        assert_eq!(gitcheck::diff(&expected, &t), Vec::<String>::new(), "{context}: the sync writes what git writes");
        assert_eq!(std::fs::read(t.join("run.bat")).expect("read"), b"echo one\r\necho two\r\n");

        for level in ["quick", "stat", "full"] {
            let (code, v) = verify(&bare.path, &t, &["--level", level]);
            assert_eq!((code, drift_of(&v["report"])), (0, vec![]), "{context}, {level}: {v}");
        }
        // The stat-level verify above recorded what it proved: the next proves every file by
        // its stat, converted ones included, without reading one.
        let (code, v) = verify(&bare.path, &t, &[]);
        assert_eq!(code, 0, "{v}");
        assert_eq!((v["report"]["hashed"].as_u64(), v["report"]["proven_by_stat"].as_u64()), (Some(0), Some(6)), "{v}");

        // `--force` on the clean managed target compares it, and writes nothing.
        let out = sync(&bare.path, &commit, &t, &["--force"]);
        assert_eq!(out["applied"]["write"], 0, "{context}: sync --force rewrote a clean target: {out}");

        // A converted file put back to the blob's bytes (CRLF -> LF): drift, alone.
        std::fs::write(t.join("run.bat"), b"echo one\necho two\n").expect("write");
        for level in ["quick", "stat", "full"] {
            let (code, v) = verify(&bare.path, &t, &["--level", level]);
            assert_eq!((code, drift_of(&v["report"])), (1, vec!["content_changed:run.bat".to_string()]), "{v}");
        }
        let (code, v) = verify(&bare.path, &t, &["--repair", "--level", "full"]);
        assert_eq!(code, 0, "{context}: clean after the repair: {v}");
        assert_eq!(gitcheck::diff(&expected, &t), Vec::<String>::new(), "{context}: the repair writes what git writes");
        let (code, v) = verify(&bare.path, &t, &["--level", "full"]);
        assert_eq!((code, drift_of(&v["report"])), (0, vec![]), "{context}: {v}");
        assert!(tree::read_dir(&t).contains_key("sub/data.bin"));

        // `sync --force` puts a drifted converted file right too, and only that one.
        std::fs::write(t.join("main.c"), b"/* $Id$ */\nint main(void) { return 0; }\n").expect("write");
        let out = sync(&bare.path, &commit, &t, &["--force"]);
        assert_eq!(out["applied"]["write"], 1, "{context}: sync --force rewrites the drifted file: {out}");
        assert_eq!(gitcheck::diff(&expected, &t), Vec::<String>::new(), "{context}: after sync --force");
    }
}

/// A repository with no `.gitattributes` at all (the common case, which sync and verify
/// resolve with no attribute lookup): with `core.autocrlf=true` every text file is written
/// with CRLF as git writes it, and verify proves it and finds a file put back to LF; without,
/// files are written as the blobs are. An update on top is compared with git too.
#[test]
fn a_tree_without_attributes_is_converted_by_the_repository_settings_alone() {
    let file = |s: &[u8], x: bool| Entry::File { content: s.to_vec(), executable: x };
    let mut first = Model::default();
    first.insert("a.txt", file(b"one\ntwo\n", false));
    first.insert("sub/run.sh", file(b"#!/bin/sh\necho hi\n", true));
    first.insert("sub/deeper/data.bin", file(b"\x00\x01\nbinary\n", false));
    let mut second = first.clone();
    second.insert("a.txt", file(b"one\ntwo\nthree\n", false));
    second.insert("new/c.txt", file(b"c\n", false));
    for autocrlf in [false, true] {
        let bare = BareRepo::new();
        let commits = history::import(&bare.path, "main", &[first.clone(), second.clone()]);
        let config = set_autocrlf(&bare, autocrlf);
        let context = format!("core.autocrlf={autocrlf}");
        let (_dir, t) = temp_target("t");
        sync(&bare.path, &commits[0], &t, &[]);
        let expected = gitcheck::expected(&bare.path, &commits[0], config);
        assert_eq!(gitcheck::diff(&expected, &t), Vec::<String>::new(), "{context}: the sync writes what git writes");
        let a = std::fs::read(t.join("a.txt")).expect("read");
        assert_eq!(a, if autocrlf { &b"one\r\ntwo\r\n"[..] } else { &b"one\ntwo\n"[..] }, "{context}");
        assert_eq!(std::fs::read(t.join("sub/deeper/data.bin")).expect("read"), b"\x00\x01\nbinary\n", "{context}");
        for level in ["quick", "stat", "full", "stat"] {
            let (code, v) = verify(&bare.path, &t, &["--level", level]);
            assert_eq!((code, drift_of(&v["report"])), (0, vec![]), "{context}, {level}: {v}");
        }

        // The other line endings, same size or not: drift at the levels that read content.
        let other: &[u8] = if autocrlf { b"one\ntwo\n" } else { b"one\r\ntwo\r\n" };
        std::fs::write(t.join("a.txt"), other).expect("write");
        for level in ["stat", "full"] {
            let (code, v) = verify(&bare.path, &t, &["--level", level]);
            assert_eq!(
                (code, drift_of(&v["report"])),
                (1, vec!["content_changed:a.txt".to_string()]),
                "{context}: {v}"
            );
        }
        let (code, v) = verify(&bare.path, &t, &["--repair"]);
        assert_eq!(code, 0, "{context}: clean after the repair: {v}");
        assert_eq!(gitcheck::diff(&expected, &t), Vec::<String>::new(), "{context}: the repair writes what git writes");

        sync(&bare.path, &commits[1], &t, &[]);
        let expected = gitcheck::expected(&bare.path, &commits[1], config);
        assert_eq!(gitcheck::diff(&expected, &t), Vec::<String>::new(), "{context}: the update writes what git writes");
        let (code, v) = verify(&bare.path, &t, &["--level", "full"]);
        assert_eq!((code, drift_of(&v["report"])), (0, vec![]), "{context}: {v}");
    }
}
