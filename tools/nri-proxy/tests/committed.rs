//! Objects the runtime already has reach every plugin behind the proxy,
//! even when their creation would be refused there: a pod and container
//! that appeared while the runtime was away, replayed by the proxy's
//! resynchronization while a `required` plugin is absent, are told to the
//! plugin that is connected (RunPodSandbox, CreateContainer, then
//! StartContainer), not only their later events. Paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{Container, ContainerState};

fn running(pod: &str, id: &str) -> Container {
    let mut c = ctr(pod, id);
    c.state = ContainerState::ContainerRunning as i32;
    c
}

const REQUIRED_ABSENT: &str = "plugins:\n  guard: { policy: required }\n";

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_replayed_creation_reaches_the_plugins_while_a_required_plugin_is_absent() {
    let env = Env::new();
    *env.runtime.pods.lock().unwrap() = vec![pod("p0")];
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config(REQUIRED_ABSENT, "")).await;
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

    // Meanwhile p1 came with a running container.
    *env.runtime.pods.lock().unwrap() = vec![pod("p0"), pod("p1")];
    *env.runtime.containers.lock().unwrap() = vec![running("p1", "c1")];
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the resync events", || {
        plugin.events().iter().any(|e| e == "StartContainer:c1")
    })
    .await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox:p1",
            "CreateContainer:c1",
            "StartContainer:c1"
        ],
        "the runtime has p1 and c1: the plugin is told of them, guard or not"
    );
    assert!(plugin.overtaken.lock().unwrap().is_empty());
    let end = lifecycle(&plugin.synced.lock().unwrap()[0], &plugin.events()).unwrap();
    assert_eq!(
        end,
        (
            vec!["p0".to_owned(), "p1".to_owned()],
            vec!["c1".to_owned()]
        )
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
