//! Several logical connections over one trunk: interleaving, concurrent
//! writers, open/close rules, paused start, read backpressure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use common::*;
use nri_mux::{ConnId, Error, MAX_PAYLOAD, Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn two_conns_both_directions_interleaved() {
    let (rt, pl) = mux_pair();
    let mut rt1 = rt.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut rt2 = rt.open(RUNTIME_SERVICE_CONN).unwrap();
    let mut pl1 = pl.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut pl2 = pl.open(RUNTIME_SERVICE_CONN).unwrap();

    let big = pattern(10_000, 9);
    rt1.write_all(b"req-1").await.unwrap();
    pl2.write_all(b"register").await.unwrap();
    rt1.write_all(&big).await.unwrap();
    pl1.write_all(b"resp-1").await.unwrap();
    rt2.write_all(b"registered").await.unwrap();

    let mut b = vec![0u8; 5 + big.len()];
    pl1.read_exact(&mut b).await.unwrap();
    assert_eq!(&b[..5], b"req-1");
    assert_eq!(&b[5..], &big[..]);
    let mut b = [0u8; 8];
    rt2.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"register");
    let mut b = [0u8; 6];
    rt1.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"resp-1");
    let mut b = [0u8; 10];
    pl2.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"registered");
}

/// Reading a connection in small pieces reassembles its byte stream across
/// frame boundaries.
#[tokio::test]
async fn byte_stream_reassembly_with_small_reads() {
    let (a, b) = mux_pair();
    let mut tx = a.open(ConnId(5)).unwrap();
    let mut rx = b.open(ConnId(5)).unwrap();
    let msgs: Vec<_> = [3usize, 4096, 4097, 9000, 1]
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let expected: Vec<u8> = msgs.concat();
    let writer = tokio::spawn(async move {
        for m in &msgs {
            tx.write_all(m).await.unwrap();
        }
        tx
    });
    let mut got = Vec::new();
    let mut chunk = [0u8; 1000];
    while got.len() < expected.len() {
        let n = rx.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got, expected);
    drop(writer.await.unwrap());
}

/// Many tasks write on several connections at once; on the raw trunk the two
/// frames of a split message are always adjacent, and each connection's
/// frames carry exactly its messages in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_never_interleave_frames() {
    let (mux, mut raw) = mux_and_raw();
    let reader = tokio::spawn(async move { read_to_end(&mut raw).await });

    let sizes = |c: u32| -> Vec<usize> {
        (0..60)
            .map(|i| match (i + c as usize) % 5 {
                0 => 10,
                1 => 4096,
                2 => 4097,
                3 => 70_000,
                _ => 300_000,
            })
            .collect()
    };
    let mut tasks = Vec::new();
    for c in 1..=4u32 {
        let mut conn = mux.open(ConnId(c)).unwrap();
        let sizes = sizes(c);
        tasks.push(tokio::spawn(async move {
            for (i, n) in sizes.into_iter().enumerate() {
                conn.write_all(&pattern(n, (c * 50 + i as u32) as u8))
                    .await
                    .unwrap();
            }
            conn.flush().await.unwrap();
            conn
        }));
    }
    let mut conns = Vec::new();
    for t in tasks {
        conns.push(t.await.unwrap());
    }
    mux.close();
    let frames = parse_frames(&reader.await.unwrap());

    // Adjacency: after a 4096-byte first frame of a split message on conn c,
    // the next frame on the trunk is its second frame.
    let mut next_msg: HashMap<u32, usize> = HashMap::new();
    let mut i = 0;
    while i < frames.len() {
        let (c, ref p) = frames[i];
        let k = next_msg.entry(c).or_default();
        let want = sizes(c)[*k];
        let msg = pattern(want, (c * 50 + *k as u32) as u8);
        if want <= 4096 {
            assert_eq!(p, &msg, "conn {c} message {k}");
            i += 1;
        } else {
            assert_eq!(p, &msg[..4096], "conn {c} message {k} first frame");
            let (c2, ref p2) = frames[i + 1];
            assert_eq!(
                c2, c,
                "frame of another connection between the two frames of conn {c} message {k}"
            );
            assert_eq!(p2, &msg[4096..], "conn {c} message {k} second frame");
            i += 2;
        }
        *k += 1;
    }
    for c in 1..=4 {
        assert_eq!(next_msg[&c], 60);
    }
}

#[tokio::test]
async fn open_rules() {
    let (mux, _raw) = mux_and_raw();
    assert!(matches!(mux.open(ConnId(0)), Err(Error::ReservedConnId)));
    let c = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    assert_eq!(c.id(), PLUGIN_SERVICE_CONN);
    assert!(matches!(
        mux.open(PLUGIN_SERVICE_CONN),
        Err(Error::AlreadyOpen { conn }) if conn == PLUGIN_SERVICE_CONN
    ));
    drop(c);
    let _again = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    mux.close();
    assert!(matches!(mux.open(RUNTIME_SERVICE_CONN), Err(Error::Closed)));
}

/// With `new_paused`, frames that arrive before the connection is opened
/// are kept until `start`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_mux_keeps_early_frames() {
    let (a, mut raw) = tokio::net::UnixStream::pair().unwrap();
    raw.write_all(&frame(2, b"early")).await.unwrap();
    let mux = Mux::new_paused(a);
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    mux.start();
    let mut b = [0u8; 5];
    conn.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"early");
    assert_eq!(mux.stats().dropped_frames, 0);
}

/// A connection whose owner does not read pauses the trunk, and nothing is
/// lost when the owner catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_gets_backpressure_not_drops() {
    let (a, b) = mux_pair();
    let mut tx1 = a.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut tx2 = a.open(RUNTIME_SERVICE_CONN).unwrap();
    let mut rx1 = b.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut rx2 = b.open(RUNTIME_SERVICE_CONN).unwrap();
    let msgs: Vec<_> = (0..4).map(|i| pattern(MAX_PAYLOAD, i)).collect();
    let total: usize = msgs.iter().map(Vec::len).sum();
    let expected = msgs.concat();
    let writer = tokio::spawn(async move {
        for m in &msgs {
            tx1.write_all(m).await.unwrap();
        }
        tx2.write_all(b"after").await.unwrap();
        tx2.flush().await.unwrap();
        (tx1, tx2)
    });
    // 16 MiB on conn 1 is more than its read buffer takes: the trunk reader
    // pauses (conn 2's message waits behind, head-of-line) until we read.
    let mut got = vec![0u8; total];
    rx1.read_exact(&mut got).await.unwrap();
    assert!(got == expected);
    let mut b5 = [0u8; 5];
    rx2.read_exact(&mut b5).await.unwrap();
    assert_eq!(&b5, b"after");
    let _ = writer.await.unwrap();
    assert_eq!(b.stats().dropped_frames, 0);
}

/// Split halves work from different tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_halves() {
    let (a, b) = mux_pair();
    let (mut r, mut w) = a.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let mut peer = b.open(PLUGIN_SERVICE_CONN).unwrap();
    let echo = tokio::spawn(async move {
        let mut buf = [0u8; 4];
        peer.read_exact(&mut buf).await.unwrap();
        peer.write_all(&buf).await.unwrap();
        peer
    });
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 4];
        r.read_exact(&mut buf).await.unwrap();
        buf
    });
    w.write_all(b"ping").await.unwrap();
    assert_eq!(&reader.await.unwrap(), b"ping");
    drop(echo.await.unwrap());
}
