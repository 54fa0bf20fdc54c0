//! Timeout strikes are counted once per call and per plugin instance:
//! a late plugin's hung CreateContainer (the creation's wait for it and
//! its own call run out together) is one timeout and one strike, and the
//! consecutive-strikes gauge of a plugin that struck out starts again at 0
//! when the plugin reconnects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::{ErrorClass, PluginFailure};

const TIMEOUT: Duration = Duration::from_secs(2);

async fn until(what: &str, f: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(20), f).await,
        "timed out waiting until {what}"
    );
}

/// A plugin registers during a CreateContainer's fan-out (held in the
/// first plugin) and hangs on the CreateContainer it then gets as a late
/// plugin: the creation's wait and the call itself both run out. That is
/// one call: one timeout in the metrics and one strike, not two.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hung_late_create_container_is_one_timeout_and_one_strike() {
    let env = TestEnv::new();
    let m = Arc::new(Recording::default());
    let a = env
        .start(
            env.builder()
                .metrics(m.clone())
                .request_timeout(TIMEOUT)
                .strike_limit(0),
        )
        .await;
    let gate = Gate::new();
    let first = FakePlugin::new("10", "first").hold("CreateContainer", &gate);
    let _f = first.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let create = tokio::spawn({
        let a = a.clone();
        async move { a.create_container(&pod("p"), &ctr("p", "c")).await }
    });
    until("the first plugin has the request", || {
        events_of(&first.received()).contains(&"CreateContainer".to_owned())
    })
    .await;
    let late = FakePlugin::new("20", "late")
        .events(EventMask::EMPTY.with(Event::CreateContainer))
        .delay("CreateContainer", Duration::from_secs(3600));
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the late plugin synchronizes", || {
        late.received().iter().any(|r| r.method == "Synchronize")
    })
    .await;
    gate.open();
    let out = create
        .await
        .unwrap()
        .expect("created without the late plugin");
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert!(matches!(
        out.errors[0].failure,
        PluginFailure::Timeout { .. }
    ));
    // Both sides of the call have run out by now.
    tokio::time::sleep(3 * TIMEOUT).await;
    assert_eq!(events_of(&late.received()), ["CreateContainer"]);
    assert_eq!(
        m.results("20-late", "CreateContainer"),
        [Err(ErrorClass::Timeout)],
        "one call, one invocation"
    );
    let info = a.plugins().into_iter().find(|p| p.id.name() == "late");
    assert_eq!(info.expect("still active").strikes, 1, "one strike");
    assert_eq!(m.strikes("20-late").last(), Some(&1));
    assert!(
        !m.strikes("20-late").contains(&2),
        "{:?}",
        m.strikes("20-late")
    );
    drop(out.guard);
    a.stop().await;
}

/// A plugin strikes out (two timeouts in a row, limit 2) and reconnects:
/// the gauge of its consecutive strikes says 0 for the new connection,
/// and its next timeout counts 1, not 3.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_strikes_gauge_starts_at_zero_when_a_plugin_reconnects() {
    let env = TestEnv::new();
    let m = Arc::new(Recording::default());
    let a = env
        .start(
            env.builder()
                .metrics(m.clone())
                .request_timeout(TIMEOUT)
                .strike_limit(2),
        )
        .await;
    let slow = || FakePlugin::new("10", "slow").delay("StartContainer", Duration::from_secs(3600));
    let first = slow().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    for k in 0..2 {
        let c = ctr("p", &format!("c{k}"));
        let r = a.start_container(&pod("p"), &c).await.unwrap();
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    }
    wait_active_exact(&a, 0).await;
    assert_eq!(m.strikes("10-slow").last(), Some(&2), "struck out");
    drop(first);
    let _second = slow().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    assert_eq!(a.plugins()[0].strikes, 0);
    assert_eq!(
        m.strikes("10-slow").last(),
        Some(&0),
        "the gauge follows the new connection: {:?}",
        m.strikes("10-slow")
    );
    let r = a.start_container(&pod("p"), &ctr("p", "c2")).await.unwrap();
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(m.strikes("10-slow").last(), Some(&1));
    a.stop().await;
}
