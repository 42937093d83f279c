//! An unlucky operator's mistakes (issue 29, item 7): a selection that matches nothing, counts
//! of 0, a config "file" that is a device or a pipe, a target that does not exist, values a
//! parser cannot take. Each is refused before anything is written, with a message that names
//! the setting, the value and what to write instead.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cli;
use treesync_testkit::BareRepo;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history::file;
use treesync_testkit::history::{self, Model};

/// A repository with `docs/guide.md`, `docs/img/logo.png` and `README.md` on main; its commit.
fn repo() -> (BareRepo, String) {
    let mut m = Model::default();
    m.insert("docs/guide.md", file("guide\n"));
    m.insert("docs/img/logo.png", file("PNG\n"));
    m.insert("README.md", file("readme\n"));
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &[m]);
    (bare, commits[0].clone())
}

/// The names in `dir`, sorted (the state folder left out).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read target")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".treesync")
        .collect();
    v.sort();
    v
}

/// Run `treesync ARGS` with its address space bounded (a runaway read fails instead of
/// filling the machine) and killed after `limit`: the output, or `None` when it ran that long.
fn bounded(args: &[&str], limit: Duration) -> Option<Output> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_treesync"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("treesync runs");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("output"))
}

#[test]
fn an_include_that_selects_nothing_is_refused_before_anything_is_removed() {
    let (bare, commit) = repo();
    let (dir, target) = temp_target("site");
    let base = ["--repo", s(&bare.path), "--ref", "main", "--target", s(&target)];
    cli().ok(&[&["sync"][..], &base].concat());
    let before = names(&target);
    assert_eq!(before, ["README.md", "docs"]);

    // Invalid patterns: usage errors (exit 2) naming the pattern and why.
    for (pattern, why) in [("/", "`/` alone"), ("../", "`..`"), ("[", "not closed")] {
        for command in ["sync", "plan"] {
            let stderr = cli().fails(&[&[command][..], &base, &["--include", pattern]].concat(), 2);
            assert!(stderr.contains(&format!("cannot use --include {pattern:?}: ")), "{stderr}");
            assert!(stderr.contains(why) && stderr.contains("hint:"), "{stderr}");
        }
        assert_eq!(names(&target), before, "--include {pattern:?} removed something");
    }
    // Valid patterns that select no path of the commit: refused, naming them and the commit.
    for patterns in [&["--include", "doc/"][..], &["--include", "*.MD"], &["--include", "docs/", "--exclude", "docs/"]]
    {
        for command in ["sync", "plan"] {
            let o = cli().run(&[&[command][..], &base, patterns].concat());
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{command} {patterns:?} succeeded: {stderr}");
            assert!(stderr.starts_with("treesync: error: refusing to sync: "), "{stderr}");
            assert!(stderr.contains(&format!("selects no path of commit {commit}")), "{stderr}");
            for p in patterns.iter().filter(|p| !p.starts_with("--")) {
                assert!(stderr.contains(&format!("{p:?}")), "{stderr}");
            }
            assert!(stderr.contains("docs/select.md") && stderr.contains("nothing was written"), "{stderr}");
        }
        assert_eq!(names(&target), before, "{patterns:?} removed something");
    }
    // From a mirror of the config file too.
    let config =
        ConfigFile::new().mirror("site", &bare.path, "main", &target).key("include", "/Docs/").write_in(dir.path());
    let o = cli().run(&["sync", "--config", s(&config), "site"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("\"/Docs/\""));
    assert_eq!(names(&target), before);
    // A selection that does select something still syncs it.
    cli().ok(&[&["sync"][..], &base, &["--include", "/docs/"]].concat());
    assert_eq!(names(&target), ["docs"]);
}

#[test]
fn a_selection_that_selects_nothing_exits_4() {
    let (bare, _) = repo();
    let (_dir, target) = temp_target("site");
    let args = ["sync", "--repo", s(&bare.path), "--ref", "main", "--target", s(&target), "--include", "doc/"];
    cli().fails(&args, 4);
    assert!(!target.exists());
}

#[test]
fn counts_of_zero_are_refused_when_parsed() {
    let (bare, _) = repo();
    let (dir, target) = temp_target("site");
    for flag in ["--jobs", "--batch", "--lookup-jobs"] {
        let o = cli().run(&["sync", "--repo", s(&bare.path), "--ref", "main", "--target", s(&target), flag, "0"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} 0: {stderr}");
        assert!(stderr.contains(flag) && stderr.contains("at least 1"), "{stderr}");
        assert!(!target.exists(), "{flag} 0 wrote the target");
    }
    for key in ["jobs", "lookup_jobs"] {
        let config = ConfigFile::new().mirror("site", &bare.path, "main", &target).key(key, 0).write_in(dir.path());
        let stderr = cli().fails(&["sync", "--config", s(&config), "site"], 2);
        assert!(stderr.contains(&format!("{key} in [mirror.site] must be at least 1, not 0")), "{stderr}");
    }
}

#[test]
fn help_states_the_limits_that_are_enforced() {
    let help = cli().ok(&["sync", "--help"]);
    let max_entries = treesync_core::plan::DEFAULT_MAX_ENTRIES;
    assert!(help.contains(&format!("[default: {max_entries}]")), "{help}");
    assert!(!help.contains("20000000"), "{help}");
    assert_eq!(treesync_core::plan::DEFAULT_MAX_BYTES, 1 << 40);
    assert!(help.contains("[default: 1TiB]"), "{help}");
}

#[test]
fn a_config_file_that_is_a_device_a_pipe_or_too_large_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    for (path, needle) in [("/dev/zero", "not a regular file"), (s(&fifo), "not a regular file")] {
        let o = bounded(&["--config", path, "sync", "site"], Duration::from_secs(20))
            .unwrap_or_else(|| panic!("--config {path} ran for 20 s"));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--config {path}: {stderr}");
        assert!(stderr.contains(path) && stderr.contains(needle), "{stderr}");
    }
    let large = dir.path().join("large.toml");
    std::fs::write(&large, format!("# {}\n", "x".repeat(2 << 20))).expect("write");
    let o = bounded(&["--config", s(&large), "sync", "site"], Duration::from_secs(20)).expect("ends");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("larger than 1 MiB"), "{stderr}");
}

