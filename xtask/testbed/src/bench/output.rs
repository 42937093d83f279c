//! Where a benchmark's results go (its section of BENCHMARKS.md, the flag its Reproduce line
//! names) and which treesync binary it measures.

use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::util::run_status;

pub fn write_section(path: &Path, name: &str, title: &str, block: &str) -> Result<(), String> {
    let start = format!("<!-- bench:{name}:start -->");
    let end = format!("<!-- bench:{name}:end -->");
    let existing = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{start}\n{block}{end}");
    let new = match (existing.find(&start), existing.find(&end)) {
        (Some(s), Some(e)) if e > s => format!("{}{block}{}", &existing[..s], &existing[e + end.len()..]),
        _ => format!("{existing}\n## {title}\n\n{block}\n"),
    };
    std::fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}

/// Write `block` as section `name` of the checkout's BENCHMARKS.md ([`write_section`]).
pub(super) fn bench_md(root: &Path, name: &str, title: &str, block: &str) -> Result<(), String> {
    write_section(&root.join("BENCHMARKS.md"), name, title, block)
}

/// ` --treesync PATH` (relative to the checkout) for a Reproduce line, or nothing.
pub(super) fn treesync_flag(given: &Option<PathBuf>, root: &Path) -> String {
    match given {
        Some(path) => format!(" --treesync {}", path.strip_prefix(root).unwrap_or(path).display()),
        None => String::new(),
    }
}

/// The treesync binary a benchmark measures: `given` (`--treesync PATH`), else a release build
/// of this checkout, built now.
pub(crate) fn treesync_binary(root: &std::path::Path, given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return Ok(path);
    }
    eprintln!("building treesync (release)…");
    run_status(Command::new("cargo").current_dir(root).args(["build", "--release", "--quiet", "-p", "treesync-cli"]))?;
    Ok(root.join("target/release/treesync"))
}
