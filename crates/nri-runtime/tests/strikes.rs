//! Timeout strikes are counted once per call: a late plugin's hung
//! CreateContainer (the creation's wait for it and its own call run out
//! together) is one timeout and one strike.
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
