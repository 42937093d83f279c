//! The planting campaign (issue 29): someone who can write in a target's generations home
//! (`PARENT/.NAME.treesync`, not in `PARENT`) plants symlinks, hard links, stray files and
//! renames at random moments while `treesync sync --atomic`, `--no-atomic` and plain syncs
//! run, on a local disk, the NAS testbed or an `nfs://` export. After every run:
//!
//! * **nothing outside was written**: a directory of the attacker's (what the planted links
//!   point to, with a file they hard-linked into a generation) is byte for byte as it was;
//! * **the target never points outside**: what the target path resolves to is in `PARENT`;
//! * **not stuck**: once what was planted is removed (what the errors' hints say), a plain
//!   rerun in the same mode and a `verify --repair` succeed and the target equals `git
//!   archive` of the commit, and the attacker's directory is still untouched.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::history::{Entry, Model};
use crate::{BareRepo, Rng, tree};

/// Where a campaign runs: the target as treesync is given it, and the local path of its parent
/// directory, where the home is (on the NAS testbed, the backing directory; for `nfs://`, the
/// exported directory).
#[derive(Debug, Clone)]
pub struct Site {
    /// `PARENT/NAME`, `MOUNT/NAME` or `nfs://HOST:PORT/EXPORT/NAME`.
    pub target: String,
    /// The local path of the target's parent.
    pub parent: PathBuf,
    /// `NAME`.
    pub name: String,
    /// The switch mode of the atomic syncs (`exchange` or `symlink`).
    pub switch: &'static str,
}

/// What a campaign did.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Trials run (one treesync command with one plant each).
    pub trials: u64,
    /// Commands that succeeded while something was planted.
    pub succeeded: u64,
    /// Commands that refused or failed (a planted entry found).
    pub refused: u64,
    /// Plants made, by kind.
    pub plants: BTreeMap<&'static str, u64>,
    /// Runs after which the attacker's directory had changed (must be 0).
    pub writes_outside: u64,
    /// Runs after which the target resolved outside its parent (must be 0). In symlink mode
    /// the target is checked to be the link treesync made, to a slot's name in the home.
    pub targets_outside: u64,
    /// Symlink mode: runs after which the target's link, the one treesync made, resolved
    /// outside because the attacker replaced the current slot in the home after the switch.
    /// Readers resolve the link through the home at every open: symlink mode trusts the home
    /// (docs/atomic.md). Counted, not a failure.
    pub redirected_through_home: u64,
    /// Trials after which cleaning up what was planted and rerunning did not finish (must be 0).
    pub stuck: u64,
    /// Trials whose rerun needed the `--force` its hint offered: a state file removed by the
    /// attacker from inside a generation that became the target (writing inside a generation
    /// is writing inside the target; a plain rerun cannot know the files are treesync's).
    pub forced: u64,
    /// What each of those said.
    pub forced_why: Vec<String>,
    /// Failures (must be zero): a description each.
    pub failures: Vec<String>,
}

const PLANTS: &[&str] = &[
    "slot-symlink",
    "next-slot-symlink",
    "tmp-symlink",
    "hardlink-in-slot",
    "stray-file",
    "slot-rename",
    "state-symlink",
];

fn history(files: usize) -> Vec<Model> {
    (0..4u32)
        .map(|v| {
            let mut m = Model::default();
            for i in 0..files {
                let changed = (i as u32) % 4 == v;
                let content = if changed { format!("{i} v{v}\n") } else { format!("{i}\n") };
                m.insert(&format!("d{}/f{i}", i % 6), Entry::File { content: content.into_bytes(), executable: false });
            }
            m.insert(&format!("only{v}/x"), Entry::File { content: b"x\n".to_vec(), executable: v == 2 });
            m
        })
        .collect()
}

/// Every entry under `dir` (not following links): its relative path, kind, mode and content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
            let content = if m.is_file() {
                std::fs::read(&p).unwrap_or_default()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p).map(|t| t.into_os_string().into_encoded_bytes()).unwrap_or_default()
            } else {
                todo.push(p.clone());
                Vec::new()
            };
            out.insert(p.strip_prefix(dir).expect("beneath").to_path_buf(), (m.mode(), content));
        }
    }
    out
}

