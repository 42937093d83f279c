//! `treesync`: keep a read-only working tree in sync with a git repository without scanning it.

mod generate;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::CommandFactory;
use clap::{Args, Parser, Subcommand, ValueEnum};
use treesync_core::{Backend, Repo, apply, backend, sync};

mod config;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  2  error (bad repository or revision, I/O error, usage error); the message says what to do
  3  another treesync holds the target's lock; try again later
  4  refused: the target holds files treesync did not write (see --force), the tree
     contains an entry that must never be written (e.g. `..` or `.git`), it is deeper
     than 4096 levels or larger than --max-entries / --max-bytes (a tree bomb), or
     something other than treesync's own folder is at TARGET/.treesync (e.g. a symlink)";

/// Keep a read-only working tree in sync with a git repository, touching only what changed.
///
/// treesync remembers which tree it last wrote into the target (in TARGET/.treesync/), diffs
/// that tree against the new commit inside the object database, and applies only the
/// difference. Unlike `git checkout` it never stats the unchanged files of the tree, so an
/// update costs the same on a 100-file tree and a 100,000-file tree on a slow NAS.
#[derive(Parser)]
#[command(name = "treesync", version, after_help = EXIT_CODES, after_long_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log what happens to stderr: -v plans and results, -vv phases and budgets, -vvv every
    /// directory lookup. RUST_LOG (e.g. `treesync=debug`, `treesync::nfs=trace,info`)
    /// overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// The config file naming mirrors (default: $XDG_CONFIG_HOME/treesync/treesync.toml, else
    /// ~/.config/treesync/treesync.toml). See docs/config.md.
    #[arg(long, value_name = "PATH", global = true)]
    config: Option<PathBuf>,
}

