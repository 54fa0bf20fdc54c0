//! `Adaptation::with_deadline`: every plugin call of an event ends by the
//! deadline; a plugin cut short times out (a strike), a plugin whose turn
//! comes after the deadline is not called (no strike), and the failure
//! policy decides what that means for the request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::{Error, ErrorClass, FailurePolicy, PluginFailure};
use tokio::time::Instant;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_slow_plugin_is_cut_at_the_deadline_and_gets_a_strike() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(5)))
        .await;
    // Not a validator: a validator not called in time fails the creation
    // (validation fails closed), see the next test.
    let slow = FakePlugin::new("10", "slow")
        .events(EventMask::from_events(&[Event::CreateContainer]))
        .delay("CreateContainer", Duration::from_secs(60));
    let _c = slow.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;

    let t0 = Instant::now();
    let out = a
        .with_deadline(t0 + Duration::from_secs(1))
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("policy fail: an unavailable plugin is skipped");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1100),
        "ended at the deadline, not the plugin's 5 s timeout: {took:?}"
    );
    assert_eq!(out.errors.len(), 1);
    assert_eq!(
        out.errors[0].failure,
        PluginFailure::Timeout {
            timeout: Duration::from_secs(1)
        }
    );
    assert_eq!(a.plugins()[0].strikes, 1, "a call cut short is a strike");

    // Without a deadline the plugin's own timeout applies again.
    let t0 = Instant::now();
    let out = a
        .create_container(&pod("p"), &ctr("p", "c2"))
        .await
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(5));
    assert_eq!(
        out.errors[0].failure,
        PluginFailure::Timeout {
            timeout: Duration::from_secs(5)
        }
    );
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_plugin_after_the_deadline_is_not_called_and_required_fails_the_request() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .request_timeout(Duration::from_secs(5))
                .failure_policy("needed", FailurePolicy::Required),
        )
        .await;
    let slow = FakePlugin::new("10", "slow").delay("CreateContainer", Duration::from_secs(60));
    let needed = FakePlugin::new("20", "needed");
    let _c1 = slow.clone().connect(&env.socket).await.unwrap();
    let _c2 = needed.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;

    let t0 = Instant::now();
    let err = a
        .with_deadline(t0 + Duration::from_millis(500))
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_millis(600));
    match &err {
        Error::PluginFailed { plugin, cause, .. } => {
            assert_eq!(plugin, "20-needed");
            assert_eq!(*cause, PluginFailure::NotCalled);
            assert_eq!(cause.class(), ErrorClass::NotCalled);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("20-needed") && err.to_string().contains("deadline"),
        "{err}"
    );
    assert!(
        !events_of(&needed.received()).contains(&"CreateContainer".to_owned()),
        "not called after the deadline"
    );
    let strikes: Vec<(String, u32)> = a
        .plugins()
        .iter()
        .map(|p| (p.id.to_string(), p.strikes))
        .collect();
    assert_eq!(
        strikes,
        [("10-slow".to_owned(), 1), ("20-needed".to_owned(), 0)],
        "only the slow plugin has a strike"
    );
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_plugin_not_called_in_time_gets_the_creation_after_the_fact_and_in_order() {
    let after = FakePlugin::new("20", "after").events(EventMask::from_events(&[
        Event::CreateContainer,
        Event::StartContainer,
    ]));
    let (_env, a, _conns) = behind_a_slow_plugin(&after).await;

    let t0 = Instant::now();
    let out = a
        .with_deadline(t0 + Duration::from_millis(500))
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("an unavailable plugin is skipped under the default policy");
    assert!(t0.elapsed() < Duration::from_millis(600));
    let failures: Vec<_> = out.errors.iter().map(|e| e.failure.class()).collect();
    assert_eq!(failures, [ErrorClass::Timeout, ErrorClass::NotCalled]);
    // The next event about the container waits for the creation the
    // plugin was not called for: it gets both, in order.
    a.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(
        events_of(&after.received()),
        ["CreateContainer", "StartContainer"]
    );
    let strikes: Vec<u32> = a.plugins().iter().map(|p| p.strikes).collect();
    assert_eq!(strikes, [1, 0], "not being called is no strike");
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn teardown_with_a_passed_deadline_is_reported_not_failed() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().failure_policy("p1", FailurePolicy::Required))
        .await;
    let p1 = FakePlugin::new("10", "p1");
    let _c = p1.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let late = a.with_deadline(Instant::now());
    assert_eq!(late.deadline(), Some(Instant::now()));
    let stop = late
        .stop_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(stop.errors[0].failure, PluginFailure::NotCalled);
    let rm = late.remove_pod_sandbox(&pod("p")).await.unwrap();
    assert_eq!(rm.errors[0].failure, PluginFailure::NotCalled);
    // A request event fails for the required plugin.
    assert!(matches!(
        late.run_pod_sandbox(&pod("p")).await,
        Err(Error::PluginFailed {
            cause: PluginFailure::NotCalled,
            ..
        })
    ));
    // The original handle has no deadline.
    assert_eq!(a.deadline(), None);
    a.run_pod_sandbox(&pod("p")).await.unwrap();
    // The teardown events it was not called for reach it after the fact,
    // in order and before the next event; the refused creation does not.
    assert_eq!(
        events_of(&p1.received()),
        ["StopContainer", "RemovePodSandbox", "RunPodSandbox"]
    );
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_validator_not_called_in_time_fails_the_creation_closed() {
    let validator = FakePlugin::new("90", "validator").events(EventMask::from_events(&[
        Event::ValidateContainerAdjustment,
    ]));
    let (_env, a, _conns) = behind_a_slow_plugin(&validator).await;
    let err = a
        .with_deadline(Instant::now() + Duration::from_secs(1))
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::PluginFailed { plugin, event, cause: PluginFailure::NotCalled }
            if plugin == "90-validator" && event == "ValidateContainerAdjustment"),
        "{err:?}"
    );
    a.stop().await;
}

/// A runtime with a 5 s request timeout and two active plugins: `10-slow`,
/// which takes CreateContainer only and answers it after 60 s, then
/// `second`.
async fn behind_a_slow_plugin(
    second: &FakePlugin,
) -> (TestEnv, nri_runtime::Adaptation, Vec<Connected>) {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(5)))
        .await;
    let slow = FakePlugin::new("10", "slow")
        .events(EventMask::from_events(&[Event::CreateContainer]))
        .delay("CreateContainer", Duration::from_secs(60));
    let c1 = slow.connect(&env.socket).await.unwrap();
    let c2 = second.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    (env, a, vec![c1, c2])
}
