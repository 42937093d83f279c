//! `cargo xtask campaign`: the long crash campaign (SIGKILL at random moments), recorded in
//! RELIABILITY.md.

use std::fmt::Write as _;
use std::process::Command;

use xtask::util::{project_root, run_status};

pub fn run(args: &[String]) -> Result<(), String> {
    let mut trials = 200u64;
    let mut seed = 7u64;
    let mut write = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--trials" => {
                trials = it.next().ok_or("--trials needs a value")?.parse().map_err(|e| format!("--trials: {e}"))?
            }
            "--seed" => seed = it.next().ok_or("--seed needs a value")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--no-write" => write = false,
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let root = project_root();
    run_status(Command::new("cargo").current_dir(&root).args(["build", "--release", "--quiet", "-p", "treesync-cli"]))?;
    let bin = root.join("target/release/treesync");
    eprintln!("campaign: {trials} trials, seed {seed}…");
    let start = std::time::Instant::now();
    let s = treesync_testkit::crash::run(&bin, trials, seed);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| trials | initial checkouts | killed mid-sync | finished before the kill | `status` reported the interruption | failures | time |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {} | {} | {:.0} s |",
        s.trials,
        s.initial,
        s.killed_mid_sync,
        s.finished_before_kill,
        s.reported_interrupted,
        s.failures.len(),
        start.elapsed().as_secs_f64()
    );
    println!("{md}");
    for f in &s.failures {
        println!("FAILURE: {f}");
    }
    if write {
        let path = root.join("RELIABILITY.md");
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let (start_m, end_m) = ("<!-- campaign:start -->", "<!-- campaign:end -->");
        let block =
            format!("{start_m}\nReproduce: `cargo xtask campaign --trials {trials} --seed {seed}`\n\n{md}{end_m}");
        let new = match (existing.find(start_m), existing.find(end_m)) {
            (Some(a), Some(b)) if b > a => format!("{}{block}{}", &existing[..a], &existing[b + end_m.len()..]),
            _ => format!("{existing}\n{block}\n"),
        };
        std::fs::write(&path, new).map_err(|e| e.to_string())?;
    }
    if s.failures.is_empty() { Ok(()) } else { Err(format!("{} failures", s.failures.len())) }
}
