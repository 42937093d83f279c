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
        let out = match crate::process::output(cmd, input, deadline).await {
            Ok(out) => out,
            Err(crate::process::Failed::Deadline) => return Err(fail("context deadline exceeded".into(), b"", b"")),
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
