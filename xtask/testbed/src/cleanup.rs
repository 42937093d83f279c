//! `cargo xtask cleanup`: remove what a test process killed outright leaves behind — slow
//! filesystem mounts whose daemon is gone (ENOTCONN) and nfs-ganesha testbeds whose test
//! process is gone. The testbeds clean up after themselves even then; this is the backstop
//! `.ci/run` calls on exit. It leaves alone what a running test still uses (other test runs may
//! share the machine). Mounts are read with treesync's one mountinfo reader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use treesync_testkit::{ganesha, mountinfo, slowfs};

/// On the command line of every process of a ganesha testbed (supervisor, unshare, the
/// namespace's init, ganesha.nfsd), followed by the rest of its instance directory's name.
const GANESHA_MARK: &str = "/treesync-ganesha-";

/// ENOTCONN: what a FUSE mount answers once its daemon is gone.
const ENOTCONN: i32 = 107;

pub fn run(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("cleanup takes no options, got {args:?}"));
    }
    let mounts = mountinfo::read().map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let slowfs_type = format!("fuse.{}", slowfs::FS_NAME);
    for m in mounts.iter().filter(|m| m.fstype == slowfs_type) {
        if std::fs::metadata(&m.point).is_err_and(|e| e.raw_os_error() == Some(ENOTCONN)) {
            detach(&m.point, "its daemon is gone");
        }
    }
    // A supervisor finishes within milliseconds of its test process: give it a moment first.
    let mut orphans = orphaned_instances();
    for _ in 0..10 {
        if orphans.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        orphans = orphaned_instances();
    }
    for (instance, pids) in &orphans {
        for pid in pids {
            eprintln!("cleanup: killing process {pid} of the orphaned ganesha testbed {instance}");
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
    let tmp = std::env::temp_dir();
    for instance in orphans.keys() {
        let dir = tmp.join(instance);
        if let Some(m) = mounts.iter().find(|m| m.source == ganesha::TMPFS_SOURCE && m.point.starts_with(&dir)) {
            detach(&m.point, "its testbed is orphaned");
        }
        eprintln!("cleanup: removing {}", dir.display());
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn detach(point: &std::path::Path, why: &str) {
    eprintln!("cleanup: unmounting {} ({why})", point.display());
    let _ = Command::new("umount").arg("-l").arg(point).status();
}

/// The ganesha testbeds (by instance directory name) none of whose processes has a parent
/// outside the testbed other than pid 1: their test process is gone. With their processes.
fn orphaned_instances() -> BTreeMap<String, Vec<u32>> {
    let procs = processes();
    let mut instances: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (pid, (_, cmdline)) in &procs {
        if let Some(name) = instance_of(cmdline) {
            instances.entry(name).or_default().push(*pid);
        }
    }
    instances.retain(|_, pids| {
        let members: BTreeSet<u32> = pids.iter().copied().collect();
        pids.iter().all(|pid| procs.get(pid).is_some_and(|(ppid, _)| *ppid == 1 || members.contains(ppid)))
    });
    instances
}

/// The instance directory name in a command line (`treesync-ganesha-XXXXXX`).
fn instance_of(cmdline: &[u8]) -> Option<String> {
    let at = cmdline.windows(GANESHA_MARK.len()).position(|w| w == GANESHA_MARK.as_bytes())? + 1;
    let rest = &cmdline[at..];
    let end = rest.iter().position(|b| *b == b'/' || *b == 0 || *b == b' ').unwrap_or(rest.len());
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Every process: pid → (parent pid, command line).
fn processes() -> BTreeMap<u32, (u32, Vec<u8>)> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return BTreeMap::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let base = PathBuf::from(format!("/proc/{pid}"));
            let stat = std::fs::read_to_string(base.join("stat")).ok()?;
            // pid (comm) state ppid …: comm may hold spaces and parentheses, so after the last ')'.
            let ppid = stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, (ppid, std::fs::read(base.join("cmdline")).ok()?)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_are_read_from_command_lines() {
        let cmdline = b"sh\0-c\0script\0/tmp/treesync-ganesha-Ab12Cd\0x";
        assert_eq!(instance_of(cmdline).as_deref(), Some("treesync-ganesha-Ab12Cd"));
        let conf = b"ganesha.nfsd\0-f\0/tmp/treesync-ganesha-Zz9/ganesha.conf";
        assert_eq!(instance_of(conf).as_deref(), Some("treesync-ganesha-Zz9"));
        assert_eq!(instance_of(b"cargo\0test"), None);
    }

    #[test]
    fn this_process_is_no_testbed_and_is_not_listed() {
        let procs = processes();
        assert!(!procs.contains_key(&std::process::id()));
        assert!(procs.get(&1).is_some_and(|(ppid, _)| *ppid == 0), "pid 1's parent is 0");
    }
}
