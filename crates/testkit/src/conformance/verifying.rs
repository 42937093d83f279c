//! The cases of `verify` and `repair`: a clean target, drift found and repaired, slices of a
//! verify, and the converted bytes a verify compares with.

use super::*;

/// After a sync, `verify` finds nothing at every level, and a second stat-level verify proves
/// files without hashing them again where the backend keeps a stat index.
pub async fn verify_after_sync_is_clean(f: &dyn Fixture) {
    let h = History::random(11, 2);
    let backend = f.backend();
    sync_to(&h.repo, &h.commits[0], &*backend).await.expect("sync");
    sync_to(&h.repo, &h.commits[1], &*backend).await.expect("sync");
    for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
        let report = crate::verify_at(&h.repo, &*f.backend(), level).await.expect("verify");
        assert!(report.is_clean(), "{level:?}: drift right after a sync: {:?}", report.drift);
        assert!(report.expected > 0 && report.scanned > 0, "{level:?}: nothing compared: {report:?}");
        assert!(!report.interrupted);
    }
    // A second stat-level verify reads no file where the backend keeps the stat index the
    // first one wrote (filesystems: `aux_store`, and a scan with stat data). (Object stores
    // prove files by ETag where it is an MD5, which only some stores give.)
    let again = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Stat).await.expect("verify");
    assert!(again.is_clean());
    let found = f.backend().scan(1).await.expect("scan");
    let files = found.iter().filter(|e| matches!(e.kind, backend::FoundKind::File { .. })).count() as u64;
    let provable = f.capabilities().aux_store
        && found.iter().any(|e| matches!(e.kind, backend::FoundKind::File { stat: Some(_), .. }));
    if provable {
        assert_eq!((again.hashed, again.proven_by_stat), (0, files), "proven without reading: {again:?}");
    }
}

/// A file changed behind treesync's back and a foreign file are found by `verify` and put
/// right by [`sync::repair`] (the foreign file removed with `delete_extra`); a verify after it
/// is clean and the target equals `git archive` again.
pub async fn drift_is_found_and_repaired(f: &dyn Fixture) {
    let h = History::random(12, 1);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("sync");
    let expected = h.expected(0);
    let changed = expected
        .iter()
        .find_map(|(p, n)| matches!(n, Node::File(..)).then(|| p.clone()))
        .expect("the history has a file");
    f.put_file(&changed, b"changed behind treesync's back, and longer than before\n");
    f.put_file("foreign.txt", b"not from git\n");
    let report = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Stat).await.expect("verify");
    let paths: Vec<String> = report.drift.iter().map(|d| String::from_utf8_lossy(d.path()).into_owned()).collect();
    assert!(
        report
            .drift
            .iter()
            .any(|d| matches!(d, verify::Drift::ContentChanged { .. }) && d.path() == changed.as_bytes()),
        "the changed file is drift: {paths:?}"
    );
    assert!(
        report.drift.iter().any(|d| matches!(d, verify::Drift::Extra { .. }) && d.path() == b"foreign.txt"),
        "the foreign file is drift: {paths:?}"
    );
    assert_eq!(report.drift.len(), 2, "nothing else: {paths:?}");
    let options = sync::RepairOptions {
        level: verify::Level::Stat,
        delete_extra: true,
        dry_run: false,
        check_after: true,
        slice: None,
        sync: sync::Options { backend_name: "test".into(), ..Default::default() },
    };
    let out = sync::repair(&h.repo, &*f.backend(), &options, &|_| {}, &AtomicBool::new(false)).await.expect("repair");
    let applied = out.applied.expect("the repair applied ops");
    assert_eq!((applied.write, applied.unlink), (1, 1), "one rewrite, one removal: {applied:?}");
    assert!(out.after.as_ref().is_some_and(|a| a.is_clean()), "clean after the repair: {:?}", out.after);
    h.assert_matches(f, 0, "after the repair");
    let report = crate::verify_at(&h.repo, &*f.backend(), verify::Level::Full).await.expect("verify");
    assert!(report.is_clean(), "a full verify after the repair: {:?}", report.drift);
}

