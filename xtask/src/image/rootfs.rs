//! The image's root filesystem, taken from this Debian host's installed packages rather than
//! downloaded: the treesync binary is linked against this host's glibc, so this host's libraries
//! are the ones it is known to run with, and no network or mirror is needed at build time.
//! Every file taken from a package is checked against that package's md5sums (dpkg's record of
//! what it installed), so a locally modified library fails the build instead of shipping.
//!
//! What goes in: git's files (`dpkg -L git`) minus documentation, translations, completions, the
//! perl scripts (there is no perl) and the server, push and mail programs ([`GIT_LEFT_OUT`]);
//! dash as /bin/sh (git runs aliases, `git submodule` and hooks through it); openssh-client's
//! `ssh` (for ssh:// repositories and `--ssh-key-file`, as git-sync's image has it); the shared
//! libraries `ldd` names for every program, with their symlinks and the dynamic loader; the
//! CA bundle made from ca-certificates' files as `update-ca-certificates` makes it; each
//! package's copyright file; /etc/passwd, /etc/group and /etc/nsswitch.conf written here.
//! Paths use Debian 12's merged /usr: /bin, /lib, /lib64 and /sbin are symlinks into /usr.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::util::run_quiet;

use super::tar::{Entry, Kind};

/// The uid and gid of git-sync's image user (`git-sync`), which consumers rely on.
pub const UID: u32 = 65533;

/// Where dpkg keeps each package's file list and md5sums.
const DPKG_INFO: &str = "/var/lib/dpkg/info";

/// Parts of the git package the image leaves out, and why.
pub const GIT_LEFT_OUT: &[(&str, &str)] = &[
    ("usr/share/doc/", "documentation (the copyright file is kept)"),
    ("usr/share/man/", "manual pages"),
    ("usr/share/locale/", "translations: git speaks English here"),
    ("usr/share/lintian/", "Debian's packaging checks"),
    ("usr/share/bash-completion/", "shell completion (no bash)"),
    ("etc/bash_completion.d/", "shell completion (no bash)"),
    ("usr/share/gitweb/", "the web interface (no web server, no perl)"),
    ("usr/share/perl5/", "perl modules (no perl)"),
    ("usr/share/git-core/contrib/", "sample server hooks"),
    ("usr/lib/git-core/mergetools/", "interactive merge tools"),
    ("usr/lib/git-core/git-daemon", "a git server"),
    ("usr/lib/git-core/git-http-backend", "a git server"),
    ("usr/lib/git-core/git-shell", "a login shell for git servers"),
    ("usr/bin/git-shell", "a login shell for git servers"),
    ("usr/lib/git-core/git-http-push", "pushes over dumb HTTP"),
    ("usr/lib/git-core/git-imap-send", "mail"),
    ("usr/lib/git-core/scalar", "Scalar, for large developer clones"),
    ("usr/bin/scalar", "Scalar, for large developer clones"),
];

/// The root filesystem: its entries (sorted by path, parents first), the Debian packages the
/// files came from (name, version), and the ELF files (to check inside the image that each
/// one's libraries resolve).
#[derive(Debug)]
pub struct Rootfs {
    pub entries: Vec<Entry>,
    pub packages: Vec<(String, String)>,
    pub elf: Vec<String>,
}

