//! The embeddable runtime side of NRI: [`Adaptation`].

use std::future::Future;
use std::sync::{Arc, Mutex};

use nri_api::api::{
    Container, ContainerAdjustment, ContainerEviction, ContainerUpdate, CreateContainerResponse,
    Empty, Event, LinuxResources, OwningPlugins, PodSandbox, StopContainerResponse,
    UpdateContainerResponse, UpdatePodSandboxRequest, UpdatePodSandboxResponse,
    ValidateContainerAdjustmentRequest, ValidateContainerAdjustmentResponse,
};
use nri_api::method;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Builder, Config, DEFAULT_VALIDATOR_NAME, RuntimeCallbacks};
use crate::connect::Pending;
use crate::error::Error;
use crate::failure::{
    ErrorClass, FailurePolicy, PluginError, PluginFailure, ValidationMode, is_teardown_event,
};
use crate::lock;
use crate::metrics::{Metrics, audit_owners};
use crate::plugin::{
    Budget, Notification, Plugin, PluginInfo, PluginList, PluginOrigin, hint_next, in_turn,
};
use crate::registry::{CreationGuard, Registry};
use nri_merge::validate::{self, DefaultValidator, Validator};
use nri_merge::{CreateResult, PluginId, StopResult, UpdateResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    New,
    Started,
    Stopped,
}

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) callbacks: Arc<dyn RuntimeCallbacks>,
    pub(crate) metrics: Arc<dyn Metrics>,
    pub(crate) registry: Arc<Registry>,
    /// Limits on peers, the containers known, refusal reports.
    pub(crate) peers: Arc<crate::peer::PeerGuard>,
    validators: Vec<(PluginId, Arc<dyn Validator>)>,
    tasks: Mutex<JoinSet<()>>,
    pub(crate) stopping: CancellationToken,
    life: Mutex<Life>,
    socket_installed: Mutex<bool>,
    /// When `start` was called (the start-up grace counts from there).
    started_at: Mutex<Option<tokio::time::Instant>>,
}

impl Shared {
    /// The in-process validators, in order.
    pub(crate) fn validators(&self) -> &[(PluginId, Arc<dyn Validator>)] {
        &self.validators
    }

    /// Spawns an owned background task (aborted by `stop`).
    pub(crate) fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        let mut tasks = lock(&self.tasks);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(fut);
    }
}

/// Results of RunPodSandbox.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunPodSandboxOutcome {
    /// Failures of plugins whose policy is `ignore`.
    pub errors: Vec<PluginError>,
    /// Keep until the pod is stored by the runtime (visible to
    /// [`RuntimeCallbacks::list_pods_and_containers`]), then drop or
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

/// The runtime side of NRI, to embed in a container runtime.
///
/// Cheap to clone (shared state). Create it with [`Adaptation::builder`],
/// call [`start`](Self::start), then one method per lifecycle event, and
/// [`stop`](Self::stop) at the end.
///
/// ```no_run
/// use std::sync::Arc;
/// use nri_api::api::{Container, ContainerUpdate, PodSandbox};
/// use nri_runtime::{Adaptation, BoxFuture, CallbackError, RuntimeCallbacks, Snapshot};
///
/// struct MyRuntime;
/// impl RuntimeCallbacks for MyRuntime {
///     fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
///         let (pods, containers): (Vec<PodSandbox>, Vec<Container>) = (Vec::new(), Vec::new());
///         Box::pin(async move { Ok(Snapshot::new(pods, containers)) })
///     }
///     fn update_containers(&self, _u: Vec<ContainerUpdate>)
///         -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
///         Box::pin(async { Ok(Vec::new()) })
///     }
/// }
///
/// # async fn run() -> Result<(), nri_runtime::Error> {
/// let nri = Adaptation::builder("my-runtime", "1.0")
///     .socket_path("/run/my-runtime/nri.sock")
///     .build(Arc::new(MyRuntime))?;
/// nri.start().await?;
/// let pod = PodSandbox { id: "pod0".into(), ..Default::default() };
/// let run = nri.run_pod_sandbox(&pod).await?;
/// // ... store the pod, then:
/// drop(run.guard);
/// nri.stop().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Adaptation {
    shared: Arc<Shared>,
    /// Deadline of every event sent through this handle.
    budget: Budget,
}