/// A verify in slices ([`treesync_core::slice`]-style `verify_slice`): with drift in every directory
/// (each file changed, a foreign file added), each slice of N finds the drift of its own
/// directories only, and the N slices together find exactly what a whole verify finds, having
/// checked every path once. Then a repair of each slice leaves the whole target clean.
pub async fn slices_of_a_verify_find_all_drift_exactly_once(f: &dyn Fixture) {
    use treesync_core::slice::Slice;
    let h = History::random(14, 1);
    sync_to(&h.repo, &h.commits[0], &*f.backend()).await.expect("sync");
    let expected = h.expected(0);
    let parent = |p: &[u8]| -> Vec<u8> { p.iter().rposition(|b| *b == b'/').map_or(Vec::new(), |i| p[..i].to_vec()) };
    let mut dirs = vec![String::new()];
    for (p, n) in &expected {
        match n {
            Node::File(..) => f.put_file(p, b"changed behind treesync's back, in every directory\n"),
            Node::Dir => dirs.push(p.clone()),
            Node::Link(_) => {}
        }
    }
    for d in &dirs {
        let p = if d.is_empty() { "foreign.txt".to_string() } else { format!("{d}/foreign.txt") };
        f.put_file(&p, b"not from git\n");
    }
    let limits = treesync_core::plan::Limits::default();
    let b = f.backend();
    let whole = verify::verify(
        &h.repo,
        &*b,
        &verify::Options { level: verify::Level::Stat, limits, slice: None, ..Default::default() },
        &|_| {},
        &std::sync::atomic::AtomicBool::new(false),
    )
    .await
    .expect("verify");
    let all: std::collections::BTreeSet<Vec<u8>> = whole.drift.iter().map(|d| d.path().to_vec()).collect();
    assert!(all.len() > dirs.len(), "drift in every directory: {all:?}");
    let n = 3;
    let mut union = std::collections::BTreeSet::new();
    let mut checked = 0;
    for k in 1..=n {
        let slice = Slice::new(k, n).expect("valid");
        let r = verify::verify(
            &h.repo,
            &*b,
            &verify::Options { level: verify::Level::Stat, limits, slice: Some(slice), ..Default::default() },
            &|_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .await
        .expect("verify");
        for d in &r.drift {
            assert!(slice.has_dir(&parent(d.path())), "slice {slice} found {d:?}, of another slice");
            assert!(union.insert(d.path().to_vec()), "{d:?} found by two slices");
        }
        checked += r.expected;
    }
    assert_eq!(union, all, "the slices together find what the whole verify finds");
    assert_eq!(checked, whole.expected, "every path checked once");
    for k in 1..=n {
        let options = sync::RepairOptions {
            level: verify::Level::Stat,
            delete_extra: true,
            dry_run: false,
            check_after: true,
            slice: Some(Slice::new(k, n).expect("valid")),
            sync: sync::Options { backend_name: "test".into(), ..Default::default() },
        };
        let out = sync::repair(&h.repo, &*b, &options, &|_| {}, &AtomicBool::new(false)).await.expect("repair");
        assert!(out.after.as_ref().is_none_or(|a| a.is_clean()), "slice {k}/{n} clean after its repair");
    }
    h.assert_matches(f, 0, "after repairing every slice");
}

/// `verify --level full compares against the converted bytes` (issue 15): a target synced
/// from a repository with `.gitattributes` conversions (CRLF, `ident`, UTF-16, `text=auto`),
/// without and then with `core.autocrlf=true`, verifies clean at every level; a converted file
/// put back to its blob's bytes (CRLF → LF) is drift at every level and nothing else is; a
/// repair writes the converted bytes again (what a fresh `git clone` writes); and a `--force`
/// sync of the clean managed target writes nothing.
pub async fn verify_compares_with_converted_bytes(f: &dyn Fixture) {
    let model = Model::of(&[
        (
            ".gitattributes",
            "* text=auto\n*.bat text eol=crlf\n*.c ident\n*.u16 text working-tree-encoding=UTF-16LE-BOM\n",
        ),
        ("run.bat", "echo one\necho two\n"),
        ("dir/deep.bat", "x\ny\n"),
        ("main.c", "/* $Id$ */\nint main(void) { return 0; }\n"),
        ("notes.u16", "h\u{e9}llo\nw\u{f6}rld\n"),
        ("readme.txt", "plain\ntext\n"),
        ("data.bin", "\x00\x01binary\n\x00"),
    ]);
    let h = History::from_trees(&[model]);
    let commit = h.commits[0].clone();
    let caps = f.capabilities();
    let repair = sync::RepairOptions {
        level: verify::Level::Stat,
        delete_extra: false,
        dry_run: false,
        check_after: true,
        slice: None,
        sync: sync::Options { backend_name: "test".into(), ..Default::default() },
    };
    for autocrlf in [false, true] {
        let config: &[(&str, &str)] = if autocrlf { &[("core.autocrlf", "true")] } else { &[] };
        if autocrlf {
            crate::git(&h.bare.path, &["config", "core.autocrlf", "true"]);
        }
        // Opened after the config is set: a repository reads its settings when opened.
        let repo = Repo::open(&h.bare.path).expect("open");
        let expected = reduce(&crate::gitcheck::expected(&h.bare.path, &commit, config), caps);
        let context = format!("core.autocrlf={autocrlf}");
        let run = |ctx: &str| {
            if let Some(d) = tree::diff(&expected, &f.read()) {
                panic!("{context}, {ctx}: the target differs from a fresh git clone:\n{d}");
            }
        };
        sync_to(&repo, &commit, &*f.backend()).await.expect("sync");
        run("after the sync");
        assert_ne!(
            expected.get("run.bat"),
            Some(&Node::File(b"echo one\necho two\n".to_vec(), false)),
            "{context}: the test needs a converted file"
        );
        for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full, verify::Level::Stat] {
            let report = crate::verify_at(&repo, &*f.backend(), level).await.expect("verify");
            assert!(report.is_clean(), "{context}, {level:?}: drift right after a sync: {:?}", report.drift);
        }
        // A `--force` sync of the clean managed target compares and writes nothing.
        let out = sync_with(&repo, &commit, &*f.backend(), true).await.expect("sync --force");
        assert_eq!(out.applied, Default::default(), "{context}: --force rewrote files of a clean target");
        run("after sync --force");

        // The converted file put back to the blob's bytes: drift, at every level, alone.
        f.put_file("run.bat", b"echo one\necho two\n");
        for level in [verify::Level::Quick, verify::Level::Stat, verify::Level::Full] {
            let report = crate::verify_at(&repo, &*f.backend(), level).await.expect("verify");
            assert_eq!(
                report.drift,
                [verify::Drift::ContentChanged { path: b"run.bat".to_vec() }],
                "{context}, {level:?}: exactly the changed file"
            );
        }
        let out = sync::repair(&repo, &*f.backend(), &repair, &|_| {}, &AtomicBool::new(false)).await.expect("repair");
        let applied = out.applied.expect("the repair applied ops");
        assert_eq!(applied.write, 1, "{context}: one file rewritten: {applied:?}");
        assert!(out.after.as_ref().is_some_and(|a| a.is_clean()), "{context}: clean after: {:?}", out.after);
        run("after the repair");
        let report = crate::verify_at(&repo, &*f.backend(), verify::Level::Full).await.expect("verify");
        assert!(report.is_clean(), "{context}: a full verify after the repair: {:?}", report.drift);
    }
}
