//! The command line: every command, its flags and their help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{config, generate};

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
    /// Follows the ref (its loose ref file, packed-refs, HEAD, the reflog; never the target).
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
    /// Write the man pages and shell completions (for packagers; see `cargo xtask dist`).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
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
    /// Where a --repo URL is mirrored (one bare repository per URL under DIR/repos) [default:
    /// $TREESYNC_CACHE_DIR, else $XDG_CACHE_HOME/treesync, else ~/.cache/treesync; as root
    /// without $HOME: /var/cache/treesync].
    #[arg(long, value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// The revision to sync: branch, tag, commit id (full or short), or an expression like
    /// main~3. REV:PATH (as `git rev-parse` spells a directory of a commit, e.g. main:docs) syncs
    /// that directory as the target's root.
    #[arg(long = "ref", value_name = "REV|REV:PATH", required_unless_present_any = ["mirror", "all"])]
    pub(crate) rev: Option<String>,
    /// Sync only this directory of the tree, as the target's root (publish docs/ of a
    /// monorepo): the same as --ref REV:PATH, for a ref given apart (e.g. a mirror's).
    #[arg(long, value_name = "PATH")]
    pub(crate) path: Option<String>,
    /// Fill each submodule (gitlink) with its tree at the recorded commit, as `git clone
    /// --recurse-submodules` does, nested ones too. Submodule repositories are found as git
    /// finds them: in modules/NAME under the repository's git directory, or at a local URL in
    /// .gitmodules (../lib.git beside a bare repository). Without it, submodules are empty
    /// directories. Turning it on or off fills or empties them.
    #[arg(long)]
    pub(crate) recurse_submodules: bool,
    /// Sync only paths matching PATTERN (gitignore-style: `docs/`, `*.md`, `/site/**`;
    /// repeat it for more). A directory that matches brings all below it. The target's state
    /// records the patterns: changing them removes what is no longer selected and writes what
    /// now is, without reading the target. See docs/select.md.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) include: Vec<String>,
    /// Leave out paths matching PATTERN (gitignore-style, `!` re-includes; repeat it for more),
    /// after --include.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) exclude: Vec<String>,
    /// `git archive` semantics for deploys: paths with the export-ignore attribute are left
    /// out and export-subst files get their $Format:…$ placeholders expanded, as `git archive`
    /// does. See docs/export.md.
    #[arg(long)]
    pub(crate) export: bool,
    /// What files stored with Git LFS (filter=lfs in .gitattributes) are written as. content
    /// (the default): their real content, read from the repository's own LFS store
    /// (.git/lfs/objects, or lfs.storage), as `git checkout` with git-lfs writes it; treesync
    /// never downloads, so every object must be there: a missing one stops the sync before
    /// anything is written, and `git -C REPO lfs fetch --all` (or REMOTE REV) brings it.
    /// pointers: the small pointer files git stores (as a checkout with GIT_LFS_SKIP_SMUDGE=1);
    /// needs no LFS store. Changing it rewrites the LFS files.
    #[arg(long, value_name = "content|pointers")]
    pub(crate) lfs: Option<treesync_core::lfs::LfsMode>,
}

