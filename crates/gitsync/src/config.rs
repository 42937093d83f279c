//! [`Config`]: the parsed flags checked as git-sync checks them (its messages, exit 1), with its
//! deprecated flags mapped onto their replacements and the flags treesync refuses refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::flags::{FLAGS, Parsed, Support};
use crate::values::parse_git_config;

/// `--submodules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submodules {
    /// `git submodule update --init --recursive`.
    Recursive,
    /// One level: `git submodule update --init`.
    Shallow,
    /// Gitlinks stay empty directories.
    Off,
}

/// `--git-gc`: what runs after old worktrees were removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gc {
    /// `git gc --auto`.
    Auto,
    /// `git gc`.
    Always,
    /// `git gc --aggressive`.
    Aggressive,
    /// Nothing.
    Off,
}

/// An exec hook: one executable (no shell, no arguments), run in the new worktree.
#[derive(Debug, Clone)]
pub struct ExecHook {
    /// The executable.
    pub command: String,
    /// A try still running after this long is killed and counts as failed.
    pub timeout: Duration,
    /// The wait before the next try after a failure.
    pub backoff: Duration,
}

/// The webhook.
#[derive(Debug, Clone)]
pub struct WebHook {
    /// Where.
    pub url: String,
    /// The HTTP method.
    pub method: String,
    /// The status that means success; `None`: any response.
    pub success: Option<u16>,
    /// How long one request may take.
    pub timeout: Duration,
    /// The wait before the next try after a failure.
    pub backoff: Duration,
}

/// Where a credential's password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Password {
    /// Given.
    Value(String),
    /// Read from this file before every sync (so a rotated token is picked up).
    File(PathBuf),
}

/// A credential handed to git (`git credential approve`) before every sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The URL it is for.
    pub url: String,
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: Password,
}

/// Everything `treesync git-sync` was asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--repo`, without credentials (those moved to [`Config::credentials`]).
    pub repo: String,
    /// `--ref`.
    pub rev: String,
    /// `--depth` (0: the whole history).
    pub depth: u32,
    /// `--submodules`.
    pub submodules: Submodules,
    /// `--sparse-checkout-file`.
    pub sparse_checkout_file: Option<PathBuf>,
    /// `--root`, made absolute (symlinks not resolved yet).
    pub root: PathBuf,
    /// `--link` as given (relative to the resolved root unless absolute), defaulted.
    pub link: String,
    /// `--error-file`, absolute (relative ones against the unresolved root, as git-sync does).
    pub error_file: Option<PathBuf>,
    /// `--touch-file` as given (relative to the resolved root unless absolute).
    pub touch_file: Option<String>,
    /// `--period`.
    pub period: Duration,
    /// `--init-period` (`None`: `--period`).
    pub init_period: Option<Duration>,
    /// `--sync-timeout`.
    pub sync_timeout: Duration,
    /// `--one-time`.
    pub one_time: bool,
    /// `--sync-on-signal`, as a signal number.
    pub sync_on_signal: Option<i32>,
    /// `--max-failures`.
    pub max_failures: i64,
    /// `--init-max-failures`, when set.
    pub init_max_failures: Option<i64>,
    /// `--add-user`.
    pub add_user: bool,
    /// `--group-write`.
    pub group_write: bool,
    /// `--stale-worktree-timeout`.
    pub stale_worktree_timeout: Duration,
    /// `--exechook-*`.
    pub exechook: Option<ExecHook>,
    /// `--pre-publish-exechook-*`.
    pub pre_publish: Option<ExecHook>,
    /// `--webhook-*`.
    pub webhook: Option<WebHook>,
    /// `--username` with `$GITSYNC_PASSWORD` or `--password-file`, credentials from `--repo`,
    /// then each `--credential`.
    pub credentials: Vec<Credential>,
    /// `--askpass-url`.
    pub askpass_url: Option<String>,
    /// `--ssh-key-file`.
    pub ssh_key_files: Vec<String>,
    /// `--ssh-known-hosts`.
    pub ssh_known_hosts: bool,
    /// `--ssh-known-hosts-file`.
    pub ssh_known_hosts_file: String,
    /// `--cookie-file`.
    pub cookie_file: bool,
    /// `--git`.
    pub git: String,
    /// `--git-config` then `--git-config-add`, in order.
    pub git_config: Vec<(String, String)>,
    /// `--git-gc`.
    pub git_gc: Gc,
    /// `--http-bind`.
    pub http_bind: Option<String>,
    /// `--http-metrics`.
    pub http_metrics: bool,
    /// `-v`.
    pub verbose: i64,
}

