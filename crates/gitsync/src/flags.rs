//! git-sync v4's command line, declared once ([`FLAGS`]) and parsed as git-sync parses it (spf13/pflag
//! and its `env.go`): a flag on the command line wins over its environment variables, which win
//! over the default; of the environment names the new `GITSYNC_*` is read first and every older
//! alias that is set overrides it (so a leftover `GIT_SYNC_*` wins, as in git-sync ≥ 4.4); an
//! environment value that does not parse is fatal (exit 1) even with `--help`; an unknown flag
//! or a malformed value on the command line is a usage error (exit 2); words that are not flags
//! are ignored.
//!
//! Each flag says how treesync supports it ([`Support`]): the same, the same with a difference
//! (documented in `docs/git-sync.md`), or refused with what to use instead — never ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::values::{parse_bool, parse_duration, parse_int};

/// The type of a flag's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any string.
    Str,
    /// `--flag` (true) or `--flag=BOOL`; a separate word is never its value.
    Bool,
    /// An integer in Go's base-0 syntax (`10`, `0x10`, `010`).
    Int,
    /// A Go duration (`10s`, `1m30s`, `100ms`).
    Duration,
    /// Repeatable: the first use on the command line replaces the default (or the environment's,
    /// which is `:`-separated); later uses add to it.
    List,
    /// `--credential`: JSON objects, added to those of `$GITSYNC_CREDENTIAL`.
    Credential,
}

/// How treesync supports a flag of git-sync's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// As git-sync does it.
    Same,
    /// Accepted, with a difference the text names.
    Differs(&'static str),
    /// Refused (exit 1): why, and what to use instead.
    Refused(&'static str),
    /// One of git-sync's deprecated flags: hidden from `--help`, mapped onto its replacement
    /// as git-sync maps it; the text is the deprecation notice git-sync prints.
    Deprecated(&'static str),
}

/// One flag of git-sync's.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The long name, without `--`.
    pub name: &'static str,
    /// The one-letter form, if any.
    pub short: Option<char>,
    /// Its environment variables: the new name first, then the older aliases in the order
    /// git-sync reads them (the last one set wins).
    pub env: &'static [&'static str],
    /// The value's type.
    pub kind: Kind,
    /// The default, in the flag's own syntax (`""`: none).
    pub default: &'static str,
    /// What it does (one line, git-sync's meaning).
    pub help: &'static str,
    /// How treesync supports it.
    pub support: Support,
}

const fn flag(
    name: &'static str,
    env: &'static [&'static str],
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Flag {
    Flag { name, short: None, env, kind, default, help, support: Support::Same }
}

const fn differs(mut f: Flag, why: &'static str) -> Flag {
    f.support = Support::Differs(why);
    f
}

const fn refused(mut f: Flag, why: &'static str) -> Flag {
    f.support = Support::Refused(why);
    f
}

