//! A validator plugin is called only once its backlog (what happened
//! while it synchronized) has been delivered, like any other call: a
//! validator that registered while pods were in flight never gets
//! ValidateContainerAdjustment for a pod whose RunPodSandbox it has not
//! seen yet, so one that rejects unknown pods does not fail creations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{Event, ValidateContainerAdjustmentResponse};

/// A validator that takes RunPodSandbox and rejects containers of pods it
/// has not been told about (by its Synchronize or a RunPodSandbox).
fn strict_validator() -> FakePlugin {
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    FakePlugin::new("90", "strict")
        .events(
            EventMask::EMPTY
                .with(Event::RunPodSandbox)
                .with(Event::ValidateContainerAdjustment),
        )
        .log_to(log)
        .on_validate(move |req| {
            let pod = req.pod.as_ref().map(|p| p.id.clone()).unwrap_or_default();
            let known = seen.lock().unwrap().iter().any(|r: &Received| {
                r.sync_pods.contains(&pod)
                    || (r.method == "RunPodSandbox" && r.pod.as_deref() == Some(pod.as_str()))
            });
            ValidateContainerAdjustmentResponse {
                reject: !known,
                reason: if known {
                    String::new()
                } else {
                    format!("unknown pod {pod}")
                },
            }
        })
}

/// Two pods are in flight when the validator registers: both are in its
/// backlog, each RunPodSandbox taking it 500 ms. A container of the
/// second pod is created while the first is being delivered: its
/// validation waits for the validator's backlog, and the creation
/// succeeds.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_validator_is_called_after_its_backlog() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(2)))
        .await;
    let run_a = a.run_pod_sandbox(&pod("pa")).await.unwrap();
    let run_b = a.run_pod_sandbox(&pod("pb")).await.unwrap();
    let v = strict_validator().delay("RunPodSandbox", Duration::from_millis(500));
    let _v = v.clone().connect(&env.socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            events_of(&v.received()).contains(&"RunPodSandbox".to_owned())
        })
        .await,
        "the backlog is being delivered"
    );
    env.runtime.add_pod(pod("pa"));
    env.runtime.add_pod(pod("pb"));
    drop((run_a.guard, run_b.guard));
    let out = a.create_container(&pod("pb"), &ctr("pb", "c")).await;
    let out = out.expect("the validator knows the pod when it validates");
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let seen: Vec<(String, Option<String>)> = v
        .received()
        .into_iter()
        .filter_map(|r| Some((r.event?.pretty_name().to_owned(), r.pod)))
        .collect();
    assert_eq!(
        seen,
        [
            ("RunPodSandbox".to_owned(), Some("pa".to_owned())),
            ("RunPodSandbox".to_owned(), Some("pb".to_owned())),
            (
                "ValidateContainerAdjustment".to_owned(),
                Some("pb".to_owned())
            ),
        ]
    );
    a.stop().await;
}

/// A validator whose backlog takes longer than its request timeout (two
/// RunPodSandbox that time out, 2 s each): the
/// validation's wait runs out, which is a validator failure, and the
/// creation fails closed (validation that fails closed is the default).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_validator_whose_backlog_outlasts_its_timeout_fails_closed() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .request_timeout(Duration::from_secs(2))
                .strike_limit(0),
        )
        .await;
    // Two pods in flight: a backlog of two 2 s timeouts.
    let run_a = a.run_pod_sandbox(&pod("pa")).await.unwrap();
    let run_b = a.run_pod_sandbox(&pod("pb")).await.unwrap();
    let v = strict_validator().delay("RunPodSandbox", Duration::from_secs(10));
    let _v = v.clone().connect(&env.socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            events_of(&v.received()).contains(&"RunPodSandbox".to_owned())
        })
        .await
    );
    env.runtime.add_pod(pod("pa"));
    env.runtime.add_pod(pod("pb"));
    drop((run_a.guard, run_b.guard));
    let t0 = tokio::time::Instant::now();
    let err = a
        .create_container(&pod("pa"), &ctr("pa", "c"))
        .await
        .expect_err("fails closed");
    assert!(t0.elapsed() <= Duration::from_secs(2) + Duration::from_millis(50));
    assert!(
        matches!(err, nri_runtime::Error::PluginFailed { .. }),
        "{err:?}"
    );
    assert!(
        !events_of(&v.received()).contains(&"ValidateContainerAdjustment".to_owned()),
        "not called before its backlog"
    );
    a.stop().await;
}
