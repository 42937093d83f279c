//! The Kubernetes examples of docs/kubernetes/, held to what they claim: each file parses as
//! Kubernetes reads YAML (PyYAML, YAML 1.1 like Kubernetes' own parser: an unquoted `true` or
//! `5` is not a string, and an env value must be one); the sidecar pod is well formed and its
//! git-sync container's flags and environment names are ones `treesync git-sync --help` lists,
//! then its args and env run as written (only the repository and the volume swapped for local
//! ones) in a private network namespace, so `--http-bind=:8081` binds as in the pod without
//! opening a port here; the Airflow chart's values name keys the chart has, and the environment
//! the chart renders from them — as each generation of the chart renders it — makes
//! `treesync git-sync --one-time` (the chart's init container) leave `repo/<subPath>` where
//! Airflow reads the DAGs.
//!
//! Needs Debian's python3 with python3-yaml (the test command installs it) and, for the
//! namespace, root; a missing piece fails naming what provides it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use treesync_testkit::cli::s;
use treesync_testkit::git;
use treesync_testkit::gitdaemon::Served;
use treesync_testkit::missing::{Missing, require_program};

use crate::gitsync::{assert_like_git, link_of};

/// The examples' directory.
fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/kubernetes")
}

/// The image's user (and the chart's default `dags.gitSync.uid`), as in git-sync's image.
const IMAGE_UID: i64 = 65533;

/// Every document of a YAML file, as PyYAML reads it (`safe_load_all`), through JSON.
fn yaml(path: &Path) -> Vec<Value> {
    let python = Path::new("/usr/bin/python3");
    if !python.is_file() || !Command::new(python).args(["-c", "import yaml"]).output().is_ok_and(|o| o.status.success())
    {
        Missing::new("Debian's python3 with its yaml module", "apt-get install python3-yaml").fail();
    }
    let script = "import json, sys, yaml\n\
                  print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1], encoding='utf-8')))))";
    let o = Command::new(python).args(["-c", script]).arg(path).output().expect("python3 runs");
    assert!(o.status.success(), "{} is not valid YAML: {}", path.display(), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON from python3")
}

/// The flags and environment names `treesync git-sync --help` lists.
fn documented() -> (BTreeSet<String>, BTreeSet<String>) {
    let o = crate::gitsync::run(&["--help"]);
    assert!(o.status.success(), "git-sync --help: {}", String::from_utf8_lossy(&o.stderr));
    let help = String::from_utf8(o.stdout).expect("UTF-8");
    let mut flags = BTreeSet::new();
    let mut env = BTreeSet::from(["GITSYNC_PASSWORD".to_string()]);
    for line in help.lines() {
        let t = line.trim_start();
        if t.starts_with('-') && line.starts_with("    -") {
            flags.extend(t.split([' ', ',']).filter(|w| w.starts_with("--")).map(str::to_string));
        }
        if let Some(names) = t.strip_prefix("env: ") {
            env.extend(names.split(", ").map(|n| n.trim_start_matches('$').to_string()));
        }
    }
    assert!(flags.contains("--repo") && env.contains("GITSYNC_REPO"), "nothing read from --help:\n{help}");
    (flags, env)
}

/// The `name=value` environment of a container (a `valueFrom` entry has no value here).
fn env_of(container: &Value) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or_else(|| panic!("env entry without a name: {e}")).to_string();
        let value = match &e["value"] {
            Value::Null => {
                assert!(e["valueFrom"].is_object(), "env {name} has neither value nor valueFrom");
                None
            }
            Value::String(v) => Some(v.clone()),
            other => panic!("env {name}'s value {other} is not a string: Kubernetes refuses it (quote it)"),
        };
        out.push((name, value));
    }
    out
}

/// A repository whose `main` holds `files` and whose HEAD is another branch without them, so
/// a run that ignored the ref it was given would be seen.
fn served(files: &[(&str, &str)]) -> Served {
    let s = Served::new(files);
    let work = s.work();
    git(&work, &["checkout", "-q", "--orphan", "decoy"]);
    git(&work, &["rm", "-q", "-r", "-f", "."]);
    std::fs::write(work.join("DECOY"), "not main\n").expect("write");
    git(&work, &["add", "DECOY"]);
    git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "decoy"]);
    s.push(&["decoy"]);
    git(&s.bare, &["symbolic-ref", "HEAD", "refs/heads/decoy"]);
    s
}

