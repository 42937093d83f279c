//! `cargo xtask dist`: the release tarball. Builds `treesync` with the `dist` profile (fat LTO,
//! stripped), stages `treesync-VERSION-TARGET/` under target/dist/ with the binary, the man pages
//! and shell completions the binary renders from its own clap definition (`treesync generate`),
//! the licenses and the docs, packs it reproducibly (sorted, root-owned, commit-time mtimes),
//! writes SHA256SUMS, then unpacks the tarball afresh and checks what it holds: `--version`,
//! the checksum, the man pages, the completions and a real sync of this repository's HEAD,
//! compared with `git archive HEAD`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use xtask::util::{project_root, run_quiet, run_status};

const PACKAGE: &str = "treesync-cli";
const BIN: &str = "treesync";
const COMPLETIONS: [&str; 3] = ["treesync.bash", "_treesync", "treesync.fish"];
/// Top-level documents shipped next to bin/ (README links the other two), plus every LICENSE*.
const DOCUMENTS: [&str; 3] = ["README.md", "BENCHMARKS.md", "RELIABILITY.md"];

pub fn run(args: &[String]) -> Result<(), String> {
    let mut test = true;
    for a in args {
        match a.as_str() {
            "--no-test" => test = false,
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    let start = Instant::now();
    let root = project_root();
    let (target_dir, version) = metadata(&root)?;
    let triple = host_triple()?;
    let name = format!("{BIN}-{version}-{triple}");
    // Cargo's own output for the `dist` profile lives in target/dist/ too (treesync, deps/, …);
    // ours are the staging directory, the tarball and SHA256SUMS, which never collide with it.
    let dist = target_dir.join("dist");

    eprintln!("dist: cargo build --profile dist -p {PACKAGE}");
    let t = Instant::now();
    run_status(Command::new("cargo").current_dir(&root).args(["build", "--profile", "dist", "-p", PACKAGE]))?;
    let build_time = t.elapsed();
    let bin = dist.join(BIN);
    let bin_size = size(&bin)?;

    let stage = dist.join(&name);
    eprintln!("dist: staging {}", shown(&root, &stage));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(|e| format!("cannot remove {}: {e}", stage.display()))?;
    }
    let man_dir = stage.join("share/man/man1");
    let completion_dir = stage.join("share/completions");
    for dir in [stage.join("bin"), man_dir.clone(), completion_dir.clone()] {
        mkdir(&dir)?;
    }
    copy(&bin, &stage.join("bin").join(BIN))?;
    let staged_bin = stage.join("bin").join(BIN);
    run_quiet(Command::new(&staged_bin).arg("generate").arg("man").arg("--out-dir").arg(&man_dir))?;
    run_quiet(Command::new(&staged_bin).arg("generate").arg("completions").arg("--out-dir").arg(&completion_dir))?;
    let licenses = licenses(&root)?;
    for doc in DOCUMENTS.iter().copied().chain(licenses.iter().map(String::as_str)) {
        copy(&root.join(doc), &stage.join(doc))?;
    }
    copy_dir(&root.join("docs"), &stage.join("docs"))?;

    let tarball_name = format!("{name}.tar.gz");
    let tarball = dist.join(&tarball_name);
    eprintln!("dist: packing {}", shown(&root, &tarball));
    // Reproducible: the same tree packs to the same bytes (gzip from a pipe stores no name or time).
    let mtime = run_quiet(Command::new("git").current_dir(&root).args(["log", "-1", "--format=%ct", "HEAD"]))?;
    run_status(
        Command::new("tar")
            .current_dir(&dist)
            .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mode=u+rwX,go+rX,go-w"])
            .arg(format!("--mtime=@{}", mtime.trim()))
            .args(["-czf", &tarball_name, &name]),
    )?;
    let sums = run_quiet(Command::new("sha256sum").current_dir(&dist).arg(&tarball_name))?;
    let sums_path = dist.join("SHA256SUMS");
    std::fs::write(&sums_path, &sums).map_err(|e| format!("cannot write {}: {e}", sums_path.display()))?;
    let sha256 = sums.split_whitespace().next().unwrap_or_default().to_string();

    let checked = if test {
        eprintln!("dist: checking the tarball");
        check(Shipped {
            root: &root,
            dist: &dist,
            tarball: &tarball,
            name: &name,
            version: &version,
            licenses: &licenses,
        })
        .map_err(|e| format!("the tarball {} failed its check: {e}", shown(&root, &tarball)))?;
        "--version, SHA256SUMS, man pages, completions, sync of HEAD == git archive HEAD"
    } else {
        "nothing (--no-test)"
    };

    let tar_size = size(&tarball)?;
    println!("dist: {}", shown(&root, &tarball));
    println!("  size     {} ({tar_size} bytes); bin/{BIN} {} ({bin_size} bytes)", mib(tar_size), mib(bin_size));
    println!("  sha256   {sha256}  (in {})", shown(&root, &sums_path));
    println!("  build    {} (cargo build --profile dist); total {}", secs(build_time), secs(start.elapsed()));
    println!("  checked  {checked}");
    Ok(())
}

/// What `dist` made, to be checked: the checkout, the output directory, the tarball, the
/// package name (the tarball's top directory), the version and the license files.
#[derive(Clone, Copy)]
struct Shipped<'a> {
    root: &'a Path,
    dist: &'a Path,
    tarball: &'a Path,
    name: &'a str,
    version: &'a str,
    licenses: &'a [String],
}

