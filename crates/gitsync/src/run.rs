//! The loop (git-sync's `main` and `SyncRepo`): fetch the ref, make the worktree for a new commit
//! at the cost of the diff, switch the link, tell the hooks, clean up; sleep `--period` or until
//! the sync signal; give up after `--max-failures` consecutive failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use treesync::Repo;

use crate::config::{Config, Gc};
use crate::git::Git;
use crate::hooks::{Action, Hook, Sent};
use crate::layout::{Layout, remove_any};
use crate::log::{Log, touch};
use crate::metrics::{Metrics, Status};
use crate::worktree::{self, How};

/// What one successful iteration did.
#[derive(Debug)]
struct Synced {
    hash: String,
    previous: Option<String>,
    /// The link moved (or this is the first sync of the process).
    changed: bool,
    /// The link moved (the pre-publish hook was sent).
    published: bool,
    /// A retired worktree was reused: its commit's worktree is gone, as after a removal.
    reused: bool,
}

/// Everything the loop keeps between iterations.
struct Syncer {
    config: Config,
    git: Git,
    layout: Layout,
    log: Log,
    metrics: Arc<Metrics>,
    pre_publish: Option<Hook>,
}

/// Run `treesync git-sync` with `config` until it exits; the exit code. `metrics` is what the
/// HTTP endpoint (the caller's) shows. Call [`crate::git::use_private_config`] first (before
/// the runtime's threads start), or treesync reads other git settings than the git it runs.
pub async fn run(config: Config, metrics: Arc<Metrics>, log: Log) -> i32 {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(if config.group_write { 0o002 } else { 0o022 }));
    if config.add_user
        && let Err(e) = add_user()
    {
        log.error("can't add user", &e, &[]);
        return 1;
    }
    let global = match crate::git::private_config() {
        Ok(p) => p,
        Err(e) => {
            log.error("can't create the git config file", &e.to_string(), &[]);
            return 1;
        }
    };
    let git = Git::new(&config, &global, log.clone());
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    match git.run(&cwd, &["version"], None).await {
        Ok(v) => log.info(0, "git version", &[("version", v)]),
        Err(e) => {
            log.error("can't run git", &e.to_string(), &[("git", config.git.clone())]);
            return 1;
        }
    }
    if config.cookie_file && !std::path::Path::new(crate::git::COOKIE_FILE).exists() {
        log.error("can't access the cookie file", crate::git::COOKIE_FILE, &[]);
        return 1;
    }
    if let Err(e) = git.configure(&config, &cwd).await {
        log.error("can't set git config", &e.to_string(), &[]);
        return 1;
    }
    let layout = match Layout::open(&config.root, &config.link) {
        Ok(l) => l,
        Err(e) => {
            log.error("can't use the root", &e.to_string(), &[]);
            return 1;
        }
    };
    // One git-sync per root: a lock on the root directory itself, held for the process's life.
    let _lock = match lock_root(&layout.root) {
        Ok(l) => l,
        Err(e) => {
            log.error("another git-sync is using this root", &e, &[("root", layout.root.display().to_string())]);
            return 1;
        }
    };
    let exec_env = git.env.clone();
    let hook = |name, action| Hook::start(name, action, config.one_time, &log, metrics.clone());
    let exec_action = |h: &crate::config::ExecHook| Action::Exec {
        hook: h.clone(),
        env: exec_env.clone(),
        worktrees: layout.worktrees(),
    };
    let exechook = config.exechook.as_ref().map(|h| hook("exechook", exec_action(h)));
    let webhook = config.webhook.as_ref().map(|w| hook("webhook", Action::Web(w.clone())));
    let pre_publish = config.pre_publish.as_ref().map(|h| hook("pre-publish-exechook", exec_action(h)));
    let mut signal = match config.sync_on_signal {
        Some(n) => match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(n)) {
            Ok(s) => Some(s),
            Err(e) => {
                log.error("can't handle the sync signal", &e.to_string(), &[("signal", n.to_string())]);
                return 1;
            }
        },
        None => None,
    };
    let mut s = Syncer { config, git, layout, log: log.clone(), metrics: metrics.clone(), pre_publish };
    // git fsck at start, unless the last process left the repository whole (a sync succeeded
    // after its last write); then only after a failure.
    let (mut failures, mut succeeded, mut check_repo) = (0i64, false, !s.layout.was_left_clean());
    loop {
        let start = Instant::now();
        match s.sync_once(!succeeded, check_repo).await {
            Ok(synced) => {
                if synced.changed {
                    if let Some(t) = &s.config.touch_file
                        && let Err(e) = touch(&s.layout.root.join(t))
                    {
                        log.error("failed to touch touch-file", &e.to_string(), &[("path", t.clone())]);
                    }
                    let sent =
                        Sent { hash: synced.hash.clone(), previous: synced.previous.clone().unwrap_or_default() };
                    for h in [&exechook, &webhook].into_iter().flatten() {
                        h.send(sent.clone());
                    }
                    s.log.info(
                        0,
                        "updated successfully",
                        &[("ref", s.config.rev.clone()), ("hash", synced.hash.clone())],
                    );
                }
                metrics.sync(if synced.changed { Status::Success } else { Status::Noop }, start.elapsed());
                metrics.set_ready();
                // Within the iteration's --sync-timeout, as git-sync runs it.
                s.cleanup(&synced.hash, synced.reused, start + s.config.sync_timeout).await;
                s.layout.mark_clean();
                (failures, succeeded, check_repo) = (0, true, false);
                log.clear_error_file();
                if s.config.one_time {
                    let mut code = 0;
                    // The pre-publish hook was only sent if the link moved (as git-sync waits).
                    let pre = s.pre_publish.as_ref().filter(|_| synced.published);
                    for h in [exechook.as_ref(), webhook.as_ref(), pre].into_iter().flatten() {
                        if h.wait().await.is_err() {
                            code = 1;
                        }
                    }
                    log.info(0, "exiting after one sync", &[("status", code.to_string())]);
                    return code;
                }
                if s.config.ref_is_hash() {
                    log.info(
                        0,
                        "ref appears to be a git hash, no further sync needed",
                        &[("ref", s.config.rev.clone())],
                    );
                    let _ = tokio::signal::ctrl_c().await;
                    return 0;
                }
            }
            Err(e) => {
                metrics.sync(Status::Error, start.elapsed());
                failures += 1;
                check_repo = true;
                let limit = s.config.failure_limit(succeeded);
                if limit >= 0 && failures >= limit.max(1) {
                    log.error("too many failures, aborting", &e, &[("failCount", failures.to_string())]);
                    return 1;
                }
                log.error("error syncing repo, will retry", &e, &[("failCount", failures.to_string())]);
            }
        }
        let period = if succeeded { s.config.period } else { s.config.init_period.unwrap_or(s.config.period) };
        s.log.info(3, "next sync", &[("waitTime", format!("{period:?}"))]);
        match &mut signal {
            Some(sig) => {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = sig.recv() => s.log.info(1, "received signal, syncing", &[]),
                }
            }
            None => tokio::time::sleep(period).await,
        }
    }
}