impl Source {
    /// The paths selected by --include/--exclude.
    pub(crate) fn select(&self) -> anyhow::Result<treesync_core::select::Select> {
        Ok(treesync_core::select::Select::new(&self.include, &self.exclude)?)
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
    /// Storage backend. `auto` infers it from the target: s3 for URLs; for directories nfs on
    /// NFS, SMB/CIFS and FUSE network mounts (from /proc/self/mountinfo), local otherwise.
    #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
    pub(crate) backend: BackendKind,
    /// Operations in flight at once (default: the backend's policy: 8 batches for local,
    /// 32 PUTs for s3, adaptive writes for nfs). On nfs every operation in flight is a write,
    /// so `--jobs N` is also the write budget: alone it fixes N writes in flight, with
    /// `--write-jobs auto` it is the ceiling the adaptive budget grows to, and a fixed
    /// `--write-jobs` other than N is refused.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub(crate) jobs: Option<usize>,
    /// nfs: directory lookups in flight, each directory looked up once. Default on mounts:
    /// adaptive for a sync's directory probes, starting at 8 within 1..16, and 32 threads for verify's read-only scan (every stat is a
    /// round trip; only many in flight hide it, as git's preloaded index does); nfs:// URLs: 32
    /// for both. Given, N bounds both (1: one directory at a time).
    #[arg(long, value_name = "N", value_parser = at_least_one, help_heading = "Network filesystems (--backend nfs)")]
    pub(crate) lookup_jobs: Option<usize>,
    /// nfs: writes (creates, renames, removals) in flight: a number, or `auto` (the default) to
    /// adapt to the latency the server shows (grows while throughput rises, backs off when
    /// latency climbs) up to the backend's ceiling, or up to `--jobs N` when given. A number
    /// must equal `--jobs` when both are given; `sync -vv` logs the budgets decided and
    /// `sync --json` reports them.
    #[arg(long, value_name = "N|auto", value_parser = <treesync::WriteJobs as std::str::FromStr>::from_str, help_heading = "Network filesystems (--backend nfs)")]
    pub(crate) write_jobs: Option<treesync::WriteJobs>,
    /// Operations per batch (default: the backend's policy, 64 for local).
    #[arg(long, value_name = "N", value_parser = at_least_one, hide_short_help = true)]
    pub(crate) batch: Option<usize>,
    /// fsync every file before it is renamed into place (slower; survives power loss).
    #[arg(long)]
    pub(crate) fsync: bool,
    /// S3 endpoint, e.g. http://127.0.0.1:9000 (default: $AWS_ENDPOINT_URL or AWS).
    #[arg(long, value_name = "URL", help_heading = "Object storage")]
    pub(crate) endpoint: Option<String>,
    /// S3 region (default: $AWS_REGION, else us-east-1).
    #[arg(long, value_name = "REGION", help_heading = "Object storage")]
    pub(crate) region: Option<String>,
    /// Allow a plain-HTTP endpoint (local test servers).
    #[arg(long, help_heading = "Object storage")]
    pub(crate) allow_http: bool,
}

impl TargetArgs {
    pub(crate) fn target(&self) -> &str {
        self.target_arg.as_deref().expect("clap or the config file sets --target")
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum BackendKind {
    /// Choose from the target: s3 for URLs, nfs for directories on network mounts, else local.
    Auto,
    /// Local disks (ext4, xfs, tmpfs, …): wide parallelism, atomic rename into place.
    Local,
    /// Network filesystems mounted here (NFS, SMB, sshfs, …): serialized lookups, each
    /// directory looked up once per run, adaptive write concurrency. With an nfs:// URL: the
    /// built-in NFSv3 client, many calls in flight on one connection, no mount needed.
    Nfs,
    /// Object storage through object_store (s3://, file://, memory:// URLs): concurrent PUTs,
    /// bulk deletes, conditional state writes.
    S3,
}

impl From<BackendKind> for treesync::BackendKind {
    fn from(kind: BackendKind) -> Self {
        match kind {
            BackendKind::Auto => treesync::BackendKind::Auto,
            BackendKind::Local => treesync::BackendKind::Local,
            BackendKind::Nfs => treesync::BackendKind::Nfs,
            BackendKind::S3 => treesync::BackendKind::S3,
        }
    }
}

/// `--max-entries`' help, with the default of [`treesync_core::plan::Limits`].
fn max_entries_help() -> String {
    format!(
        "Refuse a tree that needs more than N ops (directories, files and symlinks to create, change or remove): a tree bomb expands a few KB of shared subtrees into millions of paths. Checked while planning, before anything is written [default: {}]",
        treesync_core::plan::DEFAULT_MAX_ENTRIES
    )
}

/// `--max-bytes`' help, with the default of [`treesync_core::plan::Limits`].
fn max_bytes_help() -> String {
    format!(
        "Refuse a plan that writes more than SIZE of file content, e.g. 500GiB, 2TiB (powers of 1024; KB, MB, GB, TB are powers of 1000) [default: {}]",
        size_text(treesync_core::plan::DEFAULT_MAX_BYTES)
    )
}

/// A size as `--max-bytes` takes it: the largest binary unit that divides it (`1TiB`).
fn size_text(n: u64) -> String {
    let units = [(1u64 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match units.iter().find(|(unit, _)| n >= *unit && n.is_multiple_of(*unit)) {
        Some((unit, name)) => format!("{}{name}", n / unit),
        None => format!("{n}B"),
    }
}

/// A count of operations (`--jobs`, `--batch`, `--lookup-jobs`): a whole number of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (0 would run nothing)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: give a whole number of at least 1, e.g. 8")),
    }
}

/// How large a plan may get before it is refused (see `treesync_core::plan::Limits`).
#[derive(Args, Clone, Default)]
pub(crate) struct LimitArgs {
    // The help states the defaults the core enforces (`treesync_core::plan::DEFAULT_MAX_*`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Limits", help = max_entries_help())]
    pub(crate) max_entries: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = config::parse_size, help_heading = "Limits", help = max_bytes_help())]
    pub(crate) max_bytes: Option<u64>,
    /// Stop a filter driver (filter.NAME.smudge) still running after DURATION on one file (its
    /// process group is killed) and fail the sync naming the filter and the file (e.g. 30s,
    /// 1h) [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, help_heading = "Limits")]
    pub(crate) filter_timeout: Option<std::time::Duration>,
}

/// A duration longer than 0 (`--filter-timeout`).
fn positive_duration(s: &str) -> Result<std::time::Duration, String> {
    match treesync_core::duration::parse(s)? {
        d if d.is_zero() => Err("it must be longer than 0".into()),
        d => Ok(d),
    }
}

impl LimitArgs {
    pub(crate) fn limits(&self) -> treesync_core::plan::Limits {
        let default = treesync_core::plan::Limits::default();
        treesync_core::plan::Limits {
            max_entries: self.max_entries.unwrap_or(default.max_entries),
            max_bytes: self.max_bytes.unwrap_or(default.max_bytes),
            filter_timeout: self.filter_timeout.unwrap_or(default.filter_timeout),
        }
    }

