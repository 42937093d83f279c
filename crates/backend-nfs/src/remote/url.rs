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
    pub fn parse(s: &str) -> Result<NfsUrl, String> {
        const FORM: &str =
            "nfs://HOST[:PORT]/EXPORT[/PATH][?mountport=N&nfsport=N&uid=N&gid=N&inflight=N&timeout=SECONDS]";
        let bad = |why: &str| format!("bad NFS URL {s:?}: {why}\n  hint: the form is {FORM}");
        let rest = s.strip_prefix("nfs://").ok_or_else(|| bad("it must start with nfs://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let port_of = |p: &str| p.parse::<u16>().map_err(|_| bad(&format!("{p:?} is not a port number")));
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("an IPv6 address in [ ] is not closed with ]"))?;
            match after {
                "" => (h, None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (h, Some(port_of(p)?)),
                    None => return Err(bad(&format!("{after:?} after the address is not :PORT"))),
                },
            }
        } else if authority.contains([']', '[']) {
            return Err(bad("brackets belong around an IPv6 address: nfs://[::1]:2049/export"));
        } else {
            match authority.rsplit_once(':') {
                Some((h, _)) if h.contains(':') => {
                    return Err(bad("an IPv6 address needs brackets: nfs://[::1]:2049/export"));
                }
                Some((h, p)) => (h, Some(port_of(p)?)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("the server name is missing"));
        }
        let path = path.trim_end_matches('/');
        if path.is_empty() {
            return Err(bad("the export path is missing"));
        }
        if path.split('/').any(|c| c == "." || c == "..") {
            return Err(bad("the path may not contain . or .. components"));
        }
        let mut url = NfsUrl {
            host: host.to_string(),
            nfs_port: port,
            mount_port: None,
            path: path.to_string(),
            uid: 0,
            gid: 0,
            inflight: None,
            timeout: None,
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| bad(&format!("{pair:?} has no value")))?;
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad(&format!("{k}={v:?} is not a number")));
            match k {
                "mountport" => url.mount_port = Some(u16::try_from(num(v)?).map_err(|_| bad("port out of range"))?),
                "nfsport" => url.nfs_port = Some(u16::try_from(num(v)?).map_err(|_| bad("port out of range"))?),
                "uid" => url.uid = u32::try_from(num(v)?).map_err(|_| bad("uid out of range"))?,
                "gid" => url.gid = u32::try_from(num(v)?).map_err(|_| bad("gid out of range"))?,
                "inflight" => url.inflight = Some(usize::try_from(num(v)?.max(1)).unwrap_or(usize::MAX)),
                "timeout" => url.timeout = Some(Duration::from_secs(num(v)?.max(1))),
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
        write!(f, "nfs://{}", self.host)?;
        if let Some(p) = self.nfs_port {
            write!(f, ":{p}")?;
        }
        write!(f, "{}", self.path)
    }
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
        ] {
            let e = NfsUrl::parse(url).expect_err(url);
            assert!(e.contains(says) && e.contains("hint: the form is"), "{url}: {e}");
        }
    }
}
