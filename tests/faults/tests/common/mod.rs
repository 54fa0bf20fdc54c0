//! Shared harness of the fault suite.
//!
//! - [`no_panics`]: a panic hook that counts every panic in the process
//!   (including ones tokio would catch inside spawned tasks) so a test can
//!   assert that nothing panicked.
//! - [`LogCapture`]: a `tracing` subscriber writing into a buffer, to check
//!   that errors logged by the runtime name the plugin and the cause.
//! - [`Probe`]: a runtime `Metrics` sink that publishes the number of active
//!   plugins on a watch channel (tests wait on it: no polling sleeps) and
//!   records every invocation.
//! - [`Env`]: a real `nri_runtime::Adaptation` on a temp socket with a fake
//!   runtime behind it.
//! - [`Good`]: a well-behaved plugin on the `nri-plugin` SDK that counts the
//!   events it gets and adds one annotation in CreateContainer.
//! - [`RawPlugin`]: a hostile plugin that speaks the wire protocol by hand
//!   (mux frames and ttRPC frames written directly on the socket), so it
//!   can register properly and then misbehave at any layer.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod bad_plugin;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use nri_api::api::{
    self, ConfigureResponse, Container, ContainerUpdate, CreateContainerResponse, Empty, Event,
    PodSandbox, RegisterPluginRequest, SynchronizeResponse,
};
use nri_api::{RUNTIME_SERVICE, method};
use nri_plugin::{EventMask, HandlerResult, Plugin, SyncKind};
use nri_runtime::{Adaptation, BoxFuture, Builder, ErrorClass, Metrics};
use nri_ttrpc::codec::{self, Decoder, MessageType};
use nri_ttrpc::{Request, Response, Status};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Upper bound for anything a test waits for (real or paused time).
pub const WAIT: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------ panics

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

fn panics_of(thread: &str) -> usize {
    PANICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|t| *t == thread)
        .count()
}

/// Installs (once per test binary) a panic hook that records the thread of
/// every panic (tokio catches panics of spawned tasks; the hook still sees
/// them), then returns a guard; call [`PanicGuard::check`] at the end of
/// the test. Tests run on current-thread runtimes, so every task of a test
/// runs on the test's own thread and panics of parallel tests do not mix.
pub fn no_panics() -> PanicGuard {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(thread_name());
            // The default hook prints the message, and the backtrace when
            // RUST_BACKTRACE is set (docs/reliability.md runs with it).
            prev(info);
        }));
    });
    let thread = thread_name();
    PanicGuard {
        at_start: panics_of(&thread),
        thread,
    }
}

pub struct PanicGuard {
    at_start: usize,
    thread: String,
}

impl PanicGuard {
    /// Fails if this test's thread (and so any of its tasks) panicked since
    /// the guard was taken.
    pub fn check(self) {
        let now = panics_of(&self.thread);
        assert_eq!(
            now,
            self.at_start,
            "{} panic(s) happened during the test (see stderr)",
            now - self.at_start
        );
    }
}

// -------------------------------------------------------------------- logs

/// Captures `tracing` output of the current thread (use current-thread
/// runtimes, so every task of the test logs here).
///
/// One global subscriber (installed once) hands each event to the capture
/// of the thread that emitted it, if that thread has one. Scoped
/// subscribers (`set_default`) per test raced: tests starting and ending
/// on other threads recompute tracing's global level filter, and one that
/// finished could leave it at OFF while another test's capture was live,
/// which then captured nothing.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static THREAD_CAPTURE: std::cell::RefCell<Option<LogCapture>> =
        const { std::cell::RefCell::new(None) };
}

/// Ends the current thread's capture when dropped.
pub struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        THREAD_CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

/// The global subscriber's writer: the emitting thread's capture.
struct ThreadWriter;

