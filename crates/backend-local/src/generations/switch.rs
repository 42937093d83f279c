//! The switch of the target: a link renamed over it, or `renameat2(RENAME_EXCHANGE)`; the
//! probe for the exchange, the claim of a slot and the check that the slot switched in is the
//! directory claimed.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use treesync_backend::backend::Error;
use treesync_backend::generation::{AtTarget, Switch, Switched};

use super::inner::*;

impl Inner {
    /// Swap `a` in `a_dir` and `b` in `b_dir` (`renameat2(RENAME_EXCHANGE)`).
    pub(super) fn exchange<P: rustix::path::Arg, Q: rustix::path::Arg>(
        &self,
        a_dir: impl AsFd,
        a: P,
        b_dir: impl AsFd,
        b: Q,
    ) -> Result<(), Errno> {
        #[cfg(test)]
        if self.no_exchange {
            return Err(Errno::INVAL);
        }
        rustix::fs::renameat_with(a_dir, a, b_dir, b, RenameFlags::EXCHANGE)
    }

    /// The text of a link `switch` makes to `slot`: `.NAME.treesync/SLOT`.
    pub(super) fn link_text(&self, slot: &str) -> Vec<u8> {
        let mut t = self.home.as_bytes().to_vec();
        t.push(b'/');
        t.extend_from_slice(slot.as_bytes());
        t
    }

    /// The slot a link text names, when it is exactly the form `switch` makes.
    pub(super) fn slot_of_link(&self, text: &[u8]) -> Option<String> {
        let rest = text.strip_prefix(self.home.as_bytes())?.strip_prefix(b"/")?;
        (valid_slot(rest) && rest != TMP.as_bytes()).then(|| String::from_utf8(rest.to_vec()).ok()).flatten()
    }
    pub(super) fn probe_exchange(&self) -> Result<bool, Error> {
        let home = self.home()?;
        let tmp = self.tmp(home.as_fd())?;
        let (a, b) = (self.tmp_name("probe"), self.tmp_name("probe"));
        let shown = || self.shown(TMP);
        let mut last = Errno::NOENT;
        // A lock taken meanwhile clears tmp; try again then.
        for _ in 0..3 {
            for n in [&a, &b] {
                match rustix::fs::mkdirat(&tmp, n.as_str(), Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(Error::io("create", shown(), io(e))),
                }
            }
            let r = self.exchange(&tmp, a.as_str(), &tmp, b.as_str());
            for n in [&a, &b] {
                let _ = rustix::fs::unlinkat(&tmp, n.as_str(), AtFlags::REMOVEDIR);
            }
            match r {
                Ok(()) => return Ok(true),
                Err(e) if unsupported(e) => return Ok(false),
                Err(Errno::NOENT) => last = Errno::NOENT,
                Err(e) => return Err(Error::io("probe RENAME_EXCHANGE in", shown(), io(e))),
            }
        }
        Err(Error::io("probe RENAME_EXCHANGE in", shown(), io(last)))
    }

