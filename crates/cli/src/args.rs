//! The command line: every command, its flags and their help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::generate;

pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  0  success
  2  error (bad repository or revision, I/O error, usage error); the message says what to do
  3  another treesync holds the target's lock, or the target has as many generations as
     --max-generations allows and none past --grace; try again later
  4  refused before anything is written: the target holds files treesync did not write
     (see --force), it is a place no sync may write or take over (the root, a home, a
     repository, a generations home), the tree contains an entry that must never be
     written (e.g. `..` or `.git`), it is deeper than 4096 levels or larger than
     --max-entries / --max-bytes (a tree bomb), the selection (--include, --exclude)
     selects no path of the commit, a submodule URL names a local repository git would
     not read (protocol.file.allow), or something other than treesync's own
     folder is at TARGET/.treesync (e.g. a symlink); with or without --atomic
  5  (sync) synced, but a hook (--exec-after, --webhook) failed every try; the target holds
     the commit, and a sync that changes nothing runs no hook";

/// Keep a read-only working tree in sync with a git repository, touching only what changed.
///
/// treesync remembers which tree it last wrote into the target (in TARGET/.treesync/), diffs
/// that tree against the new commit inside the object database, and applies only the
/// difference. Unlike `git checkout` it never stats the unchanged files of the tree, so an
/// update costs the same on a 100-file tree and a 100,000-file tree on a slow NAS.
#[derive(Parser)]
#[command(name = "treesync", version, after_help = EXIT_CODES, after_long_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log what happens to stderr: -v plans and results, -vv phases and budgets, -vvv every
    /// directory lookup. RUST_LOG (e.g. `treesync=debug`, `treesync::nfs=trace,info`)
    /// overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// The config file naming mirrors (default: $XDG_CONFIG_HOME/treesync/treesync.toml, else
    /// ~/.config/treesync/treesync.toml). See docs/config.md.
    #[arg(long, value_name = "PATH", global = true)]
    pub(crate) config: Option<PathBuf>,
}

