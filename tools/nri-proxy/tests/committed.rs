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

/// The upstream runtime's callbacks with a gate on the listing: while the
/// gate is closed, a listing (the proxy's registration) waits for it.
struct Gated {
    inner: std::sync::Arc<FakeCallbacks>,
    closed: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

impl nri_runtime::RuntimeCallbacks for Gated {
    fn list_pods_and_containers(
        &self,
    ) -> nri_runtime::BoxFuture<'_, Result<nri_runtime::Snapshot, nri_runtime::CallbackError>> {
        Box::pin(async move {
            if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
                let open = self.open.notified();
                self.entered.notify_one();
                open.await;
            }
            self.inner.list_pods_and_containers().await
        })
    }

    fn update_containers(
        &self,
        updates: Vec<nri_api::api::ContainerUpdate>,
    ) -> nri_runtime::BoxFuture<
        '_,
        Result<Vec<nri_api::api::ContainerUpdate>, nri_runtime::CallbackError>,
    > {
        self.inner.update_containers(updates)
    }
}

async fn gated_upstream(env: &Env, cb: std::sync::Arc<Gated>) -> nri_runtime::Adaptation {
    let a = nri_runtime::Adaptation::builder("fake-containerd", "v2.3.0")
        .socket_path(&env.upstream_socket)
        .disable_launch(true)
        .request_timeout(Duration::from_secs(2))
        .build(cb)
        .unwrap();
    a.start().await.unwrap();
    a
}

/// A pod the upstream runtime (on this library) creates while the proxy
/// registers with it again (its listing in progress) reaches the proxy
/// after the fact, committed: the proxy delivers it to its plugins, a
/// `required` plugin absent or not, instead of refusing it and dropping it
/// from its view. Paused time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_creation_the_runtime_delivers_after_the_fact_reaches_the_plugins() {
    let env = Env::new();
    *env.runtime.pods.lock().unwrap() = vec![pod("p0")];
    let gated = std::sync::Arc::new(Gated {
        inner: env.runtime.clone(),
        closed: false.into(),
        entered: tokio::sync::Notify::new(),
        open: tokio::sync::Notify::new(),
    });
    let up = gated_upstream(&env, gated.clone()).await;
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

    // The runtime comes back; while it lists for the proxy's registration
    // it runs p1 (no plugin active: the creation succeeds and is stored).
    gated
        .closed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let entered = gated.entered.notified();
    let up = gated_upstream(&env, gated.clone()).await;
    entered.await;
    let run = up.run_pod_sandbox(&pod("p1")).await.unwrap();
    env.runtime.add_pod(pod("p1"));
    drop(run.guard);
    gated
        .closed
        .store(false, std::sync::atomic::Ordering::SeqCst);
    gated.open.notify_one();
    until("the proxy active upstream", || up.plugins().len() == 1).await;
    // A marker after the proxy's backlog.
    up.stop_pod_sandbox(&pod("p0")).await.unwrap();
    until("the marker", || {
        plugin.events().iter().any(|e| e == "StopPodSandbox:p0")
    })
    .await;
    assert_eq!(
        plugin.events(),
        ["RunPodSandbox:p1", "StopPodSandbox:p0"],
        "the runtime has p1: the plugin is told of it, guard or not"
    );
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
