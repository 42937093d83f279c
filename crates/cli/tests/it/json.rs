//! The `--json` output of `sync`, `plan`, `status` and `verify`, run for real and held to the
//! schemas in docs/schema/ (and docs/json.md to them), plus the facts a script relies on.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::plan_ops;
use crate::schema::ADOPT;
use crate::schema::PLAN;
use crate::schema::STATUS;
use crate::schema::SYNC;
use crate::schema::VERIFY;
use crate::schema::WATCH_EVENT;
use crate::treesync;
use serde_json::{Value, json};
use treesync_core::Backend;
use treesync_testkit::cli::s;
use treesync_testkit::history::file;
use treesync_testkit::history::{self, Entry, Model};
use treesync_testkit::{BareRepo, git, schema};

const DOC: &str = include_str!("../../../../docs/json.md");

fn schema_of(command: &str) -> Value {
    let text = match command {
        "sync" => SYNC,
        "plan" => PLAN,
        "status" => STATUS,
        "verify" => VERIFY,
        "adopt" => ADOPT,
        "watch-event" => WATCH_EVENT,
        other => panic!("no schema for {other}"),
    };
    serde_json::from_str(text).unwrap_or_else(|e| panic!("docs/schema/{command}.schema.json is not JSON: {e}"))
}

/// Run `treesync ARGS --json`, expect exit `code`, and return stdout validated against the
/// schema of the subcommand (`args[0]`).
fn run_json(args: &[&str], code: i32) -> Value {
    let (got, v) = run_json_code(args);
    assert_eq!(got, code, "treesync {args:?} --json: {v:#}");
    v
}

/// [`run_json`] for exit 0 or 1 (`verify`); returns the exit code too.
fn run_json_code(args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let o = treesync(&all);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code().expect("exited");
    assert!(code == 0 || code == 1, "treesync {all:?}: exit {code}: stderr: {stderr}");
    assert!(stderr.is_empty(), "treesync {all:?} wrote to stderr without -v: {stderr}");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("treesync {all:?}: stdout is not one JSON document ({e}): {:?}", o.stdout));
    assert_valid(args[0], &v, &format!("treesync {all:?}"));
    (code, v)
}

fn assert_valid(command: &str, v: &Value, context: &str) {
    if let Err(errors) = schema::validate(&schema_of(command), v) {
        panic!("{context}: output violates docs/schema/{command}.schema.json:\n{}\n{v:#}", errors.join("\n"));
    }
}

/// Run `treesync ARGS --json` expecting failure with `code`: nothing on stdout, one error on stderr.
fn run_failing(args: &[&str], code: i32) -> String {
    let mut all = args.to_vec();
    all.push("--json");
    let o = treesync(&all);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "treesync {all:?}: stderr: {stderr}");
    assert!(
        o.stdout.is_empty(),
        "treesync {all:?} failed but printed on stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(stderr.starts_with("treesync: error: "), "{stderr}");
    stderr
}

/// Two commits; the second changes one thing of every op kind:
/// write (a.txt modified, new/n.txt added), mkdir (new/), symlink (link retargeted),
/// chmod (bin/tool made executable), unlink (old/x.txt, old/y.txt), rmdir (old/).
struct Fixture {
    bare: BareRepo,
    models: Vec<Model>,
    commits: Vec<String>,
    trees: Vec<String>,
    dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let mut m0 = Model::default();
    m0.insert("README", file("hello\n"));
    m0.insert("a.txt", file("aaaa\n"));
    m0.insert("bin/run.sh", Entry::File { content: b"#!/bin/sh\necho run\n".to_vec(), executable: true });
    m0.insert("bin/tool", file("tool\n"));
    m0.insert("old/x.txt", file("x\n"));
    m0.insert("old/y.txt", file("y\n"));
    m0.insert("src/lib/m.rs", file("fn m() {}\n"));
    m0.insert("link", Entry::Link { target: "a.txt".into() });
    let mut m1 = m0.clone();
    m1.insert("a.txt", file("aaaa bbbb\n"));
    m1.insert("bin/tool", Entry::File { content: b"tool\n".to_vec(), executable: true });
    m1.remove_dir("old");
    m1.insert("link", Entry::Link { target: "README".into() });
    m1.insert("new/n.txt", file("new\n"));
    let models = vec![m0, m1];
    let bare = BareRepo::new();
    let commits = history::import(&bare.path, "main", &models);
    let trees = commits.iter().map(|c| git(&bare.path, &["rev-parse", &format!("{c}^{{tree}}")])).collect();
    Fixture { bare, models, commits, trees, dir: tempfile::tempdir().expect("tempdir") }
}

impl Fixture {
    fn repo(&self) -> &str {
        s(&self.bare.path)
    }

    fn target(&self, name: &str) -> String {
        s(&self.dir.path().join(name)).to_string()
    }

    /// `treesync sync --json` to commit `i`, exit 0.
    fn sync(&self, i: usize, target: &str, extra: &[&str]) -> Value {
        let mut args = vec!["sync", "--repo", self.repo(), "--ref", &self.commits[i], "--target", target];
        args.extend_from_slice(extra);
        run_json(&args, 0)
    }
}

