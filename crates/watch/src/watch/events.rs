//! [`Events`]: a local repository's [`Origin`] that is told when a ref moves (inotify, through
//! the `notify` crate) instead of looking every interval.
//!
//! When git moves a ref it writes `X.lock` and renames it to `X` (a loose ref under `refs/`),
//! or rewrites `packed-refs` the same way (`git pack-refs`, `git gc`, a deletion), and rewrites
//! `HEAD` for a symbolic ref. The rename (or the removal of a deleted ref) is the moment the ref
//! moved: git appends to the reflog before it, so the reflog tells nothing the rename does not.
//! Those are the places watched: the repository's directory itself (not recursively: `HEAD`,
//! `packed-refs`, the top-level pseudo-refs) and `refs/` recursively (a directory created later,
//! `refs/heads/team/`, is watched as it appears; a ref that does not exist yet is seen when it
//! is created). `objects/` and `logs/` are never watched: a push writes many objects and no ref
//! moves until their refs are renamed into place. `*.lock` churn and reads (our own look at the
//! refs opens them) wake nobody. A wake looks at once, without waiting for more changes: the
//! change that woke it is the ref's last step, and a change made while the look runs wakes the
//! next wait at once.
//!
//! Where events cannot tell of every push, [`Events::open`] refuses with [`NoEvents`], and
//! [`origin()`] falls back to polling with the reason in its [`describe`](Origin::describe): a
//! repository on NFS, SMB/CIFS, FUSE, 9p or another network or cluster filesystem (a push made
//! on another host raises no inotify event here), no inotify instance, or the watch limit
//! (`fs.inotify.max_user_watches`) reached.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};

use super::origin::{Origin, Poll, sleep};

/// Why a repository's refs cannot be followed by events (the watch then polls).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoEvents {
    /// The repository is on a network, FUSE or cluster filesystem: a push made on another host
    /// (or through the FUSE server's other clients) raises no inotify event here.
    #[error("the repository is on {fs} (inotify sees no pushes from other hosts)")]
    Network {
        /// The repository's directory.
        path: PathBuf,
        /// The filesystem's kind (`nfs`, `smb`, `fuse`, `9p`, …), from `statfs`.
        fs: &'static str,
    },
    /// Which filesystem the repository is on could not be found out.
    #[error("could not tell which filesystem {} is on", path.display())]
    Statfs {
        /// The repository's directory.
        path: PathBuf,
        /// What `statfs` said.
        #[source]
        source: std::io::Error,
    },
    /// The user's inotify watches are used up.
    #[error(
        "the inotify watch limit is reached watching {}; raise it: sysctl fs.inotify.max_user_watches=524288 \
         (and in /etc/sysctl.d/ to keep it)",
        path.display()
    )]
    WatchLimit {
        /// The directory that could not be watched.
        path: PathBuf,
        /// What inotify said.
        #[source]
        source: notify::Error,
    },
    /// inotify could not be set up (no inotify in this kernel or container, too many inotify
    /// instances: `fs.inotify.max_user_instances`, a directory that cannot be read).
    #[error(
        "inotify could not be set up for {} (if there are too many inotify instances, raise \
         fs.inotify.max_user_instances with sysctl)",
        path.display()
    )]
    Setup {
        /// The directory that could not be watched.
        path: PathBuf,
        /// What inotify said.
        #[source]
        source: notify::Error,
    },
}

/// The filesystems whose changes made elsewhere raise no inotify event here, by `statfs`
/// `f_type` (linux/magic.h and the filesystems' own headers).
const REMOTE: &[(u64, &str)] = &[
    (0x6969, "nfs"),
    (0x517B, "smb"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb2"),
    (0x6573_5546, "fuse"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "ceph"),
    (0x5346_414F, "afs"),
    (0x6B41_4653, "afs"),
    (0x7375_7245, "coda"),
    (0x564C, "ncp"),
    (0x0BD0_0BD0, "lustre"),
    (0x0116_1970, "gfs2"),
    (0x7461_636F, "ocfs2"),
    (0x1980_0202, "glusterfs"),
];

/// The kind of network, FUSE or cluster filesystem `f_type` (as `statfs` reports it) names, or
/// `None` for a local one (ext4, xfs, btrfs, tmpfs, overlay…), where inotify sees every change.
pub fn remote_filesystem(f_type: u64) -> Option<&'static str> {
    // f_type is a signed word on some targets: compare its low 32 bits.
    let f_type = f_type & 0xFFFF_FFFF;
    REMOTE.iter().find(|(magic, _)| *magic == f_type).map(|(_, name)| *name)
}

