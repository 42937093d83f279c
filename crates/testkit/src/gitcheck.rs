//! Differential checks against git itself (issue 15): what a fresh `git clone` writes for a
//! commit, after every `.gitattributes` conversion and repository setting, compared with what
//! treesync wrote; and random histories whose commits exercise those conversions.
//!
//! - [`expected`]: the checkout git makes, read back as a [`Snapshot`].
//! - [`diff`]: how a directory differs from it, in words a reader can act on (`CRLF vs LF`).
//! - [`AttrHistory`]: a bare repository whose history adds, changes and removes files of every
//!   line-ending shape and `.gitattributes` files at several levels, including commits that
//!   change nothing but attributes (after which a fresh clone converts untouched files).
//! - [`REPO_CONFIGS`]: the repository settings to run every history with.
//! - [`expected_reporting`], [`archive_expected`], [`refused_paths`]: the same, with what git
//!   printed (its `failed to encode` errors), and `git archive` as the reference for `--export`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::history::{self, Entry, Model};
use crate::tree::{self, Node};
use crate::{BareRepo, Rng};

/// A checked-out tree by relative path (`/`-separated), as [`tree::read_dir`] reads it:
/// directories, files with their bytes and exec bit, symlinks with their target.
pub type Snapshot = BTreeMap<String, Node>;

/// Run git with no system or global configuration (a developer's `core.autocrlf` must not leak
/// into what we call "what git writes"); panics with git's stderr on failure.
fn git_in(dir: &Path, args: &[&str]) -> String {
    git_reporting(dir, args).0
}

