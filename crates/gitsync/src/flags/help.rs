//! What `--help` and `docs/git-sync.md` say of the flags, both rendered from [`FLAGS`].

use super::table::Kind::*;
use super::table::{FLAGS, Support};

/// `--help`: git-sync's flags with their environment names and defaults, and what treesync
/// does differently.
pub fn help(program: &str) -> String {
    let mut out = format!(
        "{program}: keep ROOT/LINK pointing at a checkout of a git ref, a drop-in for kubernetes/git-sync v4\n\
         that brings each new commit in at the cost of the diff (treesync {}).\n\n\
         USAGE\n    {program} --repo=URL --root=DIR [OPTIONS]\n\n\
         OPTIONS (a flag wins over its environment variables, which win over the default)\n",
        env!("CARGO_PKG_VERSION")
    );
    for f in FLAGS.iter().filter(|f| !matches!(f.support, Support::Deprecated(_))) {
        let short = f.short.map(|c| format!("-{c}, ")).unwrap_or_default();
        let value = match f.kind {
            Bool => String::new(),
            Int => " <int>".into(),
            Duration => " <duration>".into(),
            _ => " <string>".into(),
        };
        out.push_str(&format!("\n    {short}--{}{value}\n            {}", f.name, f.help));
        if !f.default.is_empty() && f.default != "false" && f.default != "0" {
            out.push_str(&format!(" (default: {})", f.default));
        }
        out.push('\n');
        if !f.env.is_empty() {
            out.push_str(&format!("            env: ${}\n", f.env.join(", $")));
        }
        match f.support {
            Support::Differs(d) => out.push_str(&format!("            treesync: {d}\n")),
            Support::Refused(r) => out.push_str(&format!("            treesync: refused: {r}\n")),
            _ => {}
        }
    }
    out.push_str(
        "\nENVIRONMENT VARIABLES\n\n    GITSYNC_PASSWORD\n            the password or personal access token to use for git auth (prefer --password-file)\n\n\
         See docs/git-sync.md for every flag's status, the layout and how to migrate.\n",
    );
    out
}

/// The table of every flag for `docs/git-sync.md`: flag, environment names, default, and
/// treesync's support (a test keeps the document equal to it).
pub fn markdown_table() -> String {
    let mut out = String::from("| flag | environment | default | treesync |\n|---|---|---|---|\n");
    for f in FLAGS.iter().filter(|f| !matches!(f.support, Support::Deprecated(_))) {
        let name = match f.short {
            Some(c) => format!("`-{c}`, `--{}`", f.name),
            None => format!("`--{}`", f.name),
        };
        let env = if f.env.is_empty() {
            "—".to_string()
        } else {
            f.env.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", ")
        };
        let default = if f.default.is_empty() { "—".to_string() } else { format!("`{}`", f.default) };
        let support = match f.support {
            Support::Same => "same".to_string(),
            Support::Differs(d) => format!("same, except: {d}"),
            Support::Refused(r) => format!("**refused**: {r}"),
            Support::Deprecated(_) => unreachable!("filtered"),
        };
        out.push_str(&format!("| {name} | {env} | {default} | {support} |\n"));
    }
    out
}
