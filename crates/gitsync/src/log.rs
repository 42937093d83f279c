//! git-sync's logs and files: JSON lines on stderr (`{"logger":…,"ts":…,"level":N,"msg":…}`,
//! errors with `"error"` in place of `level`), every error also written to `--error-file`
//! (atomically: a temporary renamed over it, mode 0644, the last error wins; removed after a
//! successful sync), and `--touch-file` touched after a sync that changed something.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Where log lines and errors go. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    verbose: i64,
    name: &'static str,
    error_file: Option<PathBuf>,
}

impl Log {
    /// Lines at level ≤ `verbose` are printed; errors also go to `error_file`.
    pub fn new(verbose: i64, error_file: Option<PathBuf>) -> Log {
        Log { inner: Arc::new(Inner { verbose, name: "", error_file }) }
    }

    /// A logger for a hook (`"exechook"`, `"webhook"`, …): its errors do not write the error
    /// file (as in git-sync).
    pub fn named(&self, name: &'static str) -> Log {
        Log { inner: Arc::new(Inner { verbose: self.inner.verbose, name, error_file: None }) }
    }

    /// Whether level `v` is printed.
    pub fn enabled(&self, v: i64) -> bool {
        v <= self.inner.verbose
    }

    /// An info line at level `v`.
    pub fn info(&self, v: i64, msg: &str, kv: &[(&str, String)]) {
        if !self.enabled(v) {
            return;
        }
        let mut line = self.head();
        line.insert("level".into(), v.into());
        line.insert("msg".into(), msg.into());
        for (k, val) in kv {
            line.insert((*k).into(), val.clone().into());
        }
        print(&line);
    }

    /// An error line, and the error file.
    pub fn error(&self, msg: &str, err: &str, kv: &[(&str, String)]) {
        let mut line = self.head();
        line.insert("msg".into(), msg.into());
        line.insert("error".into(), err.into());
        for (k, val) in kv {
            line.insert((*k).into(), val.clone().into());
        }
        print(&line);
        if let Some(path) = &self.inner.error_file {
            let args: serde_json::Map<String, serde_json::Value> =
                kv.iter().map(|(k, v)| ((*k).to_string(), serde_json::Value::from(v.clone()))).collect();
            let doc = serde_json::json!({ "Msg": msg, "Err": err, "Args": args });
            write_error_file(path, doc.to_string().as_bytes());
        }
    }

    /// A configuration error: plain text in the error file.
    pub fn config_error(&self, msg: &str) {
        if let Some(path) = &self.inner.error_file {
            write_error_file(path, msg.as_bytes());
        }
    }

    /// Remove the error file (after a success).
    pub fn clear_error_file(&self) {
        if let Some(path) = &self.inner.error_file {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => self.info(
                    0,
                    "can't delete the error-file",
                    &[("filename", path.display().to_string()), ("error", e.to_string())],
                ),
            }
        }
    }

    fn head(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("logger".into(), self.inner.name.into());
        m.insert("ts".into(), timestamp(SystemTime::now()).into());
        m
    }
}

fn print(line: &serde_json::Map<String, serde_json::Value>) {
    let mut text = serde_json::Value::Object(line.clone()).to_string();
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `2006-01-02 15:04:05.000000`, UTC.
fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (year, month, day) = treesync_core::export::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:06}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Write the error file as git-sync does: a temporary in the same directory (created 0775 if
/// missing), renamed over it, then mode 0644. Failures are only reported on stderr.
fn write_error_file(path: &Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let result = (|| -> std::io::Result<()> {
        if !dir.exists() {
            std::fs::DirBuilder::new().mode(0o775).create(dir)?;
        }
        let tmp = dir.join(format!("tmp-err-{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)?;
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
    })();
    if let Err(e) = result {
        eprintln!("can't write the error-file {}: {e}", path.display());
    }
}

use std::os::unix::fs::DirBuilderExt;

/// Touch `path` (create it empty, or set its times to now), creating its directories (0775).
pub fn touch(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o775).create(dir)?;
    }
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let now = SystemTime::now();
    f.set_times(std::fs::FileTimes::new().set_accessed(now).set_modified(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_in_gos_layout() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_764_943_200_123_456);
        assert_eq!(timestamp(t), "2025-12-05 14:00:00.123456");
    }

    #[test]
    fn error_file_is_replaced_and_cleared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/error.json");
        let log = Log::new(0, Some(path.clone()));
        log.error("error syncing repo, will retry", "boom", &[("failCount", "1".into())]);
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("written")).expect("json");
        assert_eq!(doc["Msg"], "error syncing repo, will retry");
        assert_eq!(doc["Err"], "boom");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777, 0o644);
        log.clear_error_file();
        assert!(!path.exists());
    }
}