/// What differs in `dir` from its snapshot `before` (entries added, removed, or with another
/// mode or content), with `dir` put back as it was, so that one write outside is counted once
/// and named; `None` when nothing differs.
fn changed_and_restored(dir: &Path, before: &BTreeMap<PathBuf, (u32, Vec<u8>)>) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let now = snapshot(dir);
    if &now == before {
        return None;
    }
    let mut said = Vec::new();
    for (path, (mode, content)) in &now {
        match before.get(path) {
            None => said.push(format!("{} added (mode {mode:o})", path.display())),
            Some((was, _)) if was != mode => said.push(format!("{} mode {was:o} -> {mode:o}", path.display())),
            Some((_, was)) if was != content => said.push(format!("{} content changed", path.display())),
            Some(_) => {}
        }
    }
    said.extend(before.keys().filter(|p| !now.contains_key(*p)).map(|p| format!("{} removed", p.display())));
    // Put it back: what was added goes (deepest first); what differs or is gone is written
    // again (directories before what they hold: the map is in path order).
    for path in now.keys().rev().filter(|p| !before.contains_key(*p)) {
        let full = dir.join(path);
        let _ = std::fs::remove_file(&full).or_else(|_| std::fs::remove_dir_all(&full));
    }
    for (path, (mode, content)) in before.iter().filter(|(p, was)| now.get(*p) != Some(*was)) {
        let full = dir.join(path);
        if mode & 0o170000 == 0o040000 {
            let _ = std::fs::remove_file(&full);
            std::fs::create_dir_all(&full).expect("restore a directory outside");
        } else {
            let _ = std::fs::remove_file(&full).or_else(|_| std::fs::remove_dir_all(&full));
            std::fs::write(&full, content).expect("restore a file outside");
        }
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode & 0o7777)).expect("restore its mode");
    }
    Some(said.join(", "))
}

fn slots(home: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(home)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with('g') && n[1..].parse::<u64>().is_ok()
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// One plant of kind `kind` in `home`, aimed at `outside`; what it did, or `None` when there was
/// nothing to plant on (e.g. no slot yet).
fn plant(kind: &str, home: &Path, outside: &Path, n: u64, rng: &mut Rng) -> Option<String> {
    let all = slots(home);
    let dirs: Vec<&PathBuf> = all.iter().filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())).collect();
    let aside = home.join(format!("aside-{n}"));
    match kind {
        "slot-symlink" => {
            let slot = pick(rng, &dirs)?;
            std::fs::rename(&slot, &aside).ok()?;
            std::os::unix::fs::symlink(outside, &slot).ok()?;
            Some(format!("{} -> outside", slot.display()))
        }
        "next-slot-symlink" => {
            let next =
                all.iter().filter_map(|p| p.file_name()?.to_str()?[1..].parse::<u64>().ok()).max().map_or(1, |m| m + 1);
            let slot = home.join(format!("g{next}"));
            std::os::unix::fs::symlink(outside, &slot).ok()?;
            Some(format!("{} -> outside (the next slot)", slot.display()))
        }
        "tmp-symlink" => {
            let tmp = home.join("tmp");
            std::fs::rename(&tmp, &aside).ok()?;
            std::os::unix::fs::symlink(outside, &tmp).ok()?;
            Some("tmp -> outside".into())
        }
        "hardlink-in-slot" => {
            let slot = pick(rng, &dirs)?;
            let file = slot.join("d1").join("f1");
            std::fs::symlink_metadata(&file).ok()?;
            std::fs::remove_file(&file).ok()?;
            std::fs::hard_link(outside.join("precious"), &file).ok()?;
            Some(format!("{} = a hard link to outside/precious", file.display()))
        }
        "stray-file" => {
            std::fs::write(home.join(format!("stray-{n}")), b"not treesync's\n").ok()?;
            Some(format!("stray-{n}"))
        }
        "slot-rename" => {
            if dirs.len() < 2 {
                return None;
            }
            let (a, b) = (dirs[0].clone(), dirs[1].clone());
            std::fs::rename(&a, &aside).ok()?;
            std::fs::rename(&b, &a).ok()?;
            std::fs::rename(&aside, &b).ok()?;
            Some(format!("{} <-> {}", a.display(), b.display()))
        }
        "state-symlink" => {
            let slot = pick(rng, &dirs)?;
            let state = slot.join(".treesync/state");
            std::fs::symlink_metadata(&state).ok()?;
            std::fs::remove_file(&state).ok()?;
            std::os::unix::fs::symlink(outside.join("precious"), &state).ok()?;
            Some(format!("{} -> outside/precious", state.display()))
        }
        other => panic!("unknown plant {other}"),
    }
}

