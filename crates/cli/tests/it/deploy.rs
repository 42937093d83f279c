//! docs/deploy.md, run: the post-receive hook it shows (packaging/post-receive, shipped in the
//! package's examples) installed into a real bare repository syncs the mirrors of a pushed
//! branch on a real `git push`, and a push whose target is locked by another treesync waits for
//! it instead of failing. The unit and the hook the docs show are the shipped files, whole.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history;
use treesync_testkit::matches;
use treesync_testkit::missing::require_program;
use treesync_testkit::{BareRepo, git};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The fenced code blocks of a markdown text.
fn code_blocks(md: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        match (&mut current, line.starts_with("```")) {
            (None, true) => current = Some(String::new()),
            (Some(_), true) => blocks.push(current.take().expect("open block")),
            (Some(text), false) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, false) => {}
        }
    }
    blocks
}

#[test]
fn deploy_md_shows_the_shipped_unit_and_hook_whole() {
    let blocks = code_blocks(&read("docs/deploy.md"));
    for file in ["packaging/treesync-watch@.service", "packaging/post-receive", "packaging/treesync.toml"] {
        let text = read(file);
        assert!(blocks.contains(&text), "docs/deploy.md does not show {file} whole (copy it into a code block)");
    }
}

fn push(work: &Path, path_env: &str, refs: &[&str]) -> std::process::Child {
    Command::new("git")
        .current_dir(work)
        .env("PATH", path_env)
        .args(["push", "-q", "origin"])
        .args(refs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git push runs")
}

fn finished(child: std::process::Child) -> String {
    let out = child.wait_with_output().expect("git push ends");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "git push: {stderr}");
    stderr
}

/// Whether a `treesync sync MIRROR --config CONFIG` process runs now (read from /proc).
fn sync_running(mirror: &str, config: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.filter_map(|p| std::fs::read(p.ok()?.path().join("cmdline")).ok()).any(|cmdline| {
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.len() > 3
            && (args[0] == b"treesync" || args[0].ends_with(b"/treesync"))
            && args[1] == b"sync"
            && args[2] == mirror.as_bytes()
            && args.contains(&config.as_os_str().as_encoded_bytes())
    })
}

#[test]
fn the_post_receive_hook_syncs_pushed_branches_and_queues_behind_a_locked_target() {
    let flock = require_program("flock", "util-linux");
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &history::random_history(23, 3));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[0]]);
    let dir = tempfile::tempdir().expect("tempdir");
    let (site, staging) = (dir.path().join("site"), dir.path().join("staging"));
    let config = ConfigFile::new()
        .mirror("site", &bare.path, "main", &site)
        .mirror("site-staging", &bare.path, "staging", &staging)
        .write_in(dir.path());

    // The shipped hook, with this test's config; `treesync` on PATH is the binary under test.
    let hook = read("packaging/post-receive");
    assert!(hook.contains("config=/etc/treesync/treesync.toml\n"), "{hook}");
    let hook = hook.replace("config=/etc/treesync/treesync.toml\n", &format!("config={}\n", config.display()));
    let hook_path = bare.path.join("hooks/post-receive");
    std::fs::write(&hook_path, hook).expect("install the hook");
    assert!(Command::new("chmod").arg("+x").arg(&hook_path).status().expect("chmod").success());
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_treesync"), bin.join("treesync")).expect("symlink");
    let path_env = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());

    // A clone that pushes two branches at once: the hook syncs each one's mirror.
    let work = dir.path().join("work");
    git(dir.path(), &["clone", "-q", bare.path.to_str().expect("utf8"), work.to_str().expect("utf8")]);
    git(&work, &["branch", "staging", &commits[2]]);
    git(&work, &["reset", "-q", "--hard", &commits[1]]);
    let stderr = finished(push(&work, &path_env, &["main", "staging"]));
    assert!(matches(&bare, &commits[1], &site), "the hook synced main into site: {stderr}");
    assert!(matches(&bare, &commits[2], &staging), "the hook synced staging into site-staging: {stderr}");
    assert!(!stderr.contains("failed"), "{stderr}");

    // Another treesync holds site's lock (a watch's repair, a manual sync): the push waits for
    // it, then syncs the newest commit.
    let lock = site.join(".treesync/lock");
    assert!(lock.is_file(), "treesync's lock file is {}", lock.display());
    let mut holder = Command::new(&flock)
        .arg("--close")
        .arg(&lock)
        .args(["-c", "echo locked; read _"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("flock runs");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("piped")).read_line(&mut line).expect("flock says");
    assert_eq!(line, "locked\n");
    git(&work, &["reset", "-q", "--hard", &commits[2]]);
    let pushing = push(&work, &path_env, &["main"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sync_running("site", &config) {
        assert!(Instant::now() < deadline, "the hook's treesync sync never waited for the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(matches(&bare, &commits[1], &site), "nothing is written while another holds the lock");
    holder.stdin.take().expect("piped").write_all(b"\n").expect("release the lock");
    assert!(holder.wait().expect("flock ends").success());
    let stderr = finished(pushing);
    assert!(!stderr.contains("failed"), "{stderr}");
    assert!(matches(&bare, &commits[2], &site), "the queued push synced main: {stderr}");

    // A deleted branch syncs nothing (its mirror's ref is gone).
    let stderr = finished(push(&work, &path_env, &[":staging"]));
    assert!(!stderr.contains("failed"), "{stderr}");
    assert!(matches(&bare, &commits[2], &staging));
}
