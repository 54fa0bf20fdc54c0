//! Plugin side under faulty and hostile runtimes: the `nri-plugin` SDK
//! against a fake runtime that drops the connection mid-configure,
//! mid-sync and mid-event (and restarts), sends garbage, sends events the
//! plugin did not subscribe to, or stalls. The SDK must return typed errors
//! or reconnect per its policy, and never panic.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{WAIT, no_panics};
use nri_api::api::{
    ConfigureRequest, ConfigureResponse, Container, ContainerUpdate, CreateContainerRequest,
    CreateContainerResponse, Empty, Event, PodSandbox, RegisterPluginRequest,
    StartContainerRequest, StateChangeEvent, SynchronizeRequest, SynchronizeResponse,
};
use nri_api::{PLUGIN_SERVICE, method};
use nri_plugin::{EventMask, HandlerResult, Phase, Plugin, ReconnectPolicy, SyncKind};
use nri_test_support::fake_runtime::{FakeRuntime, Register, RuntimeConn};
use nri_ttrpc::{CallOptions, Code};
use prost::Message;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::Notify;

// ------------------------------------------------------------- fake runtime

/// The runtime end of one plugin connection (the shared fake runtime's,
/// on the real mux and ttRPC crates), plus a raw clone of the socket to
/// inject bytes.
struct Conn {
    inner: RuntimeConn,
    raw: UnixStream,
}

impl Conn {
    async fn registered(&mut self) -> RegisterPluginRequest {
        tokio::time::timeout(WAIT, self.inner.registered())
            .await
            .expect("registration in time")
    }

    async fn call<Req: Message, Resp: Message + Default>(
        &self,
        m: &str,
        req: &Req,
    ) -> Result<Resp, nri_ttrpc::Error> {
        self.inner.call(m, req).await
    }

    /// Sends a request without waiting for the answer (the call runs in a
    /// task that ends with the connection).
    fn send<Req: Message + Send + 'static>(&self, m: &'static str, req: Req) {
        self.inner.send(m, req, WAIT);
    }

    async fn configure(&self) -> Result<ConfigureResponse, nri_ttrpc::Error> {
        self.inner.configure(configure_req()).await
    }

    async fn sync(&self) -> Result<SynchronizeResponse, nri_ttrpc::Error> {
        self.inner.sync(vec![pod("p0")], vec![]).await
    }

    async fn ready(&mut self) {
        self.registered().await;
        self.configure().await.unwrap();
        self.sync().await.unwrap();
    }

    /// Drops the connection (runtime crash).
    fn drop_conn(self) {
        drop(self.inner);
        drop(self.raw);
    }
}

fn configure_req() -> ConfigureRequest {
    ConfigureRequest {
        config: String::new(),
        runtime_name: "hostile-runtime".into(),
        runtime_version: "v9.9.9".into(),
        registration_timeout: 5000,
        request_timeout: 2000,
        nri_version: "v0.12.2".into(),
    }
}

fn pod(id: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        ..Default::default()
    }
}

fn create_req(id: &str) -> CreateContainerRequest {
    CreateContainerRequest {
        pod: Some(pod("p")),
        container: Some(Container {
            id: id.into(),
            pod_sandbox_id: "p".into(),
            ..Default::default()
        }),
    }
}

/// The shared fake runtime, accepting within [`WAIT`].
struct Runtime(FakeRuntime);

impl Runtime {
    fn new() -> Self {
        Runtime(FakeRuntime::new())
    }
    /// `answer_register`: answer RegisterPlugin (false: never answer).
    async fn accept(&self, answer_register: bool) -> Conn {
        let s = tokio::time::timeout(WAIT, self.0.accept_raw())
            .await
            .expect("plugin connects in time");
        let register = if answer_register {
            Register::Accept
        } else {
            Register::Hang
        };
        let (inner, raw) = RuntimeConn::with_raw(s, register);
        Conn { inner, raw }
    }
    /// Stops listening and removes the socket (runtime down).
    fn down(&mut self) {
        self.0.down();
    }
    /// Listens again at the same path (runtime restarted).
    fn up(&mut self) {
        self.0.up();
    }
}

// ------------------------------------------------------------------ plugin

/// Records what it sees; configure/sync/create can be made to block until
/// released, to drop the connection in the middle of them.
#[derive(Default)]
struct Rec {
    log: Mutex<Vec<String>>,
    entered: Notify,
    block: Mutex<Option<Arc<Notify>>>,
}

