//! The proxy as one plugin of the runtime: every event is handed to the
//! plugins behind it through the runtime library, within the runtime's
//! request timeout minus the safety margin, and the merged result is the
//! proxy's answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nri_api::EventMask;
use nri_api::api::{
    Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse,
};
use nri_plugin::{ConfigureInfo, HandlerError, HandlerResult, Plugin, SyncKind};
use nri_runtime::Adaptation;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::ProxyConfig;
use crate::view::{Changes, State, View};

/// The events the proxy subscribes to upstream: all but
/// ValidateContainerAdjustment (the proxy's own validators check the
/// adjustment its plugins make; the runtime's validators see the proxy's
/// merged answer). The plugin SDK drops those the runtime cannot deliver
/// (`0x7FF` on NRI before v0.10).
pub const UPSTREAM_EVENTS: EventMask = EventMask::ALL.difference(EventMask::from_events(&[
    Event::ValidateContainerAdjustment,
]));

/// The upstream side of the proxy (an `nri_plugin::Plugin`).
pub(crate) struct Upstream {
    pub(crate) adaptation: Adaptation,
    pub(crate) state: Arc<State>,
    pub(crate) config: Arc<ProxyConfig>,
    /// The runtime's request timeout, in nanoseconds (from `Configure`).
    request_timeout: AtomicU64,
    /// Set once the runtime's first Synchronize is in the view.
    pub(crate) synced: watch::Sender<bool>,
    /// Deliveries of the differences found by a resynchronization.
    pub(crate) resyncs: Mutex<JoinSet<()>>,
}

fn failed(e: nri_runtime::Error) -> HandlerError {
    HandlerError::msg(format!("nri-proxy: {e}"))
}

impl Upstream {
    pub(crate) fn new(adaptation: Adaptation, state: Arc<State>, config: Arc<ProxyConfig>) -> Self {
        let timeout = config.runtime.request_timeout;
        Upstream {
            adaptation,
            state,
            config,
            request_timeout: AtomicU64::new(nanos(timeout)),
            synced: watch::channel(false).0,
            resyncs: Mutex::new(JoinSet::new()),
        }
    }

    /// The plugin side for one upstream request, with its deadline; `None`
    /// (after `f` updated the view) while the plugin side has not started.
    fn gate(&self, f: impl FnOnce(&mut View)) -> Option<Adaptation> {
        if !self.state.update_unless_started(f) {
            return None;
        }
        let timeout = Duration::from_nanos(self.request_timeout.load(Ordering::Relaxed));
        let deadline = Instant::now() + self.config.budget(timeout);
        Some(self.adaptation.with_deadline(deadline))
    }

    /// Before the plugin side has started: a creation needs the plugins
    /// required for it, which cannot have registered yet.
    fn refuse_if_required(&self, event: Event, pod: &PodSandbox) -> HandlerResult<()> {
        let rt = &self.config.runtime;
        if rt.is_exempt(&pod.namespace) {
            return Ok(());
        }
        match rt.required_plugins(event).next() {
            Some(name) => Err(HandlerError::msg(format!(
                "nri-proxy: required plugin {name:?} is not available for {}: the proxy has not started its plugins yet",
                event.pretty_name()
            ))),
            None => Ok(()),
        }
    }

    fn put_pod(&self, pod: &PodSandbox) {
        self.state
            .update(|v| drop(v.pods.insert(pod.id.clone(), pod.clone())));
    }

    fn put_container(&self, c: &Container) {
        self.state
            .update(|v| drop(v.containers.insert(c.id.clone(), c.clone())));
    }

