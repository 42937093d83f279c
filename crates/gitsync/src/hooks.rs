//! git-sync's hooks (`pkg/hook`): each hook has its own task; a sync only hands it the newest
//! hash ([`Hook::send`], never blocking). A hook runs for a hash other than the last one it ran
//! successfully for, and on failure waits its backoff and tries again — with the newest hash —
//! forever; hashes sent meanwhile collapse into the newest. With `--one-time` each hook makes
//! one try and reports it ([`Hook::wait`]).
//!
//! * The exechook: one executable, no shell, no arguments, run in the worktree with
//!   `GITSYNC_HASH` (and git-sync's environment: the global git config, `GIT_SSH_COMMAND`) and
//!   `GITSYNC_PREVIOUS`; success is exit 0; killed at its timeout.
//! * The webhook: `METHOD URL` without a body, header `Gitsync-Hash: HASH`; success is the
//!   configured status (any, for 0 or -1).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::config::{ExecHook, WebHook};
use crate::log::Log;
use crate::metrics::Metrics;

/// What a hook does.
#[derive(Debug, Clone)]
pub enum Action {
    /// An executable run in the worktree.
    Exec {
        /// The hook.
        hook: ExecHook,
        /// The environment added (git-sync's own).
        env: Vec<(String, String)>,
        /// `ROOT/.worktrees`.
        worktrees: PathBuf,
    },
    /// An HTTP request.
    Web(WebHook),
}

impl Action {
    fn backoff(&self) -> Duration {
        match self {
            Action::Exec { hook, .. } => hook.backoff,
            Action::Web(w) => w.backoff,
        }
    }
}

/// A sync's news for a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The new hash.
    pub hash: String,
    /// The hash LINK pointed at before (empty on a first sync).
    pub previous: String,
}

#[derive(Default)]
struct Shared {
    latest: Mutex<Option<Sent>>,
    nudge: Notify,
    result: Mutex<Option<oneshot::Sender<Result<(), String>>>>,
}

/// One hook's runner.
pub struct Hook {
    name: &'static str,
    shared: Arc<Shared>,
    done: Mutex<Option<oneshot::Receiver<Result<(), String>>>>,
}

impl Hook {
    /// Start the hook's task (`name`: `exechook`, `webhook`, `pre-publish-exechook`).
    pub fn start(name: &'static str, action: Action, one_time: bool, log: &Log, metrics: Arc<Metrics>) -> Hook {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = oneshot::channel();
        *shared.result.lock().expect("never poisoned") = Some(tx);
        let log = log.named(name);
        let task = shared.clone();
        tokio::spawn(async move {
            let mut last_ok: Option<String> = None;
            loop {
                let sent = loop {
                    if let Some(s) = task.latest.lock().expect("never poisoned").take() {
                        break s;
                    }
                    task.nudge.notified().await;
                };
                if last_ok.as_deref() == Some(sent.hash.as_str()) {
                    continue;
                }
                let result = run(&action, &sent, &log).await;
                metrics.hook(name, result.is_ok());
                match &result {
                    Ok(()) => last_ok = Some(sent.hash.clone()),
                    Err(e) => log.error("hook failed", e, &[("hash", sent.hash.clone())]),
                }
                if one_time {
                    if let Some(tx) = task.result.lock().expect("never poisoned").take() {
                        let _ = tx.send(result);
                    }
                    return;
                }
                if result.is_err() {
                    tokio::time::sleep(action.backoff()).await;
                    // Again with the newest hash (this one unless a newer came).
                    let mut latest = task.latest.lock().expect("never poisoned");
                    if latest.is_none() {
                        *latest = Some(sent);
                    }
                }
            }
        });
        Hook { name, shared, done: Mutex::new(Some(rx)) }
    }

    /// Hand the hook the newest hash; never blocks.
    pub fn send(&self, sent: Sent) {
        *self.shared.latest.lock().expect("never poisoned") = Some(sent);
        self.shared.nudge.notify_one();
    }

    /// `--one-time`: the result of the hook's one try.
    pub async fn wait(&self) -> Result<(), String> {
        let rx = self.done.lock().expect("never poisoned").take();
        match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Err(format!("{} stopped without a result", self.name))),
            None => Ok(()),
        }
    }
}

async fn run(action: &Action, sent: &Sent, log: &Log) -> Result<(), String> {
    match action {
        Action::Exec { hook, env, worktrees } => {
            let cwd = worktrees.join(&sent.hash);
            log.info(
                0,
                "running exechook",
                &[
                    ("hash", sent.hash.clone()),
                    ("command", hook.command.clone()),
                    ("timeout", format!("{:?}", hook.timeout)),
                ],
            );
            let mut cmd = std::process::Command::new(&hook.command);
            cmd.current_dir(&cwd)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env("GITSYNC_HASH", &sent.hash)
                .env("GITSYNC_PREVIOUS", &sent.previous);
            let out = match crate::process::output(cmd, None, Some(std::time::Instant::now() + hook.timeout)).await {
                Ok(out) => out,
                Err(crate::process::Failed::Deadline) => {
                    return Err(format!("Run({}): context deadline exceeded", hook.command));
                }
                Err(crate::process::Failed::Io(e)) => return Err(format!("Run({}): {e}", hook.command)),
            };
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            if out.status.success() {
                log.info(1, "exechook succeeded", &[("stdout", stdout.into_owned()), ("stderr", stderr.into_owned())]);
                Ok(())
            } else {
                Err(format!("Run({}): {}: {{ stdout: {stdout:?}, stderr: {stderr:?} }}", hook.command, out.status))
            }
        }
        Action::Web(w) => {
            log.info(
                0,
                "sending webhook",
                &[("hash", sent.hash.clone()), ("url", w.url.clone()), ("method", w.method.clone())],
            );
            let method = reqwest::Method::from_bytes(w.method.as_bytes()).map_err(|e| format!("bad method: {e}"))?;
            let response = crate::http_client(true)?
                .request(method, &w.url)
                .header("Gitsync-Hash", &sent.hash)
                .timeout(w.timeout)
                .send()
                .await
                .map_err(|e| format!("error sending webhook: {e}"))?;
            let status = response.status().as_u16();
            let body = crate::body_of(response).await.unwrap_or_default();
            match w.success {
                Some(want) if want != status => {
                    Err(format!("received response code {status} expected {want}, body: {body:?}"))
                }
                _ => Ok(()),
            }
        }
    }
}