#[test]
fn status_of_a_target_that_does_not_exist_says_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nothing-here");
    let out = cli().ok(&["status", "--target", s(&missing)]);
    let first = out.lines().next().expect("a line");
    assert!(first.contains("(missing") && !first.contains("(empty)"), "{out}");
    assert!(!missing.exists(), "status created the target");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let out = cli().ok(&["status", "--target", s(&empty)]);
    assert!(out.lines().next().expect("a line").ends_with("(empty)"), "{out}");
}

#[test]
fn messages_name_the_setting_the_value_and_the_accepted_form() {
    let (bare, _) = repo();
    let (dir, target) = temp_target("site");
    let config = dir.path().join("treesync.toml");
    let write = |extra: &str| {
        ConfigFile::new().defaults().line(extra).mirror("site", &bare.path, "main", &target).write(&config);
    };
    for (extra, needle) in [
        ("jobs = 18446744073709551616", "jobs in [defaults] must be a number from 1 to"),
        ("max_entries = -18446744073709551616", "max_entries in [defaults] must be at least 1"),
        ("max_bytes = 18446744073709551616", "max_bytes in [defaults] is too large"),
    ] {
        write(extra);
        let stderr = cli().fails(&["plan", "--config", s(&config), "site"], 2);
        assert!(stderr.contains(needle), "{extra}: {stderr}");
        assert!(!stderr.contains("i128") && !stderr.contains("any value"), "{stderr}");
    }
    // A bare port is this host's; `:PORT` is ambiguous and says what to write.
    write("metrics_addr = \"9273\"");
    cli().ok(&["plan", "--config", s(&config), "site"]);
    write("metrics_addr = \":9273\"");
    let stderr = cli().fails(&["plan", "--config", s(&config), "site"], 2);
    assert!(stderr.contains("metrics_addr in [defaults]") && stderr.contains("\":9273\""), "{stderr}");
    assert!(stderr.contains("127.0.0.1:9273") && stderr.contains("0.0.0.0:9273"), "{stderr}");
    let o = cli().run(&[
        "watch",
        "--repo",
        s(&bare.path),
        "--ref",
        "main",
        "--target",
        s(&target),
        "--metrics-addr",
        ":9273",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-addr") && stderr.contains("127.0.0.1:9273"), "{stderr}");
    assert!(!stderr.contains("has no port"), "{stderr}");
    assert!(!target.exists());
}
