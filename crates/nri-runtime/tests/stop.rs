//! `stop` leaves nothing behind, whatever it races: a plugin registering
//! when it is called is not active afterwards and its connection is
//! closed; `stop` during `start` returns once `start` has, with no
//! launched plugin active and no socket left in place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[cfg(feature = "wasm")]
mod wasm_util;

use std::time::Duration;

use common::*;

/// A plugin in Configure (its answer held) when `stop` is called, while
/// another plugin's Shutdown takes a second: once `stop` returns, the
/// registering plugin is not active and its connection is closed, even
/// though its Configure answer came while `stop` was sending Shutdown.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_plugin_registering_during_stop_is_closed_and_never_active() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let slow = FakePlugin::new("10", "slow").delay("Shutdown", Duration::from_secs(1));
    let _s = slow.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let gate = Gate::new();
    let late = FakePlugin::new("20", "late").hold("Configure", &gate);
    let conn = late.clone().connect(&env.socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            late.received().iter().any(|r| r.method == "Configure")
        })
        .await
    );
    let stopping = tokio::spawn({
        let a = a.clone();
        async move { a.stop().await }
    });
    // `stop` is waiting for the first plugin's Shutdown.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!stopping.is_finished());
    gate.open();
    stopping.await.unwrap();
    // Long enough for anything left running to finish registering.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.plugins().is_empty(), "{:?}", a.plugins());
    assert!(
        tokio::time::timeout(Duration::from_secs(1), conn.mux.closed())
            .await
            .is_ok(),
        "the registering plugin's connection is closed"
    );
    let methods: Vec<_> = late.received().into_iter().map(|r| r.method).collect();
    assert!(
        !methods.contains(&"Synchronize".to_owned()),
        "not synchronized after stop: {methods:?}"
    );
}

/// A plugin in Synchronize when `stop` is called gets Shutdown and is
/// closed; it is never active.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_plugin_synchronizing_during_stop_gets_shutdown() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let gate = Gate::new();
    let late = FakePlugin::new("20", "late").hold("Synchronize", &gate);
    let conn = late.clone().connect(&env.socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            late.received().iter().any(|r| r.method == "Synchronize")
        })
        .await
    );
    let stopping = tokio::spawn({
        let a = a.clone();
        async move { a.stop().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.open();
    stopping.await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.plugins().is_empty(), "{:?}", a.plugins());
    let methods: Vec<_> = late.received().into_iter().map(|r| r.method).collect();
    assert!(methods.contains(&"Shutdown".to_owned()), "{methods:?}");
    assert!(
        tokio::time::timeout(Duration::from_secs(1), conn.mux.closed())
            .await
            .is_ok()
    );
}

/// `stop` while `start` is launching plugins: a WebAssembly plugin asleep
/// in its Configure (1 s) and a launched process that never registers
/// (the registration timeout is 1.5 s). `stop` returns promptly, once
/// `start` has returned; afterwards no plugin is active and there is no
/// socket, also after the plugins' Configure and registration timeout
/// would have ended. Real time: about 2.5 s.
#[cfg(feature = "wasm")]
#[tokio::test(flavor = "multi_thread")]
async fn stop_during_start_leaves_no_plugin_and_no_socket() {
    use std::os::unix::fs::PermissionsExt;

    use nri_api::EventMask;
    use wasm_util::{Wat, Work};

    let env = TestEnv::new();
    let plugins = env.dir.path().join("plugins");
    Wat::new(EventMask::ALL)
        .work("plugin_configure", Work::Sleep(Duration::from_secs(1)))
        .install(&plugins, "10-slow");
    let silent = plugins.join("20-silent");
    std::fs::write(&silent, "#!/bin/sh\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&silent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = env
        .builder()
        .registration_timeout(Duration::from_millis(1500))
        .request_timeout(Duration::from_secs(10))
        .build(env.runtime.clone())
        .unwrap();
    let starting = tokio::spawn({
        let a = a.clone();
        async move { a.start().await }
    });
    assert!(
        eventually(Duration::from_secs(20), wasm_util::a_thread_sleeps).await,
        "the guest never started its Configure"
    );
    let t0 = std::time::Instant::now();
    a.stop().await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "stop returned promptly: {:?}",
        t0.elapsed()
    );
    // `start` has let go by now: it ends at once.
    let started = tokio::time::timeout(Duration::from_millis(200), starting)
        .await
        .expect("start returned with stop")
        .unwrap();
    assert!(started.is_err(), "start reports the stop: {started:?}");
    assert!(a.plugins().is_empty());
    assert!(!env.socket.exists());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(a.plugins().is_empty(), "{:?}", a.plugins());
    assert!(!env.socket.exists(), "no socket bound after stop");
}
