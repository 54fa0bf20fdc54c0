//! The CRI side of a conformance run: the [`Cri`] operations the scenario
//! needs (what kubelet would ask the runtime); [`run`](crate::run) drives a
//! real runtime through `crictl` ([`CriOptions`](crate::CriOptions)). A runtime embedding NRI
//! can implement [`Cri`] itself and check itself with
//! [`run_with`](crate::run_with), without crictl.

use std::future::Future;

use serde::Serialize;

use crate::Error;

/// The result of one CRI call: `Ok(Ok(value))` it worked, `Ok(Err(message))`
/// the runtime refused (the message is its error), `Err(_)` the call could
/// not be made at all (which ends the run).
pub type CriResult<T> = Result<Result<T, String>, Error>;

/// A pod the scenario asks for (its CRI metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodSpec {
    /// Pod name (unique within a run).
    pub name: String,
    /// Kubernetes namespace.
    pub namespace: String,
    /// Pod UID.
    pub uid: String,
}

/// A container the scenario asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerSpec {
    /// Container name (unique within its pod).
    pub name: String,
    /// The command, or `None` for the driver's default long-running one.
    pub command: Option<Vec<String>>,
}

/// A pod's CRI state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum PodState {
    /// `SANDBOX_READY`.
    Ready,
    /// `SANDBOX_NOTREADY`.
    NotReady,
}

/// A container's CRI state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum ContainerState {
    /// `CONTAINER_CREATED`.
    Created,
    /// `CONTAINER_RUNNING`.
    Running,
    /// `CONTAINER_EXITED`.
    Exited,
    /// `CONTAINER_UNKNOWN` (or anything else).
    Unknown,
}

/// A pod as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodStatus {
    /// Sandbox id.
    pub id: String,
    /// Pod name.
    pub name: String,
    /// State.
    pub state: PodState,
}

/// A container as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerStatus {
    /// Container id.
    pub id: String,
    /// Container name.
    pub name: String,
    /// State.
    pub state: ContainerState,
}

/// The CRI calls a conformance run makes, as kubelet would make them.
///
/// Calls may run concurrently (a call made while an NRI hook of another
/// call is held by the checker must not wait for it in the driver).
pub trait Cri: Sync {
    /// RunPodSandbox; the sandbox id.
    fn run_pod(&self, pod: &PodSpec) -> impl Future<Output = CriResult<String>> + Send;
    /// CreateContainer in pod `pod_id` (made from `pod`); the container id.
    fn create_container(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        ctr: &ContainerSpec,
    ) -> impl Future<Output = CriResult<String>> + Send;
    /// StartContainer.
    fn start_container(&self, id: &str) -> impl Future<Output = CriResult<()>> + Send;
    /// UpdateContainerResources: CPU shares.
    fn update_container(
        &self,
        id: &str,
        cpu_shares: u64,
    ) -> impl Future<Output = CriResult<()>> + Send;
    /// StopContainer with no grace period.
    fn stop_container(&self, id: &str) -> impl Future<Output = CriResult<()>> + Send;
    /// RemoveContainer.
    fn remove_container(&self, id: &str) -> impl Future<Output = CriResult<()>> + Send;
    /// StopPodSandbox.
    fn stop_pod(&self, id: &str) -> impl Future<Output = CriResult<()>> + Send;
    /// RemovePodSandbox.
    fn remove_pod(&self, id: &str) -> impl Future<Output = CriResult<()>> + Send;
    /// ListPodSandbox (every pod, any state).
    fn list_pods(&self) -> impl Future<Output = CriResult<Vec<PodStatus>>> + Send;
    /// PodSandboxStatus; a refusal (e.g. not found) is `Ok(Err(_))`.
    fn pod_status(&self, id: &str) -> impl Future<Output = CriResult<PodStatus>> + Send;
    /// ListContainers of one pod (any state).
    fn list_containers(
        &self,
        pod_id: &str,
    ) -> impl Future<Output = CriResult<Vec<ContainerStatus>>> + Send;
    /// ContainerStatus; a refusal (e.g. not found) is `Ok(Err(_))`.
    fn container_status(&self, id: &str)
    -> impl Future<Output = CriResult<ContainerStatus>> + Send;
}

/// Turns a refusal into an [`Error::Cri`] for a step that must work.
pub(crate) fn must<T>(step: impl FnOnce() -> String, r: CriResult<T>) -> Result<T, Error> {
    r?.map_err(|message| Error::Cri {
        step: step(),
        message,
    })
}
