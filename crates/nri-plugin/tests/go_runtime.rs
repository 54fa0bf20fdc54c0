//! The Rust SDK against the real Go runtimes of interop/: `nri-go-runtime`
//! (containerd/nri v0.12.5 adaptation) and `nri-go-runtime-legacy` (v0.8.0:
//! StateChange dialect, events limited to 0x7FF).
//!
//! Peers are found in `$NRI_INTEROP_BIN` (default `<repo>/interop/bin`,
//! built by `scripts/build-go-peers.sh`). A missing peer fails the test when
//! `NRI_REQUIRE_INTEROP=1`, else the test prints why and passes.
//!
//! The pre-launched test installs the `adjuster` example as `10-adjuster`
//! in the Go runtime's plugin directory. Examples are built by `cargo test`;
//! when this file runs alone (`--test go_runtime`) the helper builds the
//! example once with `cargo build --example adjuster` into the same target
//! directory.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod go;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use go::*;
use nri_api::api::{Event, PodSandbox};
use nri_plugin::{
    Builder, Error, EventMask, HandlerResult, NriVersion, Plugin, PluginHandle, ReconnectPolicy,
    SyncKind,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

fn recorder_at(socket: &Path) -> (Builder<Recorder>, mpsc::UnboundedReceiver<Call>) {
    let (rec, calls) = Recorder::new();
    (
        Builder::new(rec)
            .name("rust")
            .index("10")
            .socket_path(socket),
        calls,
    )
}

/// A Go runtime peer, started in a fresh directory, with the recording
/// plugin `10-rust` registered and synchronized.
struct Registered {
    rt: GoRuntime,
    socket: PathBuf,
    handle: PluginHandle,
    task: Running<Recorder>,
    calls: mpsc::UnboundedReceiver<Call>,
    /// Holds the socket; bind it (`_dir`) for as long as the runtime runs.
    _dir: tempfile::TempDir,
}

/// Starts Go runtime peer `name` and registers the recorder with it;
/// `None` when the peer is missing (the test is skipped).
async fn registered(name: &str) -> Option<Registered> {
    let bin = go_peer(name)?;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let mut rt = GoRuntime::start(&bin, &socket, &[]).await;
    let (b, mut calls) = recorder_at(&socket);
    let (handle, task) = spawn_plugin(b.build().unwrap());
    rt.wait_plugins(1).await;
    assert_eq!(next_call(&mut calls).await.what, "Synchronize Initial");
    Some(Registered {
        rt,
        socket,
        handle,
        task,
        calls,
        _dir: dir,
    })
}

async fn drain_whats(calls: &mut mpsc::UnboundedReceiver<Call>, n: usize) -> Vec<String> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(next_call(calls).await.what);
    }
    v
}

/// Runs the lifecycle of one pod with one container; returns the results.
async fn lifecycle(rt: &mut GoRuntime, with_pod_updates: bool) -> (Value, Value) {
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1", "namespace": "ns1", "uid": "u1"}}))
        .await;
    let created = rt
        .ok(json!({"cmd": "CreateContainer", "pod_id": "p1",
                   "container": {"id": "c1", "pod_sandbox_id": "p1", "name": "ctr1"}}))
        .await;
    rt.ok(json!({"cmd": "PostCreateContainer", "container_id": "c1"}))
        .await;
    rt.ok(json!({"cmd": "StartContainer", "container_id": "c1"}))
        .await;
    rt.ok(json!({"cmd": "PostStartContainer", "container_id": "c1"}))
        .await;
    let updated = rt
        .ok(json!({"cmd": "UpdateContainer", "container_id": "c1",
                   "linux_resources": {"cpu": {"shares": {"value": "100"}}}}))
        .await;
    rt.ok(json!({"cmd": "PostUpdateContainer", "container_id": "c1"}))
        .await;
    rt.ok(json!({"cmd": "StopContainer", "container_id": "c1"}))
        .await;
    rt.ok(json!({"cmd": "RemoveContainer", "container_id": "c1"}))
        .await;
    if with_pod_updates {
        rt.ok(json!({"cmd": "UpdatePodSandbox", "pod_id": "p1"}))
            .await;
        rt.ok(json!({"cmd": "PostUpdatePodSandbox", "pod_id": "p1"}))
            .await;
    }
    rt.ok(json!({"cmd": "StopPodSandbox", "pod_id": "p1"}))
        .await;
    rt.ok(json!({"cmd": "RemovePodSandbox", "pod_id": "p1"}))
        .await;
    (created, updated)
}