/// Which mirrors of the config file a command acts on (instead of --repo/--ref/--target).
#[derive(Args, Clone, Default)]
pub(crate) struct Pick {
    /// A mirror named in the config file: its repo, ref, target and options (flags given here
    /// override the file's options).
    #[arg(value_name = "MIRROR")]
    pub(crate) mirror: Option<String>,
    /// Every mirror of the config file.
    #[arg(long, conflicts_with = "mirror")]
    pub(crate) all: bool,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Bring the target to a commit of the repository.
    ///
    /// The first sync writes the whole tree; later ones apply only the difference to the
    /// tree written last. An interrupted sync is finished by the next one. The backend follows
    /// the target: s3 for URLs, nfs for directories on network mounts (NFS, SMB, FUSE network
    /// filesystems: lookups serialized, writes adaptive), local otherwise.
    ///
    /// Files are written as `git checkout` writes them: the synced tree's .gitattributes (text,
    /// eol, crlf, ident, working-tree-encoding, filter drivers), info/attributes and
    /// core.autocrlf/core.eol apply; `plan --json` shows each op's conversion (docs/attributes.md).
    ///
    /// With --atomic the target is switched from one complete generation to the next in one
    /// step, so readers that resolve it once read one whole commit (docs/atomic.md).
    ///
    /// Examples:
    ///   treesync sync --repo /srv/git/site.git --ref main --target /mnt/nas/site
    ///   treesync sync --repo https://git.example.org/site.git --ref main --target /srv/www   # fetched into the cache
    ///   treesync sync --repo mono.git --ref main:docs --target /srv/docs   # only docs/, as the root
    ///   treesync sync --repo mono.git --ref main --path docs --target /srv/docs   # the same
    ///   treesync sync --repo site.git --ref main --target /srv/www --include /public/ --exclude '*.map'
    ///   treesync sync --repo app.git --ref v2.1 --target /srv/app --export --recurse-submodules
    ///   treesync sync --repo site.git --ref main --target /srv/www/site --atomic --grace 10m
    ///   treesync sync --repo site.git --ref main --target /srv/www/site --exec-after 'systemctl reload nginx'
    #[command(after_help = EXIT_CODES, verbatim_doc_comment)]
    Sync(SyncArgs),
    /// Print what `sync` would do, changing nothing.
    ///
    /// Example:
    ///   treesync plan --repo /srv/git/site.git --ref v2.1 --target /mnt/nas/site --json
    #[command(after_help = EXIT_CODES)]
    Plan(PlanArgs),
    /// Prove that the target holds exactly the synced tree; with --repair, fix what differs.
    ///
    /// Exit 0 when clean (or repaired), 1 when drift was found, 2 on error.
    ///
    /// Examples:
    ///   treesync verify --repo /srv/git/site.git --target /mnt/nas/site
    ///   treesync verify --repo /srv/git/site.git --target /mnt/nas/site --level full --repair
    #[command(after_help = VERIFY_EXIT_CODES, verbatim_doc_comment)]
    Verify(VerifyArgs),
    /// Keep the target following a ref: sync every new commit, verify on a schedule.
    ///
    /// Follows the ref (its loose ref file, packed-refs, HEAD; never the target).
    /// On a local repository it is woken by inotify as soon as a push or `git update-ref`
    /// moves the ref, and uses no CPU in between. Where events cannot see every push (a
    /// repository on NFS, SMB, FUSE or another network filesystem; no inotify; the watch
    /// limit fs.inotify.max_user_watches reached) it polls every --interval, and its first
    /// log line says why. --poll always polls. It logs one line per update, retries failures
    /// with backoff, and stops cleanly on SIGINT or SIGTERM: the batches in flight finish and
    /// the journal records where it stopped.
    ///
    /// Example:
    ///   treesync watch --repo /srv/git/site.git --ref main --target /mnt/nas/site --verify-every 24h
    ///   treesync watch --repo /srv/git/site.git --ref main --target /srv/www/site --atomic
    ///   treesync watch --repo git@git.example.org:site.git --ref main --target /srv/www --interval 10s   # one ls-refs per 10s
    ///   treesync watch --repo /mnt/nfs/site.git --ref main --target /srv/www/site --poll --interval 2s
    ///   treesync watch --repo /srv/git/site.git --ref main --target /srv/www/site --exec-after 'systemctl reload nginx'
    #[command(verbatim_doc_comment)]
    Watch(WatchArgs),
    /// Take over a working tree that git manages today, without touching its files.
    ///
    /// Reads TARGET/.git/index and HEAD to learn which commit the tree holds and records it as
    /// treesync's state, so the first sync is incremental. Refused when the index has conflicts
    /// or staged changes. Pair with `sync --git-worktree` to keep git's view consistent.
    ///
    /// Example:
    ///   treesync adopt --target /mnt/nas/site && treesync sync --repo /srv/git/site.git --ref main --target /mnt/nas/site --git-worktree
    Adopt(AdoptArgs),
    /// Show what is synced at a target, and whether a sync was interrupted or is running.
    ///
    /// Example:
    ///   treesync status --target /mnt/nas/site
    #[command(after_help = EXIT_CODES)]
    Status(StatusArgs),
    /// A drop-in for kubernetes/git-sync v4: its flags, environment, layout, hooks and metrics.
    ///
    /// ROOT/LINK is a relative symlink to ROOT/.worktrees/HASH, a git worktree of the commit,
    /// switched atomically; each new commit's worktree is made at the cost of the diff. The
    /// flags are git-sync's (`treesync git-sync --help` lists them, with what differs); the
    /// binary run under the name `git-sync` behaves the same (docs/git-sync.md).
    ///
    /// Examples:
    ///   treesync git-sync --repo https://github.com/org/site --root /git --link site --period 30s
    ///   GITSYNC_REPO=git://git.example.org/dags GITSYNC_ROOT=/git treesync git-sync --one-time
    #[command(name = "git-sync", disable_help_flag = true, verbatim_doc_comment)]
    GitSync(GitSyncArgs),
    /// Write the man pages and shell completions (for packagers; see `cargo xtask dist`).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

/// `git-sync`: its flags, parsed by git-sync's own rules (`treesync_gitsync::flags`), not clap's.
#[derive(Args, Clone)]
pub(crate) struct GitSyncArgs {
    /// git-sync's flags (see `treesync git-sync --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "FLAGS")]
    pub(crate) args: Vec<String>,
}

#[derive(Args, Clone)]
pub(crate) struct Source {
    /// The git repository: a bare repository, a .git directory, a working tree holding one, or
    /// a URL git fetches from (https://, ssh://, git://, file://, or host:path as scp spells it),
    /// e.g. --repo https://git.example.org/site.git. A URL is mirrored in a bare repository of
    /// treesync's cache (see --cache-dir): each run, and each --interval of watch, asks the
    /// server for the ref (one small request) and fetches only when it moved. With a URL, --ref
    /// names a branch, tag or full ref (optionally with ~N or :PATH), not a commit id.
    #[arg(long, value_name = "PATH|URL", required_unless_present_any = ["mirror", "all"])]
    pub(crate) repo: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) cache: treesync::settings::CacheSettings,
    /// The revision to sync: branch, tag, commit id (full or short), or an expression like
    /// main~3. REV:PATH (as `git rev-parse` spells a directory of a commit, e.g. main:docs) syncs
    /// that directory as the target's root.
    #[arg(long = "ref", value_name = "REV|REV:PATH", required_unless_present_any = ["mirror", "all"])]
    pub(crate) rev: Option<String>,
    /// Sync only this directory of the tree, as the target's root (publish docs/ of a
    /// monorepo): the same as --ref REV:PATH, for a ref given apart (e.g. a mirror's).
    #[arg(long, value_name = "PATH")]
    pub(crate) path: Option<String>,
    #[command(flatten)]
    pub(crate) content: treesync::settings::ContentSettings,
}

