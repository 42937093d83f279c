//! Git's smart HTTP on 127.0.0.1: the real `git http-backend` (a CGI program) behind a small
//! HTTP/1.1 front that asks for Basic authentication — what credential flags are tested
//! against (`--username`, `--password-file`, `--credential`, `--askpass-url`).
//!
//! ```ignore
//! let server = SmartHttp::start(dir.path(), "me", "s3cret");   // serves dir/NAME.git
//! let url = server.url("site.git");                           // http://127.0.0.1:PORT/site.git
//! assert_eq!(server.refused(), 0);                            // 401s answered so far
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running smart-HTTP server (it stops with the test process).
#[derive(Debug)]
pub struct SmartHttp {
    port: u16,
    served: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl SmartHttp {
    /// Serve the repositories under `base` to whoever authenticates as `user`/`password`.
    pub fn start(base: &Path, user: &str, password: &str) -> SmartHttp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let expected = format!("Basic {}", base64(format!("{user}:{password}").as_bytes()));
        let (served, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, r) = (served.clone(), refused.clone());
        let base = base.to_path_buf();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (base, expected, s, r) = (base.clone(), expected.clone(), s.clone(), r.clone());
                std::thread::spawn(move || {
                    let _ = answer(stream, &base, &expected, &s, &r);
                });
            }
        });
        SmartHttp { port, served, refused }
    }

    /// `http://127.0.0.1:PORT/NAME`.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// Requests answered by git (authenticated).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    /// Requests refused with 401.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

fn answer(
    stream: TcpStream,
    base: &Path,
    expected: &str,
    served: &AtomicUsize,
    refused: &AtomicUsize,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or_default().to_string(), parts.next().unwrap_or_default().to_string());
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    if header("authorization").as_deref() != Some(expected) {
        refused.fetch_add(1, Ordering::SeqCst);
        return writer.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    }
    let mut body = Vec::new();
    if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        reader.read_exact(&mut body)?;
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut cgi = Command::new("git");
    cgi.arg("http-backend")
        .env("GIT_PROJECT_ROOT", base)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "tester")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(p) = header("git-protocol") {
        cgi.env("GIT_PROTOCOL", p);
    }
    if let Some(e) = header("content-encoding") {
        cgi.env("HTTP_CONTENT_ENCODING", e);
    }
    let mut child = cgi.spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    let feeder = std::thread::spawn(move || stdin.write_all(&body));
    let out = child.wait_with_output()?;
    let _ = feeder.join();
    served.fetch_add(1, Ordering::SeqCst);
    // CGI: headers (with an optional Status), a blank line, the body.
    let split = out.stdout.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    let split = split.or_else(|| out.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (head, rest) = match split {
        Some((i, n)) => (String::from_utf8_lossy(&out.stdout[..i]).into_owned(), &out.stdout[i + n..]),
        None => (String::new(), &out.stdout[..]),
    };
    let mut status = "200 OK".to_string();
    let mut response = String::new();
    for h in head.lines() {
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_string(),
            Some(_) => response.push_str(&format!("{}\r\n", h.trim_end())),
            None => {}
        }
    }
    writer.write_all(
        format!("HTTP/1.1 {status}\r\n{response}Content-Length: {}\r\nConnection: close\r\n\r\n", rest.len())
            .as_bytes(),
    )?;
    writer.write_all(rest)
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= chunk.len() { A[((n >> shift) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_as_rfc_4648() {
        assert_eq!(super::base64(b"me:s3cret"), "bWU6czNjcmV0");
        assert_eq!(super::base64(b"a"), "YQ==");
        assert_eq!(super::base64(b"ab"), "YWI=");
    }
}