fn check_adjustment(created: &Value) {
    let adjust = &created["response"]["adjust"];
    let env = adjust["env"].as_array().expect("env in adjustment");
    assert!(
        env.contains(&json!({"key": "RECORDER", "value": "c1"})),
        "{created}"
    );
    assert_eq!(
        adjust["annotations"]["recorder.example.com/seen"], "ctr1",
        "{created}"
    );
}

fn check_update(updated: &Value) {
    let update = updated["response"]["update"].as_array().expect("updates");
    assert!(
        update.iter().any(|u| u["container_id"] == "c1"
            && u["linux"]["resources"]["cpu"]["shares"]["value"] == "512"),
        "{updated}"
    );
}

#[tokio::test]
async fn v012_registration_every_event_and_adjustments() {
    let Some(Registered {
        mut rt,
        handle,
        task,
        mut calls,
        _dir,
        ..
    }) = registered("nri-go-runtime").await
    else {
        return;
    };

    let plugins = rt.ok(json!({"cmd": "list_plugins"})).await;
    let p = &plugins["plugins"][0];
    assert_eq!(p["name"], "10-rust", "{plugins}");
    assert_eq!(p["external"], true);
    assert_eq!(p["events"], 0x3FFF, "{plugins}");
    let info = handle.runtime().unwrap();
    assert_eq!(info.name, "nri-go-runtime");
    assert_eq!(info.nri_version.version, NriVersion::new(0, 12, 5));
    assert!(handle.dropped_events().is_empty());
    // The Go runtime is not ours: the plugin's reader does not spin.
    assert!(!read_strategy_chosen(&handle).await);

    let (created, updated) = lifecycle(&mut rt, true).await;
    check_adjustment(&created);
    check_update(&updated);
    let whats = drain_whats(&mut calls, 14).await;
    assert_eq!(
        whats,
        [
            "RunPodSandbox",
            "CreateContainer",
            "ValidateContainerAdjustment",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "StopContainer",
            "RemoveContainer",
            "UpdatePodSandbox",
            "PostUpdatePodSandbox",
            "StopPodSandbox",
            "RemovePodSandbox",
        ]
    );
    // Every event used its dedicated RPC: no StateChange fallback.
    assert!(
        !rt.asyncs.iter().any(|v| v["async"] == "deprecation"),
        "{:?}",
        rt.asyncs
    );

    handle.stop();
    let (res, _) = task.await.unwrap();
    res.unwrap();
    rt.stop().await;
}

#[tokio::test]
async fn v012_sync_1000_pods_5000_containers() {
    let Some(bin) = go_peer("nri-go-runtime") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    // A debug build decodes 15 MB of sync data; give the runtime's request
    // budget room so the test is about correctness, not speed.
    let mut rt = GoRuntime::start(&bin, &socket, &["--request-timeout", "20s"]).await;
    let generated = rt
        .ok(json!({"cmd": "set_sync_state", "generate": {"pods": 1000, "containers_per_pod": 5}}))
        .await;
    assert!(
        generated["proto_bytes"].as_u64().unwrap() > 4 * 1024 * 1024,
        "{generated}"
    );
    let (b, mut calls) = recorder_at(&socket);
    let (handle, task) = spawn_plugin(b.build().unwrap());
    rt.wait_plugins(1).await;
    let call = next_call(&mut calls).await;
    assert_eq!(call.what, "Synchronize Initial");
    assert_eq!(
        (call.pod.as_str(), call.container.as_str()),
        ("1000", "5000")
    );
    let sync = rt
        .wait_async(|v| v["async"] == "synchronize" && v["pods"] == 1000)
        .await;
    assert_eq!(sync["containers"], 5000, "{sync}");
    assert!(sync.get("error").is_none(), "{sync}");
    handle.stop();
    let (res, stub) = task.await.unwrap();
    res.unwrap();
    assert_eq!(
        stub.plugin().syncs.lock().unwrap().len(),
        1,
        "one call for all chunks"
    );
    rt.stop().await;
}

