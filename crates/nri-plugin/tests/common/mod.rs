//! Test helpers: the shared fake runtime (nri-test-support) and a
//! recording plugin.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nri_api::api::{
    self, Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse, Event,
    KeyValue, LinuxResources, PodSandbox, StopContainerResponse, UpdateContainerResponse,
    ValidateContainerAdjustmentRequest,
};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncKind};
use tokio::sync::mpsc;

pub use nri_test_support::TIMEOUT;
pub use nri_test_support::fake_runtime::{
    FakeRuntime, Register, RuntimeConn, configure_as, configure_req,
};
pub use nri_test_support::fixtures::pod;

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

/// The next call whose name starts with `what` (earlier calls skipped).
pub async fn next_call_of(rx: &mut mpsc::UnboundedReceiver<Call>, what: &str) -> Call {
    loop {
        let c = next_call(rx).await;
        if c.what.starts_with(what) {
            return c;
        }
    }
}

/// A stub of `plugin` named `10-test` that dials `rt`.
pub fn test_stub<P: Plugin>(plugin: P, rt: &FakeRuntime) -> nri_plugin::Stub<P> {
    nri_plugin::Builder::new(plugin)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .build()
        .unwrap()
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

/// Waits until the plugin's connection is configured; returns whether its
/// reader spins for the runtime's requests.
pub async fn read_strategy_chosen(handle: &nri_plugin::PluginHandle) -> bool {
    nri_test_support::eventually_some(TIMEOUT, || handle.spins())
        .await
        .expect("the read strategy is chosen once configured")
}
