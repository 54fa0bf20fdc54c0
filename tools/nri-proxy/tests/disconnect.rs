//! The runtime goes away in the middle of a delivery (the ttRPC server
//! aborts the proxy's request handler): the delivery still reaches every
//! plugin and the proxy's view, and when the runtime is back its lists
//! are reconciled with what the plugins were told. A container that is
//! gone is removed for every plugin that saw it created; one that still
//! exists is not created twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

/// Plugins `10-held` (holds CreateContainer until the test lets it go)
/// and `20-next` behind a proxy; the runtime goes away while `10-held`
/// holds the CreateContainer of `p/c`, then comes back with `back` (its
/// containers besides none). Returns the plugins' logs once the runtime
/// is back and the proxy is registered again.
async fn disconnect_during_create(env: &Env, back: Vec<nri_api::api::Container>) -> Scene {
    env.runtime.pods.lock().unwrap().push(pod("p"));
    let up = env.upstream(Duration::from_secs(10)).await;
    let proxy = Running::start(env.config("request-timeout: 60s\n", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let held = TestPlugin::adding("H", "1").held(hold.clone());
    let next = TestPlugin::adding("N", "1");
    behind.connect(&env.proxy_socket, "10", "held", held.clone());
    behind.connect(&env.proxy_socket, "20", "next", next.clone());
    until("two plugins", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;

    let create = {
        let up = up.clone();
        tokio::spawn(async move { up.create_container(&pod("p"), &ctr("p", "c")).await })
    };
    until("the held CreateContainer", || {
        held.events().iter().any(|e| e == "CreateContainer:c")
    })
    .await;
    up.stop().await;
    // The runtime went on without the proxy's answer (our runtime library
    // takes a plugin that went away as unavailable).
    let _ = create.await.unwrap();
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    // The delivery goes on without the handler (and later creations are
    // not held).
    hold.add_permits(100);
    until("the next plugin's CreateContainer", || {
        next.events().iter().any(|e| e == "CreateContainer:c")
    })
    .await;

    *env.runtime.containers.lock().unwrap() = back;
    let up = env.upstream(Duration::from_secs(10)).await;
    until("the proxy registered again", || {
        up.plugins().len() == 1 && proxy.proxy.upstream().is_connected()
    })
    .await;
    Scene {
        up,
        proxy,
        behind,
        plugins: vec![held, next],
    }
}

struct Scene {
    up: nri_runtime::Adaptation,
    proxy: Running,
    behind: Behind,
    plugins: Vec<TestPlugin>,
}

impl Scene {
    async fn stop(self) {
        self.behind.stop().await;
        self.proxy.stop().await;
        self.up.stop().await;
    }
}

/// Time budget: about 5 s of real time (the proxy's reconnection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_cut_short_upstream_is_removed_for_every_plugin_that_saw_it() {
    let env = Env::new();
    let scene = disconnect_during_create(&env, Vec::new()).await;
    for p in &scene.plugins {
        until("the removal", || {
            p.events().iter().any(|e| e == "RemoveContainer:c")
        })
        .await;
        assert_eq!(
            p.events(),
            ["CreateContainer:c", "StopContainer:c", "RemoveContainer:c"]
        );
        let end = lifecycle(&p.synced.lock().unwrap()[0], &p.events()).unwrap();
        assert_eq!(end, (vec!["p".to_owned()], vec![]), "the runtime's truth");
    }
    scene.stop().await;
}

/// Time budget: about 5 s of real time (the proxy's reconnection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_cut_short_upstream_that_the_runtime_kept_is_not_created_twice() {
    let env = Env::new();
    let scene = disconnect_during_create(&env, vec![ctr("p", "c")]).await;
    // A creation after the resynchronization marks its end for the
    // plugins (it follows the resynchronization's events).
    scene
        .up
        .create_container(&pod("p"), &ctr("p", "d"))
        .await
        .unwrap();
    for p in &scene.plugins {
        until("d's creation", || {
            p.events().iter().any(|e| e == "CreateContainer:d")
        })
        .await;
        assert_eq!(p.events(), ["CreateContainer:c", "CreateContainer:d"]);
        let end = lifecycle(&p.synced.lock().unwrap()[0], &p.events()).unwrap();
        assert_eq!(end, (vec!["p".to_owned()], vec!["c".into(), "d".into()]));
    }
    scene.stop().await;
}