fn pick(rng: &mut Rng, items: &[&PathBuf]) -> Option<PathBuf> {
    (!items.is_empty()).then(|| (*rng.pick(items)).clone())
}

/// Remove what the campaign planted, as the errors' hints say: links, stray files and what was
/// moved aside in the home, links planted for state files (in a slot, or in the target once a
/// slot holding one was switched to).
fn clean(home: &Path, target: &Path) {
    let state = target.join(".treesync/state");
    if std::fs::symlink_metadata(&state).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(&state);
    }
    for e in std::fs::read_dir(home).into_iter().flatten().flatten() {
        let p = e.path();
        let n = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if m.file_type().is_symlink() || n.starts_with("stray-") {
            let _ = std::fs::remove_file(&p);
        } else if n.starts_with("aside-") {
            let _ = std::fs::remove_dir_all(&p);
        } else if m.is_dir() {
            let state = p.join(".treesync/state");
            if std::fs::symlink_metadata(&state).is_ok_and(|m| m.file_type().is_symlink()) {
                let _ = std::fs::remove_file(&state);
            }
        }
    }
    if !home.join("tmp").exists() && home.exists() {
        let _ = std::fs::create_dir(home.join("tmp"));
    }
}

/// `target` resolves within `parent` (or does not resolve at all), never into `outside`.
fn resolves_inside(target: &Path, parent: &Path, outside: &Path) -> Result<(), String> {
    let Ok(real) = std::fs::canonicalize(target) else { return Ok(()) };
    let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    let outside = std::fs::canonicalize(outside).unwrap_or_else(|_| outside.to_path_buf());
    if real.starts_with(&outside) || !real.starts_with(&parent) {
        return Err(format!("the target resolves to {}", real.display()));
    }
    Ok(())
}

fn run_cmd(bin: &Path, args: &[String]) -> Output {
    Command::new(bin).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).output().expect("treesync runs")
}