/// `treesync git-sync ARGS` with exactly the environment `env` of git-sync's names (the
/// caller's own GITSYNC_*/GIT_SYNC_* removed), optionally in a new network namespace.
fn git_sync(args: &[String], env: &[(String, String)], netns: bool) -> Output {
    let mut c = if netns {
        let mut c = Command::new(require_program("unshare", "util-linux"));
        c.args(["--net", "--", env!("CARGO_BIN_EXE_treesync")]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_treesync"))
    };
    c.arg("git-sync").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("GITSYNC_") || k.starts_with("GIT_SYNC_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    c.output().expect("treesync git-sync runs")
}

#[test]
fn every_example_parses_as_kubernetes_reads_yaml() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples())
        .expect("docs/kubernetes")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for file in &files {
        let docs = yaml(file);
        assert!(!docs.is_empty() && docs.iter().all(Value::is_object), "{}: {docs:?}", file.display());
    }
}

#[test]
fn the_sidecar_pod_is_well_formed_and_its_git_sync_container_runs_as_written() {
    let docs = yaml(&examples().join("sidecar.yaml"));
    let pod = &docs[0];
    assert_eq!((pod["apiVersion"].as_str(), pod["kind"].as_str()), (Some("v1"), Some("Pod")));
    assert!(pod["metadata"]["name"].is_string());
    let spec = &pod["spec"];
    let volumes: BTreeMap<&str, &Value> = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| (v["name"].as_str().expect("a volume's name"), v))
        .collect();
    let containers = spec["containers"].as_array().expect("containers");
    let mut names = BTreeSet::new();
    for c in containers {
        let name = c["name"].as_str().expect("a container's name");
        assert!(names.insert(name), "two containers named {name}");
        assert!(c["image"].is_string(), "{name} has no image");
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let v = m["name"].as_str().expect("a mount's volume");
            assert!(volumes.contains_key(v), "{name} mounts {v}, which the pod does not have");
            assert!(m["mountPath"].as_str().is_some_and(|p| p.starts_with('/')), "{name}: {m}");
        }
        env_of(c);
    }
    let image = format!("/treesync:{}", env!("CARGO_PKG_VERSION"));
    let sync: Vec<&Value> =
        containers.iter().filter(|c| c["image"].as_str().is_some_and(|i| i.ends_with(&image))).collect();
    assert_eq!(sync.len(), 1, "one container runs the image …{image} (the workspace's version)");
    let sync = sync[0];
    // The image's user, writing the volume mounted where the image's GITSYNC_ROOT points.
    assert_eq!(sync["securityContext"]["runAsUser"].as_i64(), Some(IMAGE_UID));
    let root_mount = sync["volumeMounts"].as_array().expect("mounts").iter().find(|m| m["mountPath"] == "/git");
    let shared = root_mount.and_then(|m| m["name"].as_str()).expect("a volume at /git");
    assert!(volumes[shared]["emptyDir"].is_object(), "{shared} is an emptyDir");
    assert!(
        containers
            .iter()
            .filter(|c| c["volumeMounts"].as_array().into_iter().flatten().any(|m| m["name"] == shared))
            .count()
            >= 2,
        "the volume is shared with another container"
    );

    let (flags, env_names) = documented();
    let args: Vec<String> =
        sync["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("a string").to_string()).collect();
    for a in &args {
        let flag = a.split('=').next().expect("a word");
        assert!(flags.contains(flag), "{flag} (in the sidecar's args) is not a flag of treesync git-sync --help");
    }
    let env: Vec<(String, String)> = env_of(sync).into_iter().map(|(k, v)| (k, v.expect("a value"))).collect();
    for (name, _) in &env {
        assert!(env_names.contains(name), "{name} (in the sidecar's env) is not listed by treesync git-sync --help");
    }
    // The probe asks the port --http-bind listens on.
    let bind = args.iter().find_map(|a| a.strip_prefix("--http-bind=")).expect("--http-bind");
    let port = bind.rsplit(':').next().and_then(|p| p.parse::<i64>().ok()).expect("a port");
    assert_eq!(sync["readinessProbe"]["httpGet"]["port"].as_i64(), Some(port));

    // Run it: the args and env as written, the repository a local one, the root a directory
    // here (the image sets GITSYNC_ROOT=/git), once, in a network namespace of its own.
    if !Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n")) {
        Missing::new("root", "run this test as root: it runs git-sync in a network namespace (unshare --net)").fail();
    }
    let repo = served(&[("index.html", "<h1>site</h1>\n"), ("css/site.css", "body {}\n")]);
    let main = git(&repo.bare, &["rev-parse", "main"]);
    let root = repo.dir.path().join("volume");
    let mut run_args: Vec<String> = args.iter().filter(|a| !a.starts_with("--repo=")).cloned().collect();
    run_args.push(format!("--repo=file://{}", repo.bare.display()));
    run_args.push("--one-time".into());
    let mut run_env = env.clone();
    run_env.push(("GITSYNC_ROOT".into(), s(&root).into()));
    let o = git_sync(&run_args, &run_env, true);
    assert!(o.status.success(), "git-sync {run_args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let link_name = args.iter().find_map(|a| a.strip_prefix("--link=")).expect("--link");
    let link = root.join(link_name);
    let (hash, target) = link_of(&link);
    assert_eq!((hash.as_str(), target), (main.as_str(), Path::new(".worktrees").join(&main)));
    assert_like_git(&repo.bare, &main, &link);
}