/// The op counts a checkout of `m` makes: every file written, every link created, every
/// directory made.
fn checkout_counts(m: &Model) -> Value {
    let (mut write, mut symlink, mut bytes) = (0u64, 0u64, 0u64);
    for e in m.0.values() {
        match e {
            Entry::File { content, .. } => {
                write += 1;
                bytes += content.len() as u64;
            }
            Entry::Link { target } => {
                symlink += 1;
                bytes += target.len() as u64;
            }
            Entry::Gitlink { .. } => panic!("the fixture has no submodules"),
        }
    }
    let mkdir = m.dirs().len() as u64;
    json!({"mkdir": mkdir, "write": write, "symlink": symlink, "chmod": 0, "unlink": 0, "rmdir": 0, "bytes": bytes})
}

/// What syncing the fixture from commit 0 to commit 1 does.
fn update_counts() -> Value {
    let bytes = "aaaa bbbb\n".len() + "new\n".len() + "README".len();
    json!({"mkdir": 1, "write": 2, "symlink": 1, "chmod": 1, "unlink": 2, "rmdir": 1, "bytes": bytes})
}

fn zero_counts() -> Value {
    json!({"mkdir": 0, "write": 0, "symlink": 0, "chmod": 0, "unlink": 0, "rmdir": 0, "bytes": 0})
}

/// Counts of a plan's ops, summed from its phases.
fn tally(plan: &Value) -> Value {
    let mut counts: BTreeMap<String, u64> = ["mkdir", "write", "symlink", "chmod", "unlink", "rmdir", "bytes"]
        .into_iter()
        .map(|k| (k.to_string(), 0))
        .collect();
    for phase in plan["phases"].as_array().expect("phases") {
        let ops = phase["ops"].as_array().expect("ops");
        assert!(!ops.is_empty(), "a phase without ops: {phase}");
        for op in ops {
            let kind = op["op"].as_str().expect("op kind");
            *counts.get_mut(kind).expect("a known kind") += 1;
            *counts.get_mut("bytes").expect("bytes") += match kind {
                "write" => op["size"].as_u64().expect("size"),
                "symlink" => op["target"].as_str().expect("target").len() as u64,
                _ => 0,
            };
        }
    }
    serde_json::to_value(counts).expect("counts")
}

fn read_state(target: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(target).join(".treesync/state")).expect("state file");
    serde_json::from_str(&text).expect("state is JSON")
}

fn write_state(target: &str, state: &Value) {
    std::fs::write(Path::new(target).join(".treesync/state"), serde_json::to_vec_pretty(state).expect("JSON"))
        .expect("write state");
}