impl Syncer {
    /// One iteration within `--sync-timeout`. `first`: no success yet in this process (the
    /// worktree is checked and the hooks fire even if nothing changed). `check_repo`: run
    /// `git fsck` on the root's repository (at start and after a failure; git-sync runs it on
    /// every iteration).
    async fn sync_once(&mut self, first: bool, check_repo: bool) -> Result<Synced, String> {
        let deadline = Instant::now() + self.config.sync_timeout;
        let interrupt = Arc::new(AtomicBool::new(false));
        let timer = {
            let interrupt = interrupt.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(deadline.into()).await;
                interrupt.store(true, Ordering::SeqCst);
            })
        };
        let result = self.sync_within(first, check_repo, deadline, &interrupt).await;
        timer.abort();
        if (interrupt.load(Ordering::SeqCst) || Instant::now() >= deadline) && result.is_err() {
            return Err(format!(
                "the sync took longer than --sync-timeout ({:?}): {}",
                self.config.sync_timeout,
                result.err().unwrap_or_default()
            ));
        }
        result
    }

    async fn sync_within(
        &mut self,
        first: bool,
        check_repo: bool,
        deadline: Instant,
        interrupt: &AtomicBool,
    ) -> Result<Synced, String> {
        let d = Some(deadline);
        let root = self.layout.root.clone();
        if let Some(url) = &self.config.askpass_url {
            let r = askpass(url).await;
            self.metrics.askpass(r.is_ok());
            let (user, pass) = r?;
            self.git.approve_one(&root, &self.config.repo, &user, &pass, d).await.map_err(|e| e.to_string())?;
        }
        self.git.approve(&self.config, &root, d).await?;
        self.layout
            .ensure_repo(&self.git, &self.config.repo, check_repo, first || check_repo, d, &self.log)
            .await
            .map_err(|e| e.to_string())?;
        let current = self.layout.current().map_err(|e| e.to_string())?;
        let mut fetch =
            vec!["fetch", &self.config.repo, &self.config.rev, "--verbose", "--no-progress", "--prune", "--no-auto-gc"];
        let depth = self.config.depth.to_string();
        if self.config.depth > 0 {
            fetch.extend(["--depth", &depth]);
        } else if self.git.run(&root, &["rev-parse", "--is-shallow-repository"], d).await.map_err(|e| e.to_string())?
            == "true"
        {
            fetch.push("--unshallow");
        }
        self.layout.unmark_clean();
        self.git.run(&root, &fetch, d).await.map_err(|e| e.to_string())?;
        let repo = Repo::open(&root).map_err(|e| format!("can't open the repository in {}: {e}", root.display()))?;
        let commit = repo.resolve("FETCH_HEAD").map_err(|e| format!("can't read FETCH_HEAD: {e}"))?.commit;
        let hash = commit.to_string();
        let changed = current.as_deref() != Some(hash.as_str()) || !self.layout.points_at(&hash);
        if !changed && !first {
            self.log.info(2, "no update required", &[("ref", self.config.rev.clone()), ("hash", hash.clone())]);
            self.layout.mark_clean();
            return Ok(Synced { hash, previous: current, changed: false, published: false, reused: false });
        }
        // A new hash or the first sync of this process: git-sync logs and counts both.
        self.log.info(
            0,
            "update required",
            &[
                ("ref", self.config.rev.clone()),
                ("local", current.clone().unwrap_or_default()),
                ("remote", hash.clone()),
            ],
        );
        self.metrics.fetch();
        self.git.run(&root, &["reset", "--soft", &hash, "--"], d).await.map_err(|e| e.to_string())?;
        let by_git = worktree::needs_git(&self.config, &self.git, &self.layout, &hash, d).await;
        let made = if by_git {
            if changed || !self.layout.worktree(&hash).join(".git").exists() {
                worktree::make_with_git(&self.layout, &self.git, &self.config, &hash, d)
                    .await
                    .map_err(|e| e.to_string())?
            } else {
                worktree::Made { how: How::Check, changed: 0, from: None }
            }
        } else {
            let old = if changed { current.as_deref() } else { Some(hash.as_str()) };
            worktree::make(&self.layout, &repo, commit, old, self.config.stale_worktree_timeout, interrupt)
                .await
                .map_err(|e| e.to_string())?
        };
        self.metrics.worktree(made.how.label(), made.changed);
        self.log.info(
            1,
            "worktree ready",
            &[
                ("hash", hash.clone()),
                ("how", made.how.label().into()),
                ("changed", made.changed.to_string()),
                ("from", made.from.clone().unwrap_or_default()),
            ],
        );
        if changed {
            if let Some(h) = &self.pre_publish {
                h.send(Sent { hash: hash.clone(), previous: current.clone().unwrap_or_default() });
            }
            self.layout.publish(&hash).map_err(|e| e.to_string())?;
            if let Some(old) = &current
                && old != &hash
            {
                self.layout.touch_worktree(old);
            }
        }
        Ok(Synced { hash, previous: current, changed: true, published: changed, reused: made.how == How::Reuse })
    }

    /// Remove what in `.worktrees` is past `--stale-worktree-timeout`, except the most recently
    /// retired worktree that a next sync can reuse; then, if anything was removed or `reused`
    /// (a retired worktree was brought to the new commit: its old commit has no worktree left,
    /// as after git-sync's removal), prune git's records of worktrees and collect garbage as
    /// `--git-gc` says, each git killed at `deadline`. Failures are logged only.
    async fn cleanup(&self, current: &str, reused: bool, deadline: Instant) {
        let now = SystemTime::now();
        let mut stale: Vec<(String, SystemTime)> = self
            .layout
            .others(current)
            .into_iter()
            .filter(|(_, m)| now.duration_since(*m).unwrap_or_default() >= self.config.stale_worktree_timeout)
            .collect();
        stale.sort_by_key(|(_, m)| *m);
        let spare = stale.iter().rev().find(|(n, _)| worktree::reusable(&self.layout, n)).map(|(n, _)| n.clone());
        let mut removed = 0;
        for (name, _) in stale.iter().filter(|(n, _)| Some(n) != spare.as_ref()) {
            let path = self.layout.worktree(name);
            self.log.info(1, "removing stale worktree", &[("path", path.display().to_string())]);
            match remove_any(&path) {
                Ok(()) => removed += 1,
                Err(e) => self.log.error(
                    "can't remove stale worktree",
                    &e.to_string(),
                    &[("path", path.display().to_string())],
                ),
            }
        }
        if removed == 0 && !reused {
            return;
        }
        let root = &self.layout.root;
        let mut steps: Vec<Vec<&str>> =
            vec![vec!["worktree", "prune", "--verbose"], vec!["reflog", "expire", "--expire-unreachable=all", "--all"]];
        // After a removal, --git-gc as git-sync runs it. After a reuse (every sync from the third,
        // where git-sync would have removed a worktree and run a full `git gc`), `git gc --auto`:
        // git collects when loose objects or packs pile up, so the repository stays bounded
        // without a full repack of every object on every sync.
        match (self.config.git_gc, removed > 0) {
            (Gc::Off, _) => {}
            (_, false) | (Gc::Auto, true) => steps.push(vec!["gc", "--auto"]),
            (Gc::Always, true) => steps.push(vec!["gc"]),
            (Gc::Aggressive, true) => steps.push(vec!["gc", "--aggressive"]),
        }
        for args in steps {
            if let Err(e) = self.git.run(root, &args, Some(deadline)).await {
                self.log.error("git cleanup failed", &e.to_string(), &[]);
            }
        }
    }
}