    /// A mirror's limits, where the command line did not set them.
    pub(crate) fn fill(&mut self, m: &config::Mirror) {
        self.max_entries = self.max_entries.or(m.max_entries);
        self.max_bytes = self.max_bytes.or(m.max_bytes);
        self.filter_timeout = self.filter_timeout.or(m.filter_timeout);
    }
}

/// `--atomic` and its settings (sync, plan, watch).
#[derive(Args, Clone, Default)]
pub(crate) struct AtomicArgs {
    /// Keep the target in generations: each sync brings a spare generation up to date (by the
    /// diff between the tree it holds and the commit) and switches the target to it in one
    /// atomic step, so a reader that resolves the target once (cd into it, opens it, resolves
    /// the link) reads one whole commit. Needs a directory or nfs:// target; the generations
    /// live in PARENT/.NAME.treesync. Once on, later syncs keep it on. See docs/atomic.md.
    #[arg(long, help_heading = "Generations (--atomic)")]
    pub(crate) atomic: bool,
    /// Stop keeping the target in generations: it becomes a plain directory holding the current
    /// generation, synced in place from then on; retired generations are removed once past
    /// --grace.
    #[arg(long, conflicts_with = "atomic", help_heading = "Generations (--atomic)")]
    pub(crate) no_atomic: bool,
    /// How many generations to keep, the current one included [default: 2].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Generations (--atomic)")]
    pub(crate) keep: Option<u64>,
    /// A generation is neither reused nor removed until this long after it stopped being
    /// current, so readers that resolved it can finish (e.g. 30s, 10m, 0) [default: 5m]. On
    /// local disks a generation some process still holds open is skipped too.
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse, help_heading = "Generations (--atomic)")]
    pub(crate) grace: Option<std::time::Duration>,
    /// The most generations the target may have, the current one included, however fast syncs
    /// come: at the cap, with none past --grace, a sync is refused (exit 3, saying when to
    /// retry) rather than reuse a generation a reader may be in [default: --keep + 8].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Generations (--atomic)")]
    pub(crate) max_generations: Option<u64>,
    /// How the target is switched: exchange (the target stays a real directory, swapped with
    /// renameat2 RENAME_EXCHANGE; local disks), symlink (the target is a symlink replaced by a
    /// rename; any filesystem, nfs://), or auto: exchange where the filesystem can, else
    /// symlink [default: auto, then what the target uses].
    #[arg(long, value_enum, value_name = "auto|symlink|exchange", help_heading = "Generations (--atomic)")]
    pub(crate) switch: Option<SwitchArg>,
}