/// The `dags.gitSync` keys of the Airflow chart's values.yaml (apache/airflow chart/values.yaml,
/// chart 1.18): a key not among them is a typo the chart would ignore silently.
const CHART_GIT_SYNC_KEYS: &[&str] = &[
    "enabled",
    "repo",
    "branch",
    "rev",
    "ref",
    "depth",
    "maxFailures",
    "subPath",
    "credentialsSecret",
    "sshKeySecret",
    "sshKey",
    "knownHosts",
    "period",
    "wait",
    "envFrom",
    "containerName",
    "uid",
    "securityContext",
    "securityContexts",
    "containerLifecycleHooks",
    "readinessProbe",
    "livenessProbe",
    "extraVolumeMounts",
    "env",
    "emptyDirConfig",
    "resources",
];

/// How a generation of the chart renders the git-sync init container's environment from
/// `dags.gitSync` (its `git_sync_container` template with `is_init`; the order and names as
/// the chart's helm tests assert them), the user's `env` last.
#[derive(Debug, Clone, Copy)]
enum Rendering {
    /// Charts made for git-sync v3: GIT_SYNC_* only.
    V3,
    /// The v3-to-v4 transition (chart 1.11 on): both names of each setting.
    Both,
    /// Current charts: GITSYNC_* only.
    V4,
}

