//! The runtime's Shutdown reaches the plugin and ends run() with
//! ShutDownByRuntime; a stop through the handle ends it with Ok.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_plugin::Error;

#[tokio::test]
async fn runtime_shutdown_ends_run() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let driver = async {
        let conn = rt.accept_ready().await;
        next_call(&mut calls).await;
        conn.shutdown().await.unwrap();
        assert_eq!(next_call(&mut calls).await.what, "Shutdown");
        conn.close();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    assert!(matches!(res, Err(Error::ShutDownByRuntime)), "{res:?}");
    assert!(
        !stub.plugin().disconnects.lock().unwrap().is_empty(),
        "disconnected() was called"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_without_close_ends_after_a_grace_period() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let driver = async {
        let conn = rt.accept_ready().await;
        conn.shutdown().await.unwrap();
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    assert!(matches!(res, Err(Error::ShutDownByRuntime)), "{res:?}");
}

#[tokio::test]
async fn stop_before_connecting_returns_ok() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    stub.handle().stop();
    assert!(stub.handle().is_stopped());
    stub.run().await.unwrap();
    assert!(
        stub.plugin().disconnects.lock().unwrap().is_empty(),
        "no disconnected() on own stop"
    );
}
