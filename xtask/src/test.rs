//! `cargo xtask test`: the README's test command. Installs what the tests need where it can (as
//! root on Debian: apt packages, and `moto[server]` into the project's virtualenv), says exactly
//! what it installs, then runs every test, the API docs build, the release tarball check and
//! the image check (`cargo xtask image`: the dist binary's OCI image, run by podman).
//!
//! The tests themselves never skip: a test whose real component is missing fails, naming the
//! command that provides it (`treesync_testkit::missing`). This command is what provides them.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xtask::util::{project_root, run_status};

/// The project's virtualenv for `moto[server]`, relative to the workspace root; the testkit
/// looks for `moto_server` there (`treesync_testkit::s3::VENV` names the same place).
pub const VENV: &str = "target/treesync-venv";

/// Where ganesha's VFS FSAL may be (the testkit's ganesha testbed looks in the same places).
const FSAL_VFS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so",
    "/usr/lib/aarch64-linux-gnu/ganesha/libfsalvfs.so",
    "/usr/lib/ganesha/libfsalvfs.so",
    "/usr/lib64/ganesha/libfsalvfs.so",
];

/// Debian's python3-yaml (the Kubernetes examples' test runs /usr/bin/python3 with it).
const PYTHON3_YAML: &str = "/usr/lib/python3/dist-packages/yaml/__init__.py";

/// Services the NFS packages enable; disabled so that no rpcbind listens on 0.0.0.0:111 after
/// a reboot (the tests start their own, in a private namespace).
const NFS_UNITS: &[&str] = &["rpcbind.socket", "rpcbind.service", "nfs-ganesha.service", "nfs-ganesha-lock.service"];

/// How a missing piece is provided.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Provider {
    /// A Debian package.
    Apt(&'static str),
    /// `moto[server]` in the project's virtualenv.
    Venv,
    /// Nothing this command can install: what to do instead.
    Host(String),
}

/// One missing piece: what, and what provides it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Need {
    what: String,
    provider: Provider,
}

/// Where to look: a `PATH`, a prefix for absolute files (`/` on the machine, a temporary
/// directory in the tests), the workspace root and `$TREESYNC_MOTO_SERVER`.
#[derive(Debug, Clone)]
struct Probe {
    path: Vec<PathBuf>,
    root: PathBuf,
    workspace: PathBuf,
    moto_env: Option<PathBuf>,
    /// Whether `python3` can make a virtualenv with pip (Debian's needs python3-venv).
    venv_works: bool,
    /// Whether this runs as root (the tests mount tmpfs and start nfs-ganesha in namespaces).
    is_root: bool,
}

impl Probe {
    /// This machine.
    fn system() -> Probe {
        Probe {
            path: std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect(),
            root: PathBuf::from("/"),
            workspace: project_root(),
            moto_env: std::env::var_os("TREESYNC_MOTO_SERVER").map(PathBuf::from),
            venv_works: Command::new("python3")
                .args(["-c", "import ensurepip, venv"])
                .output()
                .is_ok_and(|o| o.status.success()),
            is_root: is_root(),
        }
    }

