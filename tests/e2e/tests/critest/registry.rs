//! A read-only image registry on 127.0.0.1, serving one OCI image layout
//! directory over the distribution API, as far as containerd's pull needs
//! it: `GET /v2/`, `HEAD`/`GET` of manifests (by tag or digest) and blobs.
//! critest pulls its test image through CRI (`PullImage` always asks the
//! registry), and there is no registry on these machines.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context as _, Result};

/// A running registry; stopped (and its thread joined) on drop.
pub struct Registry {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Registry {
    /// Serves the OCI layout in `layout` (with `index.json` naming one
    /// manifest) under every repository name and tag.
    pub fn start(layout: &Path) -> Result<Registry> {
        let index: serde_json::Value = serde_json::from_slice(
            &std::fs::read(layout.join("index.json")).context("read index.json")?,
        )?;
        let manifest = index["manifests"][0]["digest"]
            .as_str()
            .context("no manifest in index.json")?
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, dir) = (stop.clone(), layout.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = serve(conn, &dir, &manifest);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Registry {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// `localhost:PORT`, the host part of image names.
    pub fn host(&self) -> String {
        format!("localhost:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request and closes the connection.
fn serve(mut conn: TcpStream, layout: &Path, manifest: &str) -> Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut first = [0u8; 1];
    if conn.peek(&mut first)? == 1 && first[0] == 0x16 {
        // A TLS handshake: containerd tries HTTPS first and falls back to
        // plain HTTP when the answer starts with "HTTP/". Answer, then read
        // what is left so closing does not reset the connection first.
        conn.write_all(b"HTTP/1.0 400 Bad Request\r\nConnection: close\r\n\r\n")?;
        conn.shutdown(std::net::Shutdown::Write)?;
        conn.set_read_timeout(Some(Duration::from_secs(1)))?;
        let _ = std::io::copy(&mut conn, &mut std::io::sink());
        return Ok(());
    }
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // Skip the headers (no request of the pull has a body).
    let mut h = String::new();
    while reader.read_line(&mut h)? > 2 {
        h.clear();
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, digest, file) = route(path, layout, manifest);
    let body = match &file {
        Some(f) => {
            let mut b = Vec::new();
            std::fs::File::open(f)?.read_to_end(&mut b)?;
            b
        }
        None if status == 200 => b"{}".to_vec(),
        None => b"{\"errors\":[{\"code\":\"NOT_FOUND\"}]}".to_vec(),
    };
    let mut out = conn;
    write!(
        out,
        "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n",
        if status == 200 { "OK" } else { "Not Found" },
        body.len()
    )?;
    if let Some(d) = digest {
        write!(out, "Docker-Content-Digest: {d}\r\n")?;
    }
    write!(
        out,
        "Docker-Distribution-API-Version: registry/2.0\r\nConnection: close\r\n\r\n"
    )?;
    if method != "HEAD" {
        out.write_all(&body)?;
    }
    out.flush()?;
    Ok(())
}

/// (status, content type, digest, file) of a request path.
fn route(
    path: &str,
    layout: &Path,
    manifest: &str,
) -> (u16, &'static str, Option<String>, Option<PathBuf>) {
    const JSON: &str = "application/json";
    if path == "/v2/" || path == "/v2" {
        return (200, JSON, None, None);
    }
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:")?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let f = layout.join("blobs/sha256").join(hex);
        f.is_file().then_some(f)
    };
    if let Some((_, reference)) = path.rsplit_once("/manifests/") {
        let digest = if reference.starts_with("sha256:") {
            reference
        } else {
            manifest
        };
        if let Some(f) = blob(digest) {
            let t = "application/vnd.oci.image.manifest.v1+json";
            return (200, t, Some(digest.to_owned()), Some(f));
        }
    } else if let Some((_, digest)) = path.rsplit_once("/blobs/")
        && let Some(f) = blob(digest)
    {
        return (
            200,
            "application/octet-stream",
            Some(digest.to_owned()),
            Some(f),
        );
    }
    (404, JSON, None, None)
}
