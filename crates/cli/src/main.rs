//! `treesync`: keep a read-only working tree in sync with a git repository without scanning it.
//!
//! The binary parses the command line ([`args`]), runs the command ([`cmd`]: each calls the
//! library and renders what it returns, with [`render`]'s helpers) and maps errors to exit codes.

// The doc comments of `args` are the `--help` text clap prints: URLs and `[defaults]` there are
// for people reading a terminal, not rustdoc links.
#[allow(rustdoc::bare_urls, rustdoc::broken_intra_doc_links)]
mod args;
mod cmd;
mod config;
mod exit;
use exit::exit_code;
mod generate;
mod monitor;
mod render;
#[cfg(test)]
mod schema;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use crate::render::error_text;

/// Die quietly on a closed pipe (`treesync plan | head`), like other Unix tools, instead of
/// panicking on the next print: exit 141 (a shell's code for SIGPIPE). SIGPIPE itself stays
/// ignored (Rust's default): filter drivers that exit without reading all their input (git
/// ignores SIGPIPE around them too) must fail the one file, not kill treesync silently.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message =
            payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        if message.is_some_and(|m| m.starts_with("failed printing to stdout") && m.contains("Broken pipe")) {
            std::process::exit(141);
        }
        default(info)
    }));
}

/// Keep glibc's `malloc` from raising its mmap threshold as the process frees large buffers
/// (its default: the threshold follows the largest mmapped block freed, up to 32 MiB). A
/// checkout frees a few buffers of a MiB or more per chunk of 8,192 ops (a chunk's ops, the
/// stat data its files were written with); once the threshold has risen, such buffers come
/// from the heaps of the threads that allocate them and stay there as holes. Measured on a
/// 1,000,000-file initial checkout that records its stat data: 80.1 MiB peak RSS with the
/// moving threshold, 60.1 MiB with it fixed at 128 KiB (glibc's initial value, which a fixed
/// setting keeps), as before the recording.
#[allow(unsafe_code)]
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator; called first thing in main,
    // before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    fixed_mmap_threshold();
    quiet_on_closed_stdout();
    // git-sync's command line is git-sync's grammar (pflag, its environment), not clap's: run
    // under the name `git-sync` (an image's entrypoint, a symlink) or as `treesync git-sync`.
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let invoked = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
    if invoked == "git-sync" {
        return cmd::gitsync::main("git-sync", &argv[1..]);
    }
    if argv.get(1).is_some_and(|a| a == "git-sync") {
        return cmd::gitsync::main("treesync git-sync", &argv[2..]);
    }
    let cli = args::Cli::parse();
    init_logging(cli.verbose);
    tracing::trace!("phase: parsed");
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("treesync: error: {}", error_text(&e));
            ExitCode::from(exit_code(&e))
        }
    }
}

/// Logs on stderr, warnings only unless -v or RUST_LOG ask for more.
fn init_logging(verbose: u8) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or_else(|e| {
            eprintln!("treesync: warning: ignoring RUST_LOG={spec:?}: {e} (use e.g. treesync=debug or info)");
            Targets::new().with_default(level)
        }),
        _ => Targets::new().with_target("treesync", level).with_default(LevelFilter::WARN.min(level)),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbose >= 2);
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter)).try_init();
}
