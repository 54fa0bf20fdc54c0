//! A plugin that registers during a CreateContainer's fan-out gets the
//! request once its Synchronize (and the backlog before it) is through.
//! The time it waits for that is not the plugin's: the plugin has its own
//! request timeout from when it is sent the request, as for any call (and
//! as upstream, where a creation waits for a plugin's synchronization and
//! then calls it). The wait for the synchronization is bounded by the
//! request's deadline, else by the plugin's request timeout; when it runs
//! out the creation goes on without the plugin (not called, no strike) and
//! the plugin gets the container afterwards rather than never.
//!
//! Behind `nri-proxy` the late plugin is the proxy registering again with
//! the runtime: a slow listing of the runtime's own used to eat the
//! proxy's time, and the runtime reported the proxy timed out although it
//! answered within its budget from when it had the request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{ContainerAdjustment, CreateContainerResponse, Event};
use nri_runtime::{Adaptation, ErrorClass, PluginFailure};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(2);

/// The first plugin, `10-first`, taking CreateContainer only and holding
/// it until the returned gate opens; connected and active.
async fn first_holding_creations(env: &TestEnv, a: &Adaptation) -> (Gate, FakePlugin, Connected) {
    let gate = Gate::new();
    let first = FakePlugin::new("10", "first")
        .events(EventMask::from_events(&[Event::CreateContainer]))
        .hold("CreateContainer", &gate);
    let f = first.clone().connect(&env.socket).await.unwrap();
    wait_active(a, 1).await;
    (gate, first, f)
}

/// Starts a creation held in a first plugin, connects `late` (whose
/// Synchronize takes `sync`), then lets the creation go on to it.
async fn creation_with_a_late_plugin(
    env: &TestEnv,
    a: &Adaptation,
    late: &FakePlugin,
) -> (
    tokio::task::JoinHandle<Result<nri_runtime::CreateContainerOutcome, nri_runtime::Error>>,
    Connected,
    Connected,
) {
    let (gate, first, f) = first_holding_creations(env, a).await;
    let creation = create_in_background(a, "c");
    until_creations(&first, 1).await;
    let l = late.clone().connect(&env.socket).await.unwrap();
    until("the late plugin synchronizes", || {
        late.received().iter().any(|r| r.method == "Synchronize")
    })
    .await;
    gate.open();
    (creation, f, l)
}

fn adjusting(sync: Duration, answer: Duration) -> FakePlugin {
    FakePlugin::new("20", "late")
        .events(EventMask::from_events(&[Event::CreateContainer]))
        .delay("Synchronize", sync)
        .delay("CreateContainer", answer)
        .on_create(|_| CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                annotations: [("late".into(), "yes".into())].into(),
                ..Default::default()
            }),
            ..Default::default()
        })
}

/// The late plugin's Synchronize takes 1.5 s, its answer 1.5 s: 3 s after
/// the creation started waiting for it, within its 2 s timeout from when
/// it had the request. Its adjustment is merged; no timeout, no strike.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_late_plugin_has_its_own_timeout_from_when_it_is_sent_the_request() {
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
    let late = adjusting(TIMEOUT * 3 / 4, TIMEOUT * 3 / 4);
    let t0 = Instant::now();
    let (creation, _f, _l) = creation_with_a_late_plugin(&env, &a, &late).await;
    let out = creation.await.unwrap().expect("created");
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(
        out.adjustment.annotations.get("late").map(String::as_str),
        Some("yes"),
        "the late plugin's adjustment is merged"
    );
    assert!(t0.elapsed() >= TIMEOUT, "{:?}", t0.elapsed());
    assert_eq!(m.results("20-late", "CreateContainer"), [Ok(())]);
    assert_eq!(events_of(&late.received()), ["CreateContainer"]);
    drop(out.guard);
    a.stop().await;
}

