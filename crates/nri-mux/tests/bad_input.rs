//! Bad input on the trunk: truncated frames, oversized lengths, unknown
//! connection ids, peer close. Typed errors, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;

use common::*;
use nri_mux::{ConnId, Error, MAX_PAYLOAD, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn truncated_header_then_eof() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    raw.write_all(&[0, 0, 0]).await.unwrap();
    drop(raw);
    assert!(matches!(
        mux.closed().await,
        Err(Error::TruncatedFrame { buffered: 3 })
    ));
    let err = conn.read(&mut [0u8; 8]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert!(matches!(typed(&err), Error::TruncatedFrame { .. }));
}

#[tokio::test]
async fn truncated_payload_then_eof_after_good_frame() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut bytes = frame(1, b"whole");
    bytes.extend_from_slice(&frame(1, b"0123456789")[..12]);
    raw.write_all(&bytes).await.unwrap();
    drop(raw);
    assert!(matches!(
        mux.closed().await,
        Err(Error::TruncatedFrame { buffered: 12 })
    ));
    // Data received before the failure is still delivered, then the error.
    let mut b = [0u8; 5];
    conn.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"whole");
    assert!(conn.read(&mut [0u8; 8]).await.is_err());
}

#[tokio::test]
async fn oversized_length_closes_trunk_with_typed_error() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    let len = (MAX_PAYLOAD + 1) as u32;
    let mut hdr = vec![0, 0, 0, 2];
    hdr.extend_from_slice(&len.to_be_bytes());
    raw.write_all(&hdr).await.unwrap();

    let err = mux.closed().await.unwrap_err();
    assert!(
        matches!(err, Error::OversizedFrame { conn, len: l, max } if conn == RUNTIME_SERVICE_CONN && l == len && max == MAX_PAYLOAD),
        "{err:?}"
    );
    assert!(mux.is_closed());
    let rerr = conn.read(&mut [0u8; 8]).await.unwrap_err();
    assert_eq!(rerr.kind(), ErrorKind::InvalidData);
    assert!(matches!(typed(&rerr), Error::OversizedFrame { .. }));
    let werr = conn.write(b"x").await.unwrap_err();
    assert!(matches!(typed(&werr), Error::OversizedFrame { .. }));
    assert!(matches!(
        mux.open(PLUGIN_SERVICE_CONN),
        Err(Error::OversizedFrame { .. })
    ));
    // The socket was shut down: the peer sees end of file.
    assert_eq!(read_to_end(&mut raw).await, Vec::<u8>::new());
}

#[tokio::test]
async fn max_length_is_accepted() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let payload = pattern(MAX_PAYLOAD, 4);
    let writer = tokio::spawn(async move {
        raw.write_all(&frame(1, &payload)).await.unwrap();
        raw
    });
    let mut got = vec![0u8; MAX_PAYLOAD];
    conn.read_exact(&mut got).await.unwrap();
    assert!(got == pattern(MAX_PAYLOAD, 4));
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn unknown_conn_is_dropped_and_reported() {
    let (mux, mut raw) = mux_and_raw();
    let mut c1 = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut bytes = frame(7, b"nobody");
    bytes.extend_from_slice(&frame(0, b"reserved"));
    bytes.extend_from_slice(&frame(1, b"mine"));
    raw.write_all(&bytes).await.unwrap();

    let mut b = [0u8; 4];
    c1.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"mine");
    let s = mux.stats();
    assert_eq!(s.dropped_frames, 2);
    assert_eq!(s.dropped_bytes, 6 + 8);
    assert_eq!(s.frames_received, 3);
    assert!(matches!(
        s.last_dropped,
        Some(Error::UnknownConn {
            conn: ConnId(0),
            len: 8
        })
    ));
    assert!(!mux.is_closed());

    // The trunk keeps working both ways.
    c1.write_all(b"reply").await.unwrap();
    assert_eq!(read_n(&mut raw, 13).await, frame(1, b"reply"));
}

#[tokio::test]
async fn the_drop_observer_is_told_of_every_dropped_frame_once() {
    let (mux, mut raw) = mux_and_raw();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let observer = seen.clone();
    assert!(mux.on_dropped_frame(move |conn, len| observer.lock().unwrap().push((conn, len))));
    assert!(!mux.on_dropped_frame(|_, _| {}), "the first observer stays");
    let mut c2 = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    // A frame larger than one read, for connection 1 (not open): told once.
    let big = pattern(MAX_PAYLOAD, 1);
    let mut bytes = frame(1, &big);
    bytes.extend_from_slice(&frame(9, b"stray"));
    bytes.extend_from_slice(&frame(2, b"mine"));
    let writer = tokio::spawn(async move {
        raw.write_all(&bytes).await.unwrap();
        raw
    });
    let mut b = [0u8; 4];
    c2.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"mine");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(PLUGIN_SERVICE_CONN, MAX_PAYLOAD), (ConnId(9), 5)]
    );
    assert_eq!(mux.stats().dropped_frames, 2);
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn frames_for_a_dropped_conn_are_dropped() {
    let (mux, mut raw) = mux_and_raw();
    let c2 = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    let mut c1 = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    drop(c2);
    let mut bytes = frame(2, b"late");
    bytes.extend_from_slice(&frame(1, b"ok"));
    raw.write_all(&bytes).await.unwrap();
    let mut b = [0u8; 2];
    c1.read_exact(&mut b).await.unwrap();
    assert_eq!(mux.stats().dropped_frames, 1);
}

#[tokio::test]
async fn peer_close_is_clean_eof() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    raw.write_all(&frame(1, b"last words")).await.unwrap();
    drop(raw);
    mux.closed().await.unwrap();
    let mut v = Vec::new();
    conn.read_to_end(&mut v).await.unwrap();
    assert_eq!(v, b"last words");
    let err = conn.write(b"x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    assert!(matches!(typed(&err), Error::PeerClosed));
    assert!(matches!(
        mux.open(RUNTIME_SERVICE_CONN),
        Err(Error::PeerClosed)
    ));
}

#[tokio::test]
async fn local_close_ends_reads_and_fails_writes() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let pending_read = tokio::spawn(async move {
        let mut v = Vec::new();
        conn.read_to_end(&mut v).await.map(|_| (v, conn))
    });
    mux.close();
    let (v, mut conn) = pending_read.await.unwrap().unwrap();
    assert!(v.is_empty());
    let err = conn.write(b"x").await.unwrap_err();
    assert!(matches!(typed(&err), Error::Closed));
    assert!(matches!(conn.trunk_closed().await, Err(Error::Closed)));
    assert_eq!(read_to_end(&mut raw).await, Vec::<u8>::new());
}

#[tokio::test]
async fn dropping_mux_and_conns_closes_trunk() {
    let (mux, mut raw) = mux_and_raw();
    let conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    drop(mux);
    // The connection keeps the trunk alive.
    let mut c = conn;
    c.write_all(b"still").await.unwrap();
    assert_eq!(read_n(&mut raw, 13).await, frame(1, b"still"));
    drop(c);
    assert_eq!(read_to_end(&mut raw).await, Vec::<u8>::new());
}

#[tokio::test]
async fn shutdown_stops_writes_on_that_conn_only() {
    let (mux, mut raw) = mux_and_raw();
    let mut c1 = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut c2 = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    c1.shutdown().await.unwrap();
    let err = c1.write(b"x").await.unwrap_err();
    assert!(matches!(typed(&err), Error::WriteShutdown { .. }));
    c2.write_all(b"y").await.unwrap();
    assert_eq!(read_n(&mut raw, 9).await, frame(2, b"y"));
}
