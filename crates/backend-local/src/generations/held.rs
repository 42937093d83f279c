//! [`Host::held`] on this machine: the slots some process holds open, from `/proc`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;
use treesync_backend::backend::Error;
use treesync_backend::generation::AtTarget;
use treesync_backend::path::STATE_DIR;

use super::inner::*;

impl Inner {
    pub(super) fn held_blocking(&self) -> Result<BTreeMap<String, Vec<u32>>, Error> {
        let parent = self.parent_fd()?;
        // The parent as the kernel names it (what /proc shows for paths beneath it).
        let real = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&parent)))
            .map_err(|e| Error::io("resolve", self.parent.display(), e))?;
        let home = real.join(&self.home);
        let target = matches!(self.at_target_blocking()?, AtTarget::Dir { .. }).then(|| real.join(&self.name));
        Ok(held_under(&home, target.as_deref()))
    }
}

/// The slots under `home` (and `target`, as [`AT_TARGET`]) some process holds open, from
/// `/proc/*/fd/*` and `/proc/*/cwd`; processes that cannot be read are skipped. Of this
/// process, `O_PATH` descriptors and descriptors in a generation's `.treesync` are left out:
/// they are the roots and state folders treesync's own backends keep open, not readers.
pub(crate) fn held_under(home: &Path, target: Option<&Path>) -> BTreeMap<String, Vec<u32>> {
    let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let me = std::process::id();
    let my_exe = std::fs::read_link("/proc/self/exe").ok();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    // The slot a path is in, and whether it is in that generation's state folder.
    let slot_of = |p: &Path| -> Option<(String, bool)> {
        // A name the kernel dropped from its cache (FUSE and NFS revalidate names: a directory
        // held across a RENAME_EXCHANGE can read `HOME/gK (deleted)`) still says where it is.
        let text = p.as_os_str().as_bytes();
        let p = Path::new(OsStr::from_bytes(text.strip_suffix(b" (deleted)").unwrap_or(text)));
        let state = |rest: &Path| rest.components().next().is_some_and(|c| c.as_os_str() == STATE_DIR);
        if let Ok(rest) = p.strip_prefix(home) {
            let mut parts = rest.components();
            let first = parts.next()?.as_os_str().to_str()?.to_string();
            return (first != TMP).then(|| (first, state(parts.as_path())));
        }
        let t = target?;
        p.strip_prefix(t).ok().map(|rest| (AT_TARGET.to_string(), state(rest)))
    };
    // The slots' roots and the target by inode: a directory held across a RENAME_EXCHANGE on a
    // filesystem that revalidates names (FUSE, NFS) can show the other one's name in /proc.
    use std::os::unix::fs::MetadataExt;
    let mut roots: Vec<((u64, u64), String)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(home) {
        for e in entries.flatten() {
            if let (Ok(m), Some(n)) = (std::fs::symlink_metadata(e.path()), e.file_name().to_str())
                && m.is_dir()
                && n != TMP
            {
                roots.push(((m.dev(), m.ino()), n.to_string()));
            }
        }
    }
    if let Some(t) = target
        && let Ok(m) = std::fs::symlink_metadata(t)
        && m.is_dir()
    {
        roots.push(((m.dev(), m.ino()), AT_TARGET.to_string()));
    }
    let by_inode = |fd: &Path| -> Option<String> {
        let m = std::fs::metadata(fd).ok()?;
        roots.iter().find(|(id, _)| *id == (m.dev(), m.ino())).map(|(_, n)| n.clone())
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let base = p.path();
        // A child of this process that still runs this program is a fork on its way to an
        // exec (a filter driver, git): it holds copies of this process's descriptors for a
        // moment, which are this process's, not a reader's.
        let mine = pid == me
            || (my_exe.is_some()
                && parent_of(&base) == Some(me)
                && std::fs::read_link(base.join("exe")).ok() == my_exe);
        let mut found = Vec::new();
        if let Ok(cwd) = std::fs::read_link(base.join("cwd")) {
            found.extend(slot_of(&cwd).map(|(slot, _)| by_inode(&base.join("cwd")).unwrap_or(slot)));
        }
        if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
            for fd in fds.flatten() {
                let Ok(path) = std::fs::read_link(fd.path()) else { continue };
                let Some((slot, in_state)) = slot_of(&path) else { continue };
                if mine && (in_state || is_o_path(&base, &fd.file_name())) {
                    continue;
                }
                found.push(by_inode(&fd.path()).unwrap_or(slot));
            }
        }
        for slot in found {
            let pids = out.entry(slot).or_default();
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    out
}

/// The parent process id of the process at `/proc/PID`.
fn parent_of(proc: &Path) -> Option<u32> {
    let status = std::fs::read_to_string(proc.join("status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|v| v.trim().parse().ok())
}

/// Whether descriptor `fd` of the process at `/proc/PID` was opened with `O_PATH`.
fn is_o_path(proc: &Path, fd: &OsStr) -> bool {
    let Ok(info) = std::fs::read_to_string(proc.join("fdinfo").join(fd)) else { return false };
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|f| f & OFlags::PATH.bits() != 0)
}

/// The entries of the directory `dir` that some process holds open (a descriptor beneath one,
/// or its working directory there), with the holders' pids, from `/proc`; for trees kept
/// outside a home (`treesync git-sync`'s worktrees). `dir` is resolved as the kernel names it.
pub fn held_in(dir: &Path) -> BTreeMap<String, Vec<u32>> {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    held_under(&real, None)
}
