//! Test harness: the shared fake runtime callbacks (nri-test-support) and
//! a fake plugin on its plugin end (no dependency on nri-plugin).
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub mod log_capture;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nri_api::api::*;
use nri_api::{EventMask, PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_runtime::{Adaptation, BoxFuture, Builder, CallbackError, RuntimeCallbacks, Snapshot};
use nri_test_support::plugin_end;
pub use nri_test_support::{eventually, eventually_some, go_peer};
use nri_ttrpc::{CallOptions, Client, Code, HandlerResult, Server, Status, service_fn};
use prost::Message;
use tokio_util::sync::CancellationToken;

/// Waits (20 s at most) until `f` holds; fails the test naming `what`
/// otherwise.
pub async fn until(what: &str, f: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(20), f).await,
        "timed out waiting until {what}"
    );
}

/// Starts CreateContainer of container `c` in pod `p` in the background
/// (with [`until_creations`], the tests hold it in flight at a plugin).
pub fn create_in_background(
    a: &Adaptation,
    c: &'static str,
) -> tokio::task::JoinHandle<Result<nri_runtime::CreateContainerOutcome, nri_runtime::Error>> {
    let a = a.clone();
    tokio::spawn(async move { a.create_container(&pod("p"), &ctr("p", c)).await })
}

/// Waits until `plugin` has had `n` CreateContainer requests.
pub async fn until_creations(plugin: &FakePlugin, n: usize) {
    until("the plugin has the creation request", || {
        let got = plugin.received();
        got.iter().filter(|r| r.method == "CreateContainer").count() == n
    })
    .await;
}

// ---------------------------------------------------------------- runtime

pub use nri_test_support::callbacks::FakeCallbacks as FakeRuntime;
pub use nri_test_support::fixtures::{ctr, pod};

pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub runtime: Arc<FakeRuntime>,
}

impl TestEnv {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run/nri.sock");
        Self {
            dir,
            socket,
            runtime: FakeRuntime::new(),
        }
    }

    /// A builder for a runtime with no launched plugins and a temp socket.
    pub fn builder(&self) -> Builder {
        Adaptation::builder("fake-runtime", "v1.2.3")
            .socket_path(&self.socket)
            .plugin_dir(self.dir.path().join("plugins"))
            .config_dir(self.dir.path().join("conf.d"))
    }

    pub async fn start(&self, b: Builder) -> Adaptation {
        let a = b.build(self.runtime.clone()).unwrap();
        a.start().await.unwrap();
        a
    }
}

/// How long [`wait_active`] and [`wait_active_exact`] wait.
const WAIT_ACTIVE: Duration = Duration::from_secs(10);

/// Waits until `n` plugins are active.
pub async fn wait_active(a: &Adaptation, n: usize) {
    let active = eventually(WAIT_ACTIVE, || a.plugins().len() >= n).await;
    assert!(
        active,
        "only {} plugins active, wanted {n}",
        a.plugins().len()
    );
}

/// Waits until exactly `n` plugins are active.
pub async fn wait_active_exact(a: &Adaptation, n: usize) {
    let active = eventually(WAIT_ACTIVE, || a.plugins().len() == n).await;
    assert!(active, "{} plugins active, wanted {n}", a.plugins().len());
}

// ---------------------------------------------------------------- plugin

/// One request a fake plugin received.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub plugin: String,
    /// ttRPC method.
    pub method: String,
    /// For StateChange: the event inside; else the event of the method.
    pub event: Option<Event>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub sync_pods: Vec<String>,
    pub sync_containers: Vec<String>,
    pub more: bool,
}

type CreateFn = dyn Fn(&CreateContainerRequest) -> CreateContainerResponse + Send + Sync;
type UpdateFn = dyn Fn(&UpdateContainerRequest) -> UpdateContainerResponse + Send + Sync;
type StopFn = dyn Fn(&StopContainerRequest) -> StopContainerResponse + Send + Sync;
type ValidateFn = dyn Fn(&ValidateContainerAdjustmentRequest) -> ValidateContainerAdjustmentResponse
    + Send
    + Sync;