/// [`remote_filesystem`] of the filesystem `path` is on.
pub fn filesystem_of(path: &Path) -> std::io::Result<Option<&'static str>> {
    let st = rustix::fs::statfs(path)?;
    #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)] // its type differs by target
    Ok(remote_filesystem(st.f_type as u64))
}

/// What the watcher's thread shares with [`Events::wait`].
#[derive(Debug, Default)]
struct Wake {
    /// Holds one permit while a change is not yet looked at (changes before the look are one
    /// permit).
    notify: tokio::sync::Notify,
    /// Waits ended by a change.
    wakes: AtomicU64,
}

/// The refs' files of one repository, watched with inotify. See the [module docs](self).
pub struct Events {
    git_dir: PathBuf,
    /// Kept for its inotify instance: dropped, it stops watching.
    _watcher: notify::RecommendedWatcher,
    wake: Arc<Wake>,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events").field("git_dir", &self.git_dir).finish_non_exhaustive()
    }
}

/// The places in the repository whose changes matter, and which do not.
#[derive(Debug, Clone)]
struct Places {
    git_dir: PathBuf,
    common_dir: PathBuf,
    /// Top-level names that are refs: `HEAD`, `packed-refs`, and followed pseudo-refs
    /// (`ORIG_HEAD`…).
    top: Vec<String>,
}

impl Places {
    /// Whether `event` may have moved a ref.
    fn matters(&self, event: &notify::Event) -> bool {
        if event.need_rescan() {
            return true;
        }
        // Reads (ours too: a look at the refs opens them) and a lock's close are no move.
        if matches!(event.kind, EventKind::Access(_)) {
            return false;
        }
        event.paths.iter().any(|p| self.is_ref_file(p))
    }

    fn is_ref_file(&self, p: &Path) -> bool {
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            return true; // a non-UTF-8 ref name under refs/: not ours to judge
        };
        if name.ends_with(".lock") {
            return false;
        }
        p.starts_with(self.common_dir.join("refs"))
            || ((p.parent() == Some(&self.git_dir) || p.parent() == Some(&self.common_dir))
                && self.top.iter().any(|t| t == name))
    }
}

impl Events {
    /// Watch the refs of the repository at `git_dir` (its git directory: a bare repository, or
    /// `.git`), for a watch following `revs`. Refused, with the reason, where events would
    /// miss pushes or inotify is not available; see [`NoEvents`].
    pub fn open(git_dir: &Path, revs: &[String]) -> Result<Events, NoEvents> {
        let git_dir = std::fs::canonicalize(git_dir).unwrap_or_else(|_| git_dir.to_path_buf());
        // A linked worktree's refs and packed-refs live in the common directory.
        let common_dir = std::fs::read_to_string(git_dir.join("commondir"))
            .ok()
            .map(|c| git_dir.join(c.trim()))
            .and_then(|c| std::fs::canonicalize(c).ok())
            .unwrap_or_else(|| git_dir.clone());
        for dir in [&git_dir, &common_dir] {
            match filesystem_of(dir) {
                Ok(Some(fs)) => return Err(NoEvents::Network { path: dir.clone(), fs }),
                Ok(None) => {}
                Err(source) => return Err(NoEvents::Statfs { path: dir.clone(), source }),
            }
        }
        let mut top = vec!["HEAD".to_string(), "packed-refs".to_string(), "refs".to_string()];
        top.extend(revs.iter().filter(|r| !r.contains('/')).cloned());
        let places = Places { git_dir: git_dir.clone(), common_dir: common_dir.clone(), top };
        let wake = Arc::new(Wake::default());
        let shared = wake.clone();
        let handler = move |res: notify::Result<notify::Event>| {
            // An error: the watcher lost track (a queue overflow): look, to be sure.
            if res.as_ref().map_or(true, |event| places.matters(event)) {
                shared.notify.notify_one();
            }
        };
        let setup = |path: &Path, source: notify::Error| match source.kind {
            notify::ErrorKind::MaxFilesWatch => NoEvents::WatchLimit { path: path.to_path_buf(), source },
            _ => NoEvents::Setup { path: path.to_path_buf(), source },
        };
        let mut watcher = notify::recommended_watcher(handler).map_err(|e| setup(&git_dir, e))?;
        let mut dirs = vec![(git_dir.clone(), RecursiveMode::NonRecursive)];
        if common_dir != git_dir {
            dirs.push((common_dir.clone(), RecursiveMode::NonRecursive));
        }
        dirs.push((common_dir.join("refs"), RecursiveMode::Recursive));
        for (dir, mode) in dirs {
            watcher.watch(&dir, mode).map_err(|e| setup(&dir, e))?;
        }
        Ok(Events { git_dir, _watcher: watcher, wake })
    }

