//! The config file's rules and messages.

use std::ffi::OsString;
use std::time::Duration;

use super::*;
use treesync::settings::value::parse_size;
use treesync::{BackendKind, WriteJobs};

const PATH: &str = "/etc/treesync/treesync.toml";

fn ok(text: &str) -> Config {
    parse(text, Path::new(PATH)).unwrap_or_else(|e| panic!("expected a valid config, got:\n{e}"))
}

/// The full message of the error `text` gives.
fn err(text: &str) -> String {
    match parse(text, Path::new(PATH)) {
        Ok(c) => panic!("expected an error, got {c:#?}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts the message starts with `PATH:line:col: ` followed by `start`, and contains each of `parts`.
fn assert_err(text: &str, at: (usize, usize), start: &str, parts: &[&str]) {
    let e = err(text);
    let prefix = format!("{PATH}:{}:{}: {start}", at.0, at.1);
    assert!(e.starts_with(&prefix), "expected\n  {prefix}…\ngot\n  {e}");
    for p in parts {
        assert!(e.contains(p), "expected {p:?} in\n  {e}");
    }
}

const GOOD: &str = r#"# defaults for every mirror
[defaults]
backend = "auto"
interval = "10s"
verify_every = "24h"
jobs = 8
fsync = true

[mirror.site]
repo = "/srv/git/site.git"
ref = "main"
target = "/mnt/nas/site"
backend = "nfs"
write_jobs = "auto"
lookup_jobs = 2
verify_slices = 24

[mirror.docs]
repo = "/srv/git/docs.git"
ref = "refs/heads/release"
target = "s3://bucket/docs"
endpoint = "http://127.0.0.1:9000"
allow_http = true
region = "eu-west-1"
jobs = 32
verify_every = "off"

[mirror.alpha]
repo = "repos/alpha.git"
ref = "v2.1"
target = "./out/alpha/"
interval = "500ms"
write_jobs = 4
repair = true
"#;

#[test]
fn config_good_file() {
    let c = ok(GOOD);
    assert_eq!(c.path, Path::new(PATH));
    let names: Vec<&str> = c.names().collect();
    assert_eq!(names, ["site", "docs", "alpha"], "mirrors keep the order of the file");

    let site = c.get("site").unwrap();
    assert_eq!(site.repo, Path::new("/srv/git/site.git"));
    assert_eq!(site.rev, "main");
    assert_eq!(site.target, "/mnt/nas/site");
    assert_eq!(site.settings.target.backend, Some(BackendKind::Nfs), "overridden");
    assert_eq!(site.settings.watch.interval, Some(Duration::from_secs(10)), "inherited");
    assert_eq!(site.settings.watch.verify_every(), Some(Duration::from_secs(86400)), "inherited");
    assert_eq!(site.settings.watch.verify_slices, Some(24));
    assert_eq!(site.settings.target.jobs, Some(8), "inherited");
    assert_eq!(site.settings.target.lookup_jobs, Some(2));
    assert_eq!(site.settings.target.write_jobs, Some(WriteJobs::Auto));
    assert!(site.settings.target.fsync.unwrap_or_default());
    assert!(!site.settings.target.allow_http.unwrap_or_default() && !site.settings.watch.repair.unwrap_or_default());
    assert_eq!((site.settings.target.endpoint.as_deref(), site.settings.target.region.as_deref()), (None, None));

    let docs = c.get("docs").unwrap();
    assert_eq!(docs.target, "s3://bucket/docs", "URLs are kept as written");
    assert_eq!(docs.settings.target.backend, Some(BackendKind::Auto), "inherited");
    assert_eq!(docs.settings.target.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(docs.settings.target.region.as_deref(), Some("eu-west-1"));
    assert!(docs.settings.target.allow_http.unwrap_or_default());
    assert_eq!(docs.settings.target.jobs, Some(32), "overridden");
    assert_eq!(docs.settings.watch.verify_every(), None, "\"off\" turns off the default");
    assert_eq!(docs.settings.watch.verify_slices, None, "the whole tree each verify unless set");

    let alpha = c.get("alpha").unwrap();
    assert_eq!(alpha.repo, Path::new("/etc/treesync/repos/alpha.git"), "relative to the file's directory");
    assert_eq!(alpha.target, "/etc/treesync/out/alpha", "relative to the file's directory, normalized");
    assert_eq!(alpha.settings.watch.interval, Some(Duration::from_millis(500)));
    assert_eq!(alpha.settings.target.write_jobs, Some(WriteJobs::Fixed(4)));
    assert!(alpha.settings.watch.repair.unwrap_or_default());
}

#[test]
fn config_minimal_file_takes_the_builtin_defaults() {
    let c = ok("[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n");
    let m = &c.mirrors[0];
    assert_eq!(m.settings.target.backend, None);
    assert_eq!(m.settings.watch.interval, None, "watch's default");
    assert_eq!(
        (
            m.settings.target.jobs,
            m.settings.target.lookup_jobs,
            m.settings.target.write_jobs,
            m.settings.watch.verify_every()
        ),
        (None, None, None, None)
    );
    assert!(
        !m.settings.target.fsync.unwrap_or_default()
            && !m.settings.target.allow_http.unwrap_or_default()
            && !m.settings.watch.repair.unwrap_or_default()
    );
}

#[test]
fn config_plan_limits() {
    let c = ok("[defaults]\nmax_entries = 50_000_000\nmax_bytes = \"2TiB\"\n\
         [mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n\
         [mirror.b]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/b\"\nmax_bytes = 1000\n");
    assert_eq!(
        (c.mirrors[0].settings.limits.max_entries, c.mirrors[0].settings.limits.max_bytes),
        (Some(50_000_000), Some(2 << 40))
    );
    assert_eq!(
        (c.mirrors[1].settings.limits.max_entries, c.mirrors[1].settings.limits.max_bytes),
        (Some(50_000_000), Some(1000))
    );
    let m = &ok("[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n").mirrors[0];
    assert_eq!((m.settings.limits.max_entries, m.settings.limits.max_bytes), (None, None), "the core's defaults");
    let base = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n";
    assert_err(&format!("{base}max_entries = 0\n"), (5, 15), "max_entries in [mirror.a] must be at least 1", &[]);
    assert_err(&format!("{base}verify_slices = 0\n"), (5, 17), "verify_slices in [mirror.a] must be at least 1", &[]);
    assert_err(
        &format!("{base}max_bytes = \"2 parsecs\"\n"),
        (5, 13),
        "bad size \"2 parsecs\" for max_bytes in [mirror.a]: unknown unit \"parsecs\"",
        &["hint: write a number and a unit"],
    );
    assert_err(&format!("{base}max_byte = 1\n"), (5, 1), "unknown key \"max_byte\"", &["did you mean \"max_bytes\"?"]);
}

#[test]
fn sizes() {
    assert_eq!(parse_size("1TiB"), Ok(1 << 40));
    assert_eq!(parse_size("1T"), Ok(1 << 40));
    assert_eq!(parse_size("500 GiB"), Ok(500 << 30));
    assert_eq!(parse_size("1.5KiB"), Ok(1536));
    assert_eq!(parse_size("2TB"), Ok(2_000_000_000_000));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("0").is_err() && parse_size("GiB").is_err() && parse_size("1 XB").is_err());
    assert!(parse_size("99999999PiB").is_err());
}

#[test]
fn config_inline_and_dotted_mirrors() {
    let c = ok("[mirror]\nb = { repo = \"/r\", ref = \"main\", target = \"/b\" }\n\
         a.repo = \"/r\"\na.ref = \"x\"\na.target = \"/a\"\n");
    assert_eq!(c.names().collect::<Vec<_>>(), ["b", "a"]);
}

#[test]
fn config_relative_file_path_resolves_against_the_current_directory() {
    let c =
        parse("[mirror.a]\nrepo = \"r.git\"\nref = \"main\"\ntarget = \"t\"\n", Path::new("treesync.toml")).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(c.mirrors[0].repo, cwd.join("r.git"));
    assert_eq!(c.mirrors[0].target, cwd.join("t").to_str().unwrap());
}

#[test]
fn config_syntax_error_has_line_and_column() {
    assert_err("[mirror.a]\nrepo = \"x\nref = 1\n", (2, 10), "TOML syntax error: invalid basic string", &[]);
    assert_err("[mirror.a\n", (1, 10), "TOML syntax error: unclosed table", &[]);
}

#[test]
fn config_duplicate_key_or_mirror() {
    assert_err("[mirror.a]\nrepo = \"x\"\nrepo = \"y\"\n", (3, 1), "duplicate key \"repo\"", &["hint: each key"]);
    assert_err(
        "[mirror.a]\nrepo = \"x\"\n\n[mirror.a]\nref = \"y\"\n",
        (4, 9),
        "duplicate key \"a\"",
        &["each [mirror.NAME], may appear only once"],
    );
}

#[test]
fn config_unknown_key_in_mirror() {
    let text = "[defaults]\njobs = 4\n\n[mirror.site]\nrepo = \"/r\"\nref = \"main\"\ntagret = \"/t\"\n";
    assert_err(
        text,
        (7, 1),
        &format!(
            "unknown key \"tagret\" in [mirror.site] (expected one of: repo, ref, target, path, {})",
            treesync::Settings::keys().join(", ")
        ),
        &["\n  hint: did you mean \"target\"?"],
    );
    assert_err(
        "[mirror.site]\n  lookup-jobs = 2\n",
        (2, 3),
        "unknown key \"lookup-jobs\" in [mirror.site]",
        &["did you mean \"lookup_jobs\"?"],
    );
}

#[test]
fn config_lfs_takes_content_or_pointers_from_defaults_or_the_mirror() {
    use treesync_core::lfs::LfsMode;
    let base = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t/a\"\n";
    assert_eq!(ok(base).mirrors[0].settings.content.lfs, None, "unset: the core's default");
    let c = ok(&format!("[defaults]\nlfs = \"pointers\"\n{base}"));
    assert_eq!(c.mirrors[0].settings.content.lfs, Some(LfsMode::Pointers));
    let c = ok(&format!("[defaults]\nlfs = \"pointers\"\n{base}lfs = \"content\"\n"));
    assert_eq!(c.mirrors[0].settings.content.lfs, Some(LfsMode::Content), "the mirror's own wins");
    assert_err(
        &format!("{base}lfs = \"pointer\"\n"),
        (5, 7),
        "unknown LFS mode \"pointer\" for lfs in [mirror.a] (expected one of: content, pointers)",
        &["hint: content writes"],
    );
    assert_err(&format!("{base}lfs = true\n"), (5, 7), "lfs in [mirror.a] must be a string", &[]);
}

#[test]
fn config_metrics_addr_is_one_for_the_process_in_defaults() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n";
    let c = ok(&format!("[defaults]\nmetrics_addr = \"127.0.0.1:9273\"\n{m}"));
    assert_eq!(c.mirrors[0].metrics_addr, Some("127.0.0.1:9273".parse().expect("addr")));
    assert_eq!(ok(m).mirrors[0].metrics_addr, None);
    assert_err(
        &format!("{m}metrics_addr = \"127.0.0.1:9273\"\n"),
        (5, 1),
        "unknown key \"metrics_addr\" in [mirror.a]",
        &["hint: one `watch --all` process serves every mirror: set metrics_addr once, in [defaults]"],
    );
    // A port alone is this host's, written as a string or a number.
    for port in ["\"9273\"", "9273"] {
        let c = ok(&format!("[defaults]\nmetrics_addr = {port}\n{m}"));
        assert_eq!(c.mirrors[0].metrics_addr, Some("127.0.0.1:9273".parse().expect("addr")));
    }
    assert_err(
        &format!("[defaults]\nmetrics_addr = \":9273\"\n{m}"),
        (2, 16),
        "bad address for metrics_addr in [defaults]: \":9273\" names a port but no host: write 127.0.0.1:9273 (this host only; 9273 alone means the same) or 0.0.0.0:9273 (every interface)",
        &[],
    );
    assert_err(
        &format!("[defaults]\nmetrics_addr = \"localhost\"\n{m}"),
        (2, 16),
        "bad address for metrics_addr in [defaults]: \"localhost\" names no port: write HOST:PORT",
        &[],
    );
    assert_err(
        &format!("[defaults]\nmetrics_addr = 99999\n{m}"),
        (2, 16),
        "metrics_addr in [defaults] must be a string, not an integer (99999)",
        &["hint: write e.g. metrics_addr = \"127.0.0.1:9273\""],
    );
}

#[test]
fn config_unknown_key_in_defaults_and_top_level() {
    assert_err(
        "[defaults]\nref = \"main\"\n",
        (2, 1),
        "unknown key \"ref\" in [defaults] (expected one of: cache_dir, recurse_submodules,",
        &["hint: repo, ref and target are set in each [mirror.NAME]"],
    );
    assert_err(
        "[defaults]\nintervall = \"5s\"\n",
        (2, 1),
        "unknown key \"intervall\" in [defaults]",
        &["did you mean \"interval\"?"],
    );
    assert_err(
        "[mirrors.a]\nrepo = \"/r\"\n",
        (1, 2),
        "unknown key \"mirrors\" at the top level (expected one of: defaults, mirror)",
        &["did you mean \"mirror\"?"],
    );
    assert_err(
        "repo = \"/r\"\n",
        (1, 1),
        "unknown key \"repo\" at the top level",
        &["hint: the keys of a mirror go under a [mirror.NAME] header"],
    );
}

#[test]
fn config_missing_required_keys_point_at_the_header() {
    let text = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n\n\
                [mirror.site]\nrepo = \"/r\"\nref = \"main\"\n";
    assert_err(text, (6, 1), "missing key \"target\" in [mirror.site]", &["hint: every mirror needs repo"]);
    assert_err("\n[mirror.site]\n", (2, 1), "missing keys \"repo\", \"ref\", \"target\" in [mirror.site]", &[]);
}

#[test]
fn config_wrong_types() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n";
    assert_err(
        &format!("{m}jobs = \"8\"\n"),
        (5, 8),
        "jobs in [mirror.a] must be a number, not a string (\"8\")",
        &["hint: write jobs = 8, without quotes"],
    );
    assert_err(&format!("{m}jobs = 0\n"), (5, 8), "jobs in [mirror.a] must be at least 1, not 0", &[]);
    assert_err(&format!("{m}lookup_jobs = -2\n"), (5, 15), "lookup_jobs in [mirror.a] must be at least 1, not -2", &[]);
    assert_err(
        &format!("{m}allow_http = \"true\"\n"),
        (5, 14),
        "allow_http in [mirror.a] must be true or false, not a string (\"true\")",
        &["write allow_http = true, without quotes"],
    );
    assert_err(
        &format!("{m}write_jobs = \"many\"\n"),
        (5, 14),
        "write_jobs in [mirror.a] must be a number (1, 8, 32, …), not a string (\"many\")",
        &["\"auto\" or a number"],
    );
    assert_err(
        "[mirror.a]\nrepo = 7\n",
        (2, 8),
        "repo in [mirror.a] must be a string, not an integer (7)",
        &["hint: quote it: repo = \"7\""],
    );
    assert_err("[mirror.a]\nref = \"\"\n", (2, 7), "ref in [mirror.a] must not be empty", &[]);
    assert_err("[defaults]\nfsync = 1\n", (2, 9), "fsync in [defaults] must be true or false, not an integer (1)", &[]);
    assert_err(
        "mirror = \"a\"\n",
        (1, 1),
        "mirror must be a table of mirrors ([mirror.NAME]), not a string (\"a\")",
        &[],
    );
    assert_err("[[mirror]]\nrepo = \"/r\"\n", (1, 1), "[[mirror]] is not a mirror", &["hint: write [mirror.NAME]"]);
    assert_err("[mirror]\nsite = \"/r\"\n", (2, 1), "[mirror.site] must be a table", &[]);
}

#[test]
fn config_bad_backend() {
    assert_err(
        "[defaults]\nbackend = \"NFS\"\n",
        (2, 11),
        "unknown backend \"NFS\" in [defaults] (expected one of: auto, local, nfs, s3)",
        &["hint: did you mean \"nfs\"?"],
    );
}

#[test]
fn config_bad_duration() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n";
    assert_err(
        &format!("{m}interval = \"5 parsecs\"\n"),
        (5, 12),
        "bad duration \"5 parsecs\" for interval in [mirror.a]: unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations); a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m",
        &["hint: write a number and a unit"],
    );
    assert_err(
        &format!("{m}interval = \"5\"\n"),
        (5, 12),
        "bad duration \"5\" for interval in [mirror.a]: time unit needed, for example 5sec or 5ms; a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m",
        &[],
    );
    assert_err(
        &format!("{m}interval = 5\n"),
        (5, 12),
        "interval in [mirror.a] must be a duration string, not an integer (5)",
        &["hint: give the unit: interval = \"5s\""],
    );
    assert_err(&format!("{m}interval = \"0s\"\n"), (5, 12), "interval in [mirror.a] must be longer than 0", &[]);
    assert_err(
        "[defaults]\nverify_every = \"daily\"\n",
        (2, 16),
        "bad duration \"daily\" for verify_every in [defaults]: expected number at 0; a duration is a number with a unit (ms, s, m, h, d), or a sum such as 1h30m",
        &[],
    );
}

