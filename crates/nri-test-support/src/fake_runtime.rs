//! The runtime's end of a plugin connection, written directly on nri-mux
//! and nri-ttrpc: a socket a plugin dials, RegisterPlugin answered as the
//! test chooses, and calls to the plugin's service.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use nri_api::api::{
    ConfigureRequest, ConfigureResponse, Container, Empty, PodSandbox, RegisterPluginRequest,
    SynchronizeRequest, SynchronizeResponse, UpdateContainersRequest, UpdateContainersResponse,
};
use nri_api::{PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{CallOptions, Client, Methods, Server, Status};
use prost::Message;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::TIMEOUT;

/// How the fake runtime answers RegisterPlugin.
#[derive(Clone, Debug)]
pub enum Register {
    /// Accept the plugin.
    Accept,
    /// Refuse it with this message.
    Refuse(String),
    /// Never answer.
    Hang,
    /// Accept after this delay.
    Delay(Duration),
}

/// A fake runtime listening on `nri.sock` in a temp dir.
pub struct FakeRuntime {
    /// The temp dir holding the socket.
    pub dir: tempfile::TempDir,
    /// The socket path.
    pub path: PathBuf,
    listener: Option<UnixListener>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntime {
    /// Binds the socket.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nri.sock");
        let listener = Some(UnixListener::bind(&path).unwrap());
        FakeRuntime {
            dir,
            path,
            listener,
        }
    }

    /// Accepts one plugin connection.
    pub async fn accept(&self, register: Register) -> RuntimeConn {
        RuntimeConn::new(self.accept_raw().await, register)
    }

    /// Accepts one plugin connection and hands over the raw socket (no
    /// multiplexer): for tests that write bytes of their own.
    pub async fn accept_raw(&self) -> UnixStream {
        let listener = self.listener.as_ref().expect("the fake runtime is down");
        listener.accept().await.unwrap().0
    }

    /// Accepts, waits for registration and configures (`v0.12.2`).
    pub async fn accept_configured(&self) -> RuntimeConn {
        let conn = self.accept(Register::Accept).await;
        conn.registered().await;
        conn.configure(configure_req("v0.12.2")).await.unwrap();
        conn
    }

    /// [`accept_configured`](Self::accept_configured), then synchronizes
    /// with nothing.
    pub async fn accept_ready(&self) -> RuntimeConn {
        let conn = self.accept_configured().await;
        conn.sync(vec![], vec![]).await.unwrap();
        conn
    }

    /// Stops listening and removes the socket (the runtime went down).
    pub fn down(&mut self) {
        self.listener = None;
        let _ = std::fs::remove_file(&self.path);
    }

    /// Listens again at the same path (the runtime restarted).
    pub fn up(&mut self) {
        self.listener = Some(UnixListener::bind(&self.path).unwrap());
    }
}

/// A Configure request from `fake-runtime v1.0.0` with 5 s registration
/// and 2 s request timeouts.
pub fn configure_req(nri_version: &str) -> ConfigureRequest {
    ConfigureRequest {
        config: String::new(),
        runtime_name: "fake-runtime".into(),
        runtime_version: "v1.0.0".into(),
        registration_timeout: 5000,
        request_timeout: 2000,
        nri_version: nri_version.into(),
    }
}

/// A Configure request as `runtime_name` `runtime_version` sends it, with
/// `nri_version` (empty for runtimes before NRI v0.12, which send none)
/// and the timeouts of [`configure_req`].
pub fn configure_as(
    runtime_name: &str,
    runtime_version: &str,
    nri_version: &str,
) -> ConfigureRequest {
    ConfigureRequest {
        runtime_name: runtime_name.into(),
        runtime_version: runtime_version.into(),
        ..configure_req(nri_version)
    }
}

/// The runtime's side of one plugin connection. Dropping it closes the
/// connection and stops every task it started.
pub struct RuntimeConn {
    /// The connection's multiplexer.
    pub mux: Mux,
    /// Client of the plugin's service.
    pub client: Client,
    registrations: tokio::sync::Mutex<mpsc::UnboundedReceiver<RegisterPluginRequest>>,
    /// UpdateContainers requests the plugin sent (each answered with its
    /// first update reported as failed, so tests see the answer travel).
    pub updates: tokio::sync::Mutex<mpsc::UnboundedReceiver<UpdateContainersRequest>>,
    stop: CancellationToken,
    server: JoinHandle<()>,
    sends: std::sync::Mutex<JoinSet<()>>,
}

impl Drop for RuntimeConn {
    fn drop(&mut self) {
        self.stop.cancel();
        self.server.abort();
        if let Ok(mut sends) = self.sends.lock() {
            sends.abort_all();
        }
        self.client.close();
        self.mux.close();
    }
}

fn runtime_methods(
    register: Register,
    reg_tx: mpsc::UnboundedSender<RegisterPluginRequest>,
    upd_tx: mpsc::UnboundedSender<UpdateContainersRequest>,
) -> Methods {
    Methods::new()
        .add_message(
            method::REGISTER_PLUGIN,
            move |_ctx, req: RegisterPluginRequest| {
                let reg_tx = reg_tx.clone();
                let register = register.clone();
                async move {
                    let _ = reg_tx.send(req);
                    match register {
                        Register::Accept => Ok(Empty {}),
                        Register::Refuse(m) => Err(Status::new(nri_ttrpc::Code::Unknown, m)),
                        Register::Hang => std::future::pending().await,
                        Register::Delay(d) => {
                            tokio::time::sleep(d).await;
                            Ok(Empty {})
                        }
                    }
                }
            },
        )
        .add_message(
            method::UPDATE_CONTAINERS,
            move |_ctx, req: UpdateContainersRequest| {
                let upd_tx = upd_tx.clone();
                async move {
                    let failed = req.update.iter().take(1).cloned().collect();
                    let _ = upd_tx.send(req);
                    Ok(UpdateContainersResponse { failed })
                }
            },
        )
}

impl RuntimeConn {
    /// Serves the runtime service on `stream` and starts the multiplexer.
    pub fn new(stream: UnixStream, register: Register) -> Self {
        let mux = Mux::new_paused(stream);
        let to_plugin = mux.open(PLUGIN_SERVICE_CONN).unwrap();
        let from_plugin = mux.open(RUNTIME_SERVICE_CONN).unwrap();
        mux.start();
        let (reg_tx, reg_rx) = mpsc::unbounded_channel();
        let (upd_tx, upd_rx) = mpsc::unbounded_channel();
        let mut server = Server::new();
        server
            .register(RUNTIME_SERVICE, runtime_methods(register, reg_tx, upd_tx))
            .unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn({
            let stop = stop.clone();
            async move {
                let _ = server.serve(from_plugin, stop).await;
            }
        });
        RuntimeConn {
            mux,
            client: Client::new(to_plugin),
            registrations: tokio::sync::Mutex::new(reg_rx),
            updates: tokio::sync::Mutex::new(upd_rx),
            stop,
            server,
            sends: std::sync::Mutex::new(JoinSet::new()),
        }
    }

    /// [`new`](Self::new), plus a second handle on the same socket for
    /// writing bytes behind the multiplexer's back.
    pub fn with_raw(stream: UnixStream, register: Register) -> (Self, UnixStream) {
        let std = stream.into_std().unwrap();
        let raw = UnixStream::from_std(std.try_clone().unwrap()).unwrap();
        let stream = UnixStream::from_std(std).unwrap();
        (Self::new(stream, register), raw)
    }

    /// The next RegisterPlugin request the plugin sent.
    pub async fn registered(&self) -> RegisterPluginRequest {
        self.registrations
            .lock()
            .await
            .recv()
            .await
            .expect("registration")
    }

    /// Calls method `m` of the plugin service.
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        m: &str,
        req: &Req,
    ) -> Result<Resp, nri_ttrpc::Error> {
        self.client
            .call_message(PLUGIN_SERVICE, m, req, CallOptions::new(TIMEOUT))
            .await
    }

    /// Calls method `m` of the plugin service with an encoded payload.
    pub async fn call_raw(&self, m: &str, payload: Bytes) -> Result<Bytes, nri_ttrpc::Error> {
        self.client
            .call(PLUGIN_SERVICE, m, payload, CallOptions::new(TIMEOUT))
            .await
    }

    /// Sends a request without waiting for the answer; the call runs in a
    /// task owned by this connection (aborted when it drops).
    pub fn send<Req: Message + Send + 'static>(
        &self,
        m: &'static str,
        req: Req,
        deadline: Duration,
    ) {
        let client = self.client.clone();
        self.sends.lock().unwrap().spawn(async move {
            let _ = client
                .call_message::<_, Empty>(PLUGIN_SERVICE, m, &req, CallOptions::new(deadline))
                .await;
        });
    }

    /// Configure.
    pub async fn configure(
        &self,
        req: ConfigureRequest,
    ) -> Result<ConfigureResponse, nri_ttrpc::Error> {
        self.call(method::CONFIGURE, &req).await
    }

    /// One-message synchronization.
    pub async fn sync(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Result<SynchronizeResponse, nri_ttrpc::Error> {
        self.call(
            method::SYNCHRONIZE,
            &SynchronizeRequest {
                pods,
                containers,
                more: false,
            },
        )
        .await
    }

    /// Shutdown.
    pub async fn shutdown(&self) -> Result<Empty, nri_ttrpc::Error> {
        self.call(method::SHUTDOWN, &Empty {}).await
    }

    /// Stops answering the plugin's calls (RegisterPlugin, UpdateContainers).
    pub fn stop_serving(&self) {
        self.stop.cancel();
        self.server.abort();
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.client.close();
        self.mux.close();
    }
}
