//! A tar writer for image layers and the `oci-archive`: POSIX ustar entries (directories,
//! regular files, symlinks, hard links) with the owner, mode and mtime each entry says, in the
//! order given, so the same entries always make the same bytes. No PAX headers: a name that does
//! not fit ustar's 155 + 100 bytes, or a link target over 100 bytes, is refused.

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File(Vec<u8>),
    /// A symbolic link to this target, as written (relative or absolute).
    Symlink(String),
    /// A hard link to an earlier entry of the same archive (its path, as written there).
    HardLink(String),
}

/// One entry: a relative path (no leading `/`, no trailing `/`), its owner and permission bits
/// (including setuid/setgid/sticky), and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub kind: Kind,
}

impl Entry {
    pub fn dir(path: &str, mode: u32) -> Entry {
        Entry { path: path.into(), mode, uid: 0, gid: 0, kind: Kind::Dir }
    }

    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> Entry {
        Entry { path: path.into(), mode, uid: 0, gid: 0, kind: Kind::File(data) }
    }

    pub fn symlink(path: &str, target: &str) -> Entry {
        Entry { path: path.into(), mode: 0o777, uid: 0, gid: 0, kind: Kind::Symlink(target.into()) }
    }

    /// The same entry owned by `uid:gid`.
    pub fn owned(self, uid: u32, gid: u32) -> Entry {
        Entry { uid, gid, ..self }
    }

    /// The file's bytes (empty for the other kinds).
    pub fn data(&self) -> &[u8] {
        match &self.kind {
            Kind::File(d) => d,
            _ => &[],
        }
    }
}

/// The archive of `entries` in their order, every entry with modification time `mtime`, ended
/// by the two zero blocks tar expects.
pub fn write(entries: &[Entry], mtime: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(entries.iter().map(|e| 512 + e.data().len().next_multiple_of(512)).sum());
    for e in entries {
        out.extend_from_slice(&header(e, mtime)?);
        let data = e.data();
        out.extend_from_slice(data);
        out.resize(out.len().next_multiple_of(512), 0);
    }
    out.resize(out.len() + 1024, 0);
    Ok(out)
}

