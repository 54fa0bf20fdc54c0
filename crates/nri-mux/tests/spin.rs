//! The reader's adaptive spin (`ReadStrategy::Spin`): off by default,
//! catches quick answers, and backs off for a peer that answers slowly.
//! One test: at most one reader of a process spins at a time, so scenarios
//! running side by side would take turns. A current-thread runtime, so
//! that the reader is polled right after each write (on a multi-thread
//! runtime the answer may arrive before the reader gets to spin).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

mod common;

use common::{exchange, mux_with_echo};
use nri_mux::PLUGIN_SERVICE_CONN;

#[tokio::test(flavor = "current_thread")]
async fn the_reader_spins_only_for_quick_answers() {
    // Off by default: quick answers, no spinning.
    let m = mux_with_echo(Duration::ZERO);
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    exchange(&mut conn, 200).await;
    let s = m.latency_stats();
    assert_eq!((s.spin_hits, s.spin_misses), (0, 0));

    // With a budget far above the in-process answer time, the reader
    // catches most answers while spinning.
    let m = mux_with_echo(Duration::ZERO);
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_millis(5),
    });
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    exchange(&mut conn, 200).await;
    let s = m.latency_stats();
    assert!(s.spin_hits >= 100, "{s:?}");

    // A peer that takes 5 ms per answer, against a 50 µs budget: every
    // spin misses, and the reader backs off to spinning after one write in
    // 64 (writes 1, 3, 7, 15, 31, 63 and 127 of 130).
    let m = mux_with_echo(Duration::from_millis(5));
    m.set_read_strategy(nri_mux::ReadStrategy::Spin {
        budget: Duration::from_micros(50),
    });
    let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
    exchange(&mut conn, 130).await;
    let s = m.latency_stats();
    assert_eq!(s.spin_hits, 0, "{s:?}");
    assert!((1..=7).contains(&s.spin_misses), "{s:?}");
}