#[test]
fn config_backend_and_target_disagree() {
    // The library's rules and words, as `--backend` and `--target` give them.
    assert_err(
        "[mirror.docs]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"s3://bucket/docs\"\nbackend = \"nfs\"\n",
        (4, 10),
        "backend nfs needs a directory, got \"s3://bucket/docs\"",
        &["hint: use backend auto or s3 for object-storage URLs"],
    );
    assert_err(
        "[defaults]\nbackend = \"local\"\n\n[mirror.docs]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"memory://\"\n",
        (7, 10),
        "backend local needs a directory, got \"memory://\" (backend = \"local\" from [defaults], line 2)",
        &[],
    );
    assert_err(
        "[mirror.site]\nrepo = \"/r\"\nref = \"main\"\nbackend = \"s3\"\ntarget = \"/mnt/nas/site\"\n",
        (5, 10),
        "backend s3 needs a URL such as s3://BUCKET/PREFIX, got \"/mnt/nas/site\"",
        &["hint: use backend auto, local or nfs for a directory"],
    );
}

#[test]
fn config_takes_nfs_urls_by_the_rules_of_the_binary() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\n";
    let c = ok(&format!("{m}target = \"nfs://127.0.0.1:2049/export/site?mountport=20048\"\n"));
    assert_eq!(c.get("a").unwrap().target, "nfs://127.0.0.1:2049/export/site?mountport=20048");
    ok(&format!("{m}backend = \"nfs\"\ntarget = \"nfs://nas/export/site\"\n"));
    assert_err(
        &format!("{m}backend = \"s3\"\ntarget = \"nfs://nas/export/site\"\n"),
        (5, 10),
        "backend s3 cannot use an NFS URL, got \"nfs://nas/export/site\"",
        &["hint: use backend auto or nfs for nfs:// targets"],
    );
    assert_err(
        &format!("{m}target = \"nfs://[::1/x\"\n"),
        (4, 10),
        "bad NFS URL \"nfs://[::1/x\": an IPv6 address in [ ] is not closed with ]",
        &["hint: the form is nfs://HOST[:PORT]/EXPORT"],
    );
}

