//! The crash campaign: `treesync sync` killed with SIGKILL at random moments, during initial
//! checkouts and incremental syncs (adds, deletes, renames, file↔directory changes); after
//! every kill the next sync must complete and the target must equal `git archive`. A
//! [`Campaign`] can pass more arguments to every sync (`--atomic --grace 0`) and then also
//! check, after each kill and before the next run, that the target is still a whole tree: the
//! commit it held before the kill or the one being synced to (or nothing, for a first sync).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::history::{self, Entry, Model};
use crate::{BareRepo, Rng, tree};

/// What a campaign did.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Trials run.
    pub trials: u64,
    /// Kills that landed while the sync was running.
    pub killed_mid_sync: u64,
    /// Kills that came after the sync had already finished.
    pub finished_before_kill: u64,
    /// Of the mid-sync kills, how many left a journal that `status` reported as interrupted
    /// (or, with `--atomic`, a generation it reported as being prepared).
    pub reported_interrupted: u64,
    /// Initial checkouts among the trials.
    pub initial: u64,
    /// Of the kills, how many left the target holding the commit it held before the kill
    /// (checked only with [`Campaign::whole_after_kill`]).
    pub whole_old: u64,
    /// … holding the commit the killed sync was going to (checked likewise).
    pub whole_new: u64,
    /// Of the kills that landed while the sync was running, how many came after it had switched
    /// the target to the new commit (its cleanup, or its exit, was cut short; checked likewise,
    /// counted only when the old and new commits differ).
    pub killed_after_switch: u64,
    /// … with no target at all, a first sync killed before its switch (checked likewise).
    pub missing_after_kill: u64,
    /// Failures (must be zero): a description each.
    pub failures: Vec<String>,
}

/// How a campaign runs its syncs.
#[derive(Debug, Clone)]
pub struct Campaign {
    /// More arguments for every `treesync sync` (e.g. `--atomic --grace 0`).
    pub sync_args: Vec<String>,
    /// Files in the bulk area of every commit ([`campaign_history`] has 1,500).
    pub bulk: usize,
    /// After each kill, before the next run, the target must be missing (a first sync) or
    /// equal `git archive` of the commit it held before the kill or of the one the killed sync
    /// was going to, with no temporaries: what `--atomic` promises.
    pub whole_after_kill: bool,
}

impl Campaign {
    /// The classic campaign: syncs in place, 1,500 bulk files.
    pub fn in_place() -> Self {
        Campaign { sync_args: Vec::new(), bulk: 1500, whole_after_kill: false }
    }

    /// `sync --atomic --grace 0 --switch SWITCH` (`auto`, `symlink` or `exchange`) on trees of
    /// `bulk` bulk files, checking the target is whole after every kill.
    pub fn atomic(switch: &str, bulk: usize) -> Self {
        Campaign {
            sync_args: ["--atomic", "--grace", "0", "--switch", switch].map(String::from).to_vec(),
            bulk,
            whole_after_kill: true,
        }
    }
}

/// A history for the campaign: a bulky first commit, then changes of every kind.
pub fn campaign_history(seed: u64) -> Vec<Model> {
    campaign_history_of(seed, 1500)
}

/// [`campaign_history`] with `bulk` files in the bulk area (at least 15).
pub fn campaign_history_of(seed: u64, bulk: usize) -> Vec<Model> {
    let mut trees = history::random_history(seed, 6);
    for t in trees.iter_mut() {
        for i in 0..bulk {
            t.insert(
                &format!("bulk/d{}/f{i}", i % 15),
                Entry::File { content: format!("{i}\n").repeat(20).into_bytes(), executable: i % 9 == 0 },
            );
        }
    }
    // A file↔directory flip of the bulk area between commits 2 and 3.
    trees[3].remove_dir("bulk/d3");
    trees[3].insert("bulk/d3", Entry::File { content: b"now a file\n".to_vec(), executable: false });
    trees[4].remove_dir("bulk/d4");
    trees
}

