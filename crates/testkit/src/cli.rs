//! Running the `treesync` binary in tests: one set of helpers instead of one per test file.
//!
//! ```ignore
//! let cli = treesync_testkit::cli::Cli::new(env!("CARGO_BIN_EXE_treesync"));
//! cli.ok(&["sync", "--repo", repo, "--ref", "main", "--target", target]);
//! let err = cli.fails(&["sync", "--target", "s3://b/p", "--atomic"], 2);
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The `treesync` binary of the test crate (`env!("CARGO_BIN_EXE_treesync")`).
#[derive(Debug, Clone)]
pub struct Cli {
    bin: PathBuf,
}

/// A path as a command-line argument (test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

impl Cli {
    /// The binary at `bin`.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Cli { bin: bin.into() }
    }

    /// Run `treesync ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin).args(args).output().expect("treesync runs")
    }

    /// Run `treesync ARGS`, expect success, return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "treesync {args:?} exited with {:?}: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).expect("utf8 stdout")
    }

    /// Run `treesync ARGS`, expect exit `code` and one error on stderr; return stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let o = self.run(args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(code), "treesync {args:?}: {stderr}");
        assert!(stderr.contains("treesync: error: "), "{stderr}");
        stderr
    }

    /// The `--json` document of `ARGS`, validated against the JSON schema `schema_text`.
    pub fn json(&self, args: &[&str], schema_text: &str) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let v: Value = serde_json::from_str(&self.ok(&all)).expect("one JSON document");
        let schema: Value = serde_json::from_str(schema_text).expect("schema is JSON");
        if let Err(errors) = crate::schema::validate(&schema, &v) {
            panic!("treesync {all:?}: output violates its schema:\n{}\n{v:#}", errors.join("\n"));
        }
        v
    }
}
