//! The plugin's end of a runtime connection, written directly on nri-mux
//! and nri-ttrpc (no plugin SDK): serve a plugin service, register.

use std::time::Duration;

use nri_api::api::{Empty, RegisterPluginRequest};
use nri_api::{PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{CallOptions, Client, Server, Service};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Deadline of the RegisterPlugin call.
const REGISTER_DEADLINE: Duration = Duration::from_secs(30);

/// A RegisterPlugin request for plugin `idx`-`name` speaking NRI v0.12.2.
pub fn register_req(idx: &str, name: &str) -> RegisterPluginRequest {
    RegisterPluginRequest {
        plugin_name: name.into(),
        plugin_idx: idx.into(),
        nri_version: "v0.12.2".into(),
    }
}

/// What [`PluginEnd::connect`] sets up.
pub struct Options {
    /// Register with this request (`None`: do not register at all).
    pub register: Option<RegisterPluginRequest>,
    /// Announce that this end takes wake hints, as our plugin SDK does.
    pub wake_hints: bool,
}

/// The plugin's end of a connection: `service` served on the plugin
/// service connection, a client of the runtime service.
pub struct PluginEnd {
    /// The connection's multiplexer.
    pub mux: Mux,
    /// Client of the runtime service.
    pub client: Client,
    /// Cancels serving.
    pub shutdown: CancellationToken,
    /// The serving task.
    pub serving: JoinHandle<()>,
}

impl PluginEnd {
    /// Serves `service` as the plugin service on `stream`, starts the
    /// multiplexer and registers as `opts` says; returns when the runtime
    /// answered RegisterPlugin (Ok) or refused it (Err, connection closed).
    pub async fn connect(
        stream: UnixStream,
        service: impl Service,
        opts: Options,
    ) -> Result<PluginEnd, nri_ttrpc::Error> {
        let mux = Mux::new_paused(stream);
        let from_runtime = mux.open(PLUGIN_SERVICE_CONN).unwrap();
        let to_runtime = mux.open(RUNTIME_SERVICE_CONN).unwrap();
        let mut server = Server::new();
        server.register(PLUGIN_SERVICE, service).unwrap();
        let shutdown = CancellationToken::new();
        let serving = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                let _ = server.serve(from_runtime, shutdown).await;
            }
        });
        let client = Client::new(to_runtime);
        if opts.wake_hints {
            assert!(mux.accept_wake_hints());
        }
        mux.start();
        let end = PluginEnd {
            mux,
            client,
            shutdown,
            serving,
        };
        if let Some(req) = opts.register {
            let r: Result<Empty, _> = end
                .client
                .call_message(
                    RUNTIME_SERVICE,
                    method::REGISTER_PLUGIN,
                    &req,
                    CallOptions::new(REGISTER_DEADLINE),
                )
                .await;
            if let Err(e) = r {
                end.shutdown.cancel();
                end.mux.close();
                return Err(e);
            }
        }
        Ok(end)
    }
}
