//! Test harness: our runtime library as the upstream runtime (a fake
//! container runtime behind it), the proxy, and plugins on our SDK behind
//! the proxy.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::*;
use nri_plugin::{Builder, ConnectMode, EventMask, HandlerResult, Plugin, PluginHandle, SyncKind};
use nri_proxy::{Proxy, ProxyConfig};
use nri_runtime::{Adaptation, ConfigFormat};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

// ------------------------------------------------------------ upstream

// The container runtime above the proxy is the workspace's recording
// callbacks: it lists pods and containers, records unsolicited updates and
// answers them with `fail_updates`.
pub use nri_test_support::callbacks::FakeCallbacks;
pub use nri_test_support::fixtures::{ctr, pod};

/// Polls `cond` until it holds (failing after 20 s).
pub async fn until(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        nri_test_support::eventually(Duration::from_secs(20), cond).await,
        "timed out waiting for {what}"
    );
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub upstream_socket: PathBuf,
    pub proxy_socket: PathBuf,
    pub runtime: Arc<FakeCallbacks>,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Env {
            upstream_socket: dir.path().join("up/nri.sock"),
            proxy_socket: dir.path().join("proxy/nri.sock"),
            runtime: FakeCallbacks::new(),
            dir,
        }
    }

    /// The runtime above the proxy, started.
    pub async fn upstream(&self, request_timeout: Duration) -> Adaptation {
        self.upstream_with(request_timeout, nri_api::DEFAULT_REGISTRATION_TIMEOUT)
            .await
    }

    /// The runtime above the proxy with both of its timeouts, started.
    pub async fn upstream_with(
        &self,
        request_timeout: Duration,
        registration_timeout: Duration,
    ) -> Adaptation {
        let a = Adaptation::builder("fake-containerd", "v2.3.0")
            .socket_path(&self.upstream_socket)
            .disable_launch(true)
            .request_timeout(request_timeout)
            .registration_timeout(registration_timeout)
            .build(self.runtime.clone())
            .unwrap();
        a.start().await.unwrap();
        a
    }

    /// The proxy's configuration: `extra` YAML (top-level runtime keys
    /// and/or more `proxy:` keys under `proxy_extra`).
    pub fn config(&self, extra: &str, proxy_extra: &str) -> ProxyConfig {
        let text = format!(
            "socket-path: {}\ndisable-launch: true\n{extra}\nproxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: {}\n{proxy_extra}",
            self.proxy_socket.display(),
            self.upstream_socket.display()
        );
        ProxyConfig::parse("proxy.yaml", ConfigFormat::Yaml, &text).unwrap()
    }
}

/// A running proxy.
pub struct Running {
    pub proxy: Arc<Proxy>,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), nri_proxy::Error>>,
}

impl Running {
    pub async fn start(config: ProxyConfig) -> Running {
        let proxy = Arc::new(Proxy::new(config).unwrap());
        let shutdown = CancellationToken::new();
        let (p, s) = (proxy.clone(), shutdown.clone());
        let task = tokio::spawn(async move { p.run(s).await });
        Running {
            proxy,
            shutdown,
            task,
        }
    }