/// Which mirrors of the config file a command acts on (instead of --repo/--ref/--target).
#[derive(Args, Clone, Default)]
struct Pick {
    /// A mirror named in the config file: its repo, ref, target and options (flags given here
    /// override the file's options).
    #[arg(value_name = "MIRROR")]
    mirror: Option<String>,
    /// Every mirror of the config file.
    #[arg(long, conflicts_with = "mirror")]
    all: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Bring the target to a commit of the repository.
    ///
    /// The first sync writes the whole tree; later ones apply only the difference to the
    /// tree written last. An interrupted sync is finished by the next one. The backend follows
    /// the target: s3 for URLs, nfs for directories on network mounts (NFS, SMB, FUSE network
    /// filesystems: lookups serialized, writes adaptive), local otherwise.
    ///
    /// Example:
    ///   treesync sync --repo /srv/git/site.git --ref main --target /mnt/nas/site
    #[command(after_help = EXIT_CODES)]
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
    #[command(after_help = VERIFY_EXIT_CODES)]
    Verify(VerifyArgs),
    /// Keep the target following a ref: sync every new commit, verify on a schedule.
    ///
    /// Polls the ref (a loose ref file and packed-refs; never the target) every --interval,
    /// logs one line per update, retries failures with backoff, and stops cleanly on SIGINT or
    /// SIGTERM: the batches in flight finish and the journal records where it stopped.
    ///
    /// Example:
    ///   treesync watch --repo /srv/git/site.git --ref main --target /mnt/nas/site --interval 5s --verify-every 24h
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
struct Source {
    /// The git repository: a bare repository, a .git directory, or a working tree holding one.
    #[arg(long, value_name = "PATH", required_unless_present_any = ["mirror", "all"])]
    repo: Option<PathBuf>,
    /// The revision to sync: branch, tag, commit id (full or short), or an expression like main~3.
    #[arg(long = "ref", value_name = "REV", required_unless_present_any = ["mirror", "all"])]
    rev: Option<String>,
}

impl Source {
    fn repo(&self) -> &std::path::Path {
        self.repo.as_deref().expect("clap or the config file sets --repo")
    }
    fn rev(&self) -> &str {
        self.rev.as_deref().expect("clap or the config file sets --ref")
    }
}

#[derive(Args, Clone)]
struct TargetArgs {
    /// Where to keep the tree: a directory (created if missing; its parent must exist), an
    /// object-store URL (s3://BUCKET/PREFIX, file:///DIR, memory://), or an NFS export reached
    /// by the built-in NFSv3 client, no mount needed:
    /// `nfs://HOST[:PORT]/EXPORT/PATH[?mountport=N&nfsport=N&uid=N&gid=N&inflight=N&timeout=S]`.
    #[arg(long = "target", value_name = "DIR|URL", required_unless_present_any = ["mirror", "all"])]
    target_arg: Option<String>,
    /// Storage backend. `auto` infers it from the target: s3 for URLs; for directories nfs on
    /// NFS, SMB/CIFS and FUSE network mounts (from /proc/self/mountinfo), local otherwise.
    #[arg(long, value_enum, default_value_t = BackendKind::Auto)]
    backend: BackendKind,
    /// Operations in flight at once (default: the backend's policy: 8 batches for local,
    /// 32 PUTs for s3, adaptive writes for nfs).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// nfs: metadata lookups in flight (directory probes; the stat calls of verify). Network
    /// filesystems serialize lookups in the kernel, so more rarely helps.
    #[arg(long, value_name = "N", help_heading = "Network filesystems (--backend nfs)")]
    lookup_jobs: Option<usize>,
    /// nfs: writes (creates, renames, removals) in flight: a number, or `auto` to adapt to the
    /// latency the server shows (grows while throughput rises, backs off when latency climbs).
    #[arg(long, value_name = "N|auto", value_parser = parse_write_jobs, help_heading = "Network filesystems (--backend nfs)")]
    write_jobs: Option<treesync::WriteJobs>,
    /// Operations per batch (default: the backend's policy, 64 for local).
    #[arg(long, value_name = "N", hide_short_help = true)]
    batch: Option<usize>,
    /// fsync every file before it is renamed into place (slower; survives power loss).
    #[arg(long)]
    fsync: bool,
    /// S3 endpoint, e.g. http://127.0.0.1:9000 (default: $AWS_ENDPOINT_URL or AWS).
    #[arg(long, value_name = "URL", help_heading = "Object storage")]
    endpoint: Option<String>,
    /// S3 region (default: $AWS_REGION, else us-east-1).
    #[arg(long, value_name = "REGION", help_heading = "Object storage")]
    region: Option<String>,
    /// Allow a plain-HTTP endpoint (local test servers).
    #[arg(long, help_heading = "Object storage")]
    allow_http: bool,
}

impl TargetArgs {
    fn target(&self) -> &str {
        self.target_arg.as_deref().expect("clap or the config file sets --target")
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum BackendKind {
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

/// How large a plan may get before it is refused (see `treesync_core::plan::Limits`).
#[derive(Args, Clone, Default)]
struct LimitArgs {
    /// Refuse a tree that needs more than N ops (directories, files and symlinks to create,
    /// change or remove): a tree bomb expands a few KB of shared subtrees into millions of
    /// paths. Checked while planning, before anything is written [default: 20000000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Limits")]
    max_entries: Option<u64>,
    /// Refuse a plan that writes more than SIZE of file content, e.g. 500GiB, 2TiB (powers of
    /// 1024; KB, MB, GB, TB are powers of 1000) [default: 1TiB].
    #[arg(long, value_name = "SIZE", value_parser = config::parse_size, help_heading = "Limits")]
    max_bytes: Option<u64>,
}

impl LimitArgs {
    fn limits(&self) -> treesync_core::plan::Limits {
        let default = treesync_core::plan::Limits::default();
        treesync_core::plan::Limits {
            max_entries: self.max_entries.unwrap_or(default.max_entries),
            max_bytes: self.max_bytes.unwrap_or(default.max_bytes),
        }
    }

    /// A mirror's limits, where the command line did not set them.
    fn fill(&mut self, m: &config::Mirror) {
        self.max_entries = self.max_entries.or(m.max_entries);
        self.max_bytes = self.max_bytes.or(m.max_bytes);
    }
}

fn parse_write_jobs(s: &str) -> Result<treesync::WriteJobs, String> {
    match s {
        "auto" => Ok(treesync::WriteJobs::Auto),
        n => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(treesync::WriteJobs::Fixed)
            .ok_or_else(|| format!("{s:?} is neither a number of writes in flight (1, 8, 32, …) nor `auto`")),
    }
}

#[derive(Args, Clone)]
struct SyncArgs {
    #[command(flatten)]
    pick: Pick,
    #[command(flatten)]
    source: Source,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// Take the target over: make it exactly the tree and remove everything the tree does not
    /// have, scanning it once. On a target treesync did not write, the tree is written there;
    /// on a managed one, it is compared with the commit (stat data proves what it can, the rest
    /// is hashed) and only what differs is rewritten — the way out of a damaged state file or a
    /// synced commit that is no longer in the repository. Says how many entries it removes and
    /// writes over, with the first paths. Never on /, your home directory or the repository.
    #[arg(long)]
    force: bool,
    /// Only say what would be done.
    #[arg(long)]
    dry_run: bool,
    /// Print the outcome as JSON on stdout (no progress bar).
    #[arg(long)]
    json: bool,
    /// No progress bar and no summary line.
    #[arg(long, short)]
    quiet: bool,
    /// The target is a git clone (see `adopt`): keep its .git/index and HEAD consistent with
    /// what was synced, so `git status` there stays clean and `git pull` keeps working.
    #[arg(long)]
    git_worktree: bool,
    /// Object stores have no locks: an unfinished sync of another process counts as running
    /// for 10 minutes (unless it ran on this host and its process is gone). This takes over
    /// at once.
    #[arg(long)]
    break_lock: bool,
    /// When another treesync holds the target's lock (a sync, or `verify --repair` of a
    /// `watch`), wait up to this long for it instead of exiting with 3 (e.g. 10m in a hook).
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse)]
    wait: Option<std::time::Duration>,
}

#[derive(Args, Clone)]
struct PlanArgs {
    #[command(flatten)]
    pick: Pick,
    #[command(flatten)]
    source: Source,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// Plan a takeover (see `sync --force`): of a target treesync did not write, or of a
    /// managed one by comparing it with the commit once; lists what it removes and writes over.
    #[arg(long)]
    force: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct StatusArgs {
    #[command(flatten)]
    pick: Pick,
    #[command(flatten)]
    target: TargetArgs,
    /// Print the status as JSON.
    #[arg(long)]
    json: bool,
}

const VERIFY_EXIT_CODES: &str = "\
Exit codes:
  0  the target holds exactly the synced tree (after --repair: it does now)
  1  drift was found (and not repaired)
  2  error
  3  (--repair) another treesync holds the target's lock; try again later
  4  refused: the synced tree is deeper than 4096 levels or larger than --max-entries, or
     something other than treesync's own folder is at TARGET/.treesync";

#[derive(Clone, Copy, ValueEnum)]
enum LevelArg {
    /// Existence, type, exec bit and size.
    Quick,
    /// Also content: hash only files whose stat data (or S3 ETag) does not prove them.
    Stat,
    /// Hash every file.
    Full,
}

#[derive(Args, Clone)]
struct VerifyArgs {
    #[command(flatten)]
    pick: Pick,
    /// The git repository the target was synced from.
    #[arg(long, value_name = "PATH", required_unless_present_any = ["mirror", "all"])]
    repo: Option<PathBuf>,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// How thoroughly to compare.
    #[arg(long, value_enum, default_value_t = LevelArg::Stat)]
    level: LevelArg,
    /// Rewrite drifted files, restore missing ones, fix modes (through the same executor).
    #[arg(long)]
    repair: bool,
    /// With --repair: also remove files and directories the tree does not have.
    #[arg(long, requires = "repair")]
    delete_extra: bool,
    /// With --repair: list the repair's ops instead of running them.
    #[arg(long, requires = "repair")]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AdoptArgs {
    /// The git working tree (a clone) to take over.
    #[arg(long, value_name = "DIR")]
    target: PathBuf,
    /// Check the clone and say what would be recorded, writing nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn run_adopt(args: AdoptArgs) -> anyhow::Result<ExitCode> {
    use treesync_core::state::{SyncState, Synced, VERSION, now_unix};
    let (resolved, entries) = treesync_core::gitworktree::adopt(&args.target)?;
    let backend = treesync_backend_local::LocalBackend::new(&args.target, Default::default());
    let rt = runtime()?;
    let report = |verb: &str| -> anyhow::Result<()> {
        if args.json {
            let out = serde_json::json!({
                "target": args.target.display().to_string(),
                "commit": resolved.commit.to_string(),
                "tree": resolved.tree.to_string(),
                "index_entries": entries,
                "dry_run": args.dry_run,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            println!(
                "{verb} {} at commit {} ({entries} index entries, no file read); the next sync is incremental. `treesync verify` proves the files match.",
                args.target.display(),
                short(&resolved.commit)
            );
        }
        Ok(())
    };
    if args.dry_run {
        let state = rt.block_on(backend.load_state())?;
        if let Some(bytes) = state {
            let s = treesync_core::state::SyncState::parse(&bytes)?;
            anyhow::ensure!(
                s.synced.is_none() && s.in_progress.is_none(),
                "{} is already managed by treesync (state in .treesync/state); nothing to adopt",
                args.target.display()
            );
        }
        report("would adopt")?;
        return Ok(ExitCode::SUCCESS);
    }
    rt.block_on(async {
        let _lock =
            if backend.capabilities().exclusive_lock { Some(backend.lock(&sync::holder()).await?) } else { None };
        if let Some(bytes) = backend.load_state().await? {
            let s = SyncState::parse(&bytes)?;
            if s.synced.is_some() || s.in_progress.is_some() {
                anyhow::bail!(
                    "{} is already managed by treesync (state in .treesync/state); nothing to adopt",
                    args.target.display()
                );
            }
        }
        // The clone's files are written while the lock is held, like every write of a sync.
        treesync_core::gitworktree::exclude_state_dir(&args.target)?;
        let state = SyncState {
            version: VERSION,
            synced: Some(Synced { commit: resolved.commit, tree: resolved.tree, at_unix: now_unix() }),
            in_progress: None,
            backend: "local".into(),
        };
        backend.store_state(&state.to_bytes()).await?;
        anyhow::Ok(())
    })?;
    report("adopted")?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Clone)]
struct WatchArgs {
    #[command(flatten)]
    pick: Pick,
    #[command(flatten)]
    source: Source,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// How often to look at the ref (e.g. 500ms, 5s, 1m) [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse)]
    interval: Option<std::time::Duration>,
    /// Run `verify` (stat level) this often (e.g. 24h); off by default.
    #[arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse)]
    verify_every: Option<std::time::Duration>,
    /// With --verify-every: repair drift that verify finds.
    #[arg(long)]
    repair: bool,
    /// One JSON object per line and event on stdout (watching, synced, verified, repaired,
    /// error, stopped) instead of log lines; see docs/json.md.
    #[arg(long)]
    json: bool,
}

/// Watch one target, or every mirror at once (one task each, one process).
fn run_watch(runs: Vec<(Option<String>, WatchArgs)>) -> anyhow::Result<ExitCode> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let rt = runtime()?;
    let results = rt.block_on(async {
        let flag = interrupt.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            flag.store(true, Ordering::SeqCst);
        });
        futures::future::join_all(runs.into_iter().map(|(name, args)| watch_one(name, args, interrupt.clone()))).await
    });
    let mut code = 0;
    for r in results {
        if let Err(e) = r {
            eprintln!("treesync: error: {}", error_text(&e));
            code = code.max(exit_code(&e));
        }
    }
    eprintln!("{} stopped", treesync_core::duration::rfc3339(std::time::SystemTime::now()));
    Ok(ExitCode::from(code))
}

async fn watch_one(name: Option<String>, args: WatchArgs, interrupt: Arc<AtomicBool>) -> anyhow::Result<()> {
    use treesync_core::verify;
    let tag = name.as_ref().map(|n| format!("[{n}] ")).unwrap_or_default();
    // One line per event: text for people (stderr for lifecycle, stdout for results), or JSON
    // objects on stdout with --json.
    let emit = |event: &str, mut fields: serde_json::Value, text: String, to_stderr: bool| {
        if args.json {
            fields["at"] = treesync_core::duration::rfc3339(std::time::SystemTime::now()).into();
            fields["mirror"] = name.clone().into();
            fields["event"] = event.into();
            println!("{fields}");
        } else if to_stderr {
            eprintln!("{} {tag}{text}", treesync_core::duration::rfc3339(std::time::SystemTime::now()));
        } else {
            println!("{} {tag}{text}", treesync_core::duration::rfc3339(std::time::SystemTime::now()));
        }
    };
    let interval = args.interval.unwrap_or(std::time::Duration::from_secs(5));
    let repo = Repo::open(args.source.repo()).with_context(|| format!("{tag}opening the repository"))?;
    let chosen = make_backend(&args.target).with_context(|| format!("{tag}opening the target"))?;
    let backend = chosen.backend.clone();
    let options = sync::Options {
        apply: apply::Options { jobs: args.target.jobs, batch: args.target.batch },
        backend_name: chosen.label(),
        limits: args.limits.limits(),
        ..Default::default()
    };
    emit(
        "watching",
        serde_json::json!({
            "rev": args.source.rev(),
            "repo": args.source.repo().display().to_string(),
            "target": backend.to_string(),
            "interval_secs": interval.as_secs_f64(),
        }),
        format!(
            "watching {} of {} for {backend} every {:?}",
            args.source.rev(),
            args.source.repo().display(),
            interval
        ),
        true,
    );
    let mut last: Option<treesync_core::ObjectId> = None;
    let mut backoff = interval;
    let mut last_verify = std::time::Instant::now();
    while !interrupt.load(Ordering::SeqCst) {
        let step: anyhow::Result<()> = async {
            let to = repo.resolve(args.source.rev())?;
            if last != Some(to.commit) {
                let out = sync::sync(&repo, args.source.rev(), &*backend, &options, &|_| {}, &interrupt).await?;
                if out.applied.total() > 0 || out.resumed.is_some() || last.is_none() {
                    let from = out.from.map(|s| short(&s.commit)).unwrap_or_else(|| "nothing".into());
                    emit(
                        "synced",
                        serde_json::json!({ "outcome": &out }),
                        format!(
                            "synced {from} -> {}: {}, {} in {:.2}s",
                            short(&out.commit),
                            out.applied,
                            human_bytes(out.applied.bytes),
                            out.elapsed.as_secs_f64()
                        ),
                        false,
                    );
                }
                last = Some(out.commit);
            }
            if let Some(every) = args.verify_every
                && last_verify.elapsed() >= every
            {
                last_verify = std::time::Instant::now();
                // With --repair, compare and repair under the target's lock and journal, like a
                // sync: never a repair planned against a tree that a sync replaced meanwhile.
                let (report, repaired) = if args.repair {
                    let repair = sync::RepairOptions { sync: options.clone(), ..Default::default() };
                    let out = sync::repair(&repo, &*backend, &repair, &|_| {}, &interrupt).await?;
                    (out.report, out.applied)
                } else {
                    (verify::verify_with(&repo, &*backend, verify::Level::Stat, options.limits).await?, None)
                };
                let text = if report.is_clean() {
                    format!("verify: clean ({} entries, {} hashed)", report.expected, report.hashed)
                } else {
                    format!(
                        "verify: DRIFT in {} paths, first: {}",
                        report.drift.len(),
                        treesync_core::path::quote(report.drift[0].path())
                    )
                };
                emit("verified", serde_json::json!({ "report": &report, "clean": report.is_clean() }), text, false);
                if let Some(done) = repaired {
                    emit("repaired", serde_json::json!({ "repaired": done }), format!("repaired: {done}"), false);
                }
            }
            Ok(())
        }
        .await;
        let wait = match step {
            Ok(()) => {
                backoff = interval;
                interval
            }
            Err(e) if interrupt.load(Ordering::SeqCst) => {
                emit(
                    "stopping",
                    serde_json::json!({ "message": one_line(&e) }),
                    format!("stopping: {}", one_line(&e)),
                    true,
                );
                break;
            }
            Err(e) => {
                emit(
                    "error",
                    serde_json::json!({ "message": one_line(&e), "retry_in_secs": backoff.as_secs_f64() }),
                    format!("error: {}; retrying in {:?}", one_line(&e), backoff),
                    true,
                );
                let w = backoff;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(300));
                w
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline && !interrupt.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50).min(wait)).await;
        }
    }
    Ok(())
}

