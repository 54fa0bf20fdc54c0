//! Failure policy (ignore / fail / required), timeouts with strikes, and
//! teardown events that never fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::Event;
use nri_runtime::{Error, FailurePolicy, PluginFailure, PluginPolicy};

#[tokio::test(flavor = "multi_thread")]
async fn fail_policy_fails_the_request_and_stops_later_plugins() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let bad = FakePlugin::new("10", "bad").fail("CreateContainer");
    let later = FakePlugin::new("20", "later");
    let _b = bad.clone().connect(&env.socket).await.unwrap();
    let _l = later.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    match &err {
        Error::PluginFailed {
            plugin,
            event,
            cause,
        } => {
            assert_eq!(plugin, "10-bad");
            assert_eq!(event, "CreateContainer");
            assert!(matches!(cause, PluginFailure::Status { .. }), "{cause:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("10-bad") && err.to_string().contains("injected failure"));
    assert!(!events_of(&later.received()).contains(&"CreateContainer".to_owned()));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ignore_policy_continues_and_reports() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().failure_policy("bad", FailurePolicy::Ignore))
        .await;
    let bad = FakePlugin::new("10", "bad")
        .fail("CreateContainer")
        .fail("RunPodSandbox");
    let later = FakePlugin::new("20", "later");
    let _b = bad.clone().connect(&env.socket).await.unwrap();
    let _l = later.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    let run = a.run_pod_sandbox(&pod("p")).await.expect("ignored");
    assert_eq!(run.errors.len(), 1);
    let out = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("ignored");
    assert_eq!(out.errors[0].plugin, "10-bad");
    assert_eq!(out.errors[0].event, Event::CreateContainer);
    assert!(events_of(&later.received()).contains(&"CreateContainer".to_owned()));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn per_event_override() {
    let env = TestEnv::new();
    let policy = PluginPolicy::new(FailurePolicy::Fail)
        .with_event(Event::StartContainer, FailurePolicy::Ignore);
    let a = env
        .start(env.builder().plugin_policy("10-bad", policy))
        .await;
    let bad = FakePlugin::new("10", "bad")
        .fail("StartContainer")
        .fail("CreateContainer");
    let _b = bad.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let r = a
        .start_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("StartContainer ignored");
    assert_eq!(r.errors.len(), 1);
    assert!(a.create_container(&pod("p"), &ctr("p", "c")).await.is_err());
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn required_plugin_absent_fails_run_pod_sandbox_and_create_container() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .failure_policy("netplug", FailurePolicy::Required),
        )
        .await;
    let err = a.run_pod_sandbox(&pod("p")).await.unwrap_err();
    assert!(
        matches!(&err, Error::RequiredPluginMissing { plugin, event } if plugin == "netplug" && event == "RunPodSandbox"),
        "{err:?}"
    );
    let err = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RequiredPluginMissing { event, .. } if event == "CreateContainer"),
        "{err:?}"
    );
    // Other events are not gated.
    a.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let c = FakePlugin::new("30", "netplug")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.run_pod_sandbox(&pod("p")).await.expect("present now");
    a.create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("present now");
    c.crash();
    wait_active_exact(&a, 0).await;
    assert!(matches!(
        a.run_pod_sandbox(&pod("p")).await,
        Err(Error::RequiredPluginMissing { .. })
    ));
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn timeout_fails_one_event_and_strikes_disconnect_after_the_limit() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .request_timeout(Duration::from_secs(2))
                .strike_limit(3)
                .failure_policy("slow", FailurePolicy::Required),
        )
        .await;
    let slow = FakePlugin::new("10", "slow").delay("CreateContainer", Duration::from_secs(10));
    let _c = slow.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    for strike in 1..=3u32 {
        let t0 = tokio::time::Instant::now();
        let err = a
            .create_container(&pod("p"), &ctr("p", &format!("c{strike}")))
            .await
            .unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "bounded by the request timeout"
        );
        assert!(
            matches!(
                &err,
                Error::PluginFailed {
                    cause: PluginFailure::Timeout { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        if strike < 3 {
            // Not disconnected on the first misses.
            assert_eq!(
                a.plugins().len(),
                1,
                "still connected after {strike} strikes"
            );
            assert_eq!(a.plugins()[0].strikes, strike);
        }
    }
    wait_active_exact(&a, 0).await;
    // Now absent: required fails without waiting.
    assert!(matches!(
        a.create_container(&pod("p"), &ctr("p", "c9")).await,
        Err(Error::RequiredPluginMissing { .. })
    ));
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_success_resets_strikes_and_fail_policy_skips_timeouts() {
    let env = TestEnv::new();
    let a = env.start(env.builder().strike_limit(2)).await;
    let slow = FakePlugin::new("10", "slow").delay("StartContainer", Duration::from_secs(10));
    let _c = slow.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    for i in 0..5 {
        // policy fail: a timeout is reported, the request succeeds.
        let r = a
            .start_container(&pod("p"), &ctr("p", &format!("c{i}")))
            .await
            .unwrap();
        assert!(matches!(r.errors[0].failure, PluginFailure::Timeout { .. }));
        a.create_container(&pod("p"), &ctr("p", &format!("c{i}")))
            .await
            .unwrap();
        assert_eq!(a.plugins()[0].strikes, 0);
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn teardown_reaches_every_plugin_and_never_fails() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .failure_policy("first", FailurePolicy::Required),
        )
        .await;
    let mut first = FakePlugin::new("10", "first");
    for ev in [
        "StopPodSandbox",
        "RemovePodSandbox",
        "StopContainer",
        "RemoveContainer",
        "PostCreateContainer",
        "PostStartContainer",
        "PostUpdateContainer",
        "PostUpdatePodSandbox",
    ] {
        first = first.fail(ev);
    }
    let second = FakePlugin::new("20", "second");
    let _a1 = first.clone().connect(&env.socket).await.unwrap();
    let _a2 = second.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    let (p, c) = (pod("p"), ctr("p", "c"));
    assert_eq!(
        a.post_create_container(&p, &c).await.unwrap().errors.len(),
        1
    );
    assert_eq!(
        a.post_start_container(&p, &c).await.unwrap().errors.len(),
        1
    );
    assert_eq!(
        a.post_update_container(&p, &c).await.unwrap().errors.len(),
        1
    );
    assert_eq!(a.post_update_pod_sandbox(&p).await.unwrap().errors.len(), 1);
    let stop = a.stop_container(&p, &c).await.unwrap();
    assert_eq!(stop.errors[0].plugin, "10-first");
    assert_eq!(a.remove_container(&p, &c).await.unwrap().errors.len(), 1);
    assert_eq!(a.stop_pod_sandbox(&p).await.unwrap().errors.len(), 1);
    assert_eq!(a.remove_pod_sandbox(&p).await.unwrap().errors.len(), 1);
    assert_eq!(
        events_of(&second.received()),
        [
            "PostCreateContainer",
            "PostStartContainer",
            "PostUpdateContainer",
            "PostUpdatePodSandbox",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox"
        ]
    );
    a.stop().await;
}
