//! Embedding the NRI runtime library: a toy runtime that listens on a
//! socket, runs one pod with one container through every lifecycle event
//! and prints the merged adjustment.
//!
//!     cargo run -p nri-runtime --example embed -- /tmp/nri-demo/nri.sock
//!
//! Connect plugins to the socket while it waits (10 s) before the lifecycle.
//! The socket's directory is created (mode 0700) if missing; an existing one
//! must not be writable by others (so not `/tmp` itself).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{Container, ContainerUpdate, PodSandbox};
use nri_runtime::{
    Adaptation, BoxFuture, CallbackError, FailurePolicy, RuntimeCallbacks, Snapshot,
};

#[derive(Default)]
struct ToyRuntime {
    pods: Mutex<Vec<PodSandbox>>,
    containers: Mutex<Vec<Container>>,
}

impl RuntimeCallbacks for ToyRuntime {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let pods = self.pods.lock().map_err(|e| e.to_string())?.clone();
            let ctrs = self.containers.lock().map_err(|e| e.to_string())?.clone();
            Ok(Snapshot::new(pods, ctrs))
        })
    }

    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move {
            for u in &updates {
                tracing::info!(container = %u.container_id, "would update container");
            }
            Ok(Vec::new())
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let socket = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/nri-demo/nri.sock".into());
    let runtime = Arc::new(ToyRuntime::default());
    let nri = Adaptation::builder("toy-runtime", "0.1")
        .socket_path(&socket)
        .disable_launch(true)
        .failure_policy("device-injector", FailurePolicy::Required)
        .build(runtime.clone())?;
    nri.start().await?;
    println!("listening on {socket}; connect plugins now");
    tokio::time::sleep(Duration::from_secs(10)).await;

    let pod = PodSandbox {
        id: "pod0".into(),
        name: "demo".into(),
        ..Default::default()
    };
    let ctr = Container {
        id: "ctr0".into(),
        pod_sandbox_id: "pod0".into(),
        name: "app".into(),
        ..Default::default()
    };
    match nri.run_pod_sandbox(&pod).await {
        Ok(run) => {
            runtime
                .pods
                .lock()
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .push(pod.clone());
            drop(run.guard);
        }
        Err(e) => println!("RunPodSandbox refused: {e}"),
    }
    match nri.create_container(&pod, &ctr).await {
        Ok(out) => {
            println!("merged adjustment: {:?}", out.adjustment);
            runtime
                .containers
                .lock()
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .push(ctr.clone());
            drop(out.guard);
        }
        Err(e) => println!("CreateContainer refused: {e}"),
    }
    nri.start_container(&pod, &ctr).await?;
    nri.stop_container(&pod, &ctr).await?;
    nri.remove_container(&pod, &ctr).await?;
    nri.stop_pod_sandbox(&pod).await?;
    nri.remove_pod_sandbox(&pod).await?;
    nri.stop().await;
    Ok(())
}
