//! [`Runner`]: run hooks after a sync — a command run by `sh -c` with the sync in its
//! environment (like git-sync's exechook, e.g. to reload a web server), and a webhook that
//! POSTs the sync's JSON outcome — each with a timeout, retried with backoff.
//!
//! Hooks come after the sync and never act on it: a hook that fails is reported as a
//! [`Report`], never as an error of the sync, and the target and its state are untouched.
//!
//! The retry rule: a failed try is retried after 1s, then 2s, 4s… (doubling from
//! [`Options::backoff`]) until [`Options::retries`] retries have failed, then the hook gives up
//! for that sync. A newer sync supersedes the pending retries of an older one (a reload after
//! the newer sync serves both): the older sync's hook is dropped ([`Verdict::Superseded`]) and
//! the newer one's runs at once. The exec hook and the webhook retry independently.
//!
//! ```no_run
//! use std::sync::Arc;
//! use treesync_watch::hook::{self, Job, Runner};
//! # async fn example(commit: treesync_core::ObjectId) -> Result<(), hook::Error> {
//! let options = hook::Options { exec: Some("systemctl reload nginx".into()), ..Default::default() };
//! let runner = Runner::start(options, Arc::new(|r: &hook::Report| eprintln!("{}: {}", r.hook, r.message)))?;
//! runner.submit(Job::new(commit, None, "/srv/www", 12, b"{}".to_vec()));
//! let gave_up = runner.finish().await; // every hook delivered or given up
//! assert!(gave_up.is_empty());
//! # Ok(()) }
//! ```

use std::fmt;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use treesync_core::ObjectId;

/// Which hooks to run, and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// A command for `sh -c`, run after each sync with [`Job::env`] in its environment, stdin
    /// from /dev/null, and its stdout and stderr on this process's stderr (so `--json` on
    /// stdout stays clean). Success is exit status 0.
    pub exec: Option<String>,
    /// An `http://` or `https://` URL that each sync's JSON document ([`Job::body`]) is POSTed
    /// to, with `Content-Type: application/json`. Success is any 2xx status. A redirect (3xx)
    /// is not followed (that would POST the body again, to wherever it points): the try fails,
    /// naming the `Location`.
    pub webhook: Option<String>,
    /// How long one try may take: a command still running is killed (its whole process group,
    /// with SIGKILL); a request still unanswered is dropped.
    pub timeout: Duration,
    /// How many times a failed hook is tried again (so at most `retries + 1` tries per sync).
    pub retries: u32,
    /// The wait before the first retry; it doubles before each next one.
    pub backoff: Duration,
}

/// [`Options::timeout`] when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// [`Options::retries`] when none is given.
pub const DEFAULT_RETRIES: u32 = 3;
/// [`Options::backoff`] when none is given.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

impl Default for Options {
    fn default() -> Self {
        Options {
            exec: None,
            webhook: None,
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
            backoff: DEFAULT_BACKOFF,
        }
    }
}

/// What one sync gives its hooks.
#[derive(Debug, Clone)]
pub struct Job {
    /// The commit synced to (`TREESYNC_COMMIT`).
    pub commit: ObjectId,
    /// The commit the target held before, per its state; `None` on a first sync
    /// (`TREESYNC_PREVIOUS`, empty then).
    pub previous: Option<ObjectId>,
    /// The target, as the user named it: a directory or a URL (`TREESYNC_TARGET`).
    pub target: String,
    /// How many paths the sync created, changed or removed: files, symlinks and directories
    /// written or removed, and mode changes ([`treesync_core::OpCounts::total`] of what was
    /// applied) (`TREESYNC_CHANGED`).
    pub changed: u64,
    /// The mirror's name, when the sync is one of the config file's (`TREESYNC_MIRROR`).
    pub mirror: Option<String>,
    /// The JSON document the webhook POSTs.
    pub body: Vec<u8>,
}

impl Job {
    /// A job without a mirror name.
    pub fn new(commit: ObjectId, previous: Option<ObjectId>, target: &str, changed: u64, body: Vec<u8>) -> Job {
        Job { commit, previous, target: target.to_string(), changed, mirror: None, body }
    }

