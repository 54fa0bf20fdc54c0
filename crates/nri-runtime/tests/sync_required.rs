//! A `required` plugin that is synchronizing (it registered again, say
//! after a reconnect, and its Synchronize is not answered yet) is not
//! absent: a RunPodSandbox or CreateContainer that needs it waits for its
//! synchronization (within the request's deadline, else the plugin's
//! request timeout) and then goes to it in turn, as to any active plugin.
//! Refusing the creation would fail a pod for a plugin that is there;
//! through the proxy, where the runtime already has the object, the plugin
//! would never hear of it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::{Error, FailurePolicy};
use tokio::time::Instant;

const CREATIONS: EventMask =
    EventMask::from_events(&[Event::RunPodSandbox, Event::CreateContainer]);

/// The creations wait for the synchronizing plugin (its Synchronize takes
/// 500 ms), then reach it as events after its Synchronize.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn creations_wait_for_a_required_plugin_that_is_synchronizing() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .request_timeout(Duration::from_secs(2))
                .failure_policy("guard", FailurePolicy::Required),
        )
        .await;
    let guard = FakePlugin::new("10", "guard")
        .events(CREATIONS)
        .delay("Synchronize", Duration::from_millis(500));
    let _g = guard.clone().connect(&env.socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(1), || {
            guard.received().iter().any(|r| r.method == "Synchronize")
        })
        .await,
        "the plugin is synchronizing"
    );
    let t0 = Instant::now();
    let run = a.run_pod_sandbox(&pod("p")).await.expect("not refused");
    drop(run.guard);
    env.runtime.add_pod(pod("p"));
    let out = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("not refused");
    drop(out.guard);
    assert!(
        t0.elapsed() < Duration::from_millis(600),
        "waited for the Synchronize only: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        events_of(&guard.received()),
        ["RunPodSandbox", "CreateContainer"]
    );
    a.stop().await;
}

/// The wait ends at the request's deadline: a synchronization that takes
/// longer fails the creation as absence does, in time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_wait_ends_at_the_request_deadline() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .request_timeout(Duration::from_secs(2))
                .failure_policy("guard", FailurePolicy::Required),
        )
        .await;
    let guard = FakePlugin::new("10", "guard")
        .events(CREATIONS)
        .delay("Synchronize", Duration::from_millis(1500));
    let _g = guard.clone().connect(&env.socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(1), || {
            guard.received().iter().any(|r| r.method == "Synchronize")
        })
        .await
    );
    let t0 = Instant::now();
    let err = a
        .with_deadline(t0 + Duration::from_millis(300))
        .run_pod_sandbox(&pod("p"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RequiredPluginMissing { .. }),
        "{err:?}"
    );
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(310),
        "{waited:?}"
    );
    wait_active(&a, 1).await;
    a.stop().await;
}