/// With a deadline of 1 s, the creation does not wait for a Synchronize
/// of 1.5 s: the late plugin is not called for it (no strike), and it gets
/// the container after its Synchronize all the same.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_wait_for_the_synchronization_ends_at_the_deadline() {
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
    let late = adjusting(TIMEOUT * 3 / 4, Duration::ZERO);
    let (gate, first, _f) = first_holding_creations(&env, &a).await;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(1);
    let creation = create_in_background(&a.with_deadline(deadline), "c");
    until_creations(&first, 1).await;
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the late plugin synchronizes", || {
        late.received().iter().any(|r| r.method == "Synchronize")
    })
    .await;
    gate.open();
    let out = creation
        .await
        .unwrap()
        .expect("created without the late plugin");
    let ended = Instant::now();
    assert!(
        ended <= deadline + Duration::from_millis(5),
        "{:?} past the deadline",
        ended - deadline
    );
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert!(
        matches!(out.errors[0].failure, PluginFailure::NotCalled),
        "{:?}",
        out.errors[0]
    );
    assert!(!out.adjustment.annotations.contains_key("late"));
    drop(out.guard);
    until("the late plugin gets the container afterwards", || {
        events_of(&late.received()) == ["CreateContainer"]
    })
    .await;
    tokio::time::sleep(TIMEOUT).await;
    assert_eq!(a.plugins().len(), 2, "no strike: the late plugin stays");
    assert!(
        m.strikes("20-late").iter().all(|s| *s == 0),
        "{:?}",
        m.strikes("20-late")
    );
    a.stop().await;
}

/// The first plugin holds the creation past its deadline: the late
/// plugin's turn comes after it, so the creation does not wait for it at
/// all (not called, no strike), and it gets the container afterwards.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_late_plugin_whose_turn_comes_after_the_deadline_gets_the_container_afterwards() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(TIMEOUT).strike_limit(2))
        .await;
    let late = adjusting(Duration::ZERO, Duration::ZERO);
    let (gate, first, _f) = first_holding_creations(&env, &a).await;
    let deadline = Instant::now() + Duration::from_secs(1);
    let creation = create_in_background(&a.with_deadline(deadline), "c");
    until_creations(&first, 1).await;
    let _l = late.clone().connect(&env.socket).await.unwrap();
    let out = creation
        .await
        .unwrap()
        .expect("created without the late plugin");
    let failures: Vec<_> = out.errors.iter().map(|e| e.failure.class()).collect();
    assert_eq!(failures, [ErrorClass::Timeout, ErrorClass::NotCalled]);
    drop(out.guard);
    until("the late plugin gets the container afterwards", || {
        events_of(&late.received()) == ["CreateContainer"]
    })
    .await;
    gate.open();
    a.stop().await;
}

/// An event that comes while the late plugin's backlog (its late
/// CreateContainer, answered in 1.5 s) is being delivered waits for it,
/// then has the plugin's own timeout: the StartContainer, answered in 1 s,
/// is in time although it ends 2.5 s after the event began.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_event_behind_the_backlog_has_the_plugins_own_timeout() {
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
    let late = FakePlugin::new("20", "late")
        .events(EventMask::from_events(&[
            Event::CreateContainer,
            Event::StartContainer,
        ]))
        .delay("CreateContainer", TIMEOUT * 3 / 4)
        .delay("StartContainer", TIMEOUT / 2);
    let (creation, _f, _l) = creation_with_a_late_plugin(&env, &a, &late).await;
    until("the late plugin has its backlog's CreateContainer", || {
        events_of(&late.received()).contains(&"CreateContainer".to_owned())
    })
    .await;
    let t0 = Instant::now();
    let report = a
        .start_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("started");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(t0.elapsed() > TIMEOUT, "{:?}", t0.elapsed());
    assert_eq!(
        events_of(&late.received()),
        ["CreateContainer", "StartContainer"]
    );
    assert_eq!(m.results("20-late", "StartContainer"), [Ok(())]);
    drop(creation.await.unwrap().expect("created").guard);
    a.stop().await;
}
