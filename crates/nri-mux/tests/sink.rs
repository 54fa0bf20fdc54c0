//! Connection sinks (`MuxReadHalf::into_sink`): the trunk reader hands a
//! connection's data to the sink in order, including data that arrived
//! before the sink was set, tells it once how the trunk ended, and other
//! connections keep their read halves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use nri_mux::{ConnSink, Error, Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::Notify;

#[derive(Default)]
struct Seen {
    data: Vec<u8>,
    ends: Vec<Option<String>>,
}

/// Records what it is given and signals each call.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
}

impl Recorder {
    async fn wait_for(&self, what: impl Fn(&Seen) -> bool) {
        loop {
            let changed = self.changed.notified();
            if what(&self.seen.lock().unwrap()) {
                return;
            }
            changed.await;
        }
    }
}

impl ConnSink for Recorder {
    fn data(&mut self, bytes: Bytes) {
        self.seen.lock().unwrap().data.extend_from_slice(&bytes);
        self.changed.notify_waiters();
    }

    fn ended(&mut self, error: Option<&Error>) {
        self.seen
            .lock()
            .unwrap()
            .ends
            .push(error.map(ToString::to_string));
        self.changed.notify_waiters();
    }
}

/// Opens the plugin connection of `m` with a recording sink.
fn recorded(m: &Mux) -> (Recorder, nri_mux::MuxWriteHalf) {
    let (rd, wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let rec = Recorder::default();
    rd.into_sink(rec.clone());
    (rec, wr)
}

#[tokio::test]
async fn a_sink_gets_queued_and_later_data_in_order_and_one_clean_end() {
    let (a, mut raw) = UnixStream::pair().unwrap();
    let m = Mux::new_paused(a);
    let conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut other = m.open(RUNTIME_SERVICE_CONN).unwrap();
    // Two frames arrive (and are queued) before the sink is set.
    raw.write_all(&frame(1, b"first,")).await.unwrap();
    raw.write_all(&frame(2, b"other")).await.unwrap();
    raw.write_all(&frame(1, b"second,")).await.unwrap();
    m.start();
    let mut buf = [0u8; 5];
    other.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"other");

    let (rd, mut wr) = conn.into_split();
    let rec = Recorder::default();
    rd.into_sink(rec.clone());
    raw.write_all(&frame(1, b"third")).await.unwrap();
    rec.wait_for(|s| s.data.len() == 18).await;
    assert_eq!(rec.seen.lock().unwrap().data, b"first,second,third");

    // The write half still writes.
    wr.write_all(b"answer").await.unwrap();
    assert_eq!(
        parse_frames(&read_n(&mut raw, 14).await),
        [(1, b"answer".to_vec())]
    );

    // A clean end from the peer: told once, without an error.
    drop(raw);
    rec.wait_for(|s| !s.ends.is_empty()).await;
    m.closed().await.unwrap();
    m.close();
    assert_eq!(rec.seen.lock().unwrap().ends, [None]);
}

#[tokio::test]
async fn a_sink_is_told_why_the_trunk_failed() {
    let (m, mut raw) = mux_and_raw();
    let (rec, _wr) = recorded(&m);
    // A header announcing more than the largest payload ends the trunk.
    let mut bad = 1u32.to_be_bytes().to_vec();
    bad.extend_from_slice(&u32::MAX.to_be_bytes());
    raw.write_all(&bad).await.unwrap();
    rec.wait_for(|s| !s.ends.is_empty()).await;
    let ends = rec.seen.lock().unwrap().ends.clone();
    assert_eq!(ends.len(), 1);
    let why = ends[0].as_deref().expect("an error");
    assert!(why.contains("4194314"), "{why}");
}

#[tokio::test]
async fn a_sink_set_after_the_trunk_ended_is_told_at_once() {
    let (m, raw) = mux_and_raw();
    let (rd, _wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    drop(raw);
    m.closed().await.unwrap();
    let rec = Recorder::default();
    rd.into_sink(rec.clone());
    assert_eq!(rec.seen.lock().unwrap().ends, [None]);
}

#[tokio::test]
async fn frames_after_the_write_half_is_dropped_are_dropped_and_counted() {
    let (m, mut raw) = mux_and_raw();
    let (rec, wr) = recorded(&m);
    raw.write_all(&frame(1, b"kept")).await.unwrap();
    rec.wait_for(|s| s.data.len() == 4).await;
    drop(wr);
    raw.write_all(&frame(1, b"late")).await.unwrap();
    // A frame on another, open, connection shows the reader got past it.
    let mut other = m.open(RUNTIME_SERVICE_CONN).unwrap();
    raw.write_all(&frame(2, b"x")).await.unwrap();
    let mut b = [0u8; 1];
    other.read_exact(&mut b).await.unwrap();
    assert_eq!(rec.seen.lock().unwrap().data, b"kept");
    assert_eq!(m.stats().dropped_frames, 1);
}

/// A sink that owns a write half of its own trunk, as a server answering
/// from the trunk reader does.
struct Answering {
    _wr: nri_mux::MuxWriteHalf,
    dropped: Arc<Notify>,
}

impl ConnSink for Answering {
    fn data(&mut self, _bytes: Bytes) {}
    fn ended(&mut self, _error: Option<&Error>) {}
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.dropped.notify_one();
    }
}

#[tokio::test]
async fn a_sink_holding_its_own_trunk_is_dropped_when_the_trunk_ends() {
    let (m, mut raw) = mux_and_raw();
    let (rd, wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let dropped = Arc::new(Notify::new());
    rd.into_sink(Answering {
        _wr: wr,
        dropped: Arc::clone(&dropped),
    });
    // The sink keeps the trunk open although every other handle is gone...
    drop(m);
    raw.write_all(&frame(1, b"still served")).await.unwrap();
    tokio::task::yield_now().await;
    // ...until the peer closes it: then the sink goes, and with it the
    // last handle, so the socket is closed (the peer reads end of file).
    raw.shutdown().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), dropped.notified())
        .await
        .expect("the sink was not dropped when the trunk ended");
    assert_eq!(read_to_end(&mut raw).await, b"");
}

/// A sink that closes its own trunk as soon as data arrives.
struct Closing {
    mux: Mux,
    rec: Recorder,
}

impl ConnSink for Closing {
    fn data(&mut self, bytes: Bytes) {
        self.rec.data(bytes);
        self.mux.close();
    }

    fn ended(&mut self, error: Option<&Error>) {
        self.rec.ended(error);
    }
}

#[tokio::test]
async fn a_sink_may_close_its_own_trunk_from_within_data() {
    let (m, mut raw) = mux_and_raw();
    let (rd, _wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let rec = Recorder::default();
    rd.into_sink(Closing {
        mux: m,
        rec: rec.clone(),
    });
    raw.write_all(&frame(1, b"bye")).await.unwrap();
    // No deadlock: the sink is told once that the trunk ended (a local
    // close: no error), after its data, and the peer sees the end.
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        rec.wait_for(|s| !s.ends.is_empty()),
    )
    .await
    .expect("the sink was not told that its trunk ended");
    assert_eq!(rec.seen.lock().unwrap().data, b"bye");
    assert_eq!(rec.seen.lock().unwrap().ends, [None]);
    assert_eq!(read_to_end(&mut raw).await, b"");
}
