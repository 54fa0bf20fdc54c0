//! Runtime callbacks that keep pods and containers and record what
//! plugins asked for.

use std::sync::{Arc, Mutex};

use nri_api::api::{Container, ContainerEviction, ContainerUpdate, PodSandbox};
use nri_runtime::{BoxFuture, CallbackError, RuntimeCallbacks, Snapshot};

/// A container runtime that lists the pods and containers it was given and
/// records the updates and evictions plugins asked for.
#[derive(Default)]
pub struct FakeCallbacks {
    /// Pods listed to plugins.
    pub pods: Mutex<Vec<PodSandbox>>,
    /// Containers listed to plugins.
    pub containers: Mutex<Vec<Container>>,
    /// Every update asked for.
    pub updates: Mutex<Vec<ContainerUpdate>>,
    /// Every eviction asked for.
    pub evictions: Mutex<Vec<ContainerEviction>>,
    /// Updates of these container ids are reported as failed.
    pub fail_updates: Mutex<Vec<String>>,
}

impl FakeCallbacks {
    /// A new, empty runtime.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    /// Lists `p` from now on.
    pub fn add_pod(&self, p: PodSandbox) {
        self.pods.lock().unwrap().push(p);
    }
    /// Lists `c` from now on.
    pub fn add_container(&self, c: Container) {
        self.containers.lock().unwrap().push(c);
    }
}

impl RuntimeCallbacks for FakeCallbacks {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            Ok(Snapshot::new(
                self.pods.lock().unwrap().clone(),
                self.containers.lock().unwrap().clone(),
            ))
        })
    }
    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move {
            let fail = self.fail_updates.lock().unwrap().clone();
            let failed = updates
                .iter()
                .filter(|u| fail.contains(&u.container_id))
                .cloned()
                .collect();
            self.updates.lock().unwrap().extend(updates);
            Ok(failed)
        })
    }
    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            self.evictions.lock().unwrap().extend(evictions);
            Ok(())
        })
    }
}
