//! Reaching the export: the portmapper, the MOUNT protocol, the NFS connection and the
//! target directory's handle.

use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use nfs3_types::mount as mountproto;
use nfs3_types::nfs3::{fattr3, ftype3, nfsstat3};
use nfs3_types::xdr_codec::{Opaque, Void};
use treesync_backend::backend::Error;

#[allow(clippy::wildcard_imports)]
use super::inner::*;
use super::nfs::{self, Fh};
use super::rpc::{self, RpcOptions};

impl ClientBackend {
    pub(super) fn resolve(&self, port: u16) -> Result<SocketAddr, Error> {
        (self.inner.host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| Error::io("resolve", &self.inner.host, e))?
            .next()
            .ok_or_else(|| Error::Unreachable {
                service: "NFS",
                host: self.inner.host.clone(),
                detail: "the name resolves to no address".into(),
                hint: "\n  hint: check the host name in the URL".into(),
                source: None,
            })
    }

    /// Ask the portmapper at HOST:111 for a program's TCP port.
    pub(super) async fn portmap(&self, prog: u32, vers: u32, what: &'static str) -> Result<u16, Error> {
        let pm = rpc::Client::new(self.resolve(111)?, 100_000, 2, RpcOptions { retries: 0, ..self.inner.rpc.clone() });
        let args = nfs3_types::portmap::mapping { prog, vers, prot: 6, port: 0 };
        let hint = |detail: String, source: Option<Box<dyn std::error::Error + Send + Sync>>| Error::Unreachable {
            service: what,
            host: self.inner.host.clone(),
            detail: format!("the portmapper cannot tell its port: {detail}"),
            hint: format!(
                "\n  hint: give its port in the URL, e.g. nfs://{}{}?nfsport=2049&mountport=20048",
                self.inner.host, self.inner.url.path
            ),
            source,
        };
        let reply = pm
            .call(3, &args, &|| "portmap GETPORT".into())
            .await
            .map_err(|e| hint(e.to_string(), Some(Box::new(e))))?;
        let port = reply.decode::<u32>().map_err(|why| hint(why, None))?;
        match u16::try_from(port) {
            Ok(p) if p != 0 => Ok(p),
            _ => Err(hint("the portmapper does not know it".into(), None)),
        }
    }

    pub(super) async fn nfs(&self) -> Result<&nfs::Nfs, Error> {
        self.inner
            .nfs
            .get_or_try_init(|| async {
                let addr = *self
                    .inner
                    .nfs_addr
                    .get_or_try_init(|| async {
                        let port = match self.inner.url.nfs_port {
                            Some(p) => p,
                            None => self.portmap(100_003, 3, "NFS").await.unwrap_or(2049),
                        };
                        self.resolve(port)
                    })
                    .await?;
                Ok(Arc::new(nfs::Nfs::new(addr, self.inner.rpc.clone(), self.inner.record)))
            })
            .await
            .map(|n| &**n)
    }

    /// The export's root handle and the target's path components below it (MOUNT protocol:
    /// EXPORT to find the export holding the path, MNT of it).
    pub(super) async fn export(&self) -> Result<&(Fh, Vec<String>), Error> {
        self.inner
            .export
            .get_or_try_init(|| async {
                let port = match self.inner.url.mount_port {
                    Some(p) => p,
                    None => self.portmap(mountproto::PROGRAM, mountproto::VERSION, "MOUNT").await?,
                };
                let client = rpc::Client::new(
                    self.resolve(port)?,
                    mountproto::PROGRAM,
                    mountproto::VERSION,
                    self.inner.rpc.clone(),
                );
                let mnt_err = |e: rpc::RpcError| {
                    let hint = if matches!(e, rpc::RpcError::Connect { .. }) {
                        "\n  hint: is the NFS server running, and is ?mountport= right?"
                    } else {
                        ""
                    };
                    Error::Mount {
                        target: self.inner.url.to_string(),
                        detail: e.to_string(),
                        hint,
                        source: Some(Box::new(e)),
                    }
                };
                self.inner.mount_calls.fetch_add(1, Ordering::Relaxed);
                let reply = client.call(5, &Void, &|| "MOUNT EXPORT".into()).await.map_err(mnt_err)?;
                let exports: mountproto::exports<'static, 'static> =
                    reply.decode().map_err(|detail| Error::Garbled { what: "export list", detail })?;
                let names: Vec<String> = exports
                    .into_inner()
                    .into_iter()
                    .map(|e| String::from_utf8_lossy(&e.ex_dir.0).trim_end_matches('/').to_string())
                    .collect();
                let want = self.inner.url.components();
                let best = names
                    .iter()
                    .filter_map(|n| {
                        let c: Vec<&str> = n.split('/').filter(|c| !c.is_empty()).collect();
                        (c.len() <= want.len() && c[..] == want[..c.len()]).then_some((c.len(), n))
                    })
                    .max_by_key(|(len, _)| *len);
                let Some((depth, export)) = best else {
                    return Err(Error::Mount {
                        target: self.inner.url.to_string(),
                        detail: format!(
                            "no export of {} holds {}; the server exports: {}",
                            self.inner.host,
                            self.inner.url.path,
                            if names.is_empty() { "nothing".to_string() } else { names.join(", ") }
                        ),
                        hint: "\n  hint: the URL's path starts with an export",
                        source: None,
                    });
                };
                let path = if export.is_empty() { "/".to_string() } else { export.clone() };
                self.inner.mount_calls.fetch_add(1, Ordering::Relaxed);
                let reply = client
                    .call(1, &mountproto::dirpath(Opaque::borrowed(path.as_bytes())), &|| format!("MOUNT MNT {path}"))
                    .await
                    .map_err(mnt_err)?;
                let res: mountproto::mountres3<'static> =
                    reply.decode().map_err(|detail| Error::Garbled { what: "MNT reply", detail })?;
                let fh = match res {
                    mountproto::mountres3::Ok(ok) => Fh { data: Opaque::owned(ok.fhandle.0.into_owned()) },
                    mountproto::mountres3::Err(stat) => {
                        return Err(Error::Mount {
                            target: self.inner.url.to_string(),
                            detail: format!("the server refused to mount {path}: {stat}"),
                            hint: "\n  hint: check the export's client list and options",
                            source: None,
                        });
                    }
                };
                let rest = want[depth..].iter().map(|c| c.to_string()).collect();
                Ok((fh, rest))
            })
            .await
    }

