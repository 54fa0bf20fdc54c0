//! A runtime restart under an external proxy with a changed set of pods
//! and containers: some gone, some new, some in another state. The
//! plugins get the events that bring them to the runtime's lists, states
//! included: StartContainer for a container that started while the
//! runtime was away, StopContainer for one that exited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{Container, ContainerState};

const RUNNING: ContainerState = ContainerState::ContainerRunning;
const STOPPED: ContainerState = ContainerState::ContainerStopped;

fn in_state(pod: &str, id: &str, s: ContainerState) -> Container {
    let mut c = ctr(pod, id);
    c.state = s as i32;
    c
}

/// Time budget: about 3 s of real time (the proxy's reconnection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_brings_the_plugins_to_the_runtimes_states() {
    let env = Env::new();
    *env.runtime.pods.lock().unwrap() = vec![pod("p0"), pod("p1")];
    *env.runtime.containers.lock().unwrap() = vec![
        in_state("p0", "created", ContainerState::ContainerCreated),
        in_state("p0", "running", RUNNING),
        in_state("p0", "exited", RUNNING),
        in_state("p1", "gone", RUNNING),
    ];
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let plugin = TestPlugin::default();
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

    // Meanwhile: "created" started, "exited" exited, "gone" and its pod
    // went, p2 came with a running and an exited container.
    *env.runtime.pods.lock().unwrap() = vec![pod("p0"), pod("p2")];
    *env.runtime.containers.lock().unwrap() = vec![
        in_state("p0", "created", RUNNING),
        in_state("p0", "running", RUNNING),
        in_state("p0", "exited", STOPPED),
        in_state("p2", "new", RUNNING),
        in_state("p2", "new-exited", STOPPED),
    ];
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the resync events", || {
        plugin
            .events()
            .iter()
            .any(|e| e == "StopContainer:new-exited")
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "StopContainer:gone",
            "RemoveContainer:gone",
            "StopPodSandbox:p1",
            "RemovePodSandbox:p1",
            "StartContainer:created",
            "StopContainer:exited",
            "RunPodSandbox:p2",
            "CreateContainer:new",
            "StartContainer:new",
            "CreateContainer:new-exited",
            "StopContainer:new-exited",
        ]
    );
    let end = lifecycle(&plugin.synced.lock().unwrap()[0], &plugin.events()).unwrap();
    let ids = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let want = (ids("p0 p2"), ids("created exited new new-exited running"));
    assert_eq!(end, want);

    // The view has the states: a plugin registering now sees them.
    assert_eq!(
        states_of_a_new_plugin(&env, &proxy).await,
        [
            ("created".to_owned(), RUNNING as i32),
            ("exited".into(), STOPPED as i32),
            ("new".into(), RUNNING as i32),
            ("new-exited".into(), STOPPED as i32),
            ("running".into(), RUNNING as i32),
        ]
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// A proxy with `plugin` behind it under a runtime that has `pods` and
/// `containers`.
async fn set_up(
    env: &Env,
    pods: Vec<nri_api::api::PodSandbox>,
    containers: Vec<Container>,
    plugin: &TestPlugin,
) -> (nri_runtime::Adaptation, Running, Behind) {
    *env.runtime.pods.lock().unwrap() = pods;
    *env.runtime.containers.lock().unwrap() = containers;
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", plugin.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    (up, proxy, behind)
}

/// Stops the runtime `up` and waits until the proxy has noticed.
async fn runtime_away(up: nri_runtime::Adaptation, proxy: &Running) {
    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
}

/// A container and a pod the plugins were told stopped, gone when the
/// runtime comes back: only their removal reaches the plugins, not a
/// second StopContainer or StopPodSandbox. Paused time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn objects_that_went_away_stopped_are_not_stopped_again() {
    let env = Env::new();
    let plugin = TestPlugin::default();
    let pods = vec![pod("p0"), pod("p1")];
    let (up, proxy, behind) =
        set_up(&env, pods, vec![in_state("p0", "c0", RUNNING)], &plugin).await;
    let c0 = in_state("p0", "c0", STOPPED);
    *env.runtime.containers.lock().unwrap() = vec![c0.clone()];
    up.stop_container(&pod("p0"), &c0).await.unwrap();
    up.stop_pod_sandbox(&pod("p1")).await.unwrap();
    runtime_away(up, &proxy).await;

    *env.runtime.pods.lock().unwrap() = vec![pod("p0")];
    env.runtime.containers.lock().unwrap().clear();
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the resync events", || {
        plugin.events().iter().any(|e| e == "RemovePodSandbox:p1")
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "StopContainer:c0",
            "StopPodSandbox:p1",
            "RemoveContainer:c0",
            "RemovePodSandbox:p1",
        ]
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// The containers' states a plugin registering with the proxy now is
/// synchronized with, by id.
async fn states_of_a_new_plugin(env: &Env, proxy: &Running) -> Vec<(String, i32)> {
    let late = StatePlugin::default();
    let stub = nri_plugin::Builder::new(late.clone())
        .name("late")
        .index("20")
        .socket_path(&env.proxy_socket)
        .mode(nri_plugin::ConnectMode::External)
        .build()
        .unwrap();
    let h = stub.handle();
    let task = tokio::spawn(async move { stub.run().await });
    let before = proxy.proxy.adaptation().plugins().len();
    until("the late plugin", || {
        proxy.proxy.adaptation().plugins().len() == before + 1
    })
    .await;
    let mut states = late.states.lock().unwrap().clone();
    states.sort();
    h.stop();
    let _ = task.await;
    states
}

/// A plugin that records the containers' states of its Synchronize.
#[derive(Clone, Default)]
struct StatePlugin {
    states: std::sync::Arc<std::sync::Mutex<Vec<(String, i32)>>>,
}

#[nri_plugin::plugin]
impl nri_plugin::Plugin for StatePlugin {
    async fn synchronize(
        &self,
        _pods: Vec<nri_api::api::PodSandbox>,
        containers: Vec<Container>,
        _kind: nri_plugin::SyncKind,
    ) -> nri_plugin::HandlerResult<Vec<nri_api::api::ContainerUpdate>> {
        *self.states.lock().unwrap() = containers.into_iter().map(|c| (c.id, c.state)).collect();
        Ok(Vec::new())
    }
    async fn start_container(
        &self,
        _pod: nri_api::api::PodSandbox,
        _c: Container,
    ) -> nri_plugin::HandlerResult<()> {
        Ok(())
    }
}