/// A configuration git-sync would refuse (exit 1; the message also goes to the error file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// git-sync's message.
    pub message: String,
    /// Print the usage after it (git-sync does for most).
    pub usage: bool,
}

fn invalid(message: impl Into<String>) -> ConfigError {
    ConfigError { message: message.into(), usage: true }
}

impl Config {
    /// Check `p` as git-sync does (in its order: the first problem is the one reported).
    pub fn from_parsed(p: &Parsed, cwd: &Path) -> Result<Config, ConfigError> {
        for f in FLAGS {
            if let Support::Refused(why) = f.support
                && p.is_set(f.name)
            {
                return Err(ConfigError {
                    message: format!("unsupported flag: --{} is not supported by treesync git-sync: {why}", f.name),
                    usage: false,
                });
            }
        }
        if p.str("root").is_empty() {
            return Err(invalid("required flag: --root must be specified"));
        }
        let root = absolute(cwd, p.str("root"));
        let error_file = Some(p.str("error-file")).filter(|s| !s.is_empty()).map(|s| root.join(s));
        let mut repo = p.str("repo").to_string();
        if repo.is_empty() {
            return Err(invalid("required flag: --repo must be specified"));
        }
        // Deprecated flags override their replacements whenever they are set (main.go:457-613).
        let mut rev = p.str("ref").to_string();
        let (branch, old_rev) = (p.str("branch"), p.str("rev"));
        if !branch.is_empty() && !old_rev.is_empty() && old_rev != "HEAD" {
            return Err(invalid(
                "deprecated flag combo: can't set --ref from deprecated --branch and --rev (one or the other is OK)",
            ));
        }
        if !branch.is_empty() {
            rev = branch.to_string();
        } else if !old_rev.is_empty() {
            rev = old_rev.to_string();
        }
        if rev.is_empty() {
            return Err(invalid("required flag: --ref must be specified"));
        }
        let depth = p.int("depth");
        if depth < 0 {
            return Err(invalid("invalid flag: --depth must be greater than or equal to 0"));
        }
        let submodules = match p.str("submodules") {
            "recursive" => Submodules::Recursive,
            "shallow" => Submodules::Shallow,
            "off" => Submodules::Off,
            _ => {
                return Err(invalid(
                    "invalid flag: --submodules must be one of \"recursive\", \"shallow\", or \"off\"",
                ));
            }
        };
        let git_gc = match p.str("git-gc") {
            "auto" => Gc::Auto,
            "always" => Gc::Always,
            "aggressive" => Gc::Aggressive,
            "off" => Gc::Off,
            _ => {
                return Err(invalid(
                    "invalid flag: --git-gc must be one of \"auto\", \"always\", \"aggressive\", or \"off\"",
                ));
            }
        };
        let mut link = p.str("link").to_string();
        if !p.str("dest").is_empty() {
            link = p.str("dest").to_string();
        }
        if link.is_empty() {
            link = repo.trim_matches('/').rsplit('/').next().unwrap_or_default().to_string();
        }
        let mut period = p.duration("period");
        if !p.str("wait").is_empty() {
            let secs: f64 = p.str("wait").parse().map_err(|_| {
                invalid(format!("invalid flag: --wait must be a number of seconds, not {:?}", p.str("wait")))
            })?;
            period = Duration::from_millis((secs * 1000.0) as u64);
        }
        if period < Duration::from_millis(10) {
            return Err(invalid("invalid flag: --period must be at least 10ms"));
        }
        let init_period = Some(p.duration("init-period")).filter(|d| !d.is_zero());
        if init_period.is_some_and(|d| d < Duration::from_millis(10)) {
            return Err(invalid("invalid flag: --init-period must be at least 10ms"));
        }
        if p.int("change-permissions") != 0 {
            return Err(invalid("deprecated flag: --change-permissions is no longer supported"));
        }
        let sync_on_signal = match p.str("sync-on-signal") {
            "" => None,
            s => Some(
                signal_number(s)
                    .ok_or_else(|| invalid("invalid flag: --sync-on-signal must be a valid signal name or number"))?,
            ),
        };
        let mut sync_timeout = p.duration("sync-timeout");
        if p.int("timeout") != 0 {
            sync_timeout = Duration::from_secs(p.int("timeout").max(0) as u64);
        }
        if sync_timeout < Duration::from_millis(10) {
            return Err(invalid("invalid flag: --sync-timeout must be at least 10ms"));
        }
        let mut max_failures = p.int("max-failures");
        if p.int("max-sync-failures") != 0 {
            max_failures = p.int("max-sync-failures");
        }
        let init_max_failures = p.is_set("init-max-failures").then(|| p.int("init-max-failures"));
        let mut exec_command = p.str("exechook-command").to_string();
        if !p.str("sync-hook-command").is_empty() {
            exec_command = p.str("sync-hook-command").to_string();
        }
        let exechook = exec_hook(p, "exechook", exec_command)?;
        let pre_publish = exec_hook(p, "pre-publish-exechook", p.str("pre-publish-exechook-command").to_string())?;
        let webhook = match p.str("webhook-url") {
            "" => None,
            url => {
                let status = p.int("webhook-success-status");
                let success = match status {
                    -1 | 0 => None,
                    s if (100..=599).contains(&s) => Some(s as u16),
                    _ => return Err(invalid("invalid flag: --webhook-success-status must be a valid HTTP code or 0")),
                };
                let (timeout, backoff) = (p.duration("webhook-timeout"), p.duration("webhook-backoff"));
                if timeout < Duration::from_secs(1) {
                    return Err(invalid("invalid flag: --webhook-timeout must be at least 1s"));
                }
                if backoff < Duration::from_secs(1) {
                    return Err(invalid("invalid flag: --webhook-backoff must be at least 1s"));
                }
                let method = p.str("webhook-method").to_string();
                Some(WebHook { url: url.to_string(), method, success, timeout, backoff })
            }
        };
        let mut credentials = Vec::new();
        let password = Some(p.str("password"))
            .filter(|s| !s.is_empty())
            .or(p.env_only.get("GITSYNC_PASSWORD").map(String::as_str));
        let password_file = Some(p.str("password-file")).filter(|s| !s.is_empty());
        let username = p.str("username");
        let embedded = split_credentials(&mut repo);
        if !username.is_empty() {
            let password = match (password, password_file) {
                (None, None) => {
                    return Err(invalid(
                        "required flag: $GITSYNC_PASSWORD or --password-file must be specified when --username is specified",
                    ));
                }
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        "invalid flag: only one of $GITSYNC_PASSWORD and --password-file may be specified",
                    ));
                }
                (Some(v), None) => Password::Value(v.to_string()),
                (None, Some(f)) => Password::File(absolute(cwd, f)),
            };
            if embedded.is_some() {
                return Err(invalid(
                    "invalid flag: credentials may not be specified in --repo when --username is specified",
                ));
            }
            credentials.push(Credential { url: repo.clone(), username: username.to_string(), password });
        } else {
            if password.is_some() {
                return Err(invalid(
                    "invalid flag: $GITSYNC_PASSWORD may only be specified when --username is specified",
                ));
            }
            if password_file.is_some() {
                return Err(invalid(
                    "invalid flag: --password-file may only be specified when --username is specified",
                ));
            }
            if let Some((user, pass)) = embedded {
                credentials.push(Credential { url: repo.clone(), username: user, password: Password::Value(pass) });
            }
        }
        for text in p.list("credential") {
            credentials.extend(parse_credentials(text, cwd)?);
        }
        if p.bool("http-metrics") && p.str("http-bind").is_empty() {
            return Err(invalid("required flag: --http-bind must be specified when --http-metrics is set"));
        }
        let mut git_config =
            parse_git_config(p.str("git-config")).map_err(|e| invalid(format!("invalid flag: --git-config: {e}")))?;
        for add in p.list("git-config-add") {
            git_config
                .extend(parse_git_config(add).map_err(|e| invalid(format!("invalid flag: --git-config-add: {e}")))?);
        }
        let mut verbose = p.int("verbose");
        if p.on_cli.contains("v") && p.int("v") >= 0 {
            verbose = p.int("v");
        }
        Ok(Config {
            repo,
            rev,
            depth: u32::try_from(depth).unwrap_or(u32::MAX),
            submodules,
            sparse_checkout_file: Some(p.str("sparse-checkout-file"))
                .filter(|s| !s.is_empty())
                .map(|s| absolute(cwd, s)),
            root,
            link,
            error_file,
            touch_file: Some(p.str("touch-file")).filter(|s| !s.is_empty()).map(String::from),
            period,
            init_period,
            sync_timeout,
            one_time: p.bool("one-time"),
            sync_on_signal,
            max_failures,
            init_max_failures,
            add_user: p.bool("add-user"),
            group_write: p.bool("group-write"),
            stale_worktree_timeout: p.duration("stale-worktree-timeout"),
            exechook,
            pre_publish,
            webhook,
            credentials,
            askpass_url: Some(p.str("askpass-url")).filter(|s| !s.is_empty()).map(String::from),
            ssh_key_files: p.list("ssh-key-file").to_vec(),
            ssh_known_hosts: p.bool("ssh-known-hosts"),
            ssh_known_hosts_file: p.str("ssh-known-hosts-file").to_string(),
            cookie_file: p.bool("cookie-file"),
            git: p.str("git").to_string(),
            git_config,
            git_gc,
            http_bind: Some(p.str("http-bind")).filter(|s| !s.is_empty()).map(String::from),
            http_metrics: p.bool("http-metrics"),
            verbose,
        })
    }

    /// The failure limit in force: `--init-max-failures` (if set) until the first success.
    pub fn failure_limit(&self, succeeded_once: bool) -> i64 {
        match (succeeded_once, self.init_max_failures) {
            (false, Some(n)) => n,
            _ => self.max_failures,
        }
    }

    /// Whether `--ref` is a full commit hash (git-sync stops syncing after the first success).
    pub fn ref_is_hash(&self) -> bool {
        (self.rev.len() == 40 || self.rev.len() == 64) && self.rev.bytes().all(|b| b.is_ascii_hexdigit())
    }
}

