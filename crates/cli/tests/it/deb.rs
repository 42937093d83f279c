//! The Debian package, installed for real: `cargo xtask deb` packages this test's binary,
//! `dpkg -i` installs it, the installed unit's `ExecStart=` (with `%i` = the mirror) runs a
//! mirror of /etc/treesync/treesync.toml the way systemd would start it (this machine need not
//! run systemd), follows a commit, stops on SIGTERM, and `dpkg --purge` removes every file the
//! package installed. A guard purges the package and removes the config even when the test
//! fails, so the machine is left as it was.
//!
//! Needs root, dpkg and systemd-analyze; fails naming what provides them. It installs
//! /usr/bin/treesync; no other test runs `treesync` from `PATH` (they run the cargo-built one).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::history;
use treesync_testkit::matches;
use treesync_testkit::missing::{Missing, require_program};
use treesync_testkit::{BareRepo, git};

const CONFIG: &str = "/etc/treesync/treesync.toml";
const UNIT: &str = "/lib/systemd/system/treesync-watch@.service";

/// Wait for `f`; on a timeout, fail with what the watch said.
fn wait_for(what: &str, guard: &mut Guard, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        if Instant::now() > deadline {
            let said = guard.watch.take().map(|mut child| {
                let _ = child.kill();
                let out = child.wait_with_output().expect("the watch ends");
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
            });
            panic!("timed out waiting for {what}; the watch said:\n{}", said.unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(program: &str, args: &[&str]) -> String {
    let o = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        o.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// dpkg with its lock: another dpkg or apt on this machine makes it fail at once ("dpkg frontend
/// lock was locked by another process"); wait for that one, up to five minutes.
fn dpkg(args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let o = Command::new("dpkg").args(args).output().expect("dpkg runs");
        let stderr = String::from_utf8_lossy(&o.stderr);
        if o.status.success() {
            return String::from_utf8_lossy(&o.stdout).into_owned();
        }
        if !stderr.contains("lock") || Instant::now() > deadline {
            panic!("dpkg {args:?}: {}{stderr}", String::from_utf8_lossy(&o.stdout));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The package's dpkg status (`install ok installed`, `deinstall ok config-files`), if dpkg
/// knows it.
fn status() -> Option<String> {
    let o = Command::new("dpkg-query").args(["-W", "-f=${Status}", "treesync"]).output().expect("dpkg-query runs");
    let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !s.is_empty() && !s.contains("not-installed")).then_some(s)
}

/// Leaves the machine as it was: stops the watch, purges the package, removes the config.
struct Guard {
    watch: Option<Child>,
    made_etc_dir: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut child) = self.watch.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if status().is_some() {
            let _ = Command::new("dpkg").args(["--purge", "treesync"]).status();
        }
        let _ = std::fs::remove_file(CONFIG);
        if self.made_etc_dir {
            let _ = std::fs::remove_dir(Path::new(CONFIG).parent().expect("/etc/treesync"));
        }
    }
}

/// The `ExecStart=` command of a unit file, continuation lines joined, with `%i` replaced by
/// `instance` (and `%%` by `%`), as systemd runs it: one word per whitespace-separated token.
fn exec_start(unit: &str, instance: &str) -> Vec<String> {
    let joined = unit.replace("\\\n", " ");
    let lines: Vec<&str> = joined.lines().filter_map(|l| l.trim().strip_prefix("ExecStart=")).collect();
    assert_eq!(lines.len(), 1, "one ExecStart= line in the unit:\n{unit}");
    assert!(!lines[0].contains(['"', '\'', '$']), "no quoting or variables to interpret: {}", lines[0]);
    lines[0].split_whitespace().map(|w| w.replace("%i", instance).replace("%%", "%")).collect()
}

#[test]
fn exec_start_is_read_like_systemd_reads_it() {
    let unit =
        "[Service]\nType=notify\nExecStart=/usr/bin/treesync watch \\\n  --config /etc/t.toml %i\nRestart=on-failure\n";
    assert_eq!(exec_start(unit, "site"), ["/usr/bin/treesync", "watch", "--config", "/etc/t.toml", "site"]);
}

#[test]
fn the_deb_installs_runs_a_mirror_from_its_unit_and_purges_cleanly() {
    if !Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n")) {
        Missing::new("root", "run this test as root: it installs the package with dpkg -i").fail();
    }
    for (program, package) in
        [("dpkg", "dpkg"), ("dpkg-deb", "dpkg"), ("dpkg-query", "dpkg"), ("systemd-analyze", "systemd")]
    {
        require_program(program, package);
    }
    if let Some(s) = status() {
        panic!(
            "the package treesync is on this machine already ({s}); this test installs and purges its own: remove it first with `dpkg --purge treesync`"
        );
    }
    assert!(!Path::new(CONFIG).exists(), "{CONFIG} exists; this test writes its own there: move it away first");

    // Package this test's binary: no release build.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = dir.path().join("deb");
    let o = Command::new(cargo)
        .current_dir(&root)
        .args(["xtask", "deb", "--compress", "gzip", "--binary", env!("CARGO_BIN_EXE_treesync"), "--out"])
        .arg(&out)
        .output()
        .expect("cargo xtask deb runs");
    assert!(
        o.status.success(),
        "cargo xtask deb: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let debs: Vec<PathBuf> = std::fs::read_dir(&out)
        .expect("the out dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "one package in {}: {debs:?}", out.display());

    let mut guard = Guard { watch: None, made_etc_dir: !Path::new(CONFIG).parent().expect("dir").exists() };
    dpkg(&["-i", debs[0].to_str().expect("utf8")]);
    assert_eq!(status().as_deref(), Some("install ok installed"));
    let listed = dpkg(&["-L", "treesync"]);
    let files: Vec<&str> = listed.lines().filter(|p| Path::new(p).is_file()).collect();
    for want in [
        "/usr/bin/treesync",
        "/usr/share/man/man1/treesync.1.gz",
        "/usr/share/man/man1/treesync-watch.1.gz",
        "/usr/share/bash-completion/completions/treesync",
        "/usr/share/zsh/vendor-completions/_treesync",
        "/usr/share/fish/vendor_completions.d/treesync.fish",
        UNIT,
        "/usr/share/doc/treesync/copyright",
        "/usr/share/doc/treesync/examples/treesync.toml",
    ] {
        assert!(files.contains(&want), "dpkg -L treesync lacks {want}:\n{listed}");
    }
    let version = run("/usr/bin/treesync", &["--version"]);
    assert_eq!(version.trim(), format!("treesync {}", env!("CARGO_PKG_VERSION")));
    // man finds the installed page; the unit passes systemd's own check (the binary and the
    // man page it names exist now).
    let page = Command::new("man").env("MANWIDTH", "100").args(["-P", "cat", "treesync-watch"]).output();
    if let Ok(page) = page {
        assert!(String::from_utf8_lossy(&page.stdout).contains("--interval"), "man treesync-watch");
    }
    run("systemd-analyze", &["verify", "treesync-watch@site.service"]);

    // A mirror in the config the unit names: a bare repository into a directory.
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "staging", &history::random_history(17, 2));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[0]]);
    let target = dir.path().join("site");
    std::fs::create_dir_all(Path::new(CONFIG).parent().expect("dir")).expect("mkdir /etc/treesync");
    let config = ConfigFile::new().defaults().key("interval", "100ms").mirror("site", &bare.path, "main", &target);
    config.write(Path::new(CONFIG));

    // Start it as systemd would: the unit's command, from /, with systemd's bare environment.
    let unit = std::fs::read_to_string(UNIT).expect("the installed unit");
    let argv = exec_start(&unit, "site");
    assert_eq!(argv[0], "/usr/bin/treesync", "the unit runs the installed binary");
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the unit's ExecStart runs");
    let pid = child.id().to_string();
    guard.watch = Some(child);
    wait_for("the first commit", &mut guard, || matches(&bare, &commits[0], &target));
    git(&bare.path, &["update-ref", "refs/heads/main", &commits[1]]);
    wait_for("the pushed commit", &mut guard, || matches(&bare, &commits[1], &target));
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let out = guard.watch.take().expect("the watch").wait_with_output().expect("the watch exits");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "SIGTERM stops it with 0: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains(" synced ")).count(), 2, "one line per update: {stdout}");

    // Purge: every file the package installed is gone, and dpkg forgets it.
    dpkg(&["--purge", "treesync"]);
    assert_eq!(status(), None, "dpkg still knows treesync after --purge");
    let left: Vec<&&str> = files.iter().filter(|f| Path::new(f).exists()).collect();
    assert!(left.is_empty(), "left behind by dpkg --purge: {left:?}");
    assert!(!Path::new("/usr/share/doc/treesync").exists());
    drop(guard);
    assert!(!Path::new(CONFIG).exists());
}
