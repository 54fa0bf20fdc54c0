//! Runtime configuration, the builder, and the runtime callbacks.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use nri_api::api::{Container, ContainerEviction, ContainerUpdate, Event, PodSandbox};
use nri_api::{Capability, CapabilitySet, EventMask, RuntimeCapabilities};

use crate::failure::{FailurePolicy, PluginPolicy};
use crate::grants::Grant;
use crate::metrics::{Metrics, NoopMetrics};
use crate::peer::PeerLimits;
use crate::wasm::WasmLimits;
use nri_merge::PluginId;
use nri_merge::validate::{DefaultValidatorConfig, Validator};

/// A boxed, sendable future (used by [`RuntimeCallbacks`]).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Pods and containers listed by [`RuntimeCallbacks::list_pods_and_containers`].
///
/// The lists are shared: a runtime that keeps its NRI view of pods and
/// containers in `Arc`s hands it over without a deep copy (the library only
/// reads it, to encode the Synchronize messages). Owned vectors convert
/// with [`Snapshot::new`] or `Snapshot::from((pods, containers))`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every pod.
    pub pods: Arc<Vec<PodSandbox>>,
    /// Every container.
    pub containers: Arc<Vec<Container>>,
}

impl Snapshot {
    /// A snapshot of owned lists.
    pub fn new(pods: Vec<PodSandbox>, containers: Vec<Container>) -> Self {
        Self {
            pods: Arc::new(pods),
            containers: Arc::new(containers),
        }
    }

    /// A snapshot of shared lists (no copy).
    pub fn shared(pods: Arc<Vec<PodSandbox>>, containers: Arc<Vec<Container>>) -> Self {
        Self { pods, containers }
    }
}

impl From<(Vec<PodSandbox>, Vec<Container>)> for Snapshot {
    fn from((pods, containers): (Vec<PodSandbox>, Vec<Container>)) -> Self {
        Self::new(pods, containers)
    }
}

/// Error type of the runtime callbacks.
pub type CallbackError = Box<dyn std::error::Error + Send + Sync>;

/// Default number of consecutive request timeouts after which a plugin is
/// disconnected.
pub const DEFAULT_STRIKE_LIMIT: u32 = 3;

/// Default grace between SIGTERM and SIGKILL for launched plugins on stop.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(2);

/// Default [`Config::spin_budget`]: a little more than a plugin that was
/// asleep takes to answer a small request here (its wake-up included), so
/// the runtime sees the answer without a wake-up of its own.
pub(crate) const DEFAULT_SPIN_BUDGET: Duration = Duration::from_micros(100);

/// Default [`Config::exempt_namespaces`].
pub const DEFAULT_EXEMPT_NAMESPACES: &[&str] = &["kube-system"];

/// `PATH` given to launched plugins.
pub const LAUNCHED_PLUGIN_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Name under which the built-in default validator is listed (index `00`,
/// as upstream).
pub const DEFAULT_VALIDATOR_NAME: &str = "default-validator";

/// What the runtime provides to the library.
///
/// All methods may be called concurrently, from any task. Each call has a
/// deadline, the request timeout of the plugin on whose behalf it is made:
/// a listing that has not returned by then fails that plugin's
/// registration, an update or eviction fails that plugin's request (or is
/// logged, for updates a plugin answered); the future is dropped then.
///
/// A container the runtime gives up on after `create_container` (it does
/// not store it) should get `remove_container`, as containerd does: the
/// plugins saw it created. The containers the library counts as known
/// (see `PeerLimits::extra_updates`) are also reconciled with every
/// listing, which forgets one the runtime no longer has.
pub trait RuntimeCallbacks: Send + Sync + 'static {
    /// Every pod and container the runtime knows, for a plugin's
    /// `Synchronize`.
    ///
    /// Contract (see `docs/runtime/sync.md`): an object must not be listed
    /// before its creation event (`run_pod_sandbox` / `create_container`)
    /// has been called, and must be listed once the creation guard returned
    /// by that event has been released (after the runtime stored it).
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>>;

    /// Applies container updates a plugin asked for outside of an event
    /// (its `Synchronize` answer, or an unsolicited `UpdateContainers`);
    /// returns the updates that failed.
    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>>;

    /// Evicts (stops) containers a plugin asked to evict in an unsolicited
    /// `UpdateContainers`. The default does nothing but log.
    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            for e in evictions {
                tracing::warn!(container = %e.container_id, reason = %e.reason, "eviction requested but the runtime has no evict callback");
            }
            Ok(())
        })
    }
}

