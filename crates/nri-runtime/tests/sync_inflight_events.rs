//! An event that is in flight (its fan-out still calling plugins) when a
//! plugin starts synchronizing reaches that plugin after its Synchronize:
//! the runtime applies the event's change once the event returns (as
//! containerd marks a container running after StartContainer and forgets
//! it after RemoveContainer), so the plugin's listing, taken meanwhile,
//! has the state before the event. Upstream makes the registration wait
//! for such an event (`BlockPluginSync`); without either, the plugin
//! keeps a container as created that runs, or a container or pod the
//! runtime removed.
//!
//! On paused time: a plugin (`10-slow`) takes a second to answer the
//! event, so it is in flight while `20-late` registers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{ContainerState, Event};
use nri_runtime::Adaptation;

/// The event in flight, and what the runtime does once it returns.
#[derive(Debug, Clone, Copy)]
enum Case {
    Start,
    Stop,
    Remove,
    RemovePod,
}

impl Case {
    fn event(self) -> Event {
        match self {
            Case::Start => Event::StartContainer,
            Case::Stop => Event::StopContainer,
            Case::Remove => Event::RemoveContainer,
            Case::RemovePod => Event::RemovePodSandbox,
        }
    }

    /// Sends the event, then applies its change to the runtime's store.
    async fn run(self, a: Adaptation, rt: std::sync::Arc<FakeRuntime>) {
        let (p, c) = (pod("p"), ctr("p", "c"));
        let set_state = |s: ContainerState| {
            let mut cs = rt.containers.lock().unwrap();
            for x in cs.iter_mut().filter(|x| x.id == "c") {
                x.state = s as i32;
            }
        };
        match self {
            Case::Start => {
                a.start_container(&p, &c).await.unwrap();
                set_state(ContainerState::ContainerRunning);
            }
            Case::Stop => {
                a.stop_container(&p, &c).await.unwrap();
                set_state(ContainerState::ContainerStopped);
            }
            Case::Remove => {
                a.remove_container(&p, &c).await.unwrap();
                rt.containers.lock().unwrap().retain(|x| x.id != "c");
            }
            Case::RemovePod => {
                a.remove_pod_sandbox(&p).await.unwrap();
                rt.pods.lock().unwrap().retain(|x| x.id != "p");
            }
        }
    }
}

/// Runs `case` with `20-late` registering while it is in flight; returns
/// what `20-late` received.
async fn in_flight_while_registering(case: Case) -> Vec<Received> {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    env.runtime.add_pod(pod("p"));
    let mut c = ctr("p", "c");
    if matches!(case, Case::Stop) {
        c.state = ContainerState::ContainerRunning as i32;
    }
    if matches!(case, Case::RemovePod) {
        // A pod whose containers are gone already.
    } else {
        env.runtime.add_container(c);
    }
    let ev = case.event();
    let slow = FakePlugin::new("10", "slow")
        .events(EventMask::EMPTY.with(ev))
        .delay(ev.pretty_name(), Duration::from_secs(1));
    let _s = slow.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(case.run(a.clone(), env.runtime.clone()));
    // Until the slow plugin has the event: it is in flight from now on.
    let has_it = || slow.received().iter().any(|r| r.event == Some(ev));
    assert!(eventually(Duration::from_millis(100), has_it).await);

    let late = FakePlugin::new("20", "late").events(EventMask::ALL);
    let _l = late.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    // Whatever the late plugin's backlog holds has been delivered once an
    // event after it reaches the plugin.
    a.update_pod_sandbox(&pod("q"), None, None).await.unwrap();
    a.stop().await;
    late.received()
}

fn synchronized(log: &[Received]) -> &Received {
    log.iter()
        .find(|r| r.method == "Synchronize")
        .expect("synchronized")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_start_in_flight_reaches_a_plugin_that_listed_the_container_created() {
    let log = in_flight_while_registering(Case::Start).await;
    assert_eq!(synchronized(&log).sync_containers, ["c"]);
    assert_eq!(
        events_of(&log),
        ["StartContainer", "UpdatePodSandbox"],
        "the container runs: the plugin must get its StartContainer"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stop_in_flight_reaches_a_plugin_that_listed_the_container_running() {
    let log = in_flight_while_registering(Case::Stop).await;
    assert_eq!(synchronized(&log).sync_containers, ["c"]);
    assert_eq!(events_of(&log), ["StopContainer", "UpdatePodSandbox"]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_remove_in_flight_reaches_a_plugin_that_listed_the_container() {
    let log = in_flight_while_registering(Case::Remove).await;
    assert_eq!(synchronized(&log).sync_containers, ["c"]);
    assert_eq!(
        events_of(&log),
        ["RemoveContainer", "UpdatePodSandbox"],
        "the plugin must not keep a container the runtime removed"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_pod_removal_in_flight_reaches_a_plugin_that_listed_the_pod() {
    let log = in_flight_while_registering(Case::RemovePod).await;
    assert_eq!(synchronized(&log).sync_pods, ["p"]);
    assert_eq!(events_of(&log), ["RemovePodSandbox", "UpdatePodSandbox"]);
}
