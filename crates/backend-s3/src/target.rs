//! Turn a target URL and the usual AWS settings into an [`ObjectStoreBackend`].

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ClientOptions, RetryConfig};

use crate::{ObjectStoreBackend, Options};

/// Connection settings besides the URL. Everything not given here comes from the environment
/// the way AWS tools read it (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE` with `~/.aws/credentials` and
/// `~/.aws/config`).
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The endpoint, e.g. `http://127.0.0.1:9000` for a local server.
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// Allow plain HTTP endpoints (local test servers).
    pub allow_http: bool,
    /// Retries of failed requests (5xx, throttling, timeouts); `None` keeps object_store's default (10).
    pub max_retries: Option<usize>,
    /// Access key id and secret, overriding the environment and profile.
    pub credentials: Option<(String, String)>,
}

/// Why a target URL could not be opened.
#[derive(Debug)]
pub struct OpenError(pub String);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpenError {}

/// The local directory a `file:///DIR` URL names, as [`open`] reads it (percent-decoded);
/// `None` for any other URL or one that does not parse.
pub fn file_path(url: &str) -> Option<std::path::PathBuf> {
    url::Url::parse(url).ok().filter(|u| u.scheme() == "file").and_then(|u| u.to_file_path().ok())
}

/// Open `url` (`s3://BUCKET/PREFIX`, `file:///DIR`, `memory://`) as a backend.
pub fn open(url: &str, config: &Config, options: Options) -> Result<ObjectStoreBackend, OpenError> {
    let parsed = url::Url::parse(url).map_err(|e| OpenError(format!("{url:?} is not a URL: {e}")))?;
    // URL parsing resolves `.` and `..` away (`s3://b/../../x` is prefix `x`): a target must
    // name the prefix it means.
    let raw_path = url.split_once("://").map_or("", |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
    let raw_path = raw_path.split(['?', '#']).next().unwrap_or_default();
    if raw_path
        .split('/')
        .any(|seg| matches!(seg.to_ascii_lowercase().as_str(), "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e."))
    {
        return Err(OpenError(format!(
            "{url}: the path holds a `.` or `..` segment, which URLs resolve away (it would name another prefix)\n  hint: write the prefix without them, e.g. s3://BUCKET/site"
        )));
    }
    match parsed.scheme() {
        "s3" | "s3a" => open_s3(&parsed, url, config, options),
        "memory" | "file" => {
            let (store, prefix) = object_store::parse_url_opts(&parsed, std::iter::empty::<(String, String)>())
                .map_err(|e| OpenError(format!("cannot open {url}: {e}")))?;
            let memory = parsed.scheme() == "memory";
            // The local filesystem store keeps no user metadata and has no conditional updates.
            let backend = ObjectStoreBackend::new(Arc::from(store), prefix, url.to_string(), memory, memory, options);
            Ok(if memory { backend } else { backend.with_local_root("/".into()) })
        }
        other => Err(OpenError(format!(
            "unsupported target scheme {other}:// (supported: s3://BUCKET/PREFIX, file:///DIR, memory://, or a local path)"
        ))),
    }
}

fn open_s3(parsed: &url::Url, url: &str, config: &Config, options: Options) -> Result<ObjectStoreBackend, OpenError> {
    // Signing and TLS both use ring; make it the process default for rustls once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bucket = parsed
        .host_str()
        .filter(|b| !b.is_empty())
        .ok_or_else(|| OpenError(format!("{url}: no bucket name (s3://BUCKET/PREFIX)")))?;
    let prefix =
        Path::parse(parsed.path().trim_start_matches('/')).map_err(|e| OpenError(format!("{url}: bad prefix: {e}")))?;
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
        && let Some(p) = profile::load()
    {
        b = b.with_access_key_id(p.key_id).with_secret_access_key(p.secret);
        if let Some(t) = p.token {
            b = b.with_token(t);
        }
        if let (Some(r), None) = (p.region, std::env::var_os("AWS_REGION")) {
            b = b.with_region(r);
        }
    }
    if let Some((id, secret)) = &config.credentials {
        b = b.with_access_key_id(id).with_secret_access_key(secret);
    }
    let endpoint = config
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    if let Some(e) = &endpoint {
        if e.starts_with("http://") && !config.allow_http {
            return Err(OpenError(format!(
                "endpoint {e} is plain HTTP; pass --allow-http to use it (meant for local test servers)"
            )));
        }
        b = b.with_endpoint(e);
    }
    if let Some(r) = &config.region {
        b = b.with_region(r);
    } else if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
        b = b.with_region("us-east-1");
    }
    let mut client = ClientOptions::new().with_allow_http(config.allow_http);
    client = client.with_timeout(std::time::Duration::from_secs(60));
    b = b.with_client_options(client);
    let mut retry = RetryConfig::default();
    if let Some(n) = config.max_retries {
        retry.max_retries = n;
    }
    b = b.with_retry(retry);
    let store = b.build().map_err(|e| OpenError(format!("cannot open {url}: {e}")))?;
    Ok(ObjectStoreBackend::new(Arc::new(store), prefix, url.to_string(), true, true, options))
}

mod profile {
    //! The credentials of `AWS_PROFILE` (or `default`) from `~/.aws/credentials` and `~/.aws/config`.

    pub struct Profile {
        pub key_id: String,
        pub secret: String,
        pub token: Option<String>,
        pub region: Option<String>,
    }

    fn section(text: &str, names: &[String]) -> std::collections::HashMap<String, String> {
        let mut out = std::collections::HashMap::new();
        let mut inside = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') && line.ends_with(']') {
                let name = line[1..line.len() - 1].trim();
                inside = names.iter().any(|n| n == name);
            } else if inside && let Some((k, v)) = line.split_once('=') {
                out.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        out
    }

    pub fn load() -> Option<Profile> {
        let name = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
        let home = std::path::PathBuf::from(std::env::var_os("HOME")?);
        let creds_path =
            std::env::var_os("AWS_SHARED_CREDENTIALS_FILE").map(Into::into).unwrap_or(home.join(".aws/credentials"));
        let config_path = std::env::var_os("AWS_CONFIG_FILE").map(Into::into).unwrap_or(home.join(".aws/config"));
        let creds = std::fs::read_to_string(creds_path).unwrap_or_default();
        let config = std::fs::read_to_string(config_path).unwrap_or_default();
        let c = section(&creds, std::slice::from_ref(&name));
        let g = section(&config, &[format!("profile {name}"), name.clone()]);
        let get = |k: &str| c.get(k).or_else(|| g.get(k)).cloned();
        Some(Profile {
            key_id: get("aws_access_key_id")?,
            secret: get("aws_secret_access_key")?,
            token: get("aws_session_token"),
            region: g.get("region").cloned(),
        })
    }
}