/// Run `trials` trials on `site` with the `treesync` binary `bin`; `files` files per commit.
/// `outside` is created beside the site (in `site.parent`'s parent): a directory of the
/// attacker's, outside the target's parent.
pub fn run(bin: &Path, site: &Site, outside: &Path, trials: u64, seed: u64, files: usize) -> Stats {
    let bare = BareRepo::new();
    let commits = crate::history::import(&bare.path, "main", &history(files));
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut expected: Vec<Option<BTreeMap<String, tree::Node>>> = vec![None; commits.len()];
    std::fs::create_dir_all(outside.join("sub")).expect("outside");
    std::fs::write(outside.join("precious"), b"the attacker's own file\n").expect("precious");
    std::fs::write(outside.join("sub/more"), b"more\n").expect("more");
    let before = snapshot(outside);
    let home = site.parent.join(format!(".{}.treesync", site.name));
    let local_target = site.parent.join(&site.name);
    let mut rng = Rng::new(seed);
    let mut stats = Stats::default();
    let repo = bare.path.to_string_lossy().into_owned();
    let sync_args = |mode: usize, commit: &str| -> Vec<String> {
        let mut a: Vec<String> =
            ["sync", "-q", "--jobs", "1", "--batch", "1", "--repo", &repo, "--ref", commit, "--target"]
                .map(String::from)
                .to_vec();
        a.push(site.target.clone());
        match mode {
            0 => a.extend(["--atomic", "--grace", "0", "--switch", site.switch].map(String::from)),
            1 => a.extend(["--no-atomic", "--grace", "0"].map(String::from)),
            _ => {}
        }
        a
    };
    // How long an undisturbed atomic sync takes, to spread the plants over it.
    let t = Instant::now();
    let o = run_cmd(bin, &sync_args(0, &commits[0]));
    assert!(o.status.success(), "the first sync: {}", String::from_utf8_lossy(&o.stderr));
    let o = run_cmd(bin, &sync_args(0, &commits[1]));
    assert!(o.status.success(), "the second sync: {}", String::from_utf8_lossy(&o.stderr));
    let typical = (t.elapsed() / 2).max(Duration::from_millis(5));
    // The mode the target is in: atomic (0) or plain (1, 2).
    let mut atomic = true;
    for trial in 0..trials {
        stats.trials += 1;
        // Mostly atomic syncs; now and then leave generations, and sync plainly.
        let mode = match rng.below(10) {
            0 => 1,
            1 => 2,
            _ => 0,
        };
        let to = rng.below(commits.len());
        let kind = *rng.pick(PLANTS);
        let delay = typical.mul_f64(rng.below(1000) as f64 / 800.0);
        let child = Command::new(bin)
            .args(sync_args(mode, &commits[to]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        std::thread::sleep(delay);
        let planted = plant(kind, &home, outside, trial, &mut rng);
        if planted.is_some() {
            *stats.plants.entry(kind).or_default() += 1;
        }
        let out = child.wait_with_output().expect("reaped");
        if out.status.success() {
            stats.succeeded += 1;
            atomic = match mode {
                0 => true,
                1 => false,
                _ => atomic,
            };
        } else {
            stats.refused += 1;
        }
        let what = format!(
            "trial {trial}: mode {mode}, plant {kind} {planted:?} after {delay:?}, exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        if let Some(changed) = changed_and_restored(outside, &before) {
            stats.writes_outside += 1;
            stats.failures.push(format!("{what}: the attacker's directory changed: {changed}"));
        }
        let link = std::fs::read_link(&local_target).ok();
        let made_by_treesync = link.as_ref().is_some_and(|t| {
            let t = t.to_string_lossy();
            // A relative link to one entry of the home (a slot, whatever its name: treesync
            // takes a directory it finds there as a retired generation).
            t.strip_prefix(&format!(".{}.treesync/", site.name)).is_some_and(|n| !n.is_empty() && !n.contains('/'))
        });
        match resolves_inside(&local_target, &site.parent, outside) {
            Err(_) if made_by_treesync => stats.redirected_through_home += 1,
            Err(e) => {
                stats.targets_outside += 1;
                stats.failures.push(format!("{what}: {e}"));
            }
            Ok(()) if link.is_some() && !made_by_treesync => {
                stats.targets_outside += 1;
                stats.failures.push(format!("{what}: the target is a link treesync did not make: {link:?}"));
            }
            Ok(()) => {}
        }
        // Clean up what was planted (the hints), then a plain rerun in the same mode and a
        // repair must finish: the target equals git archive.
        clean(&home, &local_target);
        let mut rerun = sync_args(if atomic { 0 } else { 2 }, &commits[to]);
        let mut o = run_cmd(bin, &rerun);
        if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--force") {
            // The hint: take it over.
            let first = String::from_utf8_lossy(&o.stderr).trim().to_string();
            rerun.push("--force".into());
            o = run_cmd(bin, &rerun);
            if o.status.success() {
                stats.forced += 1;
                stats.forced_why.push(format!("{what}: the rerun needed --force: {first}"));
            }
        }
        let repair = if o.status.success() {
            let mut v = vec!["verify".to_string(), "--repair".into(), "--level".into(), "full".into()];
            v.extend(["--repo".to_string(), repo.clone(), "--target".into(), site.target.clone()]);
            Some(run_cmd(bin, &v))
        } else {
            None
        };
        let exp = expected[to].get_or_insert_with(|| {
            let d = scratch.path().join(format!("expected{to}"));
            bare.archive(&commits[to], &d);
            tree::read_dir(&d)
        });
        let diff = tree::diff(exp, &tree::read_dir(&local_target));
        match (&o.status.success(), &repair) {
            (true, Some(r)) if r.status.success() && diff.is_none() => {}
            _ => {
                stats.stuck += 1;
                let why = match (&repair, &diff) {
                    (None, _) => format!("the rerun failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
                    (Some(r), _) if !r.status.success() => {
                        format!("verify --repair failed: {}", String::from_utf8_lossy(&r.stderr).trim())
                    }
                    (_, Some(d)) => format!("the target differs from commit {to}:\n{d}"),
                    _ => "?".into(),
                };
                stats.failures.push(format!("{what}: after cleaning up: {why}"));
                // Start the next trial from a whole target, so one failure is counted once.
                let mut v = sync_args(0, &commits[to]);
                v.push("--force".into());
                let _ = run_cmd(bin, &v);
                atomic = true;
            }
        }
        if let Some(changed) = changed_and_restored(outside, &before) {
            stats.writes_outside += 1;
            stats.failures.push(format!("{what}: the attacker's directory changed after the rerun: {changed}"));
        }
    }
    stats
}
