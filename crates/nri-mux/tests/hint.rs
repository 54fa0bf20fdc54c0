//! Wake hints (`Mux::accept_wake_hints`, `Mux::send_wake_hint`): our
//! extension frames on the wire, byte for byte; a reader that accepts
//! hints polls for the announced message, one that does not ignores them;
//! unknown extension frames are ignored. Its own test binary, and its
//! tests take turns: one reader of a process polls at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_mux::{EXTENSION_CONN, Error, Extension, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Taken by each test: only one reader of the process may poll at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The announcement and the hint, as they go over the wire.
const ACCEPTED: [u8; 9] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1];
const HINT: [u8; 9] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 2];

#[test]
fn extension_frames_are_nine_bytes_on_the_highest_connection_id() {
    assert_eq!(EXTENSION_CONN.get(), u32::MAX);
    assert_eq!(Extension::WakeHintsAccepted.frame(), ACCEPTED);
    assert_eq!(Extension::WakeHint.frame(), HINT);
    assert_eq!(Extension::FRAME_LEN, 9);
    assert_eq!(
        Extension::from_payload(&[1]),
        Some(Extension::WakeHintsAccepted)
    );
    assert_eq!(Extension::from_payload(&[2]), Some(Extension::WakeHint));
    for unknown in [&[][..], &[0], &[3], &[2, 2], &[1, 0]] {
        assert_eq!(Extension::from_payload(unknown), None, "{unknown:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_go_out_only_once_the_peer_has_announced_that_it_takes_them() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();

    // Our announcement is the first thing on the wire.
    assert!(m.accept_wake_hints());
    assert_eq!(read_n(&mut raw, 9).await, ACCEPTED);

    // The peer has said nothing: no hint is sent.
    assert!(!m.peer_accepts_wake_hints());
    assert!(!m.send_wake_hint());
    assert_eq!(m.latency_stats().wake_hints_sent, 0);

    // The peer announces, then sends a message: once the message is read,
    // so is the announcement before it.
    let mut bytes = ACCEPTED.to_vec();
    bytes.extend(frame(PLUGIN_SERVICE_CONN.0, b"after"));
    raw.write_all(&bytes).await.unwrap();
    let mut got = [0u8; 5];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"after");
    assert!(m.peer_accepts_wake_hints());

    // Now a hint goes out as one 9-byte frame, before the message after it.
    assert!(m.send_wake_hint());
    conn.write_all(b"msg").await.unwrap();
    let mut want = HINT.to_vec();
    want.extend(frame(PLUGIN_SERVICE_CONN.0, b"msg"));
    assert_eq!(read_n(&mut raw, want.len()).await, want);
    let s = m.latency_stats();
    assert_eq!(s.wake_hints_sent, 1, "{s:?}");
    // The announcement was read as a frame, not dropped as one for a
    // connection that is not open.
    let s = m.stats();
    assert_eq!((s.frames_received, s.dropped_frames), (2, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_takes_hints_polls_for_the_announced_message() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    // Long enough that the message below, written once the hint has been
    // read, always comes while the reader polls.
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_secs(5),
    });
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    assert!(m.accept_wake_hints());
    assert_eq!(read_n(&mut raw, 9).await, ACCEPTED);

    raw.write_all(&HINT).await.unwrap();
    until_latency(&m, "the hint was read", |s| s.wake_hints_received == 1).await;
    let payload = pattern(3000, 1);
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, &payload))
        .await
        .unwrap();
    let mut got = vec![0u8; payload.len()];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(got, payload);
    let s = m.latency_stats();
    assert_eq!((s.hint_hits, s.hint_misses), (1, 0), "{s:?}");
    // The hint is not a spin after a write of ours.
    assert_eq!((s.spin_hits, s.spin_misses), (0, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_that_nothing_follows_runs_out_and_the_reader_parks() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_millis(1),
    });
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    assert!(m.accept_wake_hints());
    assert_eq!(read_n(&mut raw, 9).await, ACCEPTED);

    raw.write_all(&HINT).await.unwrap();
    until_latency(&m, "the poll ran out", |s| s.hint_misses == 1).await;
    // The parked reader still gets what comes later.
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"late"))
        .await
        .unwrap();
    let mut got = [0u8; 4];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"late");
    assert_eq!(m.latency_stats().hint_hits, 0);

    // After a miss, the next hint is not polled after (one in two now).
    raw.write_all(&HINT).await.unwrap();
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"next"))
        .await
        .unwrap();
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"next");
    let s = m.latency_stats();
    assert_eq!(s.wake_hints_received, 2, "{s:?}");
    assert_eq!((s.hint_hits, s.hint_misses), (0, 1), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_are_ignored_by_a_reader_that_did_not_accept_them() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_secs(5),
    });
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();

    raw.write_all(&HINT).await.unwrap();
    until_latency(&m, "the hint was read", |s| s.wake_hints_received == 1).await;
    raw.write_all(&frame(PLUGIN_SERVICE_CONN.0, b"x"))
        .await
        .unwrap();
    let mut got = [0u8; 1];
    conn.read_exact(&mut got).await.unwrap();
    let s = m.latency_stats();
    assert_eq!((s.hint_hits, s.hint_misses), (0, 0), "{s:?}");
    assert_eq!(m.stats().dropped_frames, 0, "{:?}", m.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_extension_frames_are_ignored_and_the_id_cannot_be_opened() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (m, mut raw) = mux_and_raw();
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    assert!(matches!(m.open(EXTENSION_CONN), Err(Error::ReservedConnId)));

    let mut bytes = Vec::new();
    for payload in [&[][..], &[0], &[9], &[1, 1], &pattern(100, 3)[..]] {
        bytes.extend(frame(EXTENSION_CONN.0, payload));
    }
    bytes.extend(frame(PLUGIN_SERVICE_CONN.0, b"still here"));
    raw.write_all(&bytes).await.unwrap();
    let mut got = [0u8; 10];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"still here");
    let s = m.stats();
    assert_eq!((s.frames_received, s.dropped_frames), (6, 0), "{s:?}");
    let s = m.latency_stats();
    assert_eq!(s.wake_hints_received, 0, "{s:?}");
    assert!(!m.peer_accepts_wake_hints());
    assert!(!m.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_muxes_agree_on_hints_and_a_hinted_peer_catches_the_next_request() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    // The "plugin": takes hints, answers each 16-byte request.
    let plugin = peer_thread(b, |mux| async move {
        mux.set_read_strategy(nri_mux::ReadStrategy::Spin {
            budget: Duration::from_secs(5),
        });
        assert!(mux.accept_wake_hints());
        let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
        let mut buf = [0u8; 16];
        for _ in 0..2 {
            conn.read_exact(&mut buf).await.unwrap();
            conn.write_all(&buf).await.unwrap();
        }
        (mux.latency_stats(), mux.stats())
    });
    // The "runtime".
    let m = std_mux(a);
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut buf = [7u8; 16];
    conn.write_all(&buf).await.unwrap();
    conn.read_exact(&mut buf).await.unwrap();
    assert!(m.peer_accepts_wake_hints());

    // Hint, then the request: they may be read together (nothing to poll
    // for then) or apart (the poll catches the request); with a budget of
    // seconds the poll never runs out.
    assert!(m.send_wake_hint());
    conn.write_all(&buf).await.unwrap();
    conn.read_exact(&mut buf).await.unwrap();
    drop(conn);
    m.close();
    let (s, trunk) = plugin.join().unwrap();
    assert_eq!(s.wake_hints_received, 1, "{s:?}");
    assert_eq!(s.hint_misses, 0, "{s:?}");
    assert!(s.hint_hits <= 1, "{s:?}");
    assert_eq!(trunk.dropped_frames, 0, "{trunk:?}");
    assert_eq!(m.latency_stats().wake_hints_sent, 1);
}
