//! git-sync v4's command line, declared once ([`FLAGS`]) and parsed as git-sync parses it (spf13/pflag
//! and its `env.go`): a flag on the command line wins over its environment variables, which win
//! over the default; of the environment names the new `GITSYNC_*` is read first and every older
//! alias that is set overrides it (so a leftover `GIT_SYNC_*` wins, as in git-sync ≥ 4.4); an
//! environment value that does not parse is fatal (exit 1) even with `--help`; an unknown flag
//! or a malformed value on the command line is a usage error (exit 2); words that are not flags
//! are ignored.
//!
//! Each flag says how treesync supports it ([`Support`]): the same, the same with a difference
//! (documented in `docs/git-sync.md`), or refused with what to use instead — never ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::values::{parse_bool, parse_duration, parse_int};

mod help;
mod table;
pub use help::{help, markdown_table};
pub use table::{ENV_ONLY, FLAGS, Flag, Kind, Support, find};

use Kind::*;

/// A parsed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// [`Kind::Str`].
    Str(String),
    /// [`Kind::Bool`].
    Bool(bool),
    /// [`Kind::Int`].
    Int(i64),
    /// [`Kind::Duration`].
    Duration(Duration),
    /// [`Kind::List`] and [`Kind::Credential`].
    List(Vec<String>),
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub struct Parsed {
    values: BTreeMap<&'static str, Value>,
    /// Flags given on the command line.
    pub on_cli: BTreeSet<&'static str>,
    /// Flags whose environment variable was set.
    pub in_env: BTreeSet<&'static str>,
    /// Env-only values (`GITSYNC_PASSWORD`).
    pub env_only: BTreeMap<&'static str, String>,
    /// Notices to print on stderr (deprecated names), in order.
    pub notices: Vec<String>,
}

/// Why parsing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A usage error on the command line: exit 2.
    Usage(String),
    /// An environment value that does not parse: exit 1.
    Fatal(String),
}

impl Parsed {
    /// The value of `name` (every flag has one: given, from the environment, or the default).
    pub fn get(&self, name: &str) -> &Value {
        self.values.get(name).unwrap_or_else(|| panic!("no flag --{name}"))
    }

    /// A string flag's value.
    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            Value::Str(s) => s,
            v => panic!("--{name} is not a string: {v:?}"),
        }
    }

    /// A bool flag's value.
    pub fn bool(&self, name: &str) -> bool {
        matches!(self.get(name), Value::Bool(true))
    }

    /// An int flag's value.
    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Value::Int(i) => *i,
            v => panic!("--{name} is not an int: {v:?}"),
        }
    }

    /// A duration flag's value.
    pub fn duration(&self, name: &str) -> Duration {
        match self.get(name) {
            Value::Duration(d) => *d,
            v => panic!("--{name} is not a duration: {v:?}"),
        }
    }

    /// A list flag's values.
    pub fn list(&self, name: &str) -> &[String] {
        match self.get(name) {
            Value::List(l) => l,
            v => panic!("--{name} is not a list: {v:?}"),
        }
    }

    /// Whether `name` was given on the command line or its environment variable was set.
    pub fn is_set(&self, name: &str) -> bool {
        self.on_cli.contains(name) || self.in_env.contains(name)
    }
}

fn parse_value(kind: Kind, text: &str) -> Result<Value, String> {
    Ok(match kind {
        Str => Value::Str(text.to_string()),
        Bool => Value::Bool(parse_bool(text)?),
        Int => Value::Int(parse_int(text)?),
        Duration => Value::Duration(parse_duration(text)?),
        List => Value::List(if text.is_empty() { vec![] } else { vec![text.to_string()] }),
        Credential => Value::List(vec![text.to_string()]),
    })
}

fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Str | List | Credential => "string",
        Bool => "bool",
        Int => "int",
        Duration => "duration",
    }
}