#[test]
fn sync_initial_noop_dry_run_and_incremental() {
    let f = fixture();
    let t = f.target("t");

    let dry = f.sync(0, &t, &["--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["planned"], checkout_counts(&f.models[0]));
    assert_eq!(dry["applied"], zero_counts(), "--dry-run applies nothing");
    assert_eq!(dry["state_writes"], 0);
    assert!(!Path::new(&t).exists(), "--dry-run does not even create the target");

    let v = f.sync(0, &t, &[]);
    assert_eq!(v["applied"], checkout_counts(&f.models[0]), "a first sync writes every file, link and directory");
    assert_eq!(v["applied"]["write"], 7, "applied.write is the number of files");
    assert_eq!(v["planned"], v["applied"]);
    assert_eq!(v["commit"], f.commits[0].as_str());
    assert_eq!(v["tree"], f.trees[0].as_str());
    assert_eq!(v["from"], Value::Null);
    assert_eq!(v["resumed"], Value::Null);
    assert_eq!((&v["takeover"], &v["dry_run"]), (&json!(false), &json!(false)));
    assert_eq!(v["state_writes"], 2, "the journal's `in progress`, then `synced`");
    assert_eq!(v["backend"], "local");
    assert_eq!(v["cost"], json!({}), "local has no storage cost to report");
    assert!(v.get("budgets").is_none(), "budgets are for nfs only: {v}");
    assert!(v["elapsed"].as_f64().expect("seconds") < 60.0, "elapsed is in seconds: {v}");

    let noop = f.sync(0, &t, &[]);
    assert_eq!(noop["applied"], zero_counts());
    assert_eq!(noop["state_writes"], 0, "a sync to the commit already there writes nothing");
    assert_eq!(noop["from"]["commit"], f.commits[0].as_str());

    let dry = f.sync(1, &t, &["--dry-run"]);
    assert_eq!((&dry["planned"], &dry["applied"]), (&update_counts(), &zero_counts()));
    assert_eq!(read_state(&t)["synced"]["commit"], f.commits[0].as_str(), "--dry-run changed the state");

    let before = read_state(&t)["synced"].clone();
    let v = f.sync(1, &t, &[]);
    assert_eq!(v["applied"], update_counts(), "one op of every kind: {v}");
    assert_eq!(v["planned"], v["applied"]);
    assert_eq!(v["from"], before, "from is the state's last completed sync");
    assert_eq!((&before["commit"], &before["tree"]), (&json!(f.commits[0]), &json!(f.trees[0])));
}

#[test]
fn jobs_and_the_nfs_write_budget_are_decided_together_and_reported() {
    let f = fixture();
    let t = f.target("budgets");
    // --jobs 4 --write-jobs auto: the adaptive budget's ceiling is --jobs, and --json says so.
    let v = f.sync(0, &t, &["--backend", "nfs", "--jobs", "4", "--write-jobs", "auto"]);
    let b = &v["budgets"];
    assert_eq!((&b["jobs"], &b["writes"], &b["write_ceiling"]), (&json!(4), &json!("adaptive"), &json!(4)), "{b}");
    assert!(b["decided"].as_str().is_some_and(|d| d.contains("the ceiling is --jobs 4")), "{b}");
    let limits = b["write_limits"].as_array().expect("write_limits");
    assert!(limits.iter().all(|l| l.as_u64() <= Some(4)), "the adaptive budget never passes --jobs: {b}");
    assert!(b["max_writes_in_flight"].as_u64() <= Some(4), "{b}");
    assert_eq!(v["applied"], checkout_counts(&f.models[0]));

    // --jobs 4 --write-jobs 16 would keep 4 in flight under a budget of 16: refused, with the fix.
    let nfs_jobs_4 =
        ["sync", "--repo", f.repo(), "--ref", &f.commits[1], "--target", &t, "--backend", "nfs", "--jobs", "4"];
    let o = treesync(&[&nfs_jobs_4[..], &["--write-jobs", "16"]].concat());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "refused: {stderr}");
    assert!(stderr.contains("jobs 4 and write_jobs 16 disagree"), "{stderr}");
    assert!(stderr.contains("hint: give one of them (--write-jobs 16 or --jobs 4)"), "{stderr}");

    // Without --json, -vv logs the decision.
    let o = treesync(&[&nfs_jobs_4[..], &["--write-jobs", "auto", "--dry-run", "-vv"]].concat());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("4 ops in flight") && stderr.contains("the ceiling is --jobs 4"), "{stderr}");

    // Without --write-jobs, --jobs is the fixed write budget.
    let v = f.sync(1, &t, &["--backend", "nfs", "--jobs", "2"]);
    let b = &v["budgets"];
    assert_eq!((&b["jobs"], &b["writes"], &b["write_ceiling"]), (&json!(2), &json!("2"), &json!(2)), "{b}");
}

#[test]
fn sync_with_the_nfs_and_s3_backends() {
    let f = fixture();
    // nfs on a plain directory: the same code paths as on a mount, and the budgets.
    let t = f.target("nfs");
    let v = f.sync(0, &t, &["--backend", "nfs"]);
    assert_eq!((&v["backend"], &v["backend_reason"]), (&json!("nfs"), &json!("--backend nfs")));
    assert_eq!(v["applied"], checkout_counts(&f.models[0]));
    let b = &v["budgets"];
    assert_eq!(b["writes"], "adaptive", "--write-jobs auto is the default: {v}");
    // Lookups adapt by default (issue 18): the limit they ended at, within 1..=16.
    assert!((1..=16).contains(&b["lookups"].as_u64().expect("lookups")), "{b}");
    let limits = b["write_limits"].as_array().expect("write_limits");
    assert_eq!(limits.last(), Some(&b["write_limit_final"]), "the adaptive history ends at the final limit: {b}");
    assert!(b["max_lookups_in_flight"].as_u64() <= Some(16), "within the ceiling: {b}");
    assert!(v["cost"]["directory lookups"].as_u64().is_some(), "nfs counts its directory lookups: {v}");

    let v = f.sync(1, &t, &["--backend", "nfs", "--write-jobs", "3"]);
    let b = &v["budgets"];
    assert_eq!((&b["writes"], &b["write_limit_final"], &b["write_limits"]), (&json!("3"), &json!(3), &json!([])));
    assert!(b["max_writes_in_flight"].as_u64() <= Some(3), "{b}");
    assert_eq!(v["applied"], update_counts());
    let st = run_json(&["status", "--backend", "nfs", "--target", &t], 0);
    assert_eq!(st["backend"], "nfs");
    assert!(st["state"]["backend"].as_str().is_some_and(|b| b.starts_with("nfs")), "{st}");

    // An object store through a file:// URL: s3 backend, requests as cost.
    let store = f.dir.path().join("bucket");
    std::fs::create_dir(&store).expect("mkdir");
    let url = format!("file://{}", s(&store));
    let v = f.sync(0, &url, &[]);
    assert_eq!((&v["backend"], &v["backend_reason"]), (&json!("s3"), &json!("auto: the target is a URL")));
    assert!(v["cost"]["PUT"].as_u64() >= v["applied"]["write"].as_u64(), "a PUT per file at least: {v}");
    assert!(v.get("budgets").is_none());
    let st = run_json(&["status", "--target", &url], 0);
    assert_eq!((&st["target"], &st["running"]), (&json!("managed"), &Value::Null));
    // Clean right after the sync, symlinks included (file:// ETags are not MD5s: verify
    // reads what it cannot prove otherwise).
    let vr = run_json(&["verify", "--repo", f.repo(), "--target", &url], 0);
    assert_eq!((&vr["target"], &vr["clean"]), (&json!(url.as_str()), &json!(true)), "{vr}");
}