    /// An absolute path of the machine, under the probe's root.
    fn file(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// `name` in `PATH`, then in the sbin and bin directories (as the testkit looks).
    fn program(&self, name: &str) -> Option<PathBuf> {
        let fixed = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(|d| self.file(d));
        self.path.iter().cloned().chain(fixed).map(|d| d.join(name)).find(|p| p.is_file())
    }

    /// The `moto_server` the testkit would start: `$TREESYNC_MOTO_SERVER`, the venv, `PATH`.
    fn moto(&self) -> Option<PathBuf> {
        if let Some(p) = &self.moto_env {
            return Some(p.clone());
        }
        let venv = self.workspace.join(VENV).join("bin/moto_server");
        if venv.is_file() {
            return Some(venv);
        }
        self.program("moto_server")
    }
}

/// What the tests need that is not here.
fn missing(probe: &Probe) -> Vec<Need> {
    let mut needs = Vec::new();
    let mut need = |what: &str, provider: Provider| needs.push(Need { what: what.to_string(), provider });
    if !probe.is_root {
        need(
            "root (the tests mount tmpfs filesystems and start nfs-ganesha in namespaces)",
            Provider::Host("run `cargo xtask test` as root".into()),
        );
    }
    let programs: &[(&str, &'static str)] = &[
        ("git", "git"),
        ("git-lfs", "git-lfs"),
        ("strace", "strace"),
        ("tar", "tar"),
        ("fusermount3", "fuse3"),
        ("unshare", "util-linux"),
        ("setpriv", "util-linux"),
        ("mount", "mount"),
        ("umount", "mount"),
        ("ganesha.nfsd", "nfs-ganesha"),
        ("rpcbind", "rpcbind"),
        ("nfs-ls", "libnfs-utils"),
        // The Debian package's test (crates/cli/tests/it/deb.rs): build, install, check the unit.
        ("dpkg-deb", "dpkg"),
        ("systemd-analyze", "systemd"),
        ("strip", "binutils"),
        // The image (`cargo xtask image`, run after the dist build): podman with runc loads
        // and runs it; ssh goes into it.
        ("podman", "podman"),
        ("runc", "runc"),
        ("ssh", "openssh-client"),
    ];
    for (program, package) in programs {
        if probe.program(program).is_none() {
            need(program, Provider::Apt(package));
        }
    }
    if !FSAL_VFS.iter().any(|f| probe.file(f).is_file()) {
        need("ganesha's VFS FSAL (libfsalvfs.so)", Provider::Apt("nfs-ganesha-vfs"));
    }
    if !probe.file("/etc/netconfig").is_file() {
        need("/etc/netconfig", Provider::Apt("libtirpc-common"));
    }
    // The Kubernetes examples' test reads YAML with Debian's python3 and its yaml module.
    if !probe.file(PYTHON3_YAML).is_file() {
        need("python3's yaml module", Provider::Apt("python3-yaml"));
    }
    if !probe.file("/dev/fuse").exists() {
        need(
            "/dev/fuse",
            Provider::Host(
                "load the fuse module (modprobe fuse); in a container, start it with --device /dev/fuse \
                 --cap-add SYS_ADMIN"
                    .into(),
            ),
        );
    }
    match probe.moto() {
        Some(p) if p.is_file() => {}
        Some(p) => need(
            &format!("moto_server at {} ($TREESYNC_MOTO_SERVER)", p.display()),
            Provider::Host("point TREESYNC_MOTO_SERVER at an installed moto_server, or unset it".into()),
        ),
        None => {
            need("moto_server", Provider::Venv);
            if probe.program("python3").is_none() || !probe.venv_works {
                need("python3 with venv and pip", Provider::Apt("python3-venv"));
            }
        }
    }
    needs
}

/// What to run to provide `needs`, as the lines it prints: the apt packages (deduplicated, in
/// order) and whether to make the virtualenv.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    apt: BTreeSet<&'static str>,
    venv: bool,
    /// What cannot be installed here, with what to do.
    host: Vec<(String, String)>,
}

impl Plan {
    fn of(needs: &[Need]) -> Plan {
        let mut plan = Plan::default();
        for n in needs {
            match &n.provider {
                Provider::Apt(p) => {
                    plan.apt.insert(p);
                }
                Provider::Venv => plan.venv = true,
                Provider::Host(what) => plan.host.push((n.what.clone(), what.clone())),
            }
        }
        plan
    }

    fn apt_command(&self) -> String {
        format!("apt-get install -y {}", self.apt.iter().copied().collect::<Vec<_>>().join(" "))
    }

    fn venv_command() -> String {
        format!("python3 -m venv {VENV} && {VENV}/bin/pip install 'moto[server]'")
    }

    fn is_empty(&self) -> bool {
        self.apt.is_empty() && !self.venv && self.host.is_empty()
    }

