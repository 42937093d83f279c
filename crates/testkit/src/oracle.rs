//! git as the oracle (issue 30): a deterministic **attribute matrix** — one commit holding a
//! file for every cell of gitattributes(5) × content shape × where the attribute is set, plus
//! every `working-tree-encoding` the platform's iconv (and so git) accepts × samples — and the
//! repository [`SETTINGS`] to check it under. The tests sync it once per setting and compare
//! byte for byte with what real git writes ([`crate::gitcheck::expected_reporting`],
//! [`crate::gitcheck::archive_expected`]); nothing of treesync's own conversion code is used to
//! decide what is right.
//!
//! Where a cell's file lives says what it tests:
//!
//! * `a/SLUG/SHAPE.txt`: attributes set by the root `.gitattributes` (`a/SLUG/* ATTRS`);
//! * `b/SLUG/SHAPE.txt`, `b/SLUG/deep/SHAPE.txt`: by `b/SLUG/.gitattributes` (`* ATTRS`);
//! * `r.SLUG.SHAPE`: files at the root, by the root `.gitattributes` (`r.SLUG.* ATTRS`);
//! * `enc/NAME/SAMPLE.txt`: `* working-tree-encoding=NAME` in `enc/NAME/.gitattributes`, for
//!   every name of `iconv -l` that converts an ASCII sample ([`encodings`]), the names git
//!   handles itself (`UTF-16LE-BOM`, `latin-1`) and a name nobody knows;
//! * `exdir/…`, `exglob/…`: directories left out of `git archive` (`export-ignore`).
//!
//! The blobs are written with `git fast-import`, which stores bytes as given: the commit holds
//! content `git add` would refuse (text that does not fit its `working-tree-encoding`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::BareRepo;
use crate::gitcheck::Snapshot;
use crate::history::{self, Model};
use crate::tree::Node;

/// One attribute cell: a slug (its directory name), the family it is counted under, the
/// attribute lists set for it (one `.gitattributes` line each, in order: later lines win), and
/// lines its own nested `.gitattributes` starts with (a macro defined there, which git refuses).
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The directory / file name part.
    pub slug: &'static str,
    /// The row of the table it is counted in.
    pub family: &'static str,
    /// The attribute lists, one line each.
    pub lines: &'static [&'static str],
    /// Lines put first into the nested `.gitattributes` (placement `b` only).
    pub nested_prelude: &'static str,
}

const fn spec(slug: &'static str, family: &'static str, lines: &'static [&'static str]) -> Spec {
    Spec { slug, family, lines, nested_prelude: "" }
}

/// The macros the root `.gitattributes` defines, before any other line. `mtwice` is defined
/// twice (the later definition is the one git uses); `mnest` uses another macro.
const ROOT_MACROS: &str = "[attr]mcrlf text eol=crlf\n[attr]mbin binary\n[attr]mtwice text eol=lf\n[attr]mnest mcrlf ident\n[attr]mtwice text eol=crlf\n";

