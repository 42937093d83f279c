//! `cargo xtask bench attributes`: what `.gitattributes` conversions cost an incremental sync
//! on the local backend, next to `git checkout` of the same change (issue 15).
//!
//! Two generated repositories of the same N files: one with a root `.gitattributes`
//! (`* text=auto eol=crlf`, `*.bat text eol=crlf`, `*.c ident`), one without. Each has commit
//! A and, built on A, K10 and K100 (A with 10 or 100 files modified); the one with attributes
//! also has SUB, A plus a `.gitattributes` in one directory (`*.txt -text`) and nothing else.
//! For each change the table gives, for treesync and for git: wall time (median of R runs, each
//! from A), the files the run created (`openat(…O_CREAT…)` in the work tree, `strace -f -y`),
//! every syscall on the work tree, the stat-family syscalls of the process and, for treesync,
//! the ops it applied (`sync --json`, `.applied`). The claim to check: with attributes an
//! incremental sync applies K ops for K changed paths, as without them; an attributes-only
//! commit rewrites exactly the files whose converted bytes change (git leaves them as they were).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use treesync_testkit::history::{self, Entry, Model};
use xtask::util::run_quiet;

use super::trace::{stat_count, strace, timed};
use crate::measure::fmt_time;
use crate::repo::{git, rm, rm_all, settle};

/// The root `.gitattributes` of the repository with attributes.
const ROOT_ATTRIBUTES: &str = "* text=auto eol=crlf\n*.bat text eol=crlf\n*.c ident\n";
/// The directory whose attributes change in commit SUB (there from N = 400 files on), and what
/// it gets.
const SUB_DIR: &str = "dir000/sub03";
const SUB_ATTRIBUTES: &str = "*.txt -text\n";

/// What to run.
pub struct Config {
    /// Files in each repository.
    pub files: usize,
    /// Runs per figure (the median is reported).
    pub runs: usize,
}

/// One measured run of one tool on one change.
struct Row {
    change: String,
    attributes: bool,
    tool: &'static str,
    time: Duration,
    /// Ops treesync applied (`.applied` of `sync --json`); `None` for git.
    ops: Option<u64>,
    /// Files created in the work tree, syscalls on the work tree, stat-family syscalls.
    calls: Option<Calls>,
}

#[derive(Clone, Copy)]
struct Calls {
    created: u64,
    on_tree: u64,
    stats: u64,
}

/// The N-file tree: [`history::wide_tree`] with every 7th file a `.bat` and every 11th a `.c`
/// holding `$Id$`, so that each kind of conversion has files to work on.
fn base_tree(files: usize) -> Model {
    let mut m = Model::default();
    for (i, (path, entry)) in history::wide_tree(files, 1).0.into_iter().enumerate() {
        let stem = path.strip_suffix(".txt").unwrap_or(&path).to_string();
        let (path, entry) = match (i % 7, i % 11, entry) {
            (0, _, e) => (format!("{stem}.bat"), e),
            (_, 0, Entry::File { mut content, executable }) => {
                content.splice(0..0, b"/* $Id$ */\n".iter().copied());
                (format!("{stem}.c"), Entry::File { content, executable })
            }
            (_, _, e) => (path, e),
        };
        m.0.insert(path, entry);
    }
    m
}

/// A bare repository at `path` holding `trees` on `main`, tagged with `names`, packed.
fn make(path: &Path, trees: &[Model], names: &[&str]) -> Result<(), String> {
    rm(path);
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    run_quiet(Command::new("git").arg("init").arg("-q").arg("--bare").arg(path))?;
    let commits = history::import(path, "main", trees);
    for (name, id) in names.iter().zip(&commits) {
        run_quiet(Command::new("git").arg("-C").arg(path).args(["update-ref", &format!("refs/tags/{name}"), id]))?;
    }
    run_quiet(Command::new("git").arg("-C").arg(path).args(["repack", "-adq"]))?;
    Ok(())
}