impl std::fmt::Debug for Adaptation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adaptation")
            .field("config", &self.shared.config)
            .field("deadline", &self.budget.0)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Builds the adaptation (nothing runs until [`Adaptation::start`]).
    pub fn build(self, callbacks: Arc<dyn RuntimeCallbacks>) -> Result<Adaptation, Error> {
        let mut validators = Vec::new();
        if let Some(cfg) = self.config.default_validator.clone() {
            let id = PluginId::new("00", DEFAULT_VALIDATOR_NAME)?;
            validators.push((
                id,
                Arc::new(DefaultValidator::new(cfg)?) as Arc<dyn Validator>,
            ));
        }
        validators.extend(self.validators);
        if self.config.request_timeout.is_zero() || self.config.registration_timeout.is_zero() {
            return Err(Error::InvalidConfig {
                reason: "timeouts must be positive".into(),
            });
        }
        let registry = Arc::new(Registry::new(self.metrics.clone()));
        let peers = Arc::new(crate::peer::PeerGuard::new(
            self.config.peer_limits.clone(),
            self.metrics.clone(),
        ));
        Ok(Adaptation {
            shared: Arc::new(Shared {
                config: self.config,
                callbacks,
                metrics: self.metrics,
                registry,
                peers,
                validators,
                tasks: Mutex::new(JoinSet::new()),
                stopping: CancellationToken::new(),
                life: Mutex::new(Life::New),
                socket_installed: Mutex::new(false),
                started_at: Mutex::new(None),
            }),
            budget: Budget::default(),
        })
    }
}

impl Adaptation {
    /// A builder with the defaults and the runtime's name and version.
    pub fn builder(runtime_name: impl Into<String>, runtime_version: impl Into<String>) -> Builder {
        Builder::new(Config::new(runtime_name, runtime_version))
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// A handle to the same adaptation whose events all end by `deadline`:
    /// each plugin call gets the smaller of the plugin's request timeout and
    /// the time left until `deadline`. A plugin that times out on the
    /// shortened call fails its call as on any timeout (a strike, and the
    /// failure policy decides); a plugin whose turn comes after the deadline
    /// is not called ([`PluginFailure::NotCalled`], no strike), which fails
    /// the request only when the plugin is `required` for the event (a
    /// validator: unless `fail-open`). For a caller that must answer within
    /// a deadline of its own, such as a runtime's request timeout; leave
    /// room for the work after the fan-out. Cheap (a clone of the handle).
    ///
    /// ```no_run
    /// # async fn f(nri: nri_runtime::Adaptation, pod: nri_api::api::PodSandbox) -> Result<(), nri_runtime::Error> {
    /// let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(1800);
    /// let run = nri.with_deadline(deadline).run_pod_sandbox(&pod).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_deadline(&self, deadline: tokio::time::Instant) -> Adaptation {
        Adaptation {
            shared: self.shared.clone(),
            budget: Budget(Some(deadline)),
        }
    }

