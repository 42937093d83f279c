//! `cargo xtask deb`: a Debian package of treesync. Stages the binary (stripped), the man pages
//! and shell completions the binary renders from its own clap definition (`treesync generate`,
//! as `cargo xtask dist` does), the systemd template unit `treesync-watch@.service`, the
//! copyright file, the README and the example config and post-receive hook from `packaging/`,
//! writes DEBIAN/control (Depends from `dpkg-shlibdeps`, raised to what the binary's version
//! needs, plus git), the maintainer scripts and md5sums, builds the package with
//! `dpkg-deb --root-owner-group --build` and checks what it lists.
//!
//! No conffile: the example config is in /usr/share/doc/treesync/examples/, and
//! /etc/treesync/treesync.toml is the administrator's (it names their repositories and
//! targets; a shipped one would make every instance sync a placeholder).

use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::util::{project_root, run_quiet, run_status};

use crate::dist::{copy, licenses, metadata, mib, mkdir, shown, size};

const PACKAGE: &str = "treesync-cli";
const NAME: &str = "treesync";
const UNIT: &str = "treesync-watch@.service";
/// What the package must hold (besides the man pages), checked in `dpkg-deb --contents`.
const PATHS: [&str; 10] = [
    "usr/bin/treesync",
    "usr/share/man/man1/treesync.1.gz",
    "usr/share/man/man1/treesync-watch.1.gz",
    "usr/share/bash-completion/completions/treesync",
    "usr/share/zsh/vendor-completions/_treesync",
    "usr/share/fish/vendor_completions.d/treesync.fish",
    "lib/systemd/system/treesync-watch@.service",
    "usr/share/doc/treesync/copyright",
    "usr/share/doc/treesync/changelog.gz",
    "usr/share/doc/treesync/examples/treesync.toml",
];
/// `treesync generate completions` writes these; the package puts them where each shell's
/// Debian package looks.
const COMPLETIONS: [(&str, &str); 3] = [
    ("treesync.bash", "usr/share/bash-completion/completions/treesync"),
    ("_treesync", "usr/share/zsh/vendor-completions/_treesync"),
    ("treesync.fish", "usr/share/fish/vendor_completions.d/treesync.fish"),
];
/// The first glibc with DT_RELR (`.cargo/config.toml` links with `-z pack-relative-relocs`):
/// such a binary needs the version `GLIBC_ABI_DT_RELR`, which dpkg-shlibdeps does not see (it
/// reads symbols, and that version names none).
const DT_RELR_GLIBC: &str = "2.36";

