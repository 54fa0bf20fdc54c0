//! Validation upstream: the proxy subscribes to ValidateContainerAdjustment
//! only when its configuration puts a validator behind it, and then its
//! validators judge
//! the runtime's whole adjustment (plugins directly on the runtime too),
//! seeing the plugins behind the proxy in place of the proxy, also as the
//! owners of the fields they changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::api::{Event, Field, ValidateContainerAdjustmentRequest};
use nri_plugin::{HandlerError, HandlerResult, Plugin};

/// A validator: rejects an adjustment setting env `BAD`, and records the
/// plugins each request says took part.
#[derive(Clone, Default)]
struct Guard {
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    /// The owner of env `A` of each request's container, as the request
    /// names it.
    env_a_owner: Arc<Mutex<Vec<Option<String>>>>,
}

#[nri_plugin::plugin]
impl Plugin for Guard {
    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let names = req
            .plugins
            .iter()
            .map(|p| format!("{}-{}", p.index, p.name))
            .collect();
        self.seen.lock().unwrap().push(names);
        let owner = (req.owners.as_ref())
            .zip(req.container.as_ref())
            .and_then(|(o, c)| o.owners.get(&c.id))
            .and_then(|f| f.compound.get(&(Field::Env as i32)))
            .and_then(|e| e.owners.get("A"))
            .cloned();
        self.env_a_owner.lock().unwrap().push(owner);
        let adjust = req.adjust.unwrap_or_default();
        if adjust.env.iter().any(|kv| kv.key == "BAD") {
            return Err(HandlerError::msg("env BAD is not allowed"));
        }
        Ok(())
    }
}

fn subscribes_to_validation(up: &nri_runtime::Adaptation) -> bool {
    up.plugins()[0]
        .events
        .contains(Event::ValidateContainerAdjustment)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_validator_behind_the_proxy_does_not_subscribe_to_validation() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    assert!(
        !subscribes_to_validation(&up),
        "{:?}",
        up.plugins()[0].events
    );
    assert!(up.plugins()[0].events.contains(Event::CreateContainer));
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_behind_the_proxy_judges_the_runtimes_whole_adjustment() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    // The configuration names the validator: known before it connects.
    let config = env.config("plugins:\n  guard:\n    validation: fail-closed\n", "");
    let proxy = Running::start(config).await;
    proxy.wait_serving(&env.proxy_socket).await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    assert!(
        subscribes_to_validation(&up),
        "{:?}",
        up.plugins()[0].events
    );

    let guard = Guard::default();
    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", TestPlugin::adding("A", "1"));
    let stub = nri_plugin::Builder::new(guard.clone())
        .name("guard")
        .index("90")
        .socket_path(&env.proxy_socket)
        .mode(nri_plugin::ConnectMode::External)
        .build()
        .unwrap();
    let guard_handle = stub.handle();
    let guard_task = tokio::spawn(async move { stub.run().await });
    until("two plugins behind the proxy", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;

    // Accepted: validated behind the proxy (its plugins' adjustment) and
    // upstream (the runtime's whole adjustment, the plugins behind the
    // proxy listed in its place).
    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=1"]);
    let seen = guard.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "inside the proxy, then upstream: {seen:?}");
    assert_eq!(
        seen[1],
        ["10-ay", "90-guard"],
        "upstream, the proxy replaced"
    );
    // The runtime records the proxy as the owner of env A; the validator
    // behind the proxy is told the plugin behind it that set it.
    assert_eq!(
        *guard.env_a_owner.lock().unwrap(),
        [Some("10-ay".to_owned()), Some("10-ay".to_owned())],
        "inside the proxy, then upstream"
    );

    // A plugin directly on the runtime sets what the validator forbids.
    let mut direct = Behind::default();
    direct.connect(
        &env.upstream_socket,
        "20",
        "direct",
        TestPlugin::adding("BAD", "1"),
    );
    until("the direct plugin", || up.plugins().len() == 2).await;
    let err = up
        .create_container(&pod("p"), &ctr("p", "c2"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("env BAD is not allowed"), "{err}");
    let last = guard.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last, ["20-direct", "10-ay", "90-guard"]);

    direct.stop().await;
    guard_handle.stop();
    let _ = guard_task.await;
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