/// Every attribute cell.
pub const SPECS: &[Spec] = &[
    spec("none", "no attribute", &[]),
    spec("text", "text", &["text"]),
    spec("unset-text", "text", &["!text"]),
    spec("no-text", "-text", &["-text"]),
    spec("text-auto", "text=auto", &["text=auto"]),
    spec("binary", "binary", &["binary"]),
    spec("binary-then-text", "binary", &["binary", "text"]),
    spec("crlf-then-binary", "binary", &["text eol=crlf", "binary"]),
    spec("binary-eol-crlf", "binary", &["binary eol=crlf"]),
    spec("eol-lf", "eol", &["eol=lf"]),
    spec("eol-crlf", "eol", &["eol=crlf"]),
    spec("text-eol-lf", "eol", &["text eol=lf"]),
    spec("text-eol-crlf", "eol", &["text eol=crlf"]),
    spec("auto-eol-crlf", "eol", &["text=auto eol=crlf"]),
    spec("auto-eol-lf", "eol", &["text=auto eol=lf"]),
    spec("no-text-eol-crlf", "eol", &["-text eol=crlf"]),
    spec("crlf", "crlf (legacy)", &["crlf"]),
    spec("no-crlf", "crlf (legacy)", &["-crlf"]),
    spec("crlf-input", "crlf (legacy)", &["crlf=input"]),
    spec("crlf-eol-crlf", "crlf (legacy)", &["crlf eol=crlf"]),
    spec("ident", "ident", &["ident"]),
    spec("ident-text", "ident", &["ident text"]),
    spec("ident-crlf", "ident", &["ident text eol=crlf"]),
    spec("ident-auto", "ident", &["ident text=auto"]),
    spec("ident-auto-crlf", "ident", &["ident text=auto eol=crlf"]),
    spec("ident-binary", "ident", &["ident binary"]),
    spec("ident-filter", "ident", &["ident filter=upper"]),
    spec("ident-encoding", "ident", &["ident working-tree-encoding=UTF-16LE-BOM"]),
    spec("ident-crlf-encoding", "ident", &["ident text eol=crlf working-tree-encoding=UTF-16"]),
    spec("macro", "[attr] macro", &["mcrlf"]),
    spec("macro-binary", "[attr] macro", &["mbin"]),
    spec("macro-nested", "[attr] macro", &["mnest"]),
    spec("macro-redefined", "[attr] macro", &["mtwice"]),
    spec("macro-then-eol-lf", "[attr] macro", &["mcrlf", "eol=lf"]),
    spec("macro-then-unset", "[attr] macro", &["mcrlf", "-mcrlf"]),
    spec("macro-same-line", "[attr] macro", &["mcrlf -text"]),
    spec("binary-macro-then-text", "[attr] macro", &["mbin", "text eol=crlf"]),
    spec("macro-info", "[attr] macro", &["minfo"]),
    spec("macro-global", "[attr] macro", &["mglobal"]),
    Spec {
        slug: "macro-in-subdir",
        family: "[attr] macro",
        lines: &["mlocal"],
        nested_prelude: "[attr]mlocal text eol=crlf\n",
    },
    spec("filter", "filter", &["filter=upper"]),
    spec("filter-crlf", "filter", &["filter=upper text eol=crlf"]),
    spec("filter-binary", "filter", &["filter=upper binary"]),
    spec("filter-undefined", "filter", &["filter=nosuch"]),
    spec("encoding", "working-tree-encoding (cells)", &["working-tree-encoding=UTF-16"]),
    spec("encoding-crlf", "working-tree-encoding (cells)", &["text eol=crlf working-tree-encoding=UTF-16LE-BOM"]),
    spec("encoding-auto", "working-tree-encoding (cells)", &["text=auto working-tree-encoding=UTF-16"]),
    spec("encoding-binary", "working-tree-encoding (cells)", &["binary working-tree-encoding=UTF-16"]),
    spec("encoding-latin1", "working-tree-encoding (cells)", &["working-tree-encoding=ISO-8859-1"]),
    spec("encoding-utf8", "working-tree-encoding (cells)", &["working-tree-encoding=utf-8"]),
    spec("encoding-unknown", "working-tree-encoding (cells)", &["working-tree-encoding=NO-SUCH-ENCODING"]),
    spec("export-ignore", "export-ignore", &["export-ignore"]),
    spec("export-subst", "export-subst", &["export-subst"]),
    spec("export-subst-crlf", "export-subst", &["export-subst text eol=crlf"]),
    spec("export-subst-ident", "export-subst", &["export-subst ident"]),
];

/// Content shapes every attribute cell gets: line ends, NUL bytes, UTF-8 with and without a
/// byte-order mark, invalid UTF-8, no final newline, empty, the `ident` forms git treats
/// differently, and `export-subst` placeholders.
pub const SHAPES: &[(&str, &[u8])] = &[
    ("lf", b"one\ntwo\nthree\n"),
    ("crlf", b"one\r\ntwo\r\nthree\r\n"),
    ("mixed", b"one\r\ntwo\nthree\r\n"),
    ("lone-cr", b"one\rtwo\rthree\r"),
    ("nul", b"one\n\0two\r\nthree\n"),
    ("utf8-bom", b"\xEF\xBB\xBFgr\xC3\xBC\xC3\x9Fe\ncaf\xC3\xA9\n"),
    ("utf8", "grüße\nnaïve café ✓ 漢字\n".as_bytes()),
    ("invalid-utf8", b"bad \xFF\xFE byte\n\xC3( end\n"),
    ("no-eol", b"one\ntwo"),
    ("empty", b""),
    ("id-plain", b"a $Id$ b\nline\n"),
    ("id-expanded", b"$Id: x $\nline\n"),
    ("id-space", b"$Id:a b$\nline\n"),
    ("id-dollar", b"$$Id$\nline\n"),
    ("id-newline", b"$Id:x\n$\nline\n"),
    ("id-eof", b"tail $Id"),
    ("id-crlf", b"$Id$\r\nline\r\n"),
    ("subst", b"commit $Format:%H$\nline\n"),
    ("subst-crlf", b"v $Format:%h %s$\r\nby $Format:%an <%ae>$\r\n"),
];

