//! What a recording plugin instance saw: [`Record`]s in one shared,
//! time-stamped [`EventLog`].

use std::sync::Mutex;
use std::time::Instant;

use nri_mux::sync::lock;
use nri_plugin::api::{Container, PodSandbox};
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
    /// Pod UID.
    pub uid: String,
}

impl PodRef {
    /// A pod reference from its id, name, namespace and UID.
    pub fn new(id: &str, name: &str, namespace: &str, uid: &str) -> Self {
        PodRef {
            id: id.to_owned(),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            uid: uid.to_owned(),
        }
    }

    pub(crate) fn from_api(p: &PodSandbox) -> Self {
        PodRef::new(&p.id, &p.name, &p.namespace, &p.uid)
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

    pub(crate) fn from_api(c: &Container) -> Self {
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
        let mut r = lock(&self.records);
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
        lock(&self.records).clone()
    }

    /// Whether some record satisfies `f`.
    pub fn any(&self, f: impl Fn(&Record) -> bool) -> bool {
        lock(&self.records).iter().any(f)
    }
}

impl EventLog {
    /// The `seq` the next record will get: records pushed so far have a
    /// smaller one.
    pub fn next_seq(&self) -> u64 {
        lock(&self.records).len() as u64
    }

    /// How many records satisfy `f`.
    pub fn count(&self, f: impl Fn(&Record) -> bool) -> usize {
        lock(&self.records).iter().filter(|r| f(r)).count()
    }
}
