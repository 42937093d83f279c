//! The one declaration of git-sync's flags ([`FLAGS`]): name, environment names, type,
//! default, meaning, and how treesync supports each.

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