/// The rootfs for `binary` (installed as /usr/bin/treesync, with /usr/bin/git-sync linking to
/// it) with the license files `licenses` (paths of the workspace) in /usr/share/doc/treesync.
pub fn assemble(binary: &Path, licenses: &[PathBuf]) -> Result<Rootfs, String> {
    let dpkg = Dpkg::load(Path::new(DPKG_INFO))?;
    let mut fs = Files::default();

    // git, as packaged, minus what the image leaves out.
    let git_files = dpkg.files_of("git")?;
    for path in &git_files {
        let image = usr_merged(path);
        if GIT_LEFT_OUT.iter().any(|(prefix, _)| image.starts_with(prefix)) {
            continue;
        }
        let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot stat {path} (of git): {e}"))?;
        if meta.is_dir() {
            continue;
        }
        if meta.file_type().is_symlink() {
            let target = read_link(Path::new(path))?;
            fs.put(Entry::symlink(&image, &target));
            continue;
        }
        let data = read(Path::new(path))?;
        if data.starts_with(b"#!/usr/bin/perl") {
            continue;
        }
        fs.put_from_package(Entry::file(&image, mode_of(&meta), data), "git", path);
    }
    // Symlinks whose target was left out (usr/bin/scalar's neighbours) go too.
    fs.drop_dangling();

    fs.put_program(&dpkg, "dash", "/bin/dash")?;
    fs.put(Entry::symlink("usr/bin/sh", "dash"));
    // ssh for ssh:// and scp-style repositories (`--ssh-key-file`), as git-sync's image has it.
    fs.put_program(&dpkg, "openssh-client", "/usr/bin/ssh")?;

    fs.put(Entry::file("usr/bin/treesync", 0o755, read(binary)?));
    fs.put(Entry::symlink("usr/bin/git-sync", "treesync"));

    // The libraries of every program, as the host's dynamic loader resolves them.
    let programs: Vec<String> = fs.elf_files().into_iter().collect();
    for program in &programs {
        let host = if program == "usr/bin/treesync" { binary.to_path_buf() } else { Path::new("/").join(program) };
        for lib in ldd(&host)? {
            fs.put_library(&lib, &dpkg)?;
        }
    }

    fs.put_ca_bundle(&dpkg)?;
    for (path, mode, text) in etc_files() {
        fs.put(Entry::file(path, mode, text.into_bytes()));
    }
    for license in licenses {
        let name = license.file_name().and_then(|n| n.to_str()).ok_or("a license file name")?;
        fs.put(Entry::file(&format!("usr/share/doc/treesync/{name}"), 0o644, read(license)?));
    }

    fs.verify(&dpkg)?;
    let packages = dpkg.versions(&fs.packages)?;
    for (name, _) in &packages {
        let bare = name.split(':').next().unwrap_or(name);
        let from = Path::new("/usr/share/doc").join(bare).join("copyright");
        fs.put(Entry::file(&format!("usr/share/doc/{bare}/copyright"), 0o644, read(&from)?));
    }
    let listed: String = packages.iter().map(|(n, v)| format!("{n} {v}\n")).collect();
    fs.put(Entry::file("usr/share/doc/treesync/image-packages", 0o644, listed.into_bytes()));

    let elf = fs.elf_files().into_iter().collect();
    Ok(Rootfs { entries: fs.into_entries(), packages, elf })
}

/// /etc/passwd (writable by anyone, as in git-sync's image, so `--add-user` can append the
/// running uid), /etc/group and /etc/nsswitch.conf.
fn etc_files() -> Vec<(&'static str, u32, String)> {
    vec![
        (
            "etc/passwd",
            0o666,
            format!(
                "root:x:0:0:root:/root:/sbin/nologin\ngit-sync:x:{UID}:{UID}::/tmp:/sbin/nologin\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
            ),
        ),
        ("etc/group", 0o644, format!("root:x:0:\ngit-sync:x:{UID}:\nnogroup:x:65534:\n")),
        ("etc/nsswitch.conf", 0o644, "passwd: files\ngroup: files\nhosts: files dns\n".to_string()),
    ]
}

/// `path` as it lies in the image: relative, with /bin, /lib, /lib64 and /sbin under /usr.
fn usr_merged(path: &str) -> String {
    let rel = path.trim_start_matches('/');
    for top in ["bin/", "sbin/", "lib/", "lib64/"] {
        if rel.starts_with(top) {
            return format!("usr/{rel}");
        }
    }
    rel.to_string()
}

/// What dpkg says is installed: every path of every package (merged-/usr form) and, read on
/// demand, each package's md5sums.
struct Dpkg {
    info: PathBuf,
    /// Path in the image → the package (`name` or `name:arch`, as dpkg names its info files).
    owner: HashMap<String, String>,
}