const fn deprecated(name: &'static str, env: &'static [&'static str], kind: Kind, notice: &'static str) -> Flag {
    let default = match kind {
        Int => "0",
        Bool => "false",
        _ => "",
    };
    Flag { name, short: None, env, kind, default, help: "", support: Support::Deprecated(notice) }
}

use Kind::*;

/// Why the GitHub-app flags are refused.
const GITHUB_APP: &str = "GitHub-app authentication is not built into treesync git-sync: mint the installation token with your own job and give it as --username x-access-token --password-file FILE (the file is read again before every sync)";

/// Every flag of git-sync v4 (v4.7.1 and the development head), in the order of its `--help`.
pub const FLAGS: &[Flag] = &[
    flag("repo", &["GITSYNC_REPO", "GIT_SYNC_REPO"], Str, "", "the git repository to sync (required)"),
    flag("ref", &["GITSYNC_REF"], Str, "HEAD", "the git revision (branch, tag or full hash) to sync"),
    flag(
        "depth",
        &["GITSYNC_DEPTH", "GIT_SYNC_DEPTH"],
        Int,
        "1",
        "create a shallow clone with history truncated to this many commits (0: all)",
    ),
    refused(
        flag("filter", &["GITSYNC_FILTER"], Str, "", "the filter for a partial clone (blob:none, tree:0)"),
        "treesync reads every blob it writes from the local repository, so a partial clone would fetch them one request at a time; leave --filter out (--depth 1, the default, already keeps history out)",
    ),
    differs(
        flag(
            "submodules",
            &["GITSYNC_SUBMODULES", "GIT_SYNC_SUBMODULES"],
            Str,
            "recursive",
            "git submodule behaviour: one of 'recursive', 'shallow', or 'off'",
        ),
        "a commit with a .gitmodules file is checked out by git (git worktree add, reset --hard, submodule update), as git-sync does, not as a diff",
    ),
    differs(
        flag(
            "sparse-checkout-file",
            &["GITSYNC_SPARSE_CHECKOUT_FILE", "GIT_SYNC_SPARSE_CHECKOUT_FILE"],
            Str,
            "",
            "the path to a sparse-checkout file",
        ),
        "with a sparse-checkout file every commit is checked out by git, as git-sync does, not as a diff",
    ),
    flag("root", &["GITSYNC_ROOT", "GIT_SYNC_ROOT"], Str, "", "the root directory for git-sync operations (required)"),
    flag(
        "link",
        &["GITSYNC_LINK", "GIT_SYNC_LINK"],
        Str,
        "",
        "the path (absolute or relative to --root) at which to create a symlink to the directory holding the checked-out files (default: the leaf of --repo)",
    ),
    flag(
        "error-file",
        &["GITSYNC_ERROR_FILE", "GIT_SYNC_ERROR_FILE"],
        Str,
        "",
        "the path (absolute or relative to --root) to an optional file into which errors will be written (default: none)",
    ),
    flag(
        "period",
        &["GITSYNC_PERIOD", "GIT_SYNC_PERIOD"],
        Duration,
        "10s",
        "how long to wait between sync attempts, must be >= 10ms",
    ),
    flag(
        "init-period",
        &["GITSYNC_INIT_PERIOD"],
        Duration,
        "0",
        "how long to wait between sync attempts until the first success (0: --period)",
    ),
    differs(
        flag(
            "sync-timeout",
            &["GITSYNC_SYNC_TIMEOUT", "GIT_SYNC_SYNC_TIMEOUT"],
            Duration,
            "120s",
            "the total time allowed for one complete sync, must be >= 10ms",
        ),
        "at the deadline git is killed, as in git-sync, and a sync of the files is interrupted between operations; the next attempt goes on in the same worktree (no second copy) but applies that sync again from its start, so one that needs longer than the timeout (a large first checkout on a slow disk) never completes, as in git-sync: raise the timeout",
    ),
    flag("one-time", &["GITSYNC_ONE_TIME", "GIT_SYNC_ONE_TIME"], Bool, "false", "exit after the first sync"),
    flag(
        "sync-on-signal",
        &["GITSYNC_SYNC_ON_SIGNAL", "GIT_SYNC_SYNC_ON_SIGNAL"],
        Str,
        "",
        "sync on receipt of the specified signal (e.g. SIGHUP)",
    ),
    flag(
        "max-failures",
        &["GITSYNC_MAX_FAILURES", "GIT_SYNC_MAX_FAILURES"],
        Int,
        "0",
        "the number of consecutive failures allowed before aborting (-1: retry forever)",
    ),
    flag(
        "init-max-failures",
        &["GITSYNC_INIT_MAX_FAILURES"],
        Int,
        "0",
        "the number of consecutive failures allowed before the first success (default: --max-failures)",
    ),
    flag(
        "touch-file",
        &["GITSYNC_TOUCH_FILE", "GIT_SYNC_TOUCH_FILE"],
        Str,
        "",
        "the path (absolute or relative to --root) to an optional file which will be touched whenever a sync completes",
    ),
    flag(
        "add-user",
        &["GITSYNC_ADD_USER", "GIT_SYNC_ADD_USER"],
        Bool,
        "false",
        "add a record to /etc/passwd for the current UID/GID (needed to use SSH with an arbitrary UID)",
    ),
    flag(
        "group-write",
        &["GITSYNC_GROUP_WRITE", "GIT_SYNC_GROUP_WRITE"],
        Bool,
        "false",
        "ensure that all data (repo, worktrees, etc.) is group writable (umask 0002)",
    ),
    differs(
        flag(
            "stale-worktree-timeout",
            &["GITSYNC_STALE_WORKTREE_TIMEOUT"],
            Duration,
            "0",
            "how long to retain non-current worktrees",
        ),
        "of the worktrees past the timeout, the most recent one is kept and reused for the next commit (brought to it by the diff), instead of being removed and written again",
    ),
    differs(
        flag(
            "exechook-command",
            &["GITSYNC_EXECHOOK_COMMAND", "GIT_SYNC_EXECHOOK_COMMAND"],
            Str,
            "",
            "an optional command to be executed after syncing a new hash of the remote repository",
        ),
        "treesync also sets GITSYNC_PREVIOUS (the hash the link named before, empty on a first sync) besides GITSYNC_HASH",
    ),
    flag(
        "exechook-timeout",
        &["GITSYNC_EXECHOOK_TIMEOUT", "GIT_SYNC_EXECHOOK_TIMEOUT"],
        Duration,
        "30s",
        "the timeout for the exechook",
    ),
    flag(
        "exechook-backoff",
        &["GITSYNC_EXECHOOK_BACKOFF", "GIT_SYNC_EXECHOOK_BACKOFF"],
        Duration,
        "3s",
        "the time to wait before retrying a failed exechook",
    ),
    flag(
        "pre-publish-exechook-command",
        &["GITSYNC_PRE_PUBLISH_EXECHOOK_COMMAND"],
        Str,
        "",
        "an optional command run in the new worktree before the link is switched to it",
    ),
    flag(
        "pre-publish-exechook-timeout",
        &["GITSYNC_PRE_PUBLISH_EXECHOOK_TIMEOUT"],
        Duration,
        "30s",
        "the timeout for the pre-publish exechook",
    ),
    flag(
        "pre-publish-exechook-backoff",
        &["GITSYNC_PRE_PUBLISH_EXECHOOK_BACKOFF"],
        Duration,
        "3s",
        "the time to wait before retrying a failed pre-publish exechook",
    ),
    flag(
        "webhook-url",
        &["GITSYNC_WEBHOOK_URL", "GIT_SYNC_WEBHOOK_URL"],
        Str,
        "",
        "a URL for optional webhook notifications when syncs complete (must be http:// or https://)",
    ),
    flag(
        "webhook-method",
        &["GITSYNC_WEBHOOK_METHOD", "GIT_SYNC_WEBHOOK_METHOD"],
        Str,
        "POST",
        "the HTTP method for the webhook",
    ),
    flag(
        "webhook-success-status",
        &["GITSYNC_WEBHOOK_SUCCESS_STATUS", "GIT_SYNC_WEBHOOK_SUCCESS_STATUS"],
        Int,
        "200",
        "the HTTP status code indicating a successful webhook (0 or -1: any response)",
    ),
    flag(
        "webhook-timeout",
        &["GITSYNC_WEBHOOK_TIMEOUT", "GIT_SYNC_WEBHOOK_TIMEOUT"],
        Duration,
        "1s",
        "the timeout for the webhook",
    ),
    flag(
        "webhook-backoff",
        &["GITSYNC_WEBHOOK_BACKOFF", "GIT_SYNC_WEBHOOK_BACKOFF"],
        Duration,
        "3s",
        "the time to wait before retrying a failed webhook",
    ),
    flag("username", &["GITSYNC_USERNAME", "GIT_SYNC_USERNAME"], Str, "", "the username to use for git auth"),
    flag(
        "password-file",
        &["GITSYNC_PASSWORD_FILE", "GIT_SYNC_PASSWORD_FILE"],
        Str,
        "",
        "the file from which the password or personal access token for git auth will be sourced",
    ),
    flag(
        "credential",
        &["GITSYNC_CREDENTIAL"],
        Credential,
        "",
        "one or more credentials (JSON: url, username, password or password-file) for git auth",
    ),
    flag(
        "ssh-key-file",
        &["GITSYNC_SSH_KEY_FILE", "GIT_SYNC_SSH_KEY_FILE", "GIT_SSH_KEY_FILE"],
        List,
        "/etc/git-secret/ssh",
        "the SSH key(s) to use",
    ),
    flag(
        "ssh-known-hosts",
        &["GITSYNC_SSH_KNOWN_HOSTS", "GIT_SYNC_KNOWN_HOSTS", "GIT_KNOWN_HOSTS"],
        Bool,
        "true",
        "enable SSH known_hosts verification",
    ),
    flag(
        "ssh-known-hosts-file",
        &["GITSYNC_SSH_KNOWN_HOSTS_FILE", "GIT_SYNC_SSH_KNOWN_HOSTS_FILE", "GIT_SSH_KNOWN_HOSTS_FILE"],
        Str,
        "/etc/git-secret/known_hosts",
        "the known_hosts file to use",
    ),
    flag(
        "cookie-file",
        &["GITSYNC_COOKIE_FILE", "GIT_SYNC_COOKIE_FILE", "GIT_COOKIE_FILE"],
        Bool,
        "false",
        "use a git cookiefile (/etc/git-secret/cookie_file) for authentication",
    ),
    flag(
        "askpass-url",
        &["GITSYNC_ASKPASS_URL", "GIT_SYNC_ASKPASS_URL", "GIT_ASKPASS_URL"],
        Str,
        "",
        "a URL to query for git credentials (username=<value> and password=<value>)",
    ),
    refused(
        flag(
            "github-base-url",
            &["GITSYNC_GITHUB_BASE_URL"],
            Str,
            "https://api.github.com/",
            "the GitHub base URL to use for GitHub app auth",
        ),
        GITHUB_APP,
    ),
    refused(
        flag(
            "github-app-private-key-file",
            &["GITSYNC_GITHUB_APP_PRIVATE_KEY_FILE"],
            Str,
            "",
            "the file from which the private key for GitHub app auth will be sourced",
        ),
        GITHUB_APP,
    ),
    refused(
        flag(
            "github-app-client-id",
            &["GITSYNC_GITHUB_APP_CLIENT_ID"],
            Str,
            "",
            "the GitHub app client ID to use for GitHub app auth",
        ),
        GITHUB_APP,
    ),
    refused(
        flag(
            "github-app-application-id",
            &["GITSYNC_GITHUB_APP_APPLICATION_ID"],
            Int,
            "0",
            "the GitHub app application ID to use for GitHub app auth",
        ),
        GITHUB_APP,
    ),
    refused(
        flag(
            "github-app-installation-id",
            &["GITSYNC_GITHUB_APP_INSTALLATION_ID"],
            Int,
            "0",
            "the GitHub app installation ID to use for GitHub app auth",
        ),
        GITHUB_APP,
    ),
    flag(
        "git",
        &["GITSYNC_GIT", "GIT_SYNC_GIT"],
        Str,
        "git",
        "the git command to run (subject to PATH search, mostly for testing)",
    ),
    flag(
        "git-config",
        &["GITSYNC_GIT_CONFIG", "GIT_SYNC_GIT_CONFIG"],
        Str,
        "",
        "additional git config options in a comma-separated 'key:val' format",
    ),
    flag("git-config-add", &[], List, "", "one additional git config option in 'key:val' format (repeatable)"),
    differs(
        flag(
            "git-gc",
            &["GITSYNC_GIT_GC", "GIT_SYNC_GIT_GC"],
            Str,
            "always",
            "git garbage collection behavior: one of 'auto', 'always', 'aggressive', or 'off'",
        ),
        "runs as git-sync runs it after a worktree was removed; after a retired worktree was reused (every sync from the third, which removes none) git gc --auto runs instead of a full git gc",
    ),
    flag(
        "http-bind",
        &["GITSYNC_HTTP_BIND", "GIT_SYNC_HTTP_BIND"],
        Str,
        "",
        "the bind address (including port) for git-sync's HTTP endpoint",
    ),
    flag(
        "http-metrics",
        &["GITSYNC_HTTP_METRICS", "GIT_SYNC_HTTP_METRICS"],
        Bool,
        "false",
        "enable metrics on git-sync's HTTP endpoint",
    ),
    refused(
        flag(
            "http-pprof",
            &["GITSYNC_HTTP_PPROF", "GIT_SYNC_HTTP_PPROF"],
            Bool,
            "false",
            "enable the pprof debug endpoints on git-sync's HTTP endpoint",
        ),
        "pprof is Go's profiler and treesync is not a Go program; leave --http-pprof out (--http-metrics gives the sync counters and durations)",
    ),
    differs(
        Flag {
            short: Some('v'),
            ..flag("verbose", &["GITSYNC_VERBOSE"], Int, "0", "logs at this V level and lower will be printed")
        },
        "the same JSON lines on stderr and levels; the messages are treesync's",
    ),
    differs(flag("version", &[], Bool, "false", "print the version and exit"), "prints treesync's version"),
    flag("man", &[], Bool, "false", "print the full manual and exit"),
    Flag { short: Some('h'), ..flag("help", &[], Bool, "false", "print help text and exit") },
    // Deprecated (hidden), mapped as git-sync maps them.
    deprecated("branch", &["GIT_SYNC_BRANCH"], Str, "use --ref instead"),
    deprecated("rev", &["GIT_SYNC_REV"], Str, "use --ref instead"),
    deprecated("dest", &["GIT_SYNC_DEST"], Str, "use --link instead"),
    deprecated("wait", &["GIT_SYNC_WAIT"], Str, "use --period instead"),
    deprecated("timeout", &["GIT_SYNC_TIMEOUT"], Int, "use --sync-timeout instead"),
    deprecated("max-sync-failures", &["GIT_SYNC_MAX_SYNC_FAILURES"], Int, "use --max-failures instead"),
    deprecated("sync-hook-command", &["GIT_SYNC_HOOK_COMMAND"], Str, "use --exechook-command instead"),
    deprecated("password", &[], Str, "use --password-file or $GITSYNC_PASSWORD instead"),
    deprecated("change-permissions", &["GIT_SYNC_PERMISSIONS"], Int, "use --group-write instead"),
    deprecated("ssh", &[], Bool, "no longer required"),
    Flag { default: "-1", ..deprecated("v", &[], Int, "use -v or --verbose instead") },
];

/// Environment variables git-sync reads that are no flag's.
pub const ENV_ONLY: &[(&str, &[&str])] = &[("GITSYNC_PASSWORD", &["GITSYNC_PASSWORD", "GIT_SYNC_PASSWORD"])];

/// The flag named `name`.
pub fn find(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.name == name)
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// [`Kind::Str`].
    Str(String),
    /// [`Kind::Bool`].
    Bool(bool),
    /// [`Kind::Int`].
    Int(i64),
    /// [`Kind::Duration`].
    Duration(Duration),
    /// [`Kind::List`] and [`Kind::Credential`].
    List(Vec<String>),
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub struct Parsed {
    values: BTreeMap<&'static str, Value>,
    /// Flags given on the command line.
    pub on_cli: BTreeSet<&'static str>,
    /// Flags whose environment variable was set.
    pub in_env: BTreeSet<&'static str>,
    /// Env-only values (`GITSYNC_PASSWORD`).
    pub env_only: BTreeMap<&'static str, String>,
    /// Notices to print on stderr (deprecated names), in order.
    pub notices: Vec<String>,
}

/// Why parsing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A usage error on the command line: exit 2.
    Usage(String),
    /// An environment value that does not parse: exit 1.
    Fatal(String),
}

