//! An observer on our plugin SDK (`nri-plugin`): subscribed to the events
//! of its spec, records every request it gets per connection instance,
//! commits the faults the schedule queues, and (if `echo`) answers
//! UpdateContainer with an update repeating the memory limit asked for.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nri_api::api::{
    Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{
    Builder, ConfigureInfo, ConnectMode, EventMask, HandlerError, HandlerResult, Plugin,
    ReconnectPolicy, Stub, SyncChunk, SyncKind, SyncMode,
};

use crate::observe::{CtrView, Observer, Seen};
use crate::schedule::Hook;

/// How the observer reconnects: quickly, forever.
pub const RECONNECT: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));

/// The SDK plugin of an observer.
pub struct SdkObserver(pub Arc<Observer>);

impl SdkObserver {
    /// Records an event of `pod` (and `ctr`), commits its fault.
    async fn event(
        &self,
        event: Event,
        pod: &PodSandbox,
        ctr: Option<&Container>,
        asked_mem: Option<i64>,
    ) -> HandlerResult<()> {
        let fault = self.0.take_fault(Hook::Event(event));
        self.0.record(Seen::Event {
            event,
            pod: pod.id.clone(),
            ctr: ctr.map(CtrView::of),
            asked_mem,
            fault,
        });
        self.0
            .commit(fault)
            .await
            .map_err(|()| HandlerError::msg(format!("injected failure of {event}")))
    }
}

#[nri_plugin::plugin]
impl Plugin for SdkObserver {
    const EVENTS: EventMask = EventMask::ALL;

    async fn configure(&self, _info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        self.0.configured();
        Ok(None)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.0.record_sync(&pods, &containers, false);
        let fault = self.0.take_fault(Hook::Synchronize);
        self.0
            .commit(fault)
            .await
            .map_err(|()| HandlerError::msg("injected failure of Synchronize"))?;
        Ok(Vec::new())
    }

    async fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let more = chunk.more();
        let (pods, containers) = chunk.into_vecs()?;
        self.0.record_sync(&pods, &containers, more);
        if more {
            // Faults strike the last message only: while a message that
            // is not the last is with the plugin, the runtime's encoder of
            // the next one waits on tokio's blocking pool, which stops
            // paused time from advancing (a delay here would never end).
            return Ok(Vec::new());
        }
        let fault = self.0.take_fault(Hook::Synchronize);
        self.0
            .commit(fault)
            .await
            .map_err(|()| HandlerError::msg("injected failure of Synchronize"))?;
        Ok(Vec::new())
    }

    async fn shutdown(&self) {
        self.0.record(Seen::Shutdown);
    }

    fn disconnected(&self, _cause: &nri_plugin::Error) {
        self.0.record(Seen::Lost);
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.event(Event::RunPodSandbox, &pod, None, None).await
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<LinuxResources>,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        self.event(Event::UpdatePodSandbox, &pod, None, None).await
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.event(Event::PostUpdatePodSandbox, &pod, None, None)
            .await
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.event(Event::StopPodSandbox, &pod, None, None).await
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.event(Event::RemovePodSandbox, &pod, None, None).await
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        c: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.event(Event::CreateContainer, &pod, Some(&c), None)
            .await?;
        Ok(CreateContainerResponse::default())
    }

    async fn post_create_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.event(Event::PostCreateContainer, &pod, Some(&c), None)
            .await
    }

    async fn start_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.event(Event::StartContainer, &pod, Some(&c), None)
            .await
    }

    async fn post_start_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.event(Event::PostStartContainer, &pod, Some(&c), None)
            .await
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        c: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        let asked = resources.as_ref().and_then(LinuxResources::memory_limit);
        self.event(Event::UpdateContainer, &pod, Some(&c), asked)
            .await?;
        let mut resp = UpdateContainerResponse::default();
        if let (true, Some(mem)) = (self.0.spec.echo, asked) {
            let mut u = ContainerUpdate::new(&c.id);
            u.set_linux_memory_limit(mem);
            resp.update.push(u);
        }
        Ok(resp)
    }

    async fn post_update_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.event(Event::PostUpdateContainer, &pod, Some(&c), None)
            .await
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        c: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.event(Event::StopContainer, &pod, Some(&c), None)
            .await?;
        Ok(StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.event(Event::RemoveContainer, &pod, Some(&c), None)
            .await
    }

    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let pod = req.pod.unwrap_or_default();
        self.event(
            Event::ValidateContainerAdjustment,
            &pod,
            req.container.as_ref(),
            None,
        )
        .await
    }
}

/// Builds the stub of `obs` dialing `socket`.
pub fn stub(obs: Arc<Observer>, socket: &Path) -> Result<Stub<SdkObserver>, nri_plugin::Error> {
    let spec = obs.spec.clone();
    let mut b = Builder::new(SdkObserver(obs))
        .name(&spec.name)
        .index(&spec.index)
        .socket_path(socket)
        .mode(ConnectMode::External)
        .events(spec.events)
        .spin_budget(Duration::ZERO)
        .registration_timeout(Duration::from_secs(30));
    if spec.streaming {
        b = b.sync_mode(SyncMode::Streaming);
    }
    if spec.reconnect {
        b = b.reconnect(ReconnectPolicy::new(RECONNECT.0, RECONNECT.1));
    }
    b.build()
}