    /// Waits until the proxy serves its plugins.
    pub async fn wait_serving(&self, socket: &std::path::Path) {
        until("the proxy's socket", || socket.exists()).await;
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

// ------------------------------------------------------------ plugins

/// Pod and container ids of one Synchronize.
pub type Synced = (Vec<String>, Vec<String>);

/// A plugin behind the proxy: logs its events, adds env `key=value` on
/// CreateContainer, may be slow there.
#[derive(Clone, Default)]
pub struct TestPlugin {
    pub env: Option<(String, String)>,
    pub create_delay: Option<Duration>,
    /// CreateContainer waits for a permit of this semaphore (after logging
    /// the event) before it answers.
    pub hold_create: Option<Arc<tokio::sync::Semaphore>>,
    pub log: Arc<Mutex<Vec<String>>>,
    pub synced: Arc<Mutex<Vec<Synced>>>,
    /// Containers whose CreateContainer this plugin has answered.
    pub answered: Arc<Mutex<Vec<String>>>,
    /// Container events that arrived while the plugin had not answered
    /// (or been synchronized with) the container's creation.
    pub overtaken: Arc<Mutex<Vec<String>>>,
    /// PostUpdateContainer notifications, kept apart from `log`: the
    /// container and its memory limit.
    pub post_updates: Arc<Mutex<Vec<PostUpdate>>>,
}

impl TestPlugin {
    pub fn adding(key: &str, value: &str) -> Self {
        TestPlugin {
            env: Some((key.into(), value.into())),
            ..Default::default()
        }
    }
    pub fn slow(mut self, d: Duration) -> Self {
        self.create_delay = Some(d);
        self
    }
    /// CreateContainer waits for a permit of `hold` before answering.
    pub fn held(mut self, hold: Arc<tokio::sync::Semaphore>) -> Self {
        self.hold_create = Some(hold);
        self
    }
    pub fn events(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    fn note(&self, e: &str, id: &str) {
        self.log.lock().unwrap().push(format!("{e}:{id}"));
    }
    /// Notes a container event, and whether it overtook the creation.
    fn note_ctr(&self, e: &str, id: &str) {
        self.note(e, id);
        let synced = (self.synced.lock().unwrap().iter()).any(|(_, c)| c.iter().any(|x| x == id));
        if !synced && !self.answered.lock().unwrap().iter().any(|x| x == id) {
            self.overtaken.lock().unwrap().push(format!("{e}:{id}"));
        }
    }
}

#[nri_plugin::plugin]
impl Plugin for TestPlugin {
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.synced.lock().unwrap().push((
            pods.into_iter().map(|p| p.id).collect(),
            containers.into_iter().map(|c| c.id).collect(),
        ));
        Ok(Vec::new())
    }
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.note("RunPodSandbox", &pod.id);
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.note("StopPodSandbox", &pod.id);
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.note("RemovePodSandbox", &pod.id);
        Ok(())
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        c: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.note("CreateContainer", &c.id);
        if let Some(d) = self.create_delay {
            tokio::time::sleep(d).await;
        }
        if let Some(h) = &self.hold_create {
            h.acquire().await.unwrap().forget();
        }
        self.answered.lock().unwrap().push(c.id.clone());
        let mut adjust = ContainerAdjustment::default();
        if let Some((k, v)) = &self.env {
            adjust.env.push(KeyValue {
                key: k.clone(),
                value: v.clone(),
            });
        }
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
    async fn start_container(&self, _pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.note_ctr("StartContainer", &c.id);
        Ok(())
    }
    async fn stop_container(
        &self,
        _pod: PodSandbox,
        c: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.note_ctr("StopContainer", &c.id);
        Ok(StopContainerResponse::default())
    }
    async fn remove_container(&self, _pod: PodSandbox, c: Container) -> HandlerResult<()> {
        self.note_ctr("RemoveContainer", &c.id);
        Ok(())
    }
    async fn post_update_container(&self, _pod: PodSandbox, c: Container) -> HandlerResult<()> {
        let limit = c.memory_limit();
        self.post_updates.lock().unwrap().push((c.id, limit));
        Ok(())
    }
}

/// A PostUpdateContainer as a plugin got it: the container and its memory
/// limit.
pub type PostUpdate = (String, Option<i64>);

/// Plugins behind the proxy, each running its stub in an owned task.
#[derive(Default)]
pub struct Behind {
    tasks: JoinSet<Result<(), nri_plugin::Error>>,
    pub handles: Vec<PluginHandle>,
}

impl Behind {
    pub fn connect(
        &mut self,
        socket: &std::path::Path,
        idx: &str,
        name: &str,
        p: TestPlugin,
    ) -> PluginHandle {
        self.connect_with(socket, idx, name, p, None)
    }

    pub fn connect_with(
        &mut self,
        socket: &std::path::Path,
        idx: &str,
        name: &str,
        p: TestPlugin,
        events: Option<EventMask>,
    ) -> PluginHandle {
        let mut b = Builder::new(p)
            .name(name)
            .index(idx)
            .socket_path(socket)
            .mode(ConnectMode::External);
        if let Some(e) = events {
            b = b.events(e);
        }
        let stub = b.build().unwrap();
        let h = stub.handle();
        self.tasks.spawn(async move { stub.run().await });
        self.handles.push(h.clone());
        h
    }

    pub async fn stop(mut self) {
        for h in &self.handles {
            h.stop();
        }
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The value of the Prometheus sample `name` (a metric without labels, or
/// with its labels written out as in the text format) in the proxy's
/// registry.
pub fn metric(proxy: &Proxy, name: &str) -> Option<f64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, proxy.registry()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Env values of an adjustment, in order.
pub fn env_of(a: &ContainerAdjustment) -> Vec<String> {
    a.env
        .iter()
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect()
}

// ------------------------------------------------------------ lifecycles

/// Checks that one plugin's events (after its Synchronize `synced`) form a
/// valid lifecycle per pod and container: nothing created twice, nothing
/// started, stopped or removed before it was created (or synchronized),
/// nothing after its removal. Returns the containers and pods it holds at
/// the end (ids, sorted), for a comparison with the runtime's.
pub fn lifecycle(synced: &Synced, events: &[String]) -> Result<Synced, String> {
    use std::collections::BTreeMap;
    #[derive(PartialEq, Clone, Copy, Debug)]
    enum S {
        Live,
        Removed,
    }
    let mut pods: BTreeMap<String, S> = synced.0.iter().map(|p| (p.clone(), S::Live)).collect();
    let mut ctrs: BTreeMap<String, S> = synced.1.iter().map(|c| (c.clone(), S::Live)).collect();
    for (i, e) in events.iter().enumerate() {
        let (ev, id) = e.split_once(':').ok_or_else(|| format!("bad entry {e}"))?;
        let map = if ev.contains("PodSandbox") {
            &mut pods
        } else {
            &mut ctrs
        };
        let now = map.get(id).copied();
        let next = match (ev, now) {
            ("RunPodSandbox" | "CreateContainer", None) => S::Live,
            ("RunPodSandbox" | "CreateContainer", Some(_)) => {
                return Err(format!("#{i} {e}: created twice in {events:?}"));
            }
            (_, None) => return Err(format!("#{i} {e}: before its creation in {events:?}")),
            (_, Some(S::Removed)) => {
                return Err(format!("#{i} {e}: after its removal in {events:?}"));
            }
            ("RemovePodSandbox" | "RemoveContainer", Some(S::Live)) => S::Removed,
            (_, Some(S::Live)) => S::Live,
        };
        map.insert(id.to_owned(), next);
    }
    let live = |m: BTreeMap<String, S>| {
        m.into_iter()
            .filter(|(_, s)| *s == S::Live)
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
    };
    Ok((live(pods), live(ctrs)))
}