/// The shapes of [`Size::Small`] set by the root `.gitattributes` (`a/`) and by nested ones (`b/`).
const SMALL_SHAPES: [&[&str]; 2] = [&["lf", "crlf", "nul", "id-space"], &["lf", "utf8", "id-plain", "subst"]];

/// The samples every encoding gets: ASCII, Latin-1 accents, what windows-1252 adds (`€‘’`),
/// C1 controls, CJK, the characters Japanese encodings map differently (`〜～―¥`), JIS X 0212
/// characters, an emoji.
pub const SAMPLES: &[(&str, &str)] = &[
    ("ascii", "plain ASCII\nline two\n"),
    ("latin1", "caf\u{e9} na\u{ef}ve \u{c6}r\u{f8}\n\u{bf}s\u{ed}?\n"),
    ("cp1252", "\u{20ac} \u{2018}quoted\u{2019}\n"),
    ("c1", "c1 \u{80}\u{85}\u{9f} controls\n"),
    ("cjk", "\u{6f22}\u{5b57} \u{304b}\u{306a} \u{d55c}\u{ad6d}\u{c5b4}\n"),
    ("jis-specials", "\u{301c}\u{ff5e}\u{2015}\u{a5}\n"),
    ("jisx0212", "\u{4e02}\u{4e04} \u{a6} \u{1ce}\n"),
    ("emoji", "emoji \u{1f600}\n"),
];

/// The encodings issue 30 names: each is a row of its own in the table (the others of
/// `iconv -l` share one) and, in [`Size::Small`], the only ones.
pub const NAMED_ENCODINGS: &[&str] = &[
    "UTF-16",
    "UTF-16LE",
    "UTF-16BE",
    "UTF-16LE-BOM",
    "UTF-16BE-BOM",
    "utf-16",
    "UTF16",
    "UTF-32",
    "UCS-2",
    "UCS-2LE",
    "UCS-4",
    "ISO-8859-1",
    "LATIN1",
    "US-ASCII",
    "ASCII",
    "GB2312",
    "EUC-JP",
    "CP932",
    "EUC-KR",
    "SHIFT_JIS",
    "ISO-2022-JP",
    "NO-SUCH-ENCODING",
];

/// Names git accepts without iconv knowing them (it maps them itself), and one nobody knows.
const GIT_ENCODINGS: &[&str] =
    &["UTF-16LE-BOM", "UTF-16BE-BOM", "utf-16le-bom", "latin-1", "utf-16", "NO-SUCH-ENCODING"];

/// The filter driver every setting configures (`filter=upper`); `filter=nosuch` has none.
pub const DRIVER: (&str, &str) = ("filter.upper.smudge", "tr a-z A-Z");

/// `info/attributes` of the `info-attributes` setting: it wins over every `.gitattributes`,
/// and defines the macro `minfo`.
pub const INFO_ATTRIBUTES: &str = "[attr]minfo text eol=crlf\na/text/* -text\nb/binary/* text eol=crlf\nr.none.* text eol=crlf\na/none/* ident\nb/ident/* -ident\nenc/UTF-16/* working-tree-encoding=UTF-16LE-BOM\n";

/// The `core.attributesFile` of the `attributes-file` setting: below every `.gitattributes`,
/// and defines the macro `mglobal`.
pub const GLOBAL_ATTRIBUTES: &str = "[attr]mglobal text eol=crlf\nr.none.* eol=crlf\na/none/* text eol=crlf\nb/no-text/* text\na/text-auto/* eol=crlf\n";