/// Syscalls of one run of `cmd` on `tree`, each strace run from a fresh `reset`: stat-family
/// calls of the process (`strace -c`), and from `strace -y` every call naming the tree and the
/// `openat` calls in it that create a file (outside `.treesync/`).
fn calls(
    mut reset: impl FnMut() -> Result<(), String>,
    cmd: impl Fn() -> Command,
    tree: &Path,
) -> Result<Calls, String> {
    reset()?;
    let stats = stat_count(&cmd())?;
    reset()?;
    let all = joined(&strace(&cmd(), &["-f", "-y"])?);
    let tree = tree.to_string_lossy().into_owned();
    // git runs in its work tree (`--work-tree`), so its calls on the repository, the index and
    // the lock files by absolute path print `AT_FDCWD<TREE>` too: that alone does not put a
    // call on the tree; a path relative to it does.
    let cwd = format!("AT_FDCWD<{tree}>");
    let below = format!("{tree}/");
    let on_tree: Vec<&String> = all
        .iter()
        .filter(|l| match l.split_once(cwd.as_str()) {
            Some((_, rest)) => match rest.strip_prefix(", \"") {
                Some(path) if path.starts_with('/') => path.starts_with(&below),
                _ => true,
            },
            None => l.contains(tree.as_str()),
        })
        .collect();
    // A file created: an `openat` with O_CREAT whose new descriptor is a file of the tree
    // (treesync's own `.treesync/` files — lock, journal, state — are not files of the tree).
    let created = on_tree
        .iter()
        .filter(|l| l.contains("openat(") && l.contains("O_CREAT"))
        .filter_map(|l| l.rsplit_once(" = ").map(|(_, ret)| ret))
        .filter(|ret| ret.contains(&format!("<{below}")) && !ret.contains(&format!("{below}.treesync/")))
        .count() as u64;
    Ok(Calls { created, on_tree: on_tree.len() as u64, stats })
}

/// The lines of an `strace -f` log with each call that another thread interrupted
/// (`… <unfinished ...>`, later `PID <... NAME resumed>…`) joined back into one line.
fn joined(trace: &str) -> Vec<String> {
    let mut pending: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in trace.lines() {
        let pid = line.split_whitespace().next().unwrap_or_default();
        if let Some(head) = line.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, head);
            continue;
        }
        let resumed = line.find("<... ").and_then(|i| line[i..].find(" resumed>").map(|j| i + j + " resumed>".len()));
        match (resumed, pending.remove(pid)) {
            (Some(end), Some(head)) => out.push(format!("{head}{}", &line[end..])),
            (_, head) => {
                out.extend(head.map(str::to_string));
                out.push(line.to_string());
            }
        }
    }
    out.extend(pending.into_values().map(str::to_string));
    out
}