/// How a fake plugin behaves.
#[derive(Clone)]
pub struct FakePlugin {
    pub name: String,
    pub idx: String,
    /// Mask returned from Configure (0 = all).
    pub events: i32,
    /// Answer UNIMPLEMENTED to the nine dedicated notification RPCs (an
    /// old plugin speaking only StateChange).
    pub legacy: bool,
    /// Methods (or StateChange event names) answered with an error.
    pub fail: Vec<String>,
    /// Delay before answering, per method (or StateChange event name).
    pub delay: HashMap<String, Duration>,
    pub on_create: Option<Arc<CreateFn>>,
    pub on_update: Option<Arc<UpdateFn>>,
    pub on_stop: Option<Arc<StopFn>>,
    pub on_validate: Option<Arc<ValidateFn>>,
    pub sync_updates: Vec<ContainerUpdate>,
    /// Shared log (several plugins may share one to check order).
    pub log: Arc<Mutex<Vec<Received>>>,
    /// Do not register at all (registration timeout tests).
    pub skip_register: bool,
    /// Announce that it takes wake hints (as our plugin SDK does).
    pub wake_hints: bool,
    /// Methods answered UNIMPLEMENTED although subscribed (a plugin with
    /// no handler for them).
    pub unimplemented: Vec<String>,
    /// The failure policy declared in the Configure answer.
    pub failure_policy: Option<FailurePolicy>,
    /// Per method (or StateChange event name): answer only once the gate
    /// has a permit (see [`Gate`]).
    pub hold: HashMap<String, Gate>,
    /// How long an UNIMPLEMENTED answer (`unimplemented`, `legacy`) takes.
    pub unimplemented_after: Duration,
}

/// A gate a fake plugin's handler waits at; `open` lets every waiting and
/// later call through.
#[derive(Clone)]
pub struct Gate(Arc<tokio::sync::Semaphore>);

impl Gate {
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(0)))
    }
    /// Lets every waiting and later call through; opening it again does
    /// nothing more.
    pub fn open(&self) {
        // A closed semaphore fails every acquire at once: `pass` returns.
        self.0.close();
    }
    async fn pass(&self) {
        let _ = self.0.acquire().await;
    }
}

impl FakePlugin {
    pub fn new(idx: &str, name: &str) -> Self {
        Self {
            name: name.into(),
            idx: idx.into(),
            events: 0,
            legacy: false,
            fail: Vec::new(),
            delay: HashMap::new(),
            on_create: None,
            on_update: None,
            on_stop: None,
            on_validate: None,
            sync_updates: Vec::new(),
            log: Arc::new(Mutex::new(Vec::new())),
            skip_register: false,
            wake_hints: false,
            unimplemented: Vec::new(),
            failure_policy: None,
            hold: HashMap::new(),
            unimplemented_after: Duration::ZERO,
        }
    }

    /// Answers UNIMPLEMENTED only after `d`.
    pub fn unimplemented_after(mut self, d: Duration) -> Self {
        self.unimplemented_after = d;
        self
    }

    async fn unimplemented_pause(&self) {
        if !self.unimplemented_after.is_zero() {
            tokio::time::sleep(self.unimplemented_after).await;
        }
    }

    /// Holds the answer to `what` until `gate` opens.
    pub fn hold(mut self, what: &str, gate: &Gate) -> Self {
        self.hold.insert(what.into(), gate.clone());
        self
    }

    /// Answers UNIMPLEMENTED to `method` (a ttRPC method name).
    pub fn unimplemented(mut self, method: &str) -> Self {
        self.unimplemented.push(method.into());
        self
    }
    /// Declares a failure policy in Configure.
    pub fn declare_policy(mut self, fail_request: bool, keep_connected: bool) -> Self {
        self.failure_policy = Some(FailurePolicy {
            fail_request,
            keep_connected,
        });
        self
    }

