//! A modern plugin that answers UNIMPLEMENTED to a request event it
//! subscribed to (CreateContainer, UpdateContainer, StopContainer,
//! UpdatePodSandbox, ValidateContainerAdjustment): there is no fallback
//! (as in upstream v0.12.5); it is an error the plugin returned, so the
//! failure policy decides (fail by default, like upstream), teardown never
//! fails, and a validator fails closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use nri_api::api::{Event, LinuxResources};
use nri_api::method;
use nri_runtime::{Error, FailurePolicy, PluginFailure};

const REQUESTS: [&str; 4] = [
    method::CREATE_CONTAINER,
    method::UPDATE_CONTAINER,
    method::STOP_CONTAINER,
    method::UPDATE_POD_SANDBOX,
];

fn unimplemented_plugin() -> FakePlugin {
    let mut p = FakePlugin::new("10", "lazy");
    for m in REQUESTS {
        p = p.unimplemented(m);
    }
    p.unimplemented(method::VALIDATE_CONTAINER_ADJUSTMENT)
}

fn not_validating() -> nri_api::EventMask {
    let mut m = nri_api::EventMask::ALL;
    m.clear(Event::ValidateContainerAdjustment);
    m
}

fn assert_unimplemented(err: Error, event: &str) {
    match err {
        Error::PluginFailed {
            plugin,
            event: e,
            cause: PluginFailure::Unimplemented { method, .. },
        } => {
            assert_eq!(plugin, "10-lazy");
            assert_eq!(e, event);
            assert_eq!(method, event, "the RPC is named like the event");
        }
        other => panic!("{event}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unimplemented_fails_request_events_under_the_default_policy() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    // Without the validator subscription, to see CreateContainer fail.
    let p = unimplemented_plugin().events(not_validating());
    let _c = p.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let (pod, ctr) = (pod("p"), ctr("p", "c"));
    assert_unimplemented(
        a.create_container(&pod, &ctr).await.unwrap_err(),
        "CreateContainer",
    );
    assert_unimplemented(
        a.update_container(&pod, &ctr, Some(LinuxResources::default()))
            .await
            .unwrap_err(),
        "UpdateContainer",
    );
    assert_unimplemented(
        a.update_pod_sandbox(&pod, None, None).await.unwrap_err(),
        "UpdatePodSandbox",
    );
    // Teardown: reported, never a failure.
    let stop = a.stop_container(&pod, &ctr).await.unwrap();
    assert!(
        matches!(&stop.errors[0].failure, PluginFailure::Unimplemented { method, .. } if method == "StopContainer"),
        "{:?}",
        stop.errors
    );
    // No switch to StateChange: the plugin still gets dedicated RPCs.
    a.start_container(&pod, &ctr).await.unwrap();
    assert!(!a.plugins()[0].legacy_dialect);
    let methods: Vec<_> = p.received().into_iter().map(|r| r.method).collect();
    assert!(
        methods.contains(&"StartContainer".to_owned()),
        "{methods:?}"
    );
    assert!(!methods.contains(&"StateChange".to_owned()), "{methods:?}");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_ignore_reports_unimplemented_and_goes_on() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().failure_policy("lazy", FailurePolicy::Ignore))
        .await;
    let p = unimplemented_plugin().events(not_validating());
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let (pod, ctr) = (pod("p"), ctr("p", "c"));
    let out = a.create_container(&pod, &ctr).await.unwrap();
    assert!(matches!(
        out.errors[0].failure,
        PluginFailure::Unimplemented { .. }
    ));
    let out = a.update_container(&pod, &ctr, None).await.unwrap();
    assert_eq!(out.errors.len(), 1);
    let out = a.update_pod_sandbox(&pod, None, None).await.unwrap();
    assert_eq!(out.errors.len(), 1);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unimplemented_validator_fails_closed_even_with_policy_ignore() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().failure_policy("lazy", FailurePolicy::Ignore))
        .await;
    let p = FakePlugin::new("10", "lazy")
        .events(nri_api::EventMask::EMPTY.with(Event::ValidateContainerAdjustment))
        .unimplemented(method::VALIDATE_CONTAINER_ADJUSTMENT);
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    assert_unimplemented(
        a.create_container(&pod("p"), &ctr("p", "c"))
            .await
            .unwrap_err(),
        "ValidateContainerAdjustment",
    );
    a.stop().await;
}
