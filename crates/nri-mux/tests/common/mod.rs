//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use nri_mux::{Mux, MuxConn, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Yields until `f(mux)` holds (a counter of its stats, typically),
/// failing after 10 s.
pub async fn until(mux: &Mux, what: &str, f: impl Fn(&nri_mux::MuxStats) -> bool) {
    let start = std::time::Instant::now();
    while !f(&mux.stats()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never: {what}: {:?}",
            mux.stats()
        );
        tokio::task::yield_now().await;
    }
}

/// Like [`until`], on the counters of the latency machinery.
pub async fn until_latency(mux: &Mux, what: &str, f: impl Fn(&nri_mux::LatencyStats) -> bool) {
    let start = std::time::Instant::now();
    while !f(&mux.latency_stats()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never: {what}: {:?}",
            mux.latency_stats()
        );
        tokio::task::yield_now().await;
    }
}

/// A Mux on one end of a socketpair and the raw other end.
pub fn mux_and_raw() -> (Mux, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    (Mux::new(a), b)
}

/// Two Muxes on a socketpair.
pub fn mux_pair() -> (Mux, Mux) {
    let (a, b) = UnixStream::pair().unwrap();
    (Mux::new(a), Mux::new(b))
}

/// Deterministic message content.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Parses a complete byte stream into frames; panics on a truncated tail.
pub fn parse_frames(mut b: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        assert!(b.len() >= 8, "truncated header: {} bytes left", b.len());
        let id = u32::from_be_bytes(b[0..4].try_into().unwrap());
        let len = u32::from_be_bytes(b[4..8].try_into().unwrap()) as usize;
        assert!(b.len() >= 8 + len, "truncated payload");
        out.push((id, b[8..8 + len].to_vec()));
        b = &b[8 + len..];
    }
    out
}

/// Reads the raw end to end of file.
pub async fn read_to_end(raw: &mut UnixStream) -> Vec<u8> {
    let mut v = Vec::new();
    raw.read_to_end(&mut v).await.unwrap();
    v
}

/// Reads exactly `n` bytes from the raw end.
pub async fn read_n(raw: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    raw.read_exact(&mut v).await.unwrap();
    v
}

/// One frame as raw bytes.
pub fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// The typed error inside an io::Error from a MuxConn.
pub fn typed(e: &std::io::Error) -> &nri_mux::Error {
    e.get_ref()
        .and_then(|e| e.downcast_ref::<nri_mux::Error>())
        .unwrap_or_else(|| panic!("not a nri_mux::Error: {e:?}"))
}

/// Runs `peer` with a mux on `sock` on a thread and current-thread runtime
/// of its own, as a plugin or runtime in another process would (a
/// spinning reader holds its worker thread, and an in-process peer queued
/// behind it could not answer).
pub fn peer_thread<F, Fut, T>(
    sock: std::os::unix::net::UnixStream,
    peer: F,
) -> std::thread::JoinHandle<T>
where
    F: FnOnce(Mux) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move { peer(std_mux(sock)).await })
    })
}

/// A mux on a std socket (made non-blocking).
pub fn std_mux(sock: std::os::unix::net::UnixStream) -> Mux {
    sock.set_nonblocking(true).unwrap();
    Mux::new(UnixStream::from_std(sock).unwrap())
}

/// A mux whose peer (see [`peer_thread`]) answers every 64-byte request on
/// the plugin connection with the same bytes, after `delay`.
pub fn mux_with_echo(delay: Duration) -> Mux {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    peer_thread(b, move |peer| async move {
        let mut conn = peer.open(PLUGIN_SERVICE_CONN).unwrap();
        let mut buf = [0u8; 64];
        while conn.read_exact(&mut buf).await.is_ok() {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if conn.write_all(&buf).await.is_err() {
                break;
            }
        }
    });
    std_mux(a)
}

/// Sends `n` 64-byte requests and reads each 64-byte answer.
pub async fn exchange(conn: &mut MuxConn, n: usize) {
    let mut buf = [0u8; 64];
    for i in 0..n {
        conn.write_all(&[i as u8; 64]).await.unwrap();
        conn.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, [i as u8; 64]);
    }
}
