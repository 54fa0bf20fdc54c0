//! One ttRPC round trip (client -> server -> client) over a unix socket pair,
//! with 64 B and 2 KiB payloads, next to a raw socket round trip of the same
//! wire size as the baseline.
//!
//! Client and server each run on their own current-thread tokio runtime on
//! their own OS thread, as a runtime and a plugin would in two processes.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::net::UnixStream as StdUnixStream;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nri_ttrpc::{CallOptions, Client, Methods, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::runtime::{Builder, Runtime};
use tokio_util::sync::CancellationToken;

const SIZES: [usize; 2] = [64, 2048];

fn rt() -> Runtime {
    Builder::new_current_thread().enable_all().build().unwrap()
}

fn socket_pair() -> (StdUnixStream, StdUnixStream) {
    let (a, b) = StdUnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// Starts a ttRPC echo server on its own thread; returns the client end.
fn spawn_server(shutdown: CancellationToken) -> (StdUnixStream, thread::JoinHandle<()>) {
    let (a, b) = socket_pair();
    let h = thread::spawn(move || {
        rt().block_on(async move {
            let mut server = Server::new();
            server
                .register(
                    "bench.Echo",
                    Methods::new().add("Echo", |_ctx, p: Bytes| async move { Ok(p) }),
                )
                .unwrap();
            let io = UnixStream::from_std(b).unwrap();
            let _ = server.serve(io, shutdown).await;
        });
    });
    (a, h)
}

/// Starts a raw echo server that reads `n` bytes and writes them back.
fn spawn_raw_echo(n: usize) -> (StdUnixStream, thread::JoinHandle<()>) {
    let (a, b) = socket_pair();
    let h = thread::spawn(move || {
        rt().block_on(async move {
            let mut io = UnixStream::from_std(b).unwrap();
            let mut buf = vec![0u8; n];
            while io.read_exact(&mut buf).await.is_ok() {
                if io.write_all(&buf).await.is_err() {
                    break;
                }
            }
        });
    });
    (a, h)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("roundtrip");
    g.measurement_time(Duration::from_secs(5));
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));

        // ttRPC round trip.
        let shutdown = CancellationToken::new();
        let (sock, server) = spawn_server(shutdown.clone());
        let client_rt = rt();
        let client = client_rt.block_on(async { Client::new(UnixStream::from_std(sock).unwrap()) });
        let payload = Bytes::from(vec![0x5a; size]);
        let opts = CallOptions::new(Duration::from_secs(5));
        g.bench_with_input(BenchmarkId::new("ttrpc", size), &size, |b, _| {
            b.iter_custom(|iters| {
                client_rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let r = client
                            .call("bench.Echo", "Echo", payload.clone(), opts.clone())
                            .await
                            .unwrap();
                        debug_assert_eq!(r.len(), size);
                    }
                    start.elapsed()
                })
            });
        });
        drop(client);
        shutdown.cancel();
        server.join().unwrap();
        drop(client_rt);

        // Raw socket round trip of the same wire size: 10-byte header plus
        // request envelope (service/method names, payload, timeout).
        let wire = size + 40;
        let (sock, server) = spawn_raw_echo(wire);
        let client_rt = rt();
        let mut io = client_rt.block_on(async { UnixStream::from_std(sock).unwrap() });
        let mut buf = vec![0x5a; wire];
        g.bench_with_input(BenchmarkId::new("raw_socket", size), &size, |b, _| {
            b.iter_custom(|iters| {
                client_rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        io.write_all(&buf).await.unwrap();
                        io.read_exact(&mut buf).await.unwrap();
                    }
                    start.elapsed()
                })
            });
        });
        drop(io);
        server.join().unwrap();
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