/// `--switch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SwitchArg {
    /// Exchange where the filesystem can, else symlink (or what the target uses already).
    Auto,
    /// A symlink replaced by a rename.
    Symlink,
    /// renameat2 RENAME_EXCHANGE of two directories.
    Exchange,
}

impl AtomicArgs {
    /// `Some(true)`: --atomic, `Some(false)`: --no-atomic, `None`: what the target is.
    pub(crate) fn wanted(&self) -> Option<bool> {
        if self.atomic {
            Some(true)
        } else if self.no_atomic {
            Some(false)
        } else {
            None
        }
    }

    /// The generations' options, around `sync`.
    pub(crate) fn options(&self, sync: treesync_core::sync::Options) -> treesync_core::generation::Options {
        use treesync_core::generation::{self, Switch};
        generation::Options {
            sync,
            keep: self.keep.map_or(generation::DEFAULT_KEEP, |k| usize::try_from(k).unwrap_or(usize::MAX)),
            grace: self.grace.unwrap_or(generation::DEFAULT_GRACE),
            max_generations: self.max_generations.map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            switch: match self.switch {
                None | Some(SwitchArg::Auto) => None,
                Some(SwitchArg::Symlink) => Some(Switch::Symlink),
                Some(SwitchArg::Exchange) => Some(Switch::Exchange),
            },
        }
    }

    /// A mirror's settings, where the command line did not set them.
    pub(crate) fn fill(&mut self, m: &config::Mirror) {
        if !self.atomic && !self.no_atomic {
            match m.atomic {
                Some(true) => self.atomic = true,
                Some(false) => self.no_atomic = true,
                None => {}
            }
        }
        self.keep = self.keep.or(m.keep);
        self.grace = self.grace.or(m.grace);
        self.max_generations = self.max_generations.or(m.max_generations);
        self.switch = self.switch.or(m.switch.map(|s| match s {
            treesync_core::generation::Switch::Symlink => SwitchArg::Symlink,
            treesync_core::generation::Switch::Exchange => SwitchArg::Exchange,
        }));
    }
}

