use super::{Error, Patterns, Select};
use gix::bstr::ByteSlice;
use std::collections::BTreeSet;
use std::process::Command;

fn strings(patterns: &[&str]) -> Vec<String> {
    patterns.iter().map(|p| p.to_string()).collect()
}

fn select(include: &[&str], exclude: &[&str]) -> Select {
    Select::new(&strings(include), &strings(exclude)).expect("valid patterns")
}

/// Include patterns, exclude patterns, a path, whether it is a directory, whether it is included.
type Row = (&'static [&'static str], &'static [&'static str], &'static str, bool, bool);

#[test]
fn a_table_of_paths_and_pattern_sets() {
    // (include, exclude, path, is_dir, included)
    let table: &[Row] = &[
        (&[], &[], "anything/at/all.txt", false, true),
        (&["*.md"], &[], "README.md", false, true),
        (&["*.md"], &[], "docs/deep/guide.md", false, true),
        (&["*.md"], &[], "src/main.rs", false, false),
        (&["*.md"], &[], "src", true, false),
        (&["docs/"], &[], "docs", true, true),
        (&["docs/"], &[], "docs/a/b/c.txt", false, true),
        (&["docs/"], &[], "docs", false, false),
        (&["docs/"], &[], "src/docs/x", false, true),
        (&["/docs/"], &[], "src/docs/x", false, false),
        (&["/docs/"], &[], "docs/x", false, true),
        (&["docs/api"], &[], "docs/api/x.html", false, true),
        (&["docs/api"], &[], "sub/docs/api/x.html", false, false),
        (&["**/tmp"], &[], "a/b/tmp/c", false, true),
        (&["**/tmp"], &[], "tmp", false, true),
        (&["*.md", "!keep.md"], &[], "keep.md", false, false),
        (&["*.md", "!keep.md"], &[], "other.md", false, true),
        (&["docs/", "!docs/keep.md"], &[], "docs/keep.md", false, true),
        (&[], &["build/"], "build/out.o", false, false),
        (&[], &["build/"], "build", false, true),
        (&[], &["build/"], "src/build/x", false, false),
        (&[], &["*.log", "!important.log"], "important.log", false, true),
        (&[], &["*.log", "!important.log"], "other.log", false, false),
        (&[], &["logs/", "!logs/keep.log"], "logs/keep.log", false, false),
        (&[], &["logs/*", "!logs/keep.log"], "logs/keep.log", false, true),
        (&["docs/"], &["*.tmp"], "docs/a.tmp", false, false),
        (&["docs/"], &["*.tmp"], "docs/a.md", false, true),
        (&["docs/"], &["*.tmp"], "src/a.md", false, false),
        (&["\\!bang"], &[], "!bang", false, true),
        (&["\\#hash"], &[], "#hash", false, true),
        (&["a?c"], &[], "abc", false, true),
        (&["a?c"], &[], "a/c", false, false),
        (&["[ab]*.rs"], &[], "src/bar.rs", false, true),
    ];
    for (include, exclude, path, is_dir, expected) in table {
        let s = select(include, exclude);
        assert_eq!(
            s.includes(path.as_bytes().as_bstr(), *is_dir),
            *expected,
            "include {include:?}, exclude {exclude:?}: {path} (dir: {is_dir})"
        );
    }
}

#[test]
fn walks_are_pruned_only_where_nothing_below_can_be_included() {
    let s = select(&["/docs/api/*.html", "*.md"], &["secret/"]);
    assert!(s.may_include_below(b"docs".as_bstr()));
    assert!(s.may_include_below(b"docs/api".as_bstr()));
    assert!(s.may_include_below(b"src".as_bstr()), "*.md can match anywhere");
    assert!(!s.may_include_below(b"secret".as_bstr()));
    assert!(!s.may_include_below(b"a/secret/b".as_bstr()), "below an excluded directory");

    let s = select(&["/docs/api/*.html", "/src/"], &[]);
    assert!(s.may_include_below(b"docs/api".as_bstr()));
    assert!(!s.may_include_below(b"docs/other".as_bstr()));
    assert!(!s.may_include_below(b"lib".as_bstr()));
    assert!(!s.may_include_below(b"docs/api/deeper".as_bstr()), "*.html matches files of docs/api only");
    assert!(s.may_include_below(b"src/deep/er".as_bstr()));

    let s = select(&["/a/**/b"], &[]);
    assert!(s.may_include_below(b"z".as_bstr()), "** is taken conservatively");
    let s = select(&[], &["logs/", "!logs/keep"]);
    assert!(!s.may_include_below(b"logs".as_bstr()), "a negation cannot undo an excluded directory");
    let s = select(&[], &["logs/*", "!logs/keep"]);
    assert!(s.may_include_below(b"logs".as_bstr()));
    assert!(Select::all().may_include_below(b"x".as_bstr()));
}