/// A repository setting the matrix is checked under.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// A short name for tables and messages.
    pub name: &'static str,
    /// `git config` keys of the repository (besides [`DRIVER`]).
    pub config: &'static [(&'static str, &'static str)],
    /// Whether the repository has [`INFO_ATTRIBUTES`].
    pub info_attributes: bool,
    /// Whether [`GLOBAL_ATTRIBUTES`] is `core.attributesFile`, set in a global config file
    /// (`GIT_CONFIG_GLOBAL`) for treesync, as a user sets it.
    pub attributes_file: bool,
}

const fn setting(name: &'static str, config: &'static [(&'static str, &'static str)]) -> Setting {
    Setting { name, config, info_attributes: false, attributes_file: false }
}

/// Every setting: none, `core.autocrlf` true/input/false, `core.eol` crlf/lf, `info/attributes`,
/// `core.attributesFile`.
pub const SETTINGS: &[Setting] = &[
    setting("none", &[]),
    setting("autocrlf-true", &[("core.autocrlf", "true")]),
    setting("autocrlf-input", &[("core.autocrlf", "input")]),
    setting("autocrlf-false", &[("core.autocrlf", "false")]),
    setting("eol-crlf", &[("core.eol", "crlf")]),
    setting("eol-lf", &[("core.eol", "lf")]),
    Setting { name: "info-attributes", config: &[], info_attributes: true, attributes_file: false },
    Setting { name: "attributes-file", config: &[], info_attributes: false, attributes_file: true },
];

/// The setting called `name`.
pub fn setting_named(name: &str) -> Setting {
    *SETTINGS.iter().find(|s| s.name == name).expect("a setting of SETTINGS")
}

/// How much of the matrix to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Every spec × every shape in three placements, every encoding of [`encodings`] × every
    /// sample (about 13,700 files).
    Full,
    /// The same attribute cells, the [`NAMED_ENCODINGS`] only (about 3,800 files): for the
    /// settings that change nothing for a file whose only attribute is `working-tree-encoding`
    /// (`core.eol`, `core.autocrlf` other than `true`, which convert `text` files only).
    Cells,
    /// Every spec × four shapes (`SMALL_SHAPES`) in each of two placements, the
    /// [`NAMED_ENCODINGS`] × three samples (about 550 files): for the conformance suite, which
    /// runs on slow backends.
    Small,
}

/// What one file of the matrix is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The row it is counted in.
    pub family: String,
}

/// The encoding names of `iconv -l` that convert an ASCII sample from UTF-8 (so git, which
/// hands them to the same iconv, accepts them), plus `GIT_ENCODINGS` and the
/// [`NAMED_ENCODINGS`]; asked once per process (about 1,100 `iconv` runs).
pub fn encodings() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let list = Command::new("iconv").arg("-l").output().expect("iconv -l runs (glibc's libc-bin)");
        assert!(list.status.success(), "iconv -l failed");
        let all: Vec<String> = String::from_utf8_lossy(&list.stdout)
            .split([',', '\n'])
            .map(str::trim)
            .filter(|n| !n.is_empty())
            // `NAME//`, or `NAME/` for a name that holds a slash.
            .map(|n| n.strip_suffix("//").or_else(|| n.strip_suffix('/')).unwrap_or(n).to_string())
            .collect();
        let accepted: Vec<String> = std::thread::scope(|s| {
            let chunks: Vec<_> = all
                .chunks(all.len().div_ceil(4).max(1))
                .map(|chunk| {
                    s.spawn(move || chunk.iter().filter(|n| iconv(n, b"A\n").is_some()).cloned().collect::<Vec<_>>())
                })
                .collect();
            chunks.into_iter().flat_map(|h| h.join().expect("iconv thread")).collect()
        });
        assert!(accepted.len() > 100, "iconv accepts only {} of {} names of `iconv -l`", accepted.len(), all.len());
        let mut names = accepted;
        for extra in GIT_ENCODINGS.iter().chain(NAMED_ENCODINGS) {
            if !names.iter().any(|n| n == extra) {
                names.push(extra.to_string());
            }
        }
        names
    })
}

/// `iconv -f UTF-8 -t TO` of `input`, `None` if iconv fails.
pub fn iconv(to: &str, input: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new("iconv")
        .args(["-f", "UTF-8", "-t", to])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("iconv runs");
    // Small inputs: they fit the pipe, so writing all before reading cannot block.
    let wrote = child.stdin.take().expect("piped").write_all(input).is_ok();
    let out = child.wait_with_output().expect("iconv finishes");
    (wrote && out.status.success()).then_some(out.stdout)
}