fn error_text(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !msg.contains(&text) {
            msg.push_str(if msg.is_empty() { "" } else { ": " });
            msg.push_str(&text);
        }
    }
    msg
}

/// [`error_text`] on one line, for logs.
fn one_line(e: &anyhow::Error) -> String {
    error_text(e).replace('\n', " ")
}

/// Die quietly on a closed pipe (`treesync plan | head`), like other Unix tools, instead of
/// panicking on the next print.
#[allow(unsafe_code)]
fn restore_sigpipe() {
    // SAFETY: setting a signal's disposition to the default at startup, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("treesync: error: {}", error_text(&e));

            ExitCode::from(exit_code(&e))
        }
    }
}

/// Logs on stderr, warnings only unless -v or RUST_LOG ask for more.
fn init_logging(verbose: u8) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or_else(|e| {
            eprintln!("treesync: warning: ignoring RUST_LOG={spec:?}: {e} (use e.g. treesync=debug or info)");
            Targets::new().with_default(level)
        }),
        _ => Targets::new().with_target("treesync", level).with_default(LevelFilter::WARN.min(level)),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbose >= 2);
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter)).try_init();
}

fn exit_code(e: &anyhow::Error) -> u8 {
    use treesync_core::verify;
    for cause in e.chain() {
        let target = if let Some(e) = cause.downcast_ref::<sync::Error>() {
            match e {
                sync::Error::Unmanaged { .. } => return 4,
                sync::Error::Plan(e) | sync::Error::Verify(verify::Error::Plan(e)) if refused(e) => return 4,
                sync::Error::Backend(b) | sync::Error::Verify(verify::Error::Backend(b)) => b,
                _ => return 2,
            }
        } else if let Some(e) = cause.downcast_ref::<verify::Error>() {
            match e {
                verify::Error::Plan(e) if refused(e) => return 4,
                verify::Error::Backend(b) => b,
                _ => return 2,
            }
        } else if let Some(b) = cause.downcast_ref::<backend::Error>() {
            b
        } else {
            continue;
        };
        return match target {
            backend::Error::Locked { .. } | backend::Error::Conflict { .. } => 3,
            backend::Error::StateFolder { .. } => 4,
            _ => 2,
        };
    }
    2
}

