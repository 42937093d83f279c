//! A library consumer driving `watch` with its own event handler.
//!
//! ```sh
//! cargo run -p treesync --example watch -- REPO REV TARGET [MAX_EVENTS]
//! cargo run -p treesync --example watch -- /srv/git/site.git main /tmp/site 10
//! cargo run -p treesync --example watch            # a demo on a repository it makes itself
//! ```
//!
//! [`treesync::Place::open`] opens the target the way the binary does and decides what kind of
//! place it is (plain, or kept in generations); [`treesync::Place::watch`] then follows the
//! ref, syncing every new commit as the binary's `watch` does (with the options the settings
//! and the opened target give, budgets included), and tells each thing that happens as a typed
//! [`watch::Event`]. This handler prints the events its own way (one short line each; the
//! events are also `Serialize`, tagged by `event`, for a consumer that wants JSON) and stops
//! the watch after `MAX_EVENTS` events or on Ctrl-C, by setting the interrupt flag the watch
//! polls.
//!
//! Without arguments it makes a repository in a temporary directory, watches it into another
//! one, commits a second time when the first sync is reported, and stops after the second
//! sync: four events (`watching`, `synced`, `synced`, `stopped`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use treesync::watch::{self, Event};
use treesync::{Intent, Place, Repo, Settings, Target};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let demo_dir = tempfile::tempdir()?;
    let demo = args.is_empty();
    let (repo, rev, target, max_events) = match args.as_slice() {
        [] => {
            let repo = demo_dir.path().join("repo");
            std::fs::create_dir(&repo)?;
            git(&repo, &["init", "-q", "-b", "main"])?;
            commit(&repo, "hello.txt", "hello\n")?;
            let target = demo_dir.path().join("site");
            (repo.display().to_string(), "main".to_string(), target.display().to_string(), 3)
        }
        [repo, rev, target, rest @ ..] => {
            let max = match rest.first() {
                Some(n) => n.parse().map_err(|_| format!("MAX_EVENTS must be a number, got {n:?}"))?,
                None => usize::MAX,
            };
            (repo.clone(), rev.clone(), target.clone(), max)
        }
        _ => {
            eprintln!("usage: watch [REPO REV TARGET [MAX_EVENTS]]");
            std::process::exit(2);
        }
    };

    // The binary's policy for this target (mount detection, NFS budgets, S3 settings), and
    // whether it is kept in generations, from the settings (here: the defaults).
    let settings = Settings::default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let intent = Intent::Write(settings.generations.wanted());
    let mut place = runtime.block_on(Place::open(&Target::parse(&target)?, &settings.target.options(), intent))?;
    let repo = Repo::open(&repo)?;
    let sync = settings.sync_options(&place.opened)?;
    let generations = settings.generations.options(sync.clone());
    runtime.block_on(place.leave(&generations))?;
    let options = watch::Options { interval: Duration::from_millis(200), sync, ..Default::default() };

    let interrupt = Arc::new(AtomicBool::new(false));
    let outcome = runtime.block_on(async {
        // Ctrl-C sets the flag: the sync in flight finishes its batches, then the watch ends.
        let flag = interrupt.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                flag.store(true, Ordering::SeqCst);
            }
        });
        let mut seen = 0usize;
        let mut handler = |event: &Event| {
            seen += 1;
            println!("#{seen} {}", describe(event));
            // The demo's "push": a second commit once the first one is synced.
            if demo
                && seen == 2
                && let Err(e) = commit(Path::new(repo.path()), "second.txt", "again\n")
            {
                eprintln!("cannot commit: {e}");
                interrupt.store(true, Ordering::SeqCst);
            }
            if seen >= max_events {
                interrupt.store(true, Ordering::SeqCst);
            }
        };
        place.watch(&repo, &rev, &generations, &options, &mut handler, &interrupt).await
    });
    println!(
        "stopped: {} syncs, {} verifies, {} repairs, {} failed tries",
        outcome.synced, outcome.verified, outcome.repaired, outcome.errors
    );
    if demo {
        assert_eq!(outcome.synced, 2, "the demo syncs its two commits");
        assert!(Path::new(&target).join("second.txt").exists());
    }
    Ok(())
}

/// One short line per event, in this program's own words.
fn describe(event: &Event) -> String {
    match event {
        Event::Watching { rev, target, interval, .. } => format!("following {rev} into {target} (every {interval:?})"),
        Event::Synced { outcome } => format!(
            "now at {} ({} files written, {} removed)",
            outcome.commit.to_hex_with_len(8),
            outcome.applied.write,
            outcome.applied.unlink
        ),
        Event::Verified { clean: true, .. } => "checked: clean".into(),
        Event::Verified { report, .. } => format!("checked: {} differences", report.drift.len()),
        Event::Repaired { repaired } => format!("repaired {} ops", repaired.total()),
        Event::Error { message, retry_in, .. } => format!("failed ({message}), next try in {retry_in:?}"),
        Event::Stopping { message, .. } => format!("stopping in the middle of a step: {message}"),
        Event::Stopped => "stopped".into(),
        other => other.name().into(),
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=example", "-c", "user.email=example@example.org"])
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

fn commit(repo: &Path, file: &str, content: &str) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(repo.join(file), content)?;
    git(repo, &["add", "."])?;
    git(repo, &["commit", "-q", "-m", file])
}
