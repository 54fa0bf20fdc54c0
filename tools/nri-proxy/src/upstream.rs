//! The proxy as one plugin of the runtime: every event is handed to the
//! plugins behind it through the runtime library, within the runtime's
//! request timeout minus the safety margin, and the merged result is the
//! proxy's answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use nri_api::EventMask;
use nri_api::api::{
    Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources, PluginInstance,
    PodSandbox, StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{ConfigureInfo, HandlerError, HandlerResult, Plugin, SyncKind};
use nri_runtime::Adaptation;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedRwLockReadGuard, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::ProxyConfig;
use crate::event::{Answer, Upcall};
use crate::metrics::ProxyMetrics;
use crate::owners::Recent;
use crate::view::State;

/// The events the proxy can subscribe to upstream: all of them. It
/// narrows the subscription at `Configure`: ValidateContainerAdjustment
/// only while a validator sits behind it; the plugin SDK drops those the
/// runtime cannot deliver (`0x7FF` on NRI before v0.10).
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
    /// The runtime's registration timeout, in nanoseconds (from
    /// `Configure`): with the request timeout, the budget of the proxy's
    /// Synchronize answer.
    registration_timeout: AtomicU64,
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

fn failed(e: nri_runtime::Error) -> HandlerError {
    HandlerError::msg(format!("nri-proxy: {e}"))
}

/// A place in the delivery order, not yet reached.
type WaitTurn = Pin<Box<dyn Future<Output = OwnedRwLockReadGuard<()>> + Send>>;

/// Counts one upstream event in `nri_proxy_events_held` while it lives.
struct Held(Gauge);

impl Held {
    fn new(g: &Gauge) -> Self {
        g.inc();
        Held(g.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Why a creation is refused without calling the plugins.
const NOT_STARTED: &str = "the proxy has not started its plugins yet";
const BEHIND_RESYNC: &str =
    "the proxy's plugins were still getting the events of a resynchronization with the runtime";

impl Upstream {
    pub(crate) fn new(
        adaptation: Adaptation,
        state: Arc<State>,
        config: Arc<ProxyConfig>,
        metrics: ProxyMetrics,
    ) -> Self {
        let timeout = config.runtime.request_timeout;
        let registration = config.runtime.registration_timeout;
        Upstream {
            adaptation,
            state,
            config,
            metrics,
            request_timeout: AtomicU64::new(nanos(timeout)),
            registration_timeout: AtomicU64::new(nanos(registration)),
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

    /// A creation refused without calling the plugins when one of them is
    /// required for it.
    fn refuse_if_required(&self, up: &Upcall, cause: &str) -> HandlerResult<()> {
        let rt = &self.config.runtime;
        if !up.is_creation() || rt.is_exempt(&up.pod().namespace) {
            return Ok(());
        }
        match rt.required_plugins(up.event()).next() {
            Some(name) => Err(HandlerError::msg(format!(
                "nri-proxy: required plugin {name:?} is not available for {}: {cause}",
                up.event().pretty_name()
            ))),
            None => Ok(()),
        }
    }

    /// One upstream event: before the plugin side has started, only the
    /// view changes; otherwise the event reaches the plugins in its turn
    /// (after a resynchronization's events), within the runtime's budget.
    async fn handle(&self, up: Upcall) -> HandlerResult<Answer> {
        if !self.state.update_unless_started(|v| up.apply(v)) {
            self.refuse_if_required(&up, NOT_STARTED)?;
            return Ok(Answer::Done);
        }
        let timeout = Duration::from_nanos(self.request_timeout.load(Ordering::Relaxed));
        let deadline = Instant::now() + self.config.budget(timeout);
        let order = self.state.order.clone();
        let turn = match order.clone().try_read_owned() {
            Ok(turn) => turn,
            Err(_) => {
                let held = Held::new(&self.metrics.held);
                let mut wait: WaitTurn = Box::pin(order.read_owned());
                match tokio::time::timeout_at(deadline, &mut wait).await {
                    Ok(turn) => turn,
                    Err(_) => return self.answer_late(up, wait, held),
                }
            }
        };
        let a = self.adaptation.with_deadline(deadline);
        let r = up.deliver(&a, &self.state, false).await.map_err(failed);
        drop(turn);
        r
    }

    /// The event's turn did not come within the budget: the runtime is
    /// answered without the plugins (a creation that needs a required
    /// plugin is refused), and the event reaches them in its turn, its
    /// answer only logged.
    fn answer_late(&self, up: Upcall, wait: WaitTurn, held: Held) -> HandlerResult<Answer> {
        self.refuse_if_required(&up, BEHIND_RESYNC)?;
        tracing::warn!(
            event = up.event().pretty_name(),
            id = up.id(),
            "nri-proxy: answering the runtime without the plugins: they are still getting the events of a resynchronization; the event follows those"
        );
        self.metrics.late.inc();
        let (a, state) = (self.adaptation.clone(), self.state.clone());
        self.spawn_later(async move {
            let _turn = wait.await;
            drop(held);
            let (event, id) = (up.event(), up.id().to_owned());
            // The runtime was answered with success: it has the object
            // whatever the plugins say now.
            if let Err(e) = up.deliver(&a, &state, true).await {
                tracing::warn!(event = event.pretty_name(), %id, error = %e, "nri-proxy: a late event failed");
            }
        });
        Ok(Answer::Done)
    }

    async fn handle_done(&self, up: Upcall) -> HandlerResult<()> {
        self.handle(up).await.map(drop)
    }

    /// Whether a validator sits behind the proxy: the plugin side's
    /// configuration turns on the built-in default validator or has a
    /// plugin entry with a `validation` mode, or a plugin connected to the
    /// proxy subscribes to ValidateContainerAdjustment. Read at each
    /// registration upstream (the subscription is fixed per connection).
    fn validator_behind(&self) -> bool {
        let rt = &self.config.runtime;
        rt.default_validator.is_some()
            || rt.plugin_policies.values().any(|p| p.validation.is_some())
            || (self.adaptation.plugins().iter())
                .any(|p| p.events.contains(Event::ValidateContainerAdjustment))
    }

    /// The runtime's validation request as the validators behind the
    /// proxy see it: the proxy's entry in the list of plugins that took
    /// part is replaced by the plugins behind it, and the fields the
    /// runtime says the proxy owns name the plugins behind it that own
    /// them (see [`crate::owners`]).
    fn behind_view(
        &self,
        mut req: ValidateContainerAdjustmentRequest,
    ) -> ValidateContainerAdjustmentRequest {
        let own = self.own_name.get().map(String::as_str);
        if let (Some(own), Some(owners), Some(c)) = (own, req.owners.as_mut(), &req.container) {
            self.owners.rewrite(owners, &c.id, own);
        }
        let at = (req.plugins.iter())
            .position(|p| own == Some(format!("{}-{}", p.index, p.name).as_str()));
        if let Some(at) = at {
            let behind = (self.adaptation.plugins().into_iter()).map(|p| PluginInstance {
                name: p.id.name().to_owned(),
                index: p.id.index().to_owned(),
            });
            req.plugins.splice(at..=at, behind);
        }
        req
    }

    /// Starts a resynchronization with the runtime's lists. Its place in
    /// the delivery order (the write side) is queued before the runtime
    /// gets the Synchronize answer, so every event the runtime sends after
    /// that waits for it; the differences are taken when that turn comes,
    /// against a view that every earlier delivery has reached (an object
    /// whose creation event is still with the plugins is not new again).
    /// Earlier deliveries (a previous resynchronization's, a slow
    /// plugin's) may hold the order for longer than the runtime waits for
    /// the answer: the wait is cut at the smaller of the runtime's
    /// registration and request timeouts (from `Configure`; containerd
    /// times Synchronize with the request timeout, a runtime may bound the
    /// whole registration with the other) minus the safety margin, and the
    /// resynchronization follows in its turn.
    async fn resync_in_turn(&self, pods: Vec<PodSandbox>, containers: Vec<Container>) {
        let timeout = Duration::from_nanos(
            self.registration_timeout
                .load(Ordering::Relaxed)
                .min(self.request_timeout.load(Ordering::Relaxed)),
        );
        let deadline = Instant::now() + self.config.budget(timeout);
        let mut wait = Box::pin(self.state.order.clone().write_owned());
        let turn = tokio::time::timeout_at(deadline, &mut wait).await.ok();
        if turn.is_none() {
            tracing::warn!(
                budget = ?self.config.budget(timeout),
                "nri-proxy: earlier events are still being delivered; answering the runtime's Synchronize, the resynchronization follows them"
            );
        }
        let (a, state, m) = (
            self.adaptation.clone(),
            self.state.clone(),
            self.metrics.clone(),
        );
        self.spawn_later(async move {
            let turn = match turn {
                Some(t) => t,
                None => wait.await,
            };
            let changes = state.lock().view.resync(pods, containers);
            if !changes.is_empty() {
                m.resyncs.inc();
                crate::resync::deliver(a, state, changes, turn, m).await;
            }
        });
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
        let validate = self.validator_behind()
            && info
                .subscription
                .contains(Event::ValidateContainerAdjustment);
        self.request_timeout
            .store(nanos(rt.request_timeout), Ordering::Relaxed);
        self.registration_timeout
            .store(nanos(rt.registration_timeout), Ordering::Relaxed);
        self.validating.store(validate, Ordering::Relaxed);
        tracing::info!(
            runtime = %rt.name,
            runtime_version = %rt.version,
            nri_version = ?rt.nri_version,
            request_timeout = ?rt.request_timeout,
            registration_timeout = ?rt.registration_timeout,
            budget = ?self.config.budget(rt.request_timeout),
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
            self.resync_in_turn(pods, containers).await;
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
        match self.handle(Upcall::Create(pod, container)).await? {
            Answer::Create(r, owners) => {
                if self.validating.load(Ordering::Relaxed) {
                    self.owners.keep(owners);
                }
                Ok(r)
            }
            _ => Ok(CreateContainerResponse::default()),
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