/// A tree refused before anything is written: an entry that must never be written, names
/// that collide on the target, a tree too deep or too large.
fn refused(e: &treesync_core::plan::Error) -> bool {
    use treesync_core::plan::Error;
    matches!(e, Error::Unsafe(_) | Error::CaseCollision { .. } | Error::TooLarge { .. })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // Blocking filesystem work runs on tokio's blocking pool; the async side is light, so one
    // thread drives it (and a sync of ten files starts no worker threads it does not need).
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// Which backend serves a target, and why (for `status`, the state file and logs).
type Chosen = treesync::Opened;

/// Open the target as the library's front door does ([`treesync::open`]), with the flags.
fn make_backend(args: &TargetArgs) -> anyhow::Result<Chosen> {
    let options = treesync::OpenOptions {
        backend: args.backend.into(),
        jobs: args.jobs,
        batch: args.batch,
        write_jobs: args.write_jobs,
        lookup_jobs: args.lookup_jobs,
        fsync: args.fsync,
        s3: treesync_backend_s3::Config {
            endpoint: args.endpoint.clone(),
            region: args.region.clone(),
            allow_http: args.allow_http,
            ..Default::default()
        },
    };
    Ok(treesync::open(args.target(), &options)?)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let cfg = cli.config;
    match cli.command {
        Command::Sync(args) => {
            let pick = args.pick.clone();
            each(
                expand(&cfg, &pick, args, |a, m| {
                    fill(&mut a.source, &mut a.target, m);
                    a.limits.fill(m);
                })?,
                run_sync,
            )
        }
        Command::Plan(args) => {
            let pick = args.pick.clone();
            each(
                expand(&cfg, &pick, args, |a, m| {
                    fill(&mut a.source, &mut a.target, m);
                    a.limits.fill(m);
                })?,
                run_plan,
            )
        }
        Command::Status(args) => {
            let pick = args.pick.clone();
            let runs = expand(&cfg, &pick, args, |a, m| fill_target(&mut a.target, m))?;
            if pick.all {
                return run_status_all(runs);
            }
            each(runs, run_status)
        }
        Command::Verify(args) => {
            let pick = args.pick.clone();
            let runs = expand(&cfg, &pick, args, |a, m| {
                a.repo = Some(m.repo.clone());
                fill_target(&mut a.target, m);
                a.limits.fill(m);
            })?;
            each_code(runs, run_verify)
        }
        Command::Watch(args) => {
            let pick = args.pick.clone();
            run_watch(expand(&cfg, &pick, args, |a, m| {
                fill(&mut a.source, &mut a.target, m);
                a.limits.fill(m);
                a.interval = a.interval.or(Some(m.interval));
                a.verify_every = a.verify_every.or(m.verify_every);
                a.repair |= m.repair;
            })?)
        }
        Command::Adopt(args) => run_adopt(args),
        Command::Generate(args) => generate::run(Cli::command(), &args.what, &args.out_dir).map(|()| ExitCode::SUCCESS),
    }
}

/// The invocations a command stands for: itself, or one per mirror of the config file.
fn expand<A: Clone>(
    config_path: &Option<PathBuf>,
    pick: &Pick,
    args: A,
    fill: impl Fn(&mut A, &config::Mirror),
) -> anyhow::Result<Vec<(Option<String>, A)>> {
    if pick.mirror.is_none() && !pick.all {
        return Ok(vec![(None, args)]);
    }
    let path = config_path.clone().or_else(config::default_path).context(
        "no config file to read mirrors from: pass --config PATH (the default needs $XDG_CONFIG_HOME or $HOME)",
    )?;
    let cfg = config::load(&path)?;
    let mirrors: Vec<&config::Mirror> = match &pick.mirror {
        Some(name) => vec![cfg.get(name)?],
        None => cfg.mirrors.iter().collect(),
    };
    Ok(mirrors
        .into_iter()
        .map(|m| {
            let mut a = args.clone();
            fill(&mut a, m);
            (Some(m.name.clone()), a)
        })
        .collect())
}

/// A mirror's settings, where the command line did not set them.
fn fill(source: &mut Source, target: &mut TargetArgs, m: &config::Mirror) {
    source.repo = Some(m.repo.clone());
    source.rev = Some(m.rev.clone());
    fill_target(target, m);
}

/// A mirror's target and its options, where the command line did not set them.
fn fill_target(target: &mut TargetArgs, m: &config::Mirror) {
    target.target_arg = Some(m.target.clone());
    if target.backend == BackendKind::Auto {
        target.backend = match m.backend {
            config::BackendName::Auto => BackendKind::Auto,
            config::BackendName::Local => BackendKind::Local,
            config::BackendName::Nfs => BackendKind::Nfs,
            config::BackendName::S3 => BackendKind::S3,
        };
    }
    target.jobs = target.jobs.or(m.jobs);
    target.lookup_jobs = target.lookup_jobs.or(m.lookup_jobs);
    target.write_jobs = target.write_jobs.or(m.write_jobs);
    target.fsync |= m.fsync;
    target.endpoint = target.endpoint.clone().or_else(|| m.endpoint.clone());
    target.region = target.region.clone().or_else(|| m.region.clone());
    target.allow_http |= m.allow_http;
}

/// Run `f` for each invocation. One invocation: its error is the command's. Several (mirrors):
/// every one runs, errors are printed with the mirror's name, the exit code is the worst.
fn each<A>(runs: Vec<(Option<String>, A)>, f: impl Fn(A) -> anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    each_code(runs, |a| f(a).map(|()| ExitCode::SUCCESS))
}

fn each_code<A>(
    mut runs: Vec<(Option<String>, A)>,
    f: impl Fn(A) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    if runs.len() == 1 && runs[0].0.is_none() {
        let (_, a) = runs.pop().expect("one");
        return f(a);
    }
    let mut worst = 0u8;
    for (name, a) in runs {
        let name = name.unwrap_or_default();
        match f(a) {
            Ok(code) if code == ExitCode::SUCCESS => {}
            Ok(_) => worst = worst.max(1),
            Err(e) => {
                eprintln!("treesync: error: [{name}] {}", error_text(&e));
                worst = worst.max(exit_code(&e));
            }
        }
    }
    Ok(ExitCode::from(worst))
}

/// `status --all`: one line per mirror.
fn run_status_all(runs: Vec<(Option<String>, StatusArgs)>) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    let json = runs.first().is_some_and(|(_, a)| a.json);
    let mut rows = Vec::new();
    let mut worst = 0u8;
    for (name, args) in runs {
        let name = name.unwrap_or_default();
        let row = (|| -> anyhow::Result<serde_json::Value> {
            let chosen = make_backend(&args.target)?;
            let status = rt.block_on(sync::status(&*chosen.backend))?;
            let mut v = serde_json::to_value(&status)?;
            v["mirror"] = name.clone().into();
            v["target_url"] = args.target.target().into();
            v["backend"] = chosen.name.into();
            v["backend_reason"] = chosen.why.clone().into();
            Ok(v)
        })();
        match row {
            Ok(v) => rows.push(v),
            Err(e) => {
                worst = worst.max(exit_code(&e));
                rows.push(
                    serde_json::json!({"mirror": name, "target_url": args.target.target(), "error": one_line(&e)}),
                );
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::from(worst));
    }
    let now = treesync_core::state::now_unix();
    println!("{:<16} {:<7} {:<12} {:<10} {:<12} TARGET", "MIRROR", "BACKEND", "SYNCED", "AGE", "STATE");
    for r in &rows {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
        let (synced, age, state) = if let Some(e) = r.get("error") {
            ("-".to_string(), "-".to_string(), format!("ERROR: {}", s(e)))
        } else {
            let synced = r["state"]["synced"]["commit"].as_str().map(|c| c[..10.min(c.len())].to_string());
            let age = r["state"]["synced"]["at_unix"].as_u64().map(|t| human_age(now.saturating_sub(t)));
            let state = if !r["running"].is_null() {
                "running".to_string()
            } else if !r["state"]["in_progress"].is_null() {
                "INTERRUPTED".to_string()
            } else if synced.is_some() {
                "ok".to_string()
            } else {
                s(&r["target"])
            };
            (synced.unwrap_or_else(|| "-".into()), age.unwrap_or_else(|| "-".into()), state)
        };
        println!(
            "{:<16} {:<7} {:<12} {:<10} {:<12} {}",
            s(&r["mirror"]),
            r.get("backend").map(s).unwrap_or_default(),
            synced,
            age,
            state,
            s(&r["target_url"])
        );
    }
    Ok(ExitCode::from(worst))
}

fn human_age(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

fn run_verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    use treesync_core::verify::{self, Level};
    let repo = Repo::open(args.repo.as_deref().expect("clap or the config file sets --repo"))?;
    let chosen = make_backend(&args.target)?;
    let chosen_label = chosen.label();
    let backend = chosen.backend;
    let level = match args.level {
        LevelArg::Quick => Level::Quick,
        LevelArg::Stat => Level::Stat,
        LevelArg::Full => Level::Full,
    };
    let rt = runtime()?;
    let ctx = || format!("verifying {backend}");
    // A spinner on a terminal: a verify scans the whole target, which takes a while on a NAS.
    let spinner = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("verifying {backend}: scanning the target and comparing with the tree"));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    let (report, finished, repaired, after, would_repair) = if args.repair {
        // Under the target's lock and journal, like a sync (see sync::repair).
        let options = sync::RepairOptions {
            level,
            delete_extra: args.delete_extra,
            dry_run: args.dry_run,
            check_after: true,
            sync: sync::Options {
                backend_name: chosen_label.clone(),
                limits: args.limits.limits(),
                ..Default::default()
            },
        };
        let out = rt.block_on(sync::repair(&repo, &*backend, &options, &|_| {}, &AtomicBool::new(false)));
        if let Some(bar) = &spinner {
            bar.finish_and_clear();
        }
        let out = out.with_context(|| format!("repairing {backend}"))?;
        let would = (args.dry_run && !out.report.is_clean()).then_some(out.planned);
        (out.report, out.finished, out.applied, out.after, would)
    } else {
        let report = rt.block_on(verify::verify_with(&repo, &*backend, level, args.limits.limits()));
        if let Some(bar) = &spinner {
            bar.finish_and_clear();
        }
        (report.with_context(ctx)?, None, None, None, None)
    };
    if let (Some(_), false) = (would_repair, args.json) {
        let plan = verify::repair_plan(&repo, &report, args.delete_extra).with_context(ctx)?;
        print_plan(&plan);
    }
    let final_clean = after.as_ref().unwrap_or(&report).is_clean();
    if args.json {
        let mut out = serde_json::json!({
            "target": backend.to_string(),
            "report": report,
            "finished": finished,
            "repaired": repaired,
            "after_repair": after,
            "clean": final_clean,
        });
        if let Some(w) = would_repair {
            out["would_repair"] = serde_json::to_value(w)?;
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        if let Some(f) = &finished {
            println!(
                "finished the interrupted sync to {} first: {}, {}",
                short(&f.commit),
                f.applied,
                human_bytes(f.applied.bytes)
            );
        } else if report.interrupted {
            println!(
                "the journal records a sync to {} that did not finish: compared with that commit (`treesync sync` or `verify --repair` finishes it)",
                short(&report.commit)
            );
        }
        for d in &report.drift {
            let what = match d {
                verify::Drift::Missing { .. } => "missing".to_string(),
                verify::Drift::Extra { dir: true, .. } => "extra directory".into(),
                verify::Drift::Extra { .. } => "extra".into(),
                verify::Drift::TypeChanged { expected, found, .. } => format!("is a {found}, should be a {expected}"),
                verify::Drift::ModeChanged { executable: true, .. } => "should be executable".into(),
                verify::Drift::ModeChanged { .. } => "should not be executable".into(),
                verify::Drift::ContentChanged { .. } => "content differs".into(),
                verify::Drift::LinkChanged { .. } => "symlink target differs".into(),
            };
            println!("{:<40} {what}", treesync_core::path::quote(d.path()));
        }
        println!(
            "{} {}: {} entries checked at level {:?}, {} hashed, {} proven by stat data: {}",
            if report.is_clean() { "clean" } else { "DRIFT" },
            backend,
            report.expected,
            report.level,
            report.hashed,
            report.proven_by_stat,
            if report.is_clean() {
                "matches commit ".to_string() + &short(&report.commit)
            } else {
                format!("{} differences", report.drift.len())
            },
        );
        if let Some(c) = repaired {
            println!(
                "repaired: {c}; verify afterwards: {}",
                if final_clean { "clean" } else { "STILL DRIFTING (extra entries need --delete-extra)" }
            );
        }
    }
    Ok(if final_clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Refuse targets where a sync would wreck something: inside the repository's git directory
/// (always), and with `--force` (which removes everything the tree does not have) the
/// filesystem root, the home directory and the repository itself.
fn check_target_place(repo: &Repo, target: &str, force: bool) -> anyhow::Result<()> {
    use treesync_backend_nfs::detect::resolved;
    if target.contains("://") {
        return Ok(());
    }
    let t = resolved(std::path::Path::new(target));
    let git_dir = resolved(&repo.git_dir());
    anyhow::ensure!(
        !t.starts_with(&git_dir),
        "refusing to sync into {}: it is inside the repository's git directory {}, where the tree's files would mix with git's own\n  hint: choose a target directory outside {}",
        t.display(),
        git_dir.display(),
        git_dir.display()
    );
    if force {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| resolved(h.as_ref()));
        let work = repo.work_dir().map(|w| resolved(&w));
        let what = if t.parent().is_none() {
            Some("the filesystem root")
        } else if home.as_ref() == Some(&t) {
            Some("your home directory")
        } else if work.as_ref().is_some_and(|w| t == *w || w.starts_with(&t)) {
            Some("the repository's working tree (or a directory holding it)")
        } else if git_dir.starts_with(&t) {
            Some("a directory holding the repository")
        } else {
            None
        };
        if let Some(what) = what {
            anyhow::bail!(
                "refusing to take over {} with --force: it is {what}, and --force removes everything the tree does not have\n  hint: sync into a new or empty directory instead",
                t.display()
            );
        }
    }
    Ok(())
}

fn run_sync(args: SyncArgs) -> anyhow::Result<()> {
    let repo = Repo::open(args.source.repo())?;
    let chosen = make_backend(&args.target)?;
    check_target_place(&repo, args.target.target(), args.force)?;
    let backend = chosen.backend.clone();
    let options = sync::Options {
        force: args.force,
        dry_run: args.dry_run,
        apply: apply::Options { jobs: args.target.jobs, batch: args.target.batch },
        backend_name: chosen.label(),
        lease: None,
        break_lock: args.break_lock,
        lock_wait: args.wait,
        git_worktree: args.git_worktree.then(|| PathBuf::from(args.target.target())),
        limits: args.limits.limits(),
    };
    anyhow::ensure!(!args.git_worktree || chosen.name != "s3", "--git-worktree needs a directory target");
    let show_progress = !args.json && !args.quiet && std::io::stderr().is_terminal();
    let bar = show_progress.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg:24} [{bar:30}] {pos}/{len} ops, {elapsed}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar
    });
    let progress = |p: &apply::Progress<'_>| {
        if let Some(bar) = &bar {
            bar.set_length(p.ops_total);
            bar.set_position(p.ops_done);
            bar.set_message(p.phase.to_string());
        }
    };
    let interrupt = Arc::new(AtomicBool::new(false));
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        let flag = interrupt.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("treesync: interrupted; finishing the operations in flight (press Ctrl-C again to abort)");
                flag.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        sync::sync(&repo, args.source.rev(), &*backend, &options, &progress, &interrupt).await
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let outcome = outcome.with_context(|| format!("syncing {} to {}", args.source.rev(), backend))?;
    if args.json {
        let mut out = serde_json::to_value(&outcome)?;
        out["backend"] = chosen.name.into();
        out["backend_reason"] = chosen.why.clone().into();
        out["cost"] = backend.cost().into_iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(v))).collect();
        if let Some((lookups, writes)) = &chosen.gates {
            out["budgets"] = serde_json::json!({
                "lookups": lookups.limit(),
                "max_lookups_in_flight": lookups.max_in_flight(),
                "writes": if writes.is_adaptive() { "adaptive".to_string() } else { writes.limit().to_string() },
                "write_limit_final": writes.limit(),
                "write_limits": writes.history(),
                "max_writes_in_flight": writes.max_in_flight(),
            });
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else if !args.quiet {
        if let Some(r) = &outcome.resumed {
            println!("finished an interrupted sync to {}", short(&r.to_commit));
        }
        let from = outcome.from.map(|s| short(&s.commit)).unwrap_or_else(|| "nothing".into());
        let verb = if outcome.dry_run { "would sync" } else { "synced" };
        let counts = if outcome.dry_run { outcome.planned } else { outcome.applied };
        let cost: Vec<String> = backend.cost().iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!(
            "{verb} {} {from} -> {}: {counts}, {} in {:.2}s{}{}",
            backend,
            short(&outcome.commit),
            human_bytes(counts.bytes),
            outcome.elapsed.as_secs_f64(),
            if outcome.takeover { " (took over the target)" } else { "" },
            if cost.is_empty() || outcome.dry_run { String::new() } else { format!(" ({})", cost.join(", ")) },
        );
        if let Some(r) = &outcome.replaced {
            print_replaced(r, outcome.dry_run);
        }
    }
    Ok(())
}

