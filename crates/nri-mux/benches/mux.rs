//! Ping-pong round trips of 64 B and 2 KiB messages: over a `Mux`
//! connection on a socketpair, next to a raw socketpair of the same sizes.
//! The echo side runs on its own thread and runtime, like a peer process.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::runtime::{Builder, Runtime};

fn rt() -> Runtime {
    Builder::new_current_thread().enable_all().build().unwrap()
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, size: usize) {
    let mut buf = vec![0u8; size];
    while s.read_exact(&mut buf).await.is_ok() {
        if s.write_all(&buf).await.is_err() {
            break;
        }
    }
}

/// Starts the echo peer on its own thread; `mux` selects a Mux connection
/// or the raw stream.
fn spawn_peer(
    std_end: std::os::unix::net::UnixStream,
    size: usize,
    mux: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        rt().block_on(async move {
            std_end.set_nonblocking(true).unwrap();
            let s = UnixStream::from_std(std_end).unwrap();
            if mux {
                let m = Mux::new(s);
                let c = m.open(PLUGIN_SERVICE_CONN).unwrap();
                echo(c, size).await;
            } else {
                echo(s, size).await;
            }
        })
    })
}

async fn ping_pong<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    msg: &[u8],
    buf: &mut [u8],
    iters: u64,
) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        s.write_all(msg).await.unwrap();
        s.read_exact(buf).await.unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("round_trip");
    for size in [64usize, 2048] {
        g.throughput(Throughput::Bytes(size as u64 * 2));
        let msg = vec![0x5au8; size];

        // raw socketpair
        {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let peer = spawn_peer(b, size, false);
            let rt = rt();
            let mut s = rt.block_on(async {
                a.set_nonblocking(true).unwrap();
                UnixStream::from_std(a).unwrap()
            });
            let mut buf = vec![0u8; size];
            g.bench_function(BenchmarkId::new("raw", size), |bch| {
                bch.iter_custom(|iters| rt.block_on(ping_pong(&mut s, &msg, &mut buf, iters)))
            });
            drop(s);
            peer.join().unwrap();
        }

        // Mux connection on a socketpair
        {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let peer = spawn_peer(b, size, true);
            let rt = rt();
            let (mux, mut conn) = rt.block_on(async {
                a.set_nonblocking(true).unwrap();
                let m = Mux::new(UnixStream::from_std(a).unwrap());
                let c = m.open(PLUGIN_SERVICE_CONN).unwrap();
                (m, c)
            });
            let mut buf = vec![0u8; size];
            g.bench_function(BenchmarkId::new("mux", size), |bch| {
                bch.iter_custom(|iters| rt.block_on(ping_pong(&mut conn, &msg, &mut buf, iters)))
            });
            rt.block_on(async {
                mux.close();
                drop(conn);
            });
            peer.join().unwrap();
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