/// Unpack the tarball into a fresh directory and use what it holds the way a user would.
fn check(shipped: Shipped<'_>) -> Result<(), String> {
    let tmp = std::env::temp_dir().join(format!("treesync-dist-check-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| format!("cannot remove {}: {e}", tmp.display()))?;
    }
    mkdir(&tmp)?;
    check_in(shipped, &tmp)
        .map_err(|e| format!("{e}\n(the unpacked tarball is kept in {} for a look)", tmp.display()))?;
    std::fs::remove_dir_all(&tmp).map_err(|e| format!("cannot remove {}: {e}", tmp.display()))
}

fn check_in(shipped: Shipped<'_>, tmp: &Path) -> Result<(), String> {
    let Shipped { root, dist, tarball, name, version, licenses } = shipped;
    run_status(Command::new("tar").arg("-xzf").arg(tarball).arg("-C").arg(tmp))?;
    let pkg = tmp.join(name);
    let mut expected = vec![
        format!("bin/{BIN}"),
        format!("share/man/man1/{BIN}.1"),
        format!("share/man/man1/{BIN}-sync.1"),
        "docs".to_string(),
    ];
    expected.extend(COMPLETIONS.iter().map(|c| format!("share/completions/{c}")));
    expected.extend(DOCUMENTS.iter().map(|d| d.to_string()));
    expected.extend(licenses.iter().cloned());
    for rel in &expected {
        if !pkg.join(rel).exists() {
            return Err(format!("{name}/{rel} is missing from the tarball"));
        }
    }
    let bin = pkg.join("bin").join(BIN);

    let out = run_quiet(Command::new(&bin).arg("--version"))?;
    if out.trim() != format!("{BIN} {version}") {
        return Err(format!("bin/{BIN} --version printed {:?}, expected \"{BIN} {version}\"", out.trim()));
    }
    eprintln!("  ok  bin/{BIN} --version: {}", out.trim());

    run_quiet(Command::new("sha256sum").current_dir(dist).args(["-c", "SHA256SUMS"]))
        .map_err(|e| format!("sha256sum -c SHA256SUMS in {}: {e}", dist.display()))?;
    eprintln!("  ok  sha256sum -c SHA256SUMS");

    let man_dir = pkg.join("share/man/man1");
    let mut pages = std::fs::read_dir(&man_dir)
        .map_err(|e| format!("cannot list {}: {e}", man_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect::<Vec<_>>();
    pages.sort();
    for page in &pages {
        let text = std::fs::read_to_string(page).map_err(|e| format!("cannot read {}: {e}", page.display()))?;
        if !(text.starts_with(".TH") || text.starts_with(".ie")) {
            return Err(format!("{} is not a man page (it does not start with .TH or .ie)", page.display()));
        }
    }
    let main_page = man_dir.join(format!("{BIN}.1"));
    let rendered = Command::new("man").env("MANWIDTH", "100").arg("-P").arg("cat").arg("-l").arg(&main_page).output();
    match rendered {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            if !text.contains("SYNOPSIS") || !text.contains(BIN) {
                return Err(format!("man -l {} rendered no SYNOPSIS:\n{text}", main_page.display()));
            }
            eprintln!("  ok  {} man pages; man -l {BIN}.1 renders {} lines", pages.len(), text.lines().count());
        }
        Ok(out) => {
            return Err(format!("man -l {} failed: {}", main_page.display(), String::from_utf8_lossy(&out.stderr)));
        }
        Err(_) => eprintln!("  ok  {} man pages start with .TH/.ie (no `man` here to render them)", pages.len()),
    }

    let completions = pkg.join("share/completions");
    let mut shells = Vec::new();
    for (shell, file) in [("bash", COMPLETIONS[0]), ("zsh", COMPLETIONS[1]), ("fish", COMPLETIONS[2])] {
        let path = completions.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if !text.contains("sync") {
            return Err(format!("{} does not complete the sync subcommand", path.display()));
        }
        // A syntax check where the shell is installed (`-n`: parse, run nothing).
        match Command::new(shell).arg("-n").arg(&path).output() {
            Ok(out) if out.status.success() => shells.push(shell),
            Ok(out) => {
                return Err(format!("{shell} -n {}: {}", path.display(), String::from_utf8_lossy(&out.stderr)));
            }
            Err(_) => {}
        }
    }
    eprintln!(
        "  ok  completions for bash, zsh, fish (parsed by: {})",
        if shells.is_empty() { "none".into() } else { shells.join(", ") }
    );

    let tree = tmp.join("tree");
    let synced = run_quiet(
        Command::new(&bin).arg("sync").arg("--repo").arg(root).args(["--ref", "HEAD", "--target"]).arg(&tree),
    )?;
    let archive = tmp.join("head.tar");
    run_quiet(Command::new("git").current_dir(root).args(["archive", "--format=tar", "-o"]).arg(&archive).arg("HEAD"))?;
    let expected = tmp.join("expected");
    mkdir(&expected)?;
    run_status(Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&expected))?;
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference", "--exclude=.treesync"])
        .arg(&expected)
        .arg(&tree)
        .output()
        .map_err(|e| format!("cannot run diff: {e}"))?;
    if !diff.status.success() {
        return Err(format!(
            "bin/{BIN} sync of HEAD differs from git archive HEAD:\n{}{}",
            String::from_utf8_lossy(&diff.stdout),
            String::from_utf8_lossy(&diff.stderr)
        ));
    }
    eprintln!("  ok  {} == git archive HEAD", synced.trim());
    Ok(())
}

/// The target directory (honours CARGO_TARGET_DIR) and the CLI's version, from `cargo metadata`.
pub(crate) fn metadata(root: &Path) -> Result<(PathBuf, String), String> {
    let out =
        run_quiet(Command::new("cargo").current_dir(root).args(["metadata", "--format-version", "1", "--no-deps"]))?;
    let meta: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("cargo metadata: {e}"))?;
    let target_dir = meta["target_directory"].as_str().ok_or("cargo metadata has no target_directory")?;
    let version = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == PACKAGE))
        .and_then(|p| p["version"].as_str())
        .ok_or_else(|| format!("cargo metadata does not list {PACKAGE}"))?;
    Ok((PathBuf::from(target_dir), version.to_string()))
}