fn exec_hook(p: &Parsed, name: &str, command: String) -> Result<Option<ExecHook>, ConfigError> {
    if command.is_empty() {
        return Ok(None);
    }
    let (timeout, backoff) = (p.duration(&format!("{name}-timeout")), p.duration(&format!("{name}-backoff")));
    if timeout < Duration::from_secs(1) {
        return Err(invalid(format!("invalid flag: --{name}-timeout must be at least 1s")));
    }
    if backoff < Duration::from_secs(1) {
        return Err(invalid(format!("invalid flag: --{name}-backoff must be at least 1s")));
    }
    Ok(Some(ExecHook { command, timeout, backoff }))
}

fn absolute(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    // Lexically, as Go's filepath.Abs (which cleans `.` and `..`).
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Take `user:pass@` out of an http(s) `repo` (main.go:721-737).
fn split_credentials(repo: &mut String) -> Option<(String, String)> {
    let (scheme, rest) = repo.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let (user, pass) = (percent_decode(user), percent_decode(pass));
    *repo = if path.is_empty() && !rest.contains('/') {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}/{path}")
    };
    Some((user, pass))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `--credential`: one JSON object or a list of them; unknown keys are refused.
fn parse_credentials(text: &str, cwd: &Path) -> Result<Vec<Credential>, ConfigError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Raw {
        #[serde(default)]
        url: String,
        #[serde(default)]
        username: String,
        #[serde(default)]
        password: String,
        #[serde(default, rename = "password-file")]
        password_file: String,
    }
    let raws: Vec<Raw> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text)
    } else {
        serde_json::from_str::<Raw>(text).map(|r| vec![r])
    }
    .map_err(|e| invalid(format!("invalid flag: --credential: {e}")))?;
    raws.into_iter()
        .map(|r| {
            if r.url.is_empty() {
                return Err(invalid("invalid flag: --credential URL must be specified"));
            }
            if r.username.is_empty() {
                return Err(invalid("invalid flag: --credential username must be specified"));
            }
            let password = match (r.password.is_empty(), r.password_file.is_empty()) {
                (true, true) => {
                    return Err(invalid("invalid flag: --credential password or password-file must be specified"));
                }
                (false, false) => {
                    return Err(invalid(
                        "invalid flag: only one of --credential password and password-file may be specified",
                    ));
                }
                (false, true) => Password::Value(r.password),
                (true, false) => Password::File(absolute(cwd, &r.password_file)),
            };
            Ok(Credential { url: r.url, username: r.username, password })
        })
        .collect()
}

