//! `treesync git-sync` (and the binary run as `git-sync`): git-sync's flags parsed by its own
//! rules (`treesync_gitsync::flags`), its messages and exit codes, its HTTP endpoint (health at
//! every path, `/metrics` with `--http-metrics`), then the library's loop.

use std::process::ExitCode;
use std::sync::Arc;

use treesync_gitsync::flags::{self, Stop};
use treesync_gitsync::{Config, Log, Metrics};

use crate::monitor::http::{PLAIN, Routes, serve};
use crate::monitor::metrics::CONTENT_TYPE;

/// git-sync's endpoint: `/metrics` when asked, and its health answer at every other path
/// (503 `repo is not ready` until the first sync succeeded, then 200), for any method.
struct GitSyncRoutes {
    metrics: Arc<Metrics>,
    with_metrics: bool,
}

impl Routes for GitSyncRoutes {
    fn route(&self, _method: &str, path: &str) -> (u16, &'static str, String) {
        if self.with_metrics && path == "/metrics" {
            return (200, CONTENT_TYPE, self.metrics.render());
        }
        if self.metrics.is_ready() { (200, PLAIN, String::new()) } else { (503, PLAIN, "repo is not ready\n".into()) }
    }
}

fn code(c: i32) -> ExitCode {
    ExitCode::from(u8::try_from(c).unwrap_or(1))
}

/// Run git-sync's command line `args` (without the program name), shown as `program`.
pub(crate) fn main(program: &str, args: &[String]) -> ExitCode {
    if super::pid1::is_init() {
        return super::pid1::supervise();
    }
    let parsed = match flags::parse(args, &|k| std::env::var(k).ok()) {
        Ok(p) => p,
        Err(Stop::Fatal(message)) => {
            eprintln!("{message}");
            return code(1);
        }
        Err(Stop::Usage(message)) => {
            eprintln!("{message}\n{}", flags::help(program));
            println!("{message}");
            return code(2);
        }
    };
    for notice in &parsed.notices {
        eprintln!("{notice}");
    }
    if parsed.bool("help") {
        print!("{}", flags::help(program));
        return code(0);
    }
    if parsed.bool("version") {
        println!("treesync {}", env!("CARGO_PKG_VERSION"));
        return code(0);
    }
    if parsed.bool("man") {
        print!("{}", flags::help(program));
        return code(0);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let config = match Config::from_parsed(&parsed, &cwd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}", e.message);
            if e.usage {
                eprint!("{}", flags::help(program));
                eprintln!("{}", e.message);
            }
            // The error file, when it can be known (--root and --error-file parsed).
            let root = parsed.str("root");
            let file = parsed.str("error-file");
            if !root.is_empty() && !file.is_empty() {
                Log::new(0, Some(cwd.join(root).join(file))).config_error(&e.message);
            }
            return code(1);
        }
    };
    let log = Log::new(config.verbose, config.error_file.clone());
    log.info(
        0,
        "starting up",
        &[
            ("version", env!("CARGO_PKG_VERSION").into()),
            ("pid", std::process::id().to_string()),
            ("args", redacted(args)),
        ],
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            log.error("can't start the runtime", &e.to_string(), &[]);
            return code(1);
        }
    };
    let metrics = Arc::new(Metrics::default());
    runtime.block_on(async {
        if let Some(bind) = &config.http_bind {
            let addr = match tokio::net::lookup_host(bind.as_str()).await.ok().and_then(|mut a| a.next()) {
                Some(a) => a,
                None => {
                    log.error("failed to listen", &format!("can't resolve --http-bind {bind:?}"), &[]);
                    return code(1);
                }
            };
            let routes = Arc::new(GitSyncRoutes { metrics: metrics.clone(), with_metrics: config.http_metrics });
            match serve(addr, routes).await {
                Ok(local) => log.info(0, "serving HTTP", &[("endpoint", local.to_string())]),
                Err(e) => {
                    log.error("failed to listen", &format!("{e:#}"), &[("address", bind.clone())]);
                    return code(1);
                }
            }
        }
        code(treesync_gitsync::run(config, metrics, log).await)
    })
}

/// The command line for the log, with passwords hidden.
fn redacted(args: &[String]) -> String {
    let mut out = Vec::new();
    let mut hide_next = false;
    for a in args {
        if hide_next {
            out.push("REDACTED".to_string());
            hide_next = false;
        } else if a == "--password" {
            out.push(a.clone());
            hide_next = true;
        } else if a.starts_with("--password=") {
            out.push("--password=REDACTED".into());
        } else if let Some((scheme, rest)) = a.split_once("://")
            && let Some((userinfo, host)) = rest.split_once('@')
            && userinfo.contains(':')
        {
            let user = userinfo.split(':').next().unwrap_or_default();
            out.push(format!("{scheme}://{user}:REDACTED@{host}"));
        } else {
            out.push(a.clone());
        }
    }
    out.join(" ")
}