#[test]
fn plan_and_sync_of_a_takeover() {
    let f = fixture();
    let t = f.target("foreign");
    std::fs::create_dir(&t).expect("mkdir");
    std::fs::write(Path::new(&t).join("foreign.txt"), "not ours").expect("write");
    let status = run_json(&["status", "--target", &t], 0);
    assert_eq!((&status["target"], &status["state"]), (&json!("unmanaged"), &Value::Null));

    let plan_args = ["plan", "--repo", f.repo(), "--ref", &f.commits[0], "--target", &t];
    run_failing(&plan_args, 4);
    run_failing(&["sync", "--repo", f.repo(), "--ref", &f.commits[0], "--target", &t], 4);

    let mut args = plan_args.to_vec();
    args.push("--force");
    let p = run_json(&args, 0);
    assert_eq!((&p["takeover"], &p["resume"], &p["plan"]["from"]), (&json!(true), &Value::Null, &Value::Null));
    assert_eq!(p["plan"]["counts"], tally(&p["plan"]));
    assert_eq!(p["plan"]["counts"]["unlink"], 1, "the foreign file goes: {p}");

    let v = f.sync(0, &t, &["--force"]);
    assert_eq!((&v["takeover"], &v["from"]), (&json!(true), &Value::Null));
    assert_eq!(v["applied"], p["plan"]["counts"], "sync does what plan said");
    assert!(!Path::new(&t).join("foreign.txt").exists());
}

#[test]
fn plan_before_and_after_syncs() {
    let f = fixture();
    let t = f.target("t");
    let p = run_json(&["plan", "--repo", f.repo(), "--ref", &f.commits[0], "--target", &t], 0);
    assert!(!Path::new(&t).exists(), "plan creates nothing");
    assert_eq!(p["target"], format!("local:{t}"));
    assert_eq!((&p["commit"], &p["tree"]), (&json!(f.commits[0]), &json!(f.trees[0])));
    assert_eq!((&p["takeover"], &p["resume"]), (&json!(false), &Value::Null));
    assert_eq!((&p["plan"]["from"], &p["plan"]["to"]), (&Value::Null, &json!(f.trees[0])));
    assert_eq!(p["plan"]["counts"], checkout_counts(&f.models[0]));
    assert_eq!(p["plan"]["counts"], tally(&p["plan"]), "counts are the sums over the phases");

    f.sync(0, &t, &[]);
    let p = run_json(&["plan", "--repo", f.repo(), "--ref", &f.commits[1], "--target", &t], 0);
    assert_eq!((&p["plan"]["from"], &p["plan"]["to"]), (&json!(f.trees[0]), &json!(f.trees[1])));
    assert_eq!(p["plan"]["counts"], update_counts());
    assert_eq!(p["plan"]["counts"], tally(&p["plan"]));
    let names: Vec<&str> =
        p["plan"]["phases"].as_array().expect("phases").iter().map(|x| x["name"].as_str().expect("name")).collect();
    assert_eq!(
        names,
        [
            "remove files",
            "remove directories (depth 1)",
            "create directories (depth 1)",
            "write files",
            "create symlinks"
        ],
        "{p}"
    );
    let ops = plan_ops(&p);
    assert!(
        ops.contains(&&json!({"op": "chmod", "path": "bin/tool", "executable": true, "blob": git(&f.bare.path, &["rev-parse", &format!("{}:bin/tool", f.commits[1])]), "size": 5})),
        "{ops:?}"
    );
    assert!(ops.contains(&&json!({"op": "symlink", "path": "link", "target": "README"})), "{ops:?}");

    f.sync(1, &t, &[]);
    let p = run_json(&["plan", "--repo", f.repo(), "--ref", &f.commits[1], "--target", &t], 0);
    assert_eq!((&p["plan"]["phases"], &p["plan"]["counts"]), (&json!([]), &zero_counts()), "nothing to do: {p}");
}

