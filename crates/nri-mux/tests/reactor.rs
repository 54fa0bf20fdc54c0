//! The trunk reader's registration with the reactor: on a multi-thread
//! runtime a spinning reader leaves the reactor while it polls and registers
//! again when it parks, and still wakes for data that comes while it is
//! parked; elsewhere it registers once. One test: at most one reader of a
//! process spins at a time, so scenarios running side by side would take
//! turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

mod common;

use common::{exchange, mux_with_echo};
use nri_mux::{LatencyStats, PLUGIN_SERVICE_CONN};

/// Runs `n` exchanges against an echo peer answering after `delay`, with
/// the reader's spin `budget` (none: spinning off), on `rt`.
fn scenario(
    rt: &tokio::runtime::Runtime,
    delay: Duration,
    budget: Option<Duration>,
    n: usize,
) -> LatencyStats {
    rt.block_on(async {
        let m = mux_with_echo(delay);
        if let Some(b) = budget {
            m.set_read_strategy(nri_mux::ReadStrategy::Spin { budget: b });
        }
        let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
        // A lost wake-up would hang here rather than fail.
        tokio::time::timeout(Duration::from_secs(30), exchange(&mut conn, n))
            .await
            .expect("every answer arrives");
        m.latency_stats()
    })
}

#[test]
fn a_spinning_reader_leaves_the_reactor_only_on_a_multi_thread_runtime() {
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // Spinning off: one registration for the trunk's life.
    let s = scenario(&multi, Duration::ZERO, None, 100);
    assert_eq!(s.reactor_registrations, 1, "{s:?}");

    // A slow peer (5 ms) against a 1 ms budget (long enough that the reader
    // starts its spin within it after each write even on a busy machine, as
    // an unoptimized build runs): spins miss, and the reader
    // parks after each; it left the reactor to spin and registers again to
    // park, and the answers that come while it is parked wake it.
    let s = scenario(
        &multi,
        Duration::from_millis(5),
        Some(Duration::from_millis(1)),
        40,
    );
    assert!(s.spin_misses >= 1, "{s:?}");
    assert!(
        s.reactor_registrations >= s.spin_misses,
        "one registration per park after a spin: {s:?}"
    );

    // Quick answers with a large budget: most are caught by the spin, and
    // every park after a poll registers again.
    let s = scenario(&multi, Duration::ZERO, Some(Duration::from_millis(5)), 200);
    assert!(s.spin_hits >= 100, "{s:?}");
    assert!(s.reactor_registrations >= 2, "{s:?}");

    // Current-thread runtime: the thread that could be parked in the
    // reactor is the one spinning, so the registration stays.
    let s = scenario(&single, Duration::ZERO, Some(Duration::from_millis(5)), 200);
    assert!(s.spin_hits >= 100, "{s:?}");
    assert_eq!(s.reactor_registrations, 1, "{s:?}");
    let s = scenario(
        &single,
        Duration::from_millis(5),
        Some(Duration::from_millis(1)),
        40,
    );
    assert!(s.spin_misses >= 1, "{s:?}");
    assert_eq!(s.reactor_registrations, 1, "{s:?}");
}
