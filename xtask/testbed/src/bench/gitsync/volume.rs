//! A dedicated filesystem per tool, so that what a sync writes can be counted at the device:
//! an ext4 image on the bench's tmpfs, attached to a loop device and mounted `noatime`. The
//! bytes a sync wrote are the loop device's written sectors (`/sys/block/loopN/stat`, field 7)
//! between a `syncfs` before it and one after it: data, metadata and journal, everything the
//! filesystem sent to its disk, whether the tool wrote it itself or through `git`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use xtask::util::run_quiet;

/// A mounted ext4 image on its own loop device; unmounted and detached on drop.
pub(super) struct Volume {
    image: PathBuf,
    /// `/dev/loopN`.
    device: String,
    /// Where it is mounted.
    pub mount: PathBuf,
}

impl Volume {
    /// Make an ext4 image of `size` bytes at `image` (sparse) with one inode per `bytes_per_inode`,
    /// attach it and mount it at `mount`.
    pub fn create(image: &Path, mount: &Path, size: u64, bytes_per_inode: u64) -> Result<Volume, String> {
        let _ = std::fs::remove_file(image);
        let file = std::fs::File::create(image).map_err(|e| format!("{}: {e}", image.display()))?;
        file.set_len(size).map_err(|e| format!("{}: {e}", image.display()))?;
        drop(file);
        // Inode tables and journal initialised now, not by ext4lazyinit in the background while a
        // sync is being measured.
        run_quiet(
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-i"])
                .arg(bytes_per_inode.to_string())
                .arg(image),
        )
        .map_err(|e| format!("mkfs.ext4 (apt-get install e2fsprogs): {e}"))?;
        let device = run_quiet(Command::new("losetup").args(["--find", "--show"]).arg(image))
            .map_err(|e| format!("losetup (root needed, and a free loop device): {e}"))?
            .trim()
            .to_string();
        std::fs::create_dir_all(mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        let volume = Volume { image: image.to_path_buf(), device, mount: mount.to_path_buf() };
        run_quiet(Command::new("mount").args(["-t", "ext4", "-o", "noatime"]).arg(&volume.device).arg(mount))?;
        Ok(volume)
    }

    /// Flush the filesystem (`sync -f`, i.e. `syncfs`) and return the bytes its device has
    /// written since it was attached.
    pub fn flushed_bytes(&self) -> Result<u64, String> {
        run_quiet(Command::new("sync").arg("-f").arg(&self.mount))?;
        let name = self.device.trim_start_matches("/dev/");
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat"))
            .map_err(|e| format!("/sys/block/{name}/stat: {e}"))?;
        let sectors: u64 = stat
            .split_whitespace()
            .nth(6)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("/sys/block/{name}/stat: no written sectors in {stat:?}"))?;
        Ok(sectors * 512)
    }

    /// Bytes in use on the filesystem (`df`), for the notes.
    pub fn used_bytes(&self) -> Option<u64> {
        let out = run_quiet(Command::new("df").args(["-B1", "--output=used"]).arg(&self.mount)).ok()?;
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// The loop device, e.g. `/dev/loop3`.
    pub fn device(&self) -> &str {
        &self.device
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        // A process still inside (a tool's leftover) makes umount fail: retry, then detach lazily.
        for _ in 0..10 {
            if Command::new("umount").arg(&self.mount).status().is_ok_and(|s| s.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        if Command::new("mountpoint").arg("-q").arg(&self.mount).status().is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.mount);
    }
}