/// Parse `args` (without the program name) with the environment `env` (a lookup, so tests
/// need not touch the process's).
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Parsed, Stop> {
    let mut p = Parsed {
        values: BTreeMap::new(),
        on_cli: BTreeSet::new(),
        in_env: BTreeSet::new(),
        env_only: BTreeMap::new(),
        notices: Vec::new(),
    };
    // Defaults, then the environment (env.go: the new name, then each alias that is set).
    for f in FLAGS {
        let default = match f.kind {
            List if !f.default.is_empty() => Value::List(vec![f.default.to_string()]),
            List | Credential => Value::List(vec![]),
            k => parse_value(k, f.default).expect("the defaults parse"),
        };
        p.values.insert(f.name, default);
        if let Some((name, text)) = from_env(f.env, env, &mut p.notices) {
            let value = match f.kind {
                List => Ok(Value::List(text.split(':').filter(|s| !s.is_empty()).map(String::from).collect())),
                Credential => Ok(Value::List(vec![text.clone()])),
                k => parse_value(k, &text),
            }
            .map_err(|e| Stop::Fatal(format!("FATAL: invalid {} env {name}={text:?}: {e}", kind_word(f.kind))))?;
            p.values.insert(f.name, value);
            p.in_env.insert(f.name);
        }
    }
    for (key, names) in ENV_ONLY {
        if let Some((_, text)) = from_env(names, env, &mut p.notices) {
            p.env_only.insert(key, text);
        }
    }
    // The command line.
    let mut lists_replaced = BTreeSet::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        let (f, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let f = if name == "__?" { find("help") } else { find(name) };
            (f.ok_or_else(|| Stop::Usage(format!("unknown flag: --{name}")))?, inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().expect("not empty");
            let rest = &short[c.len_utf8()..];
            let f = if c == '?' {
                find("help")
            } else {
                FLAGS.iter().find(|f| f.short == Some(c) && !matches!(f.support, Support::Deprecated(_)))
            };
            let f = f.ok_or_else(|| Stop::Usage(format!("unknown shorthand flag: '{c}' in {arg}")))?;
            let inline = match rest.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if rest.is_empty() => None,
                None => Some(rest.to_string()),
            };
            (f, inline)
        } else {
            // Not a flag: git-sync ignores it.
            continue;
        };
        let text = match (f.kind, inline) {
            (_, Some(v)) => v,
            (Bool, None) => "true".to_string(),
            (_, None) => match args.get(i) {
                Some(v) => {
                    i += 1;
                    v.clone()
                }
                None => return Err(Stop::Usage(format!("flag needs an argument: --{}", f.name))),
            },
        };
        let value = parse_value(f.kind, &text)
            .map_err(|e| Stop::Usage(format!("invalid argument {text:?} for \"--{}\" flag: {e}", f.name)))?;
        if let Support::Deprecated(notice) = f.support {
            p.notices.push(format!("Flag --{} has been deprecated, {notice}", f.name));
        }
        match (f.kind, value) {
            (List | Credential, Value::List(new)) => {
                let replace = f.kind == List && lists_replaced.insert(f.name);
                let Some(Value::List(old)) = p.values.get_mut(f.name) else { unreachable!("a list flag") };
                if replace {
                    old.clear();
                }
                old.extend(new);
            }
            (_, v) => {
                p.values.insert(f.name, v);
            }
        }
        p.on_cli.insert(f.name);
    }
    Ok(p)
}

