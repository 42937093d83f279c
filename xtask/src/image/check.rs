//! The image, run for real: `podman load` of the `oci-archive`, then containers under runc as
//! a pod would run them. Checked from the host: the config podman read (user, entrypoint, env,
//! workdir), `--version` through the entrypoint and through the `git-sync` name, the user 65533,
//! git, ssh and /bin/sh inside, every ELF file's libraries resolved by the image's own loader,
//! git's file:// and https transports, and a real sync: a repository served by `git daemon` on
//! 127.0.0.1, synced `--one-time` into a host directory mounted at /git, twice (a second commit
//! arrives as a diff; the second time with a read-only root filesystem), with LINK, the
//! worktree's files, git's view of it and an exechook's output read from the host.
//!
//! podman runs with a private store in a temporary directory (vfs: no mounts to leave behind)
//! and the two settings these machines need (`../shared/testbeds/README.md`): `--runtime runc`
//! and a containers.conf without default ulimits. Needs root; a missing program fails naming
//! the package that provides it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use xtask::util::{run_quiet, run_status};

use super::rootfs::UID;

/// What to check: the archive, the image id podman will give it (the config's digest), the
/// version `--version` must print and the ELF files of the image.
pub struct Subject<'a> {
    pub archive: &'a Path,
    pub image_id: &'a str,
    pub version: &'a str,
    pub elf: &'a [String],
}