#[test]
fn status_of_missing_synced_running_and_interrupted_targets() {
    let f = fixture();
    let t = f.target("t");
    let v = run_json(&["status", "--target", &t], 0);
    assert_eq!((&v["target"], &v["state"], &v["running"]), (&json!("empty"), &Value::Null, &Value::Null));
    assert_eq!(v["backend"], "local");

    f.sync(0, &t, &[]);
    let v = run_json(&["status", "--target", &t], 0);
    assert_eq!(v["target"], "managed");
    let state = &v["state"];
    assert_eq!(state, &read_state(&t), "status shows the state file as it is");
    assert_eq!((&state["synced"]["commit"], &state["synced"]["tree"]), (&json!(f.commits[0]), &json!(f.trees[0])));
    assert_eq!((&state["in_progress"], &state["version"]), (&Value::Null, &json!(1)));

    // A sync running now: another process holds the lock.
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let backend = treesync_backend_local::LocalBackend::new(Path::new(&t), Default::default());
    let guard = rt
        .block_on(backend.lock(&treesync_core::state::Holder { pid: 4242, host: "elsewhere".into(), started: 1 }))
        .expect("lock");
    let v = run_json(&["status", "--target", &t], 0);
    assert_eq!(v["running"], "pid 4242 on elsewhere, started at unix time 1");
    let err = run_failing(&["sync", "--repo", f.repo(), "--ref", &f.commits[1], "--target", &t], 3);
    assert!(err.contains("pid 4242"), "{err}");
    drop(guard);
    assert_eq!(run_json(&["status", "--target", &t], 0)["running"], Value::Null);

    // An interrupted update from commit 0 to 1 (killed before its first op), as its journal says.
    let mut state = read_state(&t);
    let record = json!({
        "from_tree": f.trees[0], "to_commit": f.commits[1], "to_tree": f.trees[1], "takeover": false, "repair": false,
        "started_unix": 1_796_000_000u64, "holder": "pid 4242 on elsewhere, started at unix time 1796000000",
        "host": "elsewhere", "pid": 4242
    });
    state["in_progress"] = record.clone();
    write_state(&t, &state);
    let v = run_json(&["status", "--target", &t], 0);
    assert_eq!(v["state"]["in_progress"], record);
    assert_eq!(v["state"]["synced"]["commit"], f.commits[0].as_str(), "synced stays at the last completed sync");

    let p = run_json(&["plan", "--repo", f.repo(), "--ref", &f.commits[1], "--target", &t], 0);
    let resume = &p["resume"];
    assert_eq!((&resume["from"], &resume["to"]), (&json!(f.trees[0]), &json!(f.trees[1])));
    assert_eq!(resume["counts"], update_counts());
    assert_eq!((&p["plan"]["from"], &p["plan"]["counts"]), (&json!(f.trees[1]), &zero_counts()));

    let v = f.sync(1, &t, &[]);
    assert_eq!(v["resumed"], record, "sync reports the journal record it finished");
    assert_eq!(v["from"]["commit"], f.commits[0].as_str());
    assert_eq!((&v["planned"], &v["applied"]), (&update_counts(), &update_counts()));
    let v = run_json(&["status", "--target", &t], 0);
    assert_eq!((&v["state"]["in_progress"], &v["state"]["synced"]["commit"]), (&Value::Null, &json!(f.commits[1])));

    // An interrupted first sync whose holder recorded its failure (nulls, as object stores write).
    let record = json!({
        "from_tree": null, "to_commit": f.commits[0], "to_tree": f.trees[0], "takeover": false, "repair": false,
        "started_unix": 1_796_000_000u64, "holder": null, "host": null, "pid": null
    });
    let t2 = f.target("t2");
    f.sync(0, &t2, &[]);
    write_state(&t2, &json!({"version": 1, "synced": null, "in_progress": record, "backend": "local"}));
    let v = run_json(&["status", "--target", &t2], 0);
    assert_eq!((&v["state"]["synced"], &v["state"]["in_progress"]), (&Value::Null, &record));
    let v = f.sync(0, &t2, &[]);
    assert_eq!((&v["resumed"], &v["from"]), (&record, &Value::Null));
    assert_eq!(v["applied"], checkout_counts(&f.models[0]), "finishing a first sync redoes every (idempotent) op");
}

