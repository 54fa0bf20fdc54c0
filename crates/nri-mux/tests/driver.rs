//! A writer driving the trunk reader while it waits for its answer
//! (`MuxWriteHalf::reader_driver`): it gets its answers, and once it stops
//! (`ReaderDriver::done`) the reader task takes over again, so input that
//! comes later is still delivered; a dropped mux still closes its trunk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

mod common;

use nri_mux::{PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, ReaderDriver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs `fut`, polling `driver` whenever it is not ready, then tells the
/// driver it is done (what a waiting ttRPC call does).
async fn driving<F: Future>(driver: &ReaderDriver, fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let out = std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(v);
        }
        driver.poll(cx);
        fut.as_mut().poll(cx)
    })
    .await;
    driver.done();
    out
}

/// A peer on its own thread: echoes every 64-byte message on the plugin
/// connection; after `echoes` of them it sends `b"late"` on the runtime
/// connection, then waits for the trunk to close and reports that it did.
fn peer(
    sock: std::os::unix::net::UnixStream,
    echoes: usize,
    delay: Duration,
) -> std::thread::JoinHandle<bool> {
    common::peer_thread(sock, move |m| async move {
        let mut c = m.open(PLUGIN_SERVICE_CONN).unwrap();
        let mut late = m.open(RUNTIME_SERVICE_CONN).unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..echoes {
            c.read_exact(&mut buf).await.unwrap();
            tokio::time::sleep(delay).await;
            c.write_all(&buf).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        late.write_all(b"late").await.unwrap();
        // The other side dropped its mux: the trunk closes.
        tokio::time::timeout(Duration::from_secs(10), m.closed())
            .await
            .is_ok()
    })
}

async fn scenario(budget: Option<Duration>, delay: Duration) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let peer = peer(b, 50, delay);
    let m = common::std_mux(a);
    if let Some(b) = budget {
        m.set_read_strategy(nri_mux::ReadStrategy::Spin { budget: b });
    }
    let (mut rd, mut wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let mut late = m.open(RUNTIME_SERVICE_CONN).unwrap();
    let driver = wr.reader_driver();
    let mut buf = [0u8; 64];
    for i in 0..50u8 {
        wr.write_all(&[i; 64]).await.unwrap();
        driving(&driver, rd.read_exact(&mut buf)).await.unwrap();
        assert_eq!(buf, [i; 64]);
    }
    // Nobody drives now: the reader task must deliver what comes next.
    let mut got = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), late.read_exact(&mut got))
        .await
        .expect("input after the last driven wait is delivered")
        .unwrap();
    assert_eq!(&got, b"late");
    drop((rd, wr, late, driver, m));
    let closed = tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
    assert!(closed, "dropping the mux closes the trunk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driving_writer_gets_its_answers_and_hands_the_reader_back() {
    // Spinning off, quick and slow peers; spinning on, quick and slow
    // peers (spins that miss park in the reactor and are woken there).
    scenario(None, Duration::ZERO).await;
    scenario(None, Duration::from_millis(2)).await;
    scenario(Some(Duration::from_millis(2)), Duration::ZERO).await;
    scenario(Some(Duration::from_micros(50)), Duration::from_millis(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_dropped_mid_wait_leaves_the_answer_to_the_reader_task() {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let peer = peer(b, 1, Duration::from_millis(50));
    let m = common::std_mux(a);
    let (mut rd, mut wr) = m.open(PLUGIN_SERVICE_CONN).unwrap().into_split();
    let mut late = m.open(RUNTIME_SERVICE_CONN).unwrap();
    let driver = wr.reader_driver();
    wr.write_all(&[9; 64]).await.unwrap();
    let mut buf = [0u8; 64];
    // Gives up long before the answer (50 ms) comes.
    let r = tokio::time::timeout(
        Duration::from_millis(5),
        driving(&driver, rd.read_exact(&mut buf)),
    )
    .await;
    assert!(r.is_err());
    driver.done();
    // The answer still arrives, through the reader task.
    tokio::time::timeout(Duration::from_secs(10), rd.read_exact(&mut buf))
        .await
        .expect("answer delivered after the driver gave up")
        .unwrap();
    assert_eq!(buf, [9; 64]);
    let mut got = [0u8; 4];
    late.read_exact(&mut got).await.unwrap();
    drop((rd, wr, late, driver, m));
    let closed = tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
    assert!(closed);
}
