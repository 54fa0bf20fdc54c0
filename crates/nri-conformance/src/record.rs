//! What a recording plugin instance saw: [`Record`]s in one shared,
//! time-stamped [`EventLog`], and the [`Recorder`] plugin that writes them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nri_plugin::api::{
    Container, ContainerUpdate, CreateContainerResponse, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncKind};
use serde::Serialize;

/// A pod or container event a plugin can receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[non_exhaustive]
pub enum EventKind {
    /// `RunPodSandbox`.
    RunPodSandbox,
    /// `UpdatePodSandbox`.
    UpdatePodSandbox,
    /// `PostUpdatePodSandbox`.
    PostUpdatePodSandbox,
    /// `StopPodSandbox`.
    StopPodSandbox,
    /// `RemovePodSandbox`.
    RemovePodSandbox,
    /// `CreateContainer`.
    CreateContainer,
    /// `ValidateContainerAdjustment`.
    ValidateContainerAdjustment,
    /// `PostCreateContainer`.
    PostCreateContainer,
    /// `StartContainer`.
    StartContainer,
    /// `PostStartContainer`.
    PostStartContainer,
    /// `UpdateContainer`.
    UpdateContainer,
    /// `PostUpdateContainer`.
    PostUpdateContainer,
    /// `StopContainer`.
    StopContainer,
    /// `RemoveContainer`.
    RemoveContainer,
}

impl EventKind {
    /// The event's protocol name, e.g. `RunPodSandbox`.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::RunPodSandbox => "RunPodSandbox",
            EventKind::UpdatePodSandbox => "UpdatePodSandbox",
            EventKind::PostUpdatePodSandbox => "PostUpdatePodSandbox",
            EventKind::StopPodSandbox => "StopPodSandbox",
            EventKind::RemovePodSandbox => "RemovePodSandbox",
            EventKind::CreateContainer => "CreateContainer",
            EventKind::ValidateContainerAdjustment => "ValidateContainerAdjustment",
            EventKind::PostCreateContainer => "PostCreateContainer",
            EventKind::StartContainer => "StartContainer",
            EventKind::PostStartContainer => "PostStartContainer",
            EventKind::UpdateContainer => "UpdateContainer",
            EventKind::PostUpdateContainer => "PostUpdateContainer",
            EventKind::StopContainer => "StopContainer",
            EventKind::RemoveContainer => "RemoveContainer",
        }
    }

    /// Whether this is a pod (sandbox) event.
    pub fn is_pod_event(self) -> bool {
        matches!(
            self,
            EventKind::RunPodSandbox
                | EventKind::UpdatePodSandbox
                | EventKind::PostUpdatePodSandbox
                | EventKind::StopPodSandbox
                | EventKind::RemovePodSandbox
        )
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A pod as a plugin saw it (the fields the checks need).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct PodRef {
    /// Sandbox id (what `crictl runp` prints).
    pub id: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
}

impl PodRef {
    /// A pod reference from its id, name and namespace.
    pub fn new(id: &str, name: &str, namespace: &str) -> Self {
        PodRef {
            id: id.to_owned(),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    fn from_api(p: &PodSandbox) -> Self {
        PodRef::new(&p.id, &p.name, &p.namespace)
    }
}

/// A container as a plugin saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ContainerRef {
    /// Container id (what `crictl create` prints).
    pub id: String,
    /// Container name.
    pub name: String,
    /// Its pod's sandbox id.
    pub pod_id: String,
}

impl ContainerRef {
    /// A container reference from its id, name and pod id.
    pub fn new(id: &str, name: &str, pod_id: &str) -> Self {
        ContainerRef {
            id: id.to_owned(),
            name: name.to_owned(),
            pod_id: pod_id.to_owned(),
        }
    }

    fn from_api(c: &Container) -> Self {
        ContainerRef::new(&c.id, &c.name, &c.pod_sandbox_id)
    }
}

/// What happened, as seen by one plugin instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordKind {
    /// The runtime configured the instance.
    Configured {
        /// Runtime name.
        runtime: String,
        /// Runtime version.
        version: String,
        /// The runtime's NRI version.
        nri_version: String,
        /// How it was found (`Reported`, `Inferred`, `Assumed`).
        nri_version_origin: String,
        /// The runtime's request timeout (ms).
        request_timeout_ms: u64,
    },
    /// Synchronize: the pods and containers the runtime had.
    Synchronized {
        /// Pods.
        pods: Vec<PodRef>,
        /// Containers.
        containers: Vec<ContainerRef>,
    },
    /// A pod or container event.
    Event {
        /// Which.
        event: EventKind,
        /// The pod (for container events: the container's pod as sent).
        pod: PodRef,
        /// The container (container events only).
        container: Option<ContainerRef>,
    },
    /// The runtime sent `Shutdown`.
    Shutdown,
    /// The connection ended (the instance's `Stub::run` returned).
    Disconnected {
        /// Why, as the SDK reported it.
        cause: String,
    },
}

/// One thing one instance saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Position in the shared log (total order of arrival across instances).
    pub seq: u64,
    /// Milliseconds since the log was created.
    pub at_ms: u64,
    /// The instance that saw it (plugin name, e.g. `conformance`).
    pub instance: String,
    /// What it saw.
    #[serde(flatten)]
    pub kind: RecordKind,
}

