//! `sync::check_place`: the directory targets a sync refuses, and the ones it takes.

use std::path::Path;

use treesync_core::sync::{self, Place};

#[allow(clippy::result_large_err)] // sync::Error as the library returns it
fn check(target: &str, force: bool) -> Result<(), sync::Error> {
    let place = Place {
        target: Path::new(target),
        git_dir: Path::new("/home/me/site/.git"),
        work_dir: Some(Path::new("/home/me/site")),
        home: Some(Path::new("/home/me")),
    };
    sync::check_place(&place, force)
}

#[test]
fn inside_the_git_directory_is_refused_even_without_force() {
    for force in [false, true] {
        let e = check("/home/me/site/.git/tree", force).expect_err("inside .git");
        assert!(matches!(e, sync::Error::InsideGitDir { .. }), "{e:?}");
        assert!(e.to_string().contains("inside the repository's git directory /home/me/site/.git"), "{e}");
    }
}

#[test]
fn force_refuses_the_root_the_home_and_the_repository() {
    for (target, what) in [
        ("/", "the filesystem root"),
        ("/home/me", "your home directory"),
        ("/home/me/site", "the repository's working tree"),
        ("/home", "a directory holding your home directory"),
    ] {
        assert!(check(target, false).is_ok(), "{target} without --force: a sync there adds, never removes");
        let e = check(target, true).expect_err(target);
        assert!(matches!(e, sync::Error::WouldWreck { .. }), "{e:?}");
        assert!(e.to_string().contains(&format!("it is {what}")), "{target}: {e}");
    }
    let bare =
        Place { target: Path::new("/srv/git"), git_dir: Path::new("/srv/git/site.git"), work_dir: None, home: None };
    let e = sync::check_place(&bare, true).expect_err("holds the repository");
    assert!(e.to_string().contains("a directory holding the repository"), "{e}");
}

#[test]
fn other_directories_are_fine_with_or_without_force() {
    for force in [false, true] {
        check("/srv/www/site", force).expect("an ordinary target");
        check("/home/me/site-copy", force).expect("beside the repository");
    }
}