    pub fn wake_hints(mut self) -> Self {
        self.wake_hints = true;
        self
    }
    pub fn events(mut self, mask: EventMask) -> Self {
        self.events = mask.as_i32();
        self
    }
    pub fn legacy(mut self) -> Self {
        self.legacy = true;
        self
    }
    pub fn fail(mut self, what: &str) -> Self {
        self.fail.push(what.into());
        self
    }
    pub fn delay(mut self, what: &str, d: Duration) -> Self {
        self.delay.insert(what.into(), d);
        self
    }
    pub fn log_to(mut self, log: Arc<Mutex<Vec<Received>>>) -> Self {
        self.log = log;
        self
    }
    pub fn on_create(
        mut self,
        f: impl Fn(&CreateContainerRequest) -> CreateContainerResponse + Send + Sync + 'static,
    ) -> Self {
        self.on_create = Some(Arc::new(f));
        self
    }
    pub fn on_update(
        mut self,
        f: impl Fn(&UpdateContainerRequest) -> UpdateContainerResponse + Send + Sync + 'static,
    ) -> Self {
        self.on_update = Some(Arc::new(f));
        self
    }
    pub fn on_stop(
        mut self,
        f: impl Fn(&StopContainerRequest) -> StopContainerResponse + Send + Sync + 'static,
    ) -> Self {
        self.on_stop = Some(Arc::new(f));
        self
    }
    pub fn on_validate(
        mut self,
        f: impl Fn(&ValidateContainerAdjustmentRequest) -> ValidateContainerAdjustmentResponse
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.on_validate = Some(Arc::new(f));
        self
    }

    pub fn full_name(&self) -> String {
        format!("{}-{}", self.idx, self.name)
    }

