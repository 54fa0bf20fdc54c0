//! Test helpers: an in-process fake NRI runtime built from nri-ttrpc +
//! nri-mux, and a recording plugin.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use nri_api::api::{
    self, ConfigureRequest, ConfigureResponse, Container, ContainerAdjustment, ContainerUpdate,
    CreateContainerResponse, Empty, Event, KeyValue, LinuxResources, PodSandbox,
    RegisterPluginRequest, StopContainerResponse, SynchronizeRequest, SynchronizeResponse,
    UpdateContainerResponse, UpdateContainersRequest, UpdateContainersResponse,
    ValidateContainerAdjustmentRequest,
};
use nri_api::{PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncKind};
use nri_ttrpc::{CallOptions, Client, Methods, Server, Status};
use prost::Message;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// How the fake runtime answers RegisterPlugin.
#[derive(Clone, Debug)]
pub enum Register {
    Accept,
    Refuse(String),
    /// Never answer.
    Hang,
    /// Answer after this delay.
    Delay(Duration),
}

/// A fake runtime listening on a socket in a temp dir.
pub struct FakeRuntime {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    listener: UnixListener,
}

impl FakeRuntime {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nri.sock");
        let listener = UnixListener::bind(&path).unwrap();
        FakeRuntime {
            dir,
            path,
            listener,
        }
    }

    /// Accepts one plugin connection.
    pub async fn accept(&self, register: Register) -> RuntimeConn {
        let (stream, _) = self.listener.accept().await.unwrap();
        RuntimeConn::new(stream, register)
    }

    /// Accepts one plugin connection and hands over the raw socket (no
    /// multiplexer): for tests that write bytes of their own.
    pub async fn accept_raw(&self) -> UnixStream {
        self.listener.accept().await.unwrap().0
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
}

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

/// The runtime's side of one plugin connection.
pub struct RuntimeConn {
    pub mux: Mux,
    pub client: Client,
    registrations: tokio::sync::Mutex<mpsc::UnboundedReceiver<RegisterPluginRequest>>,
    pub updates: tokio::sync::Mutex<mpsc::UnboundedReceiver<UpdateContainersRequest>>,
    stop: CancellationToken,
    server: JoinHandle<()>,
}

impl Drop for RuntimeConn {
    fn drop(&mut self) {
        self.stop.cancel();
        self.server.abort();
        self.client.close();
        self.mux.close();
    }
}

impl RuntimeConn {
    pub fn new(stream: UnixStream, register: Register) -> Self {
        let mux = Mux::new_paused(stream);
        let to_plugin = mux.open(PLUGIN_SERVICE_CONN).unwrap();
        let from_plugin = mux.open(RUNTIME_SERVICE_CONN).unwrap();
        mux.start();
        let (reg_tx, reg_rx) = mpsc::unbounded_channel();
        let (upd_tx, upd_rx) = mpsc::unbounded_channel();
        let methods = Methods::new()
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
                        // Report the first update as failed, to check the answer travels back.
                        let failed = req.update.iter().take(1).cloned().collect();
                        let _ = upd_tx.send(req);
                        Ok(UpdateContainersResponse { failed })
                    }
                },
            );
        let mut server = Server::new();
        server.register(RUNTIME_SERVICE, methods).unwrap();
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
        }
    }

    pub async fn registered(&self) -> RegisterPluginRequest {
        self.registrations
            .lock()
            .await
            .recv()
            .await
            .expect("registration")
    }

    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        m: &str,
        req: &Req,
    ) -> Result<Resp, nri_ttrpc::Error> {
        self.client
            .call_message(PLUGIN_SERVICE, m, req, CallOptions::new(TIMEOUT))
            .await
    }

    pub async fn call_raw(&self, m: &str, payload: Bytes) -> Result<Bytes, nri_ttrpc::Error> {
        self.client
            .call(PLUGIN_SERVICE, m, payload, CallOptions::new(TIMEOUT))
            .await
    }

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

    pub async fn shutdown(&self) -> Result<Empty, nri_ttrpc::Error> {
        self.call(method::SHUTDOWN, &Empty {}).await
    }

    /// Stops answering the plugin's calls (RegisterPlugin, UpdateContainers).
    pub fn stop_serving(&self) {
        self.stop.cancel();
        self.server.abort();
    }

    pub fn close(&self) {
        self.client.close();
        self.mux.close();
    }
}

pub fn pod(id: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        name: format!("{id}-name"),
        uid: format!("{id}-uid"),
        namespace: "default".into(),
        ..Default::default()
    }
}

pub fn container(id: &str, pod: &str) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        name: format!("{id}-name"),
        ..Default::default()
    }
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub what: String,
    pub pod: String,
    pub container: String,
}

/// A plugin that implements every method and records each call.
pub struct Recorder {
    pub tx: mpsc::UnboundedSender<Call>,
    pub syncs: Mutex<Vec<(usize, usize, SyncKind)>>,
    pub configs: Mutex<Vec<String>>,
    pub sync_updates: Vec<ContainerUpdate>,
    pub disconnects: Mutex<Vec<(tokio::time::Instant, String)>>,
    /// Subscription returned from configure.
    pub configure_events: Option<EventMask>,
}

