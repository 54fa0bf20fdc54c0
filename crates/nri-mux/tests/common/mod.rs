//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use nri_mux::Mux;
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

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