/// A directory name for an encoding: its characters other than letters, digits, `.`, `_`
/// and `-` as `_` (`ISO-10646/UCS2` → `ISO-10646_UCS2`), made unique with `~2`, `~3`.
fn encoding_dir(name: &str, taken: &mut HashSet<String>) -> String {
    let base: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    let mut dir = base.clone();
    let mut n = 1;
    // Unique in any case: the matrix also runs on targets that do not tell case apart (the
    // conformance suite's case-insensitive fixtures), where `UTF-16` and `utf-16` would collide.
    while !taken.insert(dir.to_ascii_lowercase()) {
        n += 1;
        dir = format!("{base}~{n}");
    }
    dir
}

/// The matrix as a tree, and the cell of each of its files (`.gitattributes` files are
/// counted under `attributes files`).
pub fn model(size: Size) -> (Model, BTreeMap<String, Cell>) {
    let mut m = Model::default();
    let mut cells = BTreeMap::new();
    let mut put = |m: &mut Model, path: String, content: &[u8], family: &str| {
        m.insert(&path, history::file(content));
        cells.insert(path, Cell { family: family.to_string() });
    };
    let shapes = |placement: usize| -> Vec<(&str, &[u8])> {
        match size {
            Size::Full | Size::Cells => SHAPES.to_vec(),
            Size::Small => SHAPES.iter().filter(|(n, _)| SMALL_SHAPES[placement].contains(n)).copied().collect(),
        }
    };
    let mut root = String::from(ROOT_MACROS);
    for s in SPECS {
        for attrs in s.lines {
            let _ = writeln!(root, "a/{}/* {attrs}", s.slug);
            if size != Size::Small {
                let _ = writeln!(root, "r.{}.* {attrs}", s.slug);
            }
        }
        for (shape, content) in shapes(0) {
            put(&mut m, format!("a/{}/{shape}.txt", s.slug), content, s.family);
            if size != Size::Small {
                put(&mut m, format!("r.{}.{shape}", s.slug), content, s.family);
            }
        }
        for (shape, content) in shapes(1) {
            put(&mut m, format!("b/{}/{shape}.txt", s.slug), content, s.family);
        }
        if size != Size::Small {
            for shape in ["lf", "crlf", "id-plain"] {
                let content = SHAPES.iter().find(|(n, _)| *n == shape).expect("a shape").1;
                put(&mut m, format!("b/{}/deep/{shape}.txt", s.slug), content, s.family);
            }
        }
        if !s.lines.is_empty() || !s.nested_prelude.is_empty() {
            let body: String = s.lines.iter().fold(s.nested_prelude.to_string(), |mut b, a| {
                let _ = writeln!(b, "* {a}");
                b
            });
            put(&mut m, format!("b/{}/.gitattributes", s.slug), body.as_bytes(), "attributes files");
        }
    }
    // Directories `git archive` leaves out: one named by a pattern without a slash, one by `/**`.
    root.push_str("exdir export-ignore\nexglob/** export-ignore\n");
    for p in ["exdir/a.txt", "exdir/sub/b.txt", "exglob/a.txt", "exglob/sub/b.txt"] {
        put(&mut m, p.to_string(), b"left out\nof archives\n", "export-ignore");
    }
    put(&mut m, ".gitattributes".into(), root.as_bytes(), "attributes files");

    let mut taken = HashSet::new();
    let (names, samples): (Vec<&str>, Vec<(&str, &str)>) = match size {
        Size::Full => (encodings().iter().map(String::as_str).collect(), SAMPLES.to_vec()),
        Size::Cells => (NAMED_ENCODINGS.to_vec(), SAMPLES.to_vec()),
        Size::Small => (
            NAMED_ENCODINGS.to_vec(),
            SAMPLES.iter().filter(|(n, _)| ["ascii", "latin1", "cjk"].contains(n)).copied().collect(),
        ),
    };
    for name in names {
        let dir = encoding_dir(name, &mut taken);
        let family = if NAMED_ENCODINGS.contains(&name) {
            format!("working-tree-encoding={name}")
        } else {
            "working-tree-encoding (other iconv names)".to_string()
        };
        put(
            &mut m,
            format!("enc/{dir}/.gitattributes"),
            format!("* working-tree-encoding={name}\n").as_bytes(),
            "attributes files",
        );
        for (sample, text) in &samples {
            put(&mut m, format!("enc/{dir}/{sample}.txt"), text.as_bytes(), &family);
        }
        // Contents that are no text to re-encode, for the encodings the issue names.
        if size != Size::Small && NAMED_ENCODINGS.contains(&name) {
            for shape in ["invalid-utf8", "empty", "utf8-bom", "crlf"] {
                let content = SHAPES.iter().find(|(n, _)| *n == shape).expect("a shape").1;
                put(&mut m, format!("enc/{dir}/{shape}.txt"), content, &family);
            }
        }
    }
    (m, cells)
}