impl Recorder {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Call>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Recorder {
                tx,
                syncs: Mutex::new(Vec::new()),
                configs: Mutex::new(Vec::new()),
                sync_updates: Vec::new(),
                disconnects: Mutex::new(Vec::new()),
                configure_events: None,
            },
            rx,
        )
    }

    fn rec(&self, what: &str, pod: &PodSandbox, ctr: Option<&Container>) {
        let _ = self.tx.send(Call {
            what: what.into(),
            pod: pod.id.clone(),
            container: ctr.map(|c| c.id.clone()).unwrap_or_default(),
        });
    }
}

/// The adjustment the Recorder answers for CreateContainer.
pub fn recorder_adjustment(ctr: &Container) -> ContainerAdjustment {
    let mut adjust = ContainerAdjustment::default();
    adjust.env.push(KeyValue {
        key: "RECORDER".into(),
        value: ctr.id.clone(),
    });
    adjust
        .annotations
        .insert("recorder.example.com/seen".into(), ctr.name.clone());
    adjust
}

pub fn recorder_update(ctr: &str) -> ContainerUpdate {
    ContainerUpdate {
        container_id: ctr.into(),
        linux: Some(api::LinuxContainerUpdate {
            resources: Some(LinuxResources {
                cpu: Some(api::LinuxCpu {
                    shares: Some(api::OptionalUInt64 { value: 512 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    }
}

#[nri_plugin::plugin]
impl Plugin for Recorder {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        self.configs.lock().unwrap().push(info.config.clone());
        Ok(self.configure_events)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.syncs
            .lock()
            .unwrap()
            .push((pods.len(), containers.len(), kind));
        let _ = self.tx.send(Call {
            what: format!("Synchronize {kind:?}"),
            pod: pods.len().to_string(),
            container: containers.len().to_string(),
        });
        Ok(self.sync_updates.clone())
    }

    async fn shutdown(&self) {
        let _ = self.tx.send(Call {
            what: "Shutdown".into(),
            pod: String::new(),
            container: String::new(),
        });
    }

    fn disconnected(&self, cause: &nri_plugin::Error) {
        self.disconnects
            .lock()
            .unwrap()
            .push((tokio::time::Instant::now(), cause.to_string()));
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.rec("RunPodSandbox", &pod, None);
        Ok(())
    }
    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _o: Option<LinuxResources>,
        _r: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        self.rec("UpdatePodSandbox", &pod, None);
        Ok(())
    }
    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.rec("PostUpdatePodSandbox", &pod, None);
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.rec("StopPodSandbox", &pod, None);
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.rec("RemovePodSandbox", &pod, None);
        Ok(())
    }
    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.rec("CreateContainer", &pod, Some(&ctr));
        Ok(CreateContainerResponse {
            adjust: Some(recorder_adjustment(&ctr)),
            update: vec![],
            evict: vec![],
        })
    }
    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.rec("PostCreateContainer", &pod, Some(&ctr));
        Ok(())
    }
    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.rec("StartContainer", &pod, Some(&ctr));
        Ok(())
    }
    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.rec("PostStartContainer", &pod, Some(&ctr));
        Ok(())
    }
    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _r: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.rec("UpdateContainer", &pod, Some(&ctr));
        Ok(UpdateContainerResponse {
            update: vec![recorder_update(&ctr.id)],
            evict: vec![],
        })
    }
    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.rec("PostUpdateContainer", &pod, Some(&ctr));
        Ok(())
    }
    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.rec("StopContainer", &pod, Some(&ctr));
        Ok(StopContainerResponse::default())
    }
    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.rec("RemoveContainer", &pod, Some(&ctr));
        Ok(())
    }
    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let ctr = req.container.clone().unwrap_or_default();
        self.rec(
            "ValidateContainerAdjustment",
            &req.pod.unwrap_or_default(),
            Some(&ctr),
        );
        if ctr.name.contains("reject") {
            return Err(HandlerError::msg("rejected by recorder"));
        }
        Ok(())
    }
}

/// Receives the next call, failing after a timeout.
pub async fn next_call(rx: &mut mpsc::UnboundedReceiver<Call>) -> Call {
    tokio::time::timeout(TIMEOUT, rx.recv())
        .await
        .expect("timed out waiting for a plugin call")
        .expect("recorder channel closed")
}

/// Events from `Event::ALL_EVENTS` as a mask.
pub fn mask(events: &[Event]) -> EventMask {
    EventMask::from_events(events)
}

/// Path of an example binary of this crate, building it once if missing.
pub fn example_bin(name: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _g = BUILD.lock().unwrap();
    // <target>/<profile>/deps/<test-binary>
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let bin = profile_dir.join("examples").join(name);
    if !bin.exists() {
        let target_dir = profile_dir.parent().unwrap();
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "nri-plugin", "--example", name])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cargo build --example {name} failed");
    }
    assert!(bin.exists(), "{} missing", bin.display());
    bin
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}