/// What a takeover removes and writes over, with the first paths of each.
fn print_replaced(r: &sync::Replaced, dry_run: bool) {
    let list = |n: u64, first: &[Vec<u8>]| {
        let mut s: Vec<String> = first.iter().map(|p| treesync_core::path::quote(p).into_owned()).collect();
        if n > first.len() as u64 {
            s.push("…".into());
        }
        s.join(", ")
    };
    let (removes, overwrites) = if dry_run { ("removes", "writes over") } else { ("removed", "wrote over") };
    if r.removed > 0 {
        println!(
            "takeover {removes} {} entries the tree does not have: {}",
            r.removed,
            list(r.removed, &r.first_removed)
        );
    }
    if r.overwritten > 0 {
        println!(
            "takeover {overwrites} {} files that were there: {}",
            r.overwritten,
            list(r.overwritten, &r.first_overwritten)
        );
    }
}

fn run_plan(args: PlanArgs) -> anyhow::Result<()> {
    let repo = Repo::open(args.source.repo())?;
    let backend = make_backend(&args.target)?.backend;
    let rt = runtime()?;
    let prepared = rt
        .block_on(sync::prepare_with(&repo, args.source.rev(), &*backend, args.force, false, args.limits.limits()))
        .with_context(|| format!("planning {} for {}", args.source.rev(), backend))?;
    if args.json {
        let out = serde_json::json!({
            "target": backend.to_string(),
            "commit": prepared.to.commit.to_string(),
            "tree": prepared.to.tree.to_string(),
            "takeover": prepared.takeover,
            "replaced": prepared.replaced,
            "resume": prepared.resume.as_ref().map(|(_, p)| p),
            "plan": prepared.main,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let mut plans = Vec::new();
    if let Some((p, plan)) = &prepared.resume {
        println!("first finish the interrupted sync to {}:", short(&p.to_commit));
        plans.push(plan);
    }
    plans.push(&prepared.main);
    for plan in plans {
        print_plan(plan);
    }
    if let Some(r) = &prepared.replaced {
        print_replaced(r, true);
    }
    Ok(())
}

/// A plan for people: phases, ops, totals.
fn print_plan(plan: &treesync_core::Plan) {
    for phase in &plan.phases {
        println!("{} ({} ops)", phase.name, phase.ops.len());
        for op in phase.ops.iter() {
            match op {
                treesync_core::Op::Write { path, size, executable, .. } => {
                    println!(
                        "  write   {path} ({}{})",
                        human_bytes(*size),
                        if *executable { ", executable" } else { "" }
                    )
                }
                treesync_core::Op::Symlink { path, target } => {
                    println!("  symlink {path} -> {}", String::from_utf8_lossy(target))
                }
                treesync_core::Op::Chmod { path, executable, .. } => {
                    println!("  chmod   {path} ({})", if *executable { "+x" } else { "-x" })
                }
                op => println!("  {:7} {}", op.kind().name(), op.path()),
            }
        }
    }
    println!("total: {}, {}", plan.counts, human_bytes(plan.counts.bytes));
}

fn run_status(args: StatusArgs) -> anyhow::Result<()> {
    let chosen = make_backend(&args.target)?;
    let backend = chosen.backend.clone();
    let rt = runtime()?;
    let status = rt.block_on(sync::status(&*backend)).with_context(|| format!("reading the status of {backend}"))?;
    if args.json {
        let mut out = serde_json::to_value(&status)?;
        out["backend"] = chosen.name.into();
        out["backend_reason"] = chosen.why.clone().into();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("target:  {backend} ({})", status.target);
    println!("backend: {} now, because {}", chosen.name, chosen.why);
    match &status.state {
        None => println!("synced:  nothing yet"),
        Some(s) => {
            match &s.synced {
                Some(x) => println!("synced:  commit {} (tree {}) at unix time {}", x.commit, x.tree, x.at_unix),
                None => println!("synced:  nothing yet"),
            }
            println!("last sync by: {}", s.backend);
            if let Some(p) = &s.in_progress {
                println!(
                    "INTERRUPTED: a sync to commit {} started at unix time {} did not finish; the next `treesync sync` finishes it",
                    p.to_commit, p.started_unix
                );
                if let Some(h) = &p.holder {
                    println!("         it was run by {h}");
                }
            }
        }
    }
    if let Some(h) = &status.running {
        println!("running: a sync holds the lock now ({h})");
    }
    Ok(())
}

fn short(id: &treesync_core::ObjectId) -> String {
    id.to_hex_with_len(10).to_string()
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}