impl Source {
    /// The paths selected by --include/--exclude.
    pub(crate) fn select(&self) -> anyhow::Result<treesync_core::select::Select> {
        let settings = treesync::Settings { content: self.content.clone(), ..Default::default() };
        Ok(settings.select()?)
    }

    pub(crate) fn repo(&self) -> &std::path::Path {
        self.repo.as_deref().expect("clap or the config file sets --repo")
    }
    /// The revision to resolve: --ref, with --path as REV:PATH. Both naming a path is refused.
    pub(crate) fn rev(&self) -> anyhow::Result<String> {
        let rev = self.rev.as_deref().expect("clap or the config file sets --ref");
        compose_rev(rev, self.path.as_deref())
    }
}

/// `rev` with `path` as `REV:PATH`; refused when `rev` already names a path.
pub(crate) fn compose_rev(rev: &str, path: Option<&str>) -> anyhow::Result<String> {
    let Some(path) = path else { return Ok(rev.to_string()) };
    if let Some((base, inner)) = treesync_core::source::split_subtree(rev) {
        anyhow::bail!(
            "the revision {rev:?} already names a directory ({inner:?}), and --path names {path:?}: give the directory once\n  hint: --ref {base} --path {path}, or --ref {base}:{path}"
        );
    }
    Ok(format!("{rev}:{path}"))
}

#[derive(Args, Clone)]
pub(crate) struct TargetArgs {
    /// Where to keep the tree: a directory (created if missing; its parent must exist), an
    /// object-store URL (s3://BUCKET/PREFIX, file:///DIR, memory://), or an NFS export reached
    /// by the built-in NFSv3 client, no mount needed:
    /// `nfs://HOST[:PORT]/EXPORT/PATH[?mountport=N&nfsport=N&uid=N&gid=N&inflight=N&timeout=S]`.
    #[arg(long = "target", value_name = "DIR|URL", required_unless_present_any = ["mirror", "all"])]
    pub(crate) target_arg: Option<String>,
    #[command(flatten)]
    pub(crate) settings: treesync::settings::TargetSettings,
}

impl TargetArgs {
    pub(crate) fn target(&self) -> &str {
        self.target_arg.as_deref().expect("clap or the config file sets --target")
    }
}

