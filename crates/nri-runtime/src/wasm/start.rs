//! Starting a WebAssembly plugin found in the plugin directory: load and
//! initialize it, Configure (with its drop-in configuration), then the
//! same Synchronize, deferred deliveries and activation as any plugin.
//! There is no registration: the identity is the file name, as for other
//! launched plugins. A re-instantiation (`restart.rs`) goes through the
//! same phases from a new instance of the compiled module.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_api::api::{ConfigureRequest, ConfigureResponse};
use nri_api::method;
use prost::Message;
use tokio_util::sync::CancellationToken;

use super::WasmError;
use super::conn::{Origin, WasmConn};
use super::host::Guest;
use super::image::Image;
use crate::adaptation::Shared;
use crate::connect::{check_mask, millis};
use crate::error::{Error, RegistrationFailure};
use crate::launch::DiscoveredPlugin;
use crate::plugin::{Conn, Plugin, PluginOrigin, PluginParts};

/// The error of a load of plugin `d` that failed for `source`.
pub(super) fn load_error(d: &DiscoveredPlugin, source: WasmError) -> Error {
    Error::WasmLoad {
        plugin: d.id.to_string(),
        path: d.path.display().to_string(),
        source,
    }
}

impl Shared {
    /// Loads, configures and synchronizes the WebAssembly plugin `d`.
    pub(crate) async fn start_wasm(
        self: Arc<Self>,
        d: DiscoveredPlugin,
    ) -> Result<Arc<Plugin>, Error> {
        let full = d.id.to_string();
        self.reserve_wasm(&full)?;
        let identity = crate::identity::Captured::wasm(&d.path);
        let admission = match self.admit_grant(&d.id, identity) {
            Ok(a) => Arc::new(a),
            Err(reason) => {
                self.registry.release(&full);
                return Err(Error::Registration {
                    plugin: full,
                    reason: RegistrationFailure::NotGranted { reason },
                });
            }
        };
        let started = Instant::now();
        let loaded = self.load_wasm(&d, admission).await;
        let (origin, guest) = match loaded {
            Ok(x) => x,
            Err(e) => {
                self.registry.release(&full);
                self.gone_if_last(&full);
                return Err(e);
            }
        };
        let c = origin.image.census();
        tracing::info!(plugin = %full, path = %d.path.display(), load_ms = started.elapsed().as_secs_f64() * 1e3, functions = c.functions, table_elements = c.table_elements, memory_bytes = c.memory_bytes, "WebAssembly NRI plugin loaded");
        let admitted = (self.clone().admit_wasm(origin, guest, 0).await).map_err(|(e, _)| e);
        if admitted.is_err() {
            self.gone_if_last(&full);
        }
        admitted
    }

    /// Reserves the plugin's name.
    pub(super) fn reserve_wasm(&self, full: &str) -> Result<(), Error> {
        if self.registry.reserve(full) {
            return Ok(());
        }
        Err(Error::Registration {
            reason: RegistrationFailure::NameInUse {
                plugin: full.to_owned(),
            },
            plugin: full.to_owned(),
        })
    }

    /// Configures and synchronizes a new instance `guest` of `origin`
    /// (its name reserved), whose plugin starts with `strikes`; on
    /// failure the reservation is released, and the error comes with the
    /// strikes after the attempt (`strikes`, plus its own timeouts: a
    /// Synchronize, or a delivery before its activation, that timed out).
    pub(super) async fn admit_wasm(
        self: Arc<Self>,
        origin: Arc<Origin>,
        guest: Guest,
        strikes: u32,
    ) -> Result<Arc<Plugin>, (Error, u32)> {
        let full = origin.plugin.id.to_string();
        let plugin = match self.configure_wasm(origin, guest).await {
            Ok(p) => p,
            Err(e) => {
                self.registry.release(&full);
                return Err((e, strikes));
            }
        };
        // Added at its activation, after Synchronize (whose answer clears
        // strikes): the run of timeouts goes on until the plugin answers
        // an event, and the plugin is never listed without them.
        plugin.carry_strikes(strikes);
        if let Err(reason) = self.synchronize(&plugin).await {
            let _ = self.registry.remove(&plugin);
            plugin.close("synchronization failed");
            let after = plugin.strikes_with_carried();
            let e = Error::Registration {
                plugin: full,
                reason,
            };
            return Err((e, after));
        }
        tracing::info!(plugin = %full, "WebAssembly NRI plugin synchronized and active");
        Ok(plugin)
    }