impl Parsed {
    /// The value of `name` (every flag has one: given, from the environment, or the default).
    pub fn get(&self, name: &str) -> &Value {
        self.values.get(name).unwrap_or_else(|| panic!("no flag --{name}"))
    }

    /// A string flag's value.
    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            Value::Str(s) => s,
            v => panic!("--{name} is not a string: {v:?}"),
        }
    }

    /// A bool flag's value.
    pub fn bool(&self, name: &str) -> bool {
        matches!(self.get(name), Value::Bool(true))
    }

    /// An int flag's value.
    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Value::Int(i) => *i,
            v => panic!("--{name} is not an int: {v:?}"),
        }
    }

    /// A duration flag's value.
    pub fn duration(&self, name: &str) -> Duration {
        match self.get(name) {
            Value::Duration(d) => *d,
            v => panic!("--{name} is not a duration: {v:?}"),
        }
    }

    /// A list flag's values.
    pub fn list(&self, name: &str) -> &[String] {
        match self.get(name) {
            Value::List(l) => l,
            v => panic!("--{name} is not a list: {v:?}"),
        }
    }

    /// Whether `name` was given on the command line or its environment variable was set.
    pub fn is_set(&self, name: &str) -> bool {
        self.on_cli.contains(name) || self.in_env.contains(name)
    }
}

