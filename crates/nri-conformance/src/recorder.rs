//! The recording plugin: subscribed to every event, appends what it sees to
//! the shared [`EventLog`] and answers according to its [`Behaviour`]
//! (refuse, delay, or hold an event until the checker releases it).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_mux::sync::lock;
use nri_plugin::api::{
    Container, ContainerUpdate, CreateContainerResponse, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncKind};
use tokio::sync::{mpsc, oneshot};

use crate::record::{ContainerRef, EventKind, EventLog, PodRef, RecordKind};

/// Where an instance stops and hands control to the checker: each held
/// call is sent as a [`Held`] and answered once the checker releases it,
/// drops it, or `max` has passed.
#[derive(Debug)]
pub(crate) struct HoldPoint {
    tx: mpsc::UnboundedSender<Held>,
    max: Duration,
}

impl HoldPoint {
    /// A hold point holding each call for at most `max`, and the receiver
    /// of the held calls.
    pub(crate) fn new(max: Duration) -> (Self, mpsc::UnboundedReceiver<Held>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (HoldPoint { tx, max }, rx)
    }

    async fn hold(&self, pod: Option<PodRef>, container: Option<ContainerRef>) {
        let (release, rx) = oneshot::channel();
        let held = Held {
            pod,
            container,
            at: Instant::now(),
            release,
        };
        if self.tx.send(held).is_ok() {
            // Released, dropped by the checker, or out of time: answer.
            let _ = tokio::time::timeout(self.max, rx).await;
        }
    }
}

/// A call an instance is holding.
#[derive(Debug)]
pub(crate) struct Held {
    /// The pod of the held event (none for Synchronize).
    pub(crate) pod: Option<PodRef>,
    /// The container of a held container event.
    pub(crate) container: Option<ContainerRef>,
    /// When the hold started.
    pub(crate) at: Instant,
    release: oneshot::Sender<()>,
}

impl Held {
    /// Lets the instance answer.
    pub(crate) fn release(self) {
        let _ = self.release.send(());
    }
}

/// How a recording instance answers (default: accept everything at once).
/// Prefixes match the pod name for pod events and the container name for
/// container events.
#[derive(Debug, Default)]
pub(crate) struct Behaviour {
    /// Refuse CreateContainer for these containers.
    pub(crate) fail_create: Option<String>,
    /// Answer CreateContainer for these containers after a delay.
    pub(crate) delay_create: Option<(String, Duration)>,
    /// Refuse the first RunPodSandbox of each of these pods (by name).
    pub(crate) fail_run_pod_once: Option<String>,
    /// Refuse StopPodSandbox, RemovePodSandbox, StopContainer and
    /// RemoveContainer in these pods (by pod name).
    pub(crate) fail_teardown: Option<String>,
    /// Hold this event for these objects.
    pub(crate) hold: Option<(EventKind, String, HoldPoint)>,
    /// Hold the (last message of) Synchronize.
    pub(crate) hold_sync: Option<HoldPoint>,
}

impl Behaviour {
    fn matches(prefix: Option<&String>, name: &str) -> bool {
        prefix.is_some_and(|p| name.starts_with(p.as_str()))
    }
}

/// The recording plugin.
#[derive(Debug)]
pub(crate) struct Recorder {
    instance: String,
    log: Arc<EventLog>,
    behaviour: Behaviour,
    refused_runs: Mutex<HashSet<String>>,
}

impl Recorder {
    /// A recorder named `instance` writing to `log`.
    pub(crate) fn new(instance: &str, log: Arc<EventLog>, behaviour: Behaviour) -> Self {
        Recorder {
            instance: instance.to_owned(),
            log,
            behaviour,
            refused_runs: Mutex::new(HashSet::new()),
        }
    }

