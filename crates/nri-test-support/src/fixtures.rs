//! Pods and containers with predictable fields.

use nri_api::api::{Container, ContainerState, PodSandbox};

/// A pod `id` in namespace `default`, named `<id>-name` with UID `<id>-uid`.
pub fn pod(id: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        name: format!("{id}-name"),
        uid: format!("{id}-uid"),
        namespace: "default".into(),
        ..Default::default()
    }
}

/// A created container `id` of pod `pod`, named `<id>-name`.
pub fn ctr(pod: &str, id: &str) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        name: format!("{id}-name"),
        state: ContainerState::ContainerCreated as i32,
        ..Default::default()
    }
}