    /// The environment of the exec hook: `TREESYNC_COMMIT`, `TREESYNC_PREVIOUS` (empty on a
    /// first sync), `TREESYNC_TARGET`, `TREESYNC_CHANGED` and, for a mirror, `TREESYNC_MIRROR`.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("TREESYNC_COMMIT", self.commit.to_string()),
            ("TREESYNC_PREVIOUS", self.previous.map(|p| p.to_string()).unwrap_or_default()),
            ("TREESYNC_TARGET", self.target.clone()),
            ("TREESYNC_CHANGED", self.changed.to_string()),
        ];
        if let Some(m) = &self.mirror {
            env.push(("TREESYNC_MIRROR", m.clone()));
        }
        env
    }
}

/// Which hook a [`Report`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "hookKind")]
pub enum Kind {
    /// The command ([`Options::exec`]).
    Exec,
    /// The webhook ([`Options::webhook`]).
    Webhook,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Exec => "exec",
            Kind::Webhook => "webhook",
        })
    }
}

/// How a try of a hook ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "hookResult")]
pub enum Verdict {
    /// It succeeded (exit status 0, HTTP 2xx).
    Ok,
    /// It failed; it is tried again in `retry_in_secs`, unless a newer sync comes first.
    Retrying,
    /// It failed, and so did every retry: the hook is not run again for this sync.
    GaveUp,
    /// It failed and waited for a retry, but a newer sync came: its hook runs instead.
    Superseded,
}

/// One try of a hook, told as it ends (`watch --json`: the `hook` event).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// Which hook.
    pub hook: Kind,
    /// The commit of the sync it ran after.
    #[serde(serialize_with = "treesync_core::json::id")]
    #[schemars(with = "treesync_core::json::schema::ObjectId")]
    pub commit: ObjectId,
    /// Which try this was, from 1.
    pub attempt: u32,
    /// The most tries for this sync (retries + 1).
    pub tries: u32,
    /// How it ended.
    pub result: Verdict,
    /// The command's exit status or the webhook's HTTP status; `null` when there is none (the
    /// command was killed by a signal or at the timeout, the request got no answer).
    pub status: Option<u16>,
    /// What happened, on one line: `exited with status 3`, `HTTP 500 Internal Server Error`,
    /// `still running after 60s (the hook timeout): killed`, …
    pub message: String,
    /// With `retrying`: the wait until the next try.
    #[serde(rename = "retry_in_secs", serialize_with = "treesync_core::json::opt_secs")]
    #[schemars(with = "Option<treesync_core::json::schema::Seconds>")]
    pub retry_in: Option<Duration>,
}

/// Hooks that cannot be run at all (found before any sync).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The webhook is not an http:// or https:// URL.
    #[error(
        "the webhook {url:?} is not an http:// or https:// URL\n  hint: give the full URL, e.g. --webhook https://deploy.example.com/hooks/treesync"
    )]
    Url {
        /// As given.
        url: String,
    },
    /// The HTTP client could not be set up.
    #[error("cannot set up the HTTP client of the webhook")]
    Client(#[source] reqwest::Error),
}

/// Why one try failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("could not start `sh -c`")]
    Spawn(#[source] std::io::Error),
    #[error("waiting for the command failed")]
    Wait(#[source] std::io::Error),
    #[error("exited with status {0}")]
    Exit(i32),
    #[error("killed by signal {0}")]
    Signal(i32),
    #[error("still running after {0:?} (the hook timeout, --hook-timeout): killed")]
    Timeout(Duration),
    #[error("still running when treesync was stopped: killed")]
    Stopped,
    #[error("HTTP {0}")]
    Http(reqwest::StatusCode),
    #[error(
        "HTTP {status}, redirected to {location} (not followed: a webhook POSTs to its own URL only; give the URL it redirects to)"
    )]
    Redirect { status: reqwest::StatusCode, location: String },
    #[error("POST failed")]
    Request(#[source] reqwest::Error),
}

impl Failure {
    fn status(&self) -> Option<u16> {
        match self {
            Failure::Exit(code) => u16::try_from(*code).ok(),
            Failure::Http(s) | Failure::Redirect { status: s, .. } => Some(s.as_u16()),
            _ => None,
        }
    }
}