#[tokio::test]
async fn v012_unsolicited_updates() {
    let Some(Registered {
        mut rt,
        handle,
        task,
        _dir,
        ..
    }) = registered("nri-go-runtime").await
    else {
        return;
    };

    let failed = handle
        .update_containers(vec![recorder_update("c1")], vec![])
        .await
        .unwrap();
    assert!(failed.is_empty());
    let line = rt.wait_async(|v| v["async"] == "update_containers").await;
    assert_eq!(line["updates"][0]["container_id"], "c1", "{line}");
    assert_eq!(
        line["updates"][0]["linux"]["resources"]["cpu"]["shares"]["value"], "512",
        "{line}"
    );

    rt.ok(json!({"cmd": "set_update_policy", "policy": "fail"}))
        .await;
    let failed = handle
        .update_containers(vec![recorder_update("c2")], vec![])
        .await
        .unwrap();
    assert_eq!(failed, vec![recorder_update("c2")]);

    rt.ok(json!({"cmd": "set_update_policy", "policy": "error"}))
        .await;
    let err = handle
        .update_containers(vec![recorder_update("c3")], vec![])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Rpc { .. }), "{err:?}");

    handle.stop();
    task.await.unwrap().0.unwrap();
    rt.stop().await;
}

#[tokio::test]
async fn v012_reconnect_after_runtime_restart() {
    let Some(bin) = go_peer("nri-go-runtime") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let mut rt = GoRuntime::start(&bin, &socket, &[]).await;
    let (b, mut calls) = recorder_at(&socket);
    let stub = b
        .reconnect(ReconnectPolicy::new(
            Duration::from_millis(50),
            Duration::from_millis(500),
        ))
        .build()
        .unwrap();
    let (handle, task) = spawn_plugin(stub);
    rt.wait_plugins(1).await;
    assert_eq!(next_call(&mut calls).await.what, "Synchronize Initial");
    rt.stop().await; // the runtime process exits

    let mut rt = GoRuntime::start(&bin, &socket, &[]).await;
    rt.ok(json!({"cmd": "set_sync_state", "pods": [{"id": "p9", "name": "pod9"}]}))
        .await;
    rt.wait_plugins(1).await;
    let call = next_call(&mut calls).await;
    assert_eq!(
        call.what,
        format!("Synchronize {:?}", SyncKind::Resync { reconnect: 1 })
    );
    assert_eq!(call.pod, "1");
    rt.ok(json!({"cmd": "clear_sync_state"})).await;
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1"}}))
        .await;
    assert_eq!(next_call(&mut calls).await.what, "RunPodSandbox");

    handle.stop();
    let (res, stub) = task.await.unwrap();
    res.unwrap();
    assert_eq!(stub.plugin().disconnects.lock().unwrap().len(), 1);
    rt.stop().await;
}

#[tokio::test]
async fn v012_pre_launched_plugin_with_config_file() {
    let Some(bin) = go_peer("nri-go-runtime") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let plugins = dir.path().join("plugins");
    let confd = dir.path().join("conf.d");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&confd).unwrap();
    std::fs::copy(example_bin("adjuster"), plugins.join("10-adjuster")).unwrap();
    std::fs::write(
        confd.join("10-adjuster.conf"),
        "env GREETING=hello\nannotation example.com/owner=team-a\n",
    )
    .unwrap();
    let mut rt = GoRuntime::start(
        &bin,
        &socket,
        &[
            "--plugin-dir",
            plugins.to_str().unwrap(),
            "--config-dir",
            confd.to_str().unwrap(),
            "--no-listen",
        ],
    )
    .await;
    rt.wait_plugins(1).await;
    let list = rt.ok(json!({"cmd": "list_plugins"})).await;
    assert_eq!(list["plugins"][0]["name"], "10-adjuster", "{list}");
    assert_eq!(list["plugins"][0]["external"], false, "{list}");
    assert_eq!(list["plugins"][0]["events"], 0x8, "{list}");
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1"}}))
        .await;
    let created = rt
        .ok(json!({"cmd": "CreateContainer", "pod_id": "p1",
                   "container": {"id": "c1", "pod_sandbox_id": "p1", "name": "ctr1"}}))
        .await;
    let adjust = &created["response"]["adjust"];
    assert!(
        adjust["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"key": "GREETING", "value": "hello"})),
        "{created}"
    );
    assert_eq!(
        adjust["annotations"]["example.com/owner"], "team-a",
        "{created}"
    );
    rt.stop().await;
}