fn parse_value(kind: Kind, text: &str) -> Result<Value, String> {
    Ok(match kind {
        Str => Value::Str(text.to_string()),
        Bool => Value::Bool(parse_bool(text)?),
        Int => Value::Int(parse_int(text)?),
        Duration => Value::Duration(parse_duration(text)?),
        List => Value::List(if text.is_empty() { vec![] } else { vec![text.to_string()] }),
        Credential => Value::List(vec![text.to_string()]),
    })
}

fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Str | List | Credential => "string",
        Bool => "bool",
        Int => "int",
        Duration => "duration",
    }
}

/// Parse `args` (without the program name) with the environment `env` (a lookup, so tests
/// need not touch the process's).
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Parsed, Stop> {
    let mut p = Parsed {
        values: BTreeMap::new(),
        on_cli: BTreeSet::new(),
        in_env: BTreeSet::new(),
        env_only: BTreeMap::new(),
        notices: Vec::new(),
    };
    // Defaults, then the environment (env.go: the new name, then each alias that is set).
    for f in FLAGS {
        let default = match f.kind {
            List if !f.default.is_empty() => Value::List(vec![f.default.to_string()]),
            List | Credential => Value::List(vec![]),
            k => parse_value(k, f.default).expect("the defaults parse"),
        };
        p.values.insert(f.name, default);
        if let Some((name, text)) = from_env(f.env, env, &mut p.notices) {
            let value = match f.kind {
                List => Ok(Value::List(text.split(':').filter(|s| !s.is_empty()).map(String::from).collect())),
                Credential => Ok(Value::List(vec![text.clone()])),
                k => parse_value(k, &text),
            }
            .map_err(|e| Stop::Fatal(format!("FATAL: invalid {} env {name}={text:?}: {e}", kind_word(f.kind))))?;
            p.values.insert(f.name, value);
            p.in_env.insert(f.name);
        }
    }
    for (key, names) in ENV_ONLY {
        if let Some((_, text)) = from_env(names, env, &mut p.notices) {
            p.env_only.insert(key, text);
        }
    }
    // The command line.
    let mut lists_replaced = BTreeSet::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        let (f, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let f = if name == "__?" { find("help") } else { find(name) };
            (f.ok_or_else(|| Stop::Usage(format!("unknown flag: --{name}")))?, inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().expect("not empty");
            let rest = &short[c.len_utf8()..];
            let f = if c == '?' {
                find("help")
            } else {
                FLAGS.iter().find(|f| f.short == Some(c) && !matches!(f.support, Support::Deprecated(_)))
            };
            let f = f.ok_or_else(|| Stop::Usage(format!("unknown shorthand flag: '{c}' in {arg}")))?;
            let inline = match rest.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if rest.is_empty() => None,
                None => Some(rest.to_string()),
            };
            (f, inline)
        } else {
            // Not a flag: git-sync ignores it.
            continue;
        };
        let text = match (f.kind, inline) {
            (_, Some(v)) => v,
            (Bool, None) => "true".to_string(),
            (_, None) => match args.get(i) {
                Some(v) => {
                    i += 1;
                    v.clone()
                }
                None => return Err(Stop::Usage(format!("flag needs an argument: --{}", f.name))),
            },
        };
        let value = parse_value(f.kind, &text)
            .map_err(|e| Stop::Usage(format!("invalid argument {text:?} for \"--{}\" flag: {e}", f.name)))?;
        if let Support::Deprecated(notice) = f.support {
            p.notices.push(format!("Flag --{} has been deprecated, {notice}", f.name));
        }
        match (f.kind, value) {
            (List | Credential, Value::List(new)) => {
                let replace = f.kind == List && lists_replaced.insert(f.name);
                let Some(Value::List(old)) = p.values.get_mut(f.name) else { unreachable!("a list flag") };
                if replace {
                    old.clear();
                }
                old.extend(new);
            }
            (_, v) => {
                p.values.insert(f.name, v);
            }
        }
        p.on_cli.insert(f.name);
    }
    Ok(p)
}