/// The 512-byte ustar header of `e`.
fn header(e: &Entry, mtime: u64) -> Result<[u8; 512], String> {
    if e.path.is_empty() || e.path.starts_with('/') || e.path.ends_with('/') || e.path.contains("//") {
        return Err(format!("tar entry {:?}: a path must be relative, without empty parts", e.path));
    }
    let mut h = [0u8; 512];
    // Directories are named with a trailing slash, as GNU tar writes them.
    let name = if e.kind == Kind::Dir { format!("{}/", e.path) } else { e.path.clone() };
    let (prefix, rest) =
        split_name(&name).ok_or_else(|| format!("tar entry {name:?}: the path is too long for ustar"))?;
    put(&mut h[0..100], rest.as_bytes());
    put(&mut h[345..500], prefix.as_bytes());
    octal(&mut h[100..108], u64::from(e.mode & 0o7777));
    octal(&mut h[108..116], u64::from(e.uid));
    octal(&mut h[116..124], u64::from(e.gid));
    octal(&mut h[124..136], e.data().len() as u64);
    octal(&mut h[136..148], mtime);
    let (flag, link) = match &e.kind {
        Kind::File(_) => (b'0', ""),
        Kind::HardLink(t) => (b'1', t.as_str()),
        Kind::Symlink(t) => (b'2', t.as_str()),
        Kind::Dir => (b'5', ""),
    };
    if link.len() > 100 {
        return Err(format!("tar entry {name:?}: the link target {link:?} is over 100 bytes"));
    }
    h[156] = flag;
    put(&mut h[157..257], link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // Owner names stay empty: the numeric ids are what a runtime uses.
    octal(&mut h[329..337], 0);
    octal(&mut h[337..345], 0);
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let field = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(field.as_bytes());
    Ok(h)
}

/// `name` as ustar's (prefix, name): the whole name when it fits 100 bytes, else split at a `/`
/// so the prefix fits 155 bytes and the rest 100.
fn split_name(name: &str) -> Option<(&str, &str)> {
    if name.len() <= 100 {
        return Some(("", name));
    }
    // Split at the first slash that leaves at most 100 bytes after it (a trailing slash of a
    // directory stays in the name part).
    let body = name.strip_suffix('/').unwrap_or(name);
    body.match_indices('/')
        .map(|(i, _)| i)
        .find(|&i| name.len() - i - 1 <= 100)
        .filter(|&i| i <= 155 && i > 0)
        .map(|i| (&name[..i], &name[i + 1..]))
}

fn put(field: &mut [u8], value: &[u8]) {
    field[..value.len()].copy_from_slice(value);
}

/// A zero-padded octal number ending with NUL, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let text = format!("{value:0width$o}\0", width = field.len() - 1);
    field.copy_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// What GNU tar lists for `archive` (`tar --numeric-owner --full-time -tvf -`).
    fn listed(archive: &[u8]) -> String {
        let mut child = Command::new("tar")
            .args(["--numeric-owner", "--full-time", "-tvf", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tar runs (apt-get install tar)");
        child.stdin.take().expect("stdin").write_all(archive).expect("write to tar");
        let out = child.wait_with_output().expect("tar ends");
        assert!(out.status.success(), "tar -t: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8")
    }

    #[test]
    fn gnu_tar_reads_modes_owners_links_and_long_names_as_written() {
        let long = format!("usr/share/doc/{}/copyright", "x".repeat(120));
        let entries = vec![
            Entry::dir("git", 0o2775).owned(65533, 65533),
            Entry::dir("tmp", 0o1777),
            Entry::file("usr/bin/treesync", 0o755, b"#!/bin/sh\n".to_vec()),
            Entry::symlink("usr/bin/git-sync", "treesync"),
            Entry { kind: Kind::HardLink("usr/bin/treesync".into()), ..Entry::file("usr/bin/copy", 0o755, vec![]) },
            Entry::file(&long, 0o644, vec![b'a'; 1000]),
        ];
        let archive = write(&entries, 1_700_000_000).expect("written");
        assert_eq!(archive.len() % 512, 0);
        // One space between columns (tar pads them).
        let text: String =
            listed(&archive).lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n").collect();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[0].starts_with("drwxrwsr-x 65533/65533 0 2023-11-14 ") && lines[0].ends_with(" git/"), "{text}");
        assert!(lines[1].starts_with("drwxrwxrwt 0/0 ") && lines[1].ends_with(" tmp/"), "{text}");
        assert!(lines[2].starts_with("-rwxr-xr-x 0/0 10 ") && lines[2].ends_with(" usr/bin/treesync"), "{text}");
        assert!(
            lines[3].starts_with("lrwxrwxrwx 0/0 ") && lines[3].ends_with(" usr/bin/git-sync -> treesync"),
            "{text}"
        );
        assert!(
            lines[4].starts_with("hrwxr-xr-x 0/0 ") && lines[4].ends_with(" usr/bin/copy link to usr/bin/treesync")
        );
        assert!(lines[5].starts_with("-rw-r--r-- 0/0 1000 ") && lines[5].ends_with(&long), "{text}");
        assert_eq!(write(&entries, 1_700_000_000).expect("written"), archive, "the same entries make the same bytes");
    }

    #[test]
    fn what_ustar_cannot_hold_is_refused() {
        let deep = "d/".repeat(200) + "f";
        assert!(write(&[Entry::file(&deep, 0o644, vec![])], 0).expect_err("too long").contains("too long"));
        assert!(write(&[Entry::symlink("l", &"t".repeat(101))], 0).expect_err("target").contains("over 100"));
        assert!(write(&[Entry::file("/abs", 0o644, vec![])], 0).is_err());
        assert!(write(&[Entry::dir("a//b", 0o755)], 0).is_err());
    }
}