    /// The commands that would provide everything, for a message to someone who must run them.
    fn commands(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.apt.is_empty() {
            out.push(format!("{} (as root)", self.apt_command()));
        }
        if self.venv {
            out.push(format!("{} (in the workspace)", Plan::venv_command()));
        }
        out.extend(self.host.iter().map(|(what, how)| format!("{what}: {how}")));
        out
    }
}

/// Options of `cargo xtask test`.
#[derive(Debug, Default)]
struct Options {
    /// Do not install: fail naming what provides a missing piece.
    no_install: bool,
    /// Print what would be installed and run; change nothing.
    dry_run: bool,
    /// Install, then stop (for a machine image).
    install_only: bool,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut o = Options::default();
    for a in args {
        match a.as_str() {
            "--no-install" => o.no_install = true,
            "--dry-run" => o.dry_run = true,
            "--install-only" => o.install_only = true,
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let root = project_root();
    let plan = Plan::of(&missing(&Probe::system()));
    if plan.is_empty() {
        println!("xtask test: everything the tests need is installed");
    } else {
        if o.no_install {
            return Err(unprovided(&plan, "is missing (--no-install)"));
        }
        if !plan.host.is_empty() {
            return Err(unprovided(&plan, "cannot all be installed by this command"));
        }
        install(&plan, &root, o.dry_run)?;
        if !o.dry_run {
            let left = Plan::of(&missing(&Probe::system()));
            if !left.is_empty() {
                return Err(unprovided(&left, "is still missing after the install"));
            }
        }
    }
    if o.install_only {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let nextest = has_nextest(&cargo);
    let steps = steps(nextest);
    if !nextest {
        println!(
            "xtask test: cargo-nextest is not installed (`cargo install --locked cargo-nextest`): the tests run with cargo test, one binary after another"
        );
    }
    for step in &steps {
        println!("xtask test: {}{}", step.show(), if step.background { " (in the background, niced)" } else { "" });
    }
    if o.dry_run {
        return Ok(());
    }
    let started = Instant::now();
    // The background steps build in their own profile directory (target/dist), which cargo locks
    // apart from target/debug: they use the cores the tests leave idle, at the lowest priority,
    // so the tests' timings are not theirs to stretch.
    let background: Vec<Step> = steps.iter().filter(|s| s.background).cloned().collect();
    let log = root.join("target/xtask-test-background.log");
    let behind = {
        let (root, cargo, log) = (root.clone(), cargo.clone(), log.clone());
        std::thread::spawn(move || run_logged(&background, &root, &cargo, &log))
    };
    let mut result = Ok(());
    for step in steps.iter().filter(|s| !s.background) {
        let t = Instant::now();
        println!("xtask test: {}", step.show());
        result = run_status(&mut step.command(&root, &cargo));
        println!("xtask test: {} took {:.0} s", step.show(), t.elapsed().as_secs_f64());
        if result.is_err() {
            break;
        }
    }
    println!("xtask test: waiting for the background steps (their output follows)");
    let behind = behind.join().map_err(|_| "the background steps' thread panicked".to_string())?;
    print!("{}", std::fs::read_to_string(&log).unwrap_or_default());
    println!("xtask test: everything took {:.0} s", started.elapsed().as_secs_f64());
    result.and(behind)
}

/// One command of `cargo xtask test`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    /// `RUSTDOCFLAGS`, when set.
    rustdocflags: Option<&'static str>,
    /// The arguments to cargo.
    args: Vec<&'static str>,
    /// Runs beside the tests at the lowest CPU priority, its output shown at the end.
    background: bool,
}

impl Step {
    fn show(&self) -> String {
        let flags = self.rustdocflags.map(|f| format!("RUSTDOCFLAGS=\"{f}\" ")).unwrap_or_default();
        format!("{flags}cargo {}", self.args.join(" "))
    }

    /// The command; `cargo xtask …` runs this xtask binary itself, since `cargo run` would wait
    /// for the tests' build to release target/debug. It is reached as `/proc/PID/exe` of this
    /// process: the tests' build replaces target/debug/xtask (a workspace member) while the
    /// background steps wait their turn, and a step started later would find its path gone.
    fn command(&self, root: &Path, cargo: &std::ffi::OsStr) -> Command {
        let (program, args) = match self.args.split_first() {
            Some((&"xtask", rest)) => (this_exe(), rest),
            _ => (cargo.to_os_string(), &self.args[..]),
        };
        let mut cmd = if self.background {
            let mut nice = Command::new("nice");
            nice.args(["-n", "19"]).arg(program);
            nice
        } else {
            Command::new(program)
        };
        cmd.current_dir(root).args(args);
        if let Some(flags) = self.rustdocflags {
            cmd.env("RUSTDOCFLAGS", flags);
        }
        cmd
    }
}

/// This running xtask binary, even after its file was replaced: `/proc/PID/exe`.
fn this_exe() -> std::ffi::OsString {
    format!("/proc/{}/exe", std::process::id()).into()
}

/// What `cargo xtask test` runs. With cargo-nextest the tests of all binaries share the cores
/// (`cargo test` runs one binary after another, so one slow binary leaves a core idle), and the
/// doc-tests, which nextest does not run, follow with `cargo test --doc`. The release build, its
/// image and the docs, which need no test to pass first, build in the background meanwhile.
fn steps(nextest: bool) -> Vec<Step> {
    let step = |args: &[&'static str]| Step { rustdocflags: None, args: args.to_vec(), background: false };
    let mut steps = Vec::new();
    if nextest {
        // Every test; they start and stop their own moto and nfs-ganesha on 127.0.0.1.
        steps.push(step(&["nextest", "run", "--workspace", "--no-fail-fast"]));
        steps.push(step(&["test", "--workspace", "--doc"]));
    } else {
        steps.push(step(&["test", "--workspace", "--no-fail-fast"]));
    }
    // The release tarball, unpacked and checked (`cargo xtask dist` builds in target/dist).
    steps.push(Step { background: true, ..step(&["xtask", "dist"]) });
    // The OCI image of the same dist binary (its build is then a no-op), run by podman.
    steps.push(Step { background: true, ..step(&["xtask", "image"]) });
    // The API docs build without a warning (broken links included). With the dist profile, its
    // dependencies are checked in target/dist (locked apart from the tests' target/debug), and
    // the proc-macros and build scripts are the ones the dist build just made.
    steps.push(Step {
        rustdocflags: Some("-D warnings"),
        background: true,
        ..step(&["doc", "--no-deps", "--workspace", "--quiet", "--profile", "dist"])
    });
    steps
}

/// Whether `cargo nextest` runs here.
fn has_nextest(cargo: &std::ffi::OsStr) -> bool {
    Command::new(cargo)
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Run `steps` one after another, their output (and how long each took) into `log`; the first
/// failure ends them.
fn run_logged(steps: &[Step], root: &Path, cargo: &std::ffi::OsStr, log: &Path) -> Result<(), String> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    for step in steps {
        let t = Instant::now();
        let mut cmd = step.command(root, cargo);
        let out = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
        use std::io::Write;
        writeln!(&file, "xtask test: {}", step.show()).map_err(|e| format!("{}: {e}", log.display()))?;
        let status = cmd.stdout(out).stderr(err).status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
        writeln!(&file, "xtask test: {} took {:.0} s", step.show(), t.elapsed().as_secs_f64())
            .map_err(|e| format!("{}: {e}", log.display()))?;
        if !status.success() {
            return Err(format!("{} failed with {status} (its output is above)", step.show()));
        }
    }
    Ok(())
}

/// The error for pieces this run does not provide: each with the command that provides it.
fn unprovided(plan: &Plan, why: &str) -> String {
    let mut msg = format!("what the tests need {why}; provide it with:");
    for c in plan.commands() {
        msg.push_str("\n  ");
        msg.push_str(&c);
    }
    msg
}

/// Install `plan` (printing each command first), or only print it with `dry_run`. Needs root
/// and apt-get for packages.
fn install(plan: &Plan, workspace: &Path, dry_run: bool) -> Result<(), String> {
    let probe = Probe::system();
    if !plan.apt.is_empty() {
        println!("xtask test: installing with apt: {}", plan.apt_command());
        if !dry_run {
            if !is_root() {
                return Err(unprovided(plan, "needs root to install (run `cargo xtask test` as root)"));
            }
            if probe.program("apt-get").is_none() {
                return Err(unprovided(plan, "needs apt-get to install (not Debian? install the equivalents)"));
            }
            apt_install(&plan.apt)?;
        }
    }
    if plan.venv {
        println!("xtask test: installing moto[server] into {VENV}: {}", Plan::venv_command());
        if !dry_run {
            make_venv(&workspace.join(VENV), true)?;
            run_status(Command::new(workspace.join(VENV).join("bin/pip")).args(["install", "-q", "moto[server]"]))?;
        }
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `apt-get install` the packages without starting a service: a `policy-rc.d` that refuses
/// keeps the install from starting anything (stock rpcbind listens on 0.0.0.0:111), and the
/// NFS units the packages enable are disabled so that a reboot does not start them either.
fn apt_install(packages: &BTreeSet<&'static str>) -> Result<(), String> {
    let guard = Path::new("/usr/sbin/policy-rc.d");
    let placed = if guard.exists() {
        false
    } else {
        std::fs::write(guard, "#!/bin/sh\nexit 101\n").map_err(|e| format!("{}: {e}", guard.display()))?;
        std::fs::set_permissions(guard, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", guard.display()))?;
        true
    };
    println!(
        "xtask test: apt-get waits up to {} s for another apt-get or dpkg (e.g. an unattended upgrade) to release its lock, and says so",
        APT_LOCK_WAIT.as_secs()
    );
    let apt = |args: &[&str]| apt_get(Path::new("apt-get"), args, APT_LOCK_WAIT, Duration::from_secs(5));
    let result = apt(&["update", "-qq"]).and_then(|()| {
        let mut args = vec!["install", "-y", "-qq"];
        args.extend(packages.iter().copied());
        apt(&args)
    });
    if placed {
        let _ = std::fs::remove_file(guard);
    }
    result?;
    if packages.iter().any(|p| matches!(*p, "nfs-ganesha" | "rpcbind" | "nfs-ganesha-vfs")) {
        // Not every machine runs systemd (a container does not): nothing to disable then.
        let _ = Command::new("systemctl").arg("disable").args(NFS_UNITS).output();
        let tables: Vec<String> = ["tcp", "tcp6", "udp", "udp6"]
            .iter()
            .filter_map(|t| std::fs::read_to_string(format!("/proc/net/{t}")).ok())
            .collect();
        if tables.iter().any(|t| listens_on(t, 111)) {
            return Err("something listens on port 111 after installing nfs-ganesha (rpcbind?): stop it \
                        (systemctl stop rpcbind.socket rpcbind.service)"
                .into());
        }
    }
    Ok(())
}

/// How long apt-get waits for the locks of another apt-get or dpkg: a fresh machine often runs
/// an unattended upgrade for a few minutes after boot.
const APT_LOCK_WAIT: Duration = Duration::from_secs(300);

/// Run `program` (apt-get) with `args`, waiting up to `wait` for the locks another apt-get or
/// dpkg holds: `-o DPkg::Lock::Timeout` makes apt-get wait for dpkg's lock itself (silently),
/// and a lock it does not wait for (`update`'s lists lock) is tried again every `poll`; either
/// way the wait is said on stdout, once.
fn apt_get(program: &Path, args: &[&str], wait: Duration, poll: Duration) -> Result<(), String> {
    let deadline = Instant::now() + wait;
    let mut said = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).as_secs().max(1);
        let mut cmd = Command::new(program);
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .args(["-o", &format!("DPkg::Lock::Timeout={left}")])
            .args(args)
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped());
        let shown = format!("{} {}", program.display(), args.join(" "));
        let out = cmd.output().map_err(|e| format!("cannot run {shown}: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            eprint!("{stderr}");
            return Ok(());
        }
        let held = stderr
            .lines()
            .find(|l| l.contains("Could not get lock") || l.contains("Unable to acquire the dpkg frontend lock"));
        match held {
            Some(line) if Instant::now() < deadline => {
                if !said {
                    println!(
                        "xtask test: waiting for another apt-get or dpkg to release its lock (up to {} s in all): {}",
                        wait.as_secs(),
                        line.trim_start_matches("E: ")
                    );
                    said = true;
                }
                std::thread::sleep(poll.min(deadline.saturating_duration_since(Instant::now())));
            }
            Some(line) => {
                return Err(format!(
                    "{shown}: another apt-get or dpkg still holds its lock after {} s ({}); wait for it to finish (ps -C apt-get,apt,dpkg) and run again",
                    wait.as_secs(),
                    line.trim_start_matches("E: ")
                ));
            }
            None => {
                eprint!("{stderr}");
                return Err(format!("{shown} failed with {}", out.status));
            }
        }
    }
}

/// Whether a `/proc/net/{tcp,udp}[6]` table has a socket bound to `port` that listens (TCP
/// state 0A) or is unconnected (UDP state 07).
fn listens_on(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else { return false };
        let local_port = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
        local_port == Some(port) && matches!(*state, "0A" | "07")
    })
}

/// Make a virtualenv at `dir` (with pip, or without for a quick check).
fn make_venv(dir: &Path, with_pip: bool) -> Result<(), String> {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "venv"]);
    if !with_pip {
        cmd.arg("--without-pip");
    }
    run_status(cmd.arg(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe over an empty machine in `dir`: nothing on `PATH`, no files.
    fn empty(dir: &Path) -> Probe {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        Probe {
            path: vec![bin],
            root: dir.join("root"),
            workspace: dir.join("ws"),
            moto_env: None,
            venv_works: false,
            is_root: true,
        }
    }

    fn put(path: &Path) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, "").expect("write");
    }

