//! The peers of one run, all in this process over real unix sockets: the
//! runtime library (or the upstream library, a relay and `nri-proxy` in
//! front of it), and one relay and observer per plugin slot.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::ContainerUpdate;
use nri_plugin::PluginHandle;
use nri_proxy::{Proxy, ProxyConfig};
use nri_runtime::{Adaptation, Config, FailurePolicy, PeerLimits, PluginPolicy};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::lifecycle::Ctx;
use crate::model::{Callbacks, Model};
use crate::observe::{Clock, Observer, lock};
use crate::raw::RawPeer;
use crate::relay::Relay;
use crate::schedule::{Mode, Peer, Policy, Schedule, Setup};

/// What one peer may send beyond the containers known, in the runtime
/// under test: small, so that the memory probe (invariant 5) is cheap.
pub const EXTRA_UPDATES: usize = 4;

/// Name and index of the proxy upstream.
pub const PROXY_NAME: &str = "50-proxy";

/// The handle of a running peer.
#[derive(Debug, Clone)]
pub enum Handle {
    /// A stub of the SDK.
    Sdk(PluginHandle),
    /// A raw peer.
    Raw(Arc<RawPeer>),
}

impl Handle {
    /// Stops the peer for good.
    pub fn stop(&self) {
        match self {
            Handle::Sdk(h) => h.stop(),
            Handle::Raw(r) => r.stop(),
        }
    }

    /// Whether it is registered now.
    pub fn is_connected(&self) -> bool {
        match self {
            Handle::Sdk(h) => h.is_connected(),
            Handle::Raw(r) => r.is_connected(),
        }
    }

    /// An unsolicited UpdateContainers: the updates that failed, or the
    /// error with its causes as text.
    pub async fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        match self {
            Handle::Sdk(h) => (h.update_containers(updates, Vec::new()).await)
                .map_err(|e| crate::memory::chain(&e)),
            Handle::Raw(r) => r.update_containers(updates).await,
        }
    }
}

/// One plugin slot: its observer, its relay, its running peer.
pub struct Slot {
    /// The recorder.
    pub obs: Arc<Observer>,
    /// The relay it dials.
    pub relay: Arc<Relay>,
    /// The running peer's handle, if started.
    pub handle: Option<Handle>,
    /// Whether the peer is still going.
    pub running: Arc<AtomicBool>,
}

/// The proxy and the upstream side in proxy mode.
pub struct ProxySide {
    /// The proxy.
    pub proxy: Arc<Proxy>,
    /// Stops it.
    pub shutdown: CancellationToken,
    /// Its task.
    pub task: Option<tokio::task::JoinHandle<Result<(), nri_proxy::Error>>>,
    /// The relay between the proxy and the upstream runtime.
    pub relay: Arc<Relay>,
    /// The upstream runtime's socket.
    pub upstream_socket: PathBuf,
}

/// Everything of one run.
pub struct Env {
    /// The set-up.
    pub setup: Setup,
    /// Sockets live here.
    pub dir: tempfile::TempDir,
    /// The run's clock.
    pub clock: Arc<Clock>,
    /// The truth.
    pub model: Arc<Model>,
    /// The runtime side.
    pub ctx: Arc<Ctx>,
    /// The library the plugins connect to (runtime mode: the one in
    /// `ctx`; proxy mode: the proxy's).
    pub plugin_side: Adaptation,
    /// The socket the plugins' relays forward to.
    pub plugin_socket: PathBuf,
    /// The plugin slots.
    pub slots: Vec<Slot>,
    /// The stubs' tasks.
    pub stubs: JoinSet<()>,
    /// Proxy mode.
    pub proxy: Option<ProxySide>,
    /// Objects created by upstream restarts get ids from here.
    pub next_outside_id: u32,
}

