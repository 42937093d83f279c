//! Development tasks for treesync: `cargo xtask <task>`.
//!
//! `dist` and `test` live here and build without the test beds; the tasks that run the FUSE and
//! NFS test beds (bench, scale, campaign, slowfs, ganesha) are the `xtask-testbed` binary, which
//! this one builds and runs on demand (`cargo run --package xtask-testbed`).

mod deb;
mod dist;
mod image;
mod test;

use xtask::util::{exit_code, project_root};

const HELP: &str = "\
cargo xtask <task> [options]

Tasks:
  bench [local|s3|nfs|nfs-client|attributes|atomic|watch]
          Benchmark treesync against git (local), against rclone and aws s3 sync on a local
          moto server (s3), against git on the slow FUSE filesystem standing in for a NAS
          (nfs), and the built-in NFS client pipelined vs one call in flight against
          nfs-ganesha behind a delay line (nfs-client), incremental syncs with and without
          .gitattributes conversions vs git checkout (attributes), `sync --atomic` updates vs
          non-atomic ones and the git-sync way (worktree add + reset --hard + symlink flip),
          with disk use, on tmpfs and the NAS testbed (atomic), `treesync watch` from push to
          synced (events vs polling, tmpfs and the NAS testbed), one `watch --all` for many
          mirrors vs a process each, and a remote's requests on a git daemon (watch), one
          `treesync sync` process next to git checkout (update pairs A→B→A) and git rev-parse
          (a sync with nothing to do), with their syscalls (oneshot), on generated repositories;
          rewrite BENCHMARKS.md. Without a name, runs all.
          options: --files N (100000)  --runs R (5)  --s3-files N,N (20000)
                   --nfs-files N,N (20000,100000)  --nfs-initial N (2000)  --latency 1ms
                   --nfs-verify N (0: off; the first verify after an initial sync vs git status -uno)
                   --nfs-runs R (3)  --nfs-git-runs R (1)  --nfs-no-slow-git (skip preloadIndex=false)
                   --client-initial N (5000)  --client-files N (20000)
                   --client-delay-ms D (2; each way)  --client-runs R (3)
                   --attr-files N (10000)  --changed K (14; atomic, watch: paths changed per commit)
                   --oneshot-files N,N (100000; oneshot)
                   --switch MODES (auto,symlink; atomic on tmpfs)  --nas-switch MODES (auto)
                   --atomic-on local|nas|both (both)
                   --pushes P (60; watch, events)  --poll-pushes P (50; watch, --poll 5s)
                   --mirrors M (100)  --fanout-files N (2000)  --fanout-pushes P (10)
                   --watch-parts local,nas,fanout,remote (all)
                   --treesync PATH (measure this binary, no release build)
                   --dir DIR (/tmp/treesync-bench)  --no-write (print the tables only)
  bench git-sync
          kubernetes/git-sync against `treesync git-sync` (its drop-in): a repository served by
          `git daemon` on 127.0.0.1, a first sync and R pushes of 10 files, each sync a separate
          `--one-time` process of each tool with the same flags; per sync wall time, CPU, peak
          RSS, bytes written to the root (its own loop-mounted ext4) and git-server requests,
          the goals of issue 32 checked; then each tool long-running (--period): git requests
          and CPU while idle, push to link switched; rewrite BENCHMARKS.md. Root (loop devices).
          Not part of a run of all: git-sync is built beforehand from its source, offline
          (sh docs/bench/build-git-sync.sh SOURCE [REF]; the bench never downloads)
          options: --files N (100000)  --syncs R (5; pushes after the first sync)
                   --changed K (10)  --git-sync PATH (target/bench-cache/git-sync)
                   --treesync PATH (measure this binary, no release build)
                   --follow-pushes L (5; long-running mode: pushes per tool, 0 skips it)
                   --period MS (200ms; its --period)  --idle-secs S (10; idle window)
                   --only git-sync (git-sync alone, to check the harness; writes nothing)
                   --dir DIR (/tmp/treesync-bench-git-sync)  --no-write
  bench jump --jump-repo PATH --jump-from A --jump-to B
          A big jump of real history on the local disk (issue 33): treesync sync vs git
          checkout -f between two commits of a real repository (e.g. a bare clone of git/git,
          v2.26.1 and master), round trips A→B→A, `sync` before each timed run; medians per
          direction, the ratio, and the system calls of one jump of each (strace -f -c) per
          file written; rewrite BENCHMARKS.md. Not part of a run of all (it needs the repository)
          options: --runs R (5)  --dir DIR (/var/tmp/treesync-bench-jump; on the disk measured)
                   --treesync PATH (measure this binary, no release build)  --no-write
  campaign
          Kill `treesync sync` with SIGKILL at random moments, check that the next sync
          finishes the job like git archive, and record the figures in RELIABILITY.md
          options: --trials N (200)  --seed N (7)  --no-write
  test    Install what the tests need (as root on Debian: apt packages, moto[server] in the venv
          target/treesync-venv), saying what, then run every test, the API docs build and the
          dist check (the README's test command; .ci/run calls it)
          options: --no-install (only check; fail naming what provides a missing piece)
                   --dry-run (print what would be installed and run, change nothing)
                   --install-only (install, run nothing)
  scale   Large trees, measured: 100,000 and 1,000,000 files synced initially and incrementally,
          and 200,000 entries in one directory (time and peak RSS, each target compared with
          git archive; the incremental syncs and the plan are medians of R runs, A → B and B → A
          and the tree sizes taking turns; with two sizes or more, a flat-in-N table of the
          largest size's medians over the smallest's, wall and CPU); recorded in RELIABILITY.md
          options: --files N,N (100000,1000000)  --one-dir N (200000; 0: skip)  --runs R (5)
                   --treesync PATH (measure this binary, no release build)  --dir DIR  --no-write
                   --keep (keep the tmpfs and its repositories, and use them again next time)
  dist    Build the release tarball target/dist/treesync-VERSION-TARGET.tar.gz (profile dist:
          fat LTO, stripped; bin/, man pages, shell completions, licenses, docs) and
          target/dist/SHA256SUMS, then unpack it and check it: --version, the checksum, the
          man pages, the completions, a sync of HEAD compared with git archive HEAD
          options: --no-test (skip the check)
  image   Build the OCI image of `treesync git-sync`, a drop-in for git-sync's image (user and
          group 65533, HOME=/tmp, GITSYNC_ROOT=/git, /git 02775, entrypoint treesync git-sync),
          without a container daemon or registry: the dist binary, git, ssh and dash with their
          libraries taken from this Debian host's packages (checked against dpkg's md5sums), a
          CA bundle; written as the OCI layout target/dist/treesync-VERSION-image/ and the
          oci-archive target/dist/treesync-VERSION-image.oci.tar (reproducible), then loaded
          into podman (runc) and run: config, user, git and its transports, two git:// syncs
          into a mounted /git (needs root, podman and runc)
          options: --no-test (skip the podman check)  --binary PATH (put this binary in, no build)
  deb     Build the Debian package target/deb/treesync_VERSION_ARCH.deb: the binary (stripped),
          man pages, bash/zsh/fish completions, the systemd unit treesync-watch@.service (one
          instance per mirror of /etc/treesync/treesync.toml), copyright, README, deploy.md and
          examples (config, post-receive hook); Depends from dpkg-shlibdeps plus git; built with
          dpkg-deb --root-owner-group and checked with dpkg-deb --contents (docs/deploy.md)
          options: --profile release|debug|dist (release)  --binary PATH (package this binary,
                   no build; e.g. target/debug/treesync)  --out DIR (target/deb)
                   --compress xz|gzip|none (xz; gzip builds a debug binary's package faster)
  cleanup Unmount the slow filesystems and stop the nfs-ganesha testbeds a killed test process left
          behind (.ci/run calls it on exit)
  ganesha Start a private nfs-ganesha NFSv3 server on 127.0.0.1 exporting a fresh tmpfs (the NFS
          test bed, treesync_testkit::ganesha), print its nfs:// URL and the exported directory,
          and serve until SIGINT/SIGTERM (needs root, nfs-ganesha and nfs-ganesha-vfs)
          options: --delay D (none; one way, e.g. 2ms: NFS and MOUNT also served through a TCP
                   delay line, round trip about 2·D)
  slowfs --backing DIR --mount DIR
          Serve the backing DIR at the mount DIR through a slow FUSE passthrough filesystem
          (an NFS/NAS stand-in: no attribute cache, a latency per request, requests served
          concurrently) until SIGINT/SIGTERM, then unmount and print the requests by kind
          (needs /dev/fuse; root, or fusermount3)
          options: --latency D (0; per metadata request, e.g. 200us, 1ms, 0.5ms, 2s)
                   --data-latency D (0; per read/write)  --threads N (64)
                   --max-concurrent N (no limit; requests served at once, latency included)
                   --control SOCK (unix socket: `stats` answers JSON; `reset`, `record on|off`)
";

/// Tasks that run in `xtask-testbed`.
const TESTBED_TASKS: &[&str] = &["bench", "campaign", "scale", "slowfs", "ganesha", "cleanup"];

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("deb") => deb::run(&args[1..]),
        Some("dist") => dist::run(&args[1..]),
        Some("image") => image::run(&args[1..]),
        Some("test") => test::run(&args[1..]),
        Some(task) if TESTBED_TASKS.contains(&task) => return testbed(&args),
        Some("help" | "--help" | "-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown task {other:?}\n\n{HELP}")),
    };
    exit_code(result)
}

/// Build and run `xtask-testbed` with `args`, exiting as it does.
fn testbed(args: &[String]) -> std::process::ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .current_dir(project_root())
        .args(["run", "--quiet", "--package", "xtask-testbed", "--"])
        .args(args)
        .status();
    match status {
        Ok(s) if s.success() => std::process::ExitCode::SUCCESS,
        Ok(s) => std::process::ExitCode::from(s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(2)),
        Err(e) => exit_code(Err(format!("cannot run cargo to build xtask-testbed: {e}"))),
    }
}