    /// A fake apt-get in `dir` that logs its arguments and fails `locked` times saying another
    /// process holds the lists lock, then exits with `last`.
    fn fake_apt(dir: &Path, locked: u32, last: i32) -> PathBuf {
        let program = dir.join("apt-get");
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {log}\nn=$(wc -l < {log})\nif [ \"$n\" -le {locked} ]; then\n  echo 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 42 (apt-get)' >&2\n  exit 100\nfi\n[ {last} = 0 ] || echo 'E: Unable to locate package nope' >&2\nexit {last}\n",
            log = dir.join("calls").display()
        );
        std::fs::write(&program, script).expect("write");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        program
    }

    fn calls(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls")).unwrap_or_default().lines().map(str::to_string).collect()
    }

    #[test]
    fn apt_get_waits_for_a_lock_another_apt_get_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let apt = fake_apt(dir.path(), 2, 0);
        apt_get(&apt, &["update", "-qq"], Duration::from_secs(30), Duration::from_millis(10)).expect("waited");
        let made = calls(dir.path());
        assert_eq!(made.len(), 3, "{made:?}");
        for c in &made {
            assert!(c.starts_with("-o DPkg::Lock::Timeout=") && c.ends_with(" update -qq"), "{c}");
        }
        // Another failure is not waited for; a lock held past the wait is said so.
        let dir = tempfile::tempdir().expect("tempdir");
        let apt = fake_apt(dir.path(), 0, 100);
        let err =
            apt_get(&apt, &["install", "nope"], Duration::from_secs(30), Duration::from_millis(10)).expect_err("fails");
        assert!(err.contains("failed with exit status: 100"), "{err}");
        assert_eq!(calls(dir.path()).len(), 1);
        let dir = tempfile::tempdir().expect("tempdir");
        let apt = fake_apt(dir.path(), 1000, 0);
        let err = apt_get(&apt, &["update"], Duration::from_millis(200), Duration::from_millis(10)).expect_err("held");
        assert!(err.contains("still holds its lock after") && err.contains("ps -C apt-get"), "{err}");
    }