impl Dpkg {
    fn load(info: &Path) -> Result<Dpkg, String> {
        let mut owner = HashMap::new();
        let list = std::fs::read_dir(info)
            .map_err(|e| format!("cannot list {}: {e} (cargo xtask image builds on Debian)", info.display()))?;
        for entry in list {
            let path = entry.map_err(|e| format!("cannot list {}: {e}", info.display()))?.path();
            let Some(package) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".list")) else {
                continue;
            };
            for line in std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?.lines() {
                owner.insert(usr_merged(line), package.to_string());
            }
        }
        Ok(Dpkg { info: info.to_path_buf(), owner })
    }

    /// The paths a package installed (`dpkg -L`), as dpkg lists them.
    fn files_of(&self, package: &str) -> Result<Vec<String>, String> {
        let list = self.info.join(format!("{package}.list"));
        let text = std::fs::read_to_string(&list)
            .map_err(|e| format!("{package} is not installed ({}: {e}): apt-get install {package}", list.display()))?;
        Ok(text.lines().filter(|l| *l != "/.").map(str::to_string).collect())
    }

    /// The md5sums of `package`: image path → hex digest.
    fn md5sums(&self, package: &str) -> Result<HashMap<String, String>, String> {
        let path = self.info.join(format!("{package}.md5sums"));
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once("  "))
            .map(|(sum, file)| (usr_merged(file), sum.to_string()))
            .collect())
    }

    /// `(package, version)` of each package, from `dpkg-query`.
    fn versions(&self, packages: &BTreeSet<String>) -> Result<Vec<(String, String)>, String> {
        let out = run_quiet(
            Command::new("dpkg-query").args(["-W", "-f=${Package}:${Architecture} ${Version}\n"]).args(packages),
        )?;
        let known: HashMap<&str, &str> = out.lines().filter_map(|l| l.split_once(' ')).collect();
        packages
            .iter()
            .map(|p| {
                let key = if p.contains(':') { p.clone() } else { format!("{p}:all") };
                let version = known
                    .get(key.as_str())
                    .or_else(|| known.iter().find(|(k, _)| k.split(':').next() == Some(p.as_str())).map(|(_, v)| v))
                    .ok_or_else(|| format!("dpkg-query does not know {p}:\n{out}"))?;
                Ok((p.clone(), version.to_string()))
            })
            .collect()
    }
}

/// The files being gathered: entries by image path, and where each packaged file came from.
#[derive(Default)]
struct Files {
    entries: BTreeMap<String, Entry>,
    /// Image path → (package, host path) of files taken from a package, to verify.
    from_package: BTreeMap<String, (String, String)>,
    packages: BTreeSet<String>,
}

impl Files {
    fn put(&mut self, entry: Entry) {
        self.entries.insert(entry.path.clone(), entry);
    }

    fn put_from_package(&mut self, entry: Entry, package: &str, host: &str) {
        self.from_package.insert(entry.path.clone(), (package.to_string(), host.to_string()));
        self.packages.insert(package.to_string());
        self.put(entry);
    }

    /// The program `host` of `package`, at the same place in the image.
    fn put_program(&mut self, dpkg: &Dpkg, package: &str, host: &str) -> Result<(), String> {
        let image = usr_merged(host);
        if dpkg.owner.get(&image).map(|p| p.split(':').next()) != Some(Some(package)) {
            return Err(format!("{host} is missing (it is {package}'s): apt-get install {package}"));
        }
        let meta = std::fs::metadata(host).map_err(|e| format!("cannot stat {host}: {e}"))?;
        let data = read(Path::new(host))?;
        self.put_from_package(Entry::file(&image, mode_of(&meta), data), package, host);
        Ok(())
    }

    /// Remove symlinks whose target is not in the image (resolved within the image).
    fn drop_dangling(&mut self) {
        let dangling: Vec<String> = self
            .entries
            .values()
            .filter_map(|e| match &e.kind {
                Kind::Symlink(t) if !self.entries.contains_key(&resolve(&e.path, t)) => Some(e.path.clone()),
                _ => None,
            })
            .collect();
        for path in dangling {
            self.entries.remove(&path);
        }
    }

    /// Image paths of the regular files that are ELF objects.
    fn elf_files(&self) -> BTreeSet<String> {
        self.entries.values().filter(|e| e.data().starts_with(b"\x7fELF")).map(|e| e.path.clone()).collect()
    }

