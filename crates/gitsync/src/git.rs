//! Running the user's git (`--git`) as git-sync does: its own global config file
//! (`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_NOSYSTEM`), `GIT_SSH_COMMAND` built from the SSH flags,
//! output captured, and killed at the sync's deadline.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{Config, Password};
use crate::log::Log;

/// A git command that failed, as git-sync words it: `Run(git ARGS): exit status N: { stdout: "…", stderr: "…" }`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("Run({command}): {reason}: {{ stdout: {stdout:?}, stderr: {stderr:?} }}")]
pub struct GitError {
    /// The command line.
    pub command: String,
    /// `exit status N`, `context deadline exceeded`, or why it did not start.
    pub reason: String,
    /// What it printed.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

/// The git program and the environment every child (git, hooks) gets.
#[derive(Debug, Clone)]
pub struct Git {
    /// `--git`.
    pub program: String,
    /// Added to every child's environment.
    pub env: Vec<(String, String)>,
    log: Log,
}

impl Git {
    /// git as `config` asks, with the global config file `global` (created by the caller).
    pub fn new(config: &Config, global: &Path, log: Log) -> Git {
        let mut ssh = std::env::var("GIT_SSH_COMMAND").unwrap_or_else(|_| "ssh".into());
        match config.verbose {
            v if v >= 9 => ssh.push_str(" -vvv"),
            v if v >= 7 => ssh.push_str(" -vv"),
            v if v >= 5 => ssh.push_str(" -v"),
            _ => {}
        }
        for key in &config.ssh_key_files {
            ssh.push_str(&format!(" -i {key}"));
        }
        if config.ssh_known_hosts {
            ssh.push_str(&format!(
                " -o StrictHostKeyChecking=yes -o UserKnownHostsFile={}",
                config.ssh_known_hosts_file
            ));
        } else {
            ssh.push_str(" -o StrictHostKeyChecking=no");
        }
        let env = vec![
            ("GIT_CONFIG_GLOBAL".into(), global.display().to_string()),
            ("GIT_CONFIG_NOSYSTEM".into(), "true".into()),
            ("GIT_SSH_COMMAND".into(), ssh),
            // Never a prompt on a terminal: a missing credential is an error.
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ];
        Git { program: config.git.clone(), env, log }
    }

    /// Run `git ARGS` in `cwd`; its trimmed stdout. Killed at `deadline`.
    pub async fn run(&self, cwd: &Path, args: &[&str], deadline: Option<Instant>) -> Result<String, GitError> {
        self.run_with(cwd, args, None, deadline).await
    }

