//! `nfs://HOST[:PORT]/EXPORT/SUB/PATH?mountport=N&nfsport=N&uid=N&gid=N&inflight=N&timeout=S`

use std::fmt;
use std::time::Duration;

/// A parsed `nfs://` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsUrl {
    /// Server name or address.
    pub host: String,
    /// NFS port (from `HOST:PORT` or `?nfsport=`); the portmapper is asked when absent.
    pub nfs_port: Option<u16>,
    /// MOUNT port (`?mountport=`); the portmapper is asked when absent.
    pub mount_port: Option<u16>,
    /// The absolute path on the server: an export, then the target's path below it.
    pub path: String,
    /// AUTH_UNIX uid (`?uid=`, default 0).
    pub uid: u32,
    /// AUTH_UNIX gid (`?gid=`, default 0).
    pub gid: u32,
    /// RPC calls in flight on the connection, at most (`?inflight=`, default 128).
    pub inflight: Option<usize>,
    /// Per-call timeout (`?timeout=SECONDS`, default 30).
    pub timeout: Option<Duration>,
}

impl NfsUrl {
    /// Parse `s`; errors say what is wrong and show the expected form.
    ///
    /// The grammar is the URL standard's (the `url` crate): the authority, IPv6 addresses in
    /// brackets, the port, percent-escapes in the path and the query. On top of it: a server
    /// and an export path are required, and `.` or `..` segments are refused rather than
    /// resolved away (they would name another directory than the one written).
    pub fn parse(s: &str) -> Result<NfsUrl, String> {
        const FORM: &str =
            "nfs://HOST[:PORT]/EXPORT[/PATH][?mountport=N&nfsport=N&uid=N&gid=N&inflight=N&timeout=SECONDS]";
        let bad = |why: &str| format!("bad NFS URL {s:?}: {why}\n  hint: the form is {FORM}");
        let rest = s.strip_prefix("nfs://").ok_or_else(|| bad("it must start with nfs://"))?;
        // What the URL standard accepts but says too little about, checked on the text as written.
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if let Some(v6) = authority.strip_prefix('[') {
            let (_, after) = v6.split_once(']').ok_or_else(|| bad("an IPv6 address in [ ] is not closed with ]"))?;
            if !after.is_empty() && !after.starts_with(':') {
                return Err(bad(&format!("{after:?} after the address is not :PORT")));
            }
        } else if authority.contains([']', '[']) {
            return Err(bad("brackets belong around an IPv6 address: nfs://[::1]:2049/export"));
        } else if authority.matches(':').count() > 1 {
            return Err(bad("an IPv6 address needs brackets: nfs://[::1]:2049/export"));
        }
        let raw_path = rest[authority.len()..].split(['?', '#']).next().unwrap_or_default();
        // The URL standard resolves `.` and `..` (also written %2e) away: refuse them instead.
        if raw_path
            .split('/')
            .any(|c| matches!(c.to_ascii_lowercase().as_str(), "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e."))
        {
            return Err(bad("the path may not contain . or .. components"));
        }
        let parsed = url::Url::parse(s).map_err(|e| match e {
            url::ParseError::InvalidPort => {
                let port = authority.rsplit_once(':').map_or(authority, |(_, p)| p);
                bad(&format!("{port:?} is not a port number"))
            }
            url::ParseError::EmptyHost => bad("the server name is missing"),
            other => bad(&other.to_string()),
        })?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("a user name does not belong in the URL: AUTH_UNIX takes ?uid=N&gid=N"));
        }
        if parsed.fragment().is_some() {
            return Err(bad("a #fragment has no meaning here"));
        }
        let host = match parsed.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Domain(d)) if !d.is_empty() => decode(d).map_err(|e| bad(&e))?,
            _ => return Err(bad("the server name is missing")),
        };
        let path = decode(parsed.path()).map_err(|e| bad(&e))?;
        let path = path.trim_end_matches('/');
        if path.is_empty() {
            return Err(bad("the export path is missing"));
        }
        let mut url = NfsUrl {
            host,
            nfs_port: parsed.port(),
            mount_port: None,
            path: path.to_string(),
            uid: 0,
            gid: 0,
            inflight: None,
            timeout: None,
        };
        for pair in parsed.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| bad(&format!("{pair:?} has no value")))?;
            let (k, v) = (decode(k).map_err(|e| bad(&e))?, decode(v).map_err(|e| bad(&e))?);
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad(&format!("{k}={v:?} is not a number")));
            match k.as_str() {
                "mountport" => url.mount_port = Some(u16::try_from(num(&v)?).map_err(|_| bad("port out of range"))?),
                "nfsport" => url.nfs_port = Some(u16::try_from(num(&v)?).map_err(|_| bad("port out of range"))?),
                "uid" => url.uid = u32::try_from(num(&v)?).map_err(|_| bad("uid out of range"))?,
                "gid" => url.gid = u32::try_from(num(&v)?).map_err(|_| bad("gid out of range"))?,
                "inflight" => url.inflight = Some(usize::try_from(num(&v)?.max(1)).unwrap_or(usize::MAX)),
                "timeout" => url.timeout = Some(Duration::from_secs(num(&v)?.max(1))),
                other => {
                    return Err(bad(&format!(
                        "unknown option {other:?} (known: mountport, nfsport, uid, gid, inflight, timeout)"
                    )));
                }
            }
        }
        Ok(url)
    }

    /// The path's components.
    pub fn components(&self) -> Vec<&str> {
        self.path.split('/').filter(|c| !c.is_empty()).collect()
    }
}