#[test]
fn config_mirrors_take_every_target_the_cli_takes() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\n";
    for target in [
        "nfs://nas/export/site",
        "nfs://[::1]:2049/export/site?mountport=20048&uid=1000",
        "s3://bucket/site",
        "s3a://bucket",
        "file:///srv/export",
        "memory://",
    ] {
        let c = ok(&format!("{m}target = {target:?}\n"));
        assert_eq!(c.mirrors[0].target, target, "URLs are kept as written");
    }
    ok(&format!("{m}backend = \"s3\"\ntarget = \"s3://bucket/site\"\nendpoint = \"https://s3.example\"\n"));
    ok(&format!("{m}backend = \"nfs\"\ntarget = \"nfs://nas/export/site\"\njobs = 4\nwrite_jobs = \"auto\"\n"));
    ok(&format!("{m}target = \"nfs://nas/export/site\"\njobs = 4\nwrite_jobs = 4\n"));
    assert_err(
        &format!("{m}target = \"nfs://nas\"\n"),
        (4, 10),
        "bad NFS URL \"nfs://nas\": the export path is missing",
        &["hint: the form is nfs://HOST[:PORT]/EXPORT"],
    );
    assert_err(
        &format!("{m}target = \"nfs://nas:x/e\"\n"),
        (4, 10),
        "bad NFS URL \"nfs://nas:x/e\": \"x\" is not a port number",
        &[],
    );
}