fn render(values: &Value, how: Rendering) -> Vec<(String, String)> {
    let g = &values["dags"]["gitSync"];
    let text = |key: &str| match &g[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut env: Vec<(&str, String)> = Vec::new();
    let (v3, v4) = (!matches!(how, Rendering::V4), !matches!(how, Rendering::V3));
    if v3 {
        env.push(("GIT_SYNC_REV", text("rev")));
    }
    if v4 {
        env.push(("GITSYNC_REF", text("ref")));
    }
    if v3 {
        env.extend([("GIT_SYNC_BRANCH", text("branch")), ("GIT_SYNC_REPO", text("repo"))]);
    }
    if v4 {
        env.push(("GITSYNC_REPO", text("repo")));
    }
    for (old, new, value) in [
        ("GIT_SYNC_DEPTH", "GITSYNC_DEPTH", text("depth")),
        ("GIT_SYNC_ROOT", "GITSYNC_ROOT", "/git".into()),
        ("GIT_SYNC_DEST", "GITSYNC_LINK", "repo".into()),
        ("GIT_SYNC_ADD_USER", "GITSYNC_ADD_USER", "true".into()),
    ] {
        if v3 {
            env.push((old, value.clone()));
        }
        if v4 {
            env.push((new, value));
        }
    }
    if v3 && !text("wait").is_empty() {
        env.push(("GIT_SYNC_WAIT", text("wait")));
    }
    if v4 {
        env.push(("GITSYNC_PERIOD", text("period")));
    }
    if v3 {
        env.push(("GIT_SYNC_MAX_SYNC_FAILURES", text("maxFailures")));
    }
    if v4 {
        env.push(("GITSYNC_MAX_FAILURES", text("maxFailures")));
    }
    if v3 {
        env.push(("GIT_SYNC_ONE_TIME", "true".into()));
    }
    if v4 {
        env.push(("GITSYNC_ONE_TIME", "true".into()));
    }
    let mut out: Vec<(String, String)> = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    for e in g["env"].as_array().into_iter().flatten() {
        let value = e["value"].as_str().unwrap_or_else(|| panic!("dags.gitSync.env {e}: the value must be a string"));
        out.push((e["name"].as_str().expect("a name").to_string(), value.to_string()));
    }
    out
}

/// The v3 names the chart renders that `--help` does not list: git-sync's deprecated flags,
/// read as git-sync reads them (hidden from its help too).
const DEPRECATED_V3_NAMES: &[&str] =
    &["GIT_SYNC_REV", "GIT_SYNC_BRANCH", "GIT_SYNC_DEST", "GIT_SYNC_WAIT", "GIT_SYNC_MAX_SYNC_FAILURES"];

#[test]
fn the_airflow_values_render_to_an_environment_treesync_git_sync_syncs_the_dags_with() {
    let values = &yaml(&examples().join("airflow-values.yaml"))[0];
    let image = &values["images"]["gitSync"];
    assert!(image["repository"].as_str().is_some_and(|r| r.ends_with("/treesync")), "{image}");
    assert_eq!(image["tag"].as_str(), Some(env!("CARGO_PKG_VERSION")), "the tag is a string: the workspace's version");
    let g = &values["dags"]["gitSync"];
    for key in g.as_object().expect("dags.gitSync").keys() {
        assert!(CHART_GIT_SYNC_KEYS.contains(&key.as_str()), "dags.gitSync.{key} is not a key of the chart's values");
    }
    assert_eq!(g["enabled"], Value::Bool(true));
    assert_eq!(g["uid"].as_i64(), Some(IMAGE_UID), "the chart runs git-sync as dags.gitSync.uid");
    assert_eq!(g["branch"], g["ref"], "v3 renderings use branch, v4 ones ref: they must agree");
    let sub_path = g["subPath"].as_str().expect("subPath");

    let (_, env_names) = documented();
    let repo = served(&[(&format!("{sub_path}/example_dag.py"), "from airflow import DAG\n"), ("README.md", "DAGs\n")]);
    let main = git(&repo.bare, &["rev-parse", "main"]);
    for how in [Rendering::V3, Rendering::Both, Rendering::V4] {
        let rendered = render(values, how);
        for (name, _) in &rendered {
            assert!(
                env_names.contains(name) || DEPRECATED_V3_NAMES.contains(&name.as_str()),
                "{name} (rendered {how:?}) is neither listed by treesync git-sync --help nor one of git-sync's deprecated names"
            );
        }
        // The pod's volume (/git) and the repository, swapped for local ones.
        let root = repo.dir.path().join(format!("dags-{how:?}"));
        let env: Vec<(String, String)> = rendered
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "GIT_SYNC_ROOT" | "GITSYNC_ROOT" => (k, s(&root).to_string()),
                "GIT_SYNC_REPO" | "GITSYNC_REPO" => (k, repo.url.clone()),
                _ => (k, v),
            })
            .collect();
        let o = git_sync(&[], &env, false);
        assert!(o.status.success(), "rendered {how:?} {env:?}: {}", String::from_utf8_lossy(&o.stderr));
        // Airflow reads $AIRFLOW_HOME/dags/repo/<subPath>: the volume's repo/<subPath>.
        let link = root.join("repo");
        let (hash, _) = link_of(&link);
        assert_eq!(hash, main, "rendered {how:?}: main, not the remote's HEAD");
        assert!(link.join(sub_path).join("example_dag.py").is_file(), "rendered {how:?}: no repo/{sub_path}");
        assert_like_git(&repo.bare, &main, &link);
    }
}
