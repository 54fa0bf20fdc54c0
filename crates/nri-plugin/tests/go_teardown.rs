//! Teardown errors against the Go adaptation (containerd/nri v0.12.5),
//! which stops a teardown event at the first plugin error, as containerd
//! does: a Rust plugin whose StopPodSandbox fails, in front of a Go stub
//! plugin. By default the SDK answers with success and the Go plugin still
//! gets the event; with `send_teardown_errors(true)` the runtime gets the
//! error and the Go plugin never sees the event.
//!
//! Peers come from `$NRI_INTEROP_BIN` (see `go/mod.rs`); a missing peer
//! fails the test when `NRI_REQUIRE_INTEROP=1`, else it is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod go;

use go::*;
use nri_api::api::PodSandbox;
use nri_plugin::{Builder, HandlerError, HandlerResult, Plugin};
use serde_json::json;

/// Fails every StopPodSandbox.
struct FailsStop;

#[nri_plugin::plugin]
impl Plugin for FailsStop {
    async fn run_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        Err(HandlerError::msg(format!("cannot stop {}", pod.id)))
    }
}

/// Runs a pod, stops it, runs a second pod; returns the StopPodSandbox
/// result, the pod events the Go plugin saw, in order, and the Rust
/// plugin's count of teardown errors answered with success.
async fn run(send_teardown_errors: bool) -> Option<(serde_json::Value, Vec<String>, u64)> {
    let runtime = go_peer("nri-go-runtime")?;
    let go_plugin = go_peer("nri-go-plugin")?;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let mut rt = GoRuntime::start(&runtime, &socket, &[]).await;
    let stub = Builder::new(FailsStop)
        .name("fails-stop")
        .index("10")
        .socket_path(&socket)
        .send_teardown_errors(send_teardown_errors)
        .build()
        .unwrap();
    let (handle, task) = spawn_plugin(stub);
    rt.wait_plugins(1).await;
    let mut gp = GoPlugin::start(
        &go_plugin,
        &socket,
        &[
            "--name",
            "go",
            "--idx",
            "20",
            "--events",
            "runpodsandbox,stoppodsandbox",
        ],
    );
    gp.wait_event("started").await;
    rt.wait_plugins(2).await;

    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1"}}))
        .await;
    let stopped = rt
        .cmd(json!({"cmd": "StopPodSandbox", "pod_id": "p1"}))
        .await;
    // Events are serialised by the runtime: when the Go plugin has seen the
    // second pod, it has seen whatever came before it.
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p2", "name": "pod2"}}))
        .await;
    gp.wait_for("RunPodSandbox p2", |v| {
        v["event"] == "RunPodSandbox" && v["pod_id"] == "p2"
    })
    .await;
    let events = pod_events(&gp.seen);
    let errors = handle.teardown_errors();
    handle.stop();
    task.await.unwrap().0.unwrap();
    rt.stop().await;
    Some((stopped, events, errors))
}

/// `"<event> <pod id>"` of every pod event line.
fn pod_events(lines: &[serde_json::Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|v| {
            let event = v["event"].as_str()?;
            let pod = v["pod_id"].as_str()?;
            Some(format!("{event} {pod}"))
        })
        .collect()
}

#[tokio::test]
async fn a_failing_stop_pod_sandbox_does_not_starve_the_next_plugin() {
    let Some((stopped, events, errors)) = run(false).await else {
        return;
    };
    assert_eq!(stopped["ok"], true, "{stopped}");
    assert_eq!(
        events,
        ["RunPodSandbox p1", "StopPodSandbox p1", "RunPodSandbox p2"]
    );
    assert_eq!(errors, 1);
}

#[tokio::test]
async fn with_send_teardown_errors_the_runtime_stops_at_the_error() {
    let Some((stopped, events, errors)) = run(true).await else {
        return;
    };
    assert_eq!(stopped["ok"], false, "{stopped}");
    let error = stopped["error"].as_str().unwrap();
    assert!(error.contains("cannot stop p1"), "{stopped}");
    assert_eq!(events, ["RunPodSandbox p1", "RunPodSandbox p2"]);
    assert_eq!(errors, 0);
}
