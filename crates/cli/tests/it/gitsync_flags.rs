//! `treesync git-sync`'s credential and git flags against real servers — smart HTTP through
//! `git http-backend` behind Basic authentication, `git daemon` — and the rest of its flags
//! (refs, depth, submodules, sparse checkout, stale worktrees, group-write, the environment hooks
//! get), each observed from outside the process.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use treesync_testkit::cli::s;
use treesync_testkit::git;
use treesync_testkit::gitdaemon::Served;
use treesync_testkit::smarthttp::SmartHttp;

use crate::gitsync::{assert_like_git, exits, git_sync, lines_with, link_of};

/// `treesync git-sync` with its own HOME (git's credential cache keeps its socket there) and a
/// credential cache that ends itself soon after the test.
fn isolated(home: &Path) -> Command {
    let mut c = git_sync();
    c.env("HOME", home).env_remove("XDG_CACHE_HOME").env_remove("XDG_CONFIG_HOME");
    c
}

fn status(c: &mut Command, args: &[&str]) -> (i32, String) {
    let o = c.args(args).output().expect("runs");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

const CACHE: &str = "credential.helper:cache --timeout 5";

#[test]
fn credentials_reach_a_smart_http_server_through_git() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let head = git(&served.bare, &["rev-parse", "main"]);
    let dir = served.dir.path();
    let http = SmartHttp::start(dir, "me", "s3cret");
    let url = http.url("site.git");
    let home = dir.join("home");
    std::fs::create_dir(&home).expect("home");
    // No credentials: git is never prompted, the sync fails with git's answer.
    let (code, err) = status(
        &mut isolated(&home),
        &["--repo", &url, "--root", s(&dir.join("r0")), "--one-time", "--git-config", CACHE],
    );
    assert_eq!(code, 1, "{err}");
    assert!(http.refused() > 0 && http.served() == 0);
    // --username with --password-file (read before every sync).
    let file = dir.join("password");
    std::fs::write(&file, "s3cret").expect("password");
    let r1 = dir.join("r1");
    let args = [
        "--repo",
        &url,
        "--root",
        s(&r1),
        "--one-time",
        "--username",
        "me",
        "--password-file",
        s(&file),
        "--git-config",
        CACHE,
    ];
    let (code, err) = status(&mut isolated(&home), &args);
    assert_eq!(code, 0, "{err}");
    assert_like_git(&served.bare, &head, &r1.join("site.git"));
    // A wrong password fails (a new process, the file read again).
    std::fs::write(&file, "wrong").expect("password");
    let fresh_home = dir.join("home2");
    std::fs::create_dir(&fresh_home).expect("home");
    let r2 = dir.join("r2");
    let args2 = [
        "--repo",
        &url,
        "--root",
        s(&r2),
        "--one-time",
        "--username",
        "me",
        "--password-file",
        s(&file),
        "--git-config",
        CACHE,
    ];
    assert_eq!(status(&mut isolated(&fresh_home), &args2).0, 1);
    // $GITSYNC_PASSWORD.
    let r3 = dir.join("r3");
    let mut c = isolated(&fresh_home);
    c.env("GITSYNC_PASSWORD", "s3cret");
    let (code, err) =
        status(&mut c, &["--repo", &url, "--root", s(&r3), "--one-time", "--username", "me", "--git-config", CACHE]);
    assert_eq!(code, 0, "{err}");
    // user:pass@ in the URL (moved out of it: the remote and the log never show it).
    let r4 = dir.join("r4");
    let embedded = url.replace("http://", "http://me:s3cret@");
    let (code, err) = status(
        &mut isolated(&fresh_home),
        &["--repo", &embedded, "--root", s(&r4), "--one-time", "--git-config", CACHE],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("s3cret"), "the password is in the log: {err}");
    assert_eq!(git(&r4, &["remote", "get-url", "origin"]), url);
    // --credential JSON with a password-file.
    std::fs::write(&file, "s3cret").expect("password");
    let r5 = dir.join("r5");
    let cred = format!(r#"{{"url":"{url}","username":"me","password-file":"{}"}}"#, file.display());
    let (code, err) = status(
        &mut isolated(&fresh_home),
        &["--repo", &url, "--root", s(&r5), "--one-time", "--credential", &cred, "--git-config", CACHE],
    );
    assert_eq!(code, 0, "{err}");
}

/// An HTTP responder answering every request with `body` (status 200); counts requests.
fn responder(body: &'static str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/creds", listener.local_addr().expect("addr"));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf);
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ =
                write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    (url, count)
}

#[test]
fn askpass_url_is_asked_before_each_sync() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let http = SmartHttp::start(dir, "me", "s3cret");
    let home = dir.join("home");
    std::fs::create_dir(&home).expect("home");
    let (askpass, asked) = responder("username=me\npassword=s3cret\n");
    let root = dir.join("r");
    let (code, err) = status(
        &mut isolated(&home),
        &[
            "--repo",
            &http.url("site.git"),
            "--root",
            s(&root),
            "--one-time",
            "--askpass-url",
            &askpass,
            "--git-config",
            CACHE,
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(root.join("site.git").exists());
}

#[test]
fn hooks_get_git_syncs_environment_and_git_config_applies() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let out = dir.join("env.out");
    let script = dir.join("env.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"SSH=$GIT_SSH_COMMAND\"; echo \"NOSYSTEM=$GIT_CONFIG_NOSYSTEM\"; echo \"X=$(git config --global --get x.y)\"; echo \"HASH=$GITSYNC_HASH\"; }} > {}\n",
            out.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let root = dir.join("r");
    exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&root),
            "--one-time",
            "--exechook-command",
            s(&script),
            "--ssh-key-file",
            "/k1",
            "--ssh-key-file",
            "/k2",
            "--ssh-known-hosts=false",
            "--git-config",
            "x.y:\"a,b\"",
            "--group-write",
        ],
        0,
    );
    let env = std::fs::read_to_string(&out).expect("the hook ran");
    assert!(env.contains("SSH=ssh -i /k1 -i /k2 -o StrictHostKeyChecking=no"), "{env}");
    assert!(env.contains("NOSYSTEM=true"), "{env}");
    assert!(env.contains("X=a,b"), "{env}");
    assert!(env.contains(&format!("HASH={}", git(&served.bare, &["rev-parse", "main"]))), "{env}");
    // --group-write: umask 0002.
    let mode = std::fs::metadata(root.join("site.git/a.txt")).expect("file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o664);
}

