//! A config file whose mirrors are an `s3://` target on a real S3 server (moto) and an `nfs://`
//! target on a real NFS server (nfs-ganesha): `sync --all`, `status --all` and `verify --all`
//! take both, as `--target` does, and each target ends up like `git archive`.

use std::path::Path;
use std::process::{Command, Output};

use treesync_testkit::cli::succeeded as ok;
use treesync_testkit::config_file::ConfigFile;
use treesync_testkit::conformance::History;
use treesync_testkit::ganesha::Ganesha;
use treesync_testkit::s3::Moto;
use treesync_testkit::tree;

fn treesync(moto: &Moto, config: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_treesync"));
    c.arg("--config").arg(config).args(args);
    for (k, v) in moto.env() {
        c.env(k, v);
    }
    c.output().expect("treesync runs")
}

#[test]
fn config_mirrors_on_s3_and_nfs_urls_sync_status_and_verify() {
    let server = Ganesha::shared();
    let moto = Moto::start();
    moto.create_bucket("mirrors");
    let h = History::random(41, 2);
    let s3_url = "s3://mirrors/site";
    let nfs_url = server.url("config-mirror");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = ConfigFile::new()
        .defaults()
        .key("endpoint", &moto.endpoint)
        .key("allow_http", true)
        .mirror("bucket", &h.bare.path, &h.commits[0], s3_url)
        .key("jobs", 8)
        .mirror("export", &h.bare.path, &h.commits[1], &nfs_url)
        .key("jobs", 4)
        .key("write_jobs", "auto")
        .write_in(dir.path());

    let out = ok(treesync(&moto, &cfg, &["sync", "--all"]));
    assert!(out.contains("s3://mirrors/site") && out.contains("nfs://"), "one line per mirror: {out}");
    moto.assert_bucket_is(s3_url, &h.expected(0), "git archive");
    let exported = tree::read_dir(&server.dir().join("config-mirror"));
    assert!(tree::diff(&h.expected(1), &exported).is_none(), "the export is like git archive");

    let v: serde_json::Value =
        serde_json::from_str(&ok(treesync(&moto, &cfg, &["status", "--all", "--json"]))).expect("json");
    let rows = v.as_array().expect("one row per mirror");
    let backends: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["mirror"].as_str().expect("mirror"), r["backend"].as_str().expect("backend"))).collect();
    assert_eq!(backends, [("bucket", "s3"), ("export", "nfs")]);
    assert_eq!(rows[1]["state"]["synced"]["commit"].as_str(), Some(h.commits[1].as_str()));

    ok(treesync(&moto, &cfg, &["verify", "--all"]));

    // The nfs mirror's budgets are the library's decision: --jobs 4 is the ceiling of auto.
    let v: serde_json::Value =
        serde_json::from_str(&ok(treesync(&moto, &cfg, &["sync", "export", "--json"]))).expect("json");
    let b = &v["budgets"];
    assert_eq!((&b["jobs"], &b["writes"], &b["write_ceiling"]), (&4.into(), &"adaptive".into(), &4.into()), "{v}");
}

#[test]
fn config_mirror_refuses_what_the_cli_refuses_with_the_line() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mirror = ConfigFile::new().mirror("a", "/r", "main", "nfs://nas/export/site");
    let cfg = mirror.key("jobs", 4).key("write_jobs", 16).write_in(dir.path());
    let o = treesync(&moto, &cfg, &["sync", "--all"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("treesync.toml:6:14: jobs 4 and write_jobs 16 disagree"), "{err}");
}
