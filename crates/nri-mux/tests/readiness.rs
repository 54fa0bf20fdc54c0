//! The trunk reader forgets the socket's readiness after a short read and
//! waits for the next readiness event; no data may be left behind by that.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{frame, pattern};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Ping-pong of many small messages, each arriving in several pieces
/// (header split, payload split), so the reader sees a short read before
/// every piece. A lost wake-up would hang; the timeout turns that into a
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_after_short_reads_are_all_delivered() {
    let (a, mut raw) = UnixStream::pair().unwrap();
    let mux = Mux::new_paused(a);
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    mux.start();

    let run = async {
        for round in 0..500u32 {
            let len = 1 + (round as usize * 7) % 300;
            let msg = pattern(len, round as u8);
            let bytes = frame(PLUGIN_SERVICE_CONN.0, &msg);
            // Pieces: 3 bytes of header, the rest of the header and a bit of
            // payload, the rest.
            let cut1 = 3;
            let cut2 = (8 + len / 2).min(bytes.len());
            for piece in [&bytes[..cut1], &bytes[cut1..cut2], &bytes[cut2..]] {
                if !piece.is_empty() {
                    raw.write_all(piece).await.unwrap();
                    tokio::task::yield_now().await;
                }
            }
            let mut got = vec![0u8; len];
            conn.read_exact(&mut got).await.unwrap();
            assert_eq!(got, msg, "round {round}");
            // Answer, so the next round starts after the reader went idle.
            conn.write_all(&got[..1]).await.unwrap();
            let mut answer = [0u8; 9];
            raw.read_exact(&mut answer).await.unwrap();
            assert_eq!(answer[8], msg[0]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("a message was not delivered (lost readiness wake-up?)");
    assert_eq!(mux.stats().frames_received, 500);
}

/// Several frames that arrive in one read, followed later by more: all are
/// delivered, in order.
#[tokio::test(flavor = "current_thread")]
async fn batch_then_more() {
    let (a, mut raw) = UnixStream::pair().unwrap();
    let mux = Mux::new_paused(a);
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    mux.start();
    let mut batch = Vec::new();
    for i in 0..10u8 {
        batch.extend(frame(PLUGIN_SERVICE_CONN.0, &[i; 5]));
    }
    raw.write_all(&batch).await.unwrap();
    let mut got = [0u8; 50];
    conn.read_exact(&mut got).await.unwrap();
    for i in 0..10u8 {
        assert_eq!(got[i as usize * 5..][..5], [i; 5]);
    }
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"later"))
        .await
        .unwrap();
    let mut later = [0u8; 5];
    conn.read_exact(&mut later).await.unwrap();
    assert_eq!(&later, b"later");
}
