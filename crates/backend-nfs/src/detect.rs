//! Which filesystem a target directory is on, from `/proc/self/mountinfo` (read by
//! [`crate::mountinfo`]).

use std::path::{Path, PathBuf};

pub use crate::mountinfo::{Mount, parse};

impl Mount {
    /// Is this a network filesystem, where lookups are round trips to a server?
    pub fn is_network(&self) -> bool {
        is_network(&self.fstype)
    }
}

/// Filesystem types (and FUSE subtypes) that live on another machine.
const NETWORK: &[&str] = &[
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "ncpfs",
    "afs",
    "ceph",
    "glusterfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ocfs2",
    "gfs2",
    "9p",
    "davfs",
];

const FUSE_NETWORK: &[&str] = &[
    "sshfs",
    "rclone",
    "s3fs",
    "gcsfuse",
    "goofys",
    "juicefs",
    "glusterfs",
    "ceph-fuse",
    "cephfs",
    "davfs",
    "nfs",
    "smbnetfs",
    "moosefs",
    "mfs",
    "lizardfs",
    "seaweedfs",
    // treesync's own slow-filesystem testbed stands for a NAS.
    "treesync-slowfs",
];

/// Is `fstype` (as in mountinfo) a network filesystem?
pub fn is_network(fstype: &str) -> bool {
    if let Some(sub) = fstype.strip_prefix("fuse.").or_else(|| fstype.strip_prefix("fuseblk.")) {
        return FUSE_NETWORK.contains(&sub);
    }
    NETWORK.contains(&fstype)
}

/// `path` made absolute with its symlinks resolved as far as it exists; the components that
/// do not exist yet are appended as they are (a target about to be created).
pub fn resolved(path: &Path) -> PathBuf {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut missing = Vec::new();
    let mut p = path.as_path();
    loop {
        if let Ok(c) = p.canonicalize() {
            return missing.iter().rev().fold(c, |acc, name| acc.join(name));
        }
        match (p.parent(), p.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                p = parent;
            }
            _ => return path,
        }
    }
}

/// The mount `path` is on (or would be on, if it does not exist yet: its nearest existing
/// ancestor decides).
pub fn mount_of(path: &Path) -> std::io::Result<Mount> {
    let resolved = resolved(path);
    crate::mountinfo::read()?
        .into_iter()
        // The last mount of the longest matching point wins: later mounts cover earlier ones.
        .filter(|m| resolved.starts_with(&m.point))
        .fold(None::<Mount>, |best, m| match best {
            Some(b) if b.point.as_os_str().len() > m.point.as_os_str().len() => Some(b),
            _ => Some(m),
        })
        .ok_or_else(|| std::io::Error::other(format!("no mount found for {}", resolved.display())))
}

/// Which backend suits a directory target, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Use the NFS backend.
    pub network: bool,
    /// One line for `status` and logs, e.g. `/mnt/nas/site is on nfs4 (nas:/export at /mnt/nas)`.
    pub reason: String,
}

/// Choose between the NFS and the local backend for `dir`.
pub fn choose(dir: &Path) -> Choice {
    match mount_of(dir) {
        Ok(m) => Choice {
            network: m.is_network(),
            reason: format!("{} is on {} ({} at {})", dir.display(), m.fstype, m.source, m.point.display()),
        },
        Err(e) => Choice { network: false, reason: format!("cannot tell the filesystem of {} ({e})", dir.display()) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Mount lines of every kind, shared with the parser's tests.
    use crate::mountinfo::tests::INFO;

    #[test]
    fn network_filesystems_are_recognized() {
        let m = parse(INFO);
        let net: Vec<bool> = m.iter().map(Mount::is_network).collect();
        assert_eq!(net, [false, true, false, true, true, true, false, false]);
    }

    #[test]
    fn a_local_directory_is_not_network() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = choose(&dir.path().join("not-yet-created"));
        assert!(!c.network, "{}", c.reason);
        assert!(c.reason.contains("is on"), "{}", c.reason);
    }
}