/// `--exec-after`, `--webhook` and their settings (sync, watch).
#[derive(Args, Clone, Default)]
pub(crate) struct HookArgs {
    /// After each sync that changed the target (or was its first), run CMD with `sh -c`, with
    /// TREESYNC_COMMIT (the commit synced to), TREESYNC_PREVIOUS (the one before; empty on a
    /// first sync), TREESYNC_TARGET (--target as given), TREESYNC_CHANGED (paths created,
    /// changed or removed) and TREESYNC_MIRROR (for a mirror) in its environment. stdin is
    /// /dev/null; its output goes to stderr. Exit status 0 is success. See docs/hooks.md.
    /// Example: --exec-after 'systemctl reload nginx'
    #[arg(long, value_name = "CMD", help_heading = "Hooks")]
    pub(crate) exec_after: Option<String>,
    /// After each sync that changed the target (or was its first), POST the JSON document
    /// `sync --json` prints to URL (Content-Type: application/json); any 2xx is success.
    /// Example: --webhook https://deploy.example.com/hooks/site
    #[arg(long, value_name = "URL", help_heading = "Hooks")]
    pub(crate) webhook: Option<String>,
    /// How long one try of a hook may take: a command still running is killed (its process
    /// group), a request still unanswered is dropped, and the try counts as failed (e.g. 30s,
    /// 5m) [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse, help_heading = "Hooks")]
    pub(crate) hook_timeout: Option<std::time::Duration>,
    /// How often a failed hook is tried again, after 1s, 2s, 4s… (doubling); then it gives up
    /// for that sync. A newer sync supersedes the pending retries of an older one. A hook's
    /// failure never fails or undoes the sync: `watch` logs it and goes on, `sync` exits 5
    /// [default: 3].
    #[arg(long, value_name = "N", help_heading = "Hooks")]
    pub(crate) hook_retries: Option<u32>,
    /// The mirror's name, for TREESYNC_MIRROR (set from the config file).
    #[arg(skip)]
    pub(crate) mirror: Option<String>,
}

impl HookArgs {
    /// The hooks' options.
    pub(crate) fn options(&self) -> treesync_watch::hook::Options {
        use treesync_watch::hook;
        hook::Options {
            exec: self.exec_after.clone(),
            webhook: self.webhook.clone(),
            timeout: self.hook_timeout.unwrap_or(hook::DEFAULT_TIMEOUT),
            retries: self.hook_retries.unwrap_or(hook::DEFAULT_RETRIES),
            ..Default::default()
        }
    }

    /// A mirror's hooks, where the command line did not set them.
    pub(crate) fn fill(&mut self, m: &config::Mirror) {
        self.exec_after = self.exec_after.take().or_else(|| m.exec_after.clone());
        self.webhook = self.webhook.take().or_else(|| m.webhook.clone());
        self.mirror = Some(m.name.clone());
    }
}

#[derive(Args, Clone)]
pub(crate) struct SyncArgs {
    #[command(flatten)]
    pub(crate) pick: Pick,
    #[command(flatten)]
    pub(crate) source: Source,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) atomic: AtomicArgs,
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
    pub(crate) pick: Pick,
    #[command(flatten)]
    pub(crate) source: Source,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) atomic: AtomicArgs,
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
    /// Where a --repo URL is mirrored (as for sync).
    #[arg(long, value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
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
    pub(crate) pick: Pick,
    #[command(flatten)]
    pub(crate) source: Source,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) atomic: AtomicArgs,
    #[command(flatten)]
    pub(crate) hooks: HookArgs,
    /// When polling: how often to look at the ref (e.g. 500ms, 5s, 1m) [default: 5s]. Also the
    /// first wait before a failed step is tried again.
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse)]
    pub(crate) interval: Option<std::time::Duration>,
    /// Look at the ref every --interval instead of being woken by changes to it (inotify).
    /// For a repository that another host writes through a mount the filesystem check does not
    /// recognize. Config: poll = true.
    ///
    /// Example: treesync watch --repo /srv/git/site.git --ref main --target /srv/www/site --poll --interval 1s
    #[arg(long)]
    pub(crate) poll: bool,
    /// Run `verify` (stat level) this often (e.g. 24h); off by default.
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse)]
    pub(crate) verify_every: Option<std::time::Duration>,
    /// With --verify-every D: check one slice of the tree every D/N instead of the whole tree
    /// every D (see `verify --slice`), so a full cycle still takes D without a burst of
    /// lookups on the NAS. The position is kept in the target's .treesync/verify-slice.
    /// Config: verify_slices = N.
    ///
    /// Example (one slice an hour, the whole tree a day): treesync watch --repo /srv/git/site.git --ref main --target /mnt/nas/site --verify-every 24h --verify-slices 24
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) verify_slices: Option<u32>,
    /// With --verify-every: repair drift that verify finds.
    #[arg(long)]
    pub(crate) repair: bool,
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