/// The matrix committed in a bare repository under one [`Setting`].
pub struct Matrix {
    /// The repository (branch `main`, one commit), with the setting applied.
    pub repo: BareRepo,
    /// The commit.
    pub commit: String,
    /// The cell of every file.
    pub cells: BTreeMap<String, Cell>,
    /// The setting.
    pub setting: Setting,
    /// Holds the global attributes and config files.
    home: tempfile::TempDir,
}

impl Matrix {
    /// The matrix of `size` under `setting`: committed with `git fast-import`, the setting's
    /// config and [`DRIVER`] set in the repository, its `info/attributes` written, its global
    /// files made.
    pub fn build(size: Size, setting: Setting) -> Matrix {
        let (m, cells) = model(size);
        let repo = BareRepo::new();
        let commit = history::import(&repo.path, "main", &[m]).pop().expect("fast-import made the commit");
        crate::git(&repo.path, &["config", DRIVER.0, DRIVER.1]);
        for (k, v) in setting.config {
            crate::git(&repo.path, &["config", k, v]);
        }
        if setting.info_attributes {
            std::fs::create_dir_all(repo.path.join("info")).expect("mkdir info");
            std::fs::write(repo.path.join("info/attributes"), INFO_ATTRIBUTES).expect("write info/attributes");
        }
        let home = tempfile::tempdir().expect("tempdir");
        let attributes = home.path().join("attributes");
        std::fs::write(&attributes, GLOBAL_ATTRIBUTES).expect("write the global attributes");
        let global = if setting.attributes_file {
            format!("[core]\n\tattributesFile = {}\n", attributes.display())
        } else {
            String::new()
        };
        std::fs::write(home.path().join("gitconfig"), global).expect("write the global config");
        Matrix { repo, commit, cells, setting, home }
    }

    /// The config to give git for the reference checkout (`git clone -c`, `git -c … archive`):
    /// the setting's keys, the driver and, for `attributes-file`, `core.attributesFile` — what
    /// treesync reads from the repository and the global config file.
    pub fn git_config(&self) -> Vec<(String, String)> {
        let mut c: Vec<(String, String)> = vec![(DRIVER.0.into(), DRIVER.1.into())];
        c.extend(self.setting.config.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        if self.setting.attributes_file {
            c.push(("core.attributesFile".into(), self.home.path().join("attributes").display().to_string()));
        }
        c
    }

    /// The environment to run treesync with: no system config, the setting's global config
    /// file (empty unless it sets `core.attributesFile`), and a `HOME`/`XDG_CONFIG_HOME`
    /// without git files.
    pub fn treesync_env(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("GIT_CONFIG_NOSYSTEM", PathBuf::from("1")),
            ("GIT_CONFIG_GLOBAL", self.home.path().join("gitconfig")),
            ("XDG_CONFIG_HOME", self.home.path().join("xdg")),
        ]
    }

    /// The family of the file at `path` (`other` for what is no cell).
    pub fn family_of(&self, path: &str) -> &str {
        self.cells.get(path).map_or("other", |c| c.family.as_str())
    }
}

/// One row of a [`Tally`]: how many files of a family were compared, how many differ, how many
/// git refused to re-encode (and wrote unconverted), and of those how many treesync did not
/// mention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Row {
    /// Files of git's tree in the family.
    pub compared: usize,
    /// Paths that differ (missing, extra or other bytes).
    pub differing: usize,
    /// Files git printed `failed to encode` for.
    pub refused: usize,
    /// Of those, the ones treesync's output does not name.
    pub silent: usize,
}

