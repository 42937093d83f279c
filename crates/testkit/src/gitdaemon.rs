//! A real `git daemon` on 127.0.0.1 serving the bare repositories of a directory over
//! `git://`, with its log kept to count the requests it served (remote repositories, issue 17).
//!
//! ```ignore
//! let daemon = GitDaemon::start(dir.path());          // serves dir/NAME.git
//! let url = daemon.url("site.git");                   // git://127.0.0.1:PORT/site.git
//! assert_eq!(daemon.requests(), 0);                   // upload-pack requests so far
//! daemon.stop();                                      // the server is down …
//! daemon.start_again();                               // … and back on the same port
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `git daemon` (killed on drop).
#[derive(Debug)]
pub struct GitDaemon {
    base: PathBuf,
    port: u16,
    log: PathBuf,
    _logdir: tempfile::TempDir,
    child: Option<Child>,
}

impl GitDaemon {
    /// Start `git daemon` on a free port of 127.0.0.1 serving every repository under `base`
    /// (`--export-all`, pushes allowed), and wait until it listens.
    pub fn start(base: &Path) -> GitDaemon {
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port();
        let logdir = tempfile::tempdir().expect("tempdir");
        let mut d = GitDaemon {
            base: base.to_path_buf(),
            port,
            log: logdir.path().join("daemon.log"),
            _logdir: logdir,
            child: None,
        };
        d.start_again();
        d
    }

    /// Start it again on the same port (after [`stop`](GitDaemon::stop)); the log continues.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the daemon is running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("daemon log");
        let before = self.log_text().matches("Ready to rumble").count();
        // git-daemon itself, not `git daemon`: the git wrapper runs it as a child and a kill
        // would leave it serving.
        let exec_path = crate::git(&self.base, &["--exec-path"]);
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--listen=127.0.0.1",
                &format!("--port={}", self.port),
                &format!("--base-path={}", self.base.display()),
                "--export-all",
                "--enable=receive-pack",
                "--reuseaddr",
                "--verbose",
                "--informative-errors",
                "--log-destination=stderr",
            ])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start git daemon (apt-get install git): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.log_text().matches("Ready to rumble").count() == before {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("wait")) {
                panic!("git daemon exited with {status}: {}", self.log_text());
            }
            assert!(Instant::now() < deadline, "git daemon did not start in 30 s: {}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop it (the port refuses connections until [`start_again`](GitDaemon::start_again)).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `git://127.0.0.1:PORT/NAME` for the repository `base/NAME`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The fetch-side requests served so far (`ls-remote`, `fetch`, `clone`: one
    /// `upload-pack` connection each), counted in its log.
    pub fn requests(&self) -> usize {
        self.log_text().matches("Request upload-pack for").count()
    }

    /// The pushes served so far (`receive-pack` requests).
    pub fn pushes(&self) -> usize {
        self.log_text().matches("Request receive-pack for").count()
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A bare repository `DIR/site.git` served by a [`GitDaemon`], a working clone `DIR/work` to
/// push from, and room for a cache (`DIR/cache`) and targets in `DIR`.
///
/// ```ignore
/// let s = Served::new(&[("index.html", "one\n")]);    // committed and pushed to main
/// let id = s.commit(&[("news.html", "news\n")]);      // a commit in the clone …
/// s.push(&["main"]);                                  // … pushed through the daemon
/// assert!(s.matches("main", &target));                // target == git archive main
/// ```
pub struct Served {
    /// Everything of this fixture lives here (removed on drop).
    pub dir: tempfile::TempDir,
    /// The served bare repository.
    pub bare: PathBuf,
    /// The server.
    pub daemon: GitDaemon,
    /// `git://127.0.0.1:PORT/site.git`.
    pub url: String,
}

impl Served {
    /// A served repository whose `main` holds `files` (pushed through the daemon).
    pub fn new(files: &[(&str, &str)]) -> Served {
        let dir = tempfile::tempdir().expect("tempdir");
        let bare = dir.path().join("site.git");
        std::fs::create_dir(&bare).expect("mkdir");
        crate::git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        let work = dir.path().join("work");
        std::fs::create_dir(&work).expect("mkdir");
        crate::git(&work, &["init", "-q", "-b", "main"]);
        let daemon = GitDaemon::start(dir.path());
        let url = daemon.url("site.git");
        let served = Served { dir, bare, daemon, url };
        served.commit(files);
        served.push(&["main"]);
        served
    }

    /// The working clone.
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// A cache directory for treesync's copies of the repository (not created).
    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// Write `files` in the working clone and commit them all; the commit's id.
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            let file = self.work().join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(&file, content).expect("write");
        }
        let work = self.work();
        crate::git(&work, &["add", "-A"]);
        crate::git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", files[0].0]);
        crate::git(&work, &["rev-parse", "HEAD"])
    }

    /// `git push URL ARGS` from the clone through the daemon.
    pub fn push(&self, args: &[&str]) {
        let mut all = vec!["push", "-q", &self.url];
        all.extend(args);
        crate::git(&self.work(), &all);
    }

    /// Whether `target` holds exactly `git archive REV` of the served repository.
    pub fn matches(&self, rev: &str, target: &Path) -> bool {
        let dir = tempfile::tempdir().expect("tempdir");
        crate::archive(&self.bare, rev, &dir.path().join("x"));
        target.exists()
            && crate::tree::diff(&crate::tree::read_dir(&dir.path().join("x")), &crate::tree::read_dir(target))
                .is_none()
    }
}