impl Rec {
    fn push(&self, s: String) {
        self.log.lock().unwrap().push(s);
        self.entered.notify_one();
    }
    async fn maybe_block(&self) {
        let b = self.block.lock().unwrap().clone();
        if let Some(n) = b {
            n.notified().await;
        }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

struct P(Arc<Rec>);

#[nri_plugin::plugin]
impl Plugin for P {
    async fn configure(
        &self,
        _info: &nri_plugin::ConfigureInfo,
    ) -> HandlerResult<Option<EventMask>> {
        self.0.push("configure".into());
        self.0.maybe_block().await;
        Ok(None)
    }
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.0.push(format!("sync {} {kind:?}", pods.len()));
        self.0.maybe_block().await;
        Ok(Vec::new())
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.0.push(format!("create {}", ctr.id));
        self.0.maybe_block().await;
        Ok(CreateContainerResponse::default())
    }
    fn disconnected(&self, cause: &nri_plugin::Error) {
        let phase = match cause {
            nri_plugin::Error::ConnectionLost { phase, .. } => format!("{phase}"),
            other => format!("other: {other}"),
        };
        self.0.push(format!("lost {phase}"));
    }
}

fn stub(rt: &Runtime, rec: &Arc<Rec>) -> nri_plugin::Stub<P> {
    nri_plugin::Builder::new(P(rec.clone()))
        .name("victim")
        .index("10")
        .socket_path(&rt.0.path)
        .registration_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn reconnecting(rt: &Runtime, rec: &Arc<Rec>) -> nri_plugin::Stub<P> {
    nri_plugin::Builder::new(P(rec.clone()))
        .name("victim")
        .index("10")
        .socket_path(&rt.0.path)
        .registration_timeout(Duration::from_secs(2))
        .reconnect(ReconnectPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .build()
        .unwrap()
}

async fn entered(rec: &Rec, what: &str) {
    tokio::time::timeout(WAIT, async {
        loop {
            let n = rec.entered.notified();
            if rec.log().iter().any(|l| l.starts_with(what)) {
                return;
            }
            n.await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("plugin never entered {what}: {:?}", rec.log()));
}

// ------------------------------------------------------------------- tests

/// Without a reconnect policy, a connection dropped while the plugin is in
/// Configure, in Synchronize or handling an event ends `run` with
/// `ConnectionLost` naming that phase.
#[tokio::test(flavor = "current_thread")]
async fn connection_dropped_mid_configure_sync_and_event_is_connection_lost_with_phase() {
    let guard = no_panics();
    for (point, want) in [
        ("configure", Phase::Configuring),
        ("sync", Phase::Synchronizing),
        ("create", Phase::Running),
    ] {
        let rt = Runtime::new();
        let rec = Arc::new(Rec::default());
        *rec.block.lock().unwrap() = Some(Arc::new(Notify::new()));
        let stub = stub(&rt, &rec);
        let run = tokio::spawn(async move { stub.run().await });
        let mut conn = rt.accept(true).await;
        conn.registered().await;
        match point {
            "configure" => conn.send(method::CONFIGURE, configure_req()),
            "sync" => {
                *rec.block.lock().unwrap() = None;
                conn.configure().await.unwrap();
                *rec.block.lock().unwrap() = Some(Arc::new(Notify::new()));
                conn.send(
                    method::SYNCHRONIZE,
                    SynchronizeRequest {
                        pods: vec![pod("a")],
                        containers: vec![],
                        more: false,
                    },
                );
            }
            _ => {
                *rec.block.lock().unwrap() = None;
                conn.configure().await.unwrap();
                conn.sync().await.unwrap();
                *rec.block.lock().unwrap() = Some(Arc::new(Notify::new()));
                conn.send(method::CREATE_CONTAINER, create_req("c1"));
            }
        }
        entered(&rec, point).await;
        conn.drop_conn();
        let r = tokio::time::timeout(WAIT, run)
            .await
            .expect("run ends")
            .unwrap();
        match r {
            Err(nri_plugin::Error::ConnectionLost { phase, .. }) => {
                assert_eq!(phase, want, "{point}")
            }
            other => panic!("{point}: {other:?}"),
        }
        assert!(
            rec.log().contains(&format!("lost {want}")),
            "{:?}",
            rec.log()
        );
    }
    guard.check();
}

/// With a reconnect policy, the same three drops each followed by a runtime
/// restart: the plugin dials again, re-registers and re-synchronizes
/// (`SyncKind::Resync`), and serves events on the new connection.
#[tokio::test(flavor = "current_thread")]
#[allow(clippy::too_many_lines)]
async fn reconnect_policy_re_registers_after_drops_at_every_phase() {
    let guard = no_panics();
    let mut rt = Runtime::new();
    let rec = Arc::new(Rec::default());
    let stub = reconnecting(&rt, &rec);
    let handle = stub.handle();
    let run = tokio::spawn(async move { stub.run().await });
    for (round, point) in ["configure", "sync", "create"].into_iter().enumerate() {
        let mut conn = rt.accept(true).await;
        let reg = conn.registered().await;
        assert_eq!(
            (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
            ("victim", "10")
        );
        let block = Arc::new(Notify::new());
        match point {
            "configure" => {
                *rec.block.lock().unwrap() = Some(block.clone());
                conn.send(method::CONFIGURE, configure_req());
            }
            "sync" => {
                conn.configure().await.unwrap();
                *rec.block.lock().unwrap() = Some(block.clone());
                conn.send(
                    method::SYNCHRONIZE,
                    SynchronizeRequest {
                        pods: vec![],
                        containers: vec![],
                        more: false,
                    },
                );
            }
            _ => {
                conn.configure().await.unwrap();
                conn.sync().await.unwrap();
                *rec.block.lock().unwrap() = Some(block.clone());
                conn.send(method::CREATE_CONTAINER, create_req(&format!("r{round}")));
            }
        }
        let n = rec.log().len();
        tokio::time::timeout(WAIT, async {
            while rec.log().len() == n || !rec.log()[n..].iter().any(|l| l.starts_with(point)) {
                rec.entered.notified().await;
            }
        })
        .await
        .unwrap();
        // Runtime crash (the handler is still blocked), then restart at
        // the same path once the plugin noticed.
        rt.down();
        conn.drop_conn();
        tokio::time::timeout(WAIT, async {
            while !rec.log()[n..].iter().any(|l| l.starts_with("lost")) {
                rec.entered.notified().await;
            }
        })
        .await
        .expect("the plugin notices the loss while its handler is blocked");
        *rec.block.lock().unwrap() = None;
        block.notify_waiters();
        rt.up();
    }
    // Final connection: full handshake and an event.
    let mut conn = rt.accept(true).await;
    conn.ready().await;
    let _: CreateContainerResponse = conn
        .call(method::CREATE_CONTAINER, &create_req("final"))
        .await
        .unwrap();
    let log = rec.log();
    assert!(log.contains(&"create final".to_owned()), "{log:?}");
    let lost: Vec<&String> = log.iter().filter(|l| l.starts_with("lost")).collect();
    assert_eq!(
        lost,
        ["lost configuring", "lost synchronizing", "lost running"],
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.starts_with("sync 1 Resync")),
        "re-synchronized as a resync: {log:?}"
    );
    assert!(handle.is_connected());
    handle.stop();
    assert!(
        tokio::time::timeout(WAIT, run)
            .await
            .unwrap()
            .unwrap()
            .is_ok()
    );
    guard.check();
}

/// Garbage from the runtime (a fatal mux header, or ttRPC garbage in a
/// valid mux frame) before or after registration ends `run` with a typed
/// error, never a panic or a hang.
#[tokio::test(flavor = "current_thread")]
async fn garbage_from_the_runtime_is_a_typed_error() {
    let guard = no_panics();
    let garbage: [(&str, Vec<u8>); 3] = [
        (
            "fatal mux header",
            vec![0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3],
        ),
        (
            "ttrpc garbage on conn 1",
            common::mux_frame(1, &[0, 0, 0, 4, 0, 0, 0, 1, 9, 0, 1, 2, 3, 4]),
        ),
        (
            "noise",
            (0..4096u32).map(|i| (i * 31 % 251) as u8).collect(),
        ),
    ];
    for (what, bytes) in garbage {
        for after_registration in [false, true] {
            let rt = Runtime::new();
            let rec = Arc::new(Rec::default());
            let stub = stub(&rt, &rec);
            let run = tokio::spawn(async move { stub.run().await });
            let mut conn = rt.accept(after_registration).await;
            conn.registered().await;
            if after_registration {
                conn.configure().await.unwrap();
                conn.sync().await.unwrap();
            }
            conn.raw.write_all(&bytes).await.unwrap();
            let r = tokio::time::timeout(WAIT, run)
                .await
                .unwrap_or_else(|_| panic!("{what}: run did not end"))
                .unwrap();
            let e = r.expect_err(what);
            assert!(
                matches!(
                    e,
                    nri_plugin::Error::ConnectionLost { .. }
                        | nri_plugin::Error::Transport { .. }
                        | nri_plugin::Error::RegistrationTimeout { .. }
                        | nri_plugin::Error::Rpc { .. }
                ),
                "{what} (after registration: {after_registration}): {e:?}"
            );
            drop(conn);
        }
    }
    guard.check();
}

/// Requests for events the plugin did not subscribe to (and does not
/// implement), through dedicated RPCs and StateChange, are answered with an
/// empty success, as the Go stub answers events without a handler; unknown
/// methods are UNIMPLEMENTED; the plugin keeps serving what it subscribed to.
#[tokio::test(flavor = "current_thread")]
async fn unsubscribed_events_are_acknowledged_and_the_plugin_goes_on() {
    let guard = no_panics();
    let rt = Runtime::new();
    let rec = Arc::new(Rec::default());
    let stub = stub(&rt, &rec);
    let handle = stub.handle();
    let run = tokio::spawn(async move { stub.run().await });
    let mut conn = rt.accept(true).await;
    conn.ready().await;
    let start = StartContainerRequest {
        pod: Some(pod("p")),
        container: Some(Container {
            id: "c".into(),
            ..Default::default()
        }),
    };
    let payload = Bytes::from(start.encode_to_vec());
    for m in [
        method::START_CONTAINER,
        method::STOP_CONTAINER,
        method::UPDATE_CONTAINER,
        method::REMOVE_POD_SANDBOX,
        method::VALIDATE_CONTAINER_ADJUSTMENT,
    ] {
        let r = conn
            .inner
            .client
            .call(PLUGIN_SERVICE, m, payload.clone(), CallOptions::new(WAIT))
            .await;
        assert!(r.as_ref().is_ok_and(Bytes::is_empty), "{m}: {r:?}");
    }
    let r = conn
        .inner
        .client
        .call(
            PLUGIN_SERVICE,
            "NoSuchMethod",
            payload.clone(),
            CallOptions::new(WAIT),
        )
        .await;
    assert_eq!(r.map_err(|e| e.code()).err(), Some(Code::Unimplemented));
    // The legacy dialect: StateChange carrying an unsubscribed event.
    let sc = StateChangeEvent {
        event: Event::StartContainer as i32,
        pod: Some(pod("p")),
        container: start.container.clone(),
    };
    let r: Result<Empty, _> = conn.call(method::STATE_CHANGE, &sc).await;
    assert!(r.is_ok(), "{r:?}");
    // A different service altogether.
    let r = conn
        .inner
        .client
        .call(
            "nri.pkg.api.v1alpha1.Other",
            "X",
            Bytes::new(),
            CallOptions::new(WAIT),
        )
        .await;
    assert_eq!(r.map_err(|e| e.code()).err(), Some(Code::Unimplemented));
    // Still serving.
    let _: CreateContainerResponse = conn
        .call(method::CREATE_CONTAINER, &create_req("after"))
        .await
        .unwrap();
    assert!(rec.log().contains(&"create after".to_owned()));
    assert!(handle.is_connected());
    handle.stop();
    assert!(
        tokio::time::timeout(WAIT, run)
            .await
            .unwrap()
            .unwrap()
            .is_ok()
    );
    guard.check();
}

/// A runtime that accepts the connection and never answers RegisterPlugin:
/// `RegistrationTimeout` in phase Registering after the plugin's timeout
/// (paused time). With a reconnect policy the plugin tries again and
/// succeeds with a runtime that behaves.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn stalled_runtime_times_out_and_reconnect_policy_retries() {
    let guard = no_panics();
    // Without reconnect: typed timeout.
    let rt = Runtime::new();
    let rec = Arc::new(Rec::default());
    let stub = stub(&rt, &rec);
    let t0 = tokio::time::Instant::now();
    let run = tokio::spawn(async move { stub.run().await });
    let mut conn = rt.accept(false).await;
    conn.registered().await;
    match tokio::time::timeout(WAIT, run).await.unwrap().unwrap() {
        Err(nri_plugin::Error::RegistrationTimeout { timeout, phase }) => {
            assert_eq!(timeout, Duration::from_secs(2));
            assert_eq!(phase, Phase::Registering);
        }
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() >= Duration::from_secs(2) && t0.elapsed() < Duration::from_secs(3));
    drop(conn);

    // Registered but never configured, then a good runtime: retried.
    let rt = Runtime::new();
    let rec = Arc::new(Rec::default());
    let stub = reconnecting(&rt, &rec);
    let handle = stub.handle();
    let run = tokio::spawn(async move { stub.run().await });
    let mut stalled = rt.accept(true).await;
    stalled.registered().await; // and then nothing
    let mut conn = rt.accept(true).await;
    conn.ready().await;
    assert!(
        rec.log().iter().any(|l| l.starts_with("sync 1")),
        "{:?}",
        rec.log()
    );
    assert!(handle.is_connected());
    handle.stop();
    assert!(
        tokio::time::timeout(WAIT, run)
            .await
            .unwrap()
            .unwrap()
            .is_ok()
    );
    drop(stalled);
    guard.check();
}