/// The configuration of an [`Adaptation`](crate::Adaptation).
///
/// Build it with [`Adaptation::builder`](crate::Adaptation::builder); the
/// struct is `#[non_exhaustive]` so new settings can be added.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Runtime name sent in `Configure` (e.g. `containerd`).
    pub runtime_name: String,
    /// Runtime version sent in `Configure`.
    pub runtime_version: String,
    /// Socket for external plugins (default `/var/run/nri/nri.sock`).
    pub socket_path: PathBuf,
    /// Directory of plugins to launch (default `/opt/nri/plugins`).
    pub plugin_dir: PathBuf,
    /// Directory of launched plugins' configuration (default `/etc/nri/conf.d`).
    pub config_dir: PathBuf,
    /// Time a plugin has to register (default 5 s).
    pub registration_timeout: Duration,
    /// Time a plugin has to answer one request (default 2 s).
    pub request_timeout: Duration,
    /// Do not listen for external plugins.
    pub disable_connections: bool,
    /// Do not launch plugins from the plugin directory.
    pub disable_launch: bool,
    /// Per-plugin policies keyed by `name` or `NN-name`.
    pub plugin_policies: BTreeMap<String, PluginPolicy>,
    /// Policy for plugins without an entry, and for the settings an entry
    /// leaves unset (default: `fail`, per event).
    pub default_policy: PluginPolicy,
    /// Consecutive timeouts after which a plugin is disconnected (default 3;
    /// 0 means never).
    pub strike_limit: u32,
    /// Namespaces whose pods are never refused because a plugin is
    /// unavailable: a `required` plugin that is absent, a plugin that times
    /// out or loses its connection, a validator that fails instead of
    /// answering (default [`DEFAULT_EXEMPT_NAMESPACES`]: `kube-system`,
    /// where plugins and validators usually run; refusing their own pods
    /// could keep them from ever starting). A plugin's error answer, a
    /// conflict and a validator's rejection still fail requests there.
    pub exempt_namespaces: Vec<String>,
    /// How long after [`Adaptation::start`](crate::Adaptation::start) a
    /// request that needs a `required` plugin which has not registered yet
    /// waits for it, instead of failing at once (default zero: no wait).
    /// Once the plugin has registered, its absence fails requests at once.
    pub startup_grace: Duration,
    /// If non-empty (or `allowed_gids` is), only peers with one of these
    /// uids (or gids) may connect to the socket.
    pub allowed_uids: Vec<u32>,
    /// See `allowed_uids`.
    pub allowed_gids: Vec<u32>,
    /// Grace between SIGTERM and SIGKILL for launched plugins on stop.
    pub stop_grace: Duration,
    /// The built-in default validator, if enabled.
    pub default_validator: Option<DefaultValidatorConfig>,
    /// How long a plugin connection's reader may poll for the answer after
    /// a request, instead of sleeping at once, while the plugin's answers
    /// keep coming that quickly (default 100 µs; zero turns it off). Trades
    /// up to this much CPU per request for one wake-up less per plugin
    /// call; see docs/runtime/spinning.md. While it is non-zero, plugins that take
    /// wake hints (ours) get one when the plugin before them in a chain of
    /// calls is called, so that they are running when their turn comes;
    /// zero sends none.
    pub spin_budget: Duration,
    /// What one peer may make the runtime hold: requests before
    /// registration, updates per message, decoded size, requests in
    /// flight, connections waiting to register (see [`PeerLimits`]).
    pub peer_limits: PeerLimits,
    /// What one WebAssembly plugin may use (memory, fuel slice, module
    /// size); see `docs/runtime/wasm.md`.
    pub wasm: WasmLimits,
    /// What the embedding runtime does for plugins, declared to them in
    /// `Configure` (in the build metadata of `NRI_version`, see
    /// [`nri_api::declared_nri_version`]): the adjustments it applies, the
    /// container fields it fills in, whether it carries out updates and
    /// evictions, the events it delivers. A plugin built on `nri-plugin`
    /// that requires more fails at start-up instead of running without
    /// effect. Default ([`Config::DEFAULT_CAPABILITIES`]): every capability
    /// but `EVICT_CONTAINERS` (the default
    /// [`RuntimeCallbacks::evict_containers`] only logs), and every event:
    /// what an embedder does that applies the merged adjustment with
    /// `nri-oci`, fills in every field of what it hands over and calls
    /// every event method. An embedder that implements evictions adds
    /// `EVICT_CONTAINERS`; one that does less narrows it
    /// ([`Builder::capabilities`]). [`Adaptation::declare`](crate::Adaptation::declare)
    /// changes it while running.
    pub capabilities: RuntimeCapabilities,
    /// What each plugin may do, and who it must be to get it (see
    /// [`Grant`]). `None` (the default): no grants, every plugin may do
    /// everything. `Some`: a plugin is admitted only under a grant that
    /// names it and whose identity requirements it meets (deny by
    /// default, also for an empty list), and its answers are held to that
    /// grant; see `docs/runtime/security.md`.
    pub grants: Option<Vec<Grant>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("runtime_name", &self.runtime_name)
            .field("runtime_version", &self.runtime_version)
            .field("socket_path", &self.socket_path)
            .field("plugin_dir", &self.plugin_dir)
            .field("config_dir", &self.config_dir)
            .field("registration_timeout", &self.registration_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("disable_connections", &self.disable_connections)
            .field("disable_launch", &self.disable_launch)
            .field("plugin_policies", &self.plugin_policies)
            .field("default_policy", &self.default_policy)
            .field("strike_limit", &self.strike_limit)
            .field("exempt_namespaces", &self.exempt_namespaces)
            .field("startup_grace", &self.startup_grace)
            .field("allowed_uids", &self.allowed_uids)
            .field("allowed_gids", &self.allowed_gids)
            .field("stop_grace", &self.stop_grace)
            .field("default_validator", &self.default_validator.is_some())
            .field("spin_budget", &self.spin_budget)
            .field("peer_limits", &self.peer_limits)
            .field("wasm", &self.wasm)
            .field("capabilities", &self.capabilities)
            .field("grants", &self.grants)
            .finish()
    }
}

