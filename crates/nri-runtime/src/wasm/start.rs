//! Starting a WebAssembly plugin found in the plugin directory: load and
//! initialize it, Configure (with its drop-in configuration), then the
//! same Synchronize, deferred deliveries and activation as any plugin.
//! There is no registration: the identity is the file name, as for other
//! launched plugins.

use std::sync::Arc;
use std::time::Instant;

use nri_api::api::{ConfigureRequest, ConfigureResponse};
use nri_api::method;
use prost::Message;
use tokio_util::sync::CancellationToken;

use super::WasmError;
use super::host::{Guest, WasmConn};
use crate::adaptation::Shared;
use crate::connect::{check_mask, millis};
use crate::error::{Error, RegistrationFailure};
use crate::launch::DiscoveredPlugin;
use crate::plugin::{Conn, Plugin, PluginOrigin, PluginParts};

impl Shared {
    /// Loads, configures and synchronizes the WebAssembly plugin `d`.
    pub(crate) async fn start_wasm(
        self: Arc<Self>,
        d: DiscoveredPlugin,
    ) -> Result<Arc<Plugin>, Error> {
        let full = d.id.to_string();
        if !self.registry.reserve(&full) {
            return Err(Error::Registration {
                reason: RegistrationFailure::NameInUse {
                    plugin: full.clone(),
                },
                plugin: full,
            });
        }
        let res = self.clone().configure_wasm(&d).await;
        let plugin = match res {
            Ok(p) => p,
            Err(e) => {
                self.registry.release(&full);
                return Err(e);
            }
        };
        if let Err(reason) = self.synchronize(&plugin).await {
            self.registry.remove(&plugin);
            plugin.close("synchronization failed");
            return Err(Error::Registration {
                plugin: full,
                reason,
            });
        }
        tracing::info!(plugin = %full, "WebAssembly NRI plugin synchronized and active");
        Ok(plugin)
    }

    async fn configure_wasm(self: Arc<Self>, d: &DiscoveredPlugin) -> Result<Arc<Plugin>, Error> {
        let full = d.id.to_string();
        let load_err = |source: WasmError| Error::WasmLoad {
            plugin: full.clone(),
            path: d.path.display().to_string(),
            source,
        };
        let limits = self.config.wasm.clone();
        let started = Instant::now();
        let deadline = started + self.config.registration_timeout;
        let (path, name) = (d.path.clone(), full.clone());
        let loaded = tokio::task::spawn_blocking(move || {
            let wasm = read_module(&path, limits.max_module_size)?;
            Guest::load(&name, &wasm, &limits, deadline)
        })
        .await
        .map_err(|e| {
            load_err(WasmError::Instantiate {
                message: format!("loading task failed: {e}"),
            })
        })?;
        let guest = loaded.map_err(load_err)?;
        tracing::info!(plugin = %full, path = %d.path.display(), load_ms = started.elapsed().as_secs_f64() * 1e3, "WebAssembly NRI plugin loaded");
        let closed = CancellationToken::new();
        let conn = WasmConn::new(full.clone(), guest, closed.clone());
        let timeout = self.config.request_timeout_for(&d.id);
        let creq = ConfigureRequest {
            config: d.config.clone(),
            runtime_name: self.config.runtime_name.clone(),
            runtime_version: self.config.runtime_version.clone(),
            registration_timeout: millis(self.config.registration_timeout),
            request_timeout: millis(self.config.request_timeout),
            nri_version: nri_api::NRI_VERSION.to_owned(),
        };
        let fail = |reason: RegistrationFailure| Error::Registration {
            plugin: full.clone(),
            reason,
        };
        let answer = conn
            .call(
                method::CONFIGURE,
                bytes::Bytes::from(creq.encode_to_vec()),
                timeout,
            )
            .await
            .map_err(|e| {
                fail(RegistrationFailure::Configure {
                    message: e.to_string(),
                })
            })?;
        let resp =
            crate::peer::decode_checked::<ConfigureResponse>(&self.peers, answer).map_err(|r| {
                fail(RegistrationFailure::ConfigureAnswer {
                    reason: r.to_string(),
                })
            })?;
        let mask = check_mask(resp.events).map_err(fail)?;
        let declared = resp.failure_policy;
        let plugin = Arc::new(Plugin::new(PluginParts {
            id: d.id.clone(),
            origin: PluginOrigin::Wasm,
            mask,
            timeout,
            conn: Conn::Wasm(conn),
            strike_limit: self.strike_limit_for(&d.id, declared.as_ref()),
            declared,
            wake_hints: false,
            closed,
            child: None,
            peers: self.peers.clone(),
        }));
        tracing::info!(plugin = %full, events = %mask, "WebAssembly NRI plugin configured");
        Ok(plugin)
    }
}

fn read_module(path: &std::path::Path, max: u64) -> Result<Vec<u8>, WasmError> {
    let io = |e: std::io::Error| WasmError::Compile {
        message: format!("reading the module: {e}"),
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > max {
        return Err(WasmError::ModuleTooLarge { size, max });
    }
    std::fs::read(path).map_err(io)
}
