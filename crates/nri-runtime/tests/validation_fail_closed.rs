//! Validation fails closed: a validator plugin that times out, crashes or
//! errs while validating fails the creation whatever its failure policy;
//! one already gone is absent (the required-plugin rules decide);
//! `validation: fail-open` and exempt namespaces let creation go on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{Event, PodSandbox, ValidateContainerAdjustmentResponse};
use nri_runtime::{Error, FailurePolicy, PluginFailure, PluginPolicy, ValidationMode};

const VALIDATE: &str = "ValidateContainerAdjustment";

fn validator() -> FakePlugin {
    FakePlugin::new("90", "guard").events(EventMask::EMPTY.with(Event::ValidateContainerAdjustment))
}

fn hanging_validator() -> FakePlugin {
    validator().delay(VALIDATE, Duration::from_secs(60))
}

fn pod_in(ns: &str) -> PodSandbox {
    PodSandbox {
        namespace: ns.into(),
        ..pod("p")
    }
}

fn assert_validator_failed(err: &Error, class: fn(&PluginFailure) -> bool) {
    match err {
        Error::PluginFailed {
            plugin,
            event,
            cause,
        } => {
            assert_eq!(plugin, "90-guard");
            assert_eq!(event, VALIDATE);
            assert!(class(cause), "{cause:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_validator_timing_out_fails_the_creation_under_every_policy() {
    for policy in [
        FailurePolicy::Ignore,
        FailurePolicy::Fail,
        FailurePolicy::Required,
    ] {
        let env = TestEnv::new();
        let a = env
            .start(
                env.builder()
                    .request_timeout(Duration::from_secs(2))
                    .failure_policy("guard", policy),
            )
            .await;
        let _v = hanging_validator().connect(&env.socket).await.unwrap();
        wait_active(&a, 1).await;
        let t0 = tokio::time::Instant::now();
        let err = a
            .create_container(&pod("p"), &ctr("p", "c"))
            .await
            .unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "bounded by the timeout"
        );
        assert_validator_failed(&err, |c| matches!(c, PluginFailure::Timeout { .. }));
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_validator_crashing_mid_request_fails_the_creation() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let v = hanging_validator();
    let conn = v.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let create = tokio::spawn({
        let a = a.clone();
        async move { a.create_container(&pod("p"), &ctr("p", "c")).await }
    });
    // Crash once the validation request has arrived.
    let _arrived = eventually(Duration::from_secs(10), || {
        !events_of(&v.received()).is_empty()
    })
    .await;
    assert_eq!(
        events_of(&v.received()),
        [VALIDATE],
        "the validator got the request"
    );
    conn.crash();
    let err = create.await.unwrap().unwrap_err();
    assert_validator_failed(&err, |c| matches!(c, PluginFailure::Disconnected { .. }));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_validator_answering_an_error_fails_the_creation_even_with_policy_ignore() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().failure_policy("guard", FailurePolicy::Ignore))
        .await;
    let _v = validator()
        .fail(VALIDATE)
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert_validator_failed(&err, |c| matches!(c, PluginFailure::Status { .. }));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_validator_gone_before_the_request_is_absent() {
    // Not required: the creation goes on without it.
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let v = validator();
    let conn = v.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    conn.crash();
    wait_active_exact(&a, 0).await;
    let out = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("an absent validator that is not required does not block");
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert!(events_of(&v.received()).is_empty());
    a.stop().await;

    // Required: the required-plugin rule refuses the creation.
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .failure_policy("guard", FailurePolicy::Required),
        )
        .await;
    let conn = validator().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    conn.crash();
    wait_active_exact(&a, 0).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RequiredPluginMissing { plugin, .. } if plugin == "guard"),
        "{err:?}"
    );
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn fail_open_lets_creation_go_on_and_reports_the_failure() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().plugin_policy(
            "guard",
            PluginPolicy::default().with_validation(ValidationMode::FailOpen),
        ))
        .await;
    let _v = hanging_validator().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let out = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("fail-open");
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].plugin, "90-guard");
    assert_eq!(out.errors[0].event, Event::ValidateContainerAdjustment);
    assert!(matches!(
        out.errors[0].failure,
        PluginFailure::Timeout { .. }
    ));
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn exempt_namespaces_do_not_fail_on_an_unavailable_validator_but_rejections_still_count() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .exempt_namespaces(["kube-system", "infra"])
                .failure_policy("guard", FailurePolicy::Required),
        )
        .await;
    let v = hanging_validator().on_validate(|req| ValidateContainerAdjustmentResponse {
        reject: req.container.as_ref().is_some_and(|c| c.id == "bad"),
        reason: "no".into(),
    });
    let conn = v.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    for ns in ["kube-system", "infra"] {
        let out = a
            .create_container(&pod_in(ns), &ctr("p", "c"))
            .await
            .expect("exempt namespace");
        assert!(matches!(
            out.errors[0].failure,
            PluginFailure::Timeout { .. }
        ));
    }
    let err = a
        .create_container(&pod_in("default"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert_validator_failed(&err, |c| matches!(c, PluginFailure::Timeout { .. }));
    // Required and absent: exempt namespaces are not refused either.
    conn.crash();
    wait_active_exact(&a, 0).await;
    a.run_pod_sandbox(&pod_in("kube-system")).await.unwrap();
    a.create_container(&pod_in("kube-system"), &ctr("p", "c"))
        .await
        .unwrap();
    assert!(matches!(
        a.create_container(&pod_in("default"), &ctr("p", "c")).await,
        Err(Error::RequiredPluginMissing { .. })
    ));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejection_fails_the_creation_in_an_exempt_namespace_and_with_fail_open() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().plugin_policy(
            "guard",
            PluginPolicy::default().with_validation(ValidationMode::FailOpen),
        ))
        .await;
    let _v = validator()
        .on_validate(|_| ValidateContainerAdjustmentResponse {
            reject: true,
            reason: "not here".into(),
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let err = a
        .create_container(&pod_in("kube-system"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::ValidationRejected { plugin, reason } if plugin == "90-guard" && reason == "not here"),
        "{err:?}"
    );
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_startup_grace_waits_for_a_required_plugin_until_it_first_registers() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .startup_grace(Duration::from_secs(30))
                .failure_policy("guard", FailurePolicy::Required),
        )
        .await;
    // Exempt namespaces do not wait.
    a.run_pod_sandbox(&pod_in("kube-system")).await.unwrap();
    let t0 = tokio::time::Instant::now();
    let create = tokio::spawn({
        let a = a.clone();
        async move { a.create_container(&pod("p"), &ctr("p", "c")).await }
    });
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!create.is_finished(), "waits for the validator");
    let v = validator();
    let conn = v.clone().connect(&env.socket).await.unwrap();
    let out = create.await.unwrap().expect("validated once it registered");
    assert!(out.errors.is_empty());
    assert!(t0.elapsed() < Duration::from_secs(11));
    assert_eq!(events_of(&v.received()), [VALIDATE]);
    // Once it has registered, its absence fails at once (no more grace).
    conn.crash();
    wait_active_exact(&a, 0).await;
    let t1 = tokio::time::Instant::now();
    assert!(matches!(
        a.create_container(&pod("p"), &ctr("p", "c2")).await,
        Err(Error::RequiredPluginMissing { .. })
    ));
    assert!(t1.elapsed() < Duration::from_millis(100));
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_startup_grace_ends() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .startup_grace(Duration::from_secs(30))
                .failure_policy("guard", FailurePolicy::Required),
        )
        .await;
    let t0 = tokio::time::Instant::now();
    let err = a.run_pod_sandbox(&pod("p")).await.unwrap_err();
    assert!(
        matches!(err, Error::RequiredPluginMissing { .. }),
        "{err:?}"
    );
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "{waited:?}"
    );
    // After the grace, no more waiting.
    let t1 = tokio::time::Instant::now();
    assert!(a.run_pod_sandbox(&pod("p")).await.is_err());
    assert!(t1.elapsed() < Duration::from_millis(100));
    a.stop().await;
}
