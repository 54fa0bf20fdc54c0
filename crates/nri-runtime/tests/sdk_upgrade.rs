//! Our plugin SDK under our runtime during an upgrade: two instances of
//! one SDK plugin (with the default reconnect policy); the second takes
//! over. The first keeps running, connected and idle: it gets no
//! Shutdown, does not end, does not reconnect (no storm: one registration
//! each), and its `update_containers` fails with the typed
//! `Error::Superseded`. Paused time; well under a second.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use nri_api::api::{Container, CreateContainerResponse, PodSandbox};
use nri_plugin::{Builder, HandlerResult, Plugin, ReconnectPolicy};
use nri_runtime::{InstanceState, Metrics};

struct Counting {
    shutdowns: Arc<AtomicU32>,
}

#[nri_plugin::plugin]
impl Plugin for Counting {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }

    async fn shutdown(&self) {
        self.shutdowns.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts registrations (connections that became active) per instance.
#[derive(Default)]
struct Activations(AtomicU32);

impl Metrics for Activations {
    fn plugin_instance(&self, _plugin: &str, _instance: u64, state: &str) {
        if state == "active" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn states(a: &nri_runtime::Adaptation) -> Vec<InstanceState> {
    a.plugins().into_iter().map(|p| p.state).collect()
}

#[tokio::test(start_paused = true)]
async fn a_superseded_sdk_plugin_idles_and_gets_a_typed_refusal() {
    let env = TestEnv::new();
    let activations = Arc::new(Activations::default());
    let a = env.start(env.builder().metrics(activations.clone())).await;
    let shutdowns = Arc::new(AtomicU32::new(0));
    let stub = |shutdowns: &Arc<AtomicU32>| {
        Builder::new(Counting {
            shutdowns: shutdowns.clone(),
        })
        .name("sdk")
        .index("10")
        .socket_path(&env.socket)
        .reconnect(ReconnectPolicy::default())
        .build()
        .unwrap()
    };
    let old = stub(&shutdowns);
    let old_handle = old.handle();
    let old_run = tokio::spawn(async move { old.run().await });
    assert!(
        eventually(Duration::from_secs(10), || states(&a)
            == [InstanceState::Active])
        .await
    );

    let new = stub(&shutdowns);
    let new_handle = new.handle();
    let new_run = tokio::spawn(async move { new.run().await });
    let superseded = [InstanceState::Superseded, InstanceState::Active];
    assert!(eventually(Duration::from_secs(10), || states(&a) == superseded).await);

    let err = old_handle.update_containers(Vec::new(), Vec::new()).await;
    assert!(matches!(err, Err(nri_plugin::Error::Superseded)), "{err:?}");
    assert!(!nri_plugin::Error::Superseded.is_retryable());

    // A long while later (paused time runs ahead): the old instance is
    // still there, idle, never shut down, never reconnected.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(!old_run.is_finished(), "the superseded instance ended");
    assert!(old_handle.is_connected());
    assert_eq!(states(&a), superseded);
    assert_eq!(shutdowns.load(Ordering::Relaxed), 0, "Shutdown was sent");
    assert_eq!(
        activations.0.load(Ordering::Relaxed),
        2,
        "an instance registered again"
    );

    // Stopped (the old pod deleted): it ends cleanly and is forgotten.
    old_handle.stop();
    assert!(old_run.await.unwrap().is_ok());
    assert!(
        eventually(Duration::from_secs(10), || states(&a)
            == [InstanceState::Active])
        .await
    );
    // The newer instance is stopped before the runtime: with a reconnect
    // policy and no attempt limit it would otherwise dial the vanished
    // socket forever.
    new_handle.stop();
    assert!(new_run.await.unwrap().is_ok());
    a.stop().await;
}