#[test]
fn refs_tags_hashes_and_full_history() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let first = git(&served.bare, &["rev-parse", "main"]);
    git(&served.work(), &["-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "-m", "v1", "v1"]);
    served.push(&["--tags"]);
    let second = served.commit(&[("b.txt", "b\n")]);
    served.push(&["main"]);
    let dir = served.dir.path();
    // A tag (annotated: peeled to its commit).
    exits(&["--repo", &served.url, "--ref", "v1", "--root", s(&dir.join("t")), "--one-time"], 0);
    assert_like_git(&served.bare, &first, &dir.join("t/site.git"));
    // A branch with its whole history.
    exits(&["--repo", &served.url, "--ref", "main", "--depth", "0", "--root", s(&dir.join("b")), "--one-time"], 0);
    assert_eq!(git(&dir.join("b/site.git"), &["rev-list", "--count", "HEAD"]), "2");
    // A full hash: synced once, then idle until SIGINT, which ends it with 0.
    let root = dir.join("h");
    let mut child = git_sync()
        .args(["--repo", &served.url, "--ref", &second, "--root", s(&root), "--period", "10ms"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    treesync_testkit::cli::wait_for("the hash synced", || root.join("site.git").exists());
    assert_like_git(&served.bare, &second, &root.join("site.git"));
    #[allow(unsafe_code)]
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    assert_eq!(child.wait().expect("exits").code(), Some(0));
}

#[test]
fn stale_worktrees_are_kept_until_their_timeout() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let root = served.dir.path().join("r");
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time", "--stale-worktree-timeout", "1h", "-v", "1"];
    exits(&args, 0);
    for i in 0..3 {
        served.commit(&[("a.txt", &format!("{i}\n"))]);
        served.push(&["main"]);
        let err = exits(&args, 0);
        // Nothing is past the timeout: each commit starts as a copy of the current worktree.
        assert_eq!(lines_with(&err, "worktree ready")[0]["how"], "clone", "{err}");
    }
    assert_eq!(std::fs::read_dir(root.join(".worktrees")).expect("dir").count(), 4);
    // A stray entry in .worktrees is removed once it is past the timeout (here: 0).
    std::fs::write(root.join(".worktrees/stray"), "x").expect("stray");
    exits(&["--repo", &served.url, "--root", s(&root), "--one-time"], 0);
    assert!(!root.join(".worktrees/stray").exists());
    let left = std::fs::read_dir(root.join(".worktrees")).expect("dir").count();
    assert_eq!(left, 2, "the current worktree and one to reuse");
    // git's records of the removed worktrees were pruned.
    let listed = git(&root, &["worktree", "list", "--porcelain"]).matches("worktree ").count();
    assert_eq!(listed, 1 + 2, "the root and the two worktrees");
}

#[test]
fn submodules_and_sparse_checkouts_are_made_by_git() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    // A second served repository, used as a submodule of the first.
    let sub_bare = dir.join("sub.git");
    std::fs::create_dir(&sub_bare).expect("mkdir");
    git(&sub_bare, &["init", "-q", "--bare", "-b", "main"]);
    let sub_work = dir.join("subwork");
    std::fs::create_dir(&sub_work).expect("mkdir");
    git(&sub_work, &["init", "-q", "-b", "main"]);
    std::fs::write(sub_work.join("inner.txt"), "inner\n").expect("write");
    git(&sub_work, &["add", "."]);
    git(&sub_work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "sub"]);
    git(&sub_work, &["push", "-q", &served.daemon.url("sub.git"), "main"]);
    git(
        &served.work(),
        &["-c", "protocol.file.allow=always", "submodule", "add", "-q", &served.daemon.url("sub.git"), "vendor/sub"],
    );
    git(&served.work(), &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "with sub"]);
    served.push(&["main"]);
    let root = dir.join("r");
    let err = exits(&["--repo", &served.url, "--root", s(&root), "--one-time", "-v", "1"], 0);
    assert_eq!(lines_with(&err, "worktree ready")[0]["how"], "git", "{err}");
    let link = root.join("site.git");
    assert_eq!(std::fs::read_to_string(link.join("vendor/sub/inner.txt")).expect("the submodule"), "inner\n");
    assert_eq!(git(&link, &["status", "--porcelain"]), "");
    // --submodules off: the gitlink stays an empty directory, and the diff is used.
    let root2 = dir.join("r2");
    let err = exits(&["--repo", &served.url, "--root", s(&root2), "--one-time", "--submodules", "off", "-v", "1"], 0);
    assert_eq!(lines_with(&err, "worktree ready")[0]["how"], "full", "{err}");
    assert_like_git(&served.bare, &git(&served.bare, &["rev-parse", "main"]), &root2.join("site.git"));
    // A sparse-checkout file: git's way, with only what it selects.
    let sparse = dir.join("sparse");
    std::fs::write(&sparse, "/a.txt\n").expect("sparse");
    let root3 = dir.join("r3");
    exits(
        &[
            "--repo",
            &served.url,
            "--root",
            s(&root3),
            "--one-time",
            "--submodules",
            "off",
            "--sparse-checkout-file",
            s(&sparse),
        ],
        0,
    );
    assert!(root3.join("site.git/a.txt").exists());
    assert!(!root3.join("site.git/.gitmodules").exists());
}

