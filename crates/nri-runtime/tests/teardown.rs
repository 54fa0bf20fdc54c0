//! Teardown never blocks: a plugin that hangs on StopPodSandbox,
//! RemovePodSandbox, StopContainer or RemoveContainer delays the event by at
//! most its request timeout, every later plugin still receives it, and
//! the call returns success; `stop_container` succeeds in every state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_runtime::{Adaptation, FailurePolicy, PluginFailure};

const TIMEOUT: Duration = Duration::from_secs(2);
const TEARDOWN: [&str; 4] = [
    "StopPodSandbox",
    "RemovePodSandbox",
    "StopContainer",
    "RemoveContainer",
];

async fn teardown(a: &Adaptation, event: &str) -> Vec<nri_runtime::PluginError> {
    let (p, c) = (pod("p"), ctr("p", "c"));
    match event {
        "StopPodSandbox" => a.stop_pod_sandbox(&p).await.unwrap().errors,
        "RemovePodSandbox" => a.remove_pod_sandbox(&p).await.unwrap().errors,
        "StopContainer" => a.stop_container(&p, &c).await.unwrap().errors,
        "RemoveContainer" => a.remove_container(&p, &c).await.unwrap().errors,
        other => unreachable!("{other}"),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hanging_plugin_delays_teardown_by_at_most_its_timeout() {
    for event in TEARDOWN {
        let env = TestEnv::new();
        // Even `required` does not make teardown fail or wait longer.
        let a = env
            .start(
                env.builder()
                    .request_timeout(TIMEOUT)
                    .failure_policy("hang", FailurePolicy::Required),
            )
            .await;
        let hang = FakePlugin::new("10", "hang").delay(event, Duration::from_secs(3600));
        let later = FakePlugin::new("20", "later");
        let _h = hang.clone().connect(&env.socket).await.unwrap();
        let _l = later.clone().connect(&env.socket).await.unwrap();
        wait_active(&a, 2).await;
        let t0 = tokio::time::Instant::now();
        let errors = teardown(&a, event).await;
        let took = t0.elapsed();
        assert!(
            took >= TIMEOUT,
            "{event}: waited for the hanging plugin ({took:?})"
        );
        assert!(
            took < TIMEOUT + Duration::from_millis(100),
            "{event}: delayed by at most the timeout ({took:?})"
        );
        assert_eq!(errors.len(), 1, "{event}: {errors:?}");
        assert_eq!(errors[0].plugin, "10-hang");
        assert!(
            matches!(errors[0].failure, PluginFailure::Timeout { .. }),
            "{event}"
        );
        assert_eq!(
            events_of(&later.received()),
            [event],
            "{event}: the later plugin got it"
        );
        assert_eq!(events_of(&hang.received()), [event]);
        a.stop().await;
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stop_container_succeeds_in_every_state() {
    let env = TestEnv::new();
    let a = env.builder().build(env.runtime.clone()).unwrap();
    let (p, c) = (pod("p"), ctr("p", "c"));
    let before = a.stop_container(&p, &c).await.expect("before start");
    assert!(before.updates.is_empty() && before.errors.is_empty());
    a.stop_pod_sandbox(&p).await.expect("before start");
    a.remove_container(&p, &c).await.expect("before start");
    a.start().await.unwrap();
    a.stop_container(&p, &c).await.expect("started");
    a.stop().await;
    let after = a.stop_container(&p, &c).await.expect("after stop");
    assert!(after.updates.is_empty() && after.errors.is_empty());
    a.remove_pod_sandbox(&p).await.expect("after stop");
}