    /// Reads and compiles `d`, and makes its first instance, within the
    /// registration timeout.
    async fn load_wasm(
        &self,
        d: &DiscoveredPlugin,
        admission: Arc<crate::grants::Admission>,
    ) -> Result<(Arc<Origin>, Guest), Error> {
        let limits = self.config.wasm.clone();
        let (path, name) = (d.path.clone(), d.id.to_string());
        let registration = self.config.registration_timeout;
        let deadline = Instant::now() + registration;
        let (image, guest) = self
            .blocking_within(d, registration, move |closed| {
                let wasm = read_module(&path, limits.max_module_size)?;
                let image = Image::compile(&wasm, &limits)?;
                drop(wasm);
                let guest = image.instantiate(&name, deadline, &closed)?;
                Ok((Arc::new(image), guest))
            })
            .await?;
        let origin = Arc::new(Origin {
            plugin: d.clone(),
            image,
            admission,
        });
        Ok((origin, guest))
    }

    /// A new instance of `origin`'s module, within the registration
    /// timeout.
    pub(super) async fn instantiate_wasm(&self, origin: &Arc<Origin>) -> Result<Guest, Error> {
        let registration = self.config.registration_timeout;
        let deadline = Instant::now() + registration;
        let (o, name) = (origin.clone(), origin.plugin.id.to_string());
        self.blocking_within(&origin.plugin, registration, move |closed| {
            o.image.instantiate(&name, deadline, &closed)
        })
        .await
    }

    /// Runs `work` (a load) on a blocking thread and waits for it at most
    /// `timeout`. `work` gets the load's close signal, cancelled when this
    /// wait gives up (the timeout, or the future dropped as the runtime
    /// stops): the guest's start function and initializer end on it within
    /// a fuel slice or a sleep's closing check. Compiling cannot be
    /// paused: a load still compiling then is refused here, and its thread
    /// ends by itself (compiling is bounded by the module's size).
    async fn blocking_within<T: Send + 'static>(
        &self,
        d: &DiscoveredPlugin,
        timeout: Duration,
        work: impl FnOnce(CancellationToken) -> Result<T, WasmError> + Send + 'static,
    ) -> Result<T, Error> {
        let closed = CancellationToken::new();
        let close_unless_done = closed.clone().drop_guard();
        let task = tokio::task::spawn_blocking(move || work(closed));
        let joined = tokio::time::timeout(timeout, task).await;
        if joined.is_ok() {
            // Its thread is done: the instance it made keeps the token
            // until its connection gives it its own.
            close_unless_done.disarm();
        }
        match joined {
            Err(_) => Err(load_error(d, WasmError::LoadTimeout { timeout })),
            Ok(Err(e)) => Err(load_error(
                d,
                WasmError::Instantiate {
                    message: format!("loading task failed: {e}"),
                },
            )),
            Ok(Ok(res)) => res.map_err(|e| load_error(d, e)),
        }
    }

    /// Sends `Configure` to `guest` and makes the plugin of its answer.
    async fn configure_wasm(
        &self,
        origin: Arc<Origin>,
        guest: Guest,
    ) -> Result<Arc<Plugin>, Error> {
        let d = &origin.plugin;
        let full = d.id.to_string();
        let closed = CancellationToken::new();
        let timeout = self.config.request_timeout_for(&d.id);
        let id = d.id.clone();
        let creq = ConfigureRequest {
            config: d.config.clone(),
            runtime_name: self.config.runtime_name.clone(),
            runtime_version: self.config.runtime_version.clone(),
            registration_timeout: millis(self.config.registration_timeout),
            request_timeout: millis(self.config.request_timeout),
            nri_version: nri_api::declared_nri_version(false, &crate::lock(&self.declared)),
        };
        let admission = origin.admission.clone();
        let conn = WasmConn::new(full.clone(), guest, closed.clone(), timeout, origin);
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
            strike_limit: self.strike_limit_for(&id, declared.as_ref()),
            id,
            instance: self.next_instance(),
            origin: PluginOrigin::Wasm,
            mask,
            timeout,
            conn: Conn::Wasm(conn),
            declared,
            admission,
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