/// `--exec-after`, `--webhook` and their settings (sync, watch).
#[derive(Args, Clone, Default)]
pub(crate) struct HookArgs {
    #[command(flatten)]
    pub(crate) settings: treesync::settings::HookSettings,
    /// The mirror's name, for TREESYNC_MIRROR (set from the config file).
    #[arg(skip)]
    pub(crate) mirror: Option<String>,
}

/// What `sync`, `plan` and `watch` sync where, and how: the mirror picked, or the flags naming
/// the repository and the target, and the settings they share.
#[derive(Args, Clone)]
pub(crate) struct SyncSpec {
    #[command(flatten)]
    pub(crate) pick: Pick,
    #[command(flatten)]
    pub(crate) source: Source,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) limits: treesync::settings::LimitSettings,
    #[command(flatten)]
    pub(crate) atomic: treesync::settings::GenerationSettings,
}

impl SyncSpec {
    /// The settings these flags set (hooks and watch's own are the commands').
    pub(crate) fn settings(&self) -> treesync::Settings {
        treesync::Settings {
            cache: self.source.cache.clone(),
            content: self.source.content.clone(),
            target: self.target.settings.clone(),
            limits: self.limits.clone(),
            generations: self.atomic.clone(),
            ..Default::default()
        }
    }
}

#[derive(Args, Clone)]
pub(crate) struct SyncArgs {
    #[command(flatten)]
    pub(crate) spec: SyncSpec,
    #[command(flatten)]
    pub(crate) hooks: HookArgs,
    /// Take the target over: make it exactly the tree and remove everything the tree does not
    /// have, scanning it once. On a target treesync did not write, the tree is written there;
    /// on a managed one, it is compared with the commit (stat data proves what it can, the rest
    /// is hashed) and only what differs is rewritten — the way out of a damaged state file or a
    /// synced commit that is no longer in the repository. Says how many entries it removes and
    /// writes over, with the first paths. Never on /, your home directory or the repository.
    #[arg(long)]
    pub(crate) force: bool,
    /// Only say what would be done.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print the outcome as JSON on stdout (no progress bar).
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bar and no summary line.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// The target is a git clone (see `adopt`): keep its .git/index and HEAD consistent with
    /// what was synced, so `git status` there stays clean and `git pull` keeps working.
    #[arg(long)]
    pub(crate) git_worktree: bool,
    /// Object stores have no locks: an unfinished sync of another process counts as running
    /// for 10 minutes (unless it ran on this host and its process is gone). This takes over
    /// at once.
    #[arg(long)]
    pub(crate) break_lock: bool,
    /// When another treesync holds the target's lock (a sync, or `verify --repair` of a
    /// `watch`), wait up to this long for it instead of exiting with 3 (e.g. 10m in a hook).
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse)]
    pub(crate) wait: Option<std::time::Duration>,
}

#[derive(Args, Clone)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) spec: SyncSpec,
    /// Plan a takeover (see `sync --force`): of a target treesync did not write, or of a
    /// managed one by comparing it with the commit once; lists what it removes and writes over.
    #[arg(long)]
    pub(crate) force: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args, Clone)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) pick: Pick,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Print the status as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) const VERIFY_EXIT_CODES: &str = "\
Exit codes:
  0  the target holds exactly the synced tree (after --repair: it does now)
  1  drift was found (and not repaired)
  2  error
  3  (--repair) another treesync holds the target's lock; try again later
  4  refused: the synced tree is deeper than 4096 levels or larger than --max-entries, or
     something other than treesync's own folder is at TARGET/.treesync";

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LevelArg {
    /// Existence, type, exec bit and size.
    Quick,
    /// Also content: hash only files whose stat data (or S3 ETag) does not prove them.
    Stat,
    /// Hash every file.
    Full,
}

/// Who decides what each file must hold (`verify --oracle`).
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OracleArg {
    /// treesync's own conversions (what a sync writes).
    Treesync,
    /// The git program: what `git checkout` writes for the synced tree (`git archive` for an
    /// --export target), made in a temporary directory.
    Git,
}