    /// A container notification that cannot fail the request.
    async fn notify_container(
        &self,
        event: Event,
        pod: PodSandbox,
        c: Container,
    ) -> HandlerResult<()> {
        let Some(a) = self.gate(|v| drop(v.containers.insert(c.id.clone(), c.clone()))) else {
            return Ok(());
        };
        let r = match event {
            Event::PostCreateContainer => a.post_create_container(&pod, &c).await,
            Event::StartContainer => a.start_container(&pod, &c).await,
            Event::PostStartContainer => a.post_start_container(&pod, &c).await,
            _ => a.post_update_container(&pod, &c).await,
        };
        self.put_container(&c);
        r.map(drop).map_err(failed)
    }

    /// A pod notification that cannot fail the request.
    async fn notify_pod(&self, event: Event, pod: PodSandbox) -> HandlerResult<()> {
        let Some(a) = self.gate(|v| drop(v.pods.insert(pod.id.clone(), pod.clone()))) else {
            return Ok(());
        };
        let r = match event {
            Event::StopPodSandbox => a.stop_pod_sandbox(&pod).await,
            _ => a.post_update_pod_sandbox(&pod).await,
        };
        self.put_pod(&pod);
        r.map(drop).map_err(failed)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[nri_plugin::plugin]
impl Plugin for Upstream {
    const EVENTS: EventMask = UPSTREAM_EVENTS;

    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        let rt = &info.runtime;
        self.request_timeout
            .store(nanos(rt.request_timeout), Ordering::Relaxed);
        tracing::info!(
            runtime = %rt.name,
            runtime_version = %rt.version,
            nri_version = ?rt.nri_version,
            request_timeout = ?rt.request_timeout,
            registration_timeout = ?rt.registration_timeout,
            budget = ?self.config.budget(rt.request_timeout),
            unsupported = ?info.unsupported,
            "nri-proxy configured by the runtime"
        );
        Ok(None)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let (n_pods, n_ctrs) = (pods.len(), containers.len());
        let (changes, started) = {
            let mut g = self.state.lock();
            (g.view.replace(pods, containers), g.started)
        };
        tracing::info!(
            pods = n_pods,
            containers = n_ctrs,
            ?kind,
            started,
            "nri-proxy synchronized by the runtime"
        );
        self.synced.send_replace(true);
        if started && !changes.is_empty() {
            let a = self.adaptation.clone();
            let mut set = self.resyncs.lock().unwrap_or_else(PoisonError::into_inner);
            while set.try_join_next().is_some() {}
            set.spawn(deliver(a, changes));
        }
        Ok(Vec::new())
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let Some(a) = self.gate(|v| drop(v.pods.insert(pod.id.clone(), pod.clone()))) else {
            return self.refuse_if_required(Event::RunPodSandbox, &pod);
        };
        let run = a.run_pod_sandbox(&pod).await.map_err(failed)?;
        self.put_pod(&pod);
        drop(run.guard);
        Ok(())
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        let Some(a) = self.gate(|v| drop(v.pods.insert(pod.id.clone(), pod.clone()))) else {
            return Ok(());
        };
        let r = a.update_pod_sandbox(&pod, overhead, resources).await;
        self.put_pod(&pod);
        r.map(drop).map_err(failed)
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.notify_pod(Event::PostUpdatePodSandbox, pod).await
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.notify_pod(Event::StopPodSandbox, pod).await
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let Some(a) = self.gate(|v| drop(v.pods.remove(&pod.id))) else {
            return Ok(());
        };
        let r = a.remove_pod_sandbox(&pod).await;
        self.state.update(|v| drop(v.pods.remove(&pod.id)));
        r.map(drop).map_err(failed)
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let c = &container;
        let Some(a) = self.gate(|v| drop(v.containers.insert(c.id.clone(), c.clone()))) else {
            self.refuse_if_required(Event::CreateContainer, &pod)?;
            return Ok(CreateContainerResponse::default());
        };
        let out = a.create_container(&pod, c).await.map_err(failed)?;
        self.put_container(c);
        drop(out.guard);
        Ok(CreateContainerResponse {
            adjust: Some(out.adjustment),
            update: out.updates,
            evict: out.evictions,
        })
    }

    async fn post_create_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.notify_container(Event::PostCreateContainer, pod, c)
            .await
    }

