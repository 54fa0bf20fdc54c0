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
#[allow(clippy::too_many_lines)]
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
        msg.contains("nri-proxy could not forward container updates to the runtime"),
        "{msg}"
    );
    assert!(
        env.runtime.updates.lock().unwrap().is_empty(),
        "not queued for later"
    );
    assert!(h.is_connected(), "the plugin stays connected");

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
    assert!(
        env.runtime.updates.lock().unwrap().is_empty(),
        "the failed update did not reach the runtime once it was back"
    );

    let out = up
        .create_container(&pod("p1"), &ctr("p1", "c2"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=1"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// Restarts the runtime under a running proxy whose plugin holds every
/// CreateContainer until the test lets it go: the runtime now has pod p1
/// with running container c1, which the plugin learns by events; returns
/// once the plugin is held in the resynchronization's CreateContainer of
/// c1.
async fn restart_into_held_replay(
    env: &Env,
    request_timeout: Duration,
) -> (Running, Behind, TestPlugin, nri_runtime::Adaptation) {
    env.runtime.pods.lock().unwrap().push(pod("p0"));
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let hold = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let plugin = TestPlugin::adding("A", "1").held(hold);
    behind.connect(&env.proxy_socket, "10", "ay", plugin.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    env.runtime.pods.lock().unwrap().push(pod("p1"));
    let mut c1 = ctr("p1", "c1");
    c1.state = ContainerState::ContainerRunning as i32;
    env.runtime.containers.lock().unwrap().push(c1);
    let up = env.upstream(request_timeout).await;
    until("the resync's CreateContainer", || {
        plugin.events().iter().any(|e| e == "CreateContainer:c1")
    })
    .await;
    (proxy, behind, plugin, up)
}

fn release(plugin: &TestPlugin, n: usize) {
    plugin.hold_create.as_ref().unwrap().add_permits(n);
}

/// An event the runtime sends while the differences of its restart are
/// still being delivered waits for them: the plugin sees the container
/// created and started before it is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_after_a_restart_reaches_the_plugins_after_the_resync_events() {
    let env = Env::new();
    let (proxy, behind, plugin, up) = restart_into_held_replay(&env, Duration::from_secs(10)).await;
    let remove = {
        let up = up.clone();
        tokio::spawn(async move {
            let mut c1 = ctr("p1", "c1");
            c1.state = ContainerState::ContainerStopped as i32;
            up.remove_container(&pod("p1"), &c1).await
        })
    };
    until("the RemoveContainer held behind the resync", || {
        metric(&proxy.proxy, "nri_proxy_events_held") == Some(1.0)
    })
    .await;
    release(&plugin, 1);
    remove.await.unwrap().unwrap();
    // The plugin's record of an event can trail the answer the runtime got;
    // the order is what this test is about.
    until("the plugin to record the removal", || {
        plugin.events().len() >= 4
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox:p1",
            "CreateContainer:c1",
            "StartContainer:c1",
            "RemoveContainer:c1",
        ]
    );
    assert_eq!(metric(&proxy.proxy, "nri_proxy_events_held"), Some(0.0));
    assert_eq!(
        metric(&proxy.proxy, "nri_proxy_late_events_total"),
        Some(0.0)
    );
    assert_eq!(metric(&proxy.proxy, "nri_proxy_resyncs_total"), Some(1.0));
    assert_eq!(
        metric(&proxy.proxy, "nri_proxy_resync_events_total"),
        Some(3.0)
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// When the resync events outlast the runtime's budget, the runtime is
/// answered on time without the plugins, and the event still reaches them
/// after the resync events, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_held_past_its_budget_is_answered_and_delivered_in_its_turn() {
    let env = Env::new();
    let (proxy, behind, plugin, up) =
        restart_into_held_replay(&env, Duration::from_millis(400)).await;
    let out = up
        .create_container(&pod("p1"), &ctr("p1", "c2"))
        .await
        .unwrap();
    assert!(
        env_of(&out.adjustment).is_empty(),
        "answered without the plugins: {:?}",
        out.adjustment
    );
    assert_eq!(
        metric(&proxy.proxy, "nri_proxy_late_events_total"),
        Some(1.0)
    );
    assert!(
        !plugin.events().iter().any(|e| e.ends_with(":c2")),
        "{:?}",
        plugin.events()
    );
    release(&plugin, 2);
    until("the late CreateContainer", || {
        plugin.events().iter().any(|e| e == "CreateContainer:c2")
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox:p1",
            "CreateContainer:c1",
            "StartContainer:c1",
            "CreateContainer:c2",
        ]
    );
    until("nothing held", || {
        metric(&proxy.proxy, "nri_proxy_events_held") == Some(0.0)
    })
    .await;
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// The proxy answers the runtime's Synchronize within the registration
/// timeout it read from Configure (minus the safety margin), even while
/// the events of an earlier resynchronization hold the delivery order:
/// the new differences follow those, and the proxy stays registered.
/// Paused time: the plugin is held far longer than any timeout, and the
/// runtime's request timeout (30 s) is far longer than its registration
/// timeout (1 s), so only the latter can make the proxy answer in time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_resync_behind_held_events_is_answered_within_the_registration_timeout() {
    let env = Env::new();
    env.runtime.pods.lock().unwrap().push(pod("p0"));
    let up = env.upstream(Duration::from_secs(2)).await;
    // The plugin's own timeout outlasts the test: only the test releases
    // its CreateContainer.
    let proxy = Running::start(env.config("request-timeout: 600s\n", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let hold = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let plugin = TestPlugin::adding("A", "1").held(hold);
    let h = behind.connect(&env.proxy_socket, "10", "ay", plugin.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    // First restart: the runtime now has p1/c1; the plugin is held in the
    // resynchronization's CreateContainer of c1.
    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    env.runtime.pods.lock().unwrap().push(pod("p1"));
    env.runtime.containers.lock().unwrap().push(ctr("p1", "c1"));
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the resync's CreateContainer", || {
        plugin.events().iter().any(|e| e == "CreateContainer:c1")
    })
    .await;
    // Second restart: p2 appeared.
    up.stop().await;
    until("the proxy to notice again", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    env.runtime.pods.lock().unwrap().push(pod("p2"));
    let t0 = tokio::time::Instant::now();
    let up = env
        .upstream_with(Duration::from_secs(30), Duration::from_secs(1))
        .await;
    until("the proxy registered again", || {
        up.plugins().len() == 1 && proxy.proxy.upstream().is_connected()
    })
    .await;
    // At most the reconnection back-off (5 s) and the 750 ms budget.
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "registered after {took:?}");
    assert_eq!(
        plugin.events(),
        ["RunPodSandbox:p1", "CreateContainer:c1"],
        "registered while the first resync is still held"
    );
    release(&plugin, 1);
    until("the second resync's events", || {
        plugin.events().iter().any(|e| e == "RunPodSandbox:p2")
    })
    .await;
    assert_eq!(
        plugin.events(),
        ["RunPodSandbox:p1", "CreateContainer:c1", "RunPodSandbox:p2"],
        "the second resync follows the first"
    );
    assert_eq!(up.plugins().len(), 1, "still registered");
    assert!(h.is_connected(), "the plugin stayed connected");
    assert_eq!(metric(&proxy.proxy, "nri_proxy_resyncs_total"), Some(2.0));
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