    /// [`Git::run`] with `input` on stdin.
    pub async fn run_with(
        &self,
        cwd: &Path,
        args: &[&str],
        input: Option<&[u8]>,
        deadline: Option<Instant>,
    ) -> Result<String, GitError> {
        let command = format!("{} {}", self.program, args.join(" "));
        self.log.info(5, "running command", &[("cwd", cwd.display().to_string()), ("cmd", command.clone())]);
        let fail = |reason: String, stdout: &[u8], stderr: &[u8]| GitError {
            command: command.clone(),
            reason,
            stdout: String::from_utf8_lossy(stdout).trim().to_string(),
            stderr: String::from_utf8_lossy(stderr).trim().to_string(),
        };
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(args).current_dir(cwd).envs(self.env.iter().map(|(k, v)| (k, v)));
        // A second early: file times come from the kernel's coarse clock, which lags the clock
        // read here by up to a tick, and a lock git takes at once must still count as its own.
        let started = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
        let out = match crate::process::output(cmd, input, deadline).await {
            Ok(out) => out,
            Err(crate::process::Failed::Deadline) => {
                // Killed at the deadline: the lock files it took would refuse every later git
                // command ("could not lock config file .git/config: File exists").
                for lock in remove_locks_left(cwd, started) {
                    self.log.info(
                        1,
                        "removed a lock file git left when it was killed",
                        &[("path", lock.display().to_string())],
                    );
                }
                return Err(fail("context deadline exceeded".into(), b"", b""));
            }
            Err(crate::process::Failed::Io(e)) => return Err(fail(e.to_string(), b"", b"")),
        };
        self.log.info(
            6,
            "command result",
            &[
                ("stdout", String::from_utf8_lossy(&out.stdout).into_owned()),
                ("stderr", String::from_utf8_lossy(&out.stderr).into_owned()),
            ],
        );
        if !out.status.success() {
            let reason = match out.status.code() {
                Some(c) => format!("exit status {c}"),
                None => format!("signal: {out:?}", out = out.status),
            };
            return Err(fail(reason, &out.stdout, &out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// git-sync's global settings, then the cookie file, then `--git-config` (so the user's
    /// win): written to the global config file with `git config --global`.
    pub async fn configure(&self, config: &Config, cwd: &Path) -> Result<(), GitError> {
        let mut settings: Vec<(String, String)> = vec![
            ("gc.autoDetach".into(), "false".into()),
            ("gc.pruneExpire".into(), "now".into()),
            ("credential.helper".into(), "cache --timeout 3600".into()),
            ("core.askPass".into(), "true".into()),
        ];
        if config.cookie_file {
            settings.push(("http.cookiefile".into(), COOKIE_FILE.into()));
        }
        settings.extend(config.git_config.iter().cloned());
        for (k, v) in &settings {
            self.run(cwd, &["config", "--global", k, v], None).await?;
        }
        Ok(())
    }

    /// Hand every credential to git's credential helper (`git credential approve`), reading
    /// password files again (so a rotated token is used).
    pub async fn approve(&self, config: &Config, cwd: &Path, deadline: Option<Instant>) -> Result<(), String> {
        for c in &config.credentials {
            let password = match &c.password {
                Password::Value(v) => v.clone(),
                Password::File(f) => std::fs::read_to_string(f)
                    .map_err(|e| format!("credential refresh failed: can't read password file {}: {e}", f.display()))?,
            };
            self.approve_one(cwd, &c.url, &c.username, &password, deadline)
                .await
                .map_err(|e| format!("credential refresh failed: {e}"))?;
        }
        Ok(())
    }

    /// `git credential approve` of one user name and password for `url`.
    pub async fn approve_one(
        &self,
        cwd: &Path,
        url: &str,
        username: &str,
        password: &str,
        deadline: Option<Instant>,
    ) -> Result<(), GitError> {
        let input = format!("url={url}\nusername={username}\npassword={password}\n");
        self.run_with(cwd, &["credential", "approve"], Some(input.as_bytes()), deadline).await.map(drop)
    }
}

/// `--cookie-file`'s fixed path.
pub const COOKIE_FILE: &str = "/etc/git-secret/cookie_file";

/// The private global config file [`use_private_config`] put in this process's environment.
static PRIVATE_CONFIG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Give this process git-sync's own git configuration, as git-sync does (`os.Setenv`): a new
/// private global config file ([`global_config_file`]) as `GIT_CONFIG_GLOBAL`, and
/// `GIT_CONFIG_NOSYSTEM`, in the environment of this process — so that treesync, reading the
/// repository's settings (line ends, filter drivers, LFS) for the files it writes, reads what
/// the git it runs reads (git-sync's settings and `--git-config`, which [`crate::run`] writes
/// there), not the user's `~/.gitconfig` or the system's. Its path.
///
/// # Safety
/// It changes the process's environment: call it while no other thread of the process runs.
#[allow(unsafe_code)]
pub unsafe fn use_private_config() -> std::io::Result<PathBuf> {
    let path = global_config_file()?;
    // SAFETY: the caller runs this while no other thread reads or writes the environment.
    unsafe {
        std::env::set_var("GIT_CONFIG_GLOBAL", &path);
        std::env::set_var("GIT_CONFIG_NOSYSTEM", "true");
    }
    let _ = PRIVATE_CONFIG.set(path.clone());
    Ok(path)
}

/// The global config file git runs with: the one [`use_private_config`] gave this process,
/// else a new one (then only the git children read it, not treesync).
pub(crate) fn private_config() -> std::io::Result<PathBuf> {
    match PRIVATE_CONFIG.get() {
        Some(p) => Ok(p.clone()),
        None => global_config_file(),
    }
}

/// A new, empty global git config file in `$TMPDIR` (`git-sync.gitconfig.*`), kept for the
/// life of the process, as git-sync keeps it.
pub fn global_config_file() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir();
    for n in 0..1000u32 {
        let path = dir.join(format!("git-sync.gitconfig.{}.{n}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free name for the git config file"))
}

/// Remove the lock files (`*.lock`: `config.lock`, `index.lock`, `HEAD.lock`, `shallow.lock`,
/// `packed-refs.lock`, a ref's lock under `refs/`) of the repository git ran in at `cwd` that
/// were made since `since`, when the git process started: a git killed at its deadline leaves
/// them, and git never removes another process's lock. Older ones are left alone (another
/// process's, or a stale one git-sync did not make). The removed paths.
pub(crate) fn remove_locks_left(cwd: &Path, since: std::time::SystemTime) -> Vec<PathBuf> {
    let dot_git = cwd.join(".git");
    let git_dir = if dot_git.is_dir() {
        dot_git
    } else if let Some(to) = std::fs::read_to_string(&dot_git)
        .ok()
        .and_then(|t| t.lines().next().and_then(|l| l.strip_prefix("gitdir:")).map(|p| cwd.join(p.trim())))
    {
        to
    } else if cwd.join("HEAD").is_file() {
        cwd.to_path_buf()
    } else {
        return Vec::new();
    };
    let common = std::fs::read_to_string(git_dir.join("commondir"))
        .ok()
        .map(|c| git_dir.join(c.trim()))
        .unwrap_or_else(|| git_dir.clone());
    let mut found = Vec::new();
    for dir in [&git_dir, &common] {
        locks_in(dir, false, &mut found);
        locks_in(&dir.join("refs"), true, &mut found);
    }
    found.sort();
    found.dedup();
    found.retain(|p| {
        let new = std::fs::symlink_metadata(p).and_then(|m| m.modified()).is_ok_and(|m| m >= since);
        new && std::fs::remove_file(p).is_ok()
    });
    found
}

/// The `*.lock` files of `dir` (and below it, with `deep`; symlinks are not followed).
fn locks_in(dir: &Path, deep: bool, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        let path = entry.path();
        if kind.is_dir() && deep {
            locks_in(&path, true, found);
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "lock") {
            found.push(path);
        }
    }
}

#[cfg(test)]
mod lock_tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_locks_a_killed_git_made_are_removed_and_older_ones_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let git = root.join(".git");
        std::fs::create_dir_all(git.join("refs/heads/team")).expect("mkdir");
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let old = git.join("index.lock");
        std::fs::write(&old, "").expect("old lock");
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&old).and_then(|f| f.set_modified(an_hour_ago)).expect("mtime");
        let since = SystemTime::now() - Duration::from_secs(1);
        let new = [git.join("config.lock"), git.join("refs/heads/team/x.lock"), git.join("shallow.lock")];
        for p in &new {
            std::fs::write(p, "").expect("lock");
        }
        std::fs::write(git.join("config"), "").expect("not a lock");
        let mut removed = remove_locks_left(root, since);
        removed.sort();
        let mut want = new.to_vec();
        want.sort();
        assert_eq!(removed, want);
        assert!(new.iter().all(|p| !p.exists()), "the new locks are gone");
        assert!(old.exists(), "a lock older than the killed git is left alone");
        assert!(git.join("config").exists());
        // A linked worktree: its `.git` file names the admin directory, whose `commondir` is
        // the repository's.
        let wt = root.join("wt");
        let admin = git.join("worktrees/wt");
        std::fs::create_dir_all(&wt).expect("worktree");
        std::fs::create_dir_all(&admin).expect("admin");
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", admin.display())).expect(".git file");
        std::fs::write(admin.join("commondir"), "../..\n").expect("commondir");
        let locks = [admin.join("index.lock"), git.join("packed-refs.lock")];
        for p in &locks {
            std::fs::write(p, "").expect("lock");
        }
        let removed = remove_locks_left(&wt, since);
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert!(locks.iter().all(|p| !p.exists()));
    }
}