/// A signal by number (Go base-0), name (`SIGHUP`) or short name (`HUP`).
pub fn signal_number(s: &str) -> Option<i32> {
    if let Ok(n) = crate::values::parse_int(s) {
        return (1..=64).contains(&n).then_some(n as i32);
    }
    let name = s.strip_prefix("SIG").unwrap_or(s);
    const NAMES: &[(&str, i32)] = &[
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("TERM", libc::SIGTERM),
        ("ALRM", libc::SIGALRM),
        ("CHLD", libc::SIGCHLD),
        ("CONT", libc::SIGCONT),
        ("WINCH", libc::SIGWINCH),
        ("PIPE", libc::SIGPIPE),
        ("URG", libc::SIGURG),
        ("IO", libc::SIGIO),
        ("PWR", libc::SIGPWR),
        ("SYS", libc::SIGSYS),
        ("TRAP", libc::SIGTRAP),
        ("PROF", libc::SIGPROF),
        ("VTALRM", libc::SIGVTALRM),
        ("XCPU", libc::SIGXCPU),
        ("XFSZ", libc::SIGXFSZ),
        ("TSTP", libc::SIGTSTP),
        ("TTIN", libc::SIGTTIN),
        ("TTOU", libc::SIGTTOU),
    ];
    NAMES.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::parse;

    fn config(args: &[&str], env: &'static [(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env = move |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        Config::from_parsed(&parse(&args, &env).expect("parses"), Path::new("/work"))
    }

    #[test]
    fn defaults_and_derived_values() {
        let c = config(&["--repo", "https://example.com/org/site.git/", "--root", "git/../r"], &[]).expect("valid");
        assert_eq!(c.root, Path::new("/work/r"));
        assert_eq!(c.link, "site.git");
        assert_eq!(c.rev, "HEAD");
        assert_eq!((c.depth, c.max_failures), (1, 0));
        assert_eq!(c.git_gc, Gc::Always);
        assert!(c.init_max_failures.is_none());
        assert_eq!(c.failure_limit(false), 0);
    }

    #[test]
    fn git_syncs_messages() {
        let e = |args: &[&str]| config(args, &[]).unwrap_err().message;
        assert_eq!(e(&["--repo", "x"]), "required flag: --root must be specified");
        assert_eq!(e(&["--root", "r"]), "required flag: --repo must be specified");
        assert_eq!(
            e(&["--root", "r", "--repo", "x", "--depth", "-1"]),
            "invalid flag: --depth must be greater than or equal to 0"
        );
        assert_eq!(
            e(&["--root", "r", "--repo", "x", "--period", "1ms"]),
            "invalid flag: --period must be at least 10ms"
        );
        assert_eq!(
            e(&["--root", "r", "--repo", "x", "--http-metrics"]),
            "required flag: --http-bind must be specified when --http-metrics is set"
        );
        assert_eq!(
            e(&["--root", "r", "--repo", "x", "--webhook-url", "http://h", "--webhook-success-status", "-2"]),
            "invalid flag: --webhook-success-status must be a valid HTTP code or 0"
        );
        assert!(e(&["--root", "r", "--repo", "x", "--filter", "blob:none"]).starts_with("unsupported flag: --filter"));
        assert!(e(&["--root", "r", "--repo", "x", "--http-pprof"]).contains("pprof is Go's profiler"));
    }

    #[test]
    fn deprecated_flags_win() {
        let c = config(
            &["--root", "r", "--repo", "x", "--ref", "main"],
            &[("GIT_SYNC_BRANCH", "old"), ("GIT_SYNC_WAIT", "0.5")],
        )
        .expect("valid");
        assert_eq!(c.rev, "old");
        assert_eq!(c.period, Duration::from_millis(500));
    }

    #[test]
    fn credentials_from_everywhere() {
        let c = config(&["--root", "r", "--repo", "https://u:p%40ss@h/x.git"], &[]).expect("valid");
        assert_eq!(c.repo, "https://h/x.git");
        assert_eq!(
            c.credentials,
            [Credential { url: c.repo.clone(), username: "u".into(), password: Password::Value("p@ss".into()) }]
        );
        let c = config(
            &[
                "--root",
                "r",
                "--repo",
                "x",
                "--username",
                "me",
                "--credential",
                r#"{"url":"https://o","username":"a","password-file":"pf"}"#,
            ],
            &[("GITSYNC_PASSWORD", "s")],
        )
        .expect("valid");
        assert_eq!(c.credentials[0].password, Password::Value("s".into()));
        assert_eq!(c.credentials[1].password, Password::File("/work/pf".into()));
        assert!(config(&["--root", "r", "--repo", "x", "--credential", r#"{"url":"u","user":"a"}"#], &[]).is_err());
        assert_eq!(
            config(&["--root", "r", "--repo", "x", "--password-file", "f"], &[]).unwrap_err().message,
            "invalid flag: --password-file may only be specified when --username is specified"
        );
    }

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(signal_number("SIGHUP"), Some(libc::SIGHUP));
        assert_eq!(signal_number("HUP"), Some(libc::SIGHUP));
        assert_eq!(signal_number("10"), Some(10));
        assert_eq!(signal_number("NOPE"), None);
    }
}
