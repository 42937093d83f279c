//! `treesync generate` (hidden): the man pages and shell completions, rendered from the real clap
//! definition so they cannot drift from `--help`. `cargo xtask dist` ships them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap_complete::Shell;

/// The shells we ship completions for; clap_complete names the files treesync.bash, _treesync and
/// treesync.fish.
const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// What to write: `man` (treesync.1 and treesync-SUBCOMMAND.1), `completions` (treesync.bash,
    /// _treesync for zsh, treesync.fish) or `all`.
    #[arg(value_name = "WHAT", default_value = "all", value_parser = ["all", "man", "completions"])]
    pub what: String,
    /// The directory to write into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
}

/// Write the man pages (`what` = "man"), the completions ("completions") or both ("all") of
/// `cmd` into `out_dir`, creating it if needed. Hidden subcommands (this one) get neither.
pub fn run(cmd: clap::Command, what: &str, out_dir: &Path) -> anyhow::Result<()> {
    let (man, completions) = match what {
        "all" => (true, true),
        "man" => (true, false),
        "completions" => (false, true),
        other => anyhow::bail!("cannot generate {other:?}: choose man, completions or all"),
    };
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    let mut written = Vec::new();
    if man {
        man_pages(cmd.clone(), out_dir)
            .with_context(|| format!("cannot write the man pages into {}", out_dir.display()))?;
        written.push("man pages");
    }
    if completions {
        let name = cmd.get_name().to_string();
        let mut cmd = visible(&cmd);
        for shell in SHELLS {
            clap_complete::generate_to(shell, &mut cmd, &name, out_dir)
                .with_context(|| format!("cannot write the {shell} completions into {}", out_dir.display()))?;
        }
        written.push("completions");
    }
    eprintln!("treesync: wrote the {} into {}", written.join(" and "), out_dir.display());
    Ok(())
}

/// `treesync.1` and one page per visible subcommand (`treesync-sync.1`, …; no `help`), like
/// `clap_mangen::generate_to`, but every page's footer names the version, not only the top one.
fn man_pages(cmd: clap::Command, out_dir: &Path) -> std::io::Result<()> {
    fn write(cmd: clap::Command, source: &str, out_dir: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            write(sub, source, out_dir)?;
        }
        clap_mangen::Man::new(cmd).source(source).generate_to(out_dir).map(drop)
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let source = format!("{} {}", cmd.get_name(), cmd.get_version().unwrap_or_default());
    write(cmd, source.trim_end(), out_dir)
}

/// `cmd` without its hidden subcommands, for clap_complete, which completes them all (clap
/// issue #1335). clap has no way to remove a subcommand, so a command with a hidden subcommand
/// below it is reassembled from what completions use: its arguments, groups and visible
/// subcommands; the rest (help texts, templates) is left behind.
fn visible(cmd: &clap::Command) -> clap::Command {
    fn has_hidden(cmd: &clap::Command) -> bool {
        cmd.get_subcommands().any(|s| s.is_hide_set() || has_hidden(s))
    }
    if !has_hidden(cmd) {
        return cmd.clone();
    }
    // clap takes names as &'static str (without its `string` feature); this runs once per process.
    let leak = |s: &str| -> &'static str { s.to_owned().leak() };
    let mut out = clap::Command::new(leak(cmd.get_name()))
        .version(cmd.get_version().map(leak))
        .visible_aliases(cmd.get_visible_aliases().map(leak).collect::<Vec<_>>())
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(visible))
        .subcommand_required(cmd.is_subcommand_required_set())
        .arg_required_else_help(cmd.is_arg_required_else_help_set())
        .disable_help_subcommand(cmd.is_disable_help_subcommand_set());
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> clap::Command {
        clap::Command::new("app")
            .version("1.2.3")
            .arg(clap::Arg::new("verbose").long("verbose").action(clap::ArgAction::Count).global(true))
            .subcommand(clap::Command::new("shown").about("A visible one").arg(clap::Arg::new("deep").long("deep")))
            .subcommand(clap::Command::new("secret").hide(true).arg(clap::Arg::new("out").long("out-dir")))
            .subcommand_required(true)
    }

    #[test]
    fn completions_and_man_pages_leave_hidden_subcommands_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cmd = app();
        run(cmd.clone(), "all", dir.path()).expect("generate");
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        names.sort();
        assert_eq!(names, ["_app", "app-shown.1", "app.1", "app.bash", "app.fish"]);
        for file in ["_app", "app.bash", "app.fish"] {
            let text = std::fs::read_to_string(dir.path().join(file)).expect("read");
            assert!(text.contains("shown") && text.contains("deep") && text.contains("verbose"), "{file}");
            assert!(!text.contains("secret") && !text.contains("out-dir"), "{file} completes a hidden subcommand");
        }
        let page = std::fs::read_to_string(dir.path().join("app-shown.1")).expect("read");
        assert!(page.contains("app 1.2.3"), "{page}");
        // The reassembled command still parses what the real one does.
        visible(&cmd).try_get_matches_from(["app", "--verbose", "shown", "--deep", "x"]).expect("parses");
    }
}