/// The host target triple (`host:` line of `rustc -vV`).
fn host_triple() -> Result<String, String> {
    let out = run_quiet(Command::new("rustc").arg("-vV"))?;
    out.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_string())
        .ok_or_else(|| format!("rustc -vV printed no host line:\n{out}"))
}

/// LICENSE* files at the root, sorted; at least one (the workspace is MIT OR Apache-2.0).
pub(crate) fn licenses(root: &Path) -> Result<Vec<String>, String> {
    let mut names = std::fs::read_dir(root)
        .map_err(|e| format!("cannot list {}: {e}", root.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("LICENSE"))
        .collect::<Vec<_>>();
    names.sort();
    if names.is_empty() {
        return Err(format!("no LICENSE* file in {}", root.display()));
    }
    Ok(names)
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    mkdir(to)?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("cannot list {}: {e}", from.display()))? {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", from.display()))?;
        let ty = entry.file_type().map_err(|e| format!("cannot stat {}: {e}", entry.path().display()))?;
        let dest = to.join(entry.file_name());
        if ty.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else if ty.is_file() {
            copy(&entry.path(), &dest)?;
        } else {
            return Err(format!("{} is neither a file nor a directory", entry.path().display()));
        }
    }
    Ok(())
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map(|_| ()).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

pub(crate) fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

pub(crate) fn size(path: &Path) -> Result<u64, String> {
    std::fs::metadata(path).map(|m| m.len()).map_err(|e| format!("cannot stat {}: {e}", path.display()))
}

/// `path` relative to the project root when it lies inside it.
pub(crate) fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