fn treesync(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

/// Run `trials` kill-and-recover trials with the `treesync` binary `bin`.
pub fn run(bin: &Path, trials: u64, seed: u64) -> Stats {
    run_campaign(bin, trials, seed, &Campaign::in_place())
}

/// Run `trials` kill-and-recover trials of `campaign` with the `treesync` binary `bin`.
pub fn run_campaign(bin: &Path, trials: u64, seed: u64, campaign: &Campaign) -> Stats {
    let bare = BareRepo::new();
    let trees = campaign_history_of(seed, campaign.bulk);
    let commits = history::import(&bare.path, "main", &trees);
    let mut expected: Vec<Option<std::collections::BTreeMap<String, tree::Node>>> = vec![None; commits.len()];
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng::new(seed);
    let mut stats = Stats::default();
    let mut target: PathBuf = dir.path().join("t0");
    // The commit the current target holds (when the last run completed).
    let mut held: Option<usize> = None;
    // How long an undisturbed sync takes, to spread the kills over it.
    let t = Instant::now();
    let o = treesync(bin)
        .args(["sync", "-q", "--jobs", "1", "--batch", "1", "--repo"])
        .arg(&bare.path)
        .args(["--ref", &commits[0], "--target"])
        .arg(dir.path().join("probe"))
        .args(&campaign.sync_args)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let full = t.elapsed().max(Duration::from_millis(20));
    // And an incremental one (with --atomic the first of them copies the generation), so the
    // kills of a campaign that checks the target after each also land late in such a sync:
    // around its switch and in its cleanup.
    let t = Instant::now();
    let o = treesync(bin)
        .args(["sync", "-q", "--jobs", "1", "--batch", "1", "--repo"])
        .arg(&bare.path)
        .args(["--ref", &commits[commits.len() - 1], "--target"])
        .arg(dir.path().join("probe"))
        .args(&campaign.sync_args)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let incremental = t.elapsed();
    for trial in 0..trials {
        stats.trials += 1;
        // Every 5th trial starts from an empty target (initial checkout).
        if trial % 5 == 0 {
            target = dir.path().join(format!("t{trial}"));
            stats.initial += 1;
        }
        let to = rng.below(commits.len());
        let mut child = treesync(bin)
            // One op at a time, so the kill lands between ops as often as inside one.
            .args(["sync", "-q", "--jobs", "1", "--batch", "1", "--repo"])
            .arg(&bare.path)
            .args(["--ref", &commits[to], "--target"])
            .arg(&target)
            .args(&campaign.sync_args)
            .spawn()
            .expect("spawn");
        // Incremental syncs take a few milliseconds, initial checkouts much longer: half the
        // kills come within the first 15 ms, the others anywhere in an initial checkout (with
        // the whole target checked after each kill: a third each, the last third anywhere in
        // an incremental sync).
        let u = rng.below(10_000) as f64 / 10_000.0;
        let delay = match rng.below(6) {
            0 | 1 if campaign.whole_after_kill => incremental.mul_f64(u),
            0..=2 => Duration::from_micros((15_000.0 * u) as u64),
            _ => full.mul_f64(u),
        };
        std::thread::sleep(delay);
        let killed = child.kill().is_ok();
        let status = child.wait().expect("reaped");
        let mid = killed && status.code().is_none();
        if mid {
            stats.killed_mid_sync += 1;
            let o = treesync(bin)
                .args(["status", "--json", "--target"])
                .arg(&target)
                .stdout(Stdio::piped())
                .output()
                .expect("status");
            let out = String::from_utf8_lossy(&o.stdout);
            // An interrupted journal, or (with --atomic) a generation left being prepared.
            if out.contains("\"to_commit\"")
                || out.contains("\"preparing\": true")
                || out.contains("\"preparing\":true")
            {
                stats.reported_interrupted += 1;
            }
        } else {
            stats.finished_before_kill += 1;
        }
        if campaign.whole_after_kill {
            let mut expect = |i: usize| -> std::collections::BTreeMap<String, tree::Node> {
                expected[i]
                    .get_or_insert_with(|| {
                        let d = dir.path().join(format!("expected{i}"));
                        bare.archive(&commits[i], &d);
                        tree::read_dir(&d)
                    })
                    .clone()
            };
            let old = if trial % 5 == 0 { None } else { held };
            match whole(&target) {
                None if old.is_none() => stats.missing_after_kill += 1,
                None => stats.failures.push(format!(
                    "trial {trial}: after the kill (delay {delay:?}) the target holding commit {old:?} is gone"
                )),
                Some(actual) => {
                    let temporaries =
                        actual.keys().any(|k| k.rsplit('/').next().is_some_and(|n| n.starts_with(".treesync-tmp.")));
                    if old.is_some_and(|o| actual == expect(o)) && !temporaries {
                        stats.whole_old += 1;
                    } else if actual == expect(to) && !temporaries {
                        stats.whole_new += 1;
                        if mid && old.is_some() {
                            stats.killed_after_switch += 1;
                        }
                    } else {
                        let d = tree::diff(&expect(to), &actual).unwrap_or_else(|| "  temporaries left in it\n".into());
                        stats.failures.push(format!(
                            "trial {trial}: after the kill (delay {delay:?}) of a sync from commit {old:?} to {to}, the target is neither whole commit; against {to}:\n{d}"
                        ));
                    }
                }
            }
        }
        // The next run completes, to the same commit or another one.
        let next = if rng.percent(50) { to } else { rng.below(commits.len()) };
        let o = treesync(bin)
            .args(["sync", "-q", "--repo"])
            .arg(&bare.path)
            .args(["--ref", &commits[next], "--target"])
            .arg(&target)
            .output()
            .expect("sync");
        if !o.status.success() {
            stats
                .failures
                .push(format!("trial {trial}: the sync after the kill failed: {}", String::from_utf8_lossy(&o.stderr)));
            continue;
        }
        let exp = expected[next].get_or_insert_with(|| {
            let d = dir.path().join(format!("expected{next}"));
            bare.archive(&commits[next], &d);
            tree::read_dir(&d)
        });
        let actual = tree::read_dir(&target);
        held = Some(next);
        if let Some(d) = tree::diff(exp, &actual) {
            stats.failures.push(format!(
                "trial {trial}: after the kill (delay {delay:?}) and a sync to commit {next}, the target differs:\n{d}"
            ));
        }
        if actual.keys().any(|k| k.rsplit('/').next().is_some_and(|n| n.starts_with(".treesync-tmp."))) {
            stats.failures.push(format!("trial {trial}: temporaries left behind"));
        }
    }
    stats
}

/// The tree the target shows, read through whatever it resolves to; `None` when there is
/// nothing at the target path.
fn whole(target: &Path) -> Option<std::collections::BTreeMap<String, tree::Node>> {
    std::fs::metadata(target).is_ok().then(|| tree::read_dir(target))
}
