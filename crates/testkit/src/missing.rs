//! A test whose real component (FUSE, nfs-ganesha, moto, strace, …) is not on this machine
//! fails, naming the command that provides it; it never passes by skipping. `cargo xtask test`
//! installs all of them (as root on Debian) before it runs the tests.

use std::fmt;
use std::path::PathBuf;

/// The test command of the README: installs what the tests need (as root on Debian), then runs
/// them all.
pub const TEST_COMMAND: &str = "cargo xtask test";

/// A component a test needs is missing: what, and the command that provides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// What is missing (`strace`, `/dev/fuse`, `moto_server`, …).
    pub what: String,
    /// The command (or setting) that provides it, e.g. `apt-get install strace`.
    pub provided_by: String,
}

impl Missing {
    /// `what` is missing; `provided_by` provides it.
    pub fn new(what: impl Into<String>, provided_by: impl Into<String>) -> Missing {
        Missing { what: what.into(), provided_by: provided_by.into() }
    }

    /// Fail the test that needed it.
    #[track_caller]
    pub fn fail(&self) -> ! {
        panic!("{self}")
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is missing: {} (or run `{TEST_COMMAND}` as root, which installs what the tests need)",
            self.what, self.provided_by
        )
    }
}

impl std::error::Error for Missing {}

/// `name` in `PATH`, then in the sbin and bin directories (a test's `PATH` may lack them).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The path of `program`; fails the test if it is not installed, naming the Debian `package`
/// that provides it.
#[track_caller]
pub fn require_program(program: &str, package: &str) -> PathBuf {
    find_program(program).unwrap_or_else(|| Missing::new(program, format!("apt-get install {package}")).fail())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_command_that_provides_it() {
        let m = Missing::new("strace", "apt-get install strace");
        let text = m.to_string();
        assert!(text.starts_with("strace is missing: apt-get install strace"), "{text}");
        assert!(text.contains("cargo xtask test"), "{text}");
        let panic = std::panic::catch_unwind(|| m.fail()).expect_err("fail panics");
        assert_eq!(panic.downcast_ref::<String>(), Some(&text));
    }

    #[test]
    fn programs_are_found_in_path_and_missing_ones_fail() {
        assert!(find_program("sh").is_some(), "sh is on every machine");
        let e = std::panic::catch_unwind(|| require_program("no-such-program-here", "nothing"))
            .expect_err("a missing program fails the test");
        let text = e.downcast_ref::<String>().expect("a formatted message");
        assert!(text.contains("apt-get install nothing"), "{text}");
    }
}