impl std::io::Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        THREAD_CAPTURE.with(|c| {
            if let Some(cap) = &*c.borrow() {
                cap.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    pub fn install() -> (Self, CaptureGuard) {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            let sub = tracing_subscriber::fmt()
                .with_writer(|| ThreadWriter)
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .finish();
            // A test binary that set its own global subscriber keeps it.
            let _ = tracing::subscriber::set_global_default(sub);
        });
        let cap = LogCapture::default();
        THREAD_CAPTURE.with(|c| *c.borrow_mut() = Some(cap.clone()));
        (cap, CaptureGuard(()))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
    /// Lines containing every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
            .collect()
    }
}

// ------------------------------------------------------------------- probe

/// One plugin invocation as seen by the runtime's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub plugin: String,
    pub operation: String,
    pub result: Result<(), ErrorClass>,
}

/// Metrics sink: active plugin count on a watch channel, invocations logged.
pub struct Probe {
    active: watch::Sender<usize>,
    pub invocations: Mutex<Vec<Invocation>>,
}

impl Probe {
    pub fn new() -> Arc<Self> {
        Arc::new(Probe {
            active: watch::channel(0).0,
            invocations: Mutex::new(Vec::new()),
        })
    }
    /// Waits until exactly `n` plugins are active.
    pub async fn active(&self, n: usize) {
        let mut rx = self.active.subscribe();
        let r = tokio::time::timeout(WAIT, rx.wait_for(|c| *c == n)).await;
        assert!(
            matches!(r, Ok(Ok(_))),
            "wanted {n} active plugins, have {}",
            *self.active.borrow()
        );
    }
    pub fn active_now(&self) -> usize {
        *self.active.borrow()
    }
    pub fn errors_of(&self, plugin: &str) -> Vec<(String, ErrorClass)> {
        self.invocations
            .lock()
            .unwrap()
            .iter()
            .filter(|i| i.plugin == plugin)
            .filter_map(|i| i.result.err().map(|e| (i.operation.clone(), e)))
            .collect()
    }
}

impl Metrics for Probe {
    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        self.invocations.lock().unwrap().push(Invocation {
            plugin: plugin.into(),
            operation: operation.into(),
            result,
        });
    }
    fn active_plugins(&self, count: usize) {
        self.active.send_replace(count);
    }
}

// ----------------------------------------------------------------- runtime

/// Fake runtime callbacks: list what they were given, record updates.
pub use nri_test_support::callbacks::FakeCallbacks as FakeRuntime;
pub use nri_test_support::fixtures::{ctr, pod};

/// A runtime under test: temp dir, socket, probe.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub probe: Arc<Probe>,
    pub runtime: Arc<FakeRuntime>,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run/nri.sock");
        Env {
            dir,
            socket,
            probe: Probe::new(),
            runtime: Arc::new(FakeRuntime::default()),
        }
    }
    pub fn builder(&self) -> Builder {
        Adaptation::builder("fault-runtime", "v0.0.1")
            .socket_path(&self.socket)
            .plugin_dir(self.dir.path().join("plugins"))
            .config_dir(self.dir.path().join("conf.d"))
            .metrics(self.probe.clone())
    }
    pub async fn start(&self, b: Builder) -> Adaptation {
        let a = b.build(self.runtime.clone()).unwrap();
        a.start().await.unwrap();
        a
    }
    /// Starts the runtime of `b` with a [`GoodPlugin`] connected, once it
    /// is active: the set-up most tests begin with.
    pub async fn start_with_good(&self, b: Builder) -> (Adaptation, GoodPlugin) {
        let a = self.start(b).await;
        let good = GoodPlugin::start(&self.socket);
        self.probe.active(1).await;
        (a, good)
    }
}

// -------------------------------------------------------------- good plugin

/// Annotation the good plugin adds to every container it sees created.
pub const GOOD_KEY: &str = "faults.example.com/good";

/// A well-behaved SDK plugin: forwards every event it gets to a channel and
/// adds [`GOOD_KEY`] in CreateContainer.
pub struct Good {
    tx: mpsc::UnboundedSender<(Event, String)>,
}

