//! The cases of `.gitattributes` conversions: files as `git checkout` writes them, and an
//! attributes change that rewrites only the affected files.

use super::*;

/// Panic with git's own words unless the fixture holds what `git checkout REV` writes
/// ([`crate::gitcheck::expected`], `.gitattributes` conversions applied), reduced to what the
/// backend can hold.
fn assert_matches_checkout(h: &History, f: &dyn Fixture, rev: &str, context: &str) {
    assert_matches_checkout_with(h, f, rev, &[], context);
}

/// [`assert_matches_checkout`] with `config` given to the clone (`git clone -c`): what the
/// repository's own config sets (clones do not copy it).
fn assert_matches_checkout_with(h: &History, f: &dyn Fixture, rev: &str, config: &[(&str, &str)], context: &str) {
    let expected = reduce(&crate::gitcheck::expected(&h.bare.path, rev, config), f.capabilities());
    let differences = crate::gitcheck::diff_snapshots(&expected, &f.read());
    assert!(
        differences.is_empty(),
        "{context}: target differs from `git checkout {rev}` in {} path(s):\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// Files are written as `git checkout` writes them (issue 15): `.gitattributes` with
/// `text eol=crlf`, `ident`, `text` and `working-tree-encoding`, at the top and in a
/// subdirectory, through a history that adds, changes and removes converted files and the
/// attributes themselves, synced forward and back. Its last commit is the small attribute
/// matrix of issue 30 ([`crate::oracle::Size::Small`]: every attribute and macro of
/// gitattributes(5) in the root and nested `.gitattributes`, the encodings issue 30 names, a
/// filter driver configured in the repository). After every sync the target equals a fresh git
/// checkout of the commit, and planning again is empty.
pub async fn conversions_match_git_checkout(f: &dyn Fixture) {
    let root_attributes = "*.bat text eol=crlf\n*.c ident\n*.txt text\n*.u16 text working-tree-encoding=UTF-16LE-BOM\n";
    let a = Model::of(&[
        (".gitattributes", root_attributes),
        ("run.bat", "@echo off\necho one\necho two\n"),
        ("src/main.c", "/* $Id$ */\nint main(void) { return 0; }\n"),
        ("src/plain.h", "/* $Id$ stays: no ident here */\n"),
        ("notes.txt", "first\nsecond\n"),
        ("mixed.txt", "crlf line\r\nlf line\n"),
        ("greeting.u16", "h\u{e9}llo\nw\u{f6}rld\n"),
        ("data.bin", "\0binary\r\nbytes\n"),
    ]);
    let mut b = a.with([
        ("run.bat", history::file("@echo off\necho changed\n")),
        ("src/main.c", history::file("/* $Id$ */\nint main(void) { return 1; }\n")),
        ("docs/.gitattributes", history::file("*.md text eol=crlf\n*.txt -text\n")),
        ("docs/guide.md", history::file("# Guide\n\nline\n")),
        ("docs/raw.txt", history::file("kept\nas is\n")),
        ("docs/more.u16", history::file("\u{2603} snow\n")),
    ]);
    b.0.remove("notes.txt");
    let mut c = b.with([
        (".gitattributes", history::file("*.bat text eol=crlf\n*.c ident\n*.txt text eol=crlf\n")),
        ("notes.txt", history::file("back\nagain\n")),
        ("docs/guide.md", history::file("# Guide\n\nchanged line\n")),
    ]);
    c.0.remove("greeting.u16");
    let (matrix, _) = crate::oracle::model(crate::oracle::Size::Small);
    let config = [crate::oracle::DRIVER];
    let h = History::from_trees_with_config(&[a, b, c, matrix], &config);
    let backend = f.backend();
    for (step, i) in [0usize, 1, 2, 0, 2, 3, 1, 3].into_iter().enumerate() {
        let rev = &h.commits[i];
        sync_to(&h.repo, rev, &*backend).await.unwrap_or_else(|e| panic!("step {step}: sync to commit {i}: {e}"));
        let what = if i == 3 { " (the attribute matrix)" } else { "" };
        assert_matches_checkout_with(&h, f, rev, &config, &format!("conversions, step {step} (commit {i}{what})"));
        let again = sync::prepare(&h.repo, rev, &*backend, &Default::default()).await.expect("prepare");
        assert!(again.main.is_empty(), "step {step}: planning again is not empty: {:?}", again.main.counts);
    }
}

/// A commit that changes nothing but a `.gitattributes` file rewrites exactly the files whose
/// converted bytes change (each op says why: its `reason`), and nothing else; a commit that
/// changes K files under an unchanged `.gitattributes` writes exactly those K files, as it
/// would without attributes.
pub async fn attribute_changes_rewrite_only_the_affected_files(f: &dyn Fixture) {
    let mut a = Model::default();
    a.insert(".gitattributes", history::file("*.c ident\n"));
    for i in 0..10 {
        a.insert(&format!("docs/page{i}.txt"), history::file(format!("page {i}\nline two\n")));
        a.insert(&format!("docs/deep/note{i}.txt"), history::file(format!("note {i}\nmore\n")));
        a.insert(&format!("other/page{i}.txt"), history::file(format!("other {i}\nline two\n")));
        a.insert(&format!("src/f{i}.c"), history::file(format!("/* $Id$ */\nint f{i};\n")));
    }
    // Under docs/, but their bytes do not change with `eol=crlf`: no line end, or not `*.txt`.
    a.insert("docs/one-line.txt", history::file("no line end"));
    a.insert("docs/readme.md", history::file("stays\nLF\n"));
    // Only the attributes change, in a subdirectory.
    let b = a.with([("docs/.gitattributes", history::file("*.txt eol=crlf\n"))]);
    // K changed files under unchanged attributes: converted ones, and ones without conversion.
    let changed = ["docs/page3.txt", "docs/deep/note7.txt", "src/f2.c", "other/page5.txt", "docs/new.txt"];
    let c = b.with(changed.map(|p| (p, history::file(format!("{p} changed\nin commit c\n")))));
    let h = History::from_trees(&[a, b, c]);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("initial");
    assert_matches_checkout(&h, f, &h.commits[0], "before the attributes change");

    // The files whose bytes git writes differently at b, and the new attributes file.
    let (before, after) = (
        crate::gitcheck::expected(&h.bare.path, &h.commits[0], &[]),
        crate::gitcheck::expected(&h.bare.path, &h.commits[1], &[]),
    );
    let mut rewritten: Vec<String> = after
        .iter()
        .filter(|(p, n)| matches!(n, Node::File(..)) && before.get(*p).is_some_and(|old| old != *n))
        .map(|(p, _)| p.clone())
        .collect();
    rewritten.sort();
    assert_eq!(
        rewritten.len(),
        20,
        "the test expects the 20 multi-line .txt files below docs/ to change: {rewritten:?}"
    );
    let counting = Count::new(f.backend());
    let record = counting.record();
    let out = sync_to(&h.repo, &h.commits[1], &counting).await.expect("sync of the attributes-only commit");
    let r = record.lock().expect("record").clone();
    let mut writes: Vec<String> = Vec::new();
    for op in &r.ops {
        let path = String::from_utf8_lossy(op.path().as_bytes()).into_owned();
        match op {
            treesync_core::Op::Write { reason, .. } if path != "docs/.gitattributes" => {
                assert!(reason.as_deref().is_some_and(|s| !s.is_empty()), "{path}: a rewrite without a reason");
                writes.push(path);
            }
            treesync_core::Op::Write { .. } => {}
            other => panic!("only writes expected, got {other:?}"),
        }
    }
    writes.sort();
    assert_eq!(writes, rewritten, "exactly the files whose converted bytes change are rewritten");
    assert_eq!(r.counts.total(), 21, "the rewrites and the new .gitattributes: {:?}", touched(&r));
    assert_eq!(out.applied.total(), 21, "the outcome counts the same ops");
    assert_eq!(r.dir_reads, 0, "no listing of the target");
    assert_matches_checkout(&h, f, &h.commits[1], "after the attributes-only commit");

    // K changed paths under unchanged attributes: K writes, none elsewhere.
    let counting = Count::new(f.backend());
    let record = counting.record();
    let out = sync_to(&h.repo, &h.commits[2], &counting).await.expect("incremental under attributes");
    let r = record.lock().expect("record").clone();
    let mut paths = touched(&r);
    paths.sort();
    let mut want: Vec<String> = changed.iter().map(|p| p.to_string()).collect();
    want.sort();
    assert_eq!(paths, want, "K ops for K changed paths");
    assert_eq!((r.counts.write, r.counts.total()), (changed.len() as u64, changed.len() as u64), "{:?}", r.counts);
    assert_eq!(out.applied.total(), changed.len() as u64);
    for op in &r.ops {
        if let treesync_core::Op::Write { reason, .. } = op {
            assert!(reason.is_none(), "a changed blob needs no reason: {op:?}");
        }
    }
    assert_eq!(r.dir_reads, 0, "no listing of the target");
    assert_matches_checkout(&h, f, &h.commits[2], "after K changes under unchanged attributes");
}