#[test]
fn patterns_that_match_nothing_are_refused_with_a_hint() {
    for bad in ["", "   ", "# comment", "!", "a\nb"] {
        let err = Select::new(&strings(&[bad]), &[]).expect_err(bad);
        let Error::Pattern { option, .. } = &err else { panic!("{bad:?}: {err}") };
        assert_eq!(*option, "--include");
        assert!(err.to_string().contains("hint:"), "{err}");
    }
    let err = Select::new(&[], &strings(&["ok", ""])).expect_err("empty exclude");
    assert!(err.to_string().starts_with("cannot use --exclude \"\""), "{err}");
}

#[test]
fn patterns_git_can_never_match_are_refused_saying_why() {
    let cases = [
        ("/", "`/` alone"),
        ("//", "`/` alone"),
        ("!/", "`/` alone"),
        ("../", "`..`"),
        ("..", "`..`"),
        ("./docs", "`..`"),
        ("docs/../src", "`..`"),
        ("[", "not closed"),
        ("*.[ch", "not closed"),
        ("[[:alpha:]", "not closed"),
        ("docs\\", "lone `\\`"),
    ];
    for (bad, why) in cases {
        for (include, exclude, option) in [(vec![bad], vec![], "--include"), (vec![], vec![bad], "--exclude")] {
            let err = Select::new(&strings(&include), &strings(&exclude)).expect_err(bad);
            let text = err.to_string();
            assert!(text.starts_with(&format!("cannot use {option} {bad:?}: ")), "{text}");
            assert!(text.contains(why) && text.contains("hint:"), "{bad:?}: {text}");
        }
    }
    // Brackets git closes, escapes and spaces are patterns like any other.
    for good in ["[ab]*", "[]]x", "[!]]x", "[^a]", "[[:alpha:]]x", "\\[x", "a\\ ", "a\\\\", "a ", ".*", "..x", "/docs/"]
    {
        Select::new(&strings(&[good]), &[]).unwrap_or_else(|e| panic!("{good:?}: {e}"));
    }
    // A state recorded before these checks stays readable.
    let recorded: Select = serde_json::from_str(r#"{"include":["["]}"#).expect("a recorded selection loads");
    assert_eq!(recorded.patterns().include, ["["]);
}

/// A repository whose commit holds `docs/a.md`, `docs/img/logo.png`, `b.txt`, a symlink
/// `link` and a gitlink `sub`; the repository and the commit's id.
fn small_repo() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"], None);
    let blob = git(d, &["hash-object", "-w", "--stdin"], Some("x\n"));
    let blob = blob.trim();
    let info = format!(
        "100644 {blob} 0\tdocs/a.md\n100644 {blob} 0\tdocs/img/logo.png\n100644 {blob} 0\tb.txt\n120000 {blob} 0\tlink\n160000 {} 0\tsub\n",
        "1".repeat(40)
    );
    git(d, &["update-index", "--index-info"], Some(&info));
    let tree = git(d, &["write-tree"], None);
    let commit = git(d, &["-c", "user.name=a", "-c", "user.email=a@b", "commit-tree", "-m", "one", tree.trim()], None);
    git(d, &["update-ref", "refs/heads/main", commit.trim()], None);
    (dir, commit.trim().to_string())
}