#[test]
fn config_jobs_and_write_jobs_on_nfs_must_agree() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"nfs://nas/export/site\"\n";
    assert_err(
        &format!("{m}jobs = 4\nwrite_jobs = 16\n"),
        (6, 14),
        "jobs 4 and write_jobs 16 disagree: on nfs every operation in flight is a write",
        &["hint: give one of them"],
    );
    assert_err(
        &format!("[defaults]\njobs = 8\n{m}write_jobs = 2\n"),
        (7, 14),
        "jobs 8 and write_jobs 2 disagree",
        &["(jobs from [defaults], line 2)"],
    );
    // A directory with backend auto may be local (write_jobs unused): decided when opened.
    ok("[defaults]\njobs = 8\n[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\nwrite_jobs = 2\n");
}

#[test]
fn config_dates_and_tables_where_values_belong() {
    let m = "[mirror.a]\nrepo = \"/r\"\ntarget = \"/t\"\n";
    assert_err(
        &format!("{m}ref = 1979-05-27\n"),
        (4, 7),
        "ref in [mirror.a] must be a string, not a date (1979-05-27)",
        &["hint: quote it: ref = \"1979-05-27\""],
    );
    assert_err(
        &format!("{m}ref = \"main\"\njobs = [1]\n"),
        (5, 8),
        "jobs in [mirror.a] must be a number (1, 8, 32, …), not an array",
        &[],
    );
    assert_err("defaults = 1\n", (1, 1), "defaults must be a table ([defaults]), not an integer (1)", &[]);
}

