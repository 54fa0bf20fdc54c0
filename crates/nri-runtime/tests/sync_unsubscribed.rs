//! A plugin that does not take an object's creation event (CreateContainer
//! for a container, RunPodSandbox for a pod) and registers while that
//! creation is in flight gets the object in its Synchronize, as upstream
//! (where a registration waits for every creation in flight): never
//! neither in its Synchronize nor as an event, and then Start or Stop for
//! a container it never saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;

fn synced(p: &FakePlugin) -> Option<Received> {
    p.received().into_iter().find(|r| r.method == "Synchronize")
}

/// A container whose creation is in flight (the runtime holds its guard:
/// not stored yet) when a plugin that takes StartContainer and
/// StopContainer, but not CreateContainer, registers: the plugin's
/// listing waits for the guard, and the container is in its Synchronize
/// before its Start and Stop.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_container_in_flight_is_in_the_synchronize_of_a_plugin_without_create() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    env.runtime.add_pod(pod("p"));
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let late = FakePlugin::new("20", "late").events(
        EventMask::EMPTY
            .with(Event::StartContainer)
            .with(Event::StopContainer),
    );
    let _l = late.clone().connect(&env.socket).await.unwrap();
    // Everything else runs to quiescence: the registration waits for the
    // creation's guard (within the plugin's request timeout).
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.runtime.add_container(ctr("p", "c"));
    drop(out.guard);
    wait_active(&a, 1).await;
    a.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    a.stop_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let sync = synced(&late).expect("synchronized");
    assert_eq!(sync.sync_pods, ["p"]);
    assert_eq!(
        sync.sync_containers,
        ["c"],
        "the container is in the Synchronize"
    );
    assert_eq!(
        events_of(&late.received()),
        ["StartContainer", "StopContainer"]
    );
    a.stop().await;
}

/// The same for a pod: a plugin that takes CreateContainer but not
/// RunPodSandbox registers while a pod is in flight; the pod is in its
/// Synchronize before the CreateContainer of a container in it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_pod_in_flight_is_in_the_synchronize_of_a_plugin_without_run_pod_sandbox() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let run = a.run_pod_sandbox(&pod("p")).await.unwrap();
    let late = FakePlugin::new("20", "late").events(EventMask::EMPTY.with(Event::CreateContainer));
    let _l = late.clone().connect(&env.socket).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.runtime.add_pod(pod("p"));
    drop(run.guard);
    wait_active(&a, 1).await;
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    drop(out.guard);
    let sync = synced(&late).expect("synchronized");
    assert_eq!(sync.sync_pods, ["p"], "the pod is in the Synchronize");
    assert_eq!(events_of(&late.received()), ["CreateContainer"]);
    a.stop().await;
}

/// A runtime that does not release a creation's guard within the
/// plugin's request timeout: the plugin's listing does not wait longer,
/// and the container (its creation succeeded) is in the Synchronize as
/// its creation request had it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_creation_not_stored_in_time_is_added_to_the_synchronize() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(2)))
        .await;
    env.runtime.add_pod(pod("p"));
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let late = FakePlugin::new("20", "late").events(EventMask::EMPTY.with(Event::StartContainer));
    let _l = late.clone().connect(&env.socket).await.unwrap();
    let t0 = tokio::time::Instant::now();
    wait_active(&a, 1).await;
    assert!(t0.elapsed() >= Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let sync = synced(&late).expect("synchronized");
    assert_eq!(sync.sync_containers, ["c"]);
    a.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(events_of(&late.received()), ["StartContainer"]);
    drop(out.guard);
    a.stop().await;
}

/// A creation that failed (a plugin refused it) while a plugin without
/// CreateContainer registers is not in that plugin's Synchronize.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_failed_creation_is_not_added_to_the_synchronize() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(2)))
        .await;
    let gate = Gate::new();
    let refuser = FakePlugin::new("10", "refuser")
        .events(EventMask::EMPTY.with(Event::CreateContainer))
        .hold("CreateContainer", &gate)
        .fail("CreateContainer");
    let _r = refuser.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    env.runtime.add_pod(pod("p"));
    let create = tokio::spawn({
        let a = a.clone();
        async move { a.create_container(&pod("p"), &ctr("p", "c")).await }
    });
    assert!(
        eventually(Duration::from_secs(1), || {
            events_of(&refuser.received()).contains(&"CreateContainer".to_owned())
        })
        .await
    );
    let late = FakePlugin::new("20", "late").events(EventMask::EMPTY.with(Event::StartContainer));
    let _l = late.clone().connect(&env.socket).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.open();
    assert!(create.await.unwrap().is_err(), "refused");
    wait_active(&a, 2).await;
    let sync = synced(&late).expect("synchronized");
    assert!(
        sync.sync_containers.is_empty(),
        "{:?}",
        sync.sync_containers
    );
    a.stop().await;
}