    /// The deadline set with [`with_deadline`](Self::with_deadline), if any.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.budget.0
    }

    /// The active plugins, in call order: synchronized, with the events
    /// that happened during their synchronization delivered.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.shared
            .registry
            .snapshot()
            .iter()
            .filter(|p| p.is_ready() && !p.is_closed())
            .map(|p| p.info())
            .collect()
    }

    /// Launches the plugins of the plugin directory (each registered,
    /// configured and synchronized before this returns; failures are logged
    /// and the plugin skipped), then listens for external plugins.
    pub async fn start(&self) -> Result<(), Error> {
        {
            let mut life = lock(&self.shared.life);
            match *life {
                Life::New => {
                    *life = Life::Started;
                    *lock(&self.shared.started_at) = Some(tokio::time::Instant::now());
                }
                Life::Started => {
                    return Err(Error::InvalidState {
                        state: "already started",
                    });
                }
                Life::Stopped => return Err(Error::InvalidState { state: "stopped" }),
            }
        }
        let cfg = &self.shared.config;
        if !cfg.disable_launch {
            let found = crate::launch::discover(&cfg.plugin_dir, &cfg.config_dir)?;
            let mut starting = JoinSet::new();
            for d in found {
                if d.wasm {
                    let (name, shared) = (d.id.to_string(), self.shared.clone());
                    starting.spawn(async move { (name, shared.start_wasm(d).await) });
                    continue;
                }
                let (mut child, stream) = match crate::launch::spawn(&d) {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(plugin = %d.id, error = %e, "cannot launch NRI plugin");
                        continue;
                    }
                };
                let name = d.id.to_string();
                crate::output::forward_child(&self.shared, &name, &mut child);
                let pending = Pending {
                    origin: PluginOrigin::Launched { pid: child.id() },
                    launched_id: Some(d.id.clone()),
                    config: d.config.clone(),
                    child: Some(child),
                    peer: format!("launched:{name}"),
                    pending_slot: None,
                };
                let shared = self.shared.clone();
                starting.spawn(async move { (name, shared.establish(stream, pending).await) });
            }
            while let Some(joined) = starting.join_next().await {
                match joined {
                    Ok((_, Ok(plugin))) => {
                        let shared = self.shared.clone();
                        self.shared
                            .spawn(async move { shared.supervise(plugin).await });
                    }
                    Ok((name, Err(e))) => {
                        tracing::warn!(plugin = %name, error = %e, "NRI plugin failed to start; skipped");
                    }
                    Err(e) => tracing::error!(error = %e, "NRI plugin start task failed"),
                }
            }
        }
        if !cfg.disable_connections {
            let listener = crate::listener::bind(&cfg.socket_path)?;
            *lock(&self.shared.socket_installed) = true;
            tracing::info!(path = %cfg.socket_path.display(), "NRI listening for external plugins");
            let shared = self.shared.clone();
            self.shared
                .spawn(async move { shared.accept_loop(listener).await });
        }
        Ok(())
    }

    /// Sends `Shutdown` to every plugin (each with its request timeout, all
    /// at once), closes the connections, stops launched plugins (SIGTERM,
    /// grace, SIGKILL), stops background tasks and removes the socket.
    pub async fn stop(&self) {
        *lock(&self.shared.life) = Life::Stopped;
        self.shared.stopping.cancel();
        let plugins = self.shared.registry.clear();
        let mut set = JoinSet::new();
        for p in plugins {
            let metrics = self.shared.metrics.clone();
            let grace = self.shared.config.stop_grace;
            let child = lock(&p.child).take();
            set.spawn(async move {
                if !p.is_closed() {
                    let r: Result<Empty, _> = p
                        .call(
                            &*metrics,
                            "Shutdown",
                            method::SHUTDOWN,
                            &Empty {},
                            p.timeout,
                        )
                        .await;
                    if let Err(e) = r {
                        tracing::debug!(plugin = %p.id, error = %e, "Shutdown not acknowledged");
                    }
                }
                p.close("runtime shutting down");
                if let Some(c) = child {
                    crate::launch::terminate(c, grace, &p.id.to_string()).await;
                }
            });
        }
        while set.join_next().await.is_some() {}
        let mut tasks = std::mem::take(&mut *lock(&self.shared.tasks));
        tasks.shutdown().await;
        if std::mem::take(&mut *lock(&self.shared.socket_installed)) {
            let _ = std::fs::remove_file(&self.shared.config.socket_path);
        }
    }

    fn check_started(&self) -> Result<(), Error> {
        match *lock(&self.shared.life) {
            Life::Started => Ok(()),
            Life::New => Err(Error::InvalidState {
                state: "not started",
            }),
            Life::Stopped => Err(Error::InvalidState { state: "stopped" }),
        }
    }

    /// RunPodSandbox. Fails when a `required` plugin is missing or a plugin
    /// with policy `fail`/`required` fails.
    pub async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<RunPodSandboxOutcome, Error> {
        self.check_started()?;
        let ev = Event::RunPodSandbox;
        let n = Notification::new(ev, pod, None);
        self.shared.await_required(ev, pod).await;
        let (plugins, guard) =
            (self.shared.registry).begin_creation(ev, pod, None, n.request().clone());
        self.shared.check_required(ev, &plugins, pod)?;
        let mut errors = Vec::new();
        for p in in_turn(&plugins, ev) {
            if let Err(f) = p
                .notify_prepared(&*self.shared.metrics, &n, self.budget)
                .await
            {
                self.shared.on_failure(p, ev, f, pod, &mut errors)?;
            }
        }
        guard.set_outcome(true);
        Ok(RunPodSandboxOutcome { errors, guard })
    }

    /// UpdatePodSandbox (policy applies).
    pub async fn update_pod_sandbox(
        &self,
        pod: &PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> Result<EventReport, Error> {
        self.check_started()?;
        let ev = Event::UpdatePodSandbox;
        let plugins = (self.shared.registry).begin_update(
            ev,
            pod,
            None,
            resources.as_ref(),
            overhead.as_ref(),
        );
        let req = UpdatePodSandboxRequest {
            pod: Some(pod.clone()),
            overhead_linux_resources: overhead,
            linux_resources: resources,
        };
        let payload = bytes::Bytes::from(prost::Message::encode_to_vec(&req));
        let mut errors = Vec::new();
        let metrics = &*self.shared.metrics;
        for p in in_turn(&plugins, ev) {
            let r: Result<UpdatePodSandboxResponse, _> =
                match self.budget.time_for(p, metrics, ev.pretty_name()) {
                    Ok(t) => {
                        p.call_encoded(
                            metrics,
                            ev.pretty_name(),
                            method::UPDATE_POD_SANDBOX,
                            payload.clone(),
                            t,
                        )
                        .await
                    }
                    Err(f) => Err(f),
                };
            if let Err(f) = r {
                self.shared.on_failure(p, ev, f, pod, &mut errors)?;
            }
        }
        Ok(EventReport { errors })
    }

    /// PostUpdatePodSandbox (teardown-class: never fails).
    pub async fn post_update_pod_sandbox(&self, pod: &PodSandbox) -> Result<EventReport, Error> {
        self.notify_event(Event::PostUpdatePodSandbox, pod, None)
            .await
    }

    /// StopPodSandbox (teardown: delivered to every subscribed plugin, never fails).
    pub async fn stop_pod_sandbox(&self, pod: &PodSandbox) -> Result<EventReport, Error> {
        self.notify_event(Event::StopPodSandbox, pod, None).await
    }

    /// RemovePodSandbox (teardown).
    pub async fn remove_pod_sandbox(&self, pod: &PodSandbox) -> Result<EventReport, Error> {
        self.notify_event(Event::RemovePodSandbox, pod, None).await
    }

    /// CreateContainer: the merged adjustment, updates of other containers
    /// and evictions, after validation.
    #[allow(clippy::too_many_lines)]
    pub async fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<CreateContainerOutcome, Error> {
        self.check_started()?;
        let ev = Event::CreateContainer;
        let op = ev.pretty_name();
        let sh = &self.shared;
        // The first request, encoded once, is also the barrier's record of
        // the creation; the result borrows the pod and the container (and
        // copies the container only when a plugin adjusts it).
        sh.await_required(ev, pod).await;
        let mut payload = crate::encode::CreatePayload::new(pod, container);
        let (plugins, guard) =
            sh.registry
                .begin_creation(ev, pod, Some(container), payload.first());
        sh.check_required(ev, &plugins, pod)?;
        let mut result = CreateResult::new(pod, container);
        let mut errors = Vec::new();
        // The request cache's key: bumped whenever an applied response
        // changed the container the next plugin sees.
        let mut revision = 0u64;
        // What the last response that changed the container appended to it,
        // when that is all it did (the next request is then the previous
        // one plus this).
        let mut delta: Option<Container> = None;
        let last = plugins.iter().rposition(|p| p.subscribed(ev));
        let mut answered: Vec<&PluginId> = Vec::new();
        for (i, p) in plugins.iter().enumerate() {
            if !p.subscribed(ev) {
                result.note_plugin(&p.id);
                continue;
            }
            // As `in_turn` does, with every plugin noted in call order.
            hint_next(&plugins, i, ev);
            let req = payload.request(revision, result.container(), delta.as_ref());
            let r: Result<CreateContainerResponse, _> =
                match self.budget.time_for(p, &*sh.metrics, op) {
                    Ok(t) => {
                        p.call_encoded(&*sh.metrics, op, method::CREATE_CONTAINER, req, t)
                            .await
                    }
                    Err(f) => Err(f),
                };
            let resp = match r {
                Ok(resp) => resp,
                Err(f) => {
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                    continue;
                }
            };
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            let adjusted = resp.adjust.is_some();
            let appended = if Some(i) == last {
                // No request after this one.
                None
            } else {
                (resp.adjust.as_ref())
                    .and_then(|a| crate::encode::append_delta(result.container(), a))
            };
            let applied = result.apply_response(&p.id, resp);
            if applied.is_ok() && adjusted {
                revision += 1;
                delta = appended;
            }
            match applied {
                Ok(()) => {
                    sh.metrics.plugin_adjustments(&p.name, op, 0, nu, ne);
                    answered.push(&p.id);
                }
                Err(e) => {
                    let f = sh.merge_failure(p, op, e);
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        // Plugins that started synchronizing during the fan-out get the
        // creation now, and their changes count (see docs/runtime/sync.md).
        for slot in guard.close_late() {
            let p = &slot.plugin.clone();
            let req = payload.request(revision, result.container(), None);
            if answered.contains(&&p.id) {
                // A new instance of a plugin whose previous instance has
                // answered for this container: it learns of the container,
                // the answer already given stands.
                if let Ok(resp) = sh.call_late(slot, req, self.budget).await
                    && resp.adjust.is_some()
                {
                    tracing::info!(plugin = %p.id, container = %container.id, "a plugin that re-registered during CreateContainer: its earlier instance's answer stands");
                }
                continue;
            }
            let resp = match sh.call_late(slot, req, self.budget).await {
                Ok(resp) => resp,
                Err(f) => {
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                    continue;
                }
            };
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            let adjusted = resp.adjust.is_some();
            match result.apply_response(&p.id, resp) {
                Ok(()) => {
                    revision += u64::from(adjusted);
                    sh.metrics.plugin_adjustments(&p.name, op, 0, nu, ne);
                }
                Err(e) => {
                    let f = sh.merge_failure(p, op, e);
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        sh.validate(&plugins, pod, &result, &mut errors, self.budget)
            .await?;
        let owners = result.owners().to_wire();
        for (plugin, n) in audit_owners(op, &owners) {
            sh.metrics.plugin_adjustments(&plugin, op, n, 0, 0);
        }
        let resp = result.into_response();
        guard.set_outcome(true);
        sh.peers.known.created(&container.id);
        Ok(CreateContainerOutcome {
            adjustment: resp.adjust.unwrap_or_default(),
            updates: resp.update,
            evictions: resp.evict,
            owners,
            errors,
            guard,
        })
    }

    /// PostCreateContainer (teardown-class: never fails).
    pub async fn post_create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<EventReport, Error> {
        self.notify_event(Event::PostCreateContainer, pod, Some(container))
            .await
    }

    /// StartContainer (policy applies).
    pub async fn start_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<EventReport, Error> {
        self.notify_event(Event::StartContainer, pod, Some(container))
            .await
    }

    /// PostStartContainer (teardown-class: never fails).
    pub async fn post_start_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<EventReport, Error> {
        self.notify_event(Event::PostStartContainer, pod, Some(container))
            .await
    }

    /// UpdateContainer: updates (the target's last) and evictions.
    pub async fn update_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
        resources: Option<LinuxResources>,
    ) -> Result<UpdateContainerOutcome, Error> {
        self.check_started()?;
        let ev = Event::UpdateContainer;
        let op = ev.pretty_name();
        let sh = &self.shared;
        let plugins = sh
            .registry
            .begin_update(ev, pod, Some(container), resources.as_ref(), None);
        let mut result = UpdateResult::new(pod.clone(), container.clone(), resources);
        let mut errors = Vec::new();
        for p in in_turn(&plugins, ev) {
            let req = bytes::Bytes::from(prost::Message::encode_to_vec(&result.request()));
            let r: Result<UpdateContainerResponse, _> =
                match self.budget.time_for(p, &*sh.metrics, op) {
                    Ok(t) => {
                        p.call_encoded(&*sh.metrics, op, method::UPDATE_CONTAINER, req, t)
                            .await
                    }
                    Err(f) => Err(f),
                };
            let resp = match r {
                Ok(resp) => resp,
                Err(f) => {
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                    continue;
                }
            };
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            match result.apply_response(&p.id, resp) {
                Ok(()) => sh.metrics.plugin_adjustments(&p.name, op, 0, nu, ne),
                Err(e) => {
                    let f = sh.merge_failure(p, op, e);
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        let owners = result.owners().to_wire();
        sh.validate_merged_updates(op, result.updates(), &owners)?;
        audit_owners(op, &owners);
        let resp = result.into_response();
        Ok(UpdateContainerOutcome {
            updates: resp.update,
            evictions: resp.evict,
            errors,
        })
    }

    /// PostUpdateContainer (teardown-class: never fails).
    pub async fn post_update_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<EventReport, Error> {
        self.notify_event(Event::PostUpdateContainer, pod, Some(container))
            .await
    }

    /// StopContainer (teardown: every subscribed plugin, never fails);
    /// returns the plugins' updates of other containers.
    pub async fn stop_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<StopContainerOutcome, Error> {
        let ev = Event::StopContainer;
        if let Err(e) = self.check_started() {
            // As every teardown call: never an error, whatever the state.
            tracing::debug!(event = ev.pretty_name(), error = %e, "teardown event ignored");
            return Ok(StopContainerOutcome {
                updates: Vec::new(),
                errors: Vec::new(),
            });
        }
        let op = ev.pretty_name();
        let sh = &self.shared;
        let plugins = sh.registry.begin_event(ev, pod, Some(container));
        // The request does not depend on other plugins' answers: send it to
        // every plugin at once, then merge the answers in plugin order.
        let req = crate::encode::pod_container_request(pod, Some(container));
        let targets: Vec<&Arc<Plugin>> = plugins.iter().filter(|p| p.subscribed(ev)).collect();
        let budget = self.budget;
        let answers = join_all(targets.iter().map(|p| {
            let req = req.clone();
            async move {
                let t = budget.time_for(p, &*sh.metrics, op)?;
                p.call_encoded::<StopContainerResponse>(
                    &*sh.metrics,
                    op,
                    method::STOP_CONTAINER,
                    req,
                    t,
                )
                .await
            }
        }))
        .await;
        let mut result = StopResult::new();
        let mut errors = Vec::new();
        for (p, r) in targets.into_iter().zip(answers) {
            match r {
                Ok(resp) => {
                    let nu = resp.update.len();
                    match result.apply_response(&p.id, resp) {
                        Ok(()) => sh.metrics.plugin_adjustments(&p.name, op, 0, nu, 0),
                        Err(e) => {
                            let f = sh.merge_failure(p, op, e);
                            sh.on_failure(p, ev, f, pod, &mut errors)?;
                        }
                    }
                }
                Err(f) => sh.on_failure(p, ev, f, pod, &mut errors)?,
            }
        }
        let owners = result.owners().to_wire();
        // Teardown never fails: rejected updates are dropped and reported.
        let updates = match sh.validate_merged_updates(op, result.updates(), &owners) {
            Ok(()) => {
                audit_owners(op, &owners);
                result.into_response().update
            }
            Err(Error::ValidationRejected { plugin, reason }) => {
                let failure = PluginFailure::Rejected { reason };
                errors.push(PluginError::new(plugin, ev, failure));
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        Ok(StopContainerOutcome { updates, errors })
    }

    /// RemoveContainer (teardown).
    pub async fn remove_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<EventReport, Error> {
        self.shared.peers.known.removed(&container.id);
        self.notify_event(Event::RemoveContainer, pod, Some(container))
            .await
    }

    /// ValidateContainerAdjustment sent by a runtime above this one (a
    /// proxy's case: the adjustment of every plugin of that runtime):
    /// runs the in-process validators and the validator plugins on `req`
    /// as given, with the same fail-closed rules as the validation of this
    /// library's own CreateContainer. `Ok` when no validator rejected it.
    ///
    /// # Errors
    ///
    /// [`Error::ValidationRejected`] naming the validator, a
    /// validator that failed closed ([`Error::PluginFailed`]), or
    /// [`Error::InvalidState`] before [`Adaptation::start`].
    pub async fn validate_container_adjustment(
        &self,
        req: &ValidateContainerAdjustmentRequest,
    ) -> Result<EventReport, Error> {
        self.check_started()?;
        let sh = &self.shared;
        let plugins = sh.registry.snapshot();
        let no_pod = PodSandbox::default();
        let pod = req.pod.as_ref().unwrap_or(&no_pod);
        let mut errors = Vec::new();
        sh.run_validators(&plugins, pod, req, &mut errors, self.budget)
            .await?;
        Ok(EventReport { errors })
    }

    async fn notify_event(
        &self,
        ev: Event,
        pod: &PodSandbox,
        container: Option<&Container>,
    ) -> Result<EventReport, Error> {
        if is_teardown_event(ev) {
            // Teardown is delivered even when not started yet is an API misuse;
            // report it but never fail a teardown.
            if let Err(e) = self.check_started() {
                tracing::debug!(event = ev.pretty_name(), error = %e, "teardown event ignored");
                return Ok(EventReport::default());
            }
        } else {
            self.check_started()?;
        }
        let sh = &self.shared;
        let plugins = sh.registry.begin_event(ev, pod, container);
        let n = Notification::new(ev, pod, container);
        let mut errors = Vec::new();
        if is_teardown_event(ev) {
            // Teardown reaches every plugin whatever the others answer, so
            // nothing orders the calls: deliver to all at once, report the
            // failures in plugin order.
            let targets: Vec<&Arc<Plugin>> = plugins.iter().filter(|p| p.subscribed(ev)).collect();
            let answers = join_all(
                targets
                    .iter()
                    .map(|p| p.notify_prepared(&*sh.metrics, &n, self.budget)),
            )
            .await;
            for (p, r) in targets.into_iter().zip(answers) {
                if let Err(f) = r {
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        } else {
            for p in in_turn(&plugins, ev) {
                if let Err(f) = p.notify_prepared(&*sh.metrics, &n, self.budget).await {
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        Ok(EventReport { errors })
    }
}

/// Runs the futures concurrently on the calling task; their outputs in input
/// order. One future is simply awaited.
async fn join_all<F: Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    if futs.len() <= 1 {
        let mut out = Vec::with_capacity(futs.len());
        if let Some(f) = futs.pop() {
            out.push(f.await);
        }
        return out;
    }
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

impl Shared {
    /// The failure policy of a connected plugin for `event`: the
    /// operator's entry for the plugin (its override for the event, else
    /// its policy), else the policy the plugin declared (`fail_request`:
    /// `required` without the absence check, else `fail`), else the
    /// default policy.
    pub(crate) fn policy_of(&self, p: &Plugin, event: Event) -> FailurePolicy {
        let cfg = &self.config;
        if let Some(f) = cfg
            .plugin_entry(&p.id)
            .and_then(|e| e.configured_for(event))
        {
            return f;
        }
        match &p.declared {
            Some(d) if d.fail_request => FailurePolicy::Required,
            Some(_) => FailurePolicy::Fail,
            None => cfg.default_policy.for_event(event),
        }
    }

    /// The strike limit of a plugin: its entry's, else never (0) if it
    /// declared `keep_connected`, else the default policy's, else the
    /// runtime's.
    pub(crate) fn strike_limit_for(
        &self,
        id: &PluginId,
        declared: Option<&nri_api::api::FailurePolicy>,
    ) -> u32 {
        let cfg = &self.config;
        let keep_connected = declared.is_some_and(|d| d.keep_connected);
        cfg.plugin_entry(id)
            .and_then(|e| e.strike_limit)
            .or(keep_connected.then_some(0))
            .or(cfg.default_policy.strike_limit)
            .unwrap_or(cfg.strike_limit)
    }

    /// Applies the failure policy to one plugin's failure of one event
    /// about `pod`.
    fn on_failure(
        &self,
        p: &Plugin,
        event: Event,
        failure: PluginFailure,
        pod: &PodSandbox,
        errors: &mut Vec<PluginError>,
    ) -> Result<(), Error> {
        let plugin = p.name.clone();
        let ev = event.pretty_name();
        let class = failure.class();
        let unavailable = class.is_unavailable();
        if is_teardown_event(event) {
            tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin failed a teardown event (reported, not fatal)");
            errors.push(PluginError::new(plugin, event, failure));
            return Ok(());
        }
        let policy = self.policy_of(p, event);
        if unavailable && policy != FailurePolicy::Ignore && self.config.is_exempt(&pod.namespace) {
            tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, namespace = %pod.namespace, "NRI plugin unavailable; not failing a request of an exempt namespace");
            errors.push(PluginError::new(plugin, event, failure));
            return Ok(());
        }
        match policy {
            FailurePolicy::Ignore => {
                tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin failed; ignored per failure policy");
                errors.push(PluginError::new(plugin, event, failure));
                Ok(())
            }
            FailurePolicy::Fail if unavailable => {
                // `fail` is about the plugin's answers; an unavailable plugin
                // (timed out or gone) only fails requests under `required`.
                tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin unavailable; skipped (policy fail; use required to fail the request)");
                errors.push(PluginError::new(plugin, event, failure));
                Ok(())
            }
            FailurePolicy::Fail | FailurePolicy::Required => {
                tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin failed; failing the request");
                Err(Error::PluginFailed {
                    plugin,
                    event: ev.to_owned(),
                    cause: failure,
                })
            }
        }
    }

    fn merge_failure(&self, p: &Plugin, op: &str, e: nri_merge::Error) -> PluginFailure {
        let name = p.name.as_str();
        match e {
            nri_merge::Error::Conflict { .. } => {
                self.metrics.plugin_conflict(name, op);
                self.metrics
                    .plugin_invocation(name, op, Err(ErrorClass::Conflict));
                PluginFailure::Conflict {
                    message: e.to_string(),
                }
            }
            other => {
                self.metrics
                    .plugin_invocation(name, op, Err(ErrorClass::InvalidResponse));
                PluginFailure::InvalidResponse {
                    message: other.to_string(),
                }
            }
        }
    }

    /// Fails when a plugin with policy `required` for `event` is not active
    /// (never for a pod of an exempt namespace).
    fn check_required(
        &self,
        event: Event,
        plugins: &PluginList,
        pod: &PodSandbox,
    ) -> Result<(), Error> {
        let Some(name) = self.missing_required(event, plugins) else {
            return Ok(());
        };
        if self.config.is_exempt(&pod.namespace) {
            tracing::info!(plugin = name, event = event.pretty_name(), namespace = %pod.namespace, "required NRI plugin is not connected; going on for a pod of an exempt namespace");
            return Ok(());
        }
        self.metrics
            .plugin_invocation(name, event.pretty_name(), Err(ErrorClass::RequiredMissing));
        tracing::warn!(
            plugin = name,
            event = event.pretty_name(),
            "required NRI plugin is not connected; failing the request"
        );
        Err(Error::RequiredPluginMissing {
            plugin: name.to_owned(),
            event: event.pretty_name().to_owned(),
        })
    }

    /// The first configured name with policy `required` for `event` that no
    /// active plugin of `plugins` answers to.
    fn missing_required<'a>(&'a self, event: Event, plugins: &PluginList) -> Option<&'a str> {
        self.config.required_plugins(event).find(|name| {
            !plugins
                .iter()
                .any(|p| !p.is_closed() && (p.id.to_string() == *name || p.id.name() == *name))
        })
    }

    /// During the start-up grace ([`Config::startup_grace`]), waits until
    /// every `required` plugin that has never registered since start has
    /// registered, or the grace is over. Pods of exempt namespaces do not
    /// wait.
    async fn await_required(&self, event: Event, pod: &PodSandbox) {
        let grace = self.config.startup_grace;
        if grace.is_zero() || self.config.is_exempt(&pod.namespace) {
            return;
        }
        let Some(started) = *lock(&self.started_at) else {
            return;
        };
        let deadline = started + grace;
        let mut changes = self.registry.watch_activations();
        loop {
            let waiting = {
                let plugins = self.registry.snapshot();
                self.config.required_plugins(event).any(|name| {
                    !self.registry.has_seen(name)
                        && !plugins.iter().any(|p| {
                            !p.is_closed() && (p.id.to_string() == name || p.id.name() == name)
                        })
                })
            };
            if !waiting || tokio::time::Instant::now() >= deadline {
                return;
            }
            tracing::debug!(
                event = event.pretty_name(),
                "waiting for required NRI plugins to register (start-up grace)"
            );
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
                () = self.stopping.cancelled() => return,
            }
        }
    }

    /// Runs in-process validators and validator plugins on the merged result.
    async fn validate(
        &self,
        plugins: &PluginList,
        pod: &PodSandbox,
        result: &CreateResult<&PodSandbox, &Container>,
        errors: &mut Vec<PluginError>,
        budget: Budget,
    ) -> Result<(), Error> {
        let ev = Event::ValidateContainerAdjustment;
        if self.validators.is_empty() && !plugins.iter().any(|p| p.subscribed(ev) && !p.is_closed())
        {
            return Ok(());
        }
        let req = validate::build_request(result);
        self.run_validators(plugins, pod, &req, errors, budget)
            .await
    }

    /// Runs in-process validators and validator plugins on `req`.
    async fn run_validators(
        &self,
        plugins: &PluginList,
        pod: &PodSandbox,
        req: &ValidateContainerAdjustmentRequest,
        errors: &mut Vec<PluginError>,
        budget: Budget,
    ) -> Result<(), Error> {
        let ev = Event::ValidateContainerAdjustment;
        let op = ev.pretty_name();
        // A validator already gone is absent: not called, and whether the
        // creation may go on without it was decided by the required-plugin
        // check.
        let vplugins: Vec<_> = plugins
            .iter()
            .filter(|p| p.subscribed(ev) && !p.is_closed())
            .cloned()
            .collect();
        for (id, v) in &self.validators {
            if let Err(rej) = v.validate(req) {
                self.metrics
                    .plugin_invocation(&id.to_string(), op, Err(ErrorClass::Rejected));
                tracing::warn!(validator = %id, reason = %rej.reason, "container adjustment rejected");
                return Err(rej.into_error(id).into());
            }
            self.metrics.plugin_invocation(&id.to_string(), op, Ok(()));
        }
        let mut set = JoinSet::new();
        for (i, p) in vplugins.into_iter().enumerate() {
            let req = req.clone();
            let metrics = self.metrics.clone();
            set.spawn(async move {
                let r: Result<ValidateContainerAdjustmentResponse, _> =
                    match budget.time_for(&p, &*metrics, op) {
                        Ok(t) => {
                            p.call(
                                &*metrics,
                                op,
                                method::VALIDATE_CONTAINER_ADJUSTMENT,
                                &req,
                                t,
                            )
                            .await
                        }
                        Err(f) => Err(f),
                    };
                (i, p, r)
            });
        }
        let mut answers = Vec::new();
        while let Some(j) = set.join_next().await {
            match j {
                Ok(a) => answers.push(a),
                Err(e) => tracing::error!(error = %e, "validator task failed"),
            }
        }
        answers.sort_by_key(|(i, _, _)| *i);
        for (_, p, r) in answers {
            match r {
                Ok(resp) => {
                    if let Err(e) = validate::check_response(&p.id, &resp) {
                        tracing::warn!(validator = %p.id, error = %e, "container adjustment rejected");
                        return Err(e.into());
                    }
                }
                Err(f) => self.validator_failed(&p, f, pod, errors)?,
            }
        }
        Ok(())
    }

    /// A validator failed instead of answering: the creation fails (fail
    /// closed), whatever its failure policy, unless the plugin's entry says
    /// `validation: fail-open` or the pod's namespace is exempt.
    fn validator_failed(
        &self,
        p: &Plugin,
        failure: PluginFailure,
        pod: &PodSandbox,
        errors: &mut Vec<PluginError>,
    ) -> Result<(), Error> {
        let ev = Event::ValidateContainerAdjustment;
        let mode = self
            .config
            .plugin_entry(&p.id)
            .and_then(|e| e.validation)
            .unwrap_or_default();
        let class = failure.class();
        if mode == ValidationMode::FailOpen {
            tracing::warn!(validator = %p.id, error = %failure, class = %class, "NRI validator failed; going on (validation: fail-open)");
        } else if self.config.is_exempt(&pod.namespace) {
            tracing::warn!(validator = %p.id, error = %failure, class = %class, namespace = %pod.namespace, "NRI validator failed; going on for a pod of an exempt namespace");
        } else {
            tracing::warn!(validator = %p.id, error = %failure, class = %class, "NRI validator failed; failing the container creation (fail closed)");
            return Err(Error::PluginFailed {
                plugin: p.name.clone(),
                event: ev.pretty_name().to_owned(),
                cause: failure,
            });
        }
        errors.push(PluginError::new(p.name.clone(), ev, failure));
        Ok(())
    }

    async fn accept_loop(self: Arc<Self>, listener: tokio::net::UnixListener) {
        loop {
            let accepted = tokio::select! {
                () = self.stopping.cancelled() => return,
                a = listener.accept() => a,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting NRI connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let creds = match nri_mux::peer_credentials(&stream) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read NRI peer credentials; rejecting connection");
                    continue;
                }
            };
            let cfg = &self.config;
            let origin = PluginOrigin::External {
                uid: creds.uid,
                gid: creds.gid,
                pid: creds.pid,
            };
            let peer = format!("uid={} pid={:?}", creds.uid, creds.pid);
            if !crate::listener::peer_allowed(
                creds.uid,
                creds.gid,
                &cfg.allowed_uids,
                &cfg.allowed_gids,
            ) {
                let reason = format!(
                    "connection from uid {} (gid {}): not in the allowed peer list",
                    creds.uid, creds.gid
                );
                self.peers.refuse_unregistered(
                    &peer,
                    origin,
                    "connection",
                    "peer_not_allowed",
                    reason,
                );
                continue;
            }
            let Some(slot) = self.peers.pending_slot() else {
                // Dropping the stream closes it.
                self.peers.refuse_connection(
                    &peer,
                    origin,
                    self.config.peer_limits.max_pending_connections,
                );
                continue;
            };
            let pending = Pending {
                origin,
                launched_id: None,
                config: String::new(),
                child: None,
                peer,
                pending_slot: Some(slot),
            };
            let shared = self.clone();
            self.spawn(async move { shared.run_connection(stream, pending).await });
        }
    }

    /// Waits until a launched plugin's connection closes, then forgets it.
    async fn supervise(self: Arc<Self>, plugin: Arc<Plugin>) {
        plugin.wait_closed().await;
        self.registry.remove(&plugin);
        plugin.close("connection closed");
        if !self.stopping.is_cancelled() {
            tracing::warn!(plugin = %plugin.id, "NRI plugin disconnected");
        }
        crate::connect::reap(&plugin).await;
    }
}
