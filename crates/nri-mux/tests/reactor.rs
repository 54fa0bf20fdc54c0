//! The trunk reader's registration with the reactor: on a multi-thread
//! runtime a spinning reader leaves the reactor while it polls and registers
//! again when it parks, and still wakes for data that comes while it is
//! parked; elsewhere it registers once. One test: at most one reader of a
//! process spins at a time, so scenarios running side by side would take
//! turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nri_mux::{Mux, MuxConn, MuxStats, PLUGIN_SERVICE_CONN};
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

/// A mux whose peer, on its own thread and runtime (as another process
/// would be), echoes every 64-byte request after `delay`.
fn mux_with_echo(delay: Duration) -> Mux {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            b.set_nonblocking(true).unwrap();
            let peer = Mux::new(tokio::net::UnixStream::from_std(b).unwrap());
            let mut conn = peer.open(PLUGIN_SERVICE_CONN).unwrap();
            let mut buf = [0u8; 64];
            while conn.read_exact(&mut buf).await.is_ok() {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                if conn.write_all(&buf).await.is_err() {
                    break;
                }
            }
        });
    });
    a.set_nonblocking(true).unwrap();
    Mux::new(tokio::net::UnixStream::from_std(a).unwrap())
}

/// Runs `n` exchanges against an echo peer answering after `delay`, with
/// the reader's spin `budget` (none: spinning off), on `rt`.
fn scenario(
    rt: &tokio::runtime::Runtime,
    delay: Duration,
    budget: Option<Duration>,
    n: usize,
) -> MuxStats {
    rt.block_on(async {
        let m = mux_with_echo(delay);
        if let Some(b) = budget {
            m.set_spin_budget(b);
        }
        let mut conn = m.open(PLUGIN_SERVICE_CONN).unwrap();
        // A lost wake-up would hang here rather than fail.
        tokio::time::timeout(Duration::from_secs(30), exchange(&mut conn, n))
            .await
            .expect("every answer arrives");
        m.stats()
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

    // A slow peer (5 ms) against a 50 us budget: spins miss, and the reader
    // parks after each; it left the reactor to spin and registers again to
    // park, and the answers that come while it is parked wake it.
    let s = scenario(
        &multi,
        Duration::from_millis(5),
        Some(Duration::from_micros(50)),
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
        Some(Duration::from_micros(50)),
        40,
    );
    assert!(s.spin_misses >= 1, "{s:?}");
    assert_eq!(s.reactor_registrations, 1, "{s:?}");
}