#[test]
fn config_bad_url_target_or_endpoint() {
    let m = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\n";
    assert_err(
        &format!("{m}target = \"sftp://host/dir\"\n"),
        (4, 10),
        "unsupported target scheme \"sftp\"",
        &["s3://BUCKET/PREFIX, file:///DIR"],
    );
    assert_err(&format!("{m}target = \"s3:///docs\"\n"), (4, 10), "target \"s3:///docs\" has no bucket name", &[]);
    assert_err(
        &format!("[defaults]\nendpoint = \"http://127.0.0.1:9000\"\n{m}target = \"s3://b/p\"\n"),
        (2, 12),
        "endpoint \"http://127.0.0.1:9000\" of [mirror.a] is plain HTTP",
        &["hint: add allow_http = true to [mirror.a]"],
    );
    // Not an error for a directory target: the endpoint of [defaults] does not apply to it.
    ok(&format!("[defaults]\nendpoint = \"http://127.0.0.1:9000\"\n{m}target = \"/t\"\n"));
    assert_err(
        &format!("{m}target = \"~/site\"\n"),
        (4, 10),
        "target \"~/site\" in [mirror.a] starts with ~",
        &["hint: write the full path"],
    );
}

#[test]
fn config_bad_mirror_names() {
    assert_err(
        "[mirror.\"my site\"]\nrepo = \"/r\"\n",
        (1, 9),
        "bad mirror name \"my site\": use only letters, digits, '.', '_' and '-'",
        &["hint: rename it, e.g. [mirror.my-site]"],
    );
    assert_err("[mirror.\"..\"]\n", (1, 9), "bad mirror name \"..\": it must not be . or .. nor start with '-'", &[]);
    assert_err("[mirror.-x]\n", (1, 9), "bad mirror name \"-x\"", &[]);
    assert_err("[mirror.\"\"]\n", (1, 9), "bad mirror name \"\"", &[]);
    ok("[mirror.\"Site_2.0-x\"]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n");
    assert_err(
        "[mirror.v2.0]\nrepo = \"/r\"\n",
        (1, 12),
        "unknown key \"0\" in [mirror.v2]",
        &["hint: a dot splits a table name; quote a name that has one: [mirror.\"v2.0\"]"],
    );
}