/// The outcome of comparing one sync of a [`Matrix`] with git: rows by family, and every
/// failure in words.
#[derive(Debug, Default)]
pub struct Tally {
    /// By family.
    pub rows: BTreeMap<String, Row>,
    /// One line per differing path (`gitcheck::diff`'s words) and per refusal treesync kept
    /// quiet about.
    pub failures: Vec<String>,
}

impl Tally {
    /// Compare: `expected` (git's tree) with `differences` (`gitcheck::diff` lines, each
    /// starting with `PATH: `), `refused` (paths git could not re-encode) and what treesync
    /// printed (`output`: its stdout and stderr).
    pub fn of(
        matrix: &Matrix,
        expected: &Snapshot,
        differences: &[String],
        refused: &BTreeSet<String>,
        output: &str,
    ) -> Tally {
        let mut t = Tally::default();
        for (path, node) in expected {
            if matches!(node, Node::File(..)) {
                t.rows.entry(matrix.family_of(path).to_string()).or_default().compared += 1;
            }
        }
        for d in differences {
            let path = d.split(": ").next().unwrap_or(d);
            t.rows.entry(matrix.family_of(path).to_string()).or_default().differing += 1;
            t.failures.push(d.clone());
        }
        let said = tokens(output);
        for path in refused {
            let row = t.rows.entry(matrix.family_of(path).to_string()).or_default();
            row.refused += 1;
            if !said.contains(path.as_str()) {
                row.silent += 1;
                t.failures.push(format!(
                    "{path}: git could not re-encode it (`error: failed to encode '{path}'`) and wrote it unconverted; treesync's output does not name it"
                ));
            }
        }
        t
    }

    /// The rows as a table headed by `setting`.
    pub fn table(&self, setting: &str) -> String {
        let mut s = format!(
            "{:<44} {:<16} {:>8} {:>9} {:>8} {:>7}\n",
            "cell family", "setting", "compared", "differing", "refused", "silent"
        );
        let mut total = Row::default();
        for (family, r) in &self.rows {
            let _ = writeln!(
                s,
                "{family:<44} {setting:<16} {:>8} {:>9} {:>8} {:>7}",
                r.compared, r.differing, r.refused, r.silent
            );
            total.compared += r.compared;
            total.differing += r.differing;
            total.refused += r.refused;
            total.silent += r.silent;
        }
        let _ = writeln!(
            s,
            "{:<44} {setting:<16} {:>8} {:>9} {:>8} {:>7}",
            "total", total.compared, total.differing, total.refused, total.silent
        );
        s
    }
}

/// The words of `output` a path could be among: split at white space, quotes, brackets, commas
/// and `=`, with a trailing `:` or `.` removed.
fn tokens(output: &str) -> HashSet<&str> {
    output
        .split(|c: char| c.is_whitespace() || "'\"`,;()[]{}=".contains(c))
        .flat_map(|t| [t, t.trim_end_matches([':', '.'])])
        .filter(|t| !t.is_empty())
        .collect()
}

/// Run `program` with `args` and `env`, returning whether it succeeded and its stdout and
/// stderr together.
pub fn run(program: &Path, args: &[&str], env: &[(&str, PathBuf)]) -> (bool, String) {
    let mut c = Command::new(program);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("the program runs");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_is_deterministic_and_has_every_cell() {
        let (a, cells) = model(Size::Full);
        let (b, _) = model(Size::Full);
        assert_eq!(a, b, "same platform, same matrix");
        for s in SPECS {
            for (shape, _) in SHAPES {
                for p in [
                    format!("a/{}/{shape}.txt", s.slug),
                    format!("b/{}/{shape}.txt", s.slug),
                    format!("r.{}.{shape}", s.slug),
                ] {
                    assert!(cells.contains_key(&p), "{p}");
                }
            }
        }
        for name in NAMED_ENCODINGS {
            assert!(encodings().iter().any(|n| n == name), "{name} is in the encoding list");
        }
        let (small, small_cells) = model(Size::Small);
        assert!(small.0.len() < 700, "{} files", small.0.len());
        assert!(small_cells.keys().all(|k| cells.contains_key(k)), "the small matrix is part of the full one");
    }

    #[test]
    fn tokens_find_paths_in_messages() {
        let t = tokens("warning: cannot encode enc/ASCII/latin1.txt: no\n\"path\":\"enc/X/a.txt\",");
        assert!(t.contains("enc/ASCII/latin1.txt") && t.contains("enc/X/a.txt"), "{t:?}");
    }
}
