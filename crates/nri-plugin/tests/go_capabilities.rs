//! `Builder::requires` against the real Go runtimes of interop/: the
//! v0.8.0 adaptation (what containerd 2.1 vendors) announcing itself as
//! containerd v2.1.9 drops a plugin that requires sysctls, with our error
//! in its own log; the v0.12.5 adaptation announcing containerd v2.4.2
//! runs it, and merges the sysctl it sets.
//!
//! Peers are found in `$NRI_INTEROP_BIN` (see `go_runtime.rs`); a missing
//! peer skips the test unless `NRI_REQUIRE_INTEROP=1`. Budget: a few
//! seconds each.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod go;

use std::path::Path;

use go::*;
use nri_api::api::{Container, ContainerAdjustment, CreateContainerResponse, PodSandbox};
use nri_plugin::{Builder, Capability, CapabilityBasis, Error, HandlerResult, Plugin, Requirement};
use serde_json::json;
use tokio::sync::mpsc;

/// Sets one sysctl on every container.
struct Tuner;

#[nri_plugin::plugin]
impl Plugin for Tuner {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let mut adjust = ContainerAdjustment::default();
        adjust
            .linux_mut()
            .sysctl
            .insert("net.core.somaxconn".into(), "1024".into());
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

fn tuner(socket: &Path) -> nri_plugin::Stub<Tuner> {
    Builder::new(Tuner)
        .name("tuner")
        .index("10")
        .socket_path(socket)
        .requires([Capability::AdjustLinuxSysctl])
        .build()
        .unwrap()
}

/// The first log line containing `needle`.
async fn log_line(log: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> String {
    loop {
        let line = tokio::time::timeout(GO_TIMEOUT, log.recv())
            .await
            .expect("timed out waiting for the Go runtime's log")
            .expect("the Go runtime's log ended");
        if line.contains(needle) {
            return line;
        }
    }
}

#[tokio::test]
async fn containerd_2_1s_nri_drops_a_plugin_requiring_sysctls_and_logs_why() {
    let Some(bin) = go_peer("nri-go-runtime-legacy") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let args = [
        "--name",
        "containerd",
        "--version",
        "v2.1.9",
        "--log-level",
        "info",
    ];
    let (mut rt, mut log) = GoRuntime::start_logged(&bin, &socket, &args).await;
    let stub = tuner(&socket);
    let res = tokio::time::timeout(GO_TIMEOUT, stub.run())
        .await
        .expect("the plugin neither ran nor failed");
    let err = res.unwrap_err();
    let Error::Unsupported { missing, basis, .. } = &err else {
        panic!("want Unsupported, got {err:?}");
    };
    assert_eq!(
        &missing[..],
        [Requirement::from(Capability::AdjustLinuxSysctl)]
    );
    assert_eq!(*basis, CapabilityBasis::Inferred);
    // The Go runtime logs the plugin's reason and does not keep it.
    let line = log_line(&mut log, "failed to configure plugin").await;
    assert!(line.contains(&err.to_string()), "{line}");
    // Containers are created without it.
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1", "namespace": "ns1", "uid": "u1"}}))
        .await;
    let created = rt
        .ok(json!({"cmd": "CreateContainer", "pod_id": "p1",
                   "container": {"id": "c1", "pod_sandbox_id": "p1", "name": "ctr1"}}))
        .await;
    assert!(!created.to_string().contains("somaxconn"), "{created}");
    rt.stop().await;
}

#[tokio::test]
async fn an_nri_v0_12_runtime_as_containerd_2_4_runs_it() {
    let Some(bin) = go_peer("nri-go-runtime") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let args = ["--name", "containerd", "--version", "v2.4.2"];
    let mut rt = GoRuntime::start(&bin, &socket, &args).await;
    let (handle, task) = spawn_plugin(tuner(&socket));
    rt.wait_plugins(1).await;
    let info = handle.runtime().unwrap();
    assert_eq!(info.supports(Capability::AdjustLinuxSysctl), Some(true));
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "p1", "name": "pod1", "namespace": "ns1", "uid": "u1"}}))
        .await;
    let created = rt
        .ok(json!({"cmd": "CreateContainer", "pod_id": "p1",
                   "container": {"id": "c1", "pod_sandbox_id": "p1", "name": "ctr1"}}))
        .await;
    assert!(created.to_string().contains("somaxconn"), "{created}");
    handle.stop();
    task.await.unwrap().0.unwrap();
    rt.stop().await;
}
