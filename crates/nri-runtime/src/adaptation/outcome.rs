//! What each lifecycle event of [`Adaptation`](super::Adaptation) returns.

use nri_api::api::{
    ContainerAdjustment, ContainerEviction, ContainerUpdate, CreateContainerResponse, OwningPlugins,
};

use crate::failure::PluginError;
use crate::registry::CreationGuard;
use nri_merge::PluginId;

/// Results of RunPodSandbox.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunPodSandboxOutcome {
    /// Failures of plugins whose policy is `ignore`.
    pub errors: Vec<PluginError>,
    /// Keep until the pod is stored by the runtime (visible to
    /// [`RuntimeCallbacks::list_pods_and_containers`](crate::RuntimeCallbacks::list_pods_and_containers)), then drop or
    /// [`release`](CreationGuard::release) it. See `docs/runtime/sync.md`.
    pub guard: CreationGuard,
}

/// Results of CreateContainer.
#[derive(Debug)]
#[non_exhaustive]
pub struct CreateContainerOutcome {
    /// The merged adjustment to apply to the new container.
    pub adjustment: ContainerAdjustment,
    /// Merged updates of other containers.
    pub updates: Vec<ContainerUpdate>,
    /// Containers plugins asked to evict.
    pub evictions: Vec<ContainerEviction>,
    /// Which plugin owns which field (as sent to validators).
    pub owners: OwningPlugins,
    /// The plugins that took part, in call order, as listed to validators:
    /// those whose answer was merged and the active ones not subscribed to
    /// CreateContainer; not those whose call failed or was not made.
    pub plugins: Vec<PluginId>,
    /// Failures of plugins whose policy is `ignore`.
    pub errors: Vec<PluginError>,
    /// Keep until the container is stored (see [`RunPodSandboxOutcome::guard`]).
    pub guard: CreationGuard,
}

impl CreateContainerOutcome {
    /// The merged result as the wire response (adjustment, updates, evictions).
    pub fn to_response(&self) -> CreateContainerResponse {
        CreateContainerResponse {
            adjust: Some(self.adjustment.clone()),
            update: self.updates.clone(),
            evict: self.evictions.clone(),
        }
    }
}

/// Results of UpdateContainer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UpdateContainerOutcome {
    /// Updates of other containers, then **last** the target container's
    /// update with the full resources to apply.
    pub updates: Vec<ContainerUpdate>,
    /// Containers plugins asked to evict.
    pub evictions: Vec<ContainerEviction>,
    /// Failures of plugins whose policy is `ignore`.
    pub errors: Vec<PluginError>,
}

/// Results of StopContainer (a teardown event: never fails).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StopContainerOutcome {
    /// Updates of other containers.
    pub updates: Vec<ContainerUpdate>,
    /// Every plugin failure (reported, never a request failure).
    pub errors: Vec<PluginError>,
}

/// Results of an event that returns nothing but errors.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct EventReport {
    /// Plugin failures that did not fail the request (teardown events, or
    /// policy `ignore`).
    pub errors: Vec<PluginError>,
}
