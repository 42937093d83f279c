//! `cargo xtask image`: an OCI image of `treesync git-sync` that stands in for git-sync's own
//! (kubernetes/git-sync: user and group 65533, HOME=/tmp, GITSYNC_ROOT=/git, /git 02775),
//! built without a container daemon or registry: the root filesystem is gathered from this
//! Debian host ([`rootfs`]), packed by our own tar writer ([`tar`]) into one layer and written
//! as an OCI image layout plus its `oci-archive` tarball ([`layout`]). Then, unless
//! `--no-test`, the archive is loaded into podman (runc) and run ([`check`]).
//!
//! The binary is the `dist` profile's (the release tarball's), so after `cargo xtask dist` the
//! build is a no-op; `--binary PATH` puts another one in.

mod check;
mod layout;
mod rootfs;
mod tar;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use xtask::util::{project_root, run_quiet, run_status};

use crate::dist::{licenses, metadata, mib, shown};

const PACKAGE: &str = "treesync-cli";
const BIN: &str = "treesync";

/// Options of `cargo xtask image`.
#[derive(Debug, Default)]
struct Options {
    /// Put this binary in the image instead of building the dist profile's.
    binary: Option<PathBuf>,
    /// Skip the podman check.
    no_test: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--binary" => {
                o.binary = Some(PathBuf::from(it.next().ok_or("--binary needs a value (see cargo xtask help)")?));
            }
            "--no-test" => o.no_test = true,
            other => return Err(format!("unknown option {other:?} (see cargo xtask help)")),
        }
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let start = Instant::now();
    let root = project_root();
    let (target_dir, version) = metadata(&root)?;
    let dist = target_dir.join("dist");
    let binary = match &o.binary {
        Some(b) => b.clone(),
        None => {
            eprintln!("image: cargo build --profile dist -p {PACKAGE}");
            run_status(Command::new("cargo").current_dir(&root).args(["build", "--profile", "dist", "-p", PACKAGE]))?;
            dist.join(BIN)
        }
    };
    if !binary.is_file() {
        return Err(format!("{} is not a file (build it, or leave out --binary)", binary.display()));
    }
    let arch = go_arch()?;
    let commit = run_quiet(Command::new("git").current_dir(&root).args(["log", "-1", "--format=%H %ct", "HEAD"]))?;
    let (commit, mtime) = commit.trim().split_once(' ').ok_or("git log printed no commit")?;
    let mtime: u64 = mtime.parse().map_err(|e| format!("commit time {mtime:?}: {e}"))?;

    eprintln!("image: gathering the root filesystem (treesync, git, dash, their libraries, CA certificates)");
    let license_paths: Vec<PathBuf> = licenses(&root)?.iter().map(|l| root.join(l)).collect();
    let fs = rootfs::assemble(&binary, &license_paths)?;
    let run_config = layout::RunConfig {
        user: format!("{}:{}", rootfs::UID, rootfs::UID),
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "HOME=/tmp".into(),
            "GITSYNC_ROOT=/git".into(),
        ],
        entrypoint: vec!["/usr/bin/treesync".into(), "git-sync".into()],
        working_dir: "/tmp".into(),
        labels: vec![
            ("org.opencontainers.image.title".into(), BIN.into()),
            (
                "org.opencontainers.image.description".into(),
                "treesync git-sync: a drop-in for kubernetes/git-sync that writes each new commit as a diff".into(),
            ),
            ("org.opencontainers.image.version".into(), version.clone()),
            ("org.opencontainers.image.revision".into(), commit.to_string()),
            ("org.opencontainers.image.licenses".into(), "MIT OR Apache-2.0".into()),
        ],
    };
    let ref_name = format!("{BIN}:{version}");
    eprintln!("image: packing {} entries into one layer (gzip -6n)", fs.entries.len());
    let image = layout::build(&fs.entries, mtime, &arch, &run_config, &ref_name)?;
    let name = format!("{BIN}-{version}-image");
    let layout_dir = dist.join(&name);
    let archive = dist.join(format!("{name}.oci.tar"));
    image.write(&layout_dir, &archive, mtime)?;
    let archive_size = std::fs::metadata(&archive).map_err(|e| format!("{}: {e}", archive.display()))?.len();

    let checked = if o.no_test {
        "nothing (--no-test)".to_string()
    } else {
        eprintln!("image: checking it with podman (runc)");
        let t = Instant::now();
        check::check(&check::Subject {
            archive: &archive,
            image_id: image.config.hex(),
            version: &version,
            elf: &fs.elf,
        })
        .map_err(|e| format!("the image {} failed its check: {e}", shown(&root, &archive)))?;
        format!(
            "podman (runc) loaded and ran it in {:.1} s: config, user 65533, git, ssh, /bin/sh, every ELF file's \
             libraries, file:// and https transports, two git:// syncs into a mounted /git with an exechook (the \
             second with a read-only root)",
            t.elapsed().as_secs_f64()
        )
    };
    println!("image: {} (OCI layout: {})", shown(&root, &archive), shown(&root, &layout_dir));
    println!(
        "  size     {} archive; layer {} gzipped, {} unpacked",
        mib(archive_size),
        mib(image.layer.bytes.len() as u64),
        mib(image.layer_tar_size as u64)
    );
    println!("  name     {ref_name} (podman load -i {}), id {}", shown(&root, &archive), &image.config.hex()[..12]);
    println!(
        "  binary   {} ({})",
        shown(&root, &binary),
        mib(std::fs::metadata(&binary).map(|m| m.len()).unwrap_or(0))
    );
    let packages: Vec<String> =
        fs.packages.iter().map(|(n, v)| format!("{} {v}", n.split(':').next().unwrap_or(n))).collect();
    println!("  debian   {} packages: {}", packages.len(), packages.join(", "));
    println!("  checked  {checked}");
    println!("  total    {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// The Go architecture name of this host (the OCI platform's), from `dpkg --print-architecture`
/// (Debian's names agree with Go's for amd64, arm64, 386, ppc64le, s390x, riscv64).
fn go_arch() -> Result<String, String> {
    let arch = run_quiet(Command::new("dpkg").arg("--print-architecture"))
        .map_err(|e| format!("{e} (cargo xtask image builds on Debian: apt-get install dpkg)"))?;
    let arch = arch.trim();
    match arch {
        "i386" => Ok("386".into()),
        "armhf" | "armel" => Ok("arm".into()),
        other => Ok(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn options_parse_and_refuse_what_they_do_not_know() {
        let o = parse(&["--binary".into(), "/b".into(), "--no-test".into()]).expect("parses");
        assert_eq!(o.binary.as_deref(), Some(Path::new("/b")));
        assert!(o.no_test);
        assert!(parse(&["--binary".into()]).expect_err("needs a value").contains("--binary needs a value"));
        assert!(parse(&["--push".into()]).is_err());
    }
}