/// The value of the first of `names` that is set, every later alias that is set overriding it,
/// with git-sync's notices for the older names.
fn from_env(
    names: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
    notices: &mut Vec<String>,
) -> Option<(String, String)> {
    let (first, aliases) = names.split_first()?;
    let mut found: Option<(String, String)> = env(first).map(|v| (first.to_string(), v));
    for alias in aliases {
        if let Some(v) = env(alias) {
            notices.push(format!("env ${alias} has been deprecated, use ${first} instead"));
            if let Some((prev, _)) = &found {
                notices.push(format!("env ${prev} was overridden by ${alias}"));
            }
            found = Some((alias.to_string(), v));
        }
    }
    found
}

/// `--help`: git-sync's flags with their environment names and defaults, and what treesync
/// does differently.
pub fn help(program: &str) -> String {
    let mut out = format!(
        "{program}: keep ROOT/LINK pointing at a checkout of a git ref, a drop-in for kubernetes/git-sync v4\n\
         that brings each new commit in at the cost of the diff (treesync {}).\n\n\
         USAGE\n    {program} --repo=URL --root=DIR [OPTIONS]\n\n\
         OPTIONS (a flag wins over its environment variables, which win over the default)\n",
        env!("CARGO_PKG_VERSION")
    );
    for f in FLAGS.iter().filter(|f| !matches!(f.support, Support::Deprecated(_))) {
        let short = f.short.map(|c| format!("-{c}, ")).unwrap_or_default();
        let value = match f.kind {
            Bool => String::new(),
            Int => " <int>".into(),
            Duration => " <duration>".into(),
            _ => " <string>".into(),
        };
        out.push_str(&format!("\n    {short}--{}{value}\n            {}", f.name, f.help));
        if !f.default.is_empty() && f.default != "false" && f.default != "0" {
            out.push_str(&format!(" (default: {})", f.default));
        }
        out.push('\n');
        if !f.env.is_empty() {
            out.push_str(&format!("            env: ${}\n", f.env.join(", $")));
        }
        match f.support {
            Support::Differs(d) => out.push_str(&format!("            treesync: {d}\n")),
            Support::Refused(r) => out.push_str(&format!("            treesync: refused: {r}\n")),
            _ => {}
        }
    }
    out.push_str(
        "\nENVIRONMENT VARIABLES\n\n    GITSYNC_PASSWORD\n            the password or personal access token to use for git auth (prefer --password-file)\n\n\
         See docs/git-sync.md for every flag's status, the layout and how to migrate.\n",
    );
    out
}