#[test]
fn verify_clean_drift_and_repair() {
    let f = fixture();
    let t = f.target("t");
    run_failing(&["verify", "--repo", f.repo(), "--target", &t], 2);
    f.sync(0, &t, &[]);
    let verify = |extra: &[&str], code: i32| {
        let mut args = vec!["verify", "--repo", f.repo(), "--target", &t];
        args.extend_from_slice(extra);
        run_json(&args, code)
    };
    let entries = {
        let c = checkout_counts(&f.models[0]);
        c["write"].as_u64().expect("n") + c["symlink"].as_u64().expect("n") + c["mkdir"].as_u64().expect("n")
    };

    // The files the sync recorded in its stat delta (all but those of its last clock tick).
    let recorded = treesync_core::index_delta::Delta::of_dir(Path::new(&t)).recorded() as u64;
    let v = verify(&[], 0);
    assert_eq!(v["target"], format!("local:{t}"));
    assert_eq!((&v["clean"], &v["repaired"], &v["after_repair"]), (&json!(true), &Value::Null, &Value::Null));
    let r = &v["report"];
    assert_eq!((&r["commit"], &r["level"], &r["drift"]), (&json!(f.commits[0]), &json!("stat"), &json!([])));
    assert_eq!((r["expected"].as_u64(), r["scanned"].as_u64()), (Some(entries), Some(entries)));
    assert_eq!(r["hashed"], 7 - recorded, "the first stat-level verify hashes what the sync did not record: {r}");
    let v = verify(&["--repair"], 0);
    assert_eq!((&v["repaired"], &v["report"]["proven_by_stat"]), (&Value::Null, &json!(7)), "nothing to repair: {v}");

    // Drift of every kind.
    let root = Path::new(&t);
    std::fs::remove_file(root.join("README")).expect("missing");
    std::fs::write(root.join("extra.txt"), "extra").expect("extra file");
    std::fs::create_dir(root.join("extra-dir")).expect("extra dir");
    std::fs::remove_file(root.join("a.txt")).expect("rm");
    std::fs::create_dir(root.join("a.txt")).expect("file -> directory");
    std::fs::set_permissions(root.join("bin/tool"), std::fs::Permissions::from_mode(0o755)).expect("chmod +x");
    std::fs::write(root.join("old/x.txt"), "xx\n").expect("content");
    std::fs::remove_file(root.join("link")).expect("rm");
    std::os::unix::fs::symlink("bin", root.join("link")).expect("relink");
    let expected_drift = json!([
        {"kind": "missing", "path": "README"},
        {"kind": "type_changed", "path": "a.txt", "expected": "file", "found": "directory"},
        {"kind": "mode_changed", "path": "bin/tool", "executable": false},
        {"kind": "extra", "path": "extra-dir", "dir": true},
        {"kind": "extra", "path": "extra.txt", "dir": false},
        {"kind": "link_changed", "path": "link"},
        {"kind": "content_changed", "path": "old/x.txt"},
    ]);
    for level in ["quick", "stat", "full"] {
        let v = verify(&["--level", level], 1);
        assert_eq!((&v["clean"], &v["report"]["level"]), (&json!(false), &json!(level)));
        assert_eq!(v["report"]["drift"], expected_drift, "--level {level}");
    }

    // --dry-run lists what the repair would do and changes nothing.
    let v = verify(&["--repair", "--dry-run"], 1);
    assert_eq!(
        (&v["repaired"], &v["would_repair"]["write"], &v["would_repair"]["rmdir"]),
        (&Value::Null, &json!(3), &json!(1)),
        "{v}"
    );
    assert_eq!(verify(&[], 1)["report"]["drift"], expected_drift, "the dry run changed nothing");

    let v = verify(&["--repair"], 1);
    assert_eq!(v["report"]["drift"], expected_drift);
    assert!(v.get("would_repair").is_none());
    let repaired = &v["repaired"];
    assert_eq!(
        (&repaired["write"], &repaired["chmod"], &repaired["symlink"]),
        (&json!(3), &json!(1), &json!(1)),
        "{v}"
    );
    assert_eq!(repaired["rmdir"], 1, "the directory at a.txt goes before the file is written: {v}");
    let after = &v["after_repair"];
    assert_eq!(after["level"], "stat");
    assert_eq!(
        after["drift"],
        json!([expected_drift[3], expected_drift[4]]),
        "only extras remain without --delete-extra"
    );
    assert_eq!(v["clean"], false);

    let v = verify(&["--repair", "--delete-extra", "--level", "full"], 0);
    assert_eq!((&v["repaired"]["unlink"], &v["repaired"]["rmdir"]), (&json!(1), &json!(1)), "{v}");
    assert_eq!(
        (&v["after_repair"]["drift"], &v["after_repair"]["hashed"], &v["clean"]),
        (&json!([]), &json!(7), &json!(true))
    );
    assert_eq!(verify(&[], 0)["report"]["drift"], json!([]));
}