    async fn start_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.notify_container(Event::StartContainer, pod, c).await
    }

    async fn post_start_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.notify_container(Event::PostStartContainer, pod, c)
            .await
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        let c = &container;
        let Some(a) = self.gate(|v| drop(v.containers.insert(c.id.clone(), c.clone()))) else {
            return Ok(UpdateContainerResponse::default());
        };
        let out = a
            .update_container(&pod, c, resources.clone())
            .await
            .map_err(failed)?;
        self.put_container(c);
        let mut update = out.updates;
        // The library ends with the target's full resources; an echo of
        // the request would only claim fields upstream that no plugin here
        // changed (and conflict with plugins that did, there).
        if update.last().is_some_and(|u| {
            u.container_id == c.id
                && u.linux.as_ref().and_then(|l| l.resources.as_ref()) == resources.as_ref()
        }) {
            update.pop();
        }
        Ok(UpdateContainerResponse {
            update,
            evict: out.evictions,
        })
    }

    async fn post_update_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.notify_container(Event::PostUpdateContainer, pod, c)
            .await
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<StopContainerResponse> {
        let c = &container;
        let Some(a) = self.gate(|v| drop(v.containers.insert(c.id.clone(), c.clone()))) else {
            return Ok(StopContainerResponse::default());
        };
        let out = a.stop_container(&pod, c).await.map_err(failed)?;
        self.put_container(c);
        Ok(StopContainerResponse {
            update: out.updates,
        })
    }

    async fn remove_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        let Some(a) = self.gate(|v| drop(v.containers.remove(&c.id))) else {
            return Ok(());
        };
        let r = a.remove_container(&pod, &c).await;
        self.state.update(|v| drop(v.containers.remove(&c.id)));
        r.map(drop).map_err(failed)
    }
}

/// Delivers what a resynchronization found changed to the plugins behind
/// the proxy, as the events that would have told them: Stop/Remove for
/// what went, RunPodSandbox/CreateContainer (and StartContainer for a
/// running container) for what appeared. Answers are only logged: the
/// runtime has already done what they could have changed.
async fn deliver(a: Adaptation, ch: Changes) {
    tracing::info!(
        gone_pods = ch.gone_pods.len(),
        gone_containers = ch.gone_containers.len(),
        new_pods = ch.new_pods.len(),
        new_containers = ch.new_containers.len(),
        "nri-proxy: delivering the differences of a resynchronization as events"
    );
    let log = |what: &str, id: &str, r: Result<(), nri_runtime::Error>| {
        if let Err(e) = r {
            tracing::warn!(event = what, id, error = %e, "nri-proxy: resync event failed");
        }
    };
    for (pod, c) in &ch.gone_containers {
        log(
            "StopContainer",
            &c.id,
            a.stop_container(pod, c).await.map(drop),
        );
        log(
            "RemoveContainer",
            &c.id,
            a.remove_container(pod, c).await.map(drop),
        );
    }
    for pod in &ch.gone_pods {
        log(
            "StopPodSandbox",
            &pod.id,
            a.stop_pod_sandbox(pod).await.map(drop),
        );
        log(
            "RemovePodSandbox",
            &pod.id,
            a.remove_pod_sandbox(pod).await.map(drop),
        );
    }
    for pod in &ch.new_pods {
        log(
            "RunPodSandbox",
            &pod.id,
            a.run_pod_sandbox(pod).await.map(drop),
        );
    }
    for (pod, c) in &ch.new_containers {
        log(
            "CreateContainer",
            &c.id,
            a.create_container(pod, c).await.map(drop),
        );
        if c.state == nri_api::api::ContainerState::ContainerRunning as i32 {
            log(
                "StartContainer",
                &c.id,
                a.start_container(pod, c).await.map(drop),
            );
        }
    }
}
