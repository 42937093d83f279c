//! The CLI with `nfs://` targets (the built-in NFSv3 client) against a real nfs-ganesha on
//! 127.0.0.1: sync, status, plan and verify, the cost in NFS calls, and clear errors.

use std::process::Output;

use crate::treesync;
use treesync_testkit::cli::s;
use treesync_testkit::conformance::History;
use treesync_testkit::ganesha::Ganesha;
use treesync_testkit::tree;

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "treesync failed ({:?}): {}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn sync_status_plan_verify_over_nfs_url() {
    let server = Ganesha::shared();
    let h = History::random(17, 3);
    let repo = h.bare.path.clone();
    let url = server.url("cli-site");
    let o = ok(treesync(&["sync", "--repo", s(&repo), "--ref", &h.commits[0], "--target", &url]));
    let line = stdout(&o);
    assert!(line.starts_with("synced Budgets(lookups=32, writes=adaptive(1..128), nfs://127.0.0.1:"), "{line}");
    assert!(line.contains("CREATE") && line.contains("RENAME"), "the summary ends with the NFS calls: {line}");
    assert!(tree::diff(&h.expected(0), &tree::read_dir(&server.dir().join("cli-site"))).is_none(), "like git archive");

    let st = ok(treesync(&["status", "--json", "--target", &url]));
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).expect("json");
    assert_eq!(st["backend"], "nfs", "{st}");
    assert!(st["backend_reason"].as_str().expect("reason").contains("nfs:// URL"), "{st}");
    assert_eq!(st["state"]["synced"]["commit"], h.commits[0].as_str(), "{st}");
    let human = stdout(&ok(treesync(&["status", "--target", &url])));
    assert!(human.contains("backend: nfs now, because auto: an nfs:// URL"), "{human}");

    let plan = stdout(&ok(treesync(&["plan", "--repo", s(&repo), "--ref", &h.commits[1], "--target", &url])));
    assert!(plan.contains("total:"), "{plan}");

    let o = ok(treesync(&["sync", "--json", "--repo", s(&repo), "--ref", &h.commits[1], "--target", &url]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let cost = v["cost"].as_object().expect("cost");
    assert!(cost.contains_key("MOUNT") && cost.keys().any(|k| k == "LOOKUP" || k == "WRITE"), "{cost:?}");
    assert!(tree::diff(&h.expected(1), &tree::read_dir(&server.dir().join("cli-site"))).is_none(), "like git archive");

    let v = ok(treesync(&["verify", "--repo", s(&repo), "--target", &url]));
    assert!(stdout(&v).contains("verified") || v.status.success(), "{}", stdout(&v));
    std::fs::write(server.dir().join("cli-site/extra.txt"), b"x").expect("write");
    let v = treesync(&["verify", "--repo", s(&repo), "--target", &url]);
    assert_eq!(v.status.code(), Some(1), "drift is exit 1: {}", stdout(&v));
    let r = ok(treesync(&["verify", "--repair", "--delete-extra", "--repo", s(&repo), "--target", &url]));
    assert!(!server.dir().join("cli-site/extra.txt").exists(), "repaired: {}", stdout(&r));
}

#[test]
fn bad_nfs_urls_get_clear_errors() {
    let h = History::random(2, 1);
    let repo = h.bare.path.clone();
    for (url, says) in
        [("nfs://nas", "the export path is missing"), ("nfs://nas/e?colour=red", "unknown option \"colour\"")]
    {
        let o = treesync(&["sync", "--repo", s(&repo), "--ref", &h.commits[0], "--target", url]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains(says) && err.contains("hint: the form is nfs://"), "{url}: {err}");
    }
    let o =
        treesync(&["sync", "--repo", s(&repo), "--ref", &h.commits[0], "--target", "nfs://nas/e", "--backend", "s3"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("backend s3 cannot use an NFS URL"), "{err}");
}