#[derive(Args, Clone)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    pub(crate) pick: Pick,
    /// The git repository the target was synced from: a path, or the URL it was synced from
    /// (its mirror in the cache is read; nothing is fetched).
    #[arg(long, value_name = "PATH|URL", required_unless_present_any = ["mirror", "all"])]
    pub(crate) repo: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) cache: treesync::settings::CacheSettings,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) limits: treesync::settings::LimitSettings,
    /// How thoroughly to compare.
    #[arg(long, value_enum, default_value_t = LevelArg::Stat)]
    pub(crate) level: LevelArg,
    /// Who judges each file's bytes. `git`: the git program writes the synced tree into a
    /// temporary directory (`git checkout-index`; `git archive` for an --export target, with
    /// the conversion settings the target's state records) and every file of the target is
    /// compared with what git wrote — a check that does not share treesync's conversion code,
    /// so it catches a file treesync converted differently from git. Implies --level full;
    /// needs git (and git-lfs for LFS content) and room for a copy of the tree in $TMPDIR.
    ///
    /// Example: treesync verify --repo /srv/git/site.git --target /srv/site --oracle git
    #[arg(long, value_enum, default_value_t = OracleArg::Treesync, conflicts_with_all = ["repair", "slice"])]
    pub(crate) oracle: OracleArg,
    /// Rewrite drifted files, restore missing ones, fix modes (through the same executor).
    #[arg(long)]
    pub(crate) repair: bool,
    /// With --repair: also remove files and directories the tree does not have.
    #[arg(long, requires = "repair")]
    pub(crate) delete_extra: bool,
    /// With --repair: list the repair's ops instead of running them.
    #[arg(long, requires = "repair")]
    pub(crate) dry_run: bool,
    /// Check one slice of the tree: K/N checks slice K of N (numbered from 1), next/N the
    /// slice after the one the last `next/N` run checked (kept in the target's
    /// .treesync/verify-slice; 1 after N). Each directory, with the files directly in it, is in
    /// exactly one slice (a hash of its path), so N runs check the whole tree, and a slice
    /// lists only its own directories. With --repair, repairs what the slice finds.
    ///
    /// Example (hourly from cron, a full cycle a day): treesync verify --repo /srv/git/site.git --target /mnt/nas/site --slice next/24
    #[arg(long, value_name = "K/N|next/N", value_parser = parse_slice)]
    pub(crate) slice: Option<treesync_core::slice::Pick>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--slice`: K/N or next/N.
fn parse_slice(s: &str) -> Result<treesync_core::slice::Pick, String> {
    s.parse().map_err(|e: treesync_core::slice::Error| e.to_string())
}

#[derive(Args)]
pub(crate) struct AdoptArgs {
    /// The git working tree (a clone) to take over.
    #[arg(long, value_name = "DIR")]
    pub(crate) target: PathBuf,
    /// Check the clone and say what would be recorded, writing nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args, Clone)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    pub(crate) spec: SyncSpec,
    #[command(flatten)]
    pub(crate) hooks: HookArgs,
    #[command(flatten)]
    pub(crate) watch: treesync::settings::WatchSettings,
    /// One JSON object per line and event on stdout (watching, synced, verified, repaired,
    /// error, stopped) instead of log lines; see docs/json.md.
    #[arg(long)]
    pub(crate) json: bool,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (per mirror: syncs, failures, ops,
    /// bytes, sync durations, lag behind the ref, the synced commit's time) and a health check at
    /// /healthz (200 when every mirror's last step succeeded, else 503 naming the others). One
    /// listener serves every mirror of `watch --all`; config: metrics_addr in [defaults]. A port
    /// alone (9273) is 127.0.0.1:9273, this host only; 0.0.0.0:9273 serves every interface. See
    /// docs/metrics.md.
    ///
    /// Example: treesync watch --all --metrics-addr 127.0.0.1:9273 && curl -s 127.0.0.1:9273/metrics
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::monitor::http::parse_addr)]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
}
