//! The embeddable runtime side of NRI: [`Adaptation`].
//!
//! This file holds the type, its builder and its life (start, stop); the
//! rest is one file per concern: `events.rs` and `create.rs` fan the
//! lifecycle events out, `policy.rs` is the failure policy, `validate.rs`
//! the validation of a merged creation, `accept.rs` the accept loop and
//! supervision, `outcome.rs` what each event returns. Connection set-up is
//! `connect.rs` of the crate.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Builder, Config, DEFAULT_VALIDATOR_NAME, RuntimeCallbacks};
use crate::connect::Pending;
use crate::error::Error;
use crate::lock;
use crate::metrics::Metrics;
use crate::plugin::{Budget, PluginInfo, PluginOrigin};
use crate::registry::Registry;
use nri_merge::PluginId;
use nri_merge::validate::{DefaultValidator, Validator};

mod accept;
mod callbacks;
mod create;
mod events;
mod outcome;
mod policy;
mod validate;

pub use outcome::{
    CreateContainerOutcome, EventReport, RunPodSandboxOutcome, StopContainerOutcome,
    UpdateContainerOutcome,
};

/// How long `stop` waits for its background tasks to end by themselves
/// before it aborts them.
const TASKS_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// What each plugin may do (see `grants/`).
    pub(crate) grants: crate::grants::Grants,
    validators: Vec<(PluginId, Arc<dyn Validator>)>,
    tasks: Mutex<JoinSet<()>>,
    pub(crate) stopping: CancellationToken,
    life: Mutex<Life>,
    /// Held by `start` while it runs and by `stop`: `stop` returns only
    /// once a `start` it raced has returned.
    lifecycle: tokio::sync::Mutex<()>,
    socket_installed: Mutex<bool>,
    /// When `start` was called (the start-up grace counts from there).
    started_at: Mutex<Option<tokio::time::Instant>>,
    /// What plugins are told the runtime does (`Config::capabilities`,
    /// or what `Adaptation::declare` set since).
    pub(crate) declared: Mutex<nri_api::RuntimeCapabilities>,
    /// The number of the last connection (plugin instance).
    instances: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// The number of a new connection (its plugin's instance).
    pub(crate) fn next_instance(&self) -> u64 {
        self.instances
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Forgets a plugin instance that closed or failed; if it was taking
    /// over from an older instance and failed first, the older one is
    /// active again and gets what happened meanwhile (see
    /// `registry/handover.rs`).
    pub(crate) fn forget(self: &Arc<Self>, plugin: &Arc<crate::plugin::Plugin>) {
        if let Some(back) = self.registry.remove(plugin) {
            let shared = self.clone();
            self.spawn(async move { shared.deliver_handed_back(back).await });
        }
    }

    /// The in-process validators, in order.
    pub(crate) fn validators(&self) -> &[(PluginId, Arc<dyn Validator>)] {
        &self.validators
    }

    /// Spawns an owned background task (aborted by `stop`). Once the
    /// runtime is stopping, the task is dropped instead: `stop` has taken
    /// (or is about to take) the tasks it shuts down, and nothing may run
    /// after it.
    pub(crate) fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        let mut tasks = lock(&self.tasks);
        if self.stopping.is_cancelled() {
            return;
        }
        while tasks.try_join_next().is_some() {}
        tasks.spawn(fut);
    }

    /// Runs `fut` (the set-up of a WebAssembly plugin) unless the runtime
    /// starts stopping first: then it is dropped and the result is
    /// [`Error::Stopping`].
    async fn unless_stopping<T>(
        &self,
        fut: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::select! {
            r = fut => r,
            () = self.stopping.cancelled() => Err(Error::Stopping),
        }
    }
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
    /// Events through this handle are about objects the runtime already
    /// has (see [`Adaptation::committed`]).
    committed: bool,
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
        let registry = Arc::new(Registry::new(
            self.metrics.clone(),
            self.config.peer_limits.max_sync_backlog,
        ));
        let peers = Arc::new(crate::peer::PeerGuard::new(
            self.config.peer_limits.clone(),
            self.metrics.clone(),
        ));
        let declared = self.config.capabilities;
        let grants = crate::grants::Grants::new(self.config.grants.as_deref());
        Ok(Adaptation {
            shared: Arc::new(Shared {
                grants,
                config: self.config,
                callbacks,
                metrics: self.metrics,
                registry,
                peers,
                validators,
                tasks: Mutex::new(JoinSet::new()),
                stopping: CancellationToken::new(),
                life: Mutex::new(Life::New),
                lifecycle: tokio::sync::Mutex::new(()),
                socket_installed: Mutex::new(false),
                started_at: Mutex::new(None),
                declared: Mutex::new(declared),
                instances: std::sync::atomic::AtomicU64::new(0),
            }),
            budget: Budget::default(),
            committed: false,
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
    /// is not called ([`PluginFailure::NotCalled`](crate::PluginFailure::NotCalled), no strike), which fails
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
            committed: self.committed,
        }
    }

    /// A handle to the same adaptation for events about objects the
    /// runtime already has: a creation it committed before the plugins
    /// could be told (an event answered without them), or an object found
    /// in a listing (a runtime that reconnects to a plugin-side such as
    /// `nri-proxy`'s and replays what changed meanwhile). There is nothing
    /// left to refuse, so nothing through this handle fails because of a
    /// plugin: a `required` plugin that is absent does not fail a
    /// creation (and the start-up grace does not wait for it), a plugin's
    /// failure or a merge conflict is reported in the outcome's `errors`
    /// and the event goes on to the next plugin (every plugin subscribed
    /// to it is called, as for teardown), and a creation is not
    /// validated. A successful creation reaches the plugins that are
    /// synchronizing meanwhile too, as any creation does. The answers
    /// (adjustments, updates) are the caller's to drop: the object exists
    /// already. Keeps the deadline of [`with_deadline`](Self::with_deadline).
    ///
    /// ```no_run
    /// # async fn f(nri: nri_runtime::Adaptation, pod: nri_api::api::PodSandbox) -> Result<(), nri_runtime::Error> {
    /// // The runtime found `pod` running: tell the plugins, whoever is absent.
    /// let run = nri.committed().run_pod_sandbox(&pod).await?;
    /// drop(run.guard);
    /// # Ok(()) }
    /// ```
    pub fn committed(&self) -> Adaptation {
        Adaptation {
            shared: self.shared.clone(),
            budget: self.budget,
            committed: true,
        }
    }

    /// Whether events through this handle are about objects the runtime
    /// already has ([`committed`](Self::committed)).
    pub fn is_committed(&self) -> bool {
        self.committed
    }

    /// The deadline set with [`with_deadline`](Self::with_deadline), if any.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.budget.0
    }

    /// Changes what plugins are told the runtime does
    /// ([`Config::capabilities`]) for the plugins configured from now on;
    /// those already configured keep what they were told. For a runtime
    /// that learns its capabilities late (`nri-proxy` speaking for the
    /// runtime it registered with).
    pub fn declare(&self, capabilities: nri_api::RuntimeCapabilities) {
        *lock(&self.shared.declared) = capabilities;
    }

    /// What plugins are told the runtime does.
    pub fn declared(&self) -> nri_api::RuntimeCapabilities {
        *lock(&self.shared.declared)
    }

    /// The plugins, in call order (index, then name, then instance): the
    /// active ones ([`InstanceState::Active`](crate::InstanceState::Active):
    /// synchronized, with the events that happened during their
    /// synchronization delivered), and, during and after an upgrade, the
    /// older instances a newer one took over from, while they are
    /// connected ([`InstanceState::Superseded`](crate::InstanceState::Superseded);
    /// see `docs/runtime/upgrades.md`).
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.shared.registry.instances()
    }

    /// Launches the plugins of the plugin directory (each registered,
    /// configured and synchronized before this returns; failures are logged
    /// and the plugin skipped), then listens for external plugins.
    ///
    /// A [`stop`](Self::stop) during `start` ends the plugins' set-ups
    /// (their connections closed, launched processes killed) and `start`
    /// returns [`Error::Stopping`] without listening; `stop` returns once
    /// `start` has.
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
        let _running = self.shared.lifecycle.lock().await;
        let cfg = &self.shared.config;
        if !cfg.disable_launch && !self.shared.stopping.is_cancelled() {
            self.launch_plugins().await?;
        }
        if self.shared.stopping.is_cancelled() {
            return Err(Error::Stopping);
        }
        if !cfg.disable_connections {
            self.listen()?;
        }
        Ok(())
    }

    /// Launches the plugins of the plugin directory and waits until each is
    /// active or has failed (or the runtime stops).
    async fn launch_plugins(&self) -> Result<(), Error> {
        let cfg = &self.shared.config;
        let found = crate::launch::discover(&cfg.plugin_dir, &cfg.config_dir)?;
        let mut starting = JoinSet::new();
        for d in found {
            let name = d.id.to_string();
            let shared = self.shared.clone();
            if d.wasm {
                starting.spawn(async move {
                    let set_up = shared.clone().start_wasm(d);
                    (name, shared.unless_stopping(set_up).await)
                });
                continue;
            }
            let (mut child, stream) = match crate::launch::spawn(&d) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(plugin = %d.id, error = %e, "cannot launch NRI plugin");
                    continue;
                }
            };
            crate::output::forward_child(&self.shared, &name, &mut child);
            let pending = Pending {
                captured: crate::identity::Captured::launched(&d.path, child.id()),
                origin: PluginOrigin::Launched { pid: child.id() },
                launched_id: Some(d.id.clone()),
                config: d.config.clone(),
                child: Some(child),
                peer: format!("launched:{name}"),
                pending_slot: None,
            };
            // The set-up ends by itself when the runtime stops.
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
        Ok(())
    }

    /// Installs the socket and accepts external plugins on it, unless the
    /// runtime is stopping (then the socket is removed again).
    fn listen(&self) -> Result<(), Error> {
        let path = &self.shared.config.socket_path;
        let listener = crate::listener::bind(path)?;
        {
            // `stop` removes the socket if it finds it installed, after
            // marking the runtime stopped: one of the two removes it.
            let life = lock(&self.shared.life);
            if *life == Life::Stopped {
                drop(listener);
                let _ = std::fs::remove_file(path);
                return Err(Error::Stopping);
            }
            *lock(&self.shared.socket_installed) = true;
        }
        tracing::info!(path = %path.display(), "NRI listening for external plugins");
        let shared = self.shared.clone();
        self.shared
            .spawn(async move { shared.accept_loop(listener).await });
        Ok(())
    }

    /// Sends `Shutdown` to every plugin (each with its request timeout, all
    /// at once; a WebAssembly plugin inside a call is closed instead, which
    /// ends that call), closes the connections, stops launched plugins
    /// (SIGTERM, grace, SIGKILL), stops background tasks and removes the
    /// socket.
    ///
    /// A plugin being set up when `stop` is called (registering,
    /// configuring) has its connection closed; one synchronizing gets
    /// `Shutdown` too; none becomes active afterwards. A `start` running
    /// when `stop` is called ends first (see [`start`](Self::start)).
    pub async fn stop(&self) {
        *lock(&self.shared.life) = Life::Stopped;
        self.shared.stopping.cancel();
        let _running = self.shared.lifecycle.lock().await;
        let plugins = self.shared.registry.clear();
        let mut set = JoinSet::new();
        for p in plugins {
            let metrics = self.shared.metrics.clone();
            let grace = self.shared.config.stop_grace;
            let child = lock(&p.child).take();
            set.spawn(async move {
                if !p.is_closed() {
                    if let Err(e) = p.shutdown(&*metrics, p.timeout).await {
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
        // Every task ends by itself now (connections closed, set-ups told
        // to stop, the accept loop cancelled); one that does not within
        // the grace is aborted.
        let mut tasks = std::mem::take(&mut *lock(&self.shared.tasks));
        let ended = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(TASKS_GRACE, ended).await.is_err() {
            tracing::debug!(
                left = tasks.len(),
                "aborting NRI tasks still running at stop"
            );
        }
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
}
