//! A client encodes its requests into a buffer it keeps between calls:
//! calls with large requests make no large allocation each (a fresh
//! allocation of a few KiB per call sends glibc's malloc down its slow
//! path). Counted by a global allocator that notes, per thread, every
//! allocation of 4 KiB or more; the peer runs on a thread of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::counting::{Counting, big_allocs};
use common::*;
use nri_ttrpc::Client;
use nri_ttrpc::proto::Response;
use tokio::io::AsyncReadExt;

#[global_allocator]
static GLOBAL: Counting = Counting;

static PAYLOAD: [u8; 6000] = [3u8; 6000];

#[tokio::test(flavor = "current_thread")]
async fn large_requests_reuse_the_clients_encoding_buffer() {
    let (client_io, peer_io) = tokio::io::duplex(DUPLEX);
    // The peer answers each request with a short payload, on its own thread.
    let peer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut peer = RawPeer::new(peer_io);
            while let Some(Ok(f)) = peer.recv().await {
                let resp = Response {
                    status: None,
                    payload: Bytes::from_static(b"ok"),
                };
                peer.send_response(f.stream_id, &resp).await;
            }
        });
    });
    // A fed client (as over the NRI multiplexer), its responses fed from a
    // fixed buffer.
    let (rd, wr) = tokio::io::split(client_io);
    let (client, mut feed) = Client::with_feed(wr);
    let feeder = tokio::spawn(async move {
        let mut rd = rd;
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => feed.data(&buf[..n]),
            }
        }
        feed.end(None);
    });
    let call = || client.call(SVC, "Echo", Bytes::from_static(&PAYLOAD), opts());
    assert_eq!(&call().await.unwrap()[..], b"ok");
    let before = big_allocs();
    for _ in 0..10 {
        assert_eq!(&call().await.unwrap()[..], b"ok");
    }
    assert_eq!(big_allocs() - before, 0, "large allocations by 10 calls");
    // Both halves of the duplex gone: the peer reads end of stream.
    feeder.abort();
    let _ = feeder.await;
    client.close();
    drop(client);
    tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
}