impl Record {
    /// The event and objects of an event record.
    pub fn as_event(&self) -> Option<(EventKind, &PodRef, Option<&ContainerRef>)> {
        match &self.kind {
            RecordKind::Event {
                event,
                pod,
                container,
            } => Some((*event, pod, container.as_ref())),
            _ => None,
        }
    }
}

/// The shared, append-only log all recording instances write to.
#[derive(Debug)]
pub struct EventLog {
    t0: Instant,
    records: Mutex<Vec<Record>>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            t0: Instant::now(),
            records: Mutex::new(Vec::new()),
        }
    }
}

impl EventLog {
    /// An empty log; timestamps count from now.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a record.
    pub fn push(&self, instance: &str, kind: RecordKind) {
        let at_ms = u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut r = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = r.len() as u64;
        r.push(Record {
            seq,
            at_ms,
            instance: instance.to_owned(),
            kind,
        });
    }

    /// A copy of all records so far.
    pub fn snapshot(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether some record satisfies `f`.
    pub fn any(&self, f: impl Fn(&Record) -> bool) -> bool {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(f)
    }
}

/// How a recording instance answers `CreateContainer`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Behaviour {
    /// Accept everything (the default).
    #[default]
    Observe,
    /// Answer `CreateContainer` with an error for containers whose name
    /// starts with the prefix.
    FailCreate {
        /// Container name prefix.
        prefix: String,
    },
    /// Delay the answer to `CreateContainer` for containers whose name
    /// starts with the prefix.
    DelayCreate {
        /// Container name prefix.
        prefix: String,
        /// How long.
        delay: Duration,
    },
}

/// The recording plugin: subscribed to every event, appends what it sees to
/// an [`EventLog`] and answers according to its [`Behaviour`].
#[derive(Debug)]
pub struct Recorder {
    instance: String,
    log: Arc<EventLog>,
    behaviour: Behaviour,
}

impl Recorder {
    /// A recorder named `instance` writing to `log`.
    pub fn new(instance: &str, log: Arc<EventLog>, behaviour: Behaviour) -> Self {
        Recorder {
            instance: instance.to_owned(),
            log,
            behaviour,
        }
    }

    fn pod_event(&self, event: EventKind, pod: &PodSandbox) {
        self.log.push(
            &self.instance,
            RecordKind::Event {
                event,
                pod: PodRef::from_api(pod),
                container: None,
            },
        );
    }

    fn ctr_event(&self, event: EventKind, pod: &PodSandbox, ctr: &Container) {
        self.log.push(
            &self.instance,
            RecordKind::Event {
                event,
                pod: PodRef::from_api(pod),
                container: Some(ContainerRef::from_api(ctr)),
            },
        );
    }
}

impl Plugin for Recorder {
    const EVENTS: EventMask = EventMask::ALL;

    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        let rt = &info.runtime;
        self.log.push(
            &self.instance,
            RecordKind::Configured {
                runtime: rt.name.clone(),
                version: rt.version.clone(),
                nri_version: rt.nri_version.version.to_string(),
                nri_version_origin: format!("{:?}", rt.nri_version.origin),
                request_timeout_ms: u64::try_from(rt.request_timeout.as_millis())
                    .unwrap_or(u64::MAX),
            },
        );
        Ok(None)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.log.push(
            &self.instance,
            RecordKind::Synchronized {
                pods: pods.iter().map(PodRef::from_api).collect(),
                containers: containers.iter().map(ContainerRef::from_api).collect(),
            },
        );
        Ok(Vec::new())
    }

    async fn shutdown(&self) {
        self.log.push(&self.instance, RecordKind::Shutdown);
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::RunPodSandbox, &pod);
        Ok(())
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<LinuxResources>,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        self.pod_event(EventKind::UpdatePodSandbox, &pod);
        Ok(())
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::PostUpdatePodSandbox, &pod);
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::StopPodSandbox, &pod);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::RemovePodSandbox, &pod);
        Ok(())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.ctr_event(EventKind::CreateContainer, &pod, &ctr);
        match &self.behaviour {
            Behaviour::FailCreate { prefix } if ctr.name.starts_with(prefix.as_str()) => {
                Err(HandlerError::msg(format!(
                    "nri-conformance: refusing container {} on purpose",
                    ctr.name
                )))
            }
            Behaviour::DelayCreate { prefix, delay } if ctr.name.starts_with(prefix.as_str()) => {
                tokio::time::sleep(*delay).await;
                Ok(CreateContainerResponse::default())
            }
            _ => Ok(CreateContainerResponse::default()),
        }
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::PostCreateContainer, &pod, &ctr);
        Ok(())
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::StartContainer, &pod, &ctr);
        Ok(())
    }

    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::PostStartContainer, &pod, &ctr);
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.ctr_event(EventKind::UpdateContainer, &pod, &ctr);
        Ok(UpdateContainerResponse::default())
    }

    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::PostUpdateContainer, &pod, &ctr);
        Ok(())
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.ctr_event(EventKind::StopContainer, &pod, &ctr);
        Ok(StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::RemoveContainer, &pod, &ctr);
        Ok(())
    }

    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let pod = req.pod.unwrap_or_default();
        let ctr = req.container.unwrap_or_default();
        self.ctr_event(EventKind::ValidateContainerAdjustment, &pod, &ctr);
        Ok(())
    }
}