    #[test]
    fn on_an_empty_machine_everything_is_missing_and_provided() {
        let dir = tempfile::tempdir().expect("tempdir");
        let needs = missing(&empty(dir.path()));
        let plan = Plan::of(&needs);
        let apt: Vec<&str> = plan.apt.iter().copied().collect();
        assert_eq!(
            apt,
            [
                "binutils",
                "dpkg",
                "fuse3",
                "git",
                "git-lfs",
                "libnfs-utils",
                "libtirpc-common",
                "mount",
                "nfs-ganesha",
                "nfs-ganesha-vfs",
                "openssh-client",
                "podman",
                "python3-venv",
                "python3-yaml",
                "rpcbind",
                "runc",
                "strace",
                "systemd",
                "tar",
                "util-linux"
            ]
        );
        assert!(plan.venv);
        assert_eq!(plan.host.len(), 1, "{:?}", plan.host);
        assert_eq!(plan.host[0].0, "/dev/fuse");
        let commands = plan.commands();
        assert!(commands[0].starts_with("apt-get install -y binutils dpkg fuse3 git "), "{commands:?}");
        assert!(commands[1].contains("target/treesync-venv/bin/pip install 'moto[server]'"), "{commands:?}");
        assert!(unprovided(&plan, "x").contains("--device /dev/fuse"));
    }