    /// A library as `ldd` named it (`/lib/x86_64-linux-gnu/libz.so.1`): its symlinks as they
    /// are on the host, then the file they lead to, taken from the package that owns it.
    fn put_library(&mut self, lib: &Path, dpkg: &Dpkg) -> Result<(), String> {
        let mut host = lib.to_path_buf();
        for _ in 0..16 {
            let shown = host.to_str().ok_or_else(|| format!("{} is not UTF-8", host.display()))?.to_string();
            let image = usr_merged(&shown);
            let meta = std::fs::symlink_metadata(&host).map_err(|e| format!("cannot stat {shown}: {e}"))?;
            if meta.file_type().is_symlink() {
                let target = read_link(&host)?;
                self.put(Entry::symlink(&image, &target));
                host = host.parent().expect("a library has a directory").join(&target);
                continue;
            }
            if self.entries.contains_key(&image) {
                return Ok(());
            }
            let package = dpkg
                .owner
                .get(&image)
                .ok_or_else(|| format!("{shown} (a library ldd lists) belongs to no installed Debian package"))?
                .clone();
            self.put_from_package(Entry::file(&image, mode_of(&meta), read(&host)?), &package, &shown);
            return Ok(());
        }
        Err(format!("{}: too many levels of symlinks", lib.display()))
    }

    /// /etc/ssl/certs/ca-certificates.crt as `update-ca-certificates` makes it from Debian's
    /// ca-certificates (every certificate of /usr/share/ca-certificates/mozilla, in name
    /// order); not the host's bundle, which may hold local additions.
    fn put_ca_bundle(&mut self, dpkg: &Dpkg) -> Result<(), String> {
        let mut certs: Vec<String> = dpkg
            .files_of("ca-certificates")?
            .into_iter()
            .filter(|p| p.starts_with("/usr/share/ca-certificates/mozilla/") && p.ends_with(".crt"))
            .collect();
        certs.sort();
        if certs.is_empty() {
            return Err("ca-certificates lists no certificate: apt-get install --reinstall ca-certificates".into());
        }
        let mut bundle = Vec::new();
        for cert in &certs {
            let data = read(Path::new(cert))?;
            bundle.extend_from_slice(&data);
            if !data.ends_with(b"\n") {
                bundle.push(b'\n');
            }
            // Verified like the other packaged files, but not shipped one by one.
            self.from_package.insert(usr_merged(cert), ("ca-certificates".into(), cert.clone()));
        }
        self.packages.insert("ca-certificates".into());
        self.put(Entry::file("etc/ssl/certs/ca-certificates.crt", 0o644, bundle));
        Ok(())
    }

    /// Check every packaged file against its package's md5sums, in one `md5sum` run.
    fn verify(&self, dpkg: &Dpkg) -> Result<(), String> {
        let hosts: Vec<&str> = self.from_package.values().map(|(_, h)| h.as_str()).collect();
        let out = run_quiet(Command::new("md5sum").arg("--").args(&hosts))?;
        let actual: HashMap<String, String> = out
            .lines()
            .filter_map(|l| l.split_once("  "))
            .map(|(sum, path)| (path.to_string(), sum.to_string()))
            .collect();
        let mut sums: HashMap<&str, HashMap<String, String>> = HashMap::new();
        for (image, (package, host)) in &self.from_package {
            if !sums.contains_key(package.as_str()) {
                sums.insert(package, dpkg.md5sums(package)?);
            }
            let expected = sums[package.as_str()].get(&usr_merged(host)).or_else(|| sums[package.as_str()].get(image));
            match (expected, actual.get(host)) {
                (Some(e), Some(a)) if e == a => {}
                (Some(e), a) => {
                    return Err(format!(
                        "{host} differs from what {package} installed (md5 {} instead of {e}): \
                         apt-get install --reinstall {package}",
                        a.map(String::as_str).unwrap_or("unknown")
                    ));
                }
                (None, _) => return Err(format!("{package}'s md5sums do not list {host}")),
            }
        }
        Ok(())
    }

