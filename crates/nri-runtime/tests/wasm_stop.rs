//! Stopping the runtime while a WebAssembly plugin is inside a long call
//! (asleep in `poll_oneoff`, or looping) closes that plugin: the call ends
//! at once with an error, and `stop` returns without waiting for the
//! call's deadline. A plugin that is idle still gets `Shutdown`.
//!
//! The guests log a line through `env.log` when their call starts; a
//! global subscriber (this binary's own, `common::log_capture`) tells the
//! test when it is in.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::log_capture::{log, logged};
use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_api::api::log_request::Level;
use nri_runtime::{Error, FailurePolicy, PluginFailure, PluginPolicy};
use wasm_util::{Wat, Work};

const CREATE: &str = "plugin_create_container";

/// The request timeout of the busy guest: far longer than the test.
const LONG: Duration = Duration::from_secs(60);

/// Generous bound on `stop` (the call ends within a fuel slice or a 10 ms
/// sleep check; a stop that waits for the deadline takes a minute).
const PROMPT: Duration = Duration::from_secs(5);

/// Starts a runtime whose only plugin, `10-<name>` (required, 60 s
/// requests), logs "`<name>` is in" and then does `work` in
/// CreateContainer; calls CreateContainer on a task, stops the runtime
/// once the guest is in, and checks that `stop` returns promptly and the
/// creation fails with the plugin closed.
async fn stop_during(name: &str, work: Work) {
    let log = log();
    let entered = format!("{name} is in");
    let mut events = EventMask::EMPTY;
    events.set(Event::CreateContainer);
    let guest = Wat::new(events)
        .work(CREATE, work)
        .logs_first(CREATE, Level::Info, &entered);
    let env = TestEnv::new();
    guest.install(&env.dir.path().join("plugins"), &format!("10-{name}"));
    let policy = PluginPolicy::new(FailurePolicy::Required).with_request_timeout(LONG);
    let b = env
        .builder()
        .disable_connections(true)
        .plugin_policy(name, policy);
    let a = Arc::new(env.start(b).await);
    assert_eq!(a.plugins().len(), 1);
    let call = tokio::spawn({
        let a = a.clone();
        async move { a.create_container(&pod("p"), &ctr("p", "c")).await }
    });
    tokio::time::timeout(PROMPT, logged(&entered))
        .await
        .unwrap_or_else(|_| {
            let text = log.text();
            panic!("the guest never started its call:\n{text}")
        });
    assert!(!call.is_finished());
    let stopping = Instant::now();
    tokio::time::timeout(PROMPT, a.stop())
        .await
        .expect("stop returned while the guest was busy");
    assert!(stopping.elapsed() < PROMPT);
    let res = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the busy call ended")
        .unwrap();
    match res {
        Err(Error::PluginFailed { plugin, cause, .. }) => {
            assert_eq!(plugin, format!("10-{name}"));
            assert!(
                matches!(&cause, PluginFailure::Disconnected { reason } if reason.contains("closed")),
                "{cause:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_closes_a_guest_asleep_in_a_call() {
    stop_during("sleeper", Work::Sleep(LONG)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_closes_a_guest_looping_in_a_call() {
    stop_during("spinner", Work::Forever).await;
}

/// A guest that is not inside a call still gets `Shutdown` on `stop`.
#[tokio::test(flavor = "multi_thread")]
async fn stop_sends_shutdown_to_an_idle_guest() {
    let log = log();
    let said = "idle got Shutdown";
    let mut events = EventMask::EMPTY;
    events.set(Event::CreateContainer);
    let guest = Wat::new(events).logs_first("plugin_shutdown", Level::Info, said);
    let env = TestEnv::new();
    guest.install(&env.dir.path().join("plugins"), "10-idle");
    let a = env.start(env.builder().disable_connections(true)).await;
    assert_eq!(a.plugins().len(), 1);
    a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    tokio::time::timeout(PROMPT, a.stop())
        .await
        .expect("stop returned");
    let text = log.text();
    assert!(
        text.contains(said),
        "no Shutdown reached the guest:\n{text}"
    );
}
