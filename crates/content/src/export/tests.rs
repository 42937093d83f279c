use super::{CommitInfo, expand};
use crate::Repo;
use gix::bstr::ByteSlice;
use std::path::Path;
use std::process::{Command, Stdio};

/// The path the template is expanded at.
static SUBST: std::sync::LazyLock<&gix::bstr::BStr> = std::sync::LazyLock::new(|| b"subst.txt".as_bstr());

/// `%(describe)` without options.
fn described_by_default(info: &CommitInfo) -> String {
    info.described(&Default::default()).expect("describes")
}

/// The time relative dates are counted to, for git (`GIT_TEST_DATE_NOW`) and for treesync.
const NOW: i64 = 1_750_000_000;

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_TEST_DATE_NOW", NOW.to_string())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    child.stdin.take().expect("piped").write_all(stdin).expect("stdin");
    let out = child.wait_with_output().expect("git finishes");
    assert!(out.status.success(), "git {args:?}: {}", out.stderr.to_str_lossy());
    out.stdout
}

fn git(dir: &Path, args: &[&str]) -> String {
    String::from_utf8(run(dir, args, &[], b"")).expect("utf-8").trim_end().to_owned()
}

/// A commit of `tree` with `parents`, `message` kept exactly (commit-tree does no cleanup), and
/// identities in non-UTC zones.
fn commit(dir: &Path, tree: &str, parents: &[&str], message: &str, author_date: &str, committer_date: &str) -> String {
    let mut args = vec!["commit-tree", tree];
    for p in parents {
        args.extend(["-p", p]);
    }
    let env = [
        ("GIT_AUTHOR_NAME", "Ada  Lovelace"),
        ("GIT_AUTHOR_EMAIL", "ada@example.org"),
        ("GIT_AUTHOR_DATE", author_date),
        ("GIT_COMMITTER_NAME", "C. Babbage"),
        ("GIT_COMMITTER_EMAIL", "charles"),
        ("GIT_COMMITTER_DATE", committer_date),
    ];
    String::from_utf8(run(dir, &args, &env, message.as_bytes())).expect("utf-8").trim().to_owned()
}