#[nri_plugin::plugin]
impl Plugin for Good {
    async fn synchronize(
        &self,
        _pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        Ok(Vec::new())
    }
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = self.tx.send((Event::RunPodSandbox, pod.id));
        Ok(())
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let _ = self.tx.send((Event::CreateContainer, ctr.id.clone()));
        let mut adjust = api::ContainerAdjustment::default();
        adjust.annotations.insert(GOOD_KEY.into(), ctr.id);
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
    async fn start_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        let _ = self.tx.send((Event::StartContainer, ctr.id));
        Ok(())
    }
    async fn stop_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<api::StopContainerResponse> {
        let _ = self.tx.send((Event::StopContainer, ctr.id));
        Ok(api::StopContainerResponse::default())
    }
    async fn remove_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        let _ = self.tx.send((Event::RemoveContainer, ctr.id));
        Ok(())
    }
}

/// A running [`Good`] plugin (`99-good`, last in order).
pub struct GoodPlugin {
    pub rx: mpsc::UnboundedReceiver<(Event, String)>,
    pub handle: nri_plugin::PluginHandle,
    pub task: JoinHandle<Result<(), nri_plugin::Error>>,
}

impl GoodPlugin {
    pub fn start(socket: &Path) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stub = nri_plugin::Builder::new(Good { tx })
            .name("good")
            .index("99")
            .socket_path(socket)
            .build()
            .unwrap();
        let handle = stub.handle();
        let task = tokio::spawn(async move { stub.run().await });
        GoodPlugin { rx, handle, task }
    }
    /// The next event the plugin got.
    pub async fn next(&mut self) -> (Event, String) {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("good plugin got no event in time")
            .expect("good plugin ended")
    }
    /// Asserts the good plugin still works: gets a CreateContainer and its
    /// annotation is in the merged result.
    pub async fn still_serves(&mut self, a: &Adaptation, id: &str) {
        let out = a
            .create_container(&pod("p-good"), &ctr("p-good", id))
            .await
            .expect("a well-behaved plugin alone makes creation succeed");
        assert_eq!(
            out.adjustment.annotations.get(GOOD_KEY).map(String::as_str),
            Some(id),
            "the good plugin's adjustment is in the merged result"
        );
        assert_eq!(self.next().await, (Event::CreateContainer, id.to_owned()));
    }
    pub async fn stop(self) {
        self.handle.stop();
        let _ = tokio::time::timeout(WAIT, self.task).await;
    }
}

// --------------------------------------------------------------- raw plugin

/// What a [`RawPlugin`] does with a request for an event.
pub enum Act {
    /// Answer with this response message payload (status OK).
    Reply(Vec<u8>),
    /// Answer with an error status.
    Status(nri_ttrpc::Code, String),
    /// Never answer.
    Hang,
    /// Wait (tokio time, so paused time works), then act.
    Delay(Duration, Box<Act>),
    /// Write these bytes on the trunk as they are (mux level).
    Trunk(Vec<u8>),
    /// Answer with this raw ttRPC response envelope payload (not a valid
    /// `Response` necessarily), on the request's stream.
    Envelope(Vec<u8>),
    /// Several actions in order.
    Seq(Vec<Act>),
    /// Close the socket.
    Close,
}

impl Act {
    pub fn ok<M: Message>(m: &M) -> Act {
        Act::Reply(m.encode_to_vec())
    }
}

type Behaviour = dyn Fn(&str, &Bytes) -> Option<Act> + Send + Sync;

