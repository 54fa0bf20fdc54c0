//! Opt-in reconnect: re-dial, re-register and re-synchronize after the
//! runtime restarts, telling the plugin that the new sync replaces its
//! state; exponential backoff (paused time).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use nri_plugin::{Builder, Error, ReconnectPolicy, SyncKind};

#[tokio::test]
async fn reconnects_and_resyncs_after_runtime_restart() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .reconnect(ReconnectPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(50),
        ))
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        assert_eq!(next_call(&mut calls).await.what, "Synchronize Initial");
        conn.close(); // runtime restarts
        drop(conn);
        for n in 1..=2u32 {
            let conn = rt.accept(Register::Accept).await;
            let reg = conn.registered().await;
            assert_eq!(
                (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
                ("test", "10")
            );
            conn.configure(configure_req("v0.12.2")).await.unwrap();
            conn.sync(vec![pod("p1")], vec![]).await.unwrap();
            let call = next_call(&mut calls).await;
            assert_eq!(
                call.what,
                format!("Synchronize {:?}", SyncKind::Resync { reconnect: n })
            );
            assert_eq!(call.pod, "1");
            assert!(handle.is_connected());
            conn.shutdown().await.unwrap(); // a Shutdown is retried too
            assert_eq!(next_call(&mut calls).await.what, "Shutdown");
            conn.close();
        }
        let conn = rt.accept_ready().await;
        handle.stop();
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    res.unwrap();
    let disconnects = stub.plugin().disconnects.lock().unwrap();
    assert_eq!(disconnects.len(), 3, "{disconnects:?}");
    assert!(
        disconnects[0].1.contains("connection to the runtime lost"),
        "{disconnects:?}"
    );
    assert!(disconnects[1].1.contains("shut down"), "{disconnects:?}");
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_and_giving_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock"); // never created
    let (rec, _calls) = Recorder::new();
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&path)
        .reconnect(
            ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(1))
                .with_max_attempts(5),
        )
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let err = stub.run().await.unwrap_err();
    match &err {
        Error::ReconnectGaveUp { attempts, last } => {
            assert_eq!(*attempts, 5);
            assert!(last.is_socket_missing(), "{last:?}");
        }
        other => panic!("expected ReconnectGaveUp, got {other:?}"),
    }
    assert!(
        err.is_socket_missing(),
        "helpers look through ReconnectGaveUp"
    );
    let at: Vec<u128> = stub
        .plugin()
        .disconnects
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| (*t - start).as_millis())
        .collect();
    // Attempt 1 at 0, then waits of 100, 200, 400, 800, 1000 (capped).
    assert_eq!(at, vec![0, 100, 300, 700, 1500, 2500]);
}

#[tokio::test(start_paused = true)]
async fn stop_interrupts_the_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock");
    let (rec, _calls) = Recorder::new();
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&path)
        .reconnect(ReconnectPolicy::new(
            Duration::from_secs(60),
            Duration::from_secs(60),
        ))
        .build()
        .unwrap();
    let handle = stub.handle();
    let stopper = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), stopper);
    res.unwrap();
}

#[tokio::test]
async fn configuration_errors_are_not_retried() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(Recorder::new().0)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .strict_events(true)
        .reconnect(ReconnectPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
        ))
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let _ = conn.configure(configure_req("v0.8.0")).await;
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    assert!(
        matches!(res, Err(Error::UnsupportedEvents { .. })),
        "{res:?}"
    );
}

#[test]
fn policy_delays() {
    let p = ReconnectPolicy::new(Duration::from_millis(250), Duration::from_secs(5));
    let d: Vec<_> = (1..=8).map(|n| p.delay(n).as_millis()).collect();
    assert_eq!(d, vec![250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
    assert_eq!(p.delay(u32::MAX), Duration::from_secs(5));
    assert_eq!(ReconnectPolicy::default().max_attempts, None);
}