impl fmt::Display for NfsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "nfs://[{}]", self.host)?;
        } else {
            write!(f, "nfs://{}", self.host)?;
        }
        if let Some(p) = self.nfs_port {
            write!(f, ":{p}")?;
        }
        write!(f, "{}", self.path)
    }
}

/// A percent-decoded part of the URL, which must be UTF-8.
fn decode(s: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| format!("{s:?} decodes to bytes that are not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms() {
        let u = NfsUrl::parse("nfs://127.0.0.1:2049/export/site?mountport=20048&uid=1000&gid=100").expect("valid");
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.nfs_port, Some(2049));
        assert_eq!(u.mount_port, Some(20048));
        assert_eq!((u.uid, u.gid), (1000, 100));
        assert_eq!(u.path, "/export/site");
        assert_eq!(u.components(), ["export", "site"]);
        assert_eq!(u.to_string(), "nfs://127.0.0.1:2049/export/site");
        let u = NfsUrl::parse("nfs://nas/vol/").expect("valid");
        assert_eq!((u.nfs_port, u.path.as_str()), (None, "/vol"));
        let u = NfsUrl::parse("nfs://nas/vol?nfsport=2050&inflight=1&timeout=5").expect("valid");
        assert_eq!((u.nfs_port, u.inflight, u.timeout), (Some(2050), Some(1), Some(Duration::from_secs(5))));
        let u = NfsUrl::parse("nfs://[::1]:2049/export/my%20site").expect("IPv6 and an escaped space");
        assert_eq!((u.host.as_str(), u.nfs_port, u.path.as_str()), ("::1", Some(2049), "/export/my site"));
        assert_eq!(u.to_string(), "nfs://[::1]:2049/export/my site");
        let u = NfsUrl::parse("nfs://NAS.example/vol").expect("a name");
        assert_eq!(u.host, "NAS.example", "a host name is kept as written (an opaque host)");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        for (url, says) in [
            ("nfs://", "server name is missing"),
            ("nfs://nas", "export path is missing"),
            ("nfs://nas:x/e", "not a port number"),
            ("nfs://nas/e/../f", ". or .."),
            ("nfs://nas/e?mountport", "has no value"),
            ("nfs://nas/e?colour=red", "unknown option \"colour\""),
            ("s3://b/e", "must start with nfs://"),
            ("nfs://[::1/x", "is not closed with ]"),
            ("nfs://::1/x", "needs brackets"),
            ("nfs://nas]/x", "brackets belong around"),
            ("nfs://[::1]x/e", "is not :PORT"),
            ("nfs://nas:99999/e", "\"99999\" is not a port number"),
            ("nfs://nas/e/%2E%2E/f", ". or .."),
            ("nfs://nas/e/.", ". or .."),
            ("nfs://u@nas/e", "AUTH_UNIX takes ?uid=N"),
            ("nfs://nas/e#x", "fragment"),
            ("nfs://nas/e?uid=-1", "is not a number"),
        ] {
            let e = NfsUrl::parse(url).expect_err(url);
            assert!(e.contains(says) && e.contains("hint: the form is"), "{url}: {e}");
        }
    }
}