pub fn check(s: &Subject<'_>) -> Result<(), String> {
    if !run_quiet(Command::new("id").arg("-u")).is_ok_and(|u| u.trim() == "0") {
        return Err("the image check runs podman as root (with runc): run `cargo xtask image` as root, \
                    or leave the check out with --no-test"
            .into());
    }
    for (program, package) in
        [("podman", "podman"), ("runc", "runc"), ("git", "git"), ("tar", "tar"), ("diff", "diffutils")]
    {
        if Command::new(program).arg("--version").output().is_err() {
            return Err(format!(
                "{program} is missing: apt-get install {package} (the image check needs podman and runc: \
                 apt-get install podman runc; `cargo xtask test` as root installs them)"
            ));
        }
    }
    let tmp = std::env::temp_dir().join(format!("treesync-image-check-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| format!("cannot remove {}: {e}", tmp.display()))?;
    }
    mkdir(&tmp)?;
    let podman = Podman::new(&tmp)?;
    let result = check_in(&podman, s, &tmp);
    // Containers ran with --rm; the store goes with the directory.
    if result.is_ok() {
        std::fs::remove_dir_all(&tmp).map_err(|e| format!("cannot remove {}: {e}", tmp.display()))?;
    }
    result.map_err(|e| format!("{e}\n(podman's store and the fixtures are kept in {} for a look)", tmp.display()))
}

fn check_in(podman: &Podman, s: &Subject<'_>, tmp: &Path) -> Result<(), String> {
    let loaded = podman.ok(&["load".into(), "-i".into(), s.archive.display().to_string()])?;
    let image = format!("sha256:{}", s.image_id);
    let named = format!("treesync:{}", s.version);
    if !loaded.contains(&named) {
        return Err(format!("podman load did not name the image {named}:\n{loaded}"));
    }
    ok(&format!("podman load -i {}: {}", s.archive.display(), loaded.trim()));

    let inspected = podman.ok(&["image".into(), "inspect".into(), image.clone()])?;
    let config = image_config(&inspected)?;
    let want = [
        ("User", serde_json::json!(format!("{UID}:{UID}"))),
        ("Entrypoint", serde_json::json!(["/usr/bin/treesync", "git-sync"])),
        ("WorkingDir", serde_json::json!("/tmp")),
    ];
    for (key, value) in want {
        if config[key] != value {
            return Err(format!("podman image inspect: Config.{key} is {}, expected {value}", config[key]));
        }
    }
    let env: Vec<&str> = config["Env"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
    for wanted in ["HOME=/tmp", "GITSYNC_ROOT=/git"] {
        if !env.contains(&wanted) {
            return Err(format!("podman image inspect: Config.Env lacks {wanted}: {env:?}"));
        }
    }
    ok("podman image inspect: User 65533:65533, Entrypoint treesync git-sync, WorkingDir /tmp, HOME and GITSYNC_ROOT");

    let expected = format!("treesync {}", s.version);
    for entrypoint in [None, Some("/usr/bin/git-sync")] {
        let mut args: Vec<String> = vec!["run".into(), "--rm".into(), "--network=none".into()];
        if let Some(e) = entrypoint {
            args.extend(["--entrypoint".into(), e.into()]);
        }
        args.extend([image.clone(), "--version".into()]);
        let out = podman.ok(&args)?;
        if out.trim() != expected {
            return Err(format!("podman run {} printed {:?}, expected {expected:?}", args.join(" "), out.trim()));
        }
        ok(&format!("--version through {}: {}", entrypoint.unwrap_or("the entrypoint"), out.trim()));
    }

    let fixture = Fixture::make(tmp)?;
    probe(podman, &image, &fixture, s.elf)?;
    sync(podman, &image, &fixture, tmp)
}

/// One container through /bin/sh: identity, modes, programs, libraries and transports.
fn probe(podman: &Podman, image: &str, fixture: &Fixture, elf: &[String]) -> Result<(), String> {
    // The image's own dynamic loader lists each file's libraries (not itself: nothing to ask).
    let is_loader = |p: &&String| p.rsplit('/').next().is_some_and(|n| n.starts_with("ld-linux"));
    let loader = elf.iter().find(is_loader).ok_or("the image has no dynamic loader (ld-linux*)")?;
    let listed: Vec<String> = elf.iter().filter(|p| !is_loader(p)).map(|p| format!("/{p}")).collect();
    let script = format!(
        r#"while read -r k v rest; do case $k in Uid:) echo "uid=$v";; Gid:) echo "gid=$v";; esac; done </proc/self/status
echo "home=$HOME"
echo "pwd=$(pwd)"
test -k /tmp && test -w /tmp && echo tmp=sticky-writable
test -g /git && test -w /git && echo gitdir=setgid-writable
echo "git=$(git --version)"
echo "ssh=$(ssh -V 2>&1)"
test -s /etc/ssl/certs/ca-certificates.crt && echo certs=present
echo "file=$(git ls-remote file:///srv/repo.git refs/heads/main 2>&1)"
echo "https=$(git ls-remote https://127.0.0.1:1/repo.git 2>&1)"
for f in {files}; do
  out=$(/{loader} --list "$f" 2>&1) || {{ echo "unresolved=$f: $out"; continue; }}
  case "$out" in *"not found"*) echo "unresolved=$f: $out";; esac
done
echo done=yes
"#,
        files = listed.join(" ")
    );
    // A copy owned by the image's user: git refuses a repository of another owner
    // ("dubious ownership"), in a container as anywhere.
    let copy = fixture.bare.with_file_name("probe.git");
    run_quiet(Command::new("cp").arg("-a").arg(&fixture.bare).arg(&copy))?;
    run_quiet(Command::new("chown").arg("-R").arg(format!("{UID}:{UID}")).arg(&copy))?;
    let repo = format!("{}:/srv/repo.git:ro", copy.display());
    let mut args = strings(&["run", "--rm", "--network=none", "-v", &repo, "--entrypoint", "/bin/sh", image, "-c"]);
    args.push(script);
    let out = podman.ok(&args)?;
    let field = |key: &str| -> Option<String> {
        out.lines().find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
    };
    let unresolved: Vec<&str> = out.lines().filter(|l| l.starts_with("unresolved=")).collect();
    if field("done").is_none() || !unresolved.is_empty() {
        return Err(format!("inside the image (/bin/sh):\n{out}"));
    }
    let expect = |key: &str, test: &dyn Fn(&str) -> bool, what: &str| -> Result<String, String> {
        match field(key) {
            Some(v) if test(&v) => Ok(v),
            other => Err(format!("inside the image, {key} should be {what}, is {other:?}; the probe said:\n{out}")),
        }
    };
    expect("uid", &|v| v == UID.to_string(), "65533")?;
    expect("gid", &|v| v == UID.to_string(), "65533")?;
    expect("home", &|v| v == "/tmp", "/tmp")?;
    expect("pwd", &|v| v == "/tmp", "/tmp")?;
    expect("tmp", &|v| v == "sticky-writable", "sticky and writable")?;
    expect("gitdir", &|v| v == "setgid-writable", "setgid and writable")?;
    let git = expect("git", &|v| v.starts_with("git version "), "git's version")?;
    let ssh = expect("ssh", &|v| v.starts_with("OpenSSH_"), "OpenSSH's version")?;
    expect("certs", &|v| v == "present", "present")?;
    expect("file", &|v| v.starts_with(&fixture.first) && v.ends_with("refs/heads/main"), "main's hash")?;
    // Nothing listens on port 1 in a container without a network: the https helper, curl and
    // gnutls all loaded when the failure is curl's connection error.
    expect("https", &|v| v.contains("Failed to connect") || v.contains("Couldn't connect"), "curl's connection error")?;
    ok(&format!(
        "inside: uid/gid 65533, HOME=/tmp, cwd /tmp, /tmp 1777, /git setgid and writable, {git}, {ssh}, \
         CA bundle, libraries of {} ELF files resolved, git ls-remote file:// works, https reaches curl",
        listed.len()
    ));
    Ok(())
}

/// The real job: `--one-time` syncs of a git daemon's repository into a mounted /git.
fn sync(podman: &Podman, image: &str, fixture: &Fixture, tmp: &Path) -> Result<(), String> {
    let daemon = Daemon::start(fixture.bare.parent().expect("the base directory"))?;
    let root = tmp.join("volume");
    mkdir(&root)?;
    // A volume the pod's user can write: what an emptyDir with fsGroup gives git-sync.
    run_quiet(Command::new("chown").arg(format!("{UID}:{UID}")).arg(&root))?;
    run_quiet(Command::new("chmod").arg("2775").arg(&root))?;
    let hooks = tmp.join("hooks");
    mkdir(&hooks)?;
    std::fs::write(hooks.join("hook.sh"), "#!/bin/sh\necho \"$GITSYNC_HASH $(pwd)\" > /git/hook-ran\n")
        .map_err(|e| format!("cannot write the hook: {e}"))?;
    run_quiet(Command::new("chmod").arg("755").arg(hooks.join("hook.sh")))?;

    let url = format!("git://127.0.0.1:{}/repo.git", daemon.port);
    // The second run as a pod with `readOnlyRootFilesystem` runs it: only the volume and a
    // tmpfs on /tmp (HOME) writable.
    let run_once = |what: &str, read_only: bool| -> Result<(), String> {
        let t = Instant::now();
        let volume = format!("{}:/git", root.display());
        let hook_volume = format!("{}:/hooks:ro", hooks.display());
        let read_only_flag = format!("--read-only={read_only}");
        podman.ok(&strings(&[
            "run",
            "--rm",
            &read_only_flag,
            "--network=host",
            "-v",
            &volume,
            "-v",
            &hook_volume,
            image,
            "--repo",
            &url,
            "--one-time",
            "--link",
            "current",
            "--exechook-command",
            "/hooks/hook.sh",
        ]))?;
        ok(&format!(
            "{what}: podman run {read_only_flag} --network=host -v VOLUME:/git IMAGE --repo {url} --one-time \
             --link current --exechook-command /hooks/hook.sh ({:.1} s)",
            t.elapsed().as_secs_f64()
        ));
        Ok(())
    };
    run_once("first sync", false)?;
    check_synced(&root, fixture, &fixture.first, tmp)?;
    fixture.second_commit()?;
    let second = fixture.head()?;
    run_once("second sync", true)?;
    check_synced(&root, fixture, &second, tmp)?;
    ok(&format!(
        "the volume's current -> .worktrees/{second}, like git archive, a clean git worktree, the exechook ran there"
    ));
    Ok(())
}

/// `root/current` is a relative link to `.worktrees/HASH` holding what `git archive HASH`
/// holds, git agrees, and the exechook ran there with `GITSYNC_HASH`.
fn check_synced(root: &Path, fixture: &Fixture, hash: &str, tmp: &Path) -> Result<(), String> {
    let link = root.join("current");
    let target = std::fs::read_link(&link).map_err(|e| format!("{} is not a symlink: {e}", link.display()))?;
    if target != Path::new(".worktrees").join(hash) {
        return Err(format!("{} links to {}, expected .worktrees/{hash} (relative)", link.display(), target.display()));
    }
    let worktree = root.join(&target);
    let expected = tmp.join(format!("expected-{hash}"));
    mkdir(&expected)?;
    let archive = tmp.join(format!("{hash}.tar"));
    run_quiet(
        fixture.git().arg("-C").arg(&fixture.bare).args(["archive", "--format=tar", "-o"]).arg(&archive).arg(hash),
    )?;
    run_status(Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&expected))?;
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference", "--exclude=.git", "--exclude=.treesync"])
        .arg(&expected)
        .arg(&worktree)
        .output()
        .map_err(|e| format!("cannot run diff: {e}"))?;
    if !diff.status.success() {
        return Err(format!(
            "{} differs from git archive {hash}:\n{}{}",
            worktree.display(),
            String::from_utf8_lossy(&diff.stdout),
            String::from_utf8_lossy(&diff.stderr)
        ));
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let script = std::fs::metadata(worktree.join("bin/run.sh")).map_err(|e| format!("bin/run.sh: {e}"))?;
    if script.permissions().mode() & 0o111 == 0 || script.uid() != UID {
        return Err(format!(
            "bin/run.sh is mode {:o} owned by {}: expected executable, owned by {UID}",
            script.permissions().mode(),
            script.uid()
        ));
    }
    let git = |args: &[&str]| run_quiet(fixture.git().args(["-c", "safe.directory=*", "-C"]).arg(&worktree).args(args));
    let head = git(&["rev-parse", "HEAD"])?;
    let status = git(&["status", "--porcelain", "--untracked-files=all"])?;
    if head.trim() != hash || !status.trim().is_empty() {
        return Err(format!(
            "git in {}: HEAD {}, status {status:?}; expected {hash} and clean",
            worktree.display(),
            head.trim()
        ));
    }
    let hook = std::fs::read_to_string(root.join("hook-ran"))
        .map_err(|e| format!("the exechook left no /git/hook-ran: {e}"))?;
    let want = format!("{hash} /git/.worktrees/{hash}");
    if hook.trim() != want {
        return Err(format!(
            "the exechook wrote {:?}, expected {want:?} (GITSYNC_HASH and its directory)",
            hook.trim()
        ));
    }
    Ok(())
}

/// The repository the checks sync: a bare repository made with the host's git, whose first
/// commit holds a text file, an executable, a symlink and a nested file.
struct Fixture {
    bare: PathBuf,
    work: PathBuf,
    first: String,
}

impl Fixture {
    fn make(tmp: &Path) -> Result<Fixture, String> {
        let base = tmp.join("served");
        let work = tmp.join("work");
        mkdir(&base)?;
        let f = Fixture { bare: base.join("repo.git"), work, first: String::new() };
        run_quiet(f.git().args(["init", "-q", "-b", "main"]).arg(&f.work))?;
        write(&f.work.join("README"), "treesync image check\n")?;
        write(&f.work.join("bin/run.sh"), "#!/bin/sh\necho run\n")?;
        run_quiet(Command::new("chmod").arg("755").arg(f.work.join("bin/run.sh")))?;
        write(&f.work.join("dir/sub/file.txt"), "nested\n")?;
        std::os::unix::fs::symlink("README", f.work.join("link")).map_err(|e| format!("symlink: {e}"))?;
        f.commit("first")?;
        run_quiet(f.git().args(["clone", "-q", "--bare"]).arg(&f.work).arg(&f.bare))?;
        let first = f.head()?;
        Ok(Fixture { first, ..f })
    }

    /// A second commit, pushed: one file changed, one removed, one added.
    fn second_commit(&self) -> Result<(), String> {
        write(&self.work.join("README"), "treesync image check, second commit\n")?;
        std::fs::remove_file(self.work.join("dir/sub/file.txt")).map_err(|e| format!("remove: {e}"))?;
        write(&self.work.join("new.txt"), "added\n")?;
        self.commit("second")?;
        run_quiet(self.git().arg("-C").arg(&self.work).args(["push", "-q"]).arg(&self.bare).arg("main"))?;
        Ok(())
    }

    fn commit(&self, message: &str) -> Result<(), String> {
        run_quiet(self.git().arg("-C").arg(&self.work).args(["add", "-A"]))?;
        run_quiet(self.git().arg("-C").arg(&self.work).args(["commit", "-q", "-m", message]))?;
        Ok(())
    }

    fn head(&self) -> Result<String, String> {
        Ok(run_quiet(self.git().arg("-C").arg(&self.bare).args(["rev-parse", "refs/heads/main"]))?.trim().to_string())
    }

    /// The host's git, with no user or system configuration and a fixed identity.
    fn git(&self) -> Command {
        let mut c = Command::new("git");
        c.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "check")
            .env("GIT_AUTHOR_EMAIL", "check@example.invalid")
            .env("GIT_COMMITTER_NAME", "check")
            .env("GIT_COMMITTER_EMAIL", "check@example.invalid");
        c
    }
}

