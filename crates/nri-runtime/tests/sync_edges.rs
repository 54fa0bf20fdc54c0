//! Edge cases of the synchronization of a plugin that registers while the
//! runtime is busy, each provoked deterministically (gates, paused time):
//! a CreateContainer in flight, updates during the sync window, and an
//! event that waits behind the plugin's closed ready gate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{
    ContainerAdjustment, ContainerUpdate, CreateContainerResponse, Event, KeyValue,
    LinuxContainerUpdate, LinuxMemory, LinuxResources, OptionalInt64, UpdateContainerResponse,
};
use nri_runtime::PluginFailure;

fn methods(p: &FakePlugin) -> Vec<String> {
    p.received().into_iter().map(|r| r.method).collect()
}

fn mem(limit: i64) -> LinuxResources {
    LinuxResources {
        memory: Some(LinuxMemory {
            limit: Some(OptionalInt64 { value: limit }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn update_of(id: &str, limit: i64) -> ContainerUpdate {
    ContainerUpdate {
        container_id: id.into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(mem(limit)),
        }),
        ignore_failure: false,
    }
}

/// A plugin registers while a CreateContainer is in flight (its fan-out
/// is held inside the first plugin): the creation waits for the new
/// plugin's synchronization, sends it the CreateContainer, and the new
/// plugin's adjustment is part of the result.
#[tokio::test(flavor = "multi_thread")]
async fn a_creation_in_flight_when_a_plugin_registers_gets_its_adjustment() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let gate = Gate::new();
    let first = FakePlugin::new("10", "first").hold("CreateContainer", &gate);
    let _f = first.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let create = create_in_background(&a, "c");
    until_creations(&first, 1).await;
    let late = FakePlugin::new("20", "late")
        .events(EventMask::EMPTY.with(Event::CreateContainer))
        .on_create(|_| CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                env: vec![KeyValue {
                    key: "LATE".into(),
                    value: "1".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the late plugin synchronizes", || {
        methods(&late).contains(&"Synchronize".to_owned())
    })
    .await;
    gate.open();
    let out = create.await.unwrap().expect("created");
    assert!(
        out.adjustment
            .env
            .iter()
            .any(|kv| kv.key == "LATE" && kv.value == "1"),
        "the late plugin's adjustment counts: {:?}",
        out.adjustment
    );
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let log = late.received();
    let sync = log.iter().find(|r| r.method == "Synchronize").unwrap();
    assert!(!sync.sync_containers.contains(&"c".to_owned()));
    assert_eq!(events_of(&log), ["CreateContainer"], "once, after its sync");
    drop(out.guard);
    a.stop().await;
}

/// A creation whose fan-out has finished when a plugin registers, but
/// that the runtime has not stored yet: the plugin's listing waits for
/// the guard, and the container is in its Synchronize (not replayed as an
/// event whose changes would be dropped).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_creation_finished_but_not_yet_stored_is_in_the_synchronize() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    env.runtime.add_pod(pod("p"));
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let late = FakePlugin::new("20", "late");
    let _l = late.clone().connect(&env.socket).await.unwrap();
    // Everything else runs to quiescence: the registration waits for the
    // creation's guard (bounded by the plugin's request timeout).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!methods(&late).contains(&"Synchronize".to_owned()));
    env.runtime.add_container(ctr("p", "c"));
    drop(out.guard);
    wait_active(&a, 1).await;
    let log = late.received();
    let sync = log.iter().find(|r| r.method == "Synchronize").unwrap();
    assert_eq!(sync.sync_containers, ["c"]);
    assert!(
        events_of(&log).is_empty(),
        "no event for c: {:?}",
        events_of(&log)
    );
    a.stop().await;
}

/// UpdateContainer and UpdatePodSandbox during a plugin's sync window
/// reach it after its Synchronize; the updates it answers go through the
/// checks of unsolicited updates (a valid one is applied, an invalid one
/// refused).
#[tokio::test(flavor = "multi_thread")]
async fn updates_during_the_sync_window_reach_the_plugin_after_its_sync() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let gate = Gate::new();
    let late = FakePlugin::new("20", "late")
        .events(
            EventMask::EMPTY
                .with(Event::UpdateContainer)
                .with(Event::UpdatePodSandbox),
        )
        .hold("Synchronize", &gate)
        .on_update(|req| {
            let c = req.container.as_ref().map(|c| c.id.as_str());
            let limit = if c == Some("c1") { 1 << 30 } else { -5 };
            UpdateContainerResponse {
                update: vec![update_of("other", limit)],
                evict: vec![],
            }
        });
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the plugin synchronizes", || {
        methods(&late).contains(&"Synchronize".to_owned())
    })
    .await;
    let p = pod("p");
    a.update_container(&p, &ctr("p", "c1"), Some(mem(1 << 29)))
        .await
        .unwrap();
    a.update_pod_sandbox(&p, None, Some(mem(1 << 31)))
        .await
        .unwrap();
    a.update_container(&p, &ctr("p", "c2"), None).await.unwrap();
    assert!(
        events_of(&late.received()).is_empty(),
        "not before its sync"
    );
    gate.open();
    wait_active(&a, 1).await;
    let log = late.received();
    assert_eq!(
        events_of(&log),
        ["UpdateContainer", "UpdatePodSandbox", "UpdateContainer"]
    );
    let containers: Vec<_> = log.iter().filter_map(|r| r.container.clone()).collect();
    assert_eq!(containers, ["c1", "c2"]);
    let updates = env.runtime.updates.lock().unwrap().clone();
    assert_eq!(
        updates.len(),
        1,
        "the invalid update was refused: {updates:?}"
    );
    assert_eq!(updates[0].container_id, "other");
    a.stop().await;
}