/// The table of every flag for `docs/git-sync.md`: flag, environment names, default, and
/// treesync's support (a test keeps the document equal to it).
pub fn markdown_table() -> String {
    let mut out = String::from("| flag | environment | default | treesync |\n|---|---|---|---|\n");
    for f in FLAGS.iter().filter(|f| !matches!(f.support, Support::Deprecated(_))) {
        let name = match f.short {
            Some(c) => format!("`-{c}`, `--{}`", f.name),
            None => format!("`--{}`", f.name),
        };
        let env = if f.env.is_empty() {
            "—".to_string()
        } else {
            f.env.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", ")
        };
        let default = if f.default.is_empty() { "—".to_string() } else { format!("`{}`", f.default) };
        let support = match f.support {
            Support::Same => "same".to_string(),
            Support::Differs(d) => format!("same, except: {d}"),
            Support::Refused(r) => format!("**refused**: {r}"),
            Support::Deprecated(_) => unreachable!("filtered"),
        };
        out.push_str(&format!("| {name} | {env} | {default} | {support} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_env_and_command_line_in_git_syncs_order() {
        let p = parse(&args(&[]), &env_of(&[])).expect("parses");
        assert_eq!(p.int("depth"), 1);
        assert_eq!(p.duration("period"), Duration::from_secs(10));
        assert_eq!(p.str("ref"), "HEAD");
        assert!(p.bool("ssh-known-hosts"));
        assert_eq!(p.list("ssh-key-file"), ["/etc/git-secret/ssh"]);

        let env = env_of(&[("GITSYNC_PERIOD", "2s"), ("GIT_SYNC_PERIOD", "3s"), ("GITSYNC_DEPTH", "0x10")]);
        let p = parse(&args(&["--depth", "5"]), &env).expect("parses");
        // The legacy name wins over GITSYNC_*; the command line over both.
        assert_eq!(p.duration("period"), Duration::from_secs(3));
        assert_eq!(p.int("depth"), 5);
        assert!(p.notices.iter().any(|n| n == "env $GIT_SYNC_PERIOD has been deprecated, use $GITSYNC_PERIOD instead"));
        assert!(p.notices.iter().any(|n| n == "env $GITSYNC_PERIOD was overridden by $GIT_SYNC_PERIOD"));
    }

    #[test]
    fn flag_forms() {
        let p =
            parse(&args(&["--one-time", "ignored", "-v", "3", "--period=100ms", "--http-metrics=false"]), &env_of(&[]))
                .expect("parses");
        assert!(p.bool("one-time"));
        assert_eq!(p.int("verbose"), 3);
        assert_eq!(p.duration("period"), Duration::from_millis(100));
        assert!(!p.bool("http-metrics"));
        let p = parse(&args(&["-v5"]), &env_of(&[])).expect("parses");
        assert_eq!(p.int("verbose"), 5);
        let p = parse(&args(&["--ssh-key-file", "a", "--ssh-key-file=b"]), &env_of(&[("GIT_SSH_KEY_FILE", "x:y")]))
            .expect("parses");
        assert_eq!(p.list("ssh-key-file"), ["a", "b"]);
        let p = parse(&args(&["--credential", "{}"]), &env_of(&[("GITSYNC_CREDENTIAL", "[]")])).expect("parses");
        assert_eq!(p.list("credential"), ["[]", "{}"]);
    }

    #[test]
    fn errors_and_their_exit_classes() {
        assert_eq!(
            parse(&args(&["--nope"]), &env_of(&[])).expect_err("refused"),
            Stop::Usage("unknown flag: --nope".into())
        );
        assert!(matches!(parse(&args(&["--depth", "x"]), &env_of(&[])), Err(Stop::Usage(_))));
        assert!(matches!(parse(&args(&["--repo"]), &env_of(&[])), Err(Stop::Usage(_))));
        let e = parse(&args(&["--help"]), &env_of(&[("GITSYNC_PERIOD", "10")])).expect_err("refused");
        assert_eq!(
            e,
            Stop::Fatal(
                "FATAL: invalid duration env GITSYNC_PERIOD=\"10\": time: missing unit in duration \"10\"".into()
            )
        );
    }

    #[test]
    fn every_flag_is_declared_once_and_documented() {
        let mut names = BTreeSet::new();
        for f in FLAGS {
            assert!(names.insert(f.name), "--{} declared twice", f.name);
            if !matches!(f.support, Support::Deprecated(_)) {
                assert!(!f.help.is_empty(), "--{} has no help", f.name);
            }
        }
        let help = help("git-sync");
        for f in FLAGS.iter().filter(|f| !matches!(f.support, Support::Deprecated(_))) {
            assert!(help.contains(&format!("--{}", f.name)), "--{} missing from --help", f.name);
        }
        assert!(!help.contains("--sync-hook-command"));
    }

    #[test]
    fn docs_list_every_flag_as_declared() {
        let doc = include_str!("../../../docs/git-sync.md");
        let table = markdown_table();
        assert!(
            doc.contains(&table),
            "docs/git-sync.md's flag table is not the declared one; put this between its markers:\n{table}"
        );
    }
}