    #[test]
    fn what_is_there_is_not_installed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = empty(dir.path());
        for p in [
            "git",
            "git-lfs",
            "strace",
            "tar",
            "fusermount3",
            "unshare",
            "setpriv",
            "nfs-ls",
            "python3",
            "dpkg-deb",
            "systemd-analyze",
            "strip",
            "podman",
            "runc",
            "ssh",
        ] {
            put(&probe.path[0].join(p));
        }
        put(&probe.root.join(PYTHON3_YAML.trim_start_matches('/')));
        // Found in the sbin directories even when PATH lacks them, as the testkit looks.
        for p in ["usr/sbin/ganesha.nfsd", "usr/sbin/rpcbind", "bin/mount", "bin/umount"] {
            put(&probe.root.join(p));
        }
        put(&probe.root.join("usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so"));
        put(&probe.root.join("etc/netconfig"));
        put(&probe.root.join("dev/fuse"));
        // Debian's python3 without python3-venv cannot make a venv with pip.
        let needs = missing(&probe);
        assert_eq!(needs.len(), 2, "{needs:?}");
        assert_eq!(needs[0], Need { what: "moto_server".into(), provider: Provider::Venv });
        let plan = Plan::of(&needs);
        assert_eq!(plan.apt.iter().copied().collect::<Vec<_>>(), ["python3-venv"]);
        assert!(plan.venv);
        let probe = Probe { venv_works: true, ..probe };
        assert_eq!(missing(&probe), [Need { what: "moto_server".into(), provider: Provider::Venv }]);
        assert!(Plan::of(&missing(&probe)).apt.is_empty());

