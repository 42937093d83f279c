//! The one reader of `/proc/self/mountinfo` in treesync: which filesystems are mounted where.
//! Mount detection ([`crate::detect`]) and the testbeds (the slow FUSE filesystem, nfs-ganesha's
//! export) all ask it.
//!
//! A line reads `id parent major:minor root mountpoint options [optional fields…] - fstype
//! source super-options`; the kernel writes space, tab, newline and backslash in paths as
//! `\ooo`, which [`parse`] undoes, byte for byte (mount points need not be UTF-8).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One mount, as a line of mountinfo lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Mount point.
    pub point: PathBuf,
    /// Filesystem type as the kernel names it (`nfs4`, `ext4`, `fuse.sshfs`, …).
    pub fstype: String,
    /// What is mounted (`server:/export`, `/dev/sda1`, …).
    pub source: String,
}

/// The mounts listed in a mountinfo text, in order (later mounts cover earlier ones at the
/// same point). Lines that do not have the shape are left out.
pub fn parse(info: &str) -> Vec<Mount> {
    info.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            // The optional fields start at the 7th: the separator comes after them.
            let sep = fields.iter().skip(6).position(|f| *f == "-")? + 6;
            Some(Mount {
                point: PathBuf::from(OsString::from_vec(unescape(fields.get(4)?))),
                fstype: String::from_utf8_lossy(&unescape(fields.get(sep + 1)?)).into_owned(),
                source: String::from_utf8_lossy(&unescape(fields.get(sep + 2).unwrap_or(&""))).into_owned(),
            })
        })
        .collect()
}

/// The mounts of this process's mount namespace, from `/proc/self/mountinfo`.
pub fn read() -> std::io::Result<Vec<Mount>> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|info| parse(&info))
}

/// What is mounted exactly at `point` (the topmost mount there), or `None` if nothing is.
/// `point` must be spelled as the kernel shows it: absolute, symlinks resolved.
pub fn at(point: &Path) -> std::io::Result<Option<Mount>> {
    Ok(read()?.into_iter().rev().find(|m| m.point == point))
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /mnt/nas rw,relatime shared:2 - nfs4 nas:/export rw,vers=4.1
31 30 0:41 / /mnt/nas/scratch rw - tmpfs tmpfs rw
32 22 0:42 / /mnt/my\\040share rw - cifs //srv/share rw
33 22 0:43 / /mnt/fuse rw,nosuid,nodev - fuse.sshfs user@host:/srv rw
34 22 0:44 / /mnt/slow rw - fuse.treesync-slowfs treesync-slowfs rw
35 22 0:45 / /mnt/local rw - fuse.bindfs /src rw
36 22 0:46 / /mnt/\\377x\\134 rw master:3 - tmpfs a\\040b rw
";

    #[test]
    fn parses_mountinfo_with_escapes() {
        let m = parse(INFO);
        assert_eq!(m.len(), 8);
        assert_eq!(m[1].fstype, "nfs4");
        assert_eq!(m[1].source, "nas:/export");
        assert_eq!(m[3].point, PathBuf::from("/mnt/my share"));
        // Not UTF-8, a backslash, an optional field, an escaped source.
        assert_eq!(m[7].point.as_os_str().as_encoded_bytes(), b"/mnt/\xffx\\");
        assert_eq!((m[7].fstype.as_str(), m[7].source.as_str()), ("tmpfs", "a b"));
    }

    #[test]
    fn lines_without_the_separator_are_left_out() {
        let m = parse("22 1 8:1 / / rw\n\n1 2 3\n30 22 0:40 / /x rw - - ext4\n");
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].point, PathBuf::from("/x"));
        // A lone `-` as the fstype is the field after the separator, not a second separator.
        assert_eq!(m[0].fstype, "-");
    }

    #[test]
    fn the_root_of_this_process_is_mounted() {
        let root = at(Path::new("/")).expect("read /proc/self/mountinfo").expect("/ is a mount point");
        assert!(!root.fstype.is_empty(), "{root:?}");
        assert_eq!(at(Path::new("/no/such/mount/point")).expect("read"), None);
    }
}