impl Config {
    /// The default [`Config::capabilities`]: every capability but
    /// `EVICT_CONTAINERS`, every event.
    pub const DEFAULT_CAPABILITIES: RuntimeCapabilities = RuntimeCapabilities::declared(
        CapabilitySet::all().without(Capability::EvictContainers),
        EventMask::ALL,
    );

    /// The defaults, with the runtime's name and version.
    pub fn new(runtime_name: impl Into<String>, runtime_version: impl Into<String>) -> Self {
        Self {
            runtime_name: runtime_name.into(),
            runtime_version: runtime_version.into(),
            socket_path: PathBuf::from(nri_api::DEFAULT_SOCKET_PATH),
            plugin_dir: PathBuf::from(nri_api::DEFAULT_PLUGIN_PATH),
            config_dir: PathBuf::from(nri_api::DEFAULT_PLUGIN_CONFIG_PATH),
            registration_timeout: nri_api::DEFAULT_REGISTRATION_TIMEOUT,
            request_timeout: nri_api::DEFAULT_REQUEST_TIMEOUT,
            disable_connections: false,
            disable_launch: false,
            plugin_policies: BTreeMap::new(),
            default_policy: PluginPolicy::default(),
            strike_limit: DEFAULT_STRIKE_LIMIT,
            exempt_namespaces: DEFAULT_EXEMPT_NAMESPACES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            startup_grace: Duration::ZERO,
            allowed_uids: Vec::new(),
            allowed_gids: Vec::new(),
            stop_grace: DEFAULT_STOP_GRACE,
            default_validator: None,
            spin_budget: DEFAULT_SPIN_BUDGET,
            peer_limits: PeerLimits::default(),
            wasm: WasmLimits::default(),
            capabilities: Config::DEFAULT_CAPABILITIES,
            grants: None,
        }
    }

    /// How plugin connections wait for data ([`Config::spin_budget`]).
    pub(crate) fn read_strategy(&self) -> nri_mux::ReadStrategy {
        nri_mux::ReadStrategy::Spin {
            budget: self.spin_budget,
        }
    }

    /// The operator's entry for a plugin: by `NN-name`, else by base name.
    pub fn plugin_entry(&self, id: &PluginId) -> Option<&PluginPolicy> {
        self.plugin_policies
            .get(&id.to_string())
            .or_else(|| self.plugin_policies.get(id.name()))
    }

    /// The policy entry for a plugin: its own entry, else the default.
    pub fn policy_for(&self, id: &PluginId) -> &PluginPolicy {
        self.plugin_entry(id).unwrap_or(&self.default_policy)
    }

