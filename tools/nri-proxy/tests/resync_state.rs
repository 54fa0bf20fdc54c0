//! A runtime restart under an external proxy with a changed set of pods
//! and containers: some gone, some new, some in another state or with
//! other resources. The plugins get the events that bring them to the
//! runtime's lists, states and memory limits included: StartContainer for
//! a container that started while the runtime was away, StopContainer for
//! one that exited, PostUpdateContainer for one with a new limit; and no
//! state twice.
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

/// Brings the runtime back with `containers` and waits until the plugin
/// has `n` events.
async fn runtime_back(
    env: &Env,
    containers: Vec<Container>,
    plugin: &TestPlugin,
    n: usize,
) -> nri_runtime::Adaptation {
    *env.runtime.containers.lock().unwrap() = containers;
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the resync events", || plugin.events().len() >= n).await;
    up
}

/// A container that exited while the runtime was away: the resync tells
/// the plugins (StopContainer), and the runtime's own StopContainer for
/// that exit, reported after it came back, does not reach them a second
/// time. Paused time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_exit_reported_after_the_resync_is_not_delivered_again() {
    let env = Env::new();
    let plugin = TestPlugin::default();
    let c0 = in_state("p0", "c0", RUNNING);
    let (up, proxy, behind) = set_up(&env, vec![pod("p0")], vec![c0], &plugin).await;
    runtime_away(up, &proxy).await;

    let c0 = in_state("p0", "c0", STOPPED);
    let up = runtime_back(&env, vec![c0.clone()], &plugin, 1).await;
    up.stop_container(&pod("p0"), &c0).await.unwrap();
    up.remove_container(&pod("p0"), &c0).await.unwrap();
    until("the removal", || plugin.events().len() >= 2).await;
    assert_eq!(plugin.events(), ["StopContainer:c0", "RemoveContainer:c0"]);
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// The runtime sends StartContainer with the container still created (it
/// marks it running after the event), and goes away before
/// PostStartContainer: the resync finds it running, which the plugins were
/// already told, and sends no second StartContainer. Paused time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_start_told_before_the_runtime_went_away_is_not_told_again() {
    let env = Env::new();
    let plugin = TestPlugin::default();
    let c0 = in_state("p0", "c0", ContainerState::ContainerCreated);
    let (up, proxy, behind) = set_up(&env, vec![pod("p0")], vec![c0.clone()], &plugin).await;
    up.start_container(&pod("p0"), &c0).await.unwrap();
    runtime_away(up, &proxy).await;

    // Back with c0 running, and a new container as a marker that the
    // resync was delivered.
    let back = vec![in_state("p0", "c0", RUNNING), in_state("p0", "c1", RUNNING)];
    let up = runtime_back(&env, back, &plugin, 3).await;
    assert_eq!(
        plugin.events(),
        [
            "StartContainer:c0",
            "CreateContainer:c1",
            "StartContainer:c1"
        ]
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

fn with_memory(mut c: Container, limit: i64) -> Container {
    let mut r = nri_api::api::LinuxResources::default();
    r.memory_mut().limit = Some(limit.into());
    c.linux.get_or_insert_default().resources = Some(r);
    c
}

/// A container whose memory limit the runtime changed while the proxy was
/// away: the plugins get PostUpdateContainer with the new limit. Paused
/// time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_resource_change_while_away_reaches_the_plugins() {
    let env = Env::new();
    let plugin = TestPlugin::default();
    let c0 = with_memory(in_state("p0", "c0", RUNNING), 256 << 20);
    let (up, proxy, behind) = set_up(&env, vec![pod("p0")], vec![c0], &plugin).await;
    runtime_away(up, &proxy).await;

    // Back with c0's new limit, and a new container as a marker that the
    // resync was delivered.
    let back = vec![
        with_memory(in_state("p0", "c0", RUNNING), 1 << 30),
        in_state("p0", "c1", ContainerState::ContainerCreated),
    ];
    let up = runtime_back(&env, back, &plugin, 1).await;
    assert_eq!(plugin.events(), ["CreateContainer:c1"]);
    assert_eq!(
        *plugin.post_updates.lock().unwrap(),
        [("c0".to_owned(), Some(1 << 30))]
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