#[test]
fn config_no_mirrors() {
    let e = err("# nothing yet\n[defaults]\njobs = 4\n");
    assert_eq!(
        e,
        format!(
            "{PATH}: no mirrors defined\n  \
             hint: add a [mirror.NAME] table with repo, ref and target (see docs/config.md)"
        )
    );
    assert_eq!(err(""), e);
    assert_err("[defaults]\n\n[mirror]\n", (3, 1), "no mirrors defined: [mirror] is empty", &[]);
}

#[test]
fn config_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("treesync.toml");
    let e = load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot read {}: No such file or directory\n  hint: create it or pass --config PATH", path.display())
    );
    assert_eq!(e.location(), None);

    std::fs::write(&path, "[mirror.a]\nrepo = \"a.git\"\nref = \"main\"\ntarget = \"out\"\n").unwrap();
    let c = load(&path).unwrap();
    assert_eq!(c.mirrors[0].repo, dir.path().join("a.git"));
    assert_eq!(c.mirrors[0].target, dir.path().join("out").to_str().unwrap());
}

#[test]
fn config_duplicate_targets() {
    let text = "[mirror.site]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/etc/treesync/out\"\n\n\
                [mirror.docs]\nrepo = \"/d\"\nref = \"main\"\ntarget = \"./out/\"\n";
    assert_err(
        text,
        (9, 10),
        "[mirror.docs] and [mirror.site] (line 4) have the same target \"/etc/treesync/out\"",
        &["hint: two mirrors writing one target would undo each other's syncs"],
    );
    let urls = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"s3://b/p\"\n\
                [mirror.b]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"s3://b/p/\"\n";
    assert_err(urls, (8, 10), "[mirror.b] and [mirror.a] (line 4) have the same target", &[]);
    // Two mirrors of one repository into different targets are fine.
    ok("[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/a\"\n\
         [mirror.b]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/b\"\n");
}