    /// Received requests of this plugin so far.
    pub fn received(&self) -> Vec<Received> {
        let me = self.full_name();
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.plugin == me)
            .cloned()
            .collect()
    }

    /// Connects to `socket`, registers; returns when the runtime answered
    /// RegisterPlugin (Ok) or refused it (Err).
    pub async fn connect(self, socket: &Path) -> Result<Connected, nri_ttrpc::Error> {
        let stream = tokio::net::UnixStream::connect(socket).await?;
        self.connect_stream(stream).await
    }

    pub async fn connect_stream(
        self,
        stream: tokio::net::UnixStream,
    ) -> Result<Connected, nri_ttrpc::Error> {
        let me = Arc::new(self.clone());
        let svc = service_fn(move |ctx, payload: Bytes| {
            let me = me.clone();
            async move { me.handle(ctx.method(), payload).await }
        });
        let opts = plugin_end::Options {
            register: (!self.skip_register)
                .then(|| plugin_end::register_req(&self.idx, &self.name)),
            wake_hints: self.wake_hints,
        };
        let end = plugin_end::PluginEnd::connect(stream, svc, opts).await?;
        Ok(Connected {
            mux: end.mux,
            client: end.client,
            shutdown: end.shutdown,
            serving: end.serving,
            plugin: self,
        })
    }

    fn record(&self, r: Received) {
        self.log.lock().unwrap().push(r);
    }

    #[allow(clippy::too_many_lines)]
    async fn handle(&self, m: &str, payload: Bytes) -> HandlerResult {
        let mut rec = Received {
            plugin: self.full_name(),
            method: m.to_owned(),
            event: None,
            pod: None,
            container: None,
            sync_pods: vec![],
            sync_containers: vec![],
            more: false,
        };
        let bad = |e: prost::DecodeError| Status::new(Code::InvalidArgument, e.to_string());
        let mut key = m.to_owned();
        if self.unimplemented.iter().any(|u| u == m) {
            self.record(rec);
            self.unimplemented_pause().await;
            return Err(Status::unknown_method(m));
        }
        let reply: Vec<u8> = match m {
            method::CONFIGURE => {
                let _ = ConfigureRequest::decode(payload.clone()).map_err(bad)?;
                ConfigureResponse {
                    events: self.events,
                    failure_policy: self.failure_policy,
                }
                .encode_to_vec()
            }
            method::SYNCHRONIZE => {
                let r = SynchronizeRequest::decode(payload).map_err(bad)?;
                rec.sync_pods = r.pods.iter().map(|p| p.id.clone()).collect();
                rec.sync_containers = r.containers.iter().map(|c| c.id.clone()).collect();
                rec.more = r.more;
                if r.more {
                    SynchronizeResponse {
                        update: vec![],
                        more: true,
                    }
                    .encode_to_vec()
                } else {
                    SynchronizeResponse {
                        update: self.sync_updates.clone(),
                        more: false,
                    }
                    .encode_to_vec()
                }
            }
            method::SHUTDOWN => Empty {}.encode_to_vec(),
            method::STATE_CHANGE => {
                let r = StateChangeEvent::decode(payload).map_err(bad)?;
                let ev = Event::try_from(r.event).unwrap_or(Event::Unknown);
                rec.event = Some(ev);
                rec.pod = r.pod.map(|p| p.id);
                rec.container = r.container.map(|c| c.id);
                key = ev.pretty_name().to_owned();
                Empty {}.encode_to_vec()
            }
            method::CREATE_CONTAINER => {
                let r = CreateContainerRequest::decode(payload).map_err(bad)?;
                rec.event = Some(Event::CreateContainer);
                rec.pod = r.pod.as_ref().map(|p| p.id.clone());
                rec.container = r.container.as_ref().map(|c| c.id.clone());
                match &self.on_create {
                    Some(f) => f(&r).encode_to_vec(),
                    None => CreateContainerResponse::default().encode_to_vec(),
                }
            }
            method::UPDATE_CONTAINER => {
                let r = UpdateContainerRequest::decode(payload).map_err(bad)?;
                rec.event = Some(Event::UpdateContainer);
                rec.pod = r.pod.as_ref().map(|p| p.id.clone());
                rec.container = r.container.as_ref().map(|c| c.id.clone());
                match &self.on_update {
                    Some(f) => f(&r).encode_to_vec(),
                    None => UpdateContainerResponse::default().encode_to_vec(),
                }
            }
            method::STOP_CONTAINER => {
                let r = StopContainerRequest::decode(payload).map_err(bad)?;
                rec.event = Some(Event::StopContainer);
                rec.pod = r.pod.as_ref().map(|p| p.id.clone());
                rec.container = r.container.as_ref().map(|c| c.id.clone());
                match &self.on_stop {
                    Some(f) => f(&r).encode_to_vec(),
                    None => StopContainerResponse::default().encode_to_vec(),
                }
            }
            method::UPDATE_POD_SANDBOX => {
                let r = UpdatePodSandboxRequest::decode(payload).map_err(bad)?;
                rec.event = Some(Event::UpdatePodSandbox);
                rec.pod = r.pod.map(|p| p.id);
                UpdatePodSandboxResponse::default().encode_to_vec()
            }
            method::VALIDATE_CONTAINER_ADJUSTMENT => {
                let r = ValidateContainerAdjustmentRequest::decode(payload).map_err(bad)?;
                rec.event = Some(Event::ValidateContainerAdjustment);
                rec.pod = r.pod.as_ref().map(|p| p.id.clone());
                rec.container = r.container.as_ref().map(|c| c.id.clone());
                match &self.on_validate {
                    Some(f) => f(&r).encode_to_vec(),
                    None => ValidateContainerAdjustmentResponse::default().encode_to_vec(),
                }
            }
            other => {
                // One of the nine dedicated notification RPCs.
                let Some(ev) = Event::ALL_EVENTS
                    .into_iter()
                    .find(|e| e.method_name() == Some(other))
                else {
                    return Err(Status::unknown_method(other));
                };
                if self.legacy {
                    self.unimplemented_pause().await;
                    return Err(Status::unknown_method(other));
                }
                // All of them carry pod = 1, container = 2 (or only pod).
                let r = PostCreateContainerRequest::decode(payload).map_err(bad)?;
                rec.event = Some(ev);
                rec.pod = r.pod.map(|p| p.id);
                rec.container = r.container.map(|c| c.id);
                Empty {}.encode_to_vec()
            }
        };
        self.record(rec);
        if let Some(g) = self.hold.get(&key) {
            g.pass().await;
        }
        if let Some(d) = self.delay.get(&key) {
            tokio::time::sleep(*d).await;
        }
        if self.fail.contains(&key) {
            return Err(Status::new(
                Code::Unknown,
                format!("injected failure of {key}"),
            ));
        }
        Ok(Bytes::from(reply))
    }
}

