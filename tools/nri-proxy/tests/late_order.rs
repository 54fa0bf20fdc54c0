//! Events the proxy answered late (their turn had not come within the
//! runtime's budget) reach each plugin in the order the runtime sent them,
//! one after the other, after the events that held them; and the proxy's
//! view ends as the runtime's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_api::api::ContainerState;

/// Time budget: about 2 s of real time (a 400 ms request timeout upstream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_answered_late_reach_the_plugins_in_the_runtimes_order() {
    let env = Env::new();
    let (proxy, mut behind, plugin, hold, up) = restart_into_a_held_resync(&env).await;
    late_life_of_p2(&up).await;
    assert_eq!(
        metric(&proxy.proxy, "nri_proxy_late_events_total"),
        Some(7.0)
    );

    // c1's CreateContainer goes on; c2's is held in turn, and nothing of
    // c2 may overtake it.
    hold.add_permits(1);
    until("c2's CreateContainer", || {
        plugin.events().iter().any(|e| e == "CreateContainer:c2")
    })
    .await;
    hold.add_permits(1);
    until("the pod's removal", || {
        plugin.events().iter().any(|e| e == "RemovePodSandbox:p2")
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox:p1",
            "CreateContainer:c1",
            "RunPodSandbox:p2",
            "CreateContainer:c2",
            "StartContainer:c2",
            "StopContainer:c2",
            "RemoveContainer:c2",
            "StopPodSandbox:p2",
            "RemovePodSandbox:p2",
        ]
    );
    assert_eq!(
        *plugin.overtaken.lock().unwrap(),
        Vec::<String>::new(),
        "events that overtook their container's creation"
    );
    let (pods, ctrs) = lifecycle(&(vec!["p0".into()], vec![]), &plugin.events()).unwrap();
    assert_eq!(
        (pods, ctrs),
        (vec!["p0".into(), "p1".into()], vec!["c1".into()])
    );
    until("nothing held", || {
        metric(&proxy.proxy, "nri_proxy_events_held") == Some(0.0)
    })
    .await;

    // The view is the runtime's: a plugin registering now is synchronized
    // without p2 and c2.
    let late = TestPlugin::default();
    behind.connect(&env.proxy_socket, "20", "late", late.clone());
    until("the late plugin", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;
    let (mut pods, ctrs) = late.synced.lock().unwrap()[0].clone();
    pods.sort();
    assert_eq!(
        (pods, ctrs),
        (vec!["p0".into(), "p1".into()], vec!["c1".into()])
    );

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// A proxy with one plugin behind it that holds every CreateContainer
/// until the test lets it go; the runtime restarts with a new container
/// c1 (and a 400 ms request timeout), and the resynchronization holds the
/// plugin in c1's CreateContainer.
async fn restart_into_a_held_resync(
    env: &Env,
) -> (
    Running,
    Behind,
    TestPlugin,
    Arc<tokio::sync::Semaphore>,
    nri_runtime::Adaptation,
) {
    env.runtime.pods.lock().unwrap().push(pod("p0"));
    let up = env.upstream(Duration::from_secs(2)).await;
    // The plugins' own timeout outlasts the test: only the test releases
    // their CreateContainer.
    let proxy = Running::start(env.config("request-timeout: 60s\n", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let plugin = TestPlugin::adding("A", "1").held(hold.clone());
    behind.connect(&env.proxy_socket, "10", "ay", plugin.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    // The runtime restarts with a new container c1: the resynchronization
    // holds the plugins in c1's CreateContainer.
    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    env.runtime.pods.lock().unwrap().push(pod("p1"));
    env.runtime.containers.lock().unwrap().push(ctr("p1", "c1"));
    let up = env.upstream(Duration::from_millis(400)).await;
    until("the resync's CreateContainer", || {
        plugin.events().iter().any(|e| e == "CreateContainer:c1")
    })
    .await;

    (proxy, behind, plugin, hold, up)
}

/// A whole life of pod p2 and its container c2, each event answered late.
async fn late_life_of_p2(up: &nri_runtime::Adaptation) {
    let (p2, mut c2) = (pod("p2"), ctr("p2", "c2"));
    up.run_pod_sandbox(&p2).await.unwrap();
    up.create_container(&p2, &c2).await.unwrap();
    c2.state = ContainerState::ContainerRunning as i32;
    up.start_container(&p2, &c2).await.unwrap();
    c2.state = ContainerState::ContainerStopped as i32;
    up.stop_container(&p2, &c2).await.unwrap();
    up.remove_container(&p2, &c2).await.unwrap();
    up.stop_pod_sandbox(&p2).await.unwrap();
    up.remove_pod_sandbox(&p2).await.unwrap();
}