/// Subscribes to RunPodSandbox, StartContainer and CreateContainer,
/// implements only RunPodSandbox.
struct RunOnly(mpsc::UnboundedSender<String>);

#[nri_plugin::plugin]
impl Plugin for RunOnly {
    const EVENTS: EventMask = EventMask::from_events(&[
        Event::RunPodSandbox,
        Event::StartContainer,
        Event::CreateContainer,
    ]);
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = self.0.send(pod.id);
        Ok(())
    }
}

#[tokio::test]
async fn v012_subscribed_events_without_a_method_succeed_without_fallback() {
    let Some(bin) = go_peer("nri-go-runtime") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let mut rt = GoRuntime::start(&bin, &socket, &[]).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stub = Builder::new(RunOnly(tx))
        .name("run-only")
        .index("20")
        .socket_path(&socket)
        .build()
        .unwrap();
    let (handle, task) = spawn_plugin(stub);
    rt.wait_plugins(1).await;
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1"}}))
        .await;
    assert_eq!(rx.recv().await.unwrap(), "p1");
    // CreateContainer has no StateChange form: an UNIMPLEMENTED answer
    // would fail it. StartContainer's would switch the plugin to the
    // deprecated StateChange interface, with a warning.
    let created = rt
        .ok(json!({"cmd": "CreateContainer", "pod_id": "p1",
                   "container": {"id": "c1", "pod_sandbox_id": "p1", "name": "ctr1"}}))
        .await;
    assert!(
        created["response"]["adjust"].get("env").is_none(),
        "{created}"
    );
    rt.ok(json!({"cmd": "StartContainer", "container_id": "c1"}))
        .await;
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p2", "name": "pod2"}}))
        .await;
    assert_eq!(rx.recv().await.unwrap(), "p2");
    rt.ok(json!({"cmd": "list_plugins"})).await;
    assert!(
        !rt.asyncs.iter().any(|v| v["async"] == "deprecation"),
        "the runtime fell back to StateChange: {:?}",
        rt.asyncs
    );
    handle.stop();
    task.await.unwrap().0.unwrap();
    rt.stop().await;
}

#[tokio::test]
async fn legacy_v080_state_change_dialect_and_0x7ff_mask() {
    // Recorder declares all 14 events; the legacy runtime takes only 0x7FF.
    let Some(Registered {
        mut rt,
        socket,
        handle,
        task,
        mut calls,
        _dir,
    }) = registered("nri-go-runtime-legacy").await
    else {
        return;
    };
    let list = rt.ok(json!({"cmd": "list_plugins"})).await;
    assert_eq!(list["plugins"][0]["events"], 0x7FF, "{list}");
    assert_eq!(handle.dropped_events().as_i32(), 0x3800);
    assert_eq!(handle.subscribed_events().as_i32(), 0x7FF);
    let info = handle.runtime().unwrap();
    assert_eq!(info.nri_version.version, NriVersion::new(0, 8, 0));
    assert!(!read_strategy_chosen(&handle).await);

    let (created, updated) = lifecycle(&mut rt, false).await;
    check_adjustment(&created);
    check_update(&updated);
    let whats = drain_whats(&mut calls, 11).await;
    assert_eq!(
        whats,
        [
            "RunPodSandbox",
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
        ]
    );
    handle.stop();
    task.await.unwrap().0.unwrap();

    // Strict: the same plugin refuses to register with fewer events.
    let (b, _calls) = recorder_at(&socket);
    let err = b
        .strict_events(true)
        .build()
        .unwrap()
        .run()
        .await
        .unwrap_err();
    match err {
        Error::UnsupportedEvents {
            dropped,
            runtime_version,
            ..
        } => {
            assert_eq!(dropped.as_i32(), 0x3800);
            assert_eq!(runtime_version, NriVersion::new(0, 8, 0));
        }
        other => panic!("expected UnsupportedEvents, got {other:?}"),
    }
    rt.stop().await;
}