/// A run that could not be set up (a harness problem, not a finding).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The runtime library refused its configuration or could not start.
    #[error("runtime library: {0}")]
    Runtime(#[from] nri_runtime::Error),
    /// The proxy could not be built.
    #[error("proxy: {0}")]
    Proxy(#[from] nri_proxy::Error),
    /// A socket could not be bound.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The proxy never served its plugins.
    #[error("the proxy did not start its plugin side")]
    ProxyNotServing,
}

/// Request timeout of WebAssembly observers without faults: their guest
/// logs every request hex-encoded, a split-size Synchronize takes it
/// seconds of the host's wall-clock deadline. A guest with a fault program
/// (generator 6 on, never in a run with the large node) has
/// [`crate::wasm_program::TIMEOUT_MS`]: its delays and hangs cost that much
/// wall time at most.
pub const WASM_TIMEOUT: Duration = Duration::from_secs(20);

fn policies(setup: &Setup) -> Vec<(String, PluginPolicy)> {
    setup
        .plugins
        .iter()
        .filter_map(|p| {
            let mut policy = match p.policy {
                Policy::Default => PluginPolicy::default(),
                Policy::Ignore => PluginPolicy::new(FailurePolicy::Ignore),
                Policy::Fail => PluginPolicy::new(FailurePolicy::Fail),
                Policy::Required => PluginPolicy::new(FailurePolicy::Required),
            };
            if p.peer == Peer::Wasm {
                policy = policy.with_request_timeout(if p.wasm_faults.is_empty() {
                    WASM_TIMEOUT
                } else {
                    Duration::from_millis(crate::wasm_program::TIMEOUT_MS)
                });
            }
            (policy != PluginPolicy::default()).then(|| (p.full_name(), policy))
        })
        .collect()
}

/// The configuration of the library the plugins connect to.
fn plugin_side_config(setup: &Setup, socket: &Path, dir: &Path, name: &str) -> Config {
    let mut c = Config::new(name, "v0.0.0-checker");
    c.socket_path = socket.to_owned();
    c.plugin_dir = dir.join("plugins");
    c.config_dir = dir.join("conf.d");
    // Launching is for the WebAssembly plugins (nothing else is there).
    c.disable_launch = !setup.plugins.iter().any(|p| p.peer == Peer::Wasm);
    c.request_timeout = Duration::from_millis(setup.timeout_ms);
    c.strike_limit = setup.strikes;
    c.startup_grace = Duration::from_millis(setup.grace_ms);
    c.spin_budget = Duration::ZERO;
    let mut limits = PeerLimits::default();
    limits.extra_updates = EXTRA_UPDATES;
    c.peer_limits = limits;
    c.plugin_policies = policies(setup).into_iter().collect();
    // The WebAssembly observers report every request through their log
    // (hex, in chunks): a log budget that dropped lines would lose events.
    c.wasm = std::mem::take(&mut c.wasm).with_log_budget(u64::MAX, u64::MAX);
    c
}

/// The runtime library standing in for the container runtime (runtime
/// mode: the one under test; proxy mode: upstream, containerd's place).
async fn runtime(config: Config, model: &Arc<Model>) -> Result<Adaptation, nri_runtime::Error> {
    let a = Adaptation::builder(config.runtime_name.clone(), config.runtime_version.clone())
        .config(config)
        .build(Arc::new(Callbacks(model.clone())))?;
    a.start().await?;
    Ok(a)
}

impl Env {
    /// Sets up the peers of `schedule` (plugins are not started: the
    /// steps start them; WebAssembly plugins start with the library).
    pub async fn new(schedule: &Schedule, forget_every: Option<u64>) -> Result<Env, SetupError> {
        let setup = &schedule.setup;
        let dir = tempfile::Builder::new().prefix("nri-checker").tempdir()?;
        let clock = Arc::new(Clock::default());
        let model = Model::new(clock.clone(), setup.preload);
        let observers = observers(setup, &clock, forget_every, &dir.path().join("plugins"))?;
        let (nri, plugin_side, plugin_socket, proxy) = match setup.mode {
            Mode::Runtime => {
                let socket = dir.path().join("nri.sock");
                let cfg = plugin_side_config(setup, &socket, dir.path(), "checker-runtime");
                let a = runtime(cfg, &model).await?;
                (a.clone(), a, socket, None)
            }
            Mode::Proxy => {
                let (up, side) = proxy_side(setup, dir.path(), &model).await?;
                let a = side.proxy.adaptation().clone();
                let socket = a.config().socket_path.clone();
                (up, a, socket, Some(side))
            }
        };
        let ctx = Arc::new(Ctx {
            nri: Mutex::new(nri),
            model: model.clone(),
            deadline: match setup.mode {
                Mode::Runtime => setup.deadline_ms.map(Duration::from_millis),
                Mode::Proxy => None,
            },
            undo: setup.undo,
            behind: (setup.mode == Mode::Proxy).then(|| plugin_side.clone()),
        });
        let mut slots = Vec::new();
        for (i, obs) in observers.into_iter().enumerate() {
            let relay = Relay::start(&dir.path().join(format!("relay{i}.sock")), &plugin_socket)?;
            let r = relay.clone();
            obs.set_cut(Arc::new(move || r.cut()));
            slots.push(Slot {
                obs,
                relay,
                handle: None,
                running: Arc::new(AtomicBool::new(false)),
            });
        }
        Ok(Env {
            setup: setup.clone(),
            dir,
            clock,
            model,
            ctx,
            plugin_side,
            plugin_socket,
            slots,
            stubs: JoinSet::new(),
            proxy,
            next_outside_id: 100_000,
        })
    }

    /// Starts the stub of slot `i` unless it runs.
    pub fn connect(&mut self, i: usize) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if slot.running.load(Ordering::SeqCst) || slot.obs.spec.peer == Peer::Wasm {
            return;
        }
        tracing::debug!(plugin = %slot.obs.spec.full_name(), "starting an observer");
        let running = slot.running.clone();
        if slot.obs.spec.peer == Peer::Raw {
            let raw = RawPeer::new(slot.obs.clone(), slot.relay.path.clone());
            slot.handle = Some(Handle::Raw(raw.clone()));
            running.store(true, Ordering::SeqCst);
            self.stubs.spawn(async move {
                raw.run().await;
                running.store(false, Ordering::SeqCst);
            });
            return;
        }
        let stub = match crate::sdk::stub(slot.obs.clone(), &slot.relay.path) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot build an observer's stub");
                return;
            }
        };
        slot.handle = Some(Handle::Sdk(stub.handle()));
        running.store(true, Ordering::SeqCst);
        let obs = slot.obs.clone();
        self.stubs.spawn(async move {
            let r = stub.run().await;
            tracing::debug!(result = ?r, "observer stub ended");
            // The end of the last connection (the SDK reports the others).
            obs.record(crate::observe::Seen::Lost);
            running.store(false, Ordering::SeqCst);
        });
    }

    /// Stops the stub of slot `i`.
    pub fn stop_plugin(&mut self, i: usize) {
        if let Some(s) = self.slots.get(i) {
            if let Some(h) = &s.handle {
                s.obs.record(crate::observe::Seen::Cut);
                h.stop();
            }
        }
    }

    /// Whether the plugin of slot `i` is active in the library it dials.
    pub fn active(&self, i: usize) -> bool {
        let name = self.slots[i].obs.spec.full_name();
        self.plugin_side
            .plugins()
            .iter()
            .any(|p| p.id.to_string() == name)
    }

    /// The library the runtime sends its events to now.
    pub fn nri(&self) -> Adaptation {
        lock(&self.ctx.nri).clone()
    }

    /// Ends everything (plugins, relays, the runtime or the proxy).
    pub async fn teardown(mut self) {
        for s in &self.slots {
            if let Some(h) = &s.handle {
                h.stop();
            }
            s.obs.heal();
        }
        if let Some(p) = &mut self.proxy {
            p.shutdown.cancel();
            if let Some(t) = p.task.take() {
                let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
            }
            p.relay.shutdown().await;
        }
        self.nri().stop().await;
        self.plugin_side.stop().await;
        let _ = tokio::time::timeout(Duration::from_secs(60), async {
            while self.stubs.join_next().await.is_some() {}
        })
        .await;
        self.stubs.shutdown().await;
        for s in &self.slots {
            s.relay.shutdown().await;
        }
    }
}