    /// How many waits a change ended (changes made before the wait looks count once).
    pub fn wakes(&self) -> u64 {
        self.wake.wakes.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Origin for Events {
    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            let now = tokio::time::Instant::now();
            if interrupt.load(Ordering::SeqCst) || now >= deadline {
                return;
            }
            tokio::select! {
                _ = self.wake.notify.notified() => {
                    self.wake.wakes.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                // Checked every 50 ms, as Origin::wait promises.
                _ = tokio::time::sleep(Duration::from_millis(50).min(deadline - now)) => {}
            }
        }
    }

    fn describe(&self, interval: Duration) -> String {
        let _ = interval;
        "woken by changes to the refs (inotify)".to_string()
    }

    fn polls(&self) -> bool {
        false
    }
}

/// Polling every interval because events are not available, with the reason for the log:
/// `polling every 5s: the repository is on nfs (inotify sees no pushes from other hosts)`.
#[derive(Debug, Clone)]
pub struct Fallback {
    /// Why events are not used, on one line.
    pub reason: String,
}

#[async_trait::async_trait]
impl Origin for Fallback {
    async fn wait(&self, max: Duration, interrupt: &AtomicBool) {
        sleep(max, interrupt).await
    }

    fn describe(&self, interval: Duration) -> String {
        format!("{}: {}", Poll.describe(interval), self.reason)
    }
}

/// The origin of a watch of the local repository at `git_dir`: [`Events`] where it can be set
/// up, else [`Fallback`] polling that says why; `poll`: [`Poll`] (asked for).
pub fn origin(git_dir: &Path, revs: &[String], poll: bool) -> Arc<dyn Origin> {
    if poll {
        return Arc::new(Poll);
    }
    match Events::open(git_dir, revs) {
        Ok(events) => Arc::new(events),
        Err(why) => Arc::new(Fallback { reason: crate::line::one_line(&why) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_and_fuse_filesystems_are_told_from_local_ones() {
        assert_eq!(remote_filesystem(0x6969), Some("nfs"));
        assert_eq!(remote_filesystem(0xFF53_4D42), Some("cifs"));
        // A signed f_type, as 32-bit targets report CIFS.
        assert_eq!(remote_filesystem(0xFFFF_FFFF_FF53_4D42), Some("cifs"));
        assert_eq!(remote_filesystem(0x6573_5546), Some("fuse"));
        assert_eq!(remote_filesystem(0x0102_1997), Some("9p"));
        // ext4, tmpfs, btrfs, xfs, overlayfs.
        for local in [0xEF53, 0x0102_1994, 0x9123_683E, 0x5846_5342, 0x794C_7630] {
            assert_eq!(remote_filesystem(local), None, "{local:#x}");
        }
    }

    #[test]
    fn a_temporary_directory_is_on_a_local_filesystem() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(filesystem_of(dir.path()).expect("statfs"), None);
    }

    #[test]
    fn lock_files_and_reads_are_no_change() {
        let places =
            Places { git_dir: "/r".into(), common_dir: "/r".into(), top: vec!["HEAD".into(), "packed-refs".into()] };
        let ev = |kind, p: &str| notify::Event::new(kind).add_path(p.into());
        let create = EventKind::Create(notify::event::CreateKind::File);
        assert!(places.matters(&ev(create, "/r/refs/heads/main")));
        assert!(places.matters(&ev(create, "/r/packed-refs")));
        assert!(places.matters(&ev(create, "/r/HEAD")));
        assert!(!places.matters(&ev(create, "/r/refs/heads/main.lock")));
        assert!(!places.matters(&ev(create, "/r/packed-refs.lock")));
        assert!(!places.matters(&ev(create, "/r/FETCH_HEAD")));
        assert!(!places.matters(&ev(create, "/r/index")));
        let open = EventKind::Access(notify::event::AccessKind::Open(notify::event::AccessMode::Any));
        assert!(!places.matters(&ev(open, "/r/refs/heads/main")));
    }
}