#[test]
fn stdout_holds_only_the_json_even_with_logs() {
    let f = fixture();
    let t = f.target("t");
    let o = treesync(&["-vv", "sync", "--repo", f.repo(), "--ref", &f.commits[0], "--target", &t, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!o.stderr.is_empty(), "-vv logs to stderr");
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is exactly one JSON document");
    assert_valid("sync", &v, "sync -vv");
    let err = run_failing(&["sync", "--repo", f.repo(), "--ref", "no-such-ref", "--target", &t], 2);
    assert!(err.contains("no-such-ref"), "{err}");
    run_failing(&["plan", "--repo", f.repo(), "--ref", "no-such-ref", "--target", &t], 2);
}

/// Removing any required field, adding an unknown one, or breaking a value must make each
/// schema reject a real document: the schemas (and the validator) are not vacuous.
#[test]
fn schemas_reject_mutated_documents() {
    let f = fixture();
    let t = f.target("t");
    f.sync(0, &t, &[]);
    let mut state = read_state(&t);
    state["in_progress"] = json!({
        "from_tree": f.trees[0], "to_commit": f.commits[1], "to_tree": f.trees[1], "takeover": false, "repair": false,
        "started_unix": 1u64, "holder": "h", "host": "elsewhere", "pid": 1
    });
    write_state(&t, &state);
    let status = run_json(&["status", "--target", &t], 0);
    let plan = run_json(&["plan", "--repo", f.repo(), "--ref", &f.commits[1], "--target", &t], 0);
    let sync = f.sync(1, &t, &["--backend", "nfs"]);
    std::fs::remove_file(Path::new(&t).join("README")).expect("drift");
    std::fs::write(Path::new(&t).join("extra"), "x").expect("drift");
    let verify = run_json(&["verify", "--repo", f.repo(), "--target", &t, "--repair"], 1);

    let mutations: Vec<(&str, &Value, &str, Value)> = vec![
        ("sync", &sync, "/applied/write", json!(-1)),
        ("sync", &sync, "/commit", json!("HEAD")),
        ("sync", &sync, "/backend", json!("ftp")),
        ("sync", &sync, "/elapsed", json!("0.1")),
        ("sync", &sync, "/state_writes", json!(1.5)),
        ("sync", &sync, "/cost/directory lookups", json!(1.5)),
        ("sync", &sync, "/budgets/writes", json!("0")),
        ("sync", &sync, "/budgets/write_limits/0", json!(0)),
        ("sync", &sync, "/resumed/pid", json!("1")),
        ("sync", &sync, "/from/tree", json!(f.trees[0].to_uppercase())),
        ("plan", &plan, "/resume/phases/0/ops/0/op", json!("copy")),
        ("plan", &plan, "/resume/phases/1/ops/0/op", json!("write")),
        ("plan", &plan, "/resume/counts/bytes", json!("20")),
        ("plan", &plan, "/resume/to", json!("abc")),
        ("plan", &plan, "/resume/phases/0/name", json!(null)),
        ("plan", &plan, "/plan/from", json!(5)),
        ("plan", &plan, "/plan/phases", json!({})),
        ("status", &status, "/target", json!("busy")),
        ("status", &status, "/state/in_progress/takeover", json!("no")),
        ("status", &status, "/state/synced/at_unix", json!(-5)),
        ("status", &status, "/running", json!(42)),
        ("verify", &verify, "/report/drift/0/kind", json!("renamed")),
        ("verify", &verify, "/report/level", json!("deep")),
        ("verify", &verify, "/clean", json!(null)),
        ("verify", &verify, "/repaired/write", json!(true)),
        ("verify", &verify, "/after_repair/drift/0/dir", json!("yes")),
    ];
    for (command, doc, pointer, value) in mutations {
        let mut bad = doc.clone();
        *bad.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer} is in the {command} output: {doc}")) =
            value.clone();
        match schema::validate(&schema_of(command), &bad) {
            Ok(()) => panic!("{command}: {pointer} = {value} was accepted"),
            Err(e) => {
                let parent = &pointer[..pointer.rfind('/').expect("a pointer")];
                let parent = if parent.is_empty() { "(root)" } else { parent };
                assert!(
                    e.iter()
                        .map(|m| m.trim_start())
                        .any(|m| m.starts_with(&format!("{pointer}: ")) || m.starts_with(&format!("{parent}: "))),
                    "{command} {pointer}: the violation should be reported there: {e:?}"
                );
            }
        }
    }
    // A write op without its blob, an op with a field of another kind.
    let mut bad = plan.clone();
    let op = bad.pointer_mut("/resume/phases/0/ops/0").expect("an op");
    assert_eq!(op["op"], "unlink", "the first op of the resume plan removes a file: {op}");
    op["blob"] = json!(f.trees[0]);
    let e = schema::validate(&schema_of("plan"), &bad).expect_err("unlink with a blob");
    assert!(e.iter().any(|m| m.contains("/resume/phases/0/ops/0/blob: is not an allowed property")), "{e:?}");

    for (command, doc) in [("sync", &sync), ("plan", &plan), ("status", &status), ("verify", &verify)] {
        let schema = schema_of(command);
        let required = schema["required"].as_array().expect("required");
        assert_eq!(required.len(), doc.as_object().expect("object").len() - usize::from(doc.get("budgets").is_some()));
        for name in required.iter().map(|n| n.as_str().expect("name")) {
            let mut bad = doc.clone();
            bad.as_object_mut().expect("object").remove(name);
            let e = schema::validate(&schema, &bad).expect_err("a required field removed");
            assert_eq!(e, vec![format!("(root): required property {name:?} is missing")], "{command}");
        }
        let mut bad = doc.clone();
        bad["surprise"] = json!(1);
        let e = schema::validate(&schema, &bad).expect_err("an unknown field");
        assert_eq!(e, vec!["/surprise: is not an allowed property (additionalProperties: false)"], "{command}");
    }
}