    /// Records a pod event, then holds or refuses it as configured.
    async fn pod_event(&self, event: EventKind, pod: &PodSandbox) -> HandlerResult<()> {
        let p = PodRef::from_api(pod);
        self.log.push(
            &self.instance,
            RecordKind::Event {
                event,
                pod: p.clone(),
                container: None,
            },
        );
        if let Some((ev, prefix, point)) = &self.behaviour.hold
            && *ev == event
            && pod.name.starts_with(prefix.as_str())
        {
            point.hold(Some(p), None).await;
        }
        let teardown = matches!(
            event,
            EventKind::StopPodSandbox | EventKind::RemovePodSandbox
        );
        if teardown && Behaviour::matches(self.behaviour.fail_teardown.as_ref(), &pod.name) {
            return Err(refusal(event, &pod.name));
        }
        if event == EventKind::RunPodSandbox
            && Behaviour::matches(self.behaviour.fail_run_pod_once.as_ref(), &pod.name)
            && lock(&self.refused_runs).insert(pod.name.clone())
        {
            return Err(refusal(event, &pod.name));
        }
        Ok(())
    }

    /// Records a container event, then holds or refuses it as configured.
    async fn ctr_event(
        &self,
        event: EventKind,
        pod: &PodSandbox,
        ctr: &Container,
    ) -> HandlerResult<()> {
        let (p, c) = (PodRef::from_api(pod), ContainerRef::from_api(ctr));
        self.log.push(
            &self.instance,
            RecordKind::Event {
                event,
                pod: p.clone(),
                container: Some(c.clone()),
            },
        );
        if let Some((ev, prefix, point)) = &self.behaviour.hold
            && *ev == event
            && ctr.name.starts_with(prefix.as_str())
        {
            point.hold(Some(p), Some(c)).await;
        }
        let b = &self.behaviour;
        let teardown = matches!(event, EventKind::StopContainer | EventKind::RemoveContainer);
        if teardown && Behaviour::matches(b.fail_teardown.as_ref(), &pod.name) {
            return Err(refusal(event, &ctr.name));
        }
        if event != EventKind::CreateContainer {
            return Ok(());
        }
        if Behaviour::matches(b.fail_create.as_ref(), &ctr.name) {
            return Err(refusal(event, &ctr.name));
        }
        if let Some((prefix, delay)) = &b.delay_create
            && ctr.name.starts_with(prefix.as_str())
        {
            tokio::time::sleep(*delay).await;
        }
        Ok(())
    }
}

fn refusal(event: EventKind, name: &str) -> HandlerError {
    HandlerError::msg(format!(
        "nri-conformance: refusing {event} of {name} on purpose"
    ))
}

#[nri_plugin::plugin]
impl Plugin for Recorder {
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
        if let Some(point) = &self.behaviour.hold_sync {
            point.hold(None, None).await;
        }
        Ok(Vec::new())
    }

    async fn shutdown(&self) {
        self.log.push(&self.instance, RecordKind::Shutdown);
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::RunPodSandbox, &pod).await
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<LinuxResources>,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        self.pod_event(EventKind::UpdatePodSandbox, &pod).await
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::PostUpdatePodSandbox, &pod).await
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::StopPodSandbox, &pod).await
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.pod_event(EventKind::RemovePodSandbox, &pod).await
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.ctr_event(EventKind::CreateContainer, &pod, &ctr)
            .await
            .map(|()| CreateContainerResponse::default())
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::PostCreateContainer, &pod, &ctr)
            .await
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::StartContainer, &pod, &ctr).await
    }

    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::PostStartContainer, &pod, &ctr)
            .await
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.ctr_event(EventKind::UpdateContainer, &pod, &ctr)
            .await
            .map(|()| UpdateContainerResponse::default())
    }

    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::PostUpdateContainer, &pod, &ctr)
            .await
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.ctr_event(EventKind::StopContainer, &pod, &ctr)
            .await
            .map(|()| StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.ctr_event(EventKind::RemoveContainer, &pod, &ctr).await
    }

    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let pod = req.pod.unwrap_or_default();
        let ctr = req.container.unwrap_or_default();
        self.ctr_event(EventKind::ValidateContainerAdjustment, &pod, &ctr)
            .await
    }
}