    /// The target directory's handle; with `create`, its last component is made if missing.
    /// `None`: it does not exist.
    pub(super) async fn root(&self, create: bool) -> Result<Option<Fh>, Error> {
        let mut slot = self.inner.root.lock().await;
        if let Some(fh) = &*slot {
            return Ok(Some(fh.clone()));
        }
        let (export, rest) = self.export().await?.clone();
        let nfs = self.nfs().await?;
        let mut fh = export;
        let mut seen = self.inner.url.path.len() - rest.iter().map(|c| c.len() + 1).sum::<usize>();
        for (i, c) in rest.iter().enumerate() {
            seen += c.len() + 1;
            let here = &self.inner.url.path[..seen];
            let last = i + 1 == rest.len();
            match nfs.lookup(&fh, c.as_bytes(), here.as_bytes()).await {
                Ok((next, attr)) => {
                    must_be_dir(nfs, &next, attr, here).await?;
                    fh = next;
                }
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) && last && create => {
                    let made = match nfs.mkdir(&fh, c.as_bytes(), 0o755, here.as_bytes()).await {
                        // Another sync made it a moment ago: use it if it is a directory.
                        Err(e) if is(&e, nfsstat3::NFS3ERR_EXIST) => {
                            let (next, attr) = nfs
                                .lookup(&fh, c.as_bytes(), here.as_bytes())
                                .await
                                .map_err(|e| nfs_io("create target directory", here, e))?;
                            must_be_dir(nfs, &next, attr, here).await?;
                            Ok(Some(next))
                        }
                        r => r,
                    };
                    fh = nfs
                        .made(&fh, c.as_bytes(), here.as_bytes(), made, false)
                        .await
                        .map_err(|e| nfs_io("create target directory", here, e))?;
                }
                Err(e) if is(&e, nfsstat3::NFS3ERR_NOENT) && last => return Ok(None),
                Err(e) => return Err(nfs_io("look up", here, e)),
            }
        }
        *slot = Some(fh.clone());
        Ok(Some(fh))
    }

    pub(super) async fn root_fh(&self) -> Result<Fh, Error> {
        self.root(false)
            .await?
            .ok_or_else(|| io_error("open target directory", &self.inner.url, ErrorKind::NotFound, "it does not exist"))
    }

    pub(super) async fn wtmax(&self) -> u32 {
        *self
            .inner
            .wtmax
            .get_or_init(|| async {
                let (Ok(nfs), Ok(root)) = (self.nfs().await, self.root_fh().await) else { return 64 << 10 };
                match nfs.fsinfo(&root).await {
                    Ok(i) => i.wtmax.clamp(4096, 1 << 20),
                    Err(_) => 64 << 10,
                }
            })
            .await
    }
}

/// The component of the target's path at `here`, found as `fh` with the attributes its lookup
/// gave (a GETATTR when it gave none): refused unless it is a directory.
async fn must_be_dir(nfs: &nfs::Nfs, fh: &Fh, attr: Option<fattr3>, here: &str) -> Result<(), Error> {
    let attr = match attr {
        Some(a) => a,
        None => nfs.getattr(fh, here.as_bytes()).await.map_err(|e| nfs_io("look up", here, e))?,
    };
    if attr.type_ != ftype3::NF3DIR {
        return Err(io_error("use target", here, ErrorKind::NotADirectory, "it exists and is not a directory"));
    }
    Ok(())
}
