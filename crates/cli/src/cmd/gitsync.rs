//! `treesync git-sync` (and the binary run as `git-sync`): git-sync's flags parsed by its own
//! rules (`treesync_gitsync::flags`), its messages and exit codes, its HTTP endpoint (health at
//! every path, `/metrics` with `--http-metrics`), then the library's loop.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
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
    // git-sync's private git config in this process's environment, as git-sync sets it, so
    // that treesync reads the settings the git it runs reads.
    // SAFETY: no other thread exists yet: the runtime is built below, and nothing before it
    // in main starts one.
    #[allow(unsafe_code)]
    if let Err(e) = unsafe { treesync_gitsync::git::use_private_config() } {
        log.error("can't create the git config file", &e.to_string(), &[]);
        return code(1);
    }
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
            let addrs = listen_addresses(bind).await;
            if addrs.is_empty() {
                log.error("failed to listen", &format!("can't resolve --http-bind {bind:?}"), &[]);
                return code(1);
            }
            let routes = Arc::new(GitSyncRoutes { metrics: metrics.clone(), with_metrics: config.http_metrics });
            let mut served = Err(anyhow::anyhow!("no address"));
            for addr in addrs {
                served = serve(addr, routes.clone()).await;
                if served.is_ok() {
                    break;
                }
            }
            match served {
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

/// Where to listen for `--http-bind`, a Go listen address as git-sync takes it: `HOST:PORT`
/// resolved, and `:PORT` (no host, the usual form in pod specs) every address, as Go's
/// `net.Listen` does: `[::]` (IPv4 too, with the kernel's default dual stack), or `0.0.0.0`
/// where IPv6 is off.
async fn listen_addresses(bind: &str) -> Vec<SocketAddr> {
    if let Some(port) = bind.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()) {
        return vec![SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)), SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))];
    }
    tokio::net::lookup_host(bind).await.map(|a| a.collect()).unwrap_or_default()
}

/// The command line for the log, with passwords hidden.
fn redacted(args: &[String]) -> String {
    let mut out = Vec::new();
    let (mut hide_next, mut credential_next) = (false, false);
    for a in args {
        if hide_next {
            out.push("REDACTED".to_string());
            hide_next = false;
        } else if credential_next {
            out.push(hide_passwords(a));
            credential_next = false;
        } else if a == "--password" {
            out.push(a.clone());
            hide_next = true;
        } else if a.starts_with("--password=") {
            out.push("--password=REDACTED".into());
        } else if a == "--credential" {
            out.push(a.clone());
            credential_next = true;
        } else if let Some(value) = a.strip_prefix("--credential=") {
            out.push(format!("--credential={}", hide_passwords(value)));
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

/// A `--credential` value (a JSON object or a list of them) with each `password` shown as
/// REDACTED, as git-sync logs it; all of it hidden if it is not JSON.
fn hide_passwords(value: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(value) else { return "REDACTED".into() };
    let objects: Vec<&mut serde_json::Value> = match &mut v {
        serde_json::Value::Array(list) => list.iter_mut().collect(),
        one => vec![one],
    };
    for o in objects {
        if let Some(p) = o.get_mut("password") {
            *p = "REDACTED".into();
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_without_host_listens_everywhere_as_in_go() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let every = rt.block_on(listen_addresses(":8081"));
        assert_eq!(every, ["[::]:8081".parse().expect("v6"), "0.0.0.0:8081".parse().expect("v4")]);
        assert_eq!(rt.block_on(listen_addresses("127.0.0.1:9")), ["127.0.0.1:9".parse::<SocketAddr>().expect("v4")]);
        assert!(rt.block_on(listen_addresses(":http")).is_empty(), "a port is a number");
    }
}