        // moto in the project's venv, or where TREESYNC_MOTO_SERVER says.
        put(&probe.workspace.join(VENV).join("bin/moto_server"));
        assert_eq!(missing(&probe), []);
        assert!(Plan::of(&missing(&probe)).is_empty());
        let elsewhere = Probe { moto_env: Some(dir.path().join("no-such-moto")), ..probe.clone() };
        let needs = missing(&elsewhere);
        assert_eq!(needs.len(), 1, "{needs:?}");
        assert!(matches!(&needs[0].provider, Provider::Host(h) if h.contains("TREESYNC_MOTO_SERVER")), "{needs:?}");
    }

    #[test]
    fn not_root_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = Probe { is_root: false, ..empty(dir.path()) };
        let plan = Plan::of(&missing(&probe));
        assert!(plan.host.iter().any(|(what, how)| what.starts_with("root") && how.contains("as root")), "{plan:?}");
    }

    #[test]
    fn port_111_listeners_are_found_in_proc_net_tables() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue\n   \
                   0: 00000000:006F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n";
        assert!(listens_on(tcp, 111));
        assert!(!listens_on(tcp, 2049));
        let connected = tcp.replace(" 0A ", " 01 ");
        assert!(!listens_on(&connected, 111), "an outgoing connection from port 111 is no listener");
        let udp6 = "  sl  local_address                         remote_address                        st\n  \
                    1: 00000000000000000000000000000000:006F 00000000000000000000000000000000:0000 07\n";
        assert!(listens_on(udp6, 111));
    }

    #[test]
    fn with_nextest_the_tests_share_the_cores_and_the_builds_run_beside_them_niced() {
        let shown: Vec<(String, bool)> = steps(true).iter().map(|s| (s.show(), s.background)).collect();
        let expected = [
            ("cargo nextest run --workspace --no-fail-fast", false),
            ("cargo test --workspace --doc", false),
            ("cargo xtask dist", true),
            ("cargo xtask image", true),
            ("RUSTDOCFLAGS=\"-D warnings\" cargo doc --no-deps --workspace --quiet --profile dist", true),
        ];
        assert_eq!(shown, expected.map(|(s, b)| (s.to_string(), b)));
        let without: Vec<String> = steps(false).iter().filter(|s| !s.background).map(Step::show).collect();
        assert_eq!(without, ["cargo test --workspace --no-fail-fast"], "cargo test runs the doc-tests too");

        // `cargo xtask dist` is this binary itself (cargo run would wait for target/debug).
        let dist = steps(true)[2].command(Path::new("/"), std::ffi::OsStr::new("cargo"));
        assert_eq!(dist.get_program(), "nice");
        let args: Vec<_> = dist.get_args().collect();
        assert_eq!(args[..2], ["-n", "19"]);
        assert_eq!(args[2], this_exe().as_os_str());
        assert_eq!(args[3..], ["dist"]);
        let doc = steps(true)[4].command(Path::new("/"), std::ffi::OsStr::new("cargo"));
        assert!(doc.get_envs().any(|(k, v)| k == "RUSTDOCFLAGS" && v == Some("-D warnings".as_ref())));
    }

    #[test]
    fn a_venv_is_made_where_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let venv = dir.path().join("target/treesync-venv");
        make_venv(&venv, false).unwrap_or_else(|e| panic!("python3 -m venv (apt-get install python3): {e}"));
        assert!(venv.join("bin/python").exists(), "no bin/python in {}", venv.display());
        assert!(venv.join("pyvenv.cfg").is_file());
    }
}
