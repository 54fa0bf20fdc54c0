//! The runtime's validation request, as the validators behind the proxy
//! see it, lists in the proxy's place the plugins behind it that took part
//! in that container's creation: none when the proxy answered the
//! creation without them, so a `required-plugins` check behind the proxy
//! fails it. Whether the proxy subscribes to validation upstream follows
//! from its configuration alone, not from which plugins happen to be
//! connected when it registers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_api::api::Event;
use nri_plugin::EventMask;

const REQUIRE_AY: &str =
    "default-validator:\n  enable: true\n  required-plugins: [ay]\nrequest-timeout: 60s\n";

/// Time budget: about 3 s of real time (a restart, a 400 ms timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_answered_without_the_plugins_fails_their_required_check() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config(REQUIRE_AY, "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let plugin = TestPlugin::adding("A", "1").held(hold.clone());
    behind.connect(&env.proxy_socket, "10", "ay", plugin.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    assert!(
        up.plugins()[0]
            .events
            .contains(Event::ValidateContainerAdjustment)
    );

    // With the plugin: created, validated with the plugin listed.
    hold.add_permits(1);
    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c0"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=1"]);

    // The runtime restarts with a new container: the resynchronization
    // holds the plugin in its CreateContainer past the next creation's
    // budget, which is answered without it.
    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    env.runtime.pods.lock().unwrap().push(pod("p"));
    env.runtime.containers.lock().unwrap().push(ctr("p", "c0"));
    env.runtime.containers.lock().unwrap().push(ctr("p", "c1"));
    let up = env.upstream(Duration::from_millis(400)).await;
    until("the resync's CreateContainer", || {
        plugin.events().iter().any(|e| e == "CreateContainer:c1")
    })
    .await;
    let err = up
        .create_container(&pod("p"), &ctr("p", "c2"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("ay") && err.contains("not present"), "{err}");

    hold.add_permits(2);
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// Time budget: about 3 s of real time (the proxy registers twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_validation_subscription_does_not_depend_on_who_is_connected() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    // No validator in the configuration.
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    let validates = |up: &nri_runtime::Adaptation| {
        up.plugins()[0]
            .events
            .contains(Event::ValidateContainerAdjustment)
    };
    assert!(!validates(&up));
    // A validator connects behind the proxy, then the runtime restarts.
    let mut behind = Behind::default();
    behind.connect_with(
        &env.proxy_socket,
        "90",
        "guard",
        TestPlugin::default(),
        Some(EventMask::from_events(&[
            Event::ValidateContainerAdjustment,
        ])),
    );
    until("the validator", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    up.stop().await;
    until("the proxy to notice", || {
        !proxy.proxy.upstream().is_connected()
    })
    .await;
    let up = env.upstream(Duration::from_secs(2)).await;
    until("the proxy registered again", || {
        up.plugins().len() == 1 && proxy.proxy.upstream().is_connected()
    })
    .await;
    assert!(!validates(&up), "the same subscription as before");

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
