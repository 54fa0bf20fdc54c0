//! [`Proxy`]: one plugin upstream, a runtime for the plugins behind it.

use std::future::Future;
use std::sync::{Arc, OnceLock, PoisonError};
use std::task::Poll;
use std::time::Duration;

use nri_api::ENV_PLUGIN_SOCKET;
use nri_api::api::FailurePolicy;
use nri_plugin::{PluginHandle, ReconnectPolicy, Stub};
use nri_runtime::{Adaptation, PrometheusMetrics};
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::callbacks::Callbacks;
use crate::upstream::Upstream;
use crate::view::State;
use crate::{Error, ProxyConfig};

/// Delay before registering again after the runtime refused or ended the
/// connection in a way the plugin SDK does not retry (external mode).
const RETRY_DELAY: Duration = Duration::from_secs(2);

/// The proxy: registers with the runtime as one plugin and runs the
/// plugins behind it with `nri-runtime`.
///
/// ```no_run
/// # async fn f() -> Result<(), nri_proxy::Error> {
/// let config = nri_proxy::ProxyConfig::load("/etc/nri-proxy/config.yaml".as_ref())?;
/// let proxy = nri_proxy::Proxy::new(config)?;
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// proxy.run(shutdown).await?;
/// # Ok(()) }
/// ```
pub struct Proxy {
    config: Arc<ProxyConfig>,
    stub: Stub<Upstream>,
    adaptation: Adaptation,
    registry: Arc<Registry>,
    pre_launched: bool,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("config", &self.config)
            .field("upstream", &self.stub.plugin_name())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Builds the proxy (nothing runs until [`Proxy::run`]).
    ///
    /// # Errors
    ///
    /// [`Error::Upstream`] for an invalid name or index,
    /// [`Error::Runtime`] for an invalid plugin-side configuration.
    pub fn new(config: ProxyConfig) -> Result<Self, Error> {
        let config = Arc::new(config);
        let state = Arc::new(State::default());
        let pre_launched = std::env::var_os(ENV_PLUGIN_SOCKET).is_some_and(|v| !v.is_empty());
        let mut registry = Registry::default();
        let metrics = PrometheusMetrics::new(&mut registry);
        // The upstream handle exists before the stub runs; the plugin side
        // needs it to forward updates, the stub needs the plugin side.
        let handle = Arc::new(OnceLock::new());
        let adaptation = Adaptation::builder(
            config.runtime.runtime_name.clone(),
            config.runtime.runtime_version.clone(),
        )
        .config(config.runtime.clone())
        .metrics(Arc::new(metrics))
        .build(Arc::new(Callbacks {
            state: state.clone(),
            upstream: handle.clone(),
        }))
        .map_err(Error::Runtime)?;
        let proxy_metrics = crate::metrics::ProxyMetrics::register(&mut registry);
        let upstream = Upstream::new(adaptation.clone(), state, config.clone(), proxy_metrics);
        let mut b = nri_plugin::Builder::new(upstream)
            .socket_path(&config.upstream_socket)
            .failure_policy(FailurePolicy {
                fail_request: config.fail_request,
                keep_connected: true,
            });
        if let Some(n) = &config.name {
            b = b.name(n);
        }
        if let Some(i) = &config.index {
            b = b.index(i);
        }
        if !pre_launched {
            b = b.reconnect(ReconnectPolicy::new(
                Duration::from_millis(200),
                Duration::from_secs(5),
            ));
        }
        let stub = b.build().map_err(Error::Upstream)?;
        // Set once, here, before anything runs.
        let _ = stub.plugin().own_name.set(stub.plugin_name());
        // Set once, here, before anything runs.
        let _ = handle.set(stub.handle());
        Ok(Proxy {
            config,
            stub,
            adaptation,
            registry: Arc::new(registry),
            pre_launched,
        })
    }

    /// The plugin side (the runtime library instance serving the plugins
    /// behind the proxy).
    pub fn adaptation(&self) -> &Adaptation {
        &self.adaptation
    }

    /// The proxy's handle as a plugin of the runtime.
    pub fn upstream(&self) -> PluginHandle {
        self.stub.handle()
    }

