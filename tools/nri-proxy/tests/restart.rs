//! The runtime above an external proxy restarts: the proxy registers
//! again, its plugins stay connected (no second Synchronize), and what
//! changed meanwhile reaches them as events. Unsolicited updates while the
//! runtime is away fail with an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{
    ContainerState, ContainerUpdate, LinuxContainerUpdate, LinuxCpu, LinuxResources, OptionalUInt64,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_restart_is_delivered_as_events_and_plugins_stay_connected() {
    let env = Env::new();
    env.runtime.pods.lock().unwrap().push(pod("p0"));
    env.runtime.containers.lock().unwrap().push(ctr("p0", "c0"));
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let plugin = TestPlugin::adding("A", "1");
    let h = behind.connect(&env.proxy_socket, "10", "ay", plugin.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    assert_eq!(plugin.synced.lock().unwrap().len(), 1);

    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    let err = h
        .update_containers(
            vec![ContainerUpdate {
                container_id: "c0".into(),
                linux: Some(LinuxContainerUpdate {
                    resources: Some(LinuxResources {
                        cpu: Some(LinuxCpu {
                            shares: Some(OptionalUInt64 { value: 512 }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }],
            Vec::new(),
        )
        .await
        .unwrap_err();
    let mut msg = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        msg = format!("{msg}: {c}");
        cause = c.source();
    }
    assert!(
        msg.contains("nri-proxy could not forward") && msg.contains("not"),
        "{msg}"
    );

    // What the runtime has when it comes back.
    *env.runtime.pods.lock().unwrap() = vec![pod("p1")];
    let mut c1 = ctr("p1", "c1");
    c1.state = ContainerState::ContainerRunning as i32;
    *env.runtime.containers.lock().unwrap() = vec![c1];
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the resync events", || {
        plugin.events().iter().any(|e| e == "StartContainer:c1")
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "StopContainer:c0",
            "RemoveContainer:c0",
            "StopPodSandbox:p0",
            "RemovePodSandbox:p0",
            "RunPodSandbox:p1",
            "CreateContainer:c1",
            "StartContainer:c1",
        ]
    );
    assert_eq!(
        plugin.synced.lock().unwrap().len(),
        1,
        "no second Synchronize"
    );
    assert!(h.is_connected(), "the plugin stayed connected");

    let out = up
        .create_container(&pod("p1"), &ctr("p1", "c2"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=1"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
