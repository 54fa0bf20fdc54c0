//! The reader's adaptive spin (`Mux::set_spin_budget`): off by default,
//! catches quick answers, and backs off for a peer that answers slowly. One test: at most one reader of a process spins at
//! a time, so scenarios running side by side would take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_mux::{Mux, MuxConn, PLUGIN_SERVICE_CONN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `n` 64-byte requests and reads each 64-byte answer.
async fn exchange(conn: &mut MuxConn, n: usize) {
    let mut buf = [0u8; 64];
    for i in 0..n {
        conn.write_all(&[i as u8; 64]).await.unwrap();
        conn.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, [i as u8; 64]);
    }
}

/// Answers every 64-byte request with the same bytes, after `delay`.
fn echo(peer: &Mux, delay: Duration) -> tokio::task::JoinHandle<()> {
    let mut conn = peer.open(PLUGIN_SERVICE_CONN).unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 64];
        while conn.read_exact(&mut buf).await.is_ok() {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if conn.write_all(&buf).await.is_err() {
                break;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_spins_only_for_quick_answers() {
    // Off by default: quick answers, no spinning.
    let (m, peer) = mux_pair();
    let _echo = echo(&peer, Duration::ZERO);
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    exchange(&mut conn, 200).await;
    let s = m.stats();
    assert_eq!((s.spin_hits, s.spin_misses), (0, 0));

    // With a budget far above the in-process answer time, the reader
    // catches most answers while spinning.
    let (m, peer) = mux_pair();
    m.set_spin_budget(Duration::from_millis(5));
    let _echo = echo(&peer, Duration::ZERO);
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    exchange(&mut conn, 200).await;
    let s = m.stats();
    assert!(s.spin_hits >= 100, "{s:?}");
    assert_eq!(peer.stats().spin_hits, 0, "the peer has no budget");

    // A peer that takes 5 ms per answer, against a 50 µs budget: every
    // spin misses, and the reader backs off to spinning after one write in
    // 64 (writes 1, 3, 7, 15, 31, 63 and 127 of 130).
    let (m, peer) = mux_pair();
    m.set_spin_budget(Duration::from_micros(50));
    let _echo = echo(&peer, Duration::from_millis(5));
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    exchange(&mut conn, 130).await;
    let s = m.stats();
    assert_eq!(s.spin_hits, 0, "{s:?}");
    assert!((1..=7).contains(&s.spin_misses), "{s:?}");
}