/// Every placeholder treesync expands, one a line, with those it leaves alone and git's quirks.
const TEMPLATE: &str = "\
hashes $Format:%H %h %T %t$
colors $Format:%Cred<%Cgreen%Cblue%Creset%C(auto)%C(bold red)%C(auto,blue)>%Cxyz %C(red$
parents $Format:[%P] [%p]$
author $Format:%an|%aN|%ae|%aE|%al|%aL$
author dates $Format:%ad|%aD|%ar|%at|%ai|%aI|%as$
committer $Format:%cn|%cN|%ce|%cE|%cl|%cL$
committer dates $Format:%cd|%cD|%cr|%ct|%ci|%cI|%cs$
subject $Format:%s$ sanitized $Format:%f$
body $Format:<%b>$
raw $Format:<%B>$
encoding $Format:<%e>$ mark $Format:%m$
refs $Format:%d|%D|%(decorate)$
describe $Format:%(describe)$
literals $Format:100%% %n%x41%x7e%x0a|%xZZ|%x4$
magic $Format:a%n%-b|%+s|% s|%+b|%-s$
unknown $Format:%Z %q %(nope) %-z %+ %g? %gd%gs%gn end %$
two $Format:%h$ and $Format:%t$ on a line $Format: no end
";

/// A new repository on `branch` whose index holds the template at `subst.txt` and these
/// `.gitattributes`; and the tree of that index.
fn template_repo(branch: &str, attributes: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", branch]);
    std::fs::write(d.join(".gitattributes"), attributes).expect("write");
    std::fs::write(d.join("subst.txt"), TEMPLATE).expect("write");
    git(d, &["add", "."]);
    let tree = git(d, &["write-tree"]);
    (dir, tree)
}

fn repo_with_history() -> (tempfile::TempDir, Vec<String>) {
    let (dir, tree) = template_repo("main", "subst.txt export-subst\n");
    let d = dir.path();
    let root = commit(d, &tree, &[], "root\n", "1100000000 +0530", "1100000100 -0700");
    let side = commit(
        d,
        &tree,
        &[&root],
        "\n\n  Side:   a multi-line\nsubject... with [brackets]   \n\n\nBody line 1\n  indented 2\n\n",
        "1600000000 -0230",
        "1749990000 +1400",
    );
    let main = commit(d, &tree, &[&root], "main work\n\nwith a body\n", "1700000000 +0100", "1749999000 -1100");
    let merge = commit(
        d,
        &tree,
        &[&main, &side],
        "Merge branch 'side'\n\n* side:\n  Side: a multi-line subject\n\nSigned-off-by: A <a@b>\n",
        "1749999999 +0000",
        // git's default date format hides the zone -0001 (it equals an unset "human" zone, -1).
        "1749999999 -0001",
    );
    git(d, &["update-ref", "refs/heads/main", &merge]);
    git(d, &["update-ref", "refs/heads/side", &side]);
    git(d, &["update-ref", "refs/heads/feature", &merge]);
    git(d, &["update-ref", "refs/remotes/origin/main", &main]);
    git(d, &["symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main"]);
    let tagger =
        [("GIT_COMMITTER_NAME", "T"), ("GIT_COMMITTER_EMAIL", "t@t"), ("GIT_COMMITTER_DATE", "1100000200 +0000")];
    run(d, &["tag", "-a", "-m", "version 1", "v1.0", &root], &tagger, b"");
    run(d, &["tag", "-a", "-m", "version 2", "v2.0", &merge], &tagger, b"");
    git(d, &["tag", "light", &merge]);
    // What git itself would not write, hashed as it is: a zone of -0001 (which git's default
    // date format hides: it equals the unset "human" zone, -1), a nameless author, a committer
    // without a date, an encoding header, a message without a body. No ref points at it.
    let odd = format!(
        "tree {tree}\nparent {root}\nauthor <nobody@example.org> 1749999999 -0001\ncommitter Weird <w@x>\nencoding ISO-8859-1\n\nodd one out"
    );
    let odd = String::from_utf8(run(
        d,
        &["hash-object", "--literally", "-t", "commit", "-w", "--stdin"],
        &[],
        odd.as_bytes(),
    ))
    .expect("utf-8")
    .trim()
    .to_owned();
    (dir, vec![merge, main, side, root, odd])
}

fn archived(dir: &Path, commit: &str) -> Vec<u8> {
    let tar = run(dir, &["archive", "--format=tar", commit, "subst.txt"], &[], b"");
    let out = Command::new("tar").args(["-xO", "-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn();
    let mut child = out.expect("tar runs");
    {
        use std::io::Write;
        child.stdin.take().expect("piped").write_all(&tar).expect("stdin");
    }
    let out = child.wait_with_output().expect("tar finishes");
    assert!(out.status.success());
    out.stdout
}

#[test]
fn expansion_agrees_with_git_archive_byte_for_byte() {
    let (dir, commits) = repo_with_history();
    let repo = Repo::open(dir.path()).expect("open");
    let mut described = 0;
    for (i, id) in commits.iter().enumerate() {
        if i == 1 {
            // HEAD detached on another commit: `HEAD` alone in the ref names.
            git(dir.path(), &["checkout", "-q", "--detach", id]);
        }
        let mut info = CommitInfo::from_commit(&repo, id.parse().expect("hex id")).expect("commit info");
        info.now = NOW;
        described += usize::from(!described_by_default(&info).is_empty());
        let ours = expand(TEMPLATE.as_bytes(), &SUBST, &info).expect("expands");
        let theirs = archived(dir.path(), id);
        if std::env::var_os("SHOW_ARCHIVE").is_some() {
            eprintln!("{}", theirs.as_bstr());
        }
        for (n, (a, b)) in ours.lines().zip(theirs.lines()).enumerate() {
            assert_eq!(a.as_bstr(), b.as_bstr(), "commit {i} ({id}), line {}", n + 1);
        }
        assert_eq!(ours.as_bstr(), theirs.as_bstr(), "commit {i} ({id})");
        assert_ne!(ours.as_ref(), TEMPLATE.as_bytes());
    }
    assert_eq!(described, 5, "every commit is reached by an annotated tag");
}

#[test]
fn the_ref_names_and_description_are_git_logs() {
    let (dir, commits) = repo_with_history();
    let repo = Repo::open(dir.path()).expect("open");
    let info = CommitInfo::from_commit(&repo, commits[0].parse().expect("hex id")).expect("commit info");
    assert_eq!(info.refs, ["HEAD -> main", "tag: v2.0", "tag: light", "feature"]);
    assert_eq!(git(dir.path(), &["log", "-1", "--format=%D", &commits[0]]), info.refs.join(", "));
    assert_eq!(described_by_default(&info), "v2.0");
    let info = CommitInfo::from_commit(&repo, commits[1].parse().expect("hex id")).expect("commit info");
    assert_eq!(info.refs, ["origin/main", "origin/HEAD"], "later names first");
    assert_eq!(described_by_default(&info), format!("v1.0-1-g{}", &commits[1][..7]));
    assert_eq!(info.parents.len(), 1);
}

#[test]
fn data_without_a_complete_format_is_left_as_it_is() {
    let (dir, commits) = repo_with_history();
    let repo = Repo::open(dir.path()).expect("open");
    let info = CommitInfo::from_commit(&repo, commits[0].parse().expect("hex id")).expect("commit info");
    for data in [&b"plain text"[..], b"$Format:%H", b"$Format %H$", b""] {
        let out = expand(data, &SUBST, &info).expect("expands");
        assert!(matches!(out, std::borrow::Cow::Borrowed(_)), "{}", data.as_bstr());
    }
    assert_eq!(expand(b"$Format:%H$", &SUBST, &info).expect("expands").as_ref(), commits[0].as_bytes());
    assert_eq!(expand(b"[$Format:$]", &SUBST, &info).expect("expands").as_ref(), b"[]");
}

#[test]
fn relative_dates_count_to_now_as_gits_do() {
    let (dir, commits) = repo_with_history();
    let repo = Repo::open(dir.path()).expect("open");
    let root = &commits[3];
    let mut info = CommitInfo::from_commit(&repo, root.parse().expect("hex id")).expect("commit info");
    let at = 1_100_000_000; // the root's author date
    let mut seen = std::collections::BTreeSet::new();
    for delta in [
        -1,
        0,
        1,
        89,
        90,
        119,
        5399,
        5400,
        3 * 3600,
        36 * 3600,
        3 * 86_400,
        13 * 86_400 + 43_199,
        14 * 86_400,
        30 * 86_400,
        69 * 86_400,
        70 * 86_400,
        200 * 86_400,
        364 * 86_400,
        365 * 86_400,
        400 * 86_400,
        730 * 86_400,
        1824 * 86_400,
        1825 * 86_400,
        4000 * 86_400,
    ] {
        info.now = at + delta;
        let now = info.now.to_string();
        let git = run(dir.path(), &["log", "-1", "--format=%ar", root], &[("GIT_TEST_DATE_NOW", &now)], b"");
        let ours = expand(b"$Format:%ar$\n", &SUBST, &info).expect("expands");
        assert_eq!(ours.as_bstr(), git.as_bstr(), "{delta} s after the author date");
        seen.insert(git);
    }
    assert!(seen.len() > 15, "the deltas cover git's many wordings");
}

#[test]
fn a_commit_no_tag_reaches_describes_as_nothing_as_in_git_archive() {
    let (dir, tree) = template_repo("trunk", "* export-subst\n");
    let d = dir.path();
    let only = commit(d, &tree, &[], "only\n", "1700000000 +0945", "1700000000 -0930");
    git(d, &["update-ref", "refs/heads/trunk", &only]);
    let repo = Repo::open(d).expect("open");
    let mut info = CommitInfo::from_commit(&repo, only.parse().expect("hex id")).expect("commit info");
    info.now = NOW;
    assert_eq!((described_by_default(&info).as_str(), info.refs.as_slice()), ("", &["HEAD -> trunk".to_owned()][..]));
    assert_eq!(expand(TEMPLATE.as_bytes(), &SUBST, &info).expect("expands").as_bstr(), archived(d, &only).as_bstr());
}

/// Every `%(describe…)` shape, valid or not: git's `parse_describe_args` grammar and what
/// `git describe` then prints.
const DESCRIBES: &[&str] = &[
    "%(describe)",
    "%(describe:)",
    "%(describe:tags)",
    "%(describe:tags=true)",
    "%(describe:tags=No)",
    "%(describe:tags=0x1)",
    "%(describe:tags=2k)",
    "%(describe:tags=)",
    "%(describe:tags=maybe)",
    "%(describe:tags=maybe,match=v2*)",
    "%(describe:match=v2*,tags=maybe)",
    "%(describe:tags,tags=off)",
    "%(describe:abbrev=0)",
    "%(describe:abbrev=4)",
    "%(describe:abbrev=2)",
    "%(describe:abbrev=-3)",
    "%(describe:abbrev= 5)",
    "%(describe:abbrev=+9)",
    "%(describe:abbrev=40)",
    "%(describe:abbrev=99)",
    "%(describe:abbrev=x)",
    "%(describe:abbrev=5x)",
    "%(describe:abbrev=)",
    "%(describe:abbrev)",
    "%(describe:match=v1*)",
    "%(describe:tags=true,match=*[0-9]*)",
    "%(describe:match=v*,match=rel/*,tags)",
    "%(describe:tags,match=rel*)",
    "%(describe:exclude=*rc*)",
    "%(describe:match=v*,exclude=v2*)",
    "%(describe:tags,exclude=v*,exclude=*same)",
    "%(describe:match=nothing*)",
    "%(describe:match=)",
    "%(describe:match)",
    "%(describe:foo)",
    "%(describe:tags,foo)",
    "%(describe:tags",
    "%(describe",
    "%(describex)",
    "%+(describe:abbrev=0)",
    "%-(describe:match=nothing*)",
];

/// A history with tags of every kind: annotated and lightweight, several on one commit (dates
/// apart and equal), one whose object names another tag, names with digits and without, and
/// a side branch merged back.
fn tagged_repo() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    std::fs::write(d.join("f"), "x\n").expect("write");
    git(d, &["add", "."]);
    let tree = git(d, &["write-tree"]);
    let mut at = 1_700_000_000;
    let mut next = |parents: &[&str], message: &str| {
        at += 1000;
        let date = format!("{at} +0000");
        commit(d, &tree, parents, message, &date, &date)
    };
    let c1 = next(&[], "one\n");
    let c2 = next(&[&c1], "two\n");
    let side = next(&[&c2], "side\n");
    let c3 = next(&[&c2], "three\n");
    let merge = next(&[&c3, &side], "merge\n");
    let c5 = next(&[&merge], "five\n");
    let c6 = next(&[&c5], "six\n");
    let c7 = next(&[&c6], "seven\n");
    git(d, &["update-ref", "refs/heads/main", &c7]);
    let tag = |args: &[&str], date: &str| {
        let env = [("GIT_COMMITTER_NAME", "T"), ("GIT_COMMITTER_EMAIL", "t@t"), ("GIT_COMMITTER_DATE", date)];
        run(d, args, &env, b"");
    };
    tag(&["tag", "-a", "-m", "1", "v1.0", &c1], "1700000000 +0000");
    git(d, &["tag", "rel/1.5", &c2]);
    git(d, &["tag", "light", &side]);
    tag(&["tag", "-a", "-m", "rc", "v2.0-rc1", &c3], "1700000100 +0000");
    tag(&["tag", "-a", "-m", "2", "v2.0", &c3], "1700000200 +0000");
    tag(&["tag", "-a", "-m", "b", "b-same", &merge], "1700000300 +0000");
    tag(&["tag", "-a", "-m", "a", "a-same", &merge], "1700000300 +0000");
    git(d, &["tag", "zz-light", &merge]);
    // A tag object named `inner`, its ref `refs/tags/v3.0` ("externally known as").
    tag(&["tag", "-a", "-m", "3", "inner", &c6], "1700000400 +0000");
    let inner = git(d, &["rev-parse", "refs/tags/inner"]);
    git(d, &["update-ref", "refs/tags/v3.0", &inner]);
    git(d, &["update-ref", "-d", "refs/tags/inner"]);
    (dir, vec![c1, c2, side, c3, merge, c5, c6, c7])
}

#[test]
fn every_describe_placeholder_equals_git_logs() {
    let (dir, commits) = tagged_repo();
    let repo = Repo::open(dir.path()).expect("open");
    let mut compared = 0;
    for id in &commits {
        let info = CommitInfo::from_commit(&repo, id.parse().expect("hex id")).expect("commit info");
        for placeholder in DESCRIBES {
            let format = format!("<{placeholder}>");
            let theirs = run(dir.path(), &["log", "-1", &format!("--format={format}"), id], &[], b"");
            let data = format!("$Format:{format}$\n");
            let ours = expand(data.as_bytes(), &SUBST, &info).expect("expands");
            assert_eq!(ours.as_bstr(), theirs.as_bstr(), "{placeholder} of {id}");
            compared += 1;
        }
    }
    assert_eq!(compared, DESCRIBES.len() * 8);
}

#[test]
fn placeholders_git_expands_and_treesync_cannot_are_refused_by_name() {
    let (dir, commits) = repo_with_history();
    let repo = Repo::open(dir.path()).expect("open");
    let info = CommitInfo::from_commit(&repo, commits[0].parse().expect("hex id")).expect("commit info");
    for placeholder in [
        "%w(72)",
        "%w(72,2,4)",
        "%w()",
        "%<(10)",
        "%<|(10)",
        "%>>(5,trunc)",
        "%><(5,mtrunc)",
        "%(trailers)",
        "%(trailers:key=Signed-off-by)",
        "%(decorate:prefix=[)",
        "%C(always,red)",
        "%ah",
        "%ch",
        "%GT",
    ] {
        let data = format!("a $Format:x{placeholder}y$ b\n");
        let e = expand(data.as_bytes(), &SUBST, &info).expect_err(placeholder).to_string();
        assert!(e.contains(&format!("`{placeholder}`")) && e.contains("subst.txt"), "{placeholder}: {e}");
    }
    // What git leaves as it is stays so, and unsigned commits check as `N`.
    for (placeholder, git_writes) in [
        ("%w(x)", "%w(x)"),
        ("%w(72", "%w(72"),
        ("%<(0)", "%<(0)"),
        ("%<(-3)", "%<(-3)"),
        ("%>(5,cut)", "%>(5,cut)"),
        ("%(trailers", "%(trailers"),
        ("%(decorate:nope)", "%(decorate:nope)"),
        ("%G?%GG%GS%GK%GF%GP", "N"),
        ("%Gx", "%Gx"),
    ] {
        let theirs = run(dir.path(), &["log", "-1", &format!("--format={placeholder}"), &commits[0]], &[], b"");
        assert_eq!(theirs.trim_end().as_bstr(), git_writes.as_bytes().as_bstr(), "git on {placeholder}");
        let data = format!("$Format:{placeholder}$");
        let ours = expand(data.as_bytes(), &SUBST, &info).expect(placeholder);
        assert_eq!(ours.as_bstr(), git_writes.as_bytes().as_bstr(), "{placeholder}");
    }
}