    /// The configured failure policy of plugin `id` for `event`: the
    /// plugin's entry (its override for `event`, else its policy), else the
    /// default policy (its override for `event`, else its policy, else
    /// `fail`). A plugin's own declared policy, which comes between the
    /// two, is applied by the [`Adaptation`](crate::Adaptation) to
    /// connected plugins.
    pub fn failure_policy(&self, id: &PluginId, event: Event) -> FailurePolicy {
        self.plugin_entry(id)
            .and_then(|e| e.configured_for(event))
            .unwrap_or_else(|| self.default_policy.for_event(event))
    }

    /// The request timeout for plugin `id`: its entry's, else the default
    /// policy's, else [`Config::request_timeout`].
    pub fn request_timeout_for(&self, id: &PluginId) -> Duration {
        self.plugin_entry(id)
            .and_then(|e| e.request_timeout)
            .or(self.default_policy.request_timeout)
            .unwrap_or(self.request_timeout)
    }

    /// Whether a newer instance of plugin `id` takes over from a connected
    /// one ([`PluginPolicy::supersede`]): its entry's setting, else the
    /// default policy's, else `true`.
    pub fn supersede_for(&self, id: &PluginId) -> bool {
        self.plugin_entry(id)
            .and_then(|e| e.supersede)
            .or(self.default_policy.supersede)
            .unwrap_or(true)
    }

    /// Configured plugin names whose policy for `event` is `required` (their
    /// own, or the default policy inherited by an entry that sets none).
    pub fn required_plugins(&self, event: Event) -> impl Iterator<Item = &str> {
        let default = self.default_policy.for_event(event);
        self.plugin_policies
            .iter()
            .filter(move |(_, p)| {
                p.configured_for(event).unwrap_or(default) == FailurePolicy::Required
            })
            .map(|(k, _)| k.as_str())
    }

    /// Whether pods of `namespace` are exempt from the rules that fail a
    /// request because a plugin is unavailable ([`Config::exempt_namespaces`]).
    pub fn is_exempt(&self, namespace: &str) -> bool {
        self.exempt_namespaces.iter().any(|n| n == namespace)
    }
}

/// Builder of an [`Adaptation`](crate::Adaptation).
pub struct Builder {
    pub(crate) config: Config,
    pub(crate) validators: Vec<(PluginId, Arc<dyn Validator>)>,
    pub(crate) metrics: Arc<dyn Metrics>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field(
                "validators",
                &self
                    .validators
                    .iter()
                    .map(|(id, _)| id.to_string())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Builder {
    pub(crate) fn new(config: Config) -> Self {
        Self {
            config,
            validators: Vec::new(),
            metrics: Arc::new(NoopMetrics),
        }
    }

    /// Socket path for external plugins.
    #[must_use]
    pub fn socket_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.socket_path = path.into();
        self
    }

    /// Directory of plugins to launch.
    #[must_use]
    pub fn plugin_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.plugin_dir = path.into();
        self
    }