/// A connected fake plugin.
pub struct Connected {
    pub mux: nri_mux::Mux,
    pub client: Client,
    pub shutdown: CancellationToken,
    pub serving: tokio::task::JoinHandle<()>,
    pub plugin: FakePlugin,
}

impl Connected {
    /// Simulates a crash: drops the connection.
    pub fn crash(&self) {
        self.shutdown.cancel();
        self.client.close();
        self.mux.close();
    }

    /// Sends an unsolicited UpdateContainers.
    pub async fn update_containers(
        &self,
        req: UpdateContainersRequest,
    ) -> Result<UpdateContainersResponse, nri_ttrpc::Error> {
        self.client
            .call_message(
                RUNTIME_SERVICE,
                method::UPDATE_CONTAINERS,
                &req,
                CallOptions::new(Duration::from_secs(5)),
            )
            .await
    }
}

/// The events (as pretty names) a plugin received, in order, excluding
/// Configure/Synchronize.
pub fn events_of(log: &[Received]) -> Vec<String> {
    log.iter()
        .filter_map(|r| r.event.map(|e| e.pretty_name().to_owned()))
        .collect()
}

// ---------------------------------------------------------------- metrics

/// One counted invocation: plugin, operation, result.
type Call = (String, String, Result<(), nri_runtime::ErrorClass>);

/// Metrics that record every counted plugin invocation and every value
/// of the consecutive-strikes gauge.
#[derive(Default)]
pub struct Recording {
    calls: Mutex<Vec<Call>>,
    strikes: Mutex<Vec<(String, u32)>>,
}

impl Recording {
    /// The results counted for `plugin` in `operation`, in order.
    pub fn results(
        &self,
        plugin: &str,
        operation: &str,
    ) -> Vec<Result<(), nri_runtime::ErrorClass>> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(p, o, _)| p == plugin && o == operation)
            .map(|(_, _, r)| *r)
            .collect()
    }

    /// The values `plugin`'s consecutive-strikes gauge was set to, in order.
    pub fn strikes(&self, plugin: &str) -> Vec<u32> {
        let strikes = self.strikes.lock().unwrap();
        strikes
            .iter()
            .filter(|(p, _)| p == plugin)
            .map(|(_, n)| *n)
            .collect()
    }
}

impl nri_runtime::Metrics for Recording {
    fn plugin_invocation(
        &self,
        plugin: &str,
        operation: &str,
        result: Result<(), nri_runtime::ErrorClass>,
    ) {
        let call = (plugin.to_owned(), operation.to_owned(), result);
        self.calls.lock().unwrap().push(call);
    }

    fn plugin_strikes(&self, plugin: &str, _operation: &str, consecutive: u32) {
        let value = (plugin.to_owned(), consecutive);
        self.strikes.lock().unwrap().push(value);
    }
}