/// Options of `cargo xtask deb`.
#[derive(Debug)]
struct Options {
    /// The cargo profile to build with (`debug` is cargo's `dev`).
    profile: String,
    /// Package this binary instead of building one.
    binary: Option<PathBuf>,
    /// Where the .deb goes (default: target/deb).
    out: Option<PathBuf>,
    /// dpkg-deb's compressor: xz (the smallest package) or gzip (fast: the tests' choice).
    compress: String,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { profile: "release".into(), binary: None, out: None, compress: "xz".into() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{a} needs a value (see cargo xtask help)"));
        match a.as_str() {
            "--profile" => o.profile = value()?,
            "--binary" => o.binary = Some(PathBuf::from(value()?)),
            "--out" => o.out = Some(PathBuf::from(value()?)),
            "--compress" => o.compress = value()?,
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    if !["xz", "gzip", "none"].contains(&o.compress.as_str()) {
        return Err(format!("--compress {:?}: choose xz, gzip or none", o.compress));
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let root = project_root();
    for (program, package) in [("dpkg-deb", "dpkg"), ("strip", "binutils"), ("gzip", "gzip"), ("md5sum", "coreutils")] {
        if Command::new(program).arg("--version").output().is_err() {
            return Err(format!("{program} is missing: apt-get install {package} (cargo xtask deb builds on Debian)"));
        }
    }
    let (target_dir, version) = metadata(&root)?;
    let arch = run_quiet(Command::new("dpkg").arg("--print-architecture"))?.trim().to_string();
    let binary = match &o.binary {
        Some(b) => b.clone(),
        None => {
            let (cargo_profile, dir) = match o.profile.as_str() {
                "debug" | "dev" => ("dev", "debug"),
                p => (p, p),
            };
            eprintln!("deb: cargo build --profile {cargo_profile} -p {PACKAGE}");
            run_status(Command::new("cargo").current_dir(&root).args([
                "build",
                "--profile",
                cargo_profile,
                "-p",
                PACKAGE,
            ]))?;
            target_dir.join(dir).join(NAME)
        }
    };
    if !binary.is_file() {
        return Err(format!("{} is not a file (build it, or leave out --binary)", binary.display()));
    }
    let out = o.out.clone().unwrap_or_else(|| target_dir.join("deb"));
    let stem = format!("{NAME}_{version}_{arch}");
    let stage = out.join(&stem);
    eprintln!("deb: staging {}", shown(&root, &stage));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(|e| format!("cannot remove {}: {e}", stage.display()))?;
    }
    stage_files(&root, &binary, &stage)?;
    let depends = depends(&stage.join("usr/bin").join(NAME))?;
    let control = control(&root, &version, &arch, &depends, installed_size(&stage)?)?;
    write(&stage.join("DEBIAN/control"), &control, 0o644)?;
    for script in ["postinst", "prerm", "postrm"] {
        let text = read(&root.join("packaging/deb").join(script))?;
        write(&stage.join("DEBIAN").join(script), &text, 0o755)?;
    }
    let sums = md5sums(&stage)?;
    write(&stage.join("DEBIAN/md5sums"), &sums, 0o644)?;

    let deb = out.join(format!("{stem}.deb"));
    let mtime = run_quiet(Command::new("git").current_dir(&root).args(["log", "-1", "--format=%ct", "HEAD"]))?;
    run_quiet(
        Command::new("dpkg-deb")
            .env("SOURCE_DATE_EPOCH", mtime.trim())
            .arg(format!("-Z{}", o.compress))
            .args(["--root-owner-group", "--build"])
            .arg(&stage)
            .arg(&deb),
    )?;
    let listed = check(&deb)?;
    let deb_size = size(&deb)?;
    println!("deb: {}", shown(&root, &deb));
    println!("  size     {} ({deb_size} bytes), {listed} paths", mib(deb_size));
    println!("  binary   {}", shown(&root, &binary));
    println!("  depends  {depends}");
    println!("  checked  dpkg-deb --info, --contents lists the binary, man pages, completions, unit, docs");
    Ok(())
}

/// Lay the package's files out under `stage`, with the modes Debian expects (0755 for
/// directories and programs, 0644 for the rest).
fn stage_files(root: &Path, binary: &Path, stage: &Path) -> Result<(), String> {
    let bin = stage.join("usr/bin").join(NAME);
    mkdir(bin.parent().expect("usr/bin"))?;
    // Debian ships stripped binaries (the debug info of a dev build is most of its size).
    run_quiet(Command::new("strip").args(["--strip-unneeded", "-o"]).arg(&bin).arg(binary))?;
    chmod(&bin, 0o755)?;

    let generated = stage.join("generated");
    run_quiet(Command::new(&bin).args(["generate", "all", "--out-dir"]).arg(&generated))?;
    let man = stage.join("usr/share/man/man1");
    mkdir(&man)?;
    let mut pages = 0;
    for entry in std::fs::read_dir(&generated).map_err(|e| format!("cannot list {}: {e}", generated.display()))? {
        let path = entry.map_err(|e| format!("cannot list {}: {e}", generated.display()))?.path();
        if path.extension().is_some_and(|e| e == "1") {
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            gzip(&path, &man.join(format!("{name}.gz")))?;
            pages += 1;
        }
    }
    if pages == 0 {
        return Err(format!("treesync generate wrote no man page into {}", generated.display()));
    }
    for (file, dest) in COMPLETIONS {
        let dest = stage.join(dest);
        mkdir(dest.parent().expect("a directory"))?;
        copy(&generated.join(file), &dest)?;
    }
    std::fs::remove_dir_all(&generated).map_err(|e| format!("cannot remove {}: {e}", generated.display()))?;

    let unit = stage.join("lib/systemd/system").join(UNIT);
    mkdir(unit.parent().expect("a directory"))?;
    copy(&root.join("packaging").join(UNIT), &unit)?;
    let doc = stage.join("usr/share/doc").join(NAME);
    mkdir(&doc.join("examples"))?;
    write(&doc.join("copyright"), &copyright(root)?, 0o644)?;
    gzip_text(&changelog(root)?, &doc.join("changelog.gz"))?;
    copy(&root.join("README.md"), &doc.join("README.md"))?;
    copy(&root.join("docs/deploy.md"), &doc.join("deploy.md"))?;
    copy(&root.join("packaging/treesync.toml"), &doc.join("examples/treesync.toml"))?;
    copy(&root.join("packaging/post-receive"), &doc.join("examples/post-receive"))?;
    normalize_modes(stage, &bin)
}

/// Directories 0755, files 0644 (whatever the umask and the sources said), the binary 0755.
/// Examples are documentation: not executable, as lintian wants.
fn normalize_modes(dir: &Path, bin: &Path) -> Result<(), String> {
    chmod(dir, 0o755)?;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let path = entry.path();
        if entry.file_type().map_err(|e| format!("cannot stat {}: {e}", path.display()))?.is_dir() {
            normalize_modes(&path, bin)?;
        } else {
            chmod(&path, if path == bin { 0o755 } else { 0o644 })?;
        }
    }
    Ok(())
}

/// `gzip -9n` (no name, no time: the same page compresses to the same bytes).
fn gzip(from: &Path, to: &Path) -> Result<(), String> {
    let out = Command::new("gzip")
        .args(["-9n", "-c"])
        .arg(from)
        .output()
        .map_err(|e| format!("cannot run gzip: {e} (apt-get install gzip)"))?;
    if !out.status.success() {
        return Err(format!("gzip {}: {}", from.display(), String::from_utf8_lossy(&out.stderr)));
    }
    std::fs::write(to, out.stdout).map_err(|e| format!("cannot write {}: {e}", to.display()))
}

/// `text` compressed with `gzip -9n` into `to`.
fn gzip_text(text: &str, to: &Path) -> Result<(), String> {
    let plain = to.with_extension("");
    std::fs::write(&plain, text).map_err(|e| format!("cannot write {}: {e}", plain.display()))?;
    gzip(&plain, to)?;
    std::fs::remove_file(&plain).map_err(|e| format!("cannot remove {}: {e}", plain.display()))
}

/// A native package's changelog (Debian's format): one entry naming the commit it was built
/// from. The history itself is git's.
fn changelog(root: &Path) -> Result<String, String> {
    let (_, version) = metadata(root)?;
    let log = run_quiet(Command::new("git").current_dir(root).args(["log", "-1", "--format=%h%n%cD", "HEAD"]))?;
    let mut lines = log.lines();
    let (commit, date) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
    Ok(format!(
        "{NAME} ({version}) unstable; urgency=medium\n\n  \
         * Built from commit {commit}; its history is the git log of the source.\n\n \
         -- {}  {date}\n",
        maintainer()
    ))
}

/// DEBFULLNAME <DEBEMAIL> when both are set (Debian's tools read them), else the project.
fn maintainer() -> String {
    match (std::env::var("DEBFULLNAME"), std::env::var("DEBEMAIL")) {
        (Ok(name), Ok(email)) => format!("{name} <{email}>"),
        _ => "The treesync developers <treesync@example.invalid>".into(),
    }
}

/// The Depends line: the shared libraries of `binary` (dpkg-shlibdeps where installed, else
/// read from the binary's own version needs), libc6 raised to what DT_RELR needs, and git.
fn depends(binary: &Path) -> Result<String, String> {
    let bytes = std::fs::read(binary).map_err(|e| format!("cannot read {}: {e}", binary.display()))?;
    let libs = match shlibdeps(binary)? {
        Some(libs) => libs,
        None => {
            eprintln!(
                "deb: dpkg-shlibdeps is not installed (apt-get install dpkg-dev); reading the glibc versions the binary names"
            );
            from_versions(&bytes)
        }
    };
    let libs = if contains(&bytes, b"GLIBC_ABI_DT_RELR") { raise_libc(&libs, DT_RELR_GLIBC) } else { libs };
    Ok(format!("{libs}, git"))
}

/// `dpkg-shlibdeps -O -e BINARY`'s `shlibs:Depends`, or None when it is not installed. It wants
/// a source package around the binary: a minimal debian/control in a temporary directory.
fn shlibdeps(binary: &Path) -> Result<Option<String>, String> {
    let tmp = std::env::temp_dir().join(format!("treesync-deb-shlibdeps-{}", std::process::id()));
    mkdir(&tmp.join("debian"))?;
    std::fs::write(tmp.join("debian/control"), "Source: treesync\n\nPackage: treesync\nArchitecture: any\n")
        .map_err(|e| format!("cannot write {}: {e}", tmp.join("debian/control").display()))?;
    let out = Command::new("dpkg-shlibdeps").current_dir(&tmp).args(["-O", "-e"]).arg(binary).output();
    let _ = std::fs::remove_dir_all(&tmp);
    let out = match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot run dpkg-shlibdeps: {e}")),
        Ok(out) => out,
    };
    if !out.status.success() {
        return Err(format!("dpkg-shlibdeps -O -e {}: {}", binary.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .map(|d| Some(d.trim().to_string()))
        .ok_or_else(|| format!("dpkg-shlibdeps printed no shlibs:Depends line:\n{text}"))
}

/// Without dpkg-shlibdeps: `libc6 (>= V)` for the newest `GLIBC_V` version the binary names,
/// and libgcc-s1 when it links libgcc_s (Rust's unwinder).
fn from_versions(bytes: &[u8]) -> String {
    let mut newest: Option<String> = None;
    for (i, _) in bytes.windows(6).enumerate().filter(|(_, w)| *w == b"GLIBC_") {
        let rest = &bytes[i + 6..];
        let len = rest.iter().take_while(|b| b.is_ascii_digit() || **b == b'.').count();
        let v = String::from_utf8_lossy(&rest[..len]).trim_end_matches('.').to_string();
        if v.starts_with(|c: char| c.is_ascii_digit()) && newest.as_deref().is_none_or(|n| newer(&v, n)) {
            newest = Some(v);
        }
    }
    let mut deps = vec![match newest {
        Some(v) => format!("libc6 (>= {v})"),
        None => "libc6".to_string(),
    }];
    if contains(bytes, b"libgcc_s.so.1") {
        deps.push("libgcc-s1".into());
    }
    deps.join(", ")
}

/// `libs` with its libc6 requirement raised to at least `floor`.
fn raise_libc(libs: &str, floor: &str) -> String {
    libs.split(',')
        .map(str::trim)
        .map(|dep| {
            let Some(rest) = dep.strip_prefix("libc6").map(str::trim) else { return dep.to_string() };
            if rest.is_empty() {
                return format!("libc6 (>= {floor})");
            }
            match rest.strip_prefix("(>=").and_then(|v| v.strip_suffix(')')).map(str::trim) {
                Some(v) if newer(floor, v) => format!("libc6 (>= {floor})"),
                // Newer already, another relation (`<<`, `=`), or another package (libc6.1).
                _ => dep.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether dotted version `a` is newer than `b` (numeric parts; 2.36 > 2.4).
fn newer(a: &str, b: &str) -> bool {
    let parts = |v: &str| v.split('.').map(|p| p.parse::<u64>().unwrap_or(0)).collect::<Vec<_>>();
    parts(a) > parts(b)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// DEBIAN/control.
fn control(root: &Path, version: &str, arch: &str, depends: &str, installed_kib: u64) -> Result<String, String> {
    let maintainer = maintainer();
    let homepage = cargo_field(root, "repository")?;
    Ok(format!(
        "Package: {NAME}\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: {maintainer}\n\
         Installed-Size: {installed_kib}\n\
         Depends: {depends}\n\
         Section: vcs\n\
         Priority: optional\n\
         Homepage: {homepage}\n\
         Description: keep a read-only working tree in sync with a git repository\n \
         treesync remembers which tree it wrote into a directory, diffs it against\n \
         a new commit inside the object database, and touches only the changed\n \
         paths: a 10-file push costs the same on a 100-file and a 100,000-file\n \
         tree, also on a slow NAS. Targets are local directories, NFS (mounts or\n \
         the built-in nfs:// client) and S3.\n \
         .\n \
         The systemd unit treesync-watch@NAME follows the mirror NAME of\n \
         /etc/treesync/treesync.toml; /usr/share/doc/treesync/deploy.md shows\n \
         the setup.\n"
    ))
}

/// A `[workspace.package]` string field of the root Cargo.toml (`repository`).
fn cargo_field(root: &Path, key: &str) -> Result<String, String> {
    let text = read(&root.join("Cargo.toml"))?;
    text.lines()
        .filter_map(|l| l.strip_prefix(key)?.trim_start().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next()
        .ok_or_else(|| format!("Cargo.toml has no {key} = \"…\" line"))
}

/// The machine-readable copyright file: MIT (its text) or Apache-2.0 (Debian ships its text).
fn copyright(root: &Path) -> Result<String, String> {
    let names = licenses(root)?;
    for wanted in ["LICENSE-MIT", "LICENSE-APACHE"] {
        if !names.iter().any(|n| n == wanted) {
            return Err(format!("{wanted} is missing at the root: the copyright file needs it"));
        }
    }
    let mit = read(&root.join("LICENSE-MIT"))?;
    let holder = mit
        .lines()
        .find_map(|l| l.strip_prefix("Copyright (c) "))
        .ok_or("LICENSE-MIT has no \"Copyright (c) …\" line")?
        .trim()
        .to_string();
    let mit_text: String = mit
        .lines()
        .skip_while(|l| !l.starts_with("Permission"))
        .map(|l| if l.trim().is_empty() { " .\n".to_string() } else { format!(" {l}\n") })
        .collect();
    // The years of the history (lintian wants a year in the notice).
    let log = run_quiet(Command::new("git").current_dir(root).args(["log", "--format=%cd", "--date=format:%Y"]))?;
    let years: Vec<&str> = log.lines().collect();
    let (first, last) = (years.iter().min().ok_or("git log lists no commit")?, years.iter().max().expect("one"));
    let years = if first == last { first.to_string() } else { format!("{first}-{last}") };
    let source = cargo_field(root, "repository")?;
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: {NAME}\n\
         Source: {source}\n\
         \n\
         Files: *\n\
         Copyright: {years} {holder}\n\
         License: MIT or Apache-2.0\n\
         \n\
         License: MIT\n{mit_text}\n\
         License: Apache-2.0\n \
         On Debian systems, the full text of the Apache License, Version 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n"
    ))
}

/// Installed-Size in KiB, as dpkg-gencontrol counts it: each file rounded up, one per directory.
fn installed_size(stage: &Path) -> Result<u64, String> {
    let mut kib = 0;
    for (path, is_dir) in walk(stage)? {
        kib += if is_dir { 1 } else { size(&path)?.div_ceil(1024) };
    }
    Ok(kib)
}

/// DEBIAN/md5sums: `md5sum` of every file, with paths relative to the package root.
fn md5sums(stage: &Path) -> Result<String, String> {
    let mut files: Vec<String> = walk(stage)?
        .into_iter()
        .filter(|(_, is_dir)| !is_dir)
        .map(|(p, _)| p.strip_prefix(stage).expect("below the stage").display().to_string())
        .filter(|p| !p.starts_with("DEBIAN/"))
        .collect();
    files.sort();
    run_quiet(Command::new("md5sum").current_dir(stage).arg("--").args(&files))
}

/// Every path below `dir` (not `dir` itself), with whether it is a directory.
fn walk(dir: &Path) -> Result<Vec<(PathBuf, bool)>, String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let is_dir = entry.file_type().map_err(|e| format!("cannot stat {}: {e}", entry.path().display()))?.is_dir();
        out.push((entry.path(), is_dir));
        if is_dir {
            out.extend(walk(&entry.path())?);
        }
    }
    Ok(out)
}

/// What `dpkg-deb` says the package holds: the control fields and every path of [`PATHS`]
/// and one man page per subcommand. Returns how many paths it lists.
fn check(deb: &Path) -> Result<usize, String> {
    let info = run_quiet(Command::new("dpkg-deb").arg("--info").arg(deb))?;
    for field in ["Package: treesync", "Depends: ", "Architecture: "] {
        if !info.contains(field) {
            return Err(format!("dpkg-deb --info {} has no {field:?}:\n{info}", deb.display()));
        }
    }
    let contents = run_quiet(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    let listed: Vec<&str> =
        contents.lines().filter_map(|l| l.split_whitespace().nth(5)).map(|p| p.trim_start_matches("./")).collect();
    for want in PATHS {
        if !listed.contains(&want) {
            return Err(format!("{} does not hold {want}; it holds:\n{contents}", deb.display()));
        }
    }
    let owners = contents.lines().filter(|l| !l.contains(" root/root ")).collect::<Vec<_>>();
    if !owners.is_empty() {
        return Err(format!("{} holds paths not owned by root:\n{}", deb.display(), owners.join("\n")));
    }
    Ok(listed.len())
}

fn chmod(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    mkdir(path.parent().expect("a directory"))?;
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    chmod(path, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_is_raised_to_the_floor_and_never_lowered() {
        let libs = "libc6 (>= 2.34), libgcc-s1 (>= 4.2)";
        assert_eq!(raise_libc(libs, "2.36"), "libc6 (>= 2.36), libgcc-s1 (>= 4.2)");
        assert_eq!(raise_libc("libc6 (>= 2.38)", "2.36"), "libc6 (>= 2.38)");
        assert_eq!(raise_libc("libc6", "2.36"), "libc6 (>= 2.36)");
        assert_eq!(raise_libc("libc6.1 (>= 2.3), zlib1g", "2.36"), "libc6.1 (>= 2.3), zlib1g", "another package");
    }

    #[test]
    fn versions_compare_by_number() {
        assert!(newer("2.36", "2.4"));
        assert!(newer("2.36", "2.34"));
        assert!(!newer("2.34", "2.34"));
        assert!(newer("2.3.4", "2.3"));
    }

    #[test]
    fn without_shlibdeps_the_newest_glibc_version_named_counts() {
        let bytes = b"\0GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_2.4\0GLIBC_PRIVATE\0libgcc_s.so.1\0";
        assert_eq!(from_versions(bytes), "libc6 (>= 2.34), libgcc-s1");
        assert_eq!(from_versions(b"static"), "libc6");
    }

    #[test]
    fn options_parse_and_refuse_what_they_do_not_know() {
        let o = parse(&["--binary".into(), "/b".into(), "--out".into(), "/o".into()]).expect("parses");
        assert_eq!(
            (o.profile.as_str(), o.binary.as_deref(), o.out.as_deref()),
            ("release", Some(Path::new("/b")), Some(Path::new("/o")))
        );
        assert!(parse(&["--profile".into()]).expect_err("needs a value").contains("--profile needs a value"));
        assert!(parse(&["--strip".into()]).is_err());
    }
}