#[test]
fn a_root_git_sync_wrote_is_taken_over_and_then_diffed() {
    // The layout as git-sync leaves it: made with the git commands it runs.
    let served = Served::new(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
    let head = git(&served.bare, &["rev-parse", "main"]);
    let root = served.dir.path().join("r");
    std::fs::create_dir(&root).expect("mkdir");
    git(&root, &["init", "-q", "-b", "git-sync"]);
    git(&root, &["fetch", "-q", &served.url, "HEAD", "--depth", "1"]);
    git(&root, &["reset", "-q", "--soft", &head, "--"]);
    let wt = root.join(".worktrees").join(&head);
    git(&root, &["worktree", "add", "-q", "--force", "--detach", s(&wt), &head, "--no-checkout"]);
    std::fs::write(wt.join(".git"), format!("gitdir: ../../.git/worktrees/{head}\n")).expect(".git");
    git(&wt, &["reset", "-q", "--hard", &head, "--"]);
    std::os::unix::fs::symlink(format!(".worktrees/{head}"), root.join("site.git")).expect("link");
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time", "-v", "1"];
    let err = exits(&args, 0);
    assert_eq!(lines_with(&err, "worktree ready")[0]["how"], "check", "{err}");
    assert_like_git(&served.bare, &head, &root.join("site.git"));
    let next = served.commit(&[("c.txt", "c\n")]);
    served.push(&["main"]);
    let err = exits(&args, 0);
    assert_eq!(lines_with(&err, "worktree ready")[0]["how"], "clone", "{err}");
    assert_eq!(link_of(&root.join("site.git")).0, next);
    assert_like_git(&served.bare, &next, &root.join("site.git"));
}

/// The log's `starting up` line shows the command line with every password hidden, as
/// git-sync's `logSafeFlags` does — a `--credential`'s too, in both spellings.
#[test]
fn the_log_never_shows_a_credentials_password() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let home = dir.join("home");
    std::fs::create_dir(&home).expect("home");
    let object = r#"{"url":"https://elsewhere.example/x.git","username":"me","password":"pw-in-object"}"#;
    let list = r#"[{"url":"https://other.example/y.git","username":"me","password":"pw-in-list"}]"#;
    let (code, err) = status(
        &mut isolated(&home),
        &[
            "--repo",
            &served.url,
            "--root",
            s(&dir.join("r")),
            "--one-time",
            "--credential",
            object,
            &format!("--credential={list}"),
            "--git-config",
            CACHE,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let started = lines_with(&err, "starting up");
    assert_eq!(started.len(), 1, "{err}");
    assert!(started[0]["args"].as_str().expect("args").contains("--credential"), "{err}");
    for secret in ["pw-in-object", "pw-in-list"] {
        assert!(!err.contains(secret), "the password {secret} is in the log: {err}");
    }
}

/// treesync reads the repository's settings (line ends, filter drivers) as the git it runs
/// reads them: git-sync's private global config with `--git-config`, and neither the user's
/// `~/.gitconfig` nor the system's config, which that git never sees.
#[test]
fn files_are_converted_by_the_config_gits_checkout_reads() {
    let served = Served::new(&[("t.txt", "a\nb\n")]);
    let dir = served.dir.path();
    // --git-config core.autocrlf:true: git checks text files out with CRLF.
    let home = dir.join("home");
    std::fs::create_dir(&home).expect("home");
    let r1 = dir.join("r1");
    let (code, err) = status(
        &mut isolated(&home),
        &["--repo", &served.url, "--root", s(&r1), "--one-time", "--git-config", "core.autocrlf:true"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(r1.join("site.git/t.txt")).expect("t.txt"), b"a\r\nb\r\n");
    // core.autocrlf=true in ~/.gitconfig and core.eol=crlf in the system's: git-sync's git reads
    // neither (GIT_CONFIG_GLOBAL is its own file, GIT_CONFIG_NOSYSTEM), so LF.
    std::fs::write(home.join(".gitconfig"), "[core]\n\tautocrlf = true\n").expect("gitconfig");
    let system = dir.join("system.gitconfig");
    std::fs::write(&system, "[core]\n\teol = crlf\n").expect("system config");
    let r2 = dir.join("r2");
    let mut c = isolated(&home);
    c.env("GIT_CONFIG_SYSTEM", &system).env_remove("GIT_CONFIG_NOSYSTEM");
    let (code, err) = status(&mut c, &["--repo", &served.url, "--root", s(&r2), "--one-time"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(r2.join("site.git/t.txt")).expect("t.txt"), b"a\nb\n");
    assert_like_git(&served.bare, &git(&served.bare, &["rev-parse", "main"]), &r2.join("site.git"));
}

/// A file stored with Git LFS is checked out as git-sync's git checks it out: its private
/// config has no `lfs` filter and its fetch brings no LFS object, so the pointer file — not a
/// sync that fails for want of the object.
#[test]
fn a_git_lfs_file_is_the_pointer_git_sync_checks_out() {
    let pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n";
    let served =
        Served::new(&[(".gitattributes", "*.bin filter=lfs diff=lfs merge=lfs -text\n"), ("big.bin", pointer)]);
    let dir = served.dir.path();
    let home = dir.join("home");
    std::fs::create_dir(&home).expect("home");
    let root = dir.join("r");
    let (code, err) = status(&mut isolated(&home), &["--repo", &served.url, "--root", s(&root), "--one-time"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(root.join("site.git/big.bin")).expect("big.bin"), pointer);
    assert_like_git(&served.bare, &git(&served.bare, &["rev-parse", "main"]), &root.join("site.git"));
}

/// `--git-gc` (default `always`) runs, as in git-sync, once a worktree of an older commit is
/// gone — here reused for the new commit, as every sync from the third on reuses one with the
/// default `--stale-worktree-timeout 0` — so the repository does not keep every fetch's objects
/// for ever.
#[test]
fn git_gc_runs_when_a_worktree_is_reused() {
    let served = Served::new(&[("a.txt", "a\n")]);
    let dir = served.dir.path();
    let root = dir.join("r");
    // --git: a wrapper recording each command line, then the real git.
    let log = dir.join("git.log");
    let wrapper = dir.join("mygit");
    std::fs::write(&wrapper, format!("#!/bin/sh\necho \"$*\" >> {}\nexec git \"$@\"\n", log.display()))
        .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time", "-v", "1", "--git", s(&wrapper)];
    exits(&args, 0);
    for round in 0..3 {
        served.commit(&[("a.txt", &format!("{round}\n"))]);
        served.push(&["main"]);
        std::fs::write(&log, "").expect("clear");
        let err = exits(&args, 0);
        let how = lines_with(&err, "worktree ready")[0]["how"].as_str().expect("how").to_string();
        assert_eq!(how, if round == 0 { "clone" } else { "reuse" }, "{err}");
        let ran = std::fs::read_to_string(&log).expect("log");
        if round > 0 {
            // A reuse removes no worktree: the cleanup runs with `git gc --auto`, which collects
            // once loose objects or packs pile up (a full gc per sync is what reuse saves).
            for step in ["worktree prune --verbose", "reflog expire --expire-unreachable=all --all", "gc --auto"] {
                assert!(ran.lines().any(|l| l == step), "round {round}: no `git {step}`: {ran}");
            }
        }
    }
    // A removal (a stray entry past the timeout) runs --git-gc as git-sync does: a full gc.
    std::fs::write(root.join(".worktrees/stray"), "x").expect("stray");
    served.commit(&[("a.txt", "last\n")]);
    served.push(&["main"]);
    std::fs::write(&log, "").expect("clear");
    exits(&args, 0);
    let ran = std::fs::read_to_string(&log).expect("log");
    assert!(ran.lines().any(|l| l == "gc"), "{ran}");
    let counts = git(&root, &["count-objects", "-v"]);
    assert!(counts.lines().any(|l| l == "count: 0"), "a full gc leaves no loose object: {counts}");
    assert_like_git(&served.bare, &git(&served.bare, &["rev-parse", "main"]), &root.join("site.git"));
}

/// A kill (SIGKILL, or `--sync-timeout`) inside `git worktree add` leaves the new worktree's
/// record locked (`.git/worktrees/HASH/locked`, "initializing"), which `git worktree prune`
/// keeps and `git worktree add --force` refuses: the next run made git's way removes that
/// record with the worktree, instead of failing on it on every try.
#[test]
fn a_worktree_record_left_locked_by_a_killed_git_worktree_add_is_made_again() {
    let served = Served::new(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let dir = served.dir.path();
    let sparse = dir.join("sparse");
    std::fs::write(&sparse, "/a.txt\n").expect("sparse");
    let root = dir.join("r");
    let link = root.join("site.git");
    let args = ["--repo", &served.url, "--root", s(&root), "--one-time", "--sparse-checkout-file", s(&sparse)];
    exits(&args, 0);
    let (first, _) = link_of(&link);
    let second = served.commit(&[("a.txt", "changed\n")]);
    served.push(&["main"]);
    exits(&args, 0);
    // What the kill leaves: LINK on the first commit, the second's record locked, its
    // worktree cut short.
    std::os::unix::fs::symlink(Path::new(".worktrees").join(&first), root.join("l.new")).expect("link");
    std::fs::rename(root.join("l.new"), &link).expect("LINK back");
    std::fs::write(root.join(".git/worktrees").join(&second).join("locked"), "initializing").expect("locked");
    std::fs::remove_dir_all(root.join(".worktrees").join(&second)).expect("rm");
    exits(&args, 0);
    assert_eq!(link_of(&link).0, second);
    assert_eq!(std::fs::read_to_string(link.join("a.txt")).expect("a.txt"), "changed\n");
    assert!(!link.join("b.txt").exists());
    assert_eq!(git(&link, &["rev-parse", "HEAD"]), second);
}