#[test]
fn a_selection_that_selects_no_path_of_the_commit_is_refused_naming_it() {
    let (dir, commit) = small_repo();
    let repo = crate::Repo::open(dir.path()).expect("open");
    let check = |rev: &str, include: &[&str], exclude: &[&str], recurse: bool| {
        let resolved = repo.resolve(rev).expect("resolve");
        select(include, exclude).check_selects_some(&repo, rev, resolved, recurse)
    };
    let selects: &[(&str, &[&str], &[&str], bool)] = &[
        ("main", &[], &[], false),
        ("main", &["docs/"], &[], false),
        ("main", &["*.png"], &[], false),
        ("main", &["/link"], &[], false),
        ("main", &["sub"], &[], false),
        // A path inside a submodule may be selected (its tree is not read here).
        ("main", &["/sub/x.c"], &[], true),
        ("main", &["*.c"], &[], true),
        ("main", &[], &["docs/"], false),
        ("main:docs", &["a.md"], &[], false),
    ];
    for (rev, include, exclude, recurse) in selects {
        check(rev, include, exclude, *recurse).unwrap_or_else(|e| panic!("{rev} {include:?} {exclude:?}: {e}"));
    }
    let nothing: &[(&str, &[&str], &[&str], bool)] = &[
        ("main", &["doc/"], &[], false),
        ("main", &["/a.md"], &[], false),
        ("main", &["*.MD"], &[], false),
        ("main", &["/sub/x.c"], &[], false),
        ("main", &["/docs/x/"], &[], true),
        ("main", &[], &["*"], true),
        ("main", &["docs/"], &["*.md", "*.png"], false),
        ("main:docs", &["b.txt"], &[], false),
    ];
    for (rev, include, exclude, recurse) in nothing {
        let err = check(rev, include, exclude, *recurse)
            .map(|()| format!("{rev} {include:?} {exclude:?} selects something"))
            .expect_err("selects nothing");
        assert!(matches!(err, Error::SelectsNothing { .. }), "{err}");
        let text = err.to_string();
        let first = text.lines().next().expect("a line");
        assert!(first.contains(&commit) && first.starts_with("refusing to sync: "), "{text}");
        for p in include.iter().chain(exclude.iter()) {
            assert!(first.contains(&format!("{p:?}")), "{text}");
        }
        assert!(text.contains("hint:") && text.contains("docs/select.md") && text.contains("ls-tree"), "{text}");
        assert_eq!(first.contains("(in its directory docs)"), rev.ends_with(":docs"), "{text}");
    }
}

#[test]
fn a_selection_serializes_as_its_patterns_and_back() {
    let s = select(&["docs/"], &[]);
    let json = serde_json::to_string(&s).expect("serializes");
    assert_eq!(json, r#"{"include":["docs/"]}"#);
    let back: Select = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, s);
    assert!(back.includes(b"docs/x".as_bstr(), false) && !back.includes(b"x".as_bstr(), false));
    assert_eq!(serde_json::to_string(&Select::all()).expect("serializes"), "{}");
    let all: Select = serde_json::from_str("{}").expect("deserializes");
    assert!(all.is_all());
    assert!(serde_json::from_str::<Select>(r##"{"exclude":["#x"]}"##).is_err(), "invalid patterns are refused on load");
    assert_eq!(s.patterns(), &Patterns { include: vec!["docs/".into()], exclude: vec![] });
}

/// A small deterministic random number generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, pool: &[&'a str]) -> &'a str {
        pool[self.below(pool.len())]
    }
}