    /// The proxy's name upstream (`NN-name`).
    pub fn name(&self) -> String {
        self.stub.plugin_name()
    }

    /// The Prometheus registry with the plugin side's metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Runs until `shutdown` is cancelled (`Ok`) or the upstream connection
    /// ends for good: connects to the runtime (reconnecting in external
    /// mode), starts the plugin side after the runtime's first Synchronize,
    /// serves metrics; at the end stops every plugin behind it.
    ///
    /// # Errors
    ///
    /// [`Error::Metrics`], [`Error::Runtime`] (the plugin side cannot
    /// start: its socket, its plugin directory), [`Error::Upstream`] (a
    /// pre-launched proxy whose connection ended).
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), Error> {
        let stop = shutdown.child_token();
        let mut tasks = JoinSet::new();
        if let Some(address) = self.config.metrics_address {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|source| Error::Metrics { address, source })?;
            tracing::info!(%address, "nri-proxy serving metrics");
            tasks.spawn(crate::metrics::serve(
                listener,
                self.registry.clone(),
                stop.clone(),
            ));
        }
        let starter = async {
            let mut synced = self.stub.plugin().synced.subscribe();
            let ready = tokio::select! {
                _ = stop.cancelled() => false,
                r = synced.wait_for(|s| *s) => r.is_ok(),
            };
            if !ready {
                return Ok(false);
            }
            self.start_plugin_side().await.map(|()| true)
        };
        let upstream = self.run_upstream(&stop);
        let (started, ended) = tokio::join!(
            async {
                let r = starter.await;
                if r.is_err() {
                    stop.cancel();
                }
                r
            },
            async {
                let r = upstream.await;
                stop.cancel();
                r
            }
        );
        if !matches!(started, Ok(false)) {
            self.adaptation.stop().await;
        }
        let mut later = std::mem::take(
            &mut *self
                .stub
                .plugin()
                .later
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        later.shutdown().await;
        stop.cancel();
        while tasks.join_next().await.is_some() {}
        started?;
        ended
    }

    /// Starts the plugin side. The gate opens in the same step as the
    /// library's start (whose first step marks it started and spawns the
    /// launches), so every event either reached the view before any
    /// plugin lists it or goes through the library.
    async fn start_plugin_side(&self) -> Result<(), Error> {
        let idle = self.config.plugins_not_launched();
        if !idle.is_empty() {
            tracing::warn!(
                plugin_dir = %self.config.runtime.plugin_dir.display(),
                plugins = ?idle,
                "nri-proxy: plugins in the plugin directory are not started: disable-launch is true (WebAssembly plugins too)"
            );
        }
        let state = &self.stub.plugin().state;
        let mut start = std::pin::pin!(self.adaptation.start());
        let first = std::future::poll_fn(|cx| {
            let mut g = state.lock();
            g.started = true;
            Poll::Ready(start.as_mut().poll(cx))
        })
        .await;
        let r = match first {
            Poll::Ready(r) => r,
            Poll::Pending => start.await,
        };
        r.map_err(Error::Runtime)?;
        tracing::info!(
            socket = %self.config.runtime.socket_path.display(),
            plugins = self.adaptation.plugins().len(),
            "nri-proxy plugin side started"
        );
        Ok(())
    }

    /// The upstream connection until `stop`.
    async fn run_upstream(&self, stop: &CancellationToken) -> Result<(), Error> {
        loop {
            let mut run = std::pin::pin!(self.stub.run());
            let r = tokio::select! {
                r = &mut run => r,
                _ = stop.cancelled() => {
                    self.stub.handle().stop();
                    run.await
                }
            };
            let e = match r {
                Ok(()) => return Ok(()),
                Err(nri_plugin::Error::ShutDownByRuntime) if self.pre_launched => return Ok(()),
                Err(e) if self.pre_launched => return Err(Error::Upstream(e)),
                Err(e) => e,
            };
            tracing::warn!(error = %e, retry_in = ?RETRY_DELAY, "nri-proxy: upstream connection ended; registering again");
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(RETRY_DELAY) => {}
            }
        }
    }
}