/// The hooks of one target, running beside the syncs: [`submit`](Runner::submit) a job after
/// each sync; each hook runs in its own task, one job at a time, the newest job first.
/// Dropping the runner drops pending retries and requests, and kills a command still running
/// (its process group, with SIGKILL, within 0.1 s) — what a stopping process wants (SIGTERM);
/// [`finish`](Runner::finish) waits for them instead.
pub struct Runner {
    lanes: Vec<Lane>,
    /// Set when the runner is dropped: a command still running is killed.
    stop: Arc<AtomicBool>,
}

struct Lane {
    jobs: watch::Sender<Option<Arc<Job>>>,
    task: JoinHandle<Vec<Report>>,
}

/// Where a runner tells what its hooks did.
pub type OnReport = Arc<dyn Fn(&Report) + Send + Sync>;

impl Runner {
    /// Start the hooks of `options` (none: a runner that does nothing), telling every try to
    /// `on_report`. Must be called within a tokio runtime.
    pub fn start(options: Options, on_report: OnReport) -> Result<Runner, Error> {
        let options = Arc::new(options);
        let stop = Arc::new(AtomicBool::new(false));
        let mut lanes = Vec::new();
        if options.exec.is_some() {
            lanes.push(Lane::start(Kind::Exec, options.clone(), None, on_report.clone(), stop.clone()));
        }
        if let Some(url) = &options.webhook {
            let parsed = reqwest::Url::parse(url).map_err(|_| Error::Url { url: url.clone() })?;
            if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
                return Err(Error::Url { url: url.clone() });
            }
            // reqwest is built without a TLS crypto provider of its own (see backend-s3): ring,
            // as the process default, unless one is installed already.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest::Client::builder()
                .user_agent(concat!("treesync/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(Error::Client)?;
            lanes.push(Lane::start(Kind::Webhook, options.clone(), Some((client, parsed)), on_report, stop.clone()));
        }
        Ok(Runner { lanes, stop })
    }

    /// Whether there are hooks to run.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Run the hooks for `job`, superseding the pending retries of an older job.
    pub fn submit(&self, job: Job) {
        let job = Arc::new(job);
        for lane in &self.lanes {
            lane.jobs.send_replace(Some(job.clone()));
        }
    }

    /// Wait until every submitted job's hooks succeeded or gave up; the reports of those that
    /// gave up.
    pub async fn finish(mut self) -> Vec<Report> {
        let mut gave_up = Vec::new();
        for lane in std::mem::take(&mut self.lanes) {
            let Lane { jobs, task } = lane;
            drop(jobs);
            gave_up.extend(task.await.unwrap_or_default());
        }
        gave_up
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for lane in &self.lanes {
            lane.task.abort();
        }
    }
}

impl Lane {
    fn start(
        kind: Kind,
        options: Arc<Options>,
        http: Option<(reqwest::Client, reqwest::Url)>,
        on: OnReport,
        stop: Arc<AtomicBool>,
    ) -> Lane {
        let (tx, mut rx) = watch::channel::<Option<Arc<Job>>>(None);
        let task = tokio::spawn(async move {
            let mut gave_up = Vec::new();
            let mut next = None;
            loop {
                let job = match next.take() {
                    Some(job) => job,
                    None => {
                        if rx.changed().await.is_err() {
                            break;
                        }
                        match rx.borrow_and_update().clone() {
                            Some(job) => job,
                            None => continue,
                        }
                    }
                };
                let tries = options.retries.saturating_add(1);
                let mut wait = options.backoff;
                for attempt in 1..=tries {
                    let result = match (&options.exec, &http) {
                        (Some(command), None) => exec(command, &job, options.timeout, &stop).await,
                        (_, Some((client, url))) => post(client, url, &job.body, options.timeout).await,
                        (None, None) => unreachable!("a lane has its hook"),
                    };
                    let mut report = Report {
                        hook: kind,
                        commit: job.commit,
                        attempt,
                        tries,
                        result: Verdict::Ok,
                        status: None,
                        message: String::new(),
                        retry_in: None,
                    };
                    match result {
                        Ok((status, message)) => {
                            report.status = Some(status);
                            report.message = message;
                            on(&report);
                            break;
                        }
                        Err(f) => {
                            report.status = f.status();
                            report.message = crate::line::one_line(&f);
                            if attempt == tries {
                                report.result = Verdict::GaveUp;
                                on(&report);
                                gave_up.push(report);
                                break;
                            }
                            report.result = Verdict::Retrying;
                            report.retry_in = Some(wait);
                            on(&report);
                            if let Some(newer) = backoff(&mut rx, wait).await {
                                report.result = Verdict::Superseded;
                                report.retry_in = None;
                                report.message = format!("{}; a newer sync supersedes the retry", report.message);
                                on(&report);
                                next = Some(newer);
                                break;
                            }
                            wait = wait.saturating_mul(2);
                        }
                    }
                }
            }
            gave_up
        });
        Lane { jobs: tx, task }
    }
}

/// Wait `wait` before a retry; a newer job, when one comes meanwhile.
async fn backoff(rx: &mut watch::Receiver<Option<Arc<Job>>>, wait: Duration) -> Option<Arc<Job>> {
    let sleep = tokio::time::sleep(wait);
    tokio::pin!(sleep);
    let mut open = true;
    loop {
        tokio::select! {
            () = &mut sleep => return None,
            changed = rx.changed(), if open => match changed {
                Ok(()) => {
                    if let Some(job) = rx.borrow_and_update().clone() {
                        return Some(job);
                    }
                }
                // No newer job can come (finish): retry after the wait.
                Err(_) => open = false,
            },
        }
    }
}

/// One try of the exec hook: the exit status 0 and a message, or why it failed.
async fn exec(command: &str, job: &Job, timeout: Duration, stop: &Arc<AtomicBool>) -> Result<(u16, String), Failure> {
    use std::os::fd::AsFd;
    use std::os::unix::process::CommandExt;
    let stdout = std::io::stderr().as_fd().try_clone_to_owned().map_err(Failure::Spawn)?;
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(job.env())
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::inherit())
        // Its own process group, so the timeout kills what the command started too.
        .process_group(0)
        .spawn()
        .map_err(Failure::Spawn)?;
    let stop = stop.clone();
    let status = tokio::task::spawn_blocking(move || wait(child, timeout, &stop))
        .await
        .map_err(|e| Failure::Wait(std::io::Error::other(e)))??;
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok((0, "exited with status 0".into())),
        (Some(code), _) => Err(Failure::Exit(code)),
        (None, Some(signal)) => Err(Failure::Signal(signal)),
        (None, None) => Err(Failure::Exit(-1)),
    }
}