fn git(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(args)
        // No user's or system's excludes file: only the patterns under test.
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git runs");
    child.stdin.take().expect("piped").write_all(stdin.unwrap_or("").as_bytes()).expect("stdin");
    let out = child.wait_with_output().expect("git finishes");
    // `git check-ignore` exits with 1 when it matched nothing.
    assert!(out.status.success() || (args[0] == "check-ignore" && out.status.code() == Some(1)), "git {args:?} failed");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Directories git finds matched by `patterns` (`git check-ignore --no-index`, the patterns in
/// `.git/info/exclude`, the directories on disk so that git sees them as directories).
fn git_matches_dirs(repo: &std::path::Path, patterns: &[String], dirs: &BTreeSet<String>) -> BTreeSet<String> {
    std::fs::write(repo.join(".git/info/exclude"), patterns.join("\n") + "\n").expect("write patterns");
    let list: String = dirs.iter().map(|d| format!("{d}\0")).collect();
    git(repo, &["check-ignore", "--no-index", "--stdin", "-z"], Some(&list))
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

/// Paths git's own matcher (`git ls-files -i -c --exclude-from`) finds matched by `patterns`.
fn git_matches(repo: &std::path::Path, patterns: &[String]) -> BTreeSet<String> {
    if patterns.is_empty() {
        return BTreeSet::new();
    }
    let file = repo.join(".git").join("patterns");
    std::fs::write(&file, patterns.join("\n") + "\n").expect("write patterns");
    let arg = format!("--exclude-from={}", file.display());
    git(repo, &["ls-files", "-z", "-i", "-c", &arg], None)
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn matching_agrees_with_git_on_random_paths_and_pattern_sets() {
    let repo = tempfile::tempdir().expect("tempdir");
    git(repo.path(), &["init", "-q"], None);
    let blob = git(repo.path(), &["hash-object", "-w", "--stdin"], Some("x\n"));
    let names = [
        "docs",
        "src",
        "build",
        "tmp",
        "lib",
        "a",
        "b",
        "x",
        "y",
        "api",
        "keep.md",
        "README.md",
        "main.rs",
        "lib.rs",
        "a.md",
        "b.txt",
        "out.log",
        "abc",
        "!bang",
        "#hash",
        "sp ace",
        "deep",
    ];
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut paths = BTreeSet::new();
    while paths.len() < 200 {
        let depth = 1 + rng.below(4);
        let path: Vec<&str> = (0..depth).map(|_| rng.pick(&names)).collect();
        let path = path.join("/");
        // A path cannot be both a file and a directory of the tree.
        if paths.iter().any(|p: &String| p.starts_with(&format!("{path}/")) || path.starts_with(&format!("{p}/"))) {
            continue;
        }
        paths.insert(path);
    }
    let index_info: String = paths.iter().map(|p| format!("100644 {} 0\t{p}\n", blob.trim())).collect();
    git(repo.path(), &["update-index", "--index-info"], Some(&index_info));
    assert_eq!(git(repo.path(), &["ls-files"], None).lines().count(), 200);

    let pool = [
        "*.md",
        "/docs/",
        "docs/",
        "build/",
        "**/tmp",
        "!keep.md",
        "src/*.rs",
        "/README.md",
        "a/**/b",
        "*.r?",
        "[ab]*",
        "lib",
        "!docs/keep.md",
        "docs/**",
        "!/src/",
        "tmp/",
        "x/y/",
        "!*.rs",
        "src",
        "**/lib/*.md",
        "/x",
        "\\!bang",
        "\\#hash",
        "deep/*/a",
        "!deep/",
        "*",
        "!*/",
        "a/",
        "!a/b",
        "sp ace",
        "*.log",
        "y/**/",
        "api/",
    ];
    let dirs: BTreeSet<String> =
        paths.iter().flat_map(|p| p.match_indices('/').map(|(at, _)| p[..at].to_owned())).collect();
    for dir in &dirs {
        std::fs::create_dir_all(repo.path().join(dir)).expect("mkdir");
    }
    assert!(dirs.len() > 50);
    let mut compared = 0;
    for _ in 0..40 {
        let draw = |rng: &mut Rng| -> Vec<String> { (0..rng.below(5)).map(|_| rng.pick(&pool).to_string()).collect() };
        let (include, exclude) = (draw(&mut rng), draw(&mut rng));
        let s = Select::new(&include, &exclude).expect("pool patterns are valid");
        let (inc, exc) = (git_matches(repo.path(), &include), git_matches(repo.path(), &exclude));
        for path in &paths {
            let p = path.as_bytes().as_bstr();
            assert_eq!(super::matches(&s.include, p, false), inc.contains(path), "include {include:?} on {path}");
            assert_eq!(super::matches(&s.exclude, p, false), exc.contains(path), "exclude {exclude:?} on {path}");
            let expected = (include.is_empty() || inc.contains(path)) && !exc.contains(path);
            assert_eq!(s.includes(p, false), expected, "include {include:?} exclude {exclude:?} on {path}");
            // A pruned directory holds nothing that is included.
            for (at, _) in path.match_indices('/') {
                let dir = path.as_bytes()[..at].as_bstr();
                assert!(
                    s.may_include_below(dir) || !expected,
                    "{dir} pruned but {path} is included (include {include:?} exclude {exclude:?})"
                );
            }
            compared += 1;
        }
        let (inc, exc) =
            (git_matches_dirs(repo.path(), &include, &dirs), git_matches_dirs(repo.path(), &exclude, &dirs));
        for dir in &dirs {
            let d = dir.as_bytes().as_bstr();
            assert_eq!(super::matches(&s.include, d, true), inc.contains(dir), "include {include:?} on dir {dir}");
            assert_eq!(super::matches(&s.exclude, d, true), exc.contains(dir), "exclude {exclude:?} on dir {dir}");
            compared += 1;
        }
    }
    assert_eq!(compared, 40 * (200 + dirs.len()));
}

#[test]
fn the_schema_of_a_selection_is_that_of_its_patterns() {
    let select = serde_json::to_value(schemars::schema_for!(Select)).expect("schema");
    let patterns = serde_json::to_value(schemars::schema_for!(Patterns)).expect("schema");
    assert_eq!(select, patterns);
    assert!(select["properties"]["include"].is_object() && select["properties"]["exclude"].is_object());
}