/// [`git_in`], returning its stdout (trimmed) and its stderr (what git printed on the way, such
/// as `error: failed to encode 'PATH' from UTF-8 to ENC` for a file it wrote unconverted).
fn git_reporting(dir: &Path, args: &[&str]) -> (String, String) {
    let out = crate::git_command(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?} in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).trim().to_string(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A template directory for `git clone --template`: git's usual empty `.git` plus the source
/// repository's `info/attributes`, if it has one, so the clone sees the same attributes.
fn template_from(repo: &Path, dir: &Path) -> std::path::PathBuf {
    let template = dir.join("template");
    std::fs::create_dir_all(template.join("info")).expect("mkdir template/info");
    if let Ok(attrs) = std::fs::read(repo.join("info/attributes")) {
        std::fs::write(template.join("info/attributes"), attrs).expect("write template info/attributes");
    }
    template
}

/// `-c k=v` arguments for `git clone`, which writes them into the new repository's config
/// before it checks anything out.
fn config_args(config: &[(&str, &str)]) -> Vec<String> {
    config.iter().flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")]).collect()
}

/// What git writes for `rev` of `repo` on Linux: a fresh clone with `config` set in the clone
/// (`git clone -c k=v`) and the repository's own `info/attributes` (copied through a clone
/// template), checked out at `rev`; `.git` is left out.
///
/// How: `git clone --no-checkout --shared`, then `git checkout --detach REV`. The clone has no
/// index yet, so checkout does git's initial checkout (`initial_checkout`, every entry written
/// with the attributes of the target tree's index) — the same code path and the same bytes as
/// the checkout `git clone` does itself, for any commit, not only a branch tip. A `worktree add`
/// would instead share the source repository's config, and `checkout` in an existing clone is
/// incremental (it leaves files whose blob did not change unconverted:
/// see [`git_checkout`]). `--shared` borrows objects and changes no checkout behaviour.
pub fn expected(repo: &Path, rev: &str, config: &[(&str, &str)]) -> Snapshot {
    expected_reporting(repo, rev, config).0
}

/// [`expected`], and what git printed to stderr while checking out: an
/// `error: failed to encode 'PATH' from UTF-8 to ENC` line for each file it could not
/// re-encode and wrote as the blob is ([`refused_paths`] lists them).
pub fn expected_reporting(repo: &Path, rev: &str, config: &[(&str, &str)]) -> (Snapshot, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let template = template_from(repo, dir.path());
    let clone = dir.path().join("clone");
    let mut args: Vec<String> = vec!["clone".into(), "-q".into(), "--no-checkout".into(), "--shared".into()];
    args.push(format!("--template={}", template.display()));
    args.extend(config_args(config));
    args.push(repo.display().to_string());
    args.push(clone.display().to_string());
    git_in(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    let (_, messages) = git_reporting(&clone, &["checkout", "-q", "--detach", rev]);
    (without_git_dir(tree::read_dir(&clone)), messages)
}

/// What `git archive REV | tar -x` extracts for `repo`, run in `repo` itself (its
/// `info/attributes` and config apply) with `config` added (`git -c k=v archive`): the
/// reference for `treesync sync --export`. Also what git printed to stderr (its
/// `failed to encode` errors: archive converts files as checkout does).
pub fn archive_expected(repo: &Path, rev: &str, config: &[(&str, &str)]) -> (Snapshot, String) {
    let mut args = config_args(config);
    args.extend(["archive".into(), "--format=tar".into(), rev.into()]);
    let out = crate::git_command(repo).args(&args).env_remove("GIT_DIR").output().expect("git archive runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let dir = tempfile::tempdir().expect("tempdir");
    crate::untar(&out.stdout, dir.path());
    (tree::read_dir(dir.path()), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The paths git names in `messages` (stderr of [`expected_reporting`] or
/// [`archive_expected`]) as files it could not re-encode for `working-tree-encoding`
/// (`error: failed to encode 'PATH' from UTF-8 to ENC`): git wrote them unconverted.
pub fn refused_paths(messages: &str) -> std::collections::BTreeSet<String> {
    const HEAD: &str = "failed to encode '";
    messages
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find(HEAD)? + HEAD.len()..];
            Some(rest[..rest.rfind("' from ")?].to_string())
        })
        .collect()
}

/// What a plain `git clone --branch BRANCH` (a full, non-shared clone over git's pack
/// transport) of `repo` writes, with the same `config` and `info/attributes` as [`expected`]:
/// an independent way to the same answer, for checking [`expected`] itself. `branch` must be a
/// branch of `repo`.
pub fn fresh_clone_of_branch(repo: &Path, branch: &str, config: &[(&str, &str)]) -> Snapshot {
    let dir = tempfile::tempdir().expect("tempdir");
    let template = template_from(repo, dir.path());
    let clone = dir.path().join("clone");
    let mut args: Vec<String> =
        vec!["clone".into(), "-q".into(), "--no-local".into(), "--branch".into(), branch.into()];
    args.push(format!("--template={}", template.display()));
    args.extend(config_args(config));
    args.push(format!("file://{}", repo.display()));
    args.push(clone.display().to_string());
    git_in(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    without_git_dir(tree::read_dir(&clone))
}

/// What an incremental `git checkout -f REV` in an existing non-bare clone `worktree` leaves
/// there (the "renormalize trap": git does not rewrite files whose blob is unchanged when only
/// `.gitattributes` changed).
pub fn git_checkout(worktree: &Path, rev: &str) -> Snapshot {
    git_in(worktree, &["checkout", "-q", "-f", "--detach", rev]);
    without_git_dir(tree::read_dir(worktree))
}

fn without_git_dir(mut snap: Snapshot) -> Snapshot {
    snap.retain(|k, _| k != ".git" && !k.starts_with(".git/"));
    snap
}

/// How the directory `actual_dir` differs from `expected` (its `.treesync` is ignored), one
/// line per difference: the path, what differs, and for bytes their line-ending shape and an
/// escaped excerpt of both at the first differing byte. Empty when they are equal.
pub fn diff(expected: &Snapshot, actual_dir: &Path) -> Vec<String> {
    diff_snapshots(expected, &tree::read_dir(actual_dir))
}

/// [`diff`] between two snapshots.
pub fn diff_snapshots(expected: &Snapshot, actual: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (path, want) in expected {
        match actual.get(path) {
            None => out.push(format!("{path}: missing (git has {})", kind(want))),
            Some(got) if got != want => out.push(format!("{path}: {}", differs(want, got))),
            Some(_) => {}
        }
    }
    for (path, got) in actual {
        if !expected.contains_key(path) {
            out.push(format!("{path}: extra {} (git has nothing there)", kind(got)));
        }
    }
    out
}

fn kind(n: &Node) -> String {
    match n {
        Node::Dir => "a directory".into(),
        Node::File(d, x) => format!("a {}file of {} bytes", if *x { "+x " } else { "" }, d.len()),
        Node::Link(t) => format!("a symlink -> {}", String::from_utf8_lossy(t)),
    }
}

fn differs(want: &Node, got: &Node) -> String {
    match (want, got) {
        (Node::File(w, wx), Node::File(g, gx)) => {
            let mut parts = Vec::new();
            if wx != gx {
                parts.push(format!(
                    "exec bit: git {}, got {}",
                    if *wx { "+x" } else { "-x" },
                    if *gx { "+x" } else { "-x" }
                ));
            }
            if w != g {
                parts.push(bytes_differ(w, g));
            }
            parts.join("; ")
        }
        (Node::Link(w), Node::Link(g)) => {
            format!("symlink target: git {:?}, got {:?}", String::from_utf8_lossy(w), String::from_utf8_lossy(g))
        }
        _ => format!("kind: git has {}, got {}", kind(want), kind(got)),
    }
}

/// `bytes: CRLF vs LF (git 14 bytes, got 12); first difference at byte 5: git "b\r\nc" got "b\nc"`.
fn bytes_differ(want: &[u8], got: &[u8]) -> String {
    let (ws, gs) = (shape(want), shape(got));
    let shapes = if ws == gs { format!("both {ws}") } else { format!("{ws} vs {gs}") };
    let at = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(want.len().min(got.len()));
    let start = at.saturating_sub(8);
    let excerpt = |b: &[u8]| {
        let end = (at + 12).min(b.len());
        let s = b.get(start..end).unwrap_or_default().escape_ascii().to_string();
        format!("\"{}{s}{}\"", if start > 0 { "…" } else { "" }, if end < b.len() { "…" } else { "" })
    };
    format!(
        "bytes: {shapes} (git {} bytes, got {}); first difference at byte {at}: git {} got {}",
        want.len(),
        got.len(),
        excerpt(want),
        excerpt(got)
    )
}

/// The line-ending shape of some bytes: `LF`, `CRLF`, `mixed (2 CRLF, 1 LF, 1 CR)`, `no line
/// ends`, prefixed by `UTF-16LE`/`UTF-8 BOM` and `binary (NUL)` where those apply.
pub fn shape(bytes: &[u8]) -> String {
    let (prefix, units): (&str, Vec<u16>) = if bytes.len().is_multiple_of(2) && bytes.starts_with(&[0xFF, 0xFE]) {
        ("UTF-16LE ", bytes.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
    } else if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
        ("UTF-8 BOM ", bytes.iter().map(|b| u16::from(*b)).collect())
    } else {
        ("", bytes.iter().map(|b| u16::from(*b)).collect())
    };
    let (cr, lf) = (u16::from(b'\r'), u16::from(b'\n'));
    let (mut crlf, mut lone_lf, mut lone_cr, mut nul) = (0, 0, 0, 0);
    for (i, &u) in units.iter().enumerate() {
        if u == cr {
            if units.get(i + 1) == Some(&lf) {
                crlf += 1;
            } else {
                lone_cr += 1;
            }
        } else if u == lf && (i == 0 || units[i - 1] != cr) {
            lone_lf += 1;
        } else if u == 0 {
            nul += 1;
        }
    }
    let eol = match (crlf, lone_lf, lone_cr) {
        (0, 0, 0) => "no line ends".to_string(),
        (_, 0, 0) => "CRLF".to_string(),
        (0, _, 0) => "LF".to_string(),
        _ => format!("mixed ({crlf} CRLF, {lone_lf} LF, {lone_cr} CR)"),
    };
    let binary = if nul > 0 { "binary (NUL) " } else { "" };
    format!("{prefix}{binary}{eol}")
}

/// A repository setting to run a history with: config keys set in the bare repository (and in
/// the reference clone), and an `info/attributes` file.
#[derive(Debug, Clone, Copy)]
pub struct RepoConfig {
    /// A short name for messages and test names.
    pub name: &'static str,
    /// `git config` keys and values.
    pub config: &'static [(&'static str, &'static str)],
    /// The content of the repository's `info/attributes`, if any.
    pub info_attributes: Option<&'static str>,
}

impl RepoConfig {
    /// Set this configuration in the bare repository `repo` (what treesync reads) with
    /// `git config`, and write its `info/attributes`.
    pub fn apply(&self, repo: &Path) {
        for (k, v) in self.config {
            git_in(repo, &["config", k, v]);
        }
        if let Some(attrs) = self.info_attributes {
            std::fs::create_dir_all(repo.join("info")).expect("mkdir info");
            std::fs::write(repo.join("info/attributes"), attrs).expect("write info/attributes");
        }
    }
}

/// The repository settings every history runs with: none, `core.autocrlf=true`,
/// `core.autocrlf=input`, `core.eol=crlf`, and an `info/attributes` that overrides the tree's
/// `.gitattributes` (it has the highest precedence).
pub const REPO_CONFIGS: [RepoConfig; 5] = [
    RepoConfig { name: "none", config: &[], info_attributes: None },
    RepoConfig { name: "autocrlf-true", config: &[("core.autocrlf", "true")], info_attributes: None },
    RepoConfig { name: "autocrlf-input", config: &[("core.autocrlf", "input")], info_attributes: None },
    RepoConfig { name: "eol-crlf", config: &[("core.eol", "crlf")], info_attributes: None },
    RepoConfig {
        name: "info-attributes",
        config: &[],
        info_attributes: Some("*.txt text eol=crlf\n*.dat binary\n*.sh -text\n"),
    },
];

/// Lines a `.gitattributes` at the root may hold (a macro may only be defined there).
const ROOT_LINES: &[&str] = &[
    "*.txt text",
    "*.bat text eol=crlf",
    "*.sh eol=lf",
    "* text=auto",
    "*.dat -text",
    "*.bin binary",
    "*.c ident",
    "*.crlf crlf",
    "*.u16 text working-tree-encoding=UTF-16LE-BOM",
    "dir/** text eol=crlf",
    "[attr]mytext text eol=crlf\n*.md mytext",
    "[attr]mytext text eol=crlf\n*.txt mytext",
    "*.md mytext",
    "* text=auto eol=crlf",
    "*.txt eol=crlf",
    "*.txt -text",
    "*.c text ident",
    "*.crlf -crlf",
    "*.dat !text",
    "*.BAT text eol=crlf",
];

/// Lines a `.gitattributes` in a subdirectory may hold (patterns are relative to it).
const SUB_LINES: &[&str] = &[
    "*.txt text",
    "*.txt text eol=crlf",
    "*.bat text eol=crlf",
    "*.sh text eol=lf",
    "* text=auto",
    "* -text",
    "*.dat -text",
    "*.bin binary",
    "*.c ident",
    "*.crlf crlf",
    "*.crlf crlf=input",
    "*.u16 text working-tree-encoding=UTF-16LE-BOM",
    "sub/** text eol=crlf",
    "*.md mytext",
    "*.md -mytext",
];

/// The directories that may hold a `.gitattributes`; they are never replaced by a file.
const ATTR_DIRS: &[&str] = &["", "dir", "dir/sub", "src"];

/// Where files go: the attribute directories, and `docs` and `x y`, which switch between
/// file and directory.
const FILE_DIRS: &[&str] = &["", "dir", "dir/sub", "src", "docs", "x y", "dir/Ünï"];

const STEMS: &[&str] = &["a", "b", "c", "read me", "ünï", "run"];

const EXTS: &[&str] = &[".txt", ".bat", ".BAT", ".sh", ".dat", ".bin", ".c", ".crlf", ".u16", ".md", ""];

/// Content of one of many line-ending shapes. `.u16` files get only valid UTF-8 text (git
/// re-encodes them; anything else would be an error, not a conversion).
fn content(rng: &mut Rng, path: &str) -> Vec<u8> {
    let text_only = path.ends_with(".u16");
    let lines: Vec<String> = (0..1 + rng.below(6)).map(|i| format!("line {i} {}", rng.below(1000))).collect();
    let join = |eols: &mut dyn FnMut(usize) -> &'static str| {
        let mut s = String::new();
        for (i, l) in lines.iter().enumerate() {
            s.push_str(l);
            s.push_str(eols(i));
        }
        s.into_bytes()
    };
    let kinds = if text_only { 7 } else { 11 };
    match rng.below(kinds) {
        0 => join(&mut |_| "\n"),
        1 => join(&mut |_| "\r\n"),
        2 => join(&mut |i| if i % 2 == 0 { "\r\n" } else { "\n" }),
        3 => format!("grüße {}\nnaïve café ✓\n", rng.below(100)).into_bytes(),
        4 => format!("/* $Id$ */\nint v = {};\n$Id: stale $\n", rng.below(100)).into_bytes(),
        5 => b"no newline at the end".to_vec(),
        6 => Vec::new(),
        7 => {
            let mut b = join(&mut |_| "\n");
            b.extend_from_slice(b"\0\x01binary\r\n\0");
            b
        }
        8 => b"old mac\rline ends\r".to_vec(),
        9 => b"\xEF\xBB\xBFbom text\r\nsecond\n".to_vec(),
        _ => b"\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f control\n".to_vec(),
    }
}

fn random_file_path(rng: &mut Rng) -> String {
    let dir = *rng.pick(FILE_DIRS);
    let name = format!("{}{}", rng.pick(STEMS), rng.pick(EXTS));
    if dir.is_empty() { name } else { format!("{dir}/{name}") }
}

/// True if `path` is an attribute directory or holds one (so it must stay a directory).
fn holds_attr_dir(path: &str) -> bool {
    ATTR_DIRS.iter().any(|d| !d.is_empty() && (*d == path || d.starts_with(&format!("{path}/"))))
}

fn attr_file(dir: &str) -> String {
    if dir.is_empty() { ".gitattributes".into() } else { format!("{dir}/.gitattributes") }
}

/// One random change to the files (not the attributes).
fn mutate_files(rng: &mut Rng, model: &mut Model) {
    let keys: Vec<String> = model.0.keys().filter(|k| !k.ends_with(".gitattributes")).cloned().collect();
    let pick = |rng: &mut Rng| if keys.is_empty() { None } else { Some(rng.pick(&keys).clone()) };
    match rng.below(10) {
        0..=2 => {
            let p = random_file_path(rng);
            let c = content(rng, &p);
            model.insert(&p, Entry::File { content: c, executable: rng.percent(20) });
        }
        3 | 4 => {
            if let Some(k) = pick(rng) {
                let executable = matches!(model.0.get(&k), Some(Entry::File { executable: true, .. }));
                let c = content(rng, &k);
                model.insert(&k, Entry::File { content: c, executable });
            }
        }
        5 => {
            if let Some(k) = pick(rng) {
                model.0.remove(&k);
            }
        }
        6 => {
            if let Some(k) = pick(rng)
                && let Some(Entry::File { executable, .. }) = model.0.get_mut(&k)
            {
                *executable = !*executable;
            }
        }
        7 => {
            let p = random_file_path(rng);
            let target = match rng.below(3) {
                0 => "a.txt".to_string(),
                1 => "../outside".to_string(),
                _ => keys.first().cloned().unwrap_or_else(|| "nowhere".into()),
            };
            model.insert(&p, Entry::Link { target });
        }
        8 => {
            // A file becomes a directory (never a .gitattributes).
            if let Some(k) = pick(rng) {
                let child = format!("{k}/inner{}", rng.pick(EXTS));
                let c = content(rng, &child);
                model.insert(&child, Entry::File { content: c, executable: false });
            }
        }
        _ => {
            // A directory becomes a file or a symlink (never one that holds attributes).
            let dirs: Vec<String> = model.dirs().into_iter().filter(|d| !holds_attr_dir(d)).collect();
            if !dirs.is_empty() {
                let d = rng.pick(&dirs).clone();
                if rng.percent(50) {
                    let c = content(rng, &d);
                    model.insert(&d, Entry::File { content: c, executable: false });
                } else {
                    model.insert(&d, Entry::Link { target: "somewhere".into() });
                }
            }
        }
    }
}

/// One random change to one `.gitattributes`: a line added at a random place, removed, or
/// replaced, or the whole file removed.
fn mutate_attrs(rng: &mut Rng, attrs: &mut BTreeMap<&'static str, Vec<&'static str>>) {
    // The root half the time: it has the most lines (and the only macros).
    let dir = if rng.percent(50) { "" } else { *rng.pick(&ATTR_DIRS[1..]) };
    let pool = if dir.is_empty() { ROOT_LINES } else { SUB_LINES };
    let lines = attrs.entry(dir).or_default();
    match rng.below(6) {
        0..=2 => {
            let at = rng.below(lines.len() + 1);
            lines.insert(at, *rng.pick(pool));
        }
        3 if !lines.is_empty() => {
            let at = rng.below(lines.len());
            lines.remove(at);
        }
        4 if !lines.is_empty() => {
            let at = rng.below(lines.len());
            lines[at] = *rng.pick(pool);
        }
        _ => lines.clear(),
    }
}

/// Write the attribute files into the model (an empty list means no file).
fn render_attrs(model: &mut Model, attrs: &BTreeMap<&'static str, Vec<&'static str>>) {
    for dir in ATTR_DIRS {
        let path = attr_file(dir);
        match attrs.get(dir) {
            Some(lines) if !lines.is_empty() => {
                let body: String = lines.iter().fold(String::new(), |mut s, l| {
                    let _ = writeln!(s, "{l}");
                    s
                });
                model.insert(&path, Entry::File { content: body.into_bytes(), executable: false });
            }
            _ => {
                model.0.remove(&path);
            }
        }
    }
}

/// A random history whose commits exercise git's checkout conversions, in a bare repository
/// written with `git fast-import`. Deterministic per seed.
pub struct AttrHistory {
    /// The bare repository (branch `main`).
    pub repo: BareRepo,
    /// The commit ids, oldest first.
    pub commits: Vec<String>,
    /// The trees of the commits, oldest first.
    pub models: Vec<Model>,
    /// Indices (into `commits`) of commits that change nothing but `.gitattributes` files.
    pub attr_only: Vec<usize>,
    /// The seed it was made from.
    pub seed: u64,
}

impl AttrHistory {
    /// A history of `steps` commits (at least one) from `seed`. The first commit holds about
    /// a dozen files and maybe attributes; each later commit is, about one time in three, a
    /// change to `.gitattributes` files only, and otherwise a few file changes (add, modify,
    /// delete, chmod, symlink, file↔directory) with sometimes an attribute change too.
    pub fn generate(seed: u64, steps: usize) -> AttrHistory {
        let mut rng = Rng::new(seed);
        let mut model = Model::default();
        let mut attrs: BTreeMap<&'static str, Vec<&'static str>> = BTreeMap::new();
        for _ in 0..12 {
            let p = random_file_path(&mut rng);
            let c = content(&mut rng, &p);
            model.insert(&p, Entry::File { content: c, executable: rng.percent(20) });
        }
        if rng.percent(50) {
            mutate_attrs(&mut rng, &mut attrs);
        }
        render_attrs(&mut model, &attrs);
        let mut models = vec![model.clone()];
        let mut attr_only = Vec::new();
        while models.len() < steps.max(1) {
            let before = model.clone();
            if rng.percent(35) {
                // Attributes only: retry until some .gitattributes really changes.
                while model == before {
                    mutate_attrs(&mut rng, &mut attrs);
                    if rng.percent(40) {
                        mutate_attrs(&mut rng, &mut attrs);
                    }
                    render_attrs(&mut model, &attrs);
                }
                attr_only.push(models.len());
            } else {
                for _ in 0..1 + rng.below(4) {
                    mutate_files(&mut rng, &mut model);
                }
                if rng.percent(30) {
                    mutate_attrs(&mut rng, &mut attrs);
                }
                render_attrs(&mut model, &attrs);
                if model.0.is_empty() {
                    model.insert("keep.txt", Entry::File { content: b"keep\n".to_vec(), executable: false });
                }
            }
            models.push(model.clone());
        }
        let repo = BareRepo::new();
        let commits = history::import(&repo.path, "main", &models);
        assert_eq!(commits.len(), models.len(), "fast-import made every commit");
        AttrHistory { repo, commits, models, attr_only, seed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histories_are_deterministic_and_cover_every_shape() {
        let a = AttrHistory::generate(7, 20);
        let b = AttrHistory::generate(7, 20);
        assert_eq!(a.commits, b.commits, "same seed, same commits");
        assert_ne!(a.commits, AttrHistory::generate(8, 20).commits);

        let (mut crlf, mut lf, mut mixed, mut nul, mut utf8, mut ident, mut exec, mut link) =
            (false, false, false, false, false, false, false, false);
        let (mut sub_attrs, mut macro_def, mut file_to_dir, mut dir_to_leaf) = (false, false, false, false);
        for seed in 1..=4 {
            let h = AttrHistory::generate(seed, 20);
            assert!(!h.attr_only.is_empty(), "seed {seed} has attribute-only commits");
            for &i in &h.attr_only {
                let (prev, cur) = (&h.models[i - 1], &h.models[i]);
                let changed: Vec<&String> =
                    cur.0.keys().chain(prev.0.keys()).filter(|k| cur.0.get(*k) != prev.0.get(*k)).collect();
                assert!(!changed.is_empty() && changed.iter().all(|k| k.ends_with(".gitattributes")), "{changed:?}");
            }
            for w in h.models.windows(2) {
                let (prev, cur) = (&w[0], &w[1]);
                for (k, e) in &cur.0 {
                    dir_to_leaf |= prev.dirs().contains(k);
                    match e {
                        Entry::File { content, executable } => {
                            let s = shape(content);
                            crlf |= s == "CRLF";
                            lf |= s == "LF";
                            mixed |= s.starts_with("mixed");
                            nul |= s.contains("NUL");
                            utf8 |= !content.is_ascii() && std::str::from_utf8(content).is_ok();
                            ident |= content.windows(4).any(|w| w == b"$Id$");
                            exec |= *executable;
                            sub_attrs |= k.ends_with("/.gitattributes");
                            macro_def |= k == ".gitattributes"
                                && (content.starts_with(b"[attr]") || content.windows(7).any(|w| w == b"\n[attr]"));
                        }
                        Entry::Link { .. } => link = true,
                        Entry::Gitlink { .. } => panic!("no gitlinks in attribute histories"),
                    }
                }
                file_to_dir |= cur.dirs().iter().any(|d| prev.0.contains_key(d));
            }
        }
        assert!(crlf && lf && mixed && nul && utf8 && ident && exec && link, "content shapes");
        assert!(
            sub_attrs && macro_def && file_to_dir && dir_to_leaf,
            "attributes and type changes: {sub_attrs} {macro_def} {file_to_dir} {dir_to_leaf}"
        );
    }

    #[test]
    fn shape_names_line_endings() {
        assert_eq!(shape(b"a\r\nb\r\n"), "CRLF");
        assert_eq!(shape(b"a\nb\n"), "LF");
        assert_eq!(shape(b"a\r\nb\nc\r"), "mixed (1 CRLF, 1 LF, 1 CR)");
        assert_eq!(shape(b"a\0\n"), "binary (NUL) LF");
        assert_eq!(shape(b"\xFF\xFEa\0\r\0\n\0"), "UTF-16LE CRLF");
        assert_eq!(shape(b"abc"), "no line ends");
    }

    #[test]
    fn diff_names_the_path_and_the_line_endings() {
        let mut want = Snapshot::new();
        want.insert("a.txt".into(), Node::File(b"one\r\ntwo\r\n".to_vec(), false));
        want.insert("run.sh".into(), Node::File(b"x\n".to_vec(), true));
        want.insert("gone".into(), Node::Dir);
        let mut got = want.clone();
        got.insert("a.txt".into(), Node::File(b"one\ntwo\n".to_vec(), false));
        got.insert("run.sh".into(), Node::File(b"x\n".to_vec(), false));
        got.remove("gone");
        got.insert("new".into(), Node::Link(b"t".to_vec()));
        let d = diff_snapshots(&want, &got);
        assert_eq!(d.len(), 4, "{d:#?}");
        assert!(d[0].starts_with("a.txt: bytes: CRLF vs LF (git 10 bytes, got 8)"), "{}", d[0]);
        assert!(d[0].contains(r#"git "one\r\ntwo\r\n" got "one\ntwo\n""#), "{}", d[0]);
        assert_eq!(d[1], "gone: missing (git has a directory)");
        assert_eq!(d[2], "run.sh: exec bit: git +x, got -x");
        assert_eq!(d[3], "new: extra a symlink -> t (git has nothing there)");
    }
}
