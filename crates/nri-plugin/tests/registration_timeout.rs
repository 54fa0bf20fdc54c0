//! The registration timeout is the author's to choose (upstream hard-codes
//! 5 s, nri#292) and covers both the RegisterPlugin answer and the wait for
//! Configure. Paused tokio time.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use nri_plugin::{Builder, Error, Phase};
use tokio::time::Instant;

fn stub(rt: &FakeRuntime, timeout: Option<Duration>) -> nri_plugin::Stub<Recorder> {
    let mut b = Builder::new(Recorder::new().0)
        .name("test")
        .index("10")
        .socket_path(&rt.path);
    if let Some(t) = timeout {
        b = b.registration_timeout(t);
    }
    b.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn default_timeout_is_five_seconds() {
    let rt = FakeRuntime::new();
    let stub = stub(&rt, None);
    let start = Instant::now();
    let (res, _conn) = tokio::join!(stub.run(), rt.accept(Register::Hang));
    match res {
        Err(Error::RegistrationTimeout { timeout, phase }) => {
            assert_eq!(timeout, Duration::from_secs(5));
            assert_eq!(phase, Phase::Registering);
        }
        other => panic!("expected RegistrationTimeout, got {other:?}"),
    }
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_millis(5100),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_longer_timeout_survives_a_slow_runtime() {
    let rt = FakeRuntime::new();
    let stub = stub(&rt, Some(Duration::from_secs(30)));
    let handle = stub.handle();
    let driver = async {
        // Answers RegisterPlugin after 10 s, longer than upstream's fixed 5 s.
        let conn = rt.accept(Register::Delay(Duration::from_secs(10))).await;
        conn.registered().await;
        tokio::time::sleep(Duration::from_secs(11)).await;
        conn.configure(configure_req("v0.12.2")).await.unwrap();
        conn.sync(vec![], vec![]).await.unwrap();
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

#[tokio::test(start_paused = true)]
async fn timeout_waiting_for_configure() {
    let rt = FakeRuntime::new();
    let stub = stub(&rt, Some(Duration::from_secs(8)));
    let start = Instant::now();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn // never configures
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    match res {
        Err(Error::RegistrationTimeout { timeout, phase }) => {
            assert_eq!(timeout, Duration::from_secs(8));
            assert_eq!(phase, Phase::Configuring);
        }
        other => panic!("expected RegistrationTimeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_millis(8100));
}

#[tokio::test]
async fn refused_registration_is_typed() {
    let rt = FakeRuntime::new();
    let stub = stub(&rt, None);
    let (res, _conn) = tokio::join!(
        stub.run(),
        rt.accept(Register::Refuse("duplicate plugin 10-test".into()))
    );
    match res {
        Err(Error::RegistrationRefused { reason }) => {
            assert_eq!(reason, "duplicate plugin 10-test")
        }
        other => panic!("expected RegistrationRefused, got {other:?}"),
    }
}