    /// Directory of launched plugins' configuration files.
    #[must_use]
    pub fn config_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.config_dir = path.into();
        self
    }

    /// Registration timeout.
    #[must_use]
    pub fn registration_timeout(mut self, t: Duration) -> Self {
        self.config.registration_timeout = t;
        self
    }

    /// Request timeout.
    #[must_use]
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.config.request_timeout = t;
        self
    }

    /// Spin budget of plugin connections ([`Config::spin_budget`]; zero
    /// turns spinning off).
    #[must_use]
    pub fn spin_budget(mut self, budget: Duration) -> Self {
        self.config.spin_budget = budget;
        self
    }

    /// What one peer may make the runtime hold ([`Config::peer_limits`]).
    ///
    /// ```
    /// use nri_runtime::{Adaptation, PeerLimits};
    ///
    /// let mut limits = PeerLimits::default();
    /// limits.extra_updates = 64;
    /// let builder = Adaptation::builder("my-runtime", "1.0").peer_limits(limits);
    /// assert_eq!(builder.current_config().peer_limits.extra_updates, 64);
    /// ```
    #[must_use]
    pub fn peer_limits(mut self, limits: PeerLimits) -> Self {
        self.config.peer_limits = limits;
        self
    }

    /// What the embedding runtime does for plugins, declared to them
    /// ([`Config::capabilities`]): the capabilities it has and the events
    /// it delivers.
    #[must_use]
    pub fn capabilities(mut self, supported: CapabilitySet, events: EventMask) -> Self {
        self.config.capabilities = RuntimeCapabilities::declared(supported, events);
        self
    }

    /// What one WebAssembly plugin may use ([`Config::wasm`]).
    #[must_use]
    pub fn wasm_limits(mut self, limits: WasmLimits) -> Self {
        self.config.wasm = limits;
        self
    }

    /// Disables (or enables) the socket for external plugins.
    #[must_use]
    pub fn disable_connections(mut self, disable: bool) -> Self {
        self.config.disable_connections = disable;
        self
    }

    /// Disables (or enables) launching plugins from the plugin directory.
    #[must_use]
    pub fn disable_launch(mut self, disable: bool) -> Self {
        self.config.disable_launch = disable;
        self
    }

    /// Sets the policy of plugin `name` (`name` or `NN-name`).
    #[must_use]
    pub fn plugin_policy(mut self, name: impl Into<String>, policy: PluginPolicy) -> Self {
        self.config.plugin_policies.insert(name.into(), policy);
        self
    }

    /// Shorthand: the failure policy of plugin `name` for every event.
    #[must_use]
    pub fn failure_policy(self, name: impl Into<String>, policy: FailurePolicy) -> Self {
        self.plugin_policy(name, PluginPolicy::new(policy))
    }

    /// Policy for plugins without an entry.
    #[must_use]
    pub fn default_policy(mut self, policy: PluginPolicy) -> Self {
        self.config.default_policy = policy;
        self
    }

    /// Consecutive timeouts after which a plugin is disconnected (0: never).
    #[must_use]
    pub fn strike_limit(mut self, n: u32) -> Self {
        self.config.strike_limit = n;
        self
    }

    /// Namespaces whose pods are never refused because a plugin is
    /// unavailable ([`Config::exempt_namespaces`]; empty: none).
    #[must_use]
    pub fn exempt_namespaces<S: Into<String>>(mut self, ns: impl IntoIterator<Item = S>) -> Self {
        self.config.exempt_namespaces = ns.into_iter().map(Into::into).collect();
        self
    }

    /// How long requests wait for a `required` plugin that has not
    /// registered since start ([`Config::startup_grace`]).
    #[must_use]
    pub fn startup_grace(mut self, grace: Duration) -> Self {
        self.config.startup_grace = grace;
        self
    }

    /// Applies a configuration file (YAML, or TOML when the name ends in
    /// `.toml`) on top of the configuration so far; see
    /// [`Config::apply_file`].
    pub fn config_file(mut self, path: impl AsRef<std::path::Path>) -> Result<Self, crate::Error> {
        self.config.apply_file(path.as_ref())?;
        Ok(self)
    }

    /// Allows peers with these uids on the socket.
    #[must_use]
    pub fn allowed_uids(mut self, uids: impl IntoIterator<Item = u32>) -> Self {
        self.config.allowed_uids = uids.into_iter().collect();
        self
    }

    /// Allows peers with these gids on the socket.
    #[must_use]
    pub fn allowed_gids(mut self, gids: impl IntoIterator<Item = u32>) -> Self {
        self.config.allowed_gids = gids.into_iter().collect();
        self
    }

    /// Grace between SIGTERM and SIGKILL for launched plugins on stop.
    #[must_use]
    pub fn stop_grace(mut self, t: Duration) -> Self {
        self.config.stop_grace = t;
        self
    }

    /// Enables the built-in default validator (listed as `00-default-validator`).
    #[must_use]
    pub fn default_validator(mut self, config: DefaultValidatorConfig) -> Self {
        self.config.default_validator = Some(config);
        self
    }

    /// Adds a grant ([`Config::grants`]): from now on grants are
    /// configured, and a plugin no grant admits is refused.
    #[must_use]
    pub fn grant(mut self, grant: Grant) -> Self {
        self.config.grants.get_or_insert_with(Vec::new).push(grant);
        self
    }

    /// Sets the grants ([`Config::grants`]), replacing any configured:
    /// from now on grants are configured (an empty list refuses every
    /// plugin).
    #[must_use]
    pub fn grants(mut self, grants: impl IntoIterator<Item = Grant>) -> Self {
        self.config.grants = Some(grants.into_iter().collect());
        self
    }

    /// Adds an in-process validator, listed as `id`.
    #[must_use]
    pub fn validator(mut self, id: PluginId, validator: Arc<dyn Validator>) -> Self {
        self.validators.push((id, validator));
        self
    }

    /// The metrics sink.
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Replaces the whole configuration.
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The configuration so far.
    pub fn current_config(&self) -> &Config {
        &self.config
    }
}