/// An event that waits behind a plugin's closed ready gate (its backlog
/// is still being delivered) past its timeout is a timeout of that
/// plugin: reported and counted in the metrics, but no strike (the plugin
/// was not sent it then; the backlog deliveries that kept the gate closed
/// count for themselves). The event is appended to the backlog: the
/// plugin still gets it, after the backlog, with its own timeout.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waiting_behind_the_ready_gate_past_the_timeout_is_not_being_called() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .request_timeout(Duration::from_secs(2))
                .strike_limit(0),
        )
        .await;
    // Two pods in flight (guards kept) when the plugin registers: its
    // backlog, each delivery of which times out (2 s).
    let run_a = a.run_pod_sandbox(&pod("pa")).await.unwrap();
    let run_b = a.run_pod_sandbox(&pod("pb")).await.unwrap();
    let late = FakePlugin::new("20", "late")
        .events(
            EventMask::EMPTY
                .with(Event::RunPodSandbox)
                .with(Event::StartContainer),
        )
        .delay("RunPodSandbox", Duration::from_secs(10))
        .delay("StartContainer", Duration::from_secs(10));
    let _l = late.clone().connect(&env.socket).await.unwrap();
    until("the backlog is being delivered", || {
        events_of(&late.received()).contains(&"RunPodSandbox".to_owned())
    })
    .await;
    // The plugin is active, its gate closed for about 4 s.
    let t0 = tokio::time::Instant::now();
    let r = a
        .start_container(&pod("pa"), &ctr("pa", "c"))
        .await
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(2) && t0.elapsed() < Duration::from_millis(2100));
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].plugin, "20-late");
    assert_eq!(r.errors[0].failure, PluginFailure::NotCalled);
    until(
        "the event that ran out of time at the gate is delivered",
        || events_of(&late.received()).contains(&"StartContainer".to_owned()),
    )
    .await;
    assert_eq!(
        events_of(&late.received()),
        ["RunPodSandbox", "RunPodSandbox", "StartContainer"],
        "after the backlog, in order"
    );
    // The gate opens once the StartContainer, sent with the plugin's own
    // timeout (2 s), has timed out too.
    wait_active(&a, 1).await;
    assert!(t0.elapsed() >= Duration::from_secs(6), "{:?}", t0.elapsed());
    assert_eq!(
        a.plugins()[0].strikes,
        3,
        "three deliveries timed out; the wait at the gate is no strike"
    );
    drop((run_a.guard, run_b.guard));
    a.stop().await;
}
