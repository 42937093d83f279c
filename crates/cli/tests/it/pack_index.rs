//! Pack indexes with 64-bit offsets, read through the patched gix-pack (`vendor/gix-pack`,
//! whose index open no longer reads the whole 32-bit offset table): every object is still
//! found where git finds it, and an index whose 32-bit entries point past its 64-bit table is
//! an error that names the corruption, never a panic and never a write.

use std::path::{Path, PathBuf};

use crate::treesync;
use treesync_testkit::cli::s;
use treesync_testkit::cli::temp_target;
use treesync_testkit::history::{self, random_history};
use treesync_testkit::{BareRepo, git, gitcheck};

/// The one pack of `repo` (after `git repack -ad`) and its index.
fn the_pack(repo: &Path) -> (PathBuf, PathBuf) {
    let dir = repo.join("objects/pack");
    let packs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("pack dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");
    let pack = packs[0].clone();
    (pack.clone(), pack.with_extension("idx"))
}

/// A repository whose history is packed into one pack whose index keeps every offset but the
/// first in the 64-bit table (`git index-pack --index-version=2,12`: offsets past 12 bytes, the
/// pack header, are "large"), as packs over 2 GiB have some. (`2,0` would make the first one
/// large too, an index git itself then refuses to read: "wrong index v2 file size".)
/// Returns the repository, its commits and the number of objects in the pack.
fn all_offsets_large() -> (BareRepo, Vec<String>, usize) {
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &random_history(18, 6));
    git(&bare.path, &["repack", "-adq"]);
    let (pack, idx) = the_pack(&bare.path);
    std::fs::remove_file(&idx).expect("remove idx");
    git(&bare.path, &["index-pack", "--index-version=2,12", "-o", s(&idx), s(&pack)]);
    // The number of objects: the last entry of the index's fan-out table.
    let bytes = std::fs::read(&idx).expect("idx");
    let objects = u32::from_be_bytes(bytes[8 + 255 * 4..8 + 256 * 4].try_into().expect("4 bytes")) as usize;
    assert!(objects > 10, "{objects} objects");
    // Version 2 layout: 8 header + 1,024 fan-out + per object 20 (id) + 4 (crc) + 4 (offset),
    // 8 per large offset, + 40 of checksums: every object but the first has a 64-bit offset.
    assert_eq!(bytes.len(), 8 + 1024 + objects * (20 + 4 + 4) + (objects - 1) * 8 + 40, "not all large offsets");
    (bare, commits, objects)
}

#[test]
fn objects_are_found_through_64_bit_offsets() {
    let (bare, commits, _) = all_offsets_large();
    let (_dir, target) = temp_target("t");
    // Forth through the history and back to the first commit, each checked against git.
    let mut order: Vec<&String> = commits.iter().collect();
    order.push(&commits[0]);
    for rev in order {
        let o = treesync(&["sync", "-q", "--repo", s(&bare.path), "--ref", rev, "--target", s(&target)]);
        assert!(o.status.success(), "{rev}: {}", String::from_utf8_lossy(&o.stderr));
        let diff = gitcheck::diff(&gitcheck::expected(&bare.path, rev, &[]), &target);
        assert!(diff.is_empty(), "{rev}: {diff:#?}");
    }
}

#[test]
fn an_index_pointing_past_its_large_offset_table_is_an_error_not_a_panic() {
    let (bare, commits, objects) = all_offsets_large();
    let (_, idx) = the_pack(&bare.path);
    // Point every 32-bit offset entry one past the end of the 64-bit table (objects - 1
    // entries). Upstream gix-pack refused this at open; the patched one refuses each lookup.
    let mut bytes = std::fs::read(&idx).expect("idx");
    let offsets = 8 + 1024 + objects * (20 + 4);
    let past = 0x8000_0000u32 | (objects - 1) as u32;
    for k in 0..objects {
        bytes[offsets + 4 * k..offsets + 4 * k + 4].copy_from_slice(&past.to_be_bytes());
    }
    // The index file is read-only as git writes it.
    let mut perms = std::fs::metadata(&idx).expect("idx").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&idx, perms).expect("chmod");
    std::fs::write(&idx, &bytes).expect("write idx");

    let (_dir, target) = temp_target("t");
    let o = treesync(&["sync", "--repo", s(&bare.path), "--ref", &commits[0], "--target", s(&target)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a corrupt pack index synced: {err}");
    assert_ne!(o.status.code(), Some(101), "treesync panicked: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("beyond pack data") || err.contains("corrupt"),
        "the error does not name the corruption: {err}"
    );
    // Nothing of the tree was written.
    let written: Vec<_> = std::fs::read_dir(&target)
        .map(|d| d.map(|e| e.expect("entry").file_name()).filter(|n| n != ".treesync").collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "{written:?}");
}
