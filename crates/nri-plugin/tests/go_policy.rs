//! A Rust plugin's declared failure policy (`Builder::failure_policy`)
//! honoured by the Go adaptation v0.12.5 (the first Go runtime that reads
//! `ConfigureResponse.failure_policy`) when the plugin misses the request
//! timeout of a CreateContainer: `fail_request` fails the request,
//! `keep_connected` keeps the plugin registered, and without a policy (or
//! with an empty one) the request goes on without the plugin, which is
//! dropped, as before failure policies existed.
//!
//! Peers come from `$NRI_INTEROP_BIN` (see `go/mod.rs`); a missing peer
//! fails the test when `NRI_REQUIRE_INTEROP=1`, else it is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod go;

use std::time::Duration;

use go::*;
use nri_api::api::{
    Container, ContainerAdjustment, CreateContainerResponse, FailurePolicy, KeyValue, PodSandbox,
};
use nri_plugin::{Builder, Error, HandlerResult, Plugin};
use serde_json::{Value, json};

/// Adds `SEEN=<container>` to every container; takes far longer than the
/// runtime's request timeout for containers named `slow`.
struct SlowOnce;

#[nri_plugin::plugin]
impl Plugin for SlowOnce {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        if ctr.name == "slow" {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        let mut adjust = ContainerAdjustment::default();
        adjust.env.push(KeyValue {
            key: "SEEN".into(),
            value: ctr.name,
        });
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

fn create(id: &str, name: &str) -> Value {
    json!({"cmd": "CreateContainer", "pod_id": "p1",
           "container": {"id": id, "pod_sandbox_id": "p1", "name": name}})
}

/// What the runtime did with a plugin that timed out.
#[derive(Debug)]
struct Outcome {
    /// The policy `list_plugins` reported after registration.
    listed_policy: Value,
    /// The result line of the CreateContainer that timed out.
    timed_out: Value,
    /// Whether the plugin was still registered and served the next request.
    kept: bool,
}

async fn run(policy: Option<FailurePolicy>) -> Option<Outcome> {
    let bin = go_peer("nri-go-runtime")?;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let mut rt = GoRuntime::start(&bin, &socket, &["--request-timeout", "300ms"]).await;
    let mut b = Builder::new(SlowOnce)
        .name("slow-once")
        .index("10")
        .socket_path(&socket);
    if let Some(p) = policy {
        b = b.failure_policy(p);
    }
    let (handle, task) = spawn_plugin(b.build().unwrap());
    rt.wait_plugins(1).await;
    let list = rt.ok(json!({"cmd": "list_plugins"})).await;
    let listed_policy = list["plugins"][0]["failure_policy"].clone();

    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1"}}))
        .await;
    let timed_out = rt.cmd(create("c1", "slow")).await;
    let list = rt.ok(json!({"cmd": "list_plugins"})).await;
    let registered = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "10-slow-once" && p["closed"] == false);
    let next = rt.ok(create("c2", "fast")).await;
    let served = next["response"]["adjust"]["env"]
        .as_array()
        .is_some_and(|e| e.contains(&json!({"key": "SEEN", "value": "fast"})));
    assert_eq!(registered, served, "{list} {next}");

    handle.stop();
    match task.await.unwrap().0 {
        Ok(()) | Err(Error::ConnectionLost { .. }) => {}
        Err(e) => panic!("plugin ended with {e:?}"),
    }
    rt.stop().await;
    Some(Outcome {
        listed_policy,
        timed_out,
        kept: served,
    })
}

fn policy(fail_request: bool, keep_connected: bool) -> Option<FailurePolicy> {
    Some(FailurePolicy {
        fail_request,
        keep_connected,
    })
}

fn assert_failed(o: &Outcome) {
    assert_eq!(o.timed_out["ok"], false, "{o:?}");
    let err = o.timed_out["error"].as_str().unwrap();
    assert!(
        err.contains("10-slow-once") && err.contains("CreateContainer"),
        "{o:?}"
    );
}

#[tokio::test]
async fn without_a_policy_the_request_goes_on_and_the_plugin_is_dropped() {
    let Some(o) = run(None).await else { return };
    assert_eq!(o.listed_policy, Value::Null, "{o:?}");
    assert_eq!(o.timed_out["ok"], true, "{o:?}");
    assert!(!o.kept, "{o:?}");
}

#[tokio::test]
async fn an_empty_policy_is_declared_and_behaves_as_the_defaults() {
    let Some(o) = run(policy(false, false)).await else {
        return;
    };
    assert_eq!(
        o.listed_policy,
        json!({"fail_request": false, "keep_connected": false}),
        "{o:?}"
    );
    assert_eq!(o.timed_out["ok"], true, "{o:?}");
    assert!(!o.kept, "{o:?}");
}

#[tokio::test]
async fn fail_request_fails_the_request_that_timed_out() {
    let Some(o) = run(policy(true, false)).await else {
        return;
    };
    assert_eq!(
        o.listed_policy,
        json!({"fail_request": true, "keep_connected": false})
    );
    assert_failed(&o);
    assert!(!o.kept, "{o:?}");
}

#[tokio::test]
async fn keep_connected_keeps_the_plugin_after_a_timeout() {
    let Some(o) = run(policy(false, true)).await else {
        return;
    };
    assert_eq!(
        o.listed_policy,
        json!({"fail_request": false, "keep_connected": true})
    );
    assert_eq!(o.timed_out["ok"], true, "{o:?}");
    assert!(o.kept, "{o:?}");
}

#[tokio::test]
async fn both_fail_the_request_and_keep_the_plugin() {
    let Some(o) = run(policy(true, true)).await else {
        return;
    };
    assert_failed(&o);
    assert!(o.kept, "{o:?}");
}