/// Run the benchmark in `dir` with the `treesync` binary; the Markdown table.
pub fn run(c: &Config, dir: &Path, treesync: &Path, has_strace: bool) -> Result<String, String> {
    let a_plain = base_tree(c.files);
    let mut a_attr = a_plain.clone();
    a_attr.insert(".gitattributes", Entry::File { content: ROOT_ATTRIBUTES.as_bytes().to_vec(), executable: false });
    let (k10, _) = history::change_some(&a_plain, 10, 0, 0, 10);
    let (k100, _) = history::change_some(&a_plain, 100, 0, 0, 100);
    let with_root = |m: &Model| {
        let mut m = m.clone();
        m.0.insert(
            ".gitattributes".into(),
            Entry::File { content: ROOT_ATTRIBUTES.as_bytes().to_vec(), executable: false },
        );
        m
    };
    let mut sub = a_attr.clone();
    sub.insert(
        &format!("{SUB_DIR}/.gitattributes"),
        Entry::File { content: SUB_ATTRIBUTES.as_bytes().to_vec(), executable: false },
    );
    let sub_txt = a_attr.0.keys().filter(|p| p.starts_with(&format!("{SUB_DIR}/")) && p.ends_with(".txt")).count();
    eprintln!("attributes: generating 2 × {} files…", c.files);
    let attr_repo = dir.join("attr.git");
    let plain_repo = dir.join("plain.git");
    make(&attr_repo, &[a_attr, with_root(&k10), with_root(&k100), sub], &["A", "K10", "K100", "SUB"])?;
    make(&plain_repo, &[a_plain, k10, k100], &["A", "K10", "K100"])?;

    let mut rows = Vec::new();
    for (repo, attributes) in [(&attr_repo, true), (&plain_repo, false)] {
        let changes: &[(&str, String)] = if attributes {
            &[
                ("K10", "K = 10 files changed".to_string()),
                ("K100", "K = 100 files changed".to_string()),
                ("SUB", format!("only `{SUB_DIR}/.gitattributes` added ({sub_txt} `*.txt` files below it)")),
            ]
        } else {
            &[("K10", "K = 10 files changed".to_string()), ("K100", "K = 100 files changed".to_string())]
        };
        let tag = if attributes { "attr" } else { "plain" };
        let target: PathBuf = dir.join(format!("ts-{tag}"));
        let work = dir.join(format!("git-{tag}"));
        // Not named like `work` plus a suffix: syscalls are counted by path prefix.
        let index = dir.join(format!("{tag}.git-index"));
        rm_all(&[&target, &work, &index]);
        std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
        let ts = |rev: &str, json: bool| {
            let mut cmd = Command::new(treesync);
            cmd.args(["sync", "-q", "--repo"]).arg(repo).args(["--ref", rev, "--target"]).arg(&target);
            if json {
                cmd.arg("--json");
            }
            cmd
        };
        let checkout = |rev: &str| {
            let mut g = git(repo, &work, &index);
            g.args(["checkout", "-q", "-f", "--detach", rev]);
            g
        };
        run_quiet(&mut ts("A", false))?;
        run_quiet(&mut checkout("A"))?;
        settle(repo, &work, &index)?;
        for (rev, change) in changes {
            eprintln!("attributes: {tag} A→{rev}…");
            let ts_reset = || run_quiet(&mut ts("A", false)).map(|_| ());
            let (time, _) = timed(c.runs, ts_reset, || ts(rev, false))?;
            ts_reset()?;
            let out = run_quiet(&mut ts(rev, true))?;
            let json: serde_json::Value =
                serde_json::from_str(&out).map_err(|e| format!("sync --json to {rev}: {e}: {out}"))?;
            let applied = &json["applied"];
            let ops = ["mkdir", "write", "symlink", "chmod", "unlink", "rmdir"]
                .iter()
                .map(|k| applied[k].as_u64().unwrap_or(0))
                .sum::<u64>();
            let ts_calls = if has_strace { Some(calls(ts_reset, || ts(rev, false), &target)?) } else { None };
            rows.push(Row {
                change: change.clone(),
                attributes,
                tool: "treesync sync",
                time,
                ops: Some(ops),
                calls: ts_calls,
            });

            let git_reset = || {
                run_quiet(&mut checkout("A"))?;
                settle(repo, &work, &index)
            };
            let (time, _) = timed(c.runs, git_reset, || checkout(rev))?;
            let git_calls = if has_strace { Some(calls(git_reset, || checkout(rev), &work)?) } else { None };
            rows.push(Row {
                change: change.clone(),
                attributes,
                tool: "git checkout",
                time,
                ops: None,
                calls: git_calls,
            });
        }
        // Both at the last change: the same tree, except for the attributes-only commit, after
        // which git's incremental checkout leaves the files it did not rewrite as they were.
        let last = changes.last().map(|(r, _)| *r).expect("at least one change");
        run_quiet(&mut ts(last, false))?;
        run_quiet(&mut checkout(last))?;
        let fresh = dir.join(format!("fresh-{tag}"));
        rm(&fresh);
        std::fs::create_dir_all(&fresh).map_err(|e| format!("{}: {e}", fresh.display()))?;
        let fresh_index = dir.join(format!("{tag}.fresh-index"));
        rm(&fresh_index);
        run_quiet(git(repo, &fresh, &fresh_index).args(["checkout", "-q", "-f", "--detach", last]))?;
        let differing = |a: &Path, b: &Path| -> Result<usize, String> {
            let out = Command::new("diff")
                .args(["-rq", "--no-dereference", "-x", ".treesync"])
                .arg(a)
                .arg(b)
                .output()
                .map_err(|e| format!("diff: {e}"))?;
            Ok(String::from_utf8_lossy(&out.stdout).lines().count())
        };
        let ts_off = differing(&target, &fresh)?;
        if ts_off != 0 {
            return Err(format!("treesync's target differs from a fresh checkout of {last} in {ts_off} files"));
        }
        let git_off = differing(&work, &fresh)?;
        if attributes {
            eprintln!(
                "attributes: after A→SUB, git's incremental checkout differs from a fresh one in {git_off} files"
            );
            rows.push(Row {
                change: format!(
                    "After `git checkout` A→SUB, {git_off} files differ from a fresh checkout of SUB (git does not rewrite files whose blob is unchanged); treesync's target equals the fresh checkout."
                ),
                attributes,
                tool: "",
                time: Duration::ZERO,
                ops: None,
                calls: None,
            });
        } else if git_off != 0 {
            return Err(format!("git's work tree differs from a fresh checkout of {last} in {git_off} files"));
        }
        rm_all(&[&target, &work, &fresh, &index, &fresh_index]);
    }
    rm_all(&[&attr_repo, &plain_repo]);
    Ok(render(&rows, c))
}

