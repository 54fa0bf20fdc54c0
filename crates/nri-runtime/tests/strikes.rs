//! Timeout strikes are counted once per call and per plugin instance:
//! a late plugin's hung CreateContainer (the creation's wait for it and
//! its own call run out together) is one timeout and one strike, and the
//! consecutive-strikes gauge of a plugin that struck out starts again at 0
//! when the plugin reconnects; a late CreateContainer that runs out of time
//! waiting behind the plugin's backlog, before the plugin had it, is no
//! strike (the plugin gets it afterwards with its own request timeout),
//! nor is an event that runs out of time waiting for the backlog.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::{ErrorClass, PluginFailure};

const TIMEOUT: Duration = Duration::from_secs(2);

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
    let create = create_in_background(&a, "c");
    until_creations(&first, 1).await;
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

/// Two creations wait for a plugin that registered during their fan-outs
/// (strike limit 2). Its backlog hands it the first CreateContainer, on
/// which it hangs; the second waits behind that call and runs out of time
/// before the plugin ever had it. Both creations report the plugin's
/// timeout, but only the call the plugin had counts a strike: the second
/// CreateContainer is sent afterwards, with the plugin's own request
/// timeout, and its answer in time resets the count. (It used to count a
/// strike of its own: one hung call struck the plugin out.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_late_create_container_that_waited_behind_the_backlog_is_no_strike() {
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
    let first_gate = Gate::new();
    let first = FakePlugin::new("10", "first").hold("CreateContainer", &first_gate);
    let _f = first.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let mut creations = Vec::new();
    for (k, c) in ["c1", "c2"].into_iter().enumerate() {
        creations.push(create_in_background(&a, c));
        until_creations(&first, k + 1).await;
    }
    let late_gate = Gate::new();
    let late = FakePlugin::new("20", "late")
        .events(EventMask::EMPTY.with(Event::CreateContainer))
        .hold("CreateContainer", &late_gate);
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the late plugin synchronizes", || {
        late.received().iter().any(|r| r.method == "Synchronize")
    })
    .await;
    first_gate.open();
    let mut guards = Vec::new();
    let mut failures = Vec::new();
    for c in creations {
        let out = c.await.unwrap().expect("created without the late plugin");
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        failures.push(out.errors[0].failure.class());
        guards.push(out.guard);
    }
    assert_eq!(
        failures,
        [ErrorClass::Timeout, ErrorClass::NotCalled],
        "the first call hung; the second was never sent in time"
    );
    // Both waits have run out; the plugin holds the first CreateContainer
    // and is about to get the second. It answers within its timeout.
    tokio::time::sleep(TIMEOUT / 4).await;
    assert!(
        !m.strikes("20-late").contains(&2),
        "one hung call struck out a plugin with limit 2: {:?}",
        m.strikes("20-late")
    );
    late_gate.open();
    until("the late plugin has both creations", || {
        events_of(&late.received()) == ["CreateContainer", "CreateContainer"]
    })
    .await;
    tokio::time::sleep(2 * TIMEOUT).await;
    let info = a.plugins().into_iter().find(|p| p.id.name() == "late");
    assert_eq!(
        info.expect("one hung call does not strike out a plugin with limit 2")
            .strikes,
        0,
        "the answer in time reset the count"
    );
    assert!(
        !m.strikes("20-late").contains(&2),
        "{:?}",
        m.strikes("20-late")
    );
    assert_eq!(
        m.results("20-late", "CreateContainer"),
        [Err(ErrorClass::Timeout), Ok(())],
        "two calls: the hung one, the one sent after the wait ran out"
    );
    drop(guards);
    a.stop().await;
}

/// A plugin (strike limit 1) registers while two creations are in its
/// backlog; it answers each CreateContainer in 1.5 s, within its 2 s
/// timeout, so its backlog takes 3 s. A StartContainer that comes once it
/// is active waits for that backlog and runs out of time; so does the
/// second creation's wait for the plugin. Each is a timeout of that event
/// (reported) but no strike: the plugin answered every call it was sent
/// in time and stays connected. (Both used to count a strike: a plugin
/// that was never late was dropped.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_event_that_runs_out_of_time_behind_the_backlog_is_no_strike() {
    let env = TestEnv::new();
    let m = Arc::new(Recording::default());
    let a = env
        .start(
            env.builder()
                .metrics(m.clone())
                .request_timeout(TIMEOUT)
                .strike_limit(1),
        )
        .await;
    let gate = Gate::new();
    let first = FakePlugin::new("10", "first").hold("CreateContainer", &gate);
    let _f = first.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let mut creations = Vec::new();
    for (k, c) in ["c1", "c2"].into_iter().enumerate() {
        creations.push(create_in_background(&a, c));
        until_creations(&first, k + 1).await;
    }
    let late = FakePlugin::new("20", "late")
        .events(
            EventMask::EMPTY
                .with(Event::CreateContainer)
                .with(Event::StartContainer),
        )
        .delay("CreateContainer", TIMEOUT * 3 / 4);
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the late plugin synchronizes", || {
        late.received().iter().any(|r| r.method == "Synchronize")
    })
    .await;
    // Active once its answer is in (a few turns of the runtime's tasks),
    // its backlog waiting for the held creations: the gate is closed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = tokio::spawn({
        let a = a.clone();
        async move { a.start_container(&pod("p"), &ctr("p", "c0")).await }
    });
    gate.open();
    let started = start.await.unwrap().expect("started without the plugin");
    assert_eq!(started.errors.len(), 1, "{:?}", started.errors);
    assert!(
        matches!(started.errors[0].failure, PluginFailure::NotCalled),
        "{:?}",
        started.errors
    );
    let mut guards = Vec::new();
    for c in creations {
        guards.push(c.await.unwrap().expect("created").guard);
    }
    // The StartContainer that ran out of time at the gate comes after
    // the backlog.
    until("the plugin has both creations, then the start", || {
        events_of(&late.received()) == ["CreateContainer", "CreateContainer", "StartContainer"]
    })
    .await;
    tokio::time::sleep(2 * TIMEOUT).await;
    assert!(
        m.strikes("20-late").iter().all(|&n| n == 0),
        "no call the plugin was sent ran out: {:?}",
        m.strikes("20-late")
    );
    let info = a.plugins().into_iter().find(|p| p.id.name() == "late");
    assert_eq!(info.expect("still connected").strikes, 0);
    assert_eq!(
        m.results("20-late", "StartContainer"),
        [Err(ErrorClass::NotCalled), Ok(())],
        "not called in time, then its delivery after the backlog"
    );
    drop(guards);
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
