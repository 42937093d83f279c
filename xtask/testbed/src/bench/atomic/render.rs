//! The Markdown tables of `cargo xtask bench atomic`: times with ratios to the non-atomic
//! update, then disk use.

use std::fmt::Write as _;

use super::chain;
use super::model::{Case, Config, Figures};
use crate::measure::fmt_time;

/// The header, the time table and the disk table.
pub(super) fn tables(c: &Config, f: &Figures) -> String {
    let (m, a, d) = chain::split(c.changed);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "N = {} files in {} directories; every commit of the chain changes K = {} paths ({m} modified, {a} added, \
         {d} deleted). treesync: the first two syncs (C0, then C0→C1) once each, then the median of {} updates \
         (C2 … C{}); `--atomic` runs with `--keep 2 --grace 0`, so each update brings the generation retired at the \
         update before (two commits behind) up to date. The git-sync way: the median of {} updates on the local \
         tmpfs and {} on the NAS. Local: everything on a tmpfs. NAS: the slow FUSE filesystem \
         (`treesync_testkit::slowfs`), {} per metadata request, kernel caches off (like NFS `actimeo=0`), 128 \
         server threads, backing directory on tmpfs; FUSE requests as the filesystem counts them (FORGETs not \
         included; the requests of the median run). The repository stays on the local tmpfs for every tool. Every \
         final tree was compared with `git archive`. {} cores.\n",
        c.files,
        c.files / 100,
        c.changed,
        c.runs,
        c.runs + 1,
        c.runs,
        c.nas_git_runs.clamp(1, c.runs),
        fmt_time(c.latency),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let _ = writeln!(
        md,
        "| testbed | case | tool | wall time | ÷ non-atomic treesync | FUSE requests | ops applied | requests by kind | note |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---|---|");
    let mut beds: Vec<&str> = Vec::new();
    for r in &f.rows {
        if !beds.contains(&r.bed.as_str()) {
            beds.push(&r.bed);
        }
    }
    let dash = || "–".to_string();
    for bed in &beds {
        for case in [Case::Update, Case::First, Case::Second] {
            let anchor = f.rows.iter().find(|r| r.bed == *bed && r.case == case && r.anchor);
            for r in f.rows.iter().filter(|r| r.bed == *bed && r.case == case) {
                let ratio = match anchor {
                    Some(a) if a.time > std::time::Duration::ZERO => {
                        let x = r.time.as_secs_f64() / a.time.as_secs_f64();
                        if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.2}") }
                    }
                    _ => dash(),
                };
                let case_name = match case {
                    Case::Update => format!("update, K = {} (steady state)", c.changed),
                    Case::First => format!("first sync (C0, {} files)", c.files),
                    Case::Second => "second sync (C0→C1)".to_string(),
                };
                let tool = if r.tool.starts_with("treesync") { format!("`{}`", r.tool) } else { r.tool.clone() };
                let _ = writeln!(
                    md,
                    "| {bed} | {case_name} | {tool} | {} | {ratio} | {} | {} | {} | {} |",
                    fmt_time(r.time),
                    r.requests.map(thousands).unwrap_or_else(dash),
                    r.applied.map(thousands).unwrap_or_else(dash),
                    if r.kinds.is_empty() { dash() } else { r.kinds.clone() },
                    r.note
                );
            }
        }
    }
    let _ = writeln!(
        md,
        "\nDisk used, as `du -sk` reports it (KiB; a hard link shared by two generations counted once) and \
         `du -sk --count-links` (every link counted, as if each generation were a full copy), measured after the \
         last update (NAS: in the backing directory, the same files).\n"
    );
    let _ = writeln!(md, "| testbed | what | `du -sk` | `du -sk --count-links` | `du -sk` ÷ two full worktrees |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|");
    for bed in &beds {
        let reference = f.disk.iter().find(|r| r.bed == *bed && r.reference);
        for r in f.disk.iter().filter(|r| r.bed == *bed) {
            let ratio = match reference {
                Some(x) if x.kib > 0 => format!("{:.2}", r.kib as f64 / x.kib as f64),
                _ => dash(),
            };
            let _ = writeln!(
                md,
                "| {bed} | {} | {} KiB | {} KiB | {ratio} |",
                r.what,
                thousands(r.kib),
                thousands(r.kib_all_links)
            );
        }
    }
    md
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_are_separated_by_commas() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
