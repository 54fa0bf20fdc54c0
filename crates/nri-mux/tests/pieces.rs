//! Large frames are passed on in pieces as their bytes arrive: the mux
//! never holds a large frame whole, so its owner can skip what it does not
//! want as it comes, and a frame for a connection that is not open costs
//! only the reading.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_mux::{ConnId, Error, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);
const LEN: usize = 1 << 20;

/// The header of a frame of `len` bytes for `id`.
fn header(id: u32, len: usize) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(&(len as u32).to_be_bytes());
    v
}

#[tokio::test]
async fn a_large_frame_reaches_its_reader_before_it_is_complete() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let payload = pattern(LEN, 9);
    let (head, tail) = payload.split_at(200 * 1024);
    raw.write_all(&header(1, LEN)).await.unwrap();
    raw.write_all(head).await.unwrap();
    // Only part of the frame was sent: a mux that waited for the whole
    // frame would never hand this out.
    let mut got = vec![0u8; head.len()];
    tokio::time::timeout(WAIT, conn.read_exact(&mut got))
        .await
        .expect("the first part of the frame was passed on before the rest came")
        .unwrap();
    assert!(got == head);
    raw.write_all(tail).await.unwrap();
    raw.write_all(&frame(1, b"next")).await.unwrap();
    let mut got = vec![0u8; tail.len() + 4];
    conn.read_exact(&mut got).await.unwrap();
    assert!(got[..tail.len()] == *tail);
    assert_eq!(&got[tail.len()..], b"next");
    let s = mux.stats();
    assert_eq!(s.frames_received, 2, "a frame in pieces is counted once");
    assert_eq!(s.bytes_received, (LEN + 4) as u64);
}

#[tokio::test]
async fn a_large_frame_for_a_conn_that_is_not_open_is_dropped_as_it_comes() {
    let (mux, mut raw) = mux_and_raw();
    let mut c1 = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let payload = pattern(LEN, 3);
    let (head, tail) = payload.split_at(300 * 1024);
    raw.write_all(&header(7, LEN)).await.unwrap();
    raw.write_all(head).await.unwrap();
    until(&mux, "the first part was read", |s| {
        s.bytes_received >= head.len() as u64
    })
    .await;
    assert_eq!(mux.stats().dropped_frames, 1);
    // Opened in the middle of the frame: the rest of it is still dropped,
    // the next frame is delivered.
    let mut c7 = mux.open(ConnId(7)).unwrap();
    raw.write_all(tail).await.unwrap();
    raw.write_all(&frame(7, b"seven")).await.unwrap();
    raw.write_all(&frame(1, b"one")).await.unwrap();
    let mut b = [0u8; 5];
    tokio::time::timeout(WAIT, c7.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&b, b"seven");
    let mut b = [0u8; 3];
    c1.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"one");
    let s = mux.stats();
    assert_eq!(s.dropped_frames, 1, "one frame dropped, reported once");
    assert_eq!(s.dropped_bytes, LEN as u64);
    assert!(matches!(
        s.last_dropped,
        Some(Error::UnknownConn { conn: ConnId(7), len }) if len == LEN
    ));
    assert_eq!(s.frames_received, 3);
}

#[tokio::test]
async fn a_trunk_ending_inside_a_large_frame_is_truncated() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    raw.write_all(&header(1, LEN)).await.unwrap();
    raw.write_all(&pattern(100 * 1024, 1)).await.unwrap();
    drop(raw);
    assert!(matches!(
        mux.closed().await,
        Err(Error::TruncatedFrame { .. })
    ));
    // What came is delivered, then the error.
    let mut got = vec![0u8; 100 * 1024];
    conn.read_exact(&mut got).await.unwrap();
    assert!(conn.read(&mut [0u8; 8]).await.is_err());
}