fn render(rows: &[Row], c: &Config) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "N = {} files ({} directories), root `.gitattributes`: `{}`; every change starts from commit A; medians of {} runs; {} cores.\n",
        c.files,
        c.files / 100,
        ROOT_ATTRIBUTES.trim_end().replace('\n', "`, `"),
        c.runs,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let _ = writeln!(
        md,
        "Ops: what `treesync sync --json` reports in `applied`. Files created: `openat(…O_CREAT…)` returning a descriptor of a file in the work tree, treesync's own `.treesync/` left out; \
         syscalls on the work tree: every syscall whose path or descriptor lies in it (`strace -f -y`; git's calls on its \
         repository, index and locks, relative to the work tree it runs in, do not count); stat-family: \
         the process's `stat`/`lstat`/`newfstatat`/`statx`/… (`strace -f -c`). Ratios: with attributes ÷ without, \
         and git's time ÷ treesync's.\n"
    );
    let _ = writeln!(
        md,
        "| change | .gitattributes | tool | ops | files created | syscalls on the work tree | stat-family | wall time | ÷ without attributes | git ÷ treesync |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let dash = || "–".to_string();
    for r in rows {
        if r.tool.is_empty() {
            continue;
        }
        let without = rows.iter().find(|o| !o.attributes && o.tool == r.tool && o.change == r.change);
        let vs_without = match (r.attributes, without) {
            (true, Some(w)) => format!("{:.2}", r.time.as_secs_f64() / w.time.as_secs_f64()),
            _ => dash(),
        };
        let ours =
            rows.iter().find(|o| o.attributes == r.attributes && o.tool == "treesync sync" && o.change == r.change);
        let vs_treesync = match ours {
            Some(o) if r.tool != "treesync sync" => format!("{:.2}", r.time.as_secs_f64() / o.time.as_secs_f64()),
            _ => "1.00".to_string(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | `{}` | {} | {} | {} | {} | {} | {vs_without} | {vs_treesync} |",
            r.change,
            if r.attributes { "yes" } else { "no" },
            r.tool,
            r.ops.map(|o| o.to_string()).unwrap_or_else(dash),
            r.calls.map(|c| c.created.to_string()).unwrap_or_else(dash),
            r.calls.map(|c| c.on_tree.to_string()).unwrap_or_else(dash),
            r.calls.map(|c| c.stats.to_string()).unwrap_or_else(dash),
            fmt_time(r.time),
        );
    }
    for r in rows.iter().filter(|r| r.tool.is_empty()) {
        let _ = writeln!(md, "\n{}", r.change.trim_start_matches('(').trim_end_matches(')'));
    }
    md
}