/// Encodes one mux frame.
pub fn mux_frame(conn: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&conn.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Encodes one ttRPC message (header + envelope) into mux frames the way a
/// Go peer does (first frame at most 4096 bytes).
pub fn ttrpc_frames(conn: u32, stream: u32, ty: MessageType, envelope: &[u8]) -> Vec<u8> {
    let mut msg = BytesMut::new();
    codec::encode_frame(stream, ty, 0, envelope, &mut msg).unwrap();
    let mut out = Vec::new();
    let first = msg.len().min(4096);
    out.extend(mux_frame(conn, &msg[..first]));
    if msg.len() > first {
        out.extend(mux_frame(conn, &msg[first..]));
    }
    out
}

pub fn response_envelope(status: Option<Status>, payload: Vec<u8>) -> Vec<u8> {
    Response {
        status,
        payload: payload.into(),
    }
    .encode_to_vec()
}

/// A plugin speaking the wire protocol by hand.
pub struct RawPlugin {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    reader: JoinHandle<()>,
    replies: Arc<Mutex<HashMap<u32, oneshot::Sender<Response>>>>,
    next_stream: u32,
    /// Methods received on the plugin service, in order.
    pub seen: Arc<Mutex<Vec<String>>>,
    /// Becomes true when the runtime closed the socket.
    pub closed: watch::Receiver<bool>,
}

/// How a raw plugin answers Configure and Synchronize.
#[derive(Clone)]
pub struct RawOpts {
    /// Mask returned by Configure.
    pub events: i32,
}

impl Default for RawOpts {
    fn default() -> Self {
        RawOpts {
            events: EventMask::from_events(&[Event::CreateContainer, Event::StartContainer])
                .as_i32(),
        }
    }
}

impl RawPlugin {
    /// Connects; `behaviour` decides on every request of the plugin
    /// service (`None` = default: answer Configure/Synchronize/Shutdown
    /// properly, everything else with an empty OK message).
    pub async fn connect(
        socket: &Path,
        opts: RawOpts,
        behaviour: impl Fn(&str, &Bytes) -> Option<Act> + Send + Sync + 'static,
    ) -> Self {
        let stream = UnixStream::connect(socket).await.unwrap();
        Self::from_stream(stream, opts, Arc::new(behaviour))
    }

    pub fn from_stream(stream: UnixStream, opts: RawOpts, behaviour: Arc<Behaviour>) -> Self {
        let (mut rd, wr) = stream.into_split();
        let writer = Arc::new(tokio::sync::Mutex::new(wr));
        let replies: Arc<Mutex<HashMap<u32, oneshot::Sender<Response>>>> = Arc::default();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (closed_tx, closed) = watch::channel(false);
        let reader = tokio::spawn({
            let writer = writer.clone();
            let replies = replies.clone();
            let seen = seen.clone();
            async move {
                let mut trunk = BytesMut::new();
                let mut per_conn: HashMap<u32, (BytesMut, Decoder)> = HashMap::new();
                let mut handlers = tokio::task::JoinSet::new();
                loop {
                    // Mux frames.
                    while trunk.len() >= 8 {
                        let conn = u32::from_be_bytes(trunk[0..4].try_into().unwrap());
                        let len = u32::from_be_bytes(trunk[4..8].try_into().unwrap()) as usize;
                        if trunk.len() < 8 + len {
                            break;
                        }
                        trunk.advance(8);
                        let payload = trunk.split_to(len);
                        let (buf, dec) = per_conn
                            .entry(conn)
                            .or_insert_with(|| (BytesMut::new(), Decoder::new()));
                        buf.extend_from_slice(&payload);
                        while let Ok(Some(frame)) = dec.decode(buf) {
                            if conn == 2 {
                                // A response from the runtime service.
                                if let Ok(resp) = Response::decode(frame.payload) {
                                    if let Some(tx) =
                                        replies.lock().unwrap().remove(&frame.stream_id)
                                    {
                                        let _ = tx.send(resp);
                                    }
                                }
                                continue;
                            }
                            let Ok(req) = Request::decode(frame.payload) else {
                                continue;
                            };
                            seen.lock().unwrap().push(req.method.clone());
                            let act = behaviour(&req.method, &req.payload)
                                .unwrap_or_else(|| default_act(&req.method, &opts));
                            let writer = writer.clone();
                            let sid = frame.stream_id;
                            handlers.spawn(async move { perform(act, &writer, sid).await });
                        }
                    }
                    tokio::select! {
                        r = rd.read_buf(&mut trunk) => match r {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        },
                        Some(_) = handlers.join_next(), if !handlers.is_empty() => {}
                    }
                }
                handlers.shutdown().await;
                let _ = closed_tx.send(true);
            }
        });
        RawPlugin {
            writer,
            reader,
            replies,
            next_stream: 1,
            seen,
            closed,
        }
    }

    /// Sends a request on the runtime service and waits for the answer.
    pub async fn call(&mut self, m: &str, payload: Vec<u8>) -> Result<Bytes, Status> {
        let sid = self.next_stream;
        self.next_stream += 2;
        let (tx, rx) = oneshot::channel();
        self.replies.lock().unwrap().insert(sid, tx);
        let req = Request {
            service: RUNTIME_SERVICE.into(),
            method: m.into(),
            payload: payload.into(),
            timeout_nano: 5_000_000_000,
            metadata: vec![],
        };
        self.write(&ttrpc_frames(
            2,
            sid,
            MessageType::Request,
            &req.encode_to_vec(),
        ))
        .await;
        let mut closed = self.closed.clone();
        tokio::select! {
            r = rx => {
                let resp = r.map_err(|_| Status::new(nri_ttrpc::Code::Unavailable, "no answer"))?;
                match resp.status {
                    Some(st) if st.code != 0 => Err(st),
                    _ => Ok(resp.payload),
                }
            }
            _ = closed.wait_for(|c| *c) => Err(Status::new(nri_ttrpc::Code::Unavailable, "connection closed by the runtime")),
        }
    }

    /// RegisterPlugin with this name and index.
    pub async fn register(&mut self, name: &str, idx: &str) -> Result<(), Status> {
        let req = RegisterPluginRequest {
            plugin_name: name.into(),
            plugin_idx: idx.into(),
            nri_version: "v0.12.2".into(),
        };
        self.call(method::REGISTER_PLUGIN, req.encode_to_vec())
            .await
            .map(|_| ())
    }

    /// Writes raw bytes on the trunk.
    pub async fn write(&self, bytes: &[u8]) {
        let _ = self.writer.lock().await.write_all(bytes).await;
    }

    /// Shuts down the write side of the socket (a clean close).
    pub async fn shutdown(&self) {
        let _ = self.writer.lock().await.shutdown().await;
    }

    /// Waits until the runtime closed the connection.
    pub async fn wait_closed(&self) {
        let mut c = self.closed.clone();
        tokio::time::timeout(WAIT, c.wait_for(|c| *c))
            .await
            .expect("the runtime did not close the connection")
            .unwrap();
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for RawPlugin {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn default_act(m: &str, opts: &RawOpts) -> Act {
    match m {
        method::CONFIGURE => Act::ok(&ConfigureResponse {
            events: opts.events,
            failure_policy: None,
        }),
        method::SYNCHRONIZE => Act::ok(&SynchronizeResponse {
            update: vec![],
            more: false,
        }),
        method::CREATE_CONTAINER => Act::ok(&CreateContainerResponse::default()),
        _ => Act::ok(&Empty {}),
    }
}

fn perform<'a>(
    act: Act,
    writer: &'a tokio::sync::Mutex<OwnedWriteHalf>,
    sid: u32,
) -> BoxFuture<'a, ()> {
    Box::pin(async move {
        let bytes = match act {
            Act::Reply(p) => {
                ttrpc_frames(1, sid, MessageType::Response, &response_envelope(None, p))
            }
            Act::Status(code, msg) => ttrpc_frames(
                1,
                sid,
                MessageType::Response,
                &response_envelope(Some(Status::new(code, msg)), vec![]),
            ),
            Act::Envelope(env) => ttrpc_frames(1, sid, MessageType::Response, &env),
            Act::Trunk(b) => b,
            Act::Hang => return std::future::pending().await,
            Act::Delay(d, then) => {
                tokio::time::sleep(d).await;
                return perform(*then, writer, sid).await;
            }
            Act::Seq(acts) => {
                for a in acts {
                    perform(a, writer, sid).await;
                }
                return;
            }
            Act::Close => {
                let _ = writer.lock().await.shutdown().await;
                return;
            }
        };
        let _ = writer.lock().await.write_all(&bytes).await;
    })
}

/// Flushes stderr (helps keep test output readable next to captured logs).
pub fn flush() {
    let _ = std::io::stderr().flush();
}
