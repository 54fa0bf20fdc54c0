//! The trunk reader waits briefly for the rest of a message it got part
//! of (see `ReadStrategy::Spin`), and parks when the rest is late,
//! losing nothing. Its own test binary, and its tests take turns: one
//! reader of a process waits or spins at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nri_mux::{ConnSink, Error, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Taken by each test: only one reader of the process may wait at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_rest_of_a_frame_is_waited_for_then_read_after_parking() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_micros(100),
    });
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    let payload = pattern(5000, 7);
    let bytes = frame(PLUGIN_SERVICE_CONN.0, &payload);

    // A header and part of the payload; the rest only once the reader has
    // given up waiting for it.
    raw.write_all(&bytes[..8 + 100]).await.unwrap();
    until_latency(&m, "the reader waited for the rest", |s| s.rest_misses >= 1).await;
    raw.write_all(&bytes[8 + 100..]).await.unwrap();
    let mut got = vec![0u8; payload.len()];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(got, payload);

    // A header alone: the reader waits again, the message still arrives.
    let misses = m.latency_stats().rest_misses;
    raw.write_all(&bytes[..8]).await.unwrap();
    until_latency(&m, "a second wait", |s| s.rest_misses > misses).await;
    raw.write_all(&bytes[8..]).await.unwrap();
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(got, payload);
    let s = m.stats();
    assert_eq!(s.frames_received, 2, "{s:?}");

    // Spinning off: no waiting for the rest either.
    let (m, mut raw) = mux_and_raw();
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    raw.write_all(&bytes[..8]).await.unwrap();
    raw.write_all(&bytes[8..]).await.unwrap();
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(got, payload);
    let s = m.latency_stats();
    assert_eq!((s.rest_hits, s.rest_misses), (0, 0), "{s:?}");
}

/// A sink that holds an unfinished message until it has `want` bytes.
struct Partial {
    got: Arc<Mutex<Vec<u8>>>,
    want: usize,
}

impl ConnSink for Partial {
    fn data(&mut self, bytes: Bytes) {
        self.got.lock().unwrap().extend_from_slice(&bytes);
    }

    fn ended(&mut self, _error: Option<&Error>) {}

    fn holds_partial(&self) -> bool {
        self.got.lock().unwrap().len() < self.want
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_holding_part_of_a_message_makes_the_reader_wait_for_the_rest() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_micros(100),
    });
    let (rd, _wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let got = Arc::new(Mutex::new(Vec::new()));
    rd.into_sink(Partial {
        got: got.clone(),
        want: 10,
    });
    // Complete mux frames, but the sink's message is unfinished after the
    // first one: the reader waits for more, then parks.
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"abcd"))
        .await
        .unwrap();
    until_latency(&m, "the reader waited for the rest", |s| s.rest_misses >= 1).await;
    assert_eq!(m.stats().frames_received, 1);
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"efghij"))
        .await
        .unwrap();
    until(&m, "the second frame", |_| got.lock().unwrap().len() == 10).await;
    assert_eq!(&got.lock().unwrap()[..], b"abcdefghij");
    // The message is complete now: no wait after the second frame.
    let misses = m.latency_stats().rest_misses;
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"k"))
        .await
        .unwrap();
    until(&m, "the third frame", |_| got.lock().unwrap().len() == 11).await;
    assert_eq!(m.latency_stats().rest_misses, misses);
}