#[test]
fn config_get_unknown_name_lists_the_mirrors() {
    let c = ok(GOOD);
    let e = c.get("dosc").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("no mirror named \"dosc\" in {PATH} (mirrors: site, docs, alpha)\n  hint: did you mean \"docs\"?")
    );
    let e = c.get("zzz").unwrap_err();
    assert_eq!(e.to_string(), format!("no mirror named \"zzz\" in {PATH} (mirrors: site, docs, alpha)"));
}

#[test]
fn config_default_path() {
    let os = |s: &str| Some(OsString::from(s));
    assert_eq!(default_path_from(os("/x/cfg"), os("/home/u")), Some(PathBuf::from("/x/cfg/treesync/treesync.toml")));
    assert_eq!(default_path_from(None, os("/home/u")), Some(PathBuf::from("/home/u/.config/treesync/treesync.toml")));
    assert_eq!(default_path_from(os(""), os("/home/u")), Some(PathBuf::from("/home/u/.config/treesync/treesync.toml")));
    assert_eq!(
        default_path_from(os("rel"), os("/home/u")),
        Some(PathBuf::from("/home/u/.config/treesync/treesync.toml"))
    );
    assert_eq!(default_path_from(None, None), None);
}

#[test]
fn config_docs_examples_are_valid() {
    let doc = include_str!("../../../../docs/config.md");
    let blocks: Vec<&str> = doc.split("```toml\n").skip(1).map(|b| b.split("```").next().unwrap_or_default()).collect();
    assert!(blocks.len() >= 3, "docs/config.md has the format and two examples");
    for b in blocks {
        let c = parse(b, Path::new("/etc/treesync/treesync.toml")).unwrap_or_else(|e| panic!("{e}\nin\n{b}"));
        assert!(!c.mirrors.is_empty());
    }
}

#[test]
fn config_error_location() {
    let e = parse("[mirror.a]\n  bogus = 1\n", Path::new("treesync.toml")).unwrap_err();
    assert_eq!(e.location(), Some((2, 3)));
    assert!(e.to_string().starts_with("treesync.toml:2:3: unknown key \"bogus\" in [mirror.a]"), "{e}");
    assert!(e.message().starts_with("unknown key"));
    assert_eq!(e.hint_text(), None);
}