/// Wait for `child` up to `timeout`, or until `stop` is set (the runner was dropped: the
/// process stops); then kill its process group. The group is killed before the child is
/// reaped, so its id cannot have been reused.
fn wait(mut child: Child, timeout: Duration, stop: &AtomicBool) -> Result<ExitStatus, Failure> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(status) = child.try_wait().map_err(Failure::Wait)? {
            return Ok(status);
        }
        let now = Instant::now();
        let stopped = stop.load(Ordering::SeqCst);
        if now >= deadline || stopped {
            let group = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            let _ = child.kill();
            child.wait().map_err(Failure::Wait)?;
            return Err(if stopped { Failure::Stopped } else { Failure::Timeout(timeout) });
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// One try of the webhook: the 2xx status and a message, or why it failed.
async fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, String), Failure> {
    let response = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .timeout(timeout)
        .body(body.to_vec())
        .send()
        .await
        .map_err(Failure::Request)?;
    let status = response.status();
    if status.is_redirection() {
        let location = response.headers().get(reqwest::header::LOCATION);
        let location = match location.map(|l| l.to_str()) {
            Some(Ok(l)) => l.to_string(),
            Some(Err(_)) => format!("{:?}", location.expect("some").as_bytes()),
            None => "nowhere (no Location header)".to_string(),
        };
        return Err(Failure::Redirect { status, location });
    }
    if status.is_success() { Ok((status.as_u16(), format!("HTTP {status}"))) } else { Err(Failure::Http(status)) }
}