/// The value of the first of `names` that is set, every later alias that is set overriding it,
/// with git-sync's notices for the older names.
fn from_env(
    names: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
    notices: &mut Vec<String>,
) -> Option<(String, String)> {
    let (first, aliases) = names.split_first()?;
    let mut found: Option<(String, String)> = env(first).map(|v| (first.to_string(), v));
    for alias in aliases {
        if let Some(v) = env(alias) {
            notices.push(format!("env ${alias} has been deprecated, use ${first} instead"));
            if let Some((prev, _)) = &found {
                notices.push(format!("env ${prev} was overridden by ${alias}"));
            }
            found = Some((alias.to_string(), v));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_env_and_command_line_in_git_syncs_order() {
        let p = parse(&args(&[]), &env_of(&[])).expect("parses");
        assert_eq!(p.int("depth"), 1);
        assert_eq!(p.duration("period"), Duration::from_secs(10));
        assert_eq!(p.str("ref"), "HEAD");
        assert!(p.bool("ssh-known-hosts"));
        assert_eq!(p.list("ssh-key-file"), ["/etc/git-secret/ssh"]);

        let env = env_of(&[("GITSYNC_PERIOD", "2s"), ("GIT_SYNC_PERIOD", "3s"), ("GITSYNC_DEPTH", "0x10")]);
        let p = parse(&args(&["--depth", "5"]), &env).expect("parses");
        // The legacy name wins over GITSYNC_*; the command line over both.
        assert_eq!(p.duration("period"), Duration::from_secs(3));
        assert_eq!(p.int("depth"), 5);
        assert!(p.notices.iter().any(|n| n == "env $GIT_SYNC_PERIOD has been deprecated, use $GITSYNC_PERIOD instead"));
        assert!(p.notices.iter().any(|n| n == "env $GITSYNC_PERIOD was overridden by $GIT_SYNC_PERIOD"));
    }

    #[test]
    fn flag_forms() {
        let p =
            parse(&args(&["--one-time", "ignored", "-v", "3", "--period=100ms", "--http-metrics=false"]), &env_of(&[]))
                .expect("parses");
        assert!(p.bool("one-time"));
        assert_eq!(p.int("verbose"), 3);
        assert_eq!(p.duration("period"), Duration::from_millis(100));
        assert!(!p.bool("http-metrics"));
        let p = parse(&args(&["-v5"]), &env_of(&[])).expect("parses");
        assert_eq!(p.int("verbose"), 5);
        let p = parse(&args(&["--ssh-key-file", "a", "--ssh-key-file=b"]), &env_of(&[("GIT_SSH_KEY_FILE", "x:y")]))
            .expect("parses");
        assert_eq!(p.list("ssh-key-file"), ["a", "b"]);
        let p = parse(&args(&["--credential", "{}"]), &env_of(&[("GITSYNC_CREDENTIAL", "[]")])).expect("parses");
        assert_eq!(p.list("credential"), ["[]", "{}"]);
    }

    #[test]
    fn errors_and_their_exit_classes() {
        assert_eq!(
            parse(&args(&["--nope"]), &env_of(&[])).expect_err("refused"),
            Stop::Usage("unknown flag: --nope".into())
        );
        assert!(matches!(parse(&args(&["--depth", "x"]), &env_of(&[])), Err(Stop::Usage(_))));
        assert!(matches!(parse(&args(&["--repo"]), &env_of(&[])), Err(Stop::Usage(_))));
        let e = parse(&args(&["--help"]), &env_of(&[("GITSYNC_PERIOD", "10")])).expect_err("refused");
        assert_eq!(
            e,
            Stop::Fatal(
                "FATAL: invalid duration env GITSYNC_PERIOD=\"10\": time: missing unit in duration \"10\"".into()
            )
        );
    }

    #[test]
    fn every_flag_is_declared_once_and_documented() {
        let mut names = BTreeSet::new();
        for f in FLAGS {
            assert!(names.insert(f.name), "--{} declared twice", f.name);
            if !matches!(f.support, Support::Deprecated(_)) {
                assert!(!f.help.is_empty(), "--{} has no help", f.name);
            }
        }
        let help = help("git-sync");
        for f in FLAGS.iter().filter(|f| !matches!(f.support, Support::Deprecated(_))) {
            assert!(help.contains(&format!("--{}", f.name)), "--{} missing from --help", f.name);
        }
        assert!(!help.contains("--sync-hook-command"));
    }

    #[test]
    fn docs_list_every_flag_as_declared() {
        let doc = include_str!("../../../../docs/git-sync.md");
        let table = markdown_table();
        assert!(
            doc.contains(&table),
            "docs/git-sync.md's flag table is not the declared one; put this between its markers:\n{table}"
        );
    }
}
