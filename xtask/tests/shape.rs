//! The shape the code keeps (issue 31): no import circle between the files of a crate, and no
//! source file past 900 lines outside tests. Both read the checkout as text; neither builds.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate is `xtask/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

/// `docs/imports.py` (described in docs/architecture.md) finds no strongly connected component
/// of more than one file in any crate's `src/`.
#[test]
fn no_import_circle_between_files() {
    let out = Command::new("python3")
        .arg(root().join("docs/imports.py"))
        .current_dir(root())
        .output()
        .expect("python3 runs (Debian: apt-get install python3)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "docs/imports.py found import circles:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("crates/core/src"), "docs/imports.py read no crate:\n{text}");
}

/// Every `.rs` file below a `src/` of the workspace, and not a test module, in `dir`.
fn sources(dir: &Path, in_src: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if !["target", "vendor", ".git", "tests", "fixtures", "node_modules"].contains(&name.as_str()) {
                sources(&path, in_src || name == "src", out);
            }
        } else if in_src && name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// No source file is over 900 lines (test modules — `tests.rs`, `tests/` — aside): a file that
/// grows past it is cut along its concerns.
#[test]
fn no_source_file_over_900_lines() {
    let mut files = Vec::new();
    sources(&root(), false, &mut files);
    assert!(files.len() > 100, "found only {} source files under {}", files.len(), root().display());
    let mut long: Vec<(usize, String)> = files
        .iter()
        .map(|f| {
            let lines = std::fs::read_to_string(f).map_or(0, |t| t.lines().count());
            (lines, f.strip_prefix(root()).unwrap_or(f).display().to_string())
        })
        .filter(|(n, _)| *n > 900)
        .collect();
    long.sort();
    assert!(long.is_empty(), "source files over 900 lines (cut them along their concerns): {long:?}");
}