/// The observers of the plugins; a WebAssembly plugin's guest is written
/// to `plugin_dir` (the library launches it when it starts).
fn observers(
    setup: &Setup,
    clock: &Arc<Clock>,
    forget_every: Option<u64>,
    plugin_dir: &Path,
) -> std::io::Result<Vec<Arc<Observer>>> {
    let mut out = Vec::new();
    for (i, spec) in setup.plugins.iter().enumerate() {
        let mut obs = Observer::new(spec.clone(), i, clock.clone());
        obs.forget_every = forget_every;
        let obs = Arc::new(obs);
        if spec.peer == Peer::Wasm {
            let nonce = crate::wasm::register(&obs);
            crate::wasm::install(&obs, nonce, plugin_dir)?;
        }
        out.push(obs);
    }
    Ok(out)
}

/// The upstream runtime of proxy mode on `dir/up.sock`.
pub async fn upstream(
    setup: &Setup,
    dir: &Path,
    model: &Arc<Model>,
) -> Result<Adaptation, nri_runtime::Error> {
    let mut c = Config::new("checker-containerd", "v2.3.0");
    c.socket_path = dir.join("up.sock");
    c.plugin_dir = dir.join("up-plugins");
    c.config_dir = dir.join("up-conf.d");
    c.disable_launch = true;
    c.request_timeout = Duration::from_millis(setup.deadline_ms.unwrap_or(2000));
    if setup.configure_timeout_zero {
        // The library refuses a request timeout of zero, and Configure
        // tells `request_timeout` in whole milliseconds: under 1 ms it
        // tells 0, as a runtime without the field. The proxy is timed by
        // the default policy's timeout instead (`Config::request_timeout_for`).
        c.request_timeout = Duration::from_micros(1);
        c.default_policy = PluginPolicy::default()
            .with_request_timeout(Duration::from_millis(setup.deadline_ms.unwrap_or(2000)));
    }
    c.spin_budget = Duration::ZERO;
    runtime(c, model).await
}

async fn proxy_side(
    setup: &Setup,
    dir: &Path,
    model: &Arc<Model>,
) -> Result<(Adaptation, ProxySide), SetupError> {
    let up = upstream(setup, dir, model).await?;
    let upstream_socket = dir.join("up.sock");
    let relay = Relay::start(&dir.join("up-relay.sock"), &upstream_socket)?;
    let mut config = ProxyConfig::default();
    let socket = dir.join("proxy.sock");
    config.runtime = plugin_side_config(setup, &socket, dir, nri_proxy::PROXY_RUNTIME_NAME);
    config.name = Some("proxy".into());
    config.index = Some("50".into());
    config.upstream_socket = relay.path.clone();
    let proxy = Arc::new(Proxy::new(config)?);
    let shutdown = CancellationToken::new();
    let (p, s) = (proxy.clone(), shutdown.clone());
    let task = tokio::spawn(async move { p.run(s).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        if tokio::time::Instant::now() > deadline {
            return Err(SetupError::ProxyNotServing);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((
        up,
        ProxySide {
            proxy,
            shutdown,
            task: Some(task),
            relay,
            upstream_socket,
        },
    ))
}
