//! One plugin call is one invocation in the metrics: an answer the merge
//! refuses (a conflict) is counted once, with the class of the refusal,
//! never also as a success; an answer merged is counted once as a success.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use nri_api::api::*;
use nri_runtime::{ErrorClass, FailurePolicy, PluginPolicy};

fn annotate(value: &str) -> ContainerAdjustment {
    ContainerAdjustment {
        annotations: [("key".to_owned(), value.to_owned())].into(),
        ..Default::default()
    }
}

fn shares(id: &str, shares: u64) -> ContainerUpdate {
    ContainerUpdate {
        container_id: id.into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: shares }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    }
}

/// Two plugins change the same field in CreateContainer, UpdateContainer
/// and StopContainer: the first plugin's answers are merged, the second's
/// conflict. Policy `ignore`, so every event goes on and both plugins are
/// called each time.
#[tokio::test(flavor = "multi_thread")]
async fn a_conflicting_answer_is_one_invocation_of_class_conflict() {
    let env = TestEnv::new();
    let m = Arc::new(Recording::default());
    let builder = env
        .builder()
        .metrics(m.clone())
        .default_policy(PluginPolicy::new(FailurePolicy::Ignore));
    let a = env.start(builder).await;
    let mut plugins = Vec::new();
    for (idx, name, value) in [("00", "first", 1), ("10", "second", 2)] {
        let p = FakePlugin::new(idx, name)
            .on_create(move |_| CreateContainerResponse {
                adjust: Some(annotate(&value.to_string())),
                ..Default::default()
            })
            .on_update(move |_| UpdateContainerResponse {
                update: vec![shares("other", value)],
                ..Default::default()
            })
            .on_stop(move |_| StopContainerResponse {
                update: vec![shares("other", value)],
            })
            .connect(&env.socket)
            .await
            .unwrap();
        plugins.push(p);
    }
    wait_active(&a, 2).await;
    let (p, c) = (pod("p"), ctr("p", "c"));
    let created = a.create_container(&p, &c).await.unwrap();
    assert_eq!(created.errors.len(), 1, "{:?}", created.errors);
    let updated = a.update_container(&p, &c, None).await.unwrap();
    assert_eq!(updated.errors.len(), 1, "{:?}", updated.errors);
    let stopped = a.stop_container(&p, &c).await.unwrap();
    assert_eq!(stopped.errors.len(), 1, "{:?}", stopped.errors);
    for op in ["CreateContainer", "UpdateContainer", "StopContainer"] {
        assert_eq!(m.results("00-first", op), [Ok(())], "{op}");
        assert_eq!(
            m.results("10-second", op),
            [Err(ErrorClass::Conflict)],
            "{op}"
        );
    }
    a.stop().await;
}