/// The fields of an object schema: its properties, and those of its `oneOf` alternatives.
fn fields(root: &Value, node: &Value) -> BTreeSet<String> {
    let node = match node["$ref"].as_str() {
        Some(r) => &root["$defs"][r.trim_start_matches("#/$defs/")],
        None => node,
    };
    let mut out: BTreeSet<String> =
        node["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default();
    for b in node["oneOf"].as_array().into_iter().flatten() {
        out.extend(fields(root, b));
    }
    out
}

/// Shared definitions are the same in every schema, every field says what it is, and
/// docs/json.md has a table for every object with exactly its fields.
#[test]
fn schemas_agree_with_each_other_and_with_the_docs() {
    let mut defs: BTreeMap<String, (String, Value)> = BTreeMap::new();
    let mut objects: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for command in ["sync", "plan", "status", "verify"] {
        let schema = schema_of(command);
        let file = format!("{command}.schema.json");
        objects.insert(format!("{file}#"), fields(&schema, &schema));
        for (name, p) in schema["properties"].as_object().expect("properties") {
            assert!(p["description"].is_string(), "{file}: {name} has no description");
            if p["type"] == "object" && p.get("properties").is_some() {
                objects.insert(format!("{file}#/properties/{name}"), fields(&schema, p));
            }
        }
        for (name, d) in schema["$defs"].as_object().expect("$defs") {
            if let Some((other, first)) = defs.get(name) {
                assert_eq!(d, first, "$defs/{name} differs between {other} and {file}");
            } else {
                defs.insert(name.clone(), (file.clone(), d.clone()));
            }
            assert!(d["description"].is_string(), "{file}: $defs/{name} has no description");
            let f = fields(&schema, d);
            if !f.is_empty() {
                objects.entry(format!("$defs/{name}")).or_insert(f);
            }
        }
    }
    // <!-- schema: sync.schema.json# --> or <!-- schema: $defs/opCounts -->, then a table whose
    // first column is `field`.
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut lines = DOC.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(key) = line.trim().strip_prefix("<!-- schema: ").and_then(|l| l.strip_suffix(" -->")) else {
            continue;
        };
        let mut names = BTreeSet::new();
        while let Some(row) = lines.next_if(|l| l.trim().is_empty() || l.starts_with('|')) {
            if let Some(name) = row.strip_prefix("| `").and_then(|r| r.split('`').next()) {
                names.insert(name.to_string());
            }
        }
        assert!(documented.insert(key.to_string(), names).is_none(), "docs/json.md documents {key} twice");
    }
    assert_eq!(
        documented.keys().collect::<Vec<_>>(),
        objects.keys().collect::<Vec<_>>(),
        "docs/json.md needs a `<!-- schema: … -->` table for every object of the schemas"
    );
    for (key, names) in &objects {
        assert_eq!(&documented[key], names, "docs/json.md: the table for {key} lists other fields than the schema");
    }

    // <!-- example: sync --> then a ```json block: a complete document that must validate.
    let mut examples = BTreeSet::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        let Some(command) = line.trim().strip_prefix("<!-- example: ").and_then(|l| l.strip_suffix(" -->")) else {
            continue;
        };
        assert_eq!(lines.next(), Some("```json"), "docs/json.md: a ```json block follows <!-- example: {command} -->");
        let text: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let v: Value = serde_json::from_str(&text.join("\n"))
            .unwrap_or_else(|e| panic!("docs/json.md: the {command} example is not JSON: {e}"));
        assert_valid(command, &v, &format!("docs/json.md, the {command} example"));
        examples.insert(command);
    }
    assert_eq!(examples, BTreeSet::from(["plan", "status", "sync", "verify"]), "an example per command");
}

/// `adopt --json` (and its dry run) and `watch --json` (one object per line and event).
#[test]
fn adopt_and_watch_print_documented_json() {
    let f = fixture();
    let clone = f.target("clone");
    git(f.dir.path(), &["clone", "-q", f.repo(), &clone]);
    let v = run_json(&["adopt", "--target", &clone, "--dry-run"], 0);
    assert_eq!((&v["dry_run"], &v["commit"]), (&json!(true), &json!(f.commits[1])), "{v}");
    assert!(!Path::new(&clone).join(".treesync").exists(), "a dry run writes nothing");
    let v = run_json(&["adopt", "--target", &clone], 0);
    assert_eq!((&v["dry_run"], &v["tree"]), (&json!(false), &json!(f.trees[1])), "{v}");
    if let Err(e) = schema::validate(&schema_of("adopt"), &v) {
        panic!("adopt --json violates adopt.schema.json: {e:?}\n{v:#}");
    }

    let t = f.target("watched");
    let out = std::process::Command::new("timeout")
        .args(["-s", "INT", "2"])
        .arg(env!("CARGO_BIN_EXE_treesync"))
        .args(["watch", "--json", "--interval", "200ms", "--verify-every", "300ms"])
        .args(["--repo", f.repo(), "--ref", &f.commits[1], "--target", &t])
        .output()
        .expect("watch runs");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let events: Vec<&str> = lines.iter().map(|v| v["event"].as_str().unwrap_or("?")).collect();
    assert_eq!(events.first(), Some(&"watching"), "{events:?}");
    assert!(events.contains(&"synced") && events.contains(&"verified"), "{events:?}");
    for v in &lines {
        if let Err(e) = schema::validate(&schema_of("watch-event"), v) {
            panic!("watch --json line violates watch-event.schema.json: {e:?}\n{v:#}");
        }
    }
    let synced = lines.iter().find(|v| v["event"] == "synced").expect("synced");
    assert_eq!(synced["outcome"]["commit"], json!(f.commits[1]));
    let mut bad = synced.clone();
    bad["event"] = json!("sunk");
    assert!(schema::validate(&schema_of("watch-event"), &bad).is_err(), "an unknown event is rejected");
}