    /// The entries sorted by path, with every missing parent directory (root-owned, 0755), the
    /// directories the image needs and the merged-/usr symlinks; identical files after the
    /// first become hard links to it.
    fn into_entries(mut self) -> Vec<Entry> {
        let dirs = [
            Entry::dir("tmp", 0o1777),
            Entry::dir("git", 0o2775).owned(UID, UID),
            Entry::dir("root", 0o700),
            Entry::dir("usr/sbin", 0o755),
            Entry::dir("usr/lib64", 0o755),
        ];
        for d in dirs {
            self.put(d);
        }
        for (link, target) in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")] {
            self.put(Entry::symlink(link, target));
        }
        let paths: Vec<String> = self.entries.keys().cloned().collect();
        for path in paths {
            let mut parent = Path::new(&path).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                let dir = p.to_str().expect("image paths are UTF-8").to_string();
                self.entries.entry(dir.clone()).or_insert_with(|| Entry::dir(&dir, 0o755));
                parent = p.parent();
            }
        }
        let mut first: HashMap<(u32, &[u8]), String> = HashMap::new();
        let mut out = Vec::with_capacity(self.entries.len());
        for entry in self.entries.values() {
            if let Kind::File(data) = &entry.kind
                && data.len() > 4096
            {
                if let Some(original) = first.get(&(entry.mode, data.as_slice())) {
                    out.push(Entry { kind: Kind::HardLink(original.clone()), ..entry.clone() });
                    continue;
                }
                first.insert((entry.mode, data), entry.path.clone());
            }
            out.push(entry.clone());
        }
        out
    }
}

/// A symlink at `path` with `target`, resolved lexically within the image (merged /usr).
fn resolve(path: &str, target: &str) -> String {
    let base = if target.starts_with('/') {
        String::new()
    } else {
        Path::new(path).parent().map(|p| p.display().to_string()).unwrap_or_default()
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in base.split('/').chain(target.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    usr_merged(&parts.join("/"))
}

/// The libraries `ldd` lists for `program` (their paths as it prints them, the loader too).
fn ldd(program: &Path) -> Result<Vec<PathBuf>, String> {
    let out = run_quiet(Command::new("ldd").arg(program))?;
    let mut libs = Vec::new();
    for line in out.lines() {
        let line = line.trim();
        if line.contains("not found") {
            return Err(format!("ldd {}: {line}", program.display()));
        }
        // `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let path = match line.split_once(" => ") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next().filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

fn mode_of(meta: &std::fs::Metadata) -> u32 {
    meta.permissions().mode() & 0o7777
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn read_link(path: &Path) -> Result<String, String> {
    let target = std::fs::read_link(path).map_err(|e| format!("cannot read the link {}: {e}", path.display()))?;
    target.to_str().map(str::to_string).ok_or_else(|| format!("{} links to a non-UTF-8 path", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_placed_in_merged_usr() {
        assert_eq!(usr_merged("/bin/dash"), "usr/bin/dash");
        assert_eq!(usr_merged("/lib/x86_64-linux-gnu/libc.so.6"), "usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(usr_merged("/lib64/ld-linux-x86-64.so.2"), "usr/lib64/ld-linux-x86-64.so.2");
        assert_eq!(usr_merged("/usr/bin/git"), "usr/bin/git");
        assert_eq!(usr_merged("/libexec/x"), "libexec/x", "only the merged directories move");
    }

    #[test]
    fn symlinks_resolve_within_the_image() {
        assert_eq!(resolve("usr/lib/git-core/git-remote-https", "git-remote-http"), "usr/lib/git-core/git-remote-http");
        assert_eq!(
            resolve("usr/bin/git-upload-pack", "../lib/git-core/git-upload-pack"),
            "usr/lib/git-core/git-upload-pack"
        );
        assert_eq!(
            resolve("usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
            "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        );
    }

    #[test]
    fn parents_are_added_and_identical_files_become_hard_links() {
        let mut fs = Files::default();
        let big = vec![7u8; 5000];
        fs.put(Entry::file("usr/bin/git", 0o755, big.clone()));
        fs.put(Entry::file("usr/lib/git-core/git", 0o755, big));
        fs.put(Entry::file("etc/group", 0o644, b"x".to_vec()));
        let entries = fs.into_entries();
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted, "sorted, so parents come first");
        for dir in ["etc", "usr", "usr/bin", "usr/lib", "usr/lib/git-core", "tmp", "git"] {
            assert!(entries.iter().any(|e| e.path == dir && e.kind == Kind::Dir), "{dir} in {paths:?}");
        }
        let git = entries.iter().find(|e| e.path == "usr/lib/git-core/git").expect("git-core/git");
        assert_eq!(git.kind, Kind::HardLink("usr/bin/git".into()));
        let dir = entries.iter().find(|e| e.path == "git").expect("/git");
        assert_eq!((dir.mode, dir.uid, dir.gid), (0o2775, UID, UID));
        assert!(entries.iter().any(|e| e.path == "lib64" && e.kind == Kind::Symlink("usr/lib64".into())));
    }
}
