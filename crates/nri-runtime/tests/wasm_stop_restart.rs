//! `stop` landing while a WebAssembly plugin is being re-instantiated
//! (its new instance inside Configure): `stop` returns at once, without
//! waiting out its grace for background tasks, and the new instance is
//! closed with the re-instantiation, so its Configure call (the guest
//! sleeps in it) ends then instead of going on after `stop` returned.
//!
//! The guest says through `env.log` when it configures (a global
//! subscriber, this binary's own, tells the test) and sleeps 1.5 s
//! there; it traps in CreateContainer, which makes the runtime discard
//! its instance and make a new one. One test in this binary (it watches
//! for a sleeping thread). About two seconds (the first Configure).
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::log_capture::{log, logged_times};
use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_api::api::log_request::Level;
use nri_runtime::wasm::WasmLimits;
use nri_runtime::{FailurePolicy, PluginPolicy};
use wasm_util::{Wat, Work, a_thread_sleeps};

/// Bound on every wait of the test.
const PROMPT: Duration = Duration::from_secs(10);
/// How long the guest sleeps in Configure.
const NAP: Duration = Duration::from_millis(1500);
/// Longest `stop` may take here: far under its one-second grace for
/// background tasks, which a re-instantiation that went on would use.
const STOP_WITHIN: Duration = Duration::from_millis(900);
const CONFIGURING: &str = "stuck configures";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_during_a_re_instantiation_closes_the_new_instance() {
    let log = log();
    let mut events = EventMask::EMPTY;
    events.set(Event::CreateContainer);
    let guest = Wat::new(events)
        .work("plugin_configure", Work::Sleep(NAP))
        .logs_first("plugin_configure", Level::Info, CONFIGURING)
        .with_body("plugin_create_container", "unreachable");
    let env = TestEnv::new();
    guest.install(&env.dir.path().join("plugins"), "10-stuck");
    let quick = Duration::from_millis(10);
    let b = env
        .builder()
        .disable_connections(true)
        .wasm_limits(WasmLimits::default().with_restart_backoff(quick, quick))
        .plugin_policy(
            "stuck",
            PluginPolicy::new(FailurePolicy::Ignore).with_request_timeout(Duration::from_secs(60)),
        );
    let a = Arc::new(env.start(b).await);
    assert_eq!(a.plugins().len(), 1);
    // The guest traps: its instance is discarded and made again.
    a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    tokio::time::timeout(PROMPT, logged_times(CONFIGURING, 2))
        .await
        .unwrap_or_else(|_| panic!("no re-instantiation:\n{}", log.text()));
    let stopping = Instant::now();
    tokio::time::timeout(PROMPT, a.stop())
        .await
        .expect("stop returned");
    let took = stopping.elapsed();
    assert!(took < STOP_WITHIN, "stop took {took:?}");
    // The new instance was closed: its Configure, asleep for 1.5 s, ends
    // within a sleep's closing check. A guest sleeps in 10 ms steps, so a
    // thread seen out of its sleep once may be between two steps; ten
    // times in a row, 5 ms apart, it no longer sleeps.
    let mut awake = 0;
    while awake < 10 {
        assert!(
            stopping.elapsed() < NAP,
            "the new instance still sleeps in its Configure after stop:\n{}",
            log.text()
        );
        awake = if a_thread_sleeps() { 0 } else { awake + 1 };
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(a.plugins().is_empty());
}
