//! The proxy as one plugin of the runtime: every event is handed to the
//! plugins behind it through the runtime library, within the runtime's
//! request timeout minus the safety margin, and the merged result is the
//! proxy's answer.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use nri_api::EventMask;
use nri_api::api::{
    Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources, OwningPlugins,
    PodSandbox, StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{ConfigureInfo, HandlerError, HandlerResult, Plugin, SyncKind};
use nri_runtime::Adaptation;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::ProxyConfig;
use crate::delivery::{Context, failed};
use crate::event::{Answer, Upcall};
use crate::metrics::ProxyMetrics;
use crate::owners::Recent;
use crate::view::State;

/// The events the proxy can subscribe to upstream: all of them. It
/// narrows the subscription at `Configure`: ValidateContainerAdjustment
/// only when the configuration puts a validator behind it; the plugin SDK
/// drops those the runtime cannot deliver (`0x7FF` on NRI before v0.10).
pub const UPSTREAM_EVENTS: EventMask = EventMask::ALL;

const VALIDATION: EventMask = EventMask::from_events(&[Event::ValidateContainerAdjustment]);

/// The upstream side of the proxy (an `nri_plugin::Plugin`).
pub(crate) struct Upstream {
    pub(crate) adaptation: Adaptation,
    pub(crate) state: Arc<State>,
    pub(crate) config: Arc<ProxyConfig>,
    metrics: ProxyMetrics,
    /// The runtime's request timeout, in nanoseconds (from `Configure`).
    request_timeout: AtomicU64,
    /// Set once the runtime's first Synchronize is in the view.
    pub(crate) synced: watch::Sender<bool>,
    /// Deliveries after the fact: a resynchronization's events, and
    /// events answered before the plugins could be called.
    pub(crate) later: Mutex<JoinSet<()>>,
    /// The proxy's own `NN-name` upstream (set when the proxy is built).
    pub(crate) own_name: OnceLock<String>,
    /// Whether the proxy subscribed to validation at its last `Configure`.
    validating: AtomicBool,
    /// Who behind the proxy owns which field of its recent creations (kept
    /// while it validates, for the validators behind it).
    owners: Recent,
}

/// Why a creation is refused without calling the plugins.
const NOT_STARTED: &str = "the proxy has not started its plugins yet";

/// Events waiting for their turn or being delivered beyond which a
/// creation is refused: a plugin side that falls that far behind the
/// runtime takes no new objects until it has caught up (the events of
/// the objects that exist still queue, a bounded number each).
pub(crate) const MAX_PENDING_EVENTS: usize = 4096;

impl Upstream {
    pub(crate) fn new(
        adaptation: Adaptation,
        state: Arc<State>,
        config: Arc<ProxyConfig>,
        metrics: ProxyMetrics,
    ) -> Self {
        let timeout = config.runtime.request_timeout;
        Upstream {
            adaptation,
            state,
            config,
            metrics,
            request_timeout: AtomicU64::new(nanos(timeout)),
            synced: watch::channel(false).0,
            later: Mutex::new(JoinSet::new()),
            own_name: OnceLock::new(),
            validating: AtomicBool::new(false),
            owners: Recent::default(),
        }
    }

    fn spawn_later(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.later.lock().unwrap_or_else(PoisonError::into_inner);
        while set.try_join_next().is_some() {}
        set.spawn(task);
    }

    fn context(&self) -> Context {
        Context {
            adaptation: self.adaptation.clone(),
            state: self.state.clone(),
            config: self.config.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// The time the plugins have for one upstream request.
    fn budget(&self) -> Duration {
        let timeout = Duration::from_nanos(self.request_timeout.load(Ordering::Relaxed));
        self.config.budget(timeout)
    }

    /// One upstream event: before the plugin side has started, only the
    /// view changes; otherwise it takes its place in the delivery order
    /// and is delivered by a task the proxy owns ([`crate::delivery`]),
    /// which decides the answer.
    async fn handle(&self, up: Upcall) -> HandlerResult<Answer> {
        let cx = self.context();
        // A creation the runtime delivers after the fact (it happened while
        // the proxy synchronized; a runtime on nri-runtime): the runtime
        // keeps it whatever the answer, so it is never refused here.
        let committed = nri_plugin::event_committed();
        if !self.state.update_unless_started(|v| up.apply(v)) {
            if !committed {
                cx.refuse_if_required(&up, NOT_STARTED)?;
            }
            return Ok(Answer::Done);
        }
        let deadline = Instant::now() + self.budget();
        let order = &self.state.order;
        if up.is_creation() && !committed && order.pending() >= MAX_PENDING_EVENTS {
            self.metrics.backlog_refusals.inc();
            tracing::warn!(
                pending = order.pending(),
                event = up.event().pretty_name(),
                id = up.id(),
                "nri-proxy: refusing a creation: the plugins are too far behind the runtime"
            );
            return Err(HandlerError::msg(format!(
                "nri-proxy: refusing {} {}: the plugins behind the proxy are {} events behind the runtime",
                up.event().pretty_name(),
                up.id(),
                order.pending()
            )));
        }
        // Taken before the first wait: the arrival order is the order.
        let place = order.event(up.lane());
        let (reply, answer) = oneshot::channel();
        self.spawn_later(cx.deliver(up, place, deadline, committed, reply));
        answer.await.unwrap_or_else(|_| {
            Err(HandlerError::msg(
                "nri-proxy: the event's delivery ended without an answer (the proxy is stopping)",
            ))
        })
    }

    async fn handle_done(&self, up: Upcall) -> HandlerResult<()> {
        self.handle(up).await.map(drop)
    }

    /// Whether the configuration puts a validator behind the proxy: the
    /// built-in default validator, or a plugin entry with a `validation`
    /// mode. The subscription upstream follows from it alone (the same at
    /// every registration, whoever is connected then).
    fn validator_behind(&self) -> bool {
        let rt = &self.config.runtime;
        rt.default_validator.is_some()
            || rt.plugin_policies.values().any(|p| p.validation.is_some())
    }

    /// The runtime's validation request as the validators behind the
    /// proxy see it: the proxy's entry in the list of plugins that took
    /// part is replaced by the plugins behind it that took part in that
    /// creation (none if the proxy answered it without them, or does not
    /// know it), and the fields the runtime says the proxy owns name the
    /// plugins behind it that own them (see [`crate::owners`]).
    fn behind_view(
        &self,
        mut req: ValidateContainerAdjustmentRequest,
    ) -> ValidateContainerAdjustmentRequest {
        let own = self.own_name.get().map(String::as_str);
        let handled = (req.container.as_ref()).and_then(|c| self.owners.take(&c.id));
        if let (Some(own), Some(owners), Some(c), Some(h)) =
            (own, req.owners.as_mut(), &req.container, &handled)
        {
            h.rewrite(owners, &c.id, own);
        }
        let at = (req.plugins.iter())
            .position(|p| own == Some(format!("{}-{}", p.index, p.name).as_str()));
        if let Some(at) = at {
            let behind = handled.map(|h| h.plugins).unwrap_or_default();
            req.plugins.splice(at..=at, behind);
        }
        req
    }

    /// Starts a resynchronization with the runtime's lists: its place in
    /// the delivery order is taken before the runtime gets the Synchronize
    /// answer, so every event the runtime sends after that reaches the
    /// plugins after its events; the differences are taken when its turn
    /// comes, against a view that every earlier delivery has reached (an
    /// object whose creation event was still with the plugins is not new
    /// again, one whose delivery was cut short upstream is there to be
    /// removed). The answer does not wait for it.
    fn resync(&self, pods: Vec<PodSandbox>, containers: Vec<Container>) {
        let place = self.state.order.barrier();
        let (a, state, m) = (
            self.adaptation.clone(),
            self.state.clone(),
            self.metrics.clone(),
        );
        self.spawn_later(async move {
            place.turn().await;
            let changes = state.lock().view.resync(pods, containers);
            if !changes.is_empty() {
                m.resyncs.inc();
                crate::resync::deliver(a, state.clone(), changes, m).await;
            }
            drop(place);
        });
    }
}

/// The runtime's request timeout as `Configure` tells it. Zero is what a
/// runtime on NRI before v0.7.0 sends (the field did not exist:
/// containerd 1.7.0-1.7.25, CRI-O before 1.32), and such a runtime times
/// its plugins with NRI's default, 2 s; containerd/nri's runtime would
/// fail every call with a timeout of zero, and ours refuses one, so no
/// runtime means zero literally. Zero is read as the default.
fn runtime_request_timeout(told: Duration) -> Duration {
    if told.is_zero() {
        tracing::warn!(
            assumed = ?nri_api::DEFAULT_REQUEST_TIMEOUT,
            "nri-proxy: the runtime did not tell its request timeout (NRI before v0.7.0); assuming NRI's default"
        );
        return nri_api::DEFAULT_REQUEST_TIMEOUT;
    }
    told
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[nri_plugin::plugin]
impl Plugin for Upstream {
    const EVENTS: EventMask = UPSTREAM_EVENTS;

    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        let rt = &info.runtime;
        let validate = self.validator_behind()
            && info
                .subscription
                .contains(Event::ValidateContainerAdjustment);
        let timeout = runtime_request_timeout(rt.request_timeout);
        self.request_timeout
            .store(nanos(timeout), Ordering::Relaxed);
        self.validating.store(validate, Ordering::Relaxed);
        crate::capabilities::declare_upstream(&self.adaptation, rt);
        tracing::info!(
            runtime = %rt.name,
            runtime_version = %rt.version,
            nri_version = ?rt.nri_version,
            request_timeout = ?rt.request_timeout,
            registration_timeout = ?rt.registration_timeout,
            budget = ?self.config.budget(timeout),
            unsupported = ?info.unsupported,
            validation = validate,
            "nri-proxy configured by the runtime"
        );
        if validate {
            Ok(None)
        } else {
            Ok(Some(info.subscription.difference(VALIDATION)))
        }
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let (n_pods, n_ctrs) = (pods.len(), containers.len());
        let lists = {
            let mut g = self.state.lock();
            if g.started {
                Some((pods, containers))
            } else {
                g.view.replace(pods, containers);
                None
            }
        };
        tracing::info!(
            pods = n_pods,
            containers = n_ctrs,
            ?kind,
            started = lists.is_some(),
            "nri-proxy synchronized by the runtime"
        );
        self.synced.send_replace(true);
        if let Some((pods, containers)) = lists {
            self.resync(pods, containers);
        }
        Ok(Vec::new())
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.handle_done(Upcall::RunPod(pod)).await
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        self.handle_done(Upcall::UpdatePod(pod, overhead, resources))
            .await
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.handle_done(Upcall::PodNote(Event::PostUpdatePodSandbox, pod))
            .await
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.handle_done(Upcall::PodNote(Event::StopPodSandbox, pod))
            .await
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.handle_done(Upcall::RemovePod(pod)).await
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let id = container.id.clone();
        let validating = self.validating.load(Ordering::Relaxed);
        match self.handle(Upcall::Create(pod, container)).await? {
            Answer::Create(created) => {
                let created = *created;
                crate::capabilities::report_unapplied(
                    &self.adaptation.declared(),
                    &id,
                    created.response.adjust.as_ref(),
                    &created.plugins,
                    &self.metrics,
                );
                if validating {
                    self.owners.keep(&id, created.owners, created.plugins);
                }
                Ok(created.response)
            }
            _ => {
                // Answered without the plugins: none of them took part.
                if validating {
                    self.owners.keep(&id, OwningPlugins::default(), Vec::new());
                }
                Ok(CreateContainerResponse::default())
            }
        }
    }

    async fn post_create_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.handle_done(Upcall::ContainerNote(Event::PostCreateContainer, pod, c))
            .await
    }

    async fn start_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.handle_done(Upcall::ContainerNote(Event::StartContainer, pod, c))
            .await
    }

    async fn post_start_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.handle_done(Upcall::ContainerNote(Event::PostStartContainer, pod, c))
            .await
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        match self
            .handle(Upcall::Update(pod, container, resources))
            .await?
        {
            Answer::Update(r) => Ok(r),
            _ => Ok(UpdateContainerResponse::default()),
        }
    }

    async fn post_update_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.handle_done(Upcall::ContainerNote(Event::PostUpdateContainer, pod, c))
            .await
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<StopContainerResponse> {
        match self.handle(Upcall::Stop(pod, container)).await? {
            Answer::Stop(r) => Ok(r),
            _ => Ok(StopContainerResponse::default()),
        }
    }

    async fn remove_container(&self, pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.handle_done(Upcall::Remove(pod, c)).await
    }

    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        if !self.state.lock().started {
            return Ok(());
        }
        let timeout = Duration::from_nanos(self.request_timeout.load(Ordering::Relaxed));
        let a = self
            .adaptation
            .with_deadline(Instant::now() + self.config.budget(timeout));
        a.validate_container_adjustment(&self.behind_view(req))
            .await
            .map(drop)
            .map_err(failed)
    }
}