/// `--askpass-url`: GET with a 1 s timeout, no redirects; `username=` and `password=` lines.
async fn askpass(url: &str) -> Result<(String, String), String> {
    let response = crate::http_client(false)?
        .get(url)
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .map_err(|e| format!("can't access auth URL: {e}"))?;
    let status = response.status().as_u16();
    let body = crate::body_of(response).await.map_err(|e| format!("can't read auth response: {e}"))?;
    if status != 200 {
        return Err(format!("auth URL returned status {status}, body: {body:?}"));
    }
    let (mut user, mut pass) = (String::new(), String::new());
    for line in body.split('\n') {
        match line.split_once('=') {
            Some(("username", v)) => user = v.to_string(),
            Some(("password", v)) => pass = v.to_string(),
            _ => {}
        }
    }
    Ok((user, pass))
}

/// `--add-user`: a passwd entry for this UID if it has none.
fn add_user() -> Result<(), String> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if passwd.lines().any(|l| l.split(':').nth(2) == Some(&uid.to_string())) {
        return Ok(());
    }
    let home = std::env::var("HOME")
        .or_else(|_| std::env::current_dir().map(|d| d.display().to_string()))
        .unwrap_or_else(|_| "/".into());
    let line = format!("git-sync:x:{uid}:{gid}::{home}:/sbin/nologin\n");
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open("/etc/passwd")
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| format!("can't write to /etc/passwd: {e}"))
}

/// An exclusive `flock` on the root directory, or who holds it.
fn lock_root(root: &std::path::Path) -> Result<std::fs::File, String> {
    let f = std::fs::File::open(root).map_err(|e| format!("can't open {}: {e}", root.display()))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(|_| {
        format!(
            "{} is being synced by another treesync git-sync process; stop it or use another --root",
            root.display()
        )
    })?;
    Ok(f)
}