/// Every setting, set by a flag alone and by a config file alone, is the same setting: the
/// `sync` (and `watch`) flags and the keys of a mirror are one declaration.
#[test]
fn every_key_and_its_flag_parse_into_the_same_settings() {
    use clap::{CommandFactory, Parser};
    // `FLAGS => KEY = VALUE`, every setting once.
    const CASES: &str = r#"
--cache-dir /var/cache/t => cache_dir = "/var/cache/t"
--recurse-submodules => recurse_submodules = true
--include docs/ --include *.md => include = ["docs/", "*.md"]
--exclude *.map => exclude = "*.map"
--export => export = true
--lfs pointers => lfs = "pointers"
--backend nfs => backend = "nfs"
--jobs 4 => jobs = 4
--lookup-jobs 3 => lookup_jobs = 3
--write-jobs auto => write_jobs = "auto"
--batch 16 => batch = 16
--fsync => fsync = true
--endpoint https://s3.example => endpoint = "https://s3.example"
--region eu-west-1 => region = "eu-west-1"
--allow-http => allow_http = true
--max-entries 1000 => max_entries = 1000
--max-bytes 2TiB => max_bytes = "2TiB"
--filter-timeout 30m => filter_timeout = "30m"
--atomic => atomic = true
--no-atomic => atomic = false
--keep 3 => keep = 3
--grace 10m => grace = "10m"
--max-generations 9 => max_generations = 9
--switch symlink => switch = "symlink"
--exec-after true => exec_after = "true"
--webhook https://hooks.example/site => webhook = "https://hooks.example/site"
--hook-timeout 30s => hook_timeout = "30s"
--hook-retries 5 => hook_retries = 5
--interval 2s => interval = "2s"
--poll => poll = true
--verify-every 24h => verify_every = "24h"
--verify-slices 24 => verify_slices = 24
--repair => repair = true
"#;
    let cases: Vec<(Vec<&str>, &str)> = CASES
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split_once(" => ").map(|(f, k)| (f.split(' ').collect(), k)).unwrap())
        .collect();
    // `--no-atomic` is how a flag says `atomic = false`.
    let normal = |mut s: treesync::Settings| {
        if s.generations.wanted() == Some(false) {
            (s.generations.atomic, s.generations.no_atomic) = (Some(false), None);
        }
        s
    };
    let mirror = "[mirror.a]\nrepo = \"/r\"\nref = \"main\"\ntarget = \"/t\"\n";
    use crate::args::{Cli, Command};
    for (flags, key) in &cases {
        // `sync` takes every setting but watch's own.
        let name = key.split(" = ").next().unwrap();
        let command = if treesync::settings::WatchSettings::keys().contains(&name) { "watch" } else { "sync" };
        let argv = [&["treesync", command, "--repo", "/r", "--ref", "main", "--target", "/t"][..], &flags[..]].concat();
        let by_flag = match Cli::try_parse_from(&argv).unwrap().command {
            Command::Sync(a) => treesync::Settings { hooks: a.hooks.settings, ..a.spec.settings() },
            Command::Watch(a) => treesync::Settings { watch: a.watch, ..a.spec.settings() },
            _ => unreachable!("sync or watch"),
        };
        let by_key = ok(&format!("{mirror}{key}\n")).mirrors[0].settings.clone();
        assert_ne!(by_key, treesync::Settings::default(), "{key} sets something");
        assert_eq!(normal(by_flag), by_key, "{flags:?} and {key}");
    }
    // Every key is listed above, and every flag of `sync` and `watch` that is a setting is a key.
    let keys = treesync::Settings::keys();
    let listed: Vec<&str> = cases.iter().map(|(_, k)| k.split(" = ").next().unwrap()).collect();
    for k in &keys {
        assert!(listed.contains(k), "{k} is not tested");
    }
    let command = Cli::command();
    for name in ["sync", "watch"] {
        let sub = command.find_subcommand(name).unwrap();
        let own = [
            "mirror",
            "all",
            "repo",
            "ref",
            "path",
            "target",
            "force",
            "dry_run",
            "json",
            "quiet",
            "git_worktree",
            "break_lock",
            "wait",
            "metrics_addr",
            "no_atomic",
            "rev",
            "target_arg",
        ];
        for arg in sub.get_arguments().map(|a| a.get_id().as_str()) {
            assert!(
                keys.contains(&arg) || own.contains(&arg),
                "{name} --{arg} is neither a setting nor the command's own"
            );
        }
    }
}