/// `git daemon` on a free port of 127.0.0.1 serving `base` (killed on drop).
struct Daemon {
    port: u16,
    child: Child,
}

impl Daemon {
    fn start(base: &Path) -> Result<Daemon, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port on 127.0.0.1: {e}"))?
            .port();
        // git-daemon itself, not `git daemon`, whose child would outlive a kill.
        let exec_path = run_quiet(Command::new("git").arg("--exec-path"))?;
        let child = Command::new(Path::new(exec_path.trim()).join("git-daemon"))
            .args(["--listen=127.0.0.1", &format!("--port={port}"), "--export-all", "--reuseaddr"])
            .arg(format!("--base-path={}", base.display()))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start git daemon: {e} (apt-get install git)"))?;
        let mut daemon = Daemon { port, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("git daemon exited with {status}"));
            }
            if Instant::now() > deadline {
                return Err(format!("git daemon does not listen on 127.0.0.1:{port} after 20 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// podman with a private store under a directory, runc, and a containers.conf without default
/// ulimits (these machines refuse to raise RLIMIT_NOFILE/NPROC).
struct Podman {
    conf: PathBuf,
    dir: PathBuf,
}

impl Podman {
    fn new(dir: &Path) -> Result<Podman, String> {
        let conf = dir.join("containers.conf");
        write(&conf, "[containers]\ndefault_ulimits = []\n")?;
        Ok(Podman { conf, dir: dir.to_path_buf() })
    }

    fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf)
            .arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .arg("--tmpdir")
            .arg(self.dir.join("libpod"))
            .args(["--storage-driver", "vfs", "--runtime", "runc", "--events-backend", "none"]);
        c
    }

    /// Run `podman ARGS`; its stdout, or an error with everything it said.
    fn ok(&self, args: &[String]) -> Result<String, String> {
        let out: Output = self.command().args(args).output().map_err(|e| format!("cannot run podman: {e}"))?;
        let shown = args.join(" ");
        if !out.status.success() {
            return Err(format!(
                "podman {shown} failed with {}:\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// `podman image inspect`'s Config object (it prints a JSON array of images).
fn image_config(inspected: &str) -> Result<serde_json::Value, String> {
    let v: serde_json::Value = serde_json::from_str(inspected)
        .map_err(|e| format!("podman image inspect printed no JSON ({e}):\n{inspected}"))?;
    Ok(v[0]["Config"].clone())
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn ok(what: &str) {
    eprintln!("  ok  {what}");
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    mkdir(path.parent().expect("a directory"))?;
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