    /// The identity of `HOME/slot`, which must be a real directory of this user's own
    /// (opened without following a symlink).
    pub(super) fn own_dir(&self, home: BorrowedFd<'_>, slot: &str) -> Result<Identity, Error> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(home, slot, flags, Mode::empty())
            .map_err(|e| self.not_a_dir(home, OsStr::new(slot), self.shown(slot), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("look at", self.shown(slot), io(e)))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(Error::io(
                "use",
                self.shown(slot),
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "it belongs to uid {}, not to this user (uid {me}): someone else made it, so treesync neither writes in it nor switches the target to it\n  hint: check who can write in {} (ls -ld), remove what was planted (rm -r {}) and run again",
                        st.st_uid,
                        self.home_path().display(),
                        self.shown(slot),
                    ),
                ),
            ));
        }
        Ok((st.st_dev, st.st_ino))
    }

    pub(super) fn claim_blocking(&self, slot: &str) -> Result<(), Error> {
        let slot = self.slot_name(slot)?;
        let home = self.home()?;
        match rustix::fs::mkdirat(&home, slot, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create", self.shown(slot), io(e))),
        }
        let id = self.own_dir(home.as_fd(), slot)?;
        self.claims.lock().expect("never poisoned").insert(slot.to_string(), id);
        Ok(())
    }

    /// What `HOME/slot` must be for a switch to it: the directory claimed for it, or (a slot
    /// not claimed by this process: leaving generations) the directory it holds now, if this
    /// user's own. A slot that is not what was claimed stops the switch before it is made.
    pub(super) fn expected(&self, home: BorrowedFd<'_>, slot: &str) -> Result<Identity, Error> {
        let now = self.own_dir(home, slot)?;
        match self.claims.lock().expect("never poisoned").get(slot) {
            Some(claimed) if *claimed != now => Err(self.replaced(slot, false)),
            _ => Ok(now),
        }
    }

    /// The target path is now the directory `id` (checked right after a switch).
    pub(super) fn target_is(&self, parent: BorrowedFd<'_>, id: Identity) -> bool {
        rustix::fs::statat(parent, &self.name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory && (st.st_dev, st.st_ino) == id)
    }

    /// The error of a slot replaced by someone else before or during the switch.
    pub(super) fn replaced(&self, slot: &str, undone: bool) -> Error {
        let when = if undone {
            "during the switch; the switch was undone, so the target shows what it showed before"
        } else {
            "before the switch; the target was not switched"
        };
        Error::io(
            "switch",
            self.target.display(),
            std::io::Error::other(format!(
                "the generation prepared in {} was replaced {when} (by a symlink or a directory someone else put there)\n  hint: check who can write in {} (ls -ld); remove what was planted (ls -la {}) and run the sync again",
                self.shown(slot),
                self.home_path().display(),
                self.shown(slot),
            )),
        )
    }

    /// Swap `HOME/slot` (expected to be the directory `id`) with the target path, and check
    /// right after that the target is that directory; if it is not (the slot was replaced
    /// between the check and the swap), swap back and fail.
    pub(super) fn exchange_checked(
        &self,
        home: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        slot: &str,
        id: Identity,
    ) -> Result<(), Error> {
        self.exchange(home, slot, parent, &self.name).map_err(|e| Error::io("switch", self.target.display(), io(e)))?;
        if self.target_is(parent, id) {
            return Ok(());
        }
        self.exchange(home, slot, parent, &self.name)
            .map_err(|e| Error::io("undo the switch of", self.target.display(), io(e)))?;
        Err(self.replaced(slot, true))
    }

    pub(super) fn switch_blocking(&self, slot: &str, how: Switch, displaced: &str) -> Result<Switched, Error> {
        let slot = self.slot_name(slot)?;
        let displaced = self.slot_name(displaced)?;
        let parent = self.parent_fd()?;
        let home = self.home()?;
        let at = self.at_target_blocking()?;
        let id = self.expected(home.as_fd(), slot)?;
        let switched = self.switch_checked(slot, how, displaced, parent, home.as_fd(), at, id);
        if switched.is_ok() {
            self.claims.lock().expect("never poisoned").remove(slot);
        }
        switched
    }

    #[allow(clippy::too_many_arguments)]
    fn switch_checked(
        &self,
        slot: &str,
        how: Switch,
        displaced: &str,
        parent: BorrowedFd<'_>,
        home: BorrowedFd<'_>,
        at: AtTarget,
        id: Identity,
    ) -> Result<Switched, Error> {
        let previous = match how {
            // Readers resolve the link through the home at every open: symlink mode trusts
            // the home (docs/atomic.md); the slot is checked just before the link is made.
            Switch::Symlink => self.switch_to_link(slot, displaced, parent, home, at)?,
            Switch::Exchange => self.switch_by_exchange(slot, parent, home, at, id)?,
        };
        Ok(Switched { previous })
    }

    /// [`Switch::Symlink`]: a link to `slot` made in `HOME/tmp` and renamed over the target; a
    /// target that is a real directory is moved to `HOME/displaced`. Answers the slot the target
    /// showed before.
    fn switch_to_link(
        &self,
        slot: &str,
        displaced: &str,
        parent: BorrowedFd<'_>,
        home: BorrowedFd<'_>,
        at: AtTarget,
    ) -> Result<Option<String>, Error> {
        let fail = |what: &'static str, e: Errno| Error::io(what, self.target.display(), io(e));
        let tmp = self.tmp(home)?;
        let link = self.tmp_name("link");
        rustix::fs::symlinkat(OsStr::from_bytes(&self.link_text(slot)), &tmp, link.as_str())
            .map_err(|e| Error::io("create link in", self.shown(TMP), io(e)))?;
        Ok(match at {
            AtTarget::Missing => {
                rustix::fs::renameat(&tmp, link.as_str(), parent, &self.name).map_err(|e| fail("switch", e))?;
                None
            }
            AtTarget::Link { slot: previous, .. } => {
                rustix::fs::renameat(&tmp, link.as_str(), parent, &self.name).map_err(|e| fail("switch", e))?;
                previous.filter(|p| p != slot)
            }
            AtTarget::Dir { .. } => {
                match self.exchange(&tmp, link.as_str(), parent, &self.name) {
                    Ok(()) => {
                        // The directory is now at tmp/link.
                        rustix::fs::renameat(&tmp, link.as_str(), home, displaced)
                            .map_err(|e| Error::io("move aside", self.shown(displaced), io(e)))?;
                    }
                    Err(e) if unsupported(e) => {
                        rustix::fs::renameat(parent, &self.name, home, displaced)
                            .map_err(|e| Error::io("move aside", self.shown(displaced), io(e)))?;
                        rustix::fs::renameat(&tmp, link.as_str(), parent, &self.name).map_err(|e| fail("switch", e))?;
                    }
                    Err(e) => return Err(fail("switch", e)),
                }
                Some(displaced.to_string())
            }
            AtTarget::Other(what) => return Err(self.not_switchable(what)),
        })
    }

    /// [`Switch::Exchange`]: `HOME/slot` (expected to be the directory `id`) swapped with the
    /// target, or renamed into place where there is none; a link at the target is removed.
    /// Answers the slot the target showed before.
    fn switch_by_exchange(
        &self,
        slot: &str,
        parent: BorrowedFd<'_>,
        home: BorrowedFd<'_>,
        at: AtTarget,
        id: Identity,
    ) -> Result<Option<String>, Error> {
        let fail = |what: &'static str, e: Errno| Error::io(what, self.target.display(), io(e));
        Ok(match at {
            AtTarget::Missing => {
                rustix::fs::renameat(home, slot, parent, &self.name).map_err(|e| fail("switch", e))?;
                if !self.target_is(parent, id) {
                    rustix::fs::renameat(parent, &self.name, home, slot).map_err(|e| fail("undo the switch of", e))?;
                    return Err(self.replaced(slot, true));
                }
                None
            }
            AtTarget::Dir { .. } => {
                self.exchange_checked(home, parent, slot, id)?;
                Some(slot.to_string())
            }
            AtTarget::Link { slot: previous, .. } => {
                match self.exchange(home, slot, parent, &self.name) {
                    Ok(()) if !self.target_is(parent, id) => {
                        self.exchange(home, slot, parent, &self.name).map_err(|e| fail("undo the switch of", e))?;
                        return Err(self.replaced(slot, true));
                    }
                    // The old link is now at HOME/slot: removed (unlink never follows).
                    Ok(()) => rustix::fs::unlinkat(home, slot, AtFlags::empty())
                        .map_err(|e| Error::io("remove link", self.shown(slot), io(e)))?,
                    Err(e) if unsupported(e) => {
                        rustix::fs::unlinkat(parent, &self.name, AtFlags::empty())
                            .map_err(|e| fail("remove link", e))?;
                        rustix::fs::renameat(home, slot, parent, &self.name).map_err(|e| fail("switch", e))?;
                        if !self.target_is(parent, id) {
                            rustix::fs::renameat(parent, &self.name, home, slot)
                                .map_err(|e| fail("undo the switch of", e))?;
                            return Err(self.replaced(slot, true));
                        }
                    }
                    Err(e) => return Err(fail("switch", e)),
                }
                previous.filter(|p| p != slot)
            }
            AtTarget::Other(what) => return Err(self.not_switchable(what)),
        })
    }

    pub(super) fn not_switchable(&self, what: &str) -> Error {
        Error::io(
            "switch",
            self.target.display(),
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("it is a {what}\n  hint: remove it or choose another target"),
            ),
        )
    }

    pub(super) fn unlink_target_blocking(&self, slot: &str) -> Result<(), Error> {
        let slot = self.slot_name(slot)?;
        let parent = self.parent_fd()?;
        let home = self.home()?;
        let fail = |what: &'static str, e: Errno| Error::io(what, self.target.display(), io(e));
        let id = self.expected(home.as_fd(), slot)?;
        match self.exchange(&home, slot, parent, &self.name) {
            Ok(()) if !self.target_is(parent, id) => {
                self.exchange(&home, slot, parent, &self.name).map_err(|e| fail("undo the switch of", e))?;
                Err(self.replaced(slot, true))
            }
            Ok(()) => rustix::fs::unlinkat(&home, slot, AtFlags::empty())
                .map_err(|e| Error::io("remove link", self.shown(slot), io(e))),
            Err(e) if unsupported(e) => {
                rustix::fs::unlinkat(parent, &self.name, AtFlags::empty()).map_err(|e| fail("remove link", e))?;
                rustix::fs::renameat(&home, slot, parent, &self.name).map_err(|e| fail("move into place", e))?;
                if self.target_is(parent, id) {
                    return Ok(());
                }
                rustix::fs::renameat(parent, &self.name, &home, slot).map_err(|e| fail("undo the switch of", e))?;
                Err(self.replaced(slot, true))
            }
            Err(e) => Err(fail("move into place", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::generations::inner::test_host as host;

    #[test]
    fn only_the_exact_link_text_switch_makes_names_a_slot() {
        let h = host(Path::new("/srv"));
        assert_eq!(h.link_text("g1"), b".site.treesync/g1");
        assert_eq!(h.slot_of_link(b".site.treesync/g1").as_deref(), Some("g1"));
        for other in [
            &b"./.site.treesync/g1"[..],
            b"/srv/.site.treesync/g1",
            b".site.treesync/g1/",
            b".site.treesync/tmp",
            b".site.treesync/..",
            b".site.treesync/",
            b".other.treesync/g1",
            b".site.treesync/g1/x",
        ] {
            assert_eq!(h.slot_of_link(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    /// The slots and the target as they are: `(target is a link to, target's marker file,
    /// slots)`.
    fn layout(dir: &Path) -> (Option<PathBuf>, Option<String>, Vec<String>) {
        let t = dir.join("site");
        let mut slots: Vec<String> = std::fs::read_dir(dir.join(".site.treesync"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        slots.retain(|s| s != "tmp");
        slots.sort();
        (std::fs::read_link(&t).ok(), std::fs::read_to_string(t.join("marker")).ok(), slots)
    }

    /// Every switch on a filesystem without `RENAME_EXCHANGE`: the renames that stand in for
    /// it. (With it, the host suite checks them: `tests/generations.rs`.)
    #[test]
    fn every_switch_works_without_rename_exchange() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = host(dir.path());
        h.no_exchange = true;
        h.create_home_blocking().expect("home");
        assert!(!h.probe_exchange().expect("probe"));
        let slot = |name: &str| {
            let p = dir.path().join(".site.treesync").join(name);
            std::fs::create_dir(&p).expect("slot");
            std::fs::write(p.join("marker"), name).expect("marker");
        };
        let plain = dir.path().join("site");
        std::fs::create_dir(&plain).expect("plain target");
        std::fs::write(plain.join("marker"), "plain").expect("marker");

        // A real directory becomes a link; it is displaced into the home.
        slot("g1");
        let s = h.switch_blocking("g1", Switch::Symlink, "g2").expect("switch");
        assert_eq!(s.previous.as_deref(), Some("g2"));
        let l = layout(dir.path());
        assert_eq!(l, (Some(".site.treesync/g1".into()), Some("g1".into()), vec!["g1".into(), "g2".into()]));
        assert_eq!(std::fs::read_to_string(dir.path().join(".site.treesync/g2/marker")).expect("displaced"), "plain");
        assert!(matches!(h.at_target_blocking().expect("at"), AtTarget::Link { slot: Some(s), .. } if s == "g1"));

        // Link to link.
        slot("g3");
        let s = h.switch_blocking("g3", Switch::Symlink, "unused").expect("switch");
        assert_eq!(s.previous.as_deref(), Some("g1"));
        assert_eq!(layout(dir.path()).0, Some(".site.treesync/g3".into()));

        // A link becomes the real directory of a slot (exchange mode); the link is gone.
        slot("g4");
        let s = h.switch_blocking("g4", Switch::Exchange, "unused").expect("switch");
        assert_eq!(s.previous.as_deref(), Some("g3"));
        assert_eq!(layout(dir.path()), (None, Some("g4".into()), vec!["g1".into(), "g2".into(), "g3".into()]));

        // Directory to directory needs the exchange.
        slot("g5");
        let r = h.switch_blocking("g5", Switch::Exchange, "unused");
        assert!(r.is_err(), "exchange mode is never chosen without RENAME_EXCHANGE");
        std::fs::remove_dir_all(dir.path().join(".site.treesync/g5")).expect("rm");

        // Back to a link, then leave: the slot becomes the target directory again.
        h.switch_blocking("g1", Switch::Symlink, "g6").expect("to a link");
        h.unlink_target_blocking("g1").expect("unlink target");
        let (link, marker, slots) = layout(dir.path());
        assert_eq!((link, marker), (None, Some("g1".into())));
        assert!(!slots.contains(&"g1".to_string()) && slots.contains(&"g6".to_string()), "{slots:?}");
        assert!(
            std::fs::read_dir(dir.path().join(".site.treesync/tmp")).expect("tmp").next().is_none(),
            "no link left"
        );
    }
}
