//! What a peer may cost the runtime (`PeerLimits`): requests before
//! registration, updates and evictions per message, decoded size, waiting
//! connections. Each refusal is answered (or, for an answer, fails that
//! plugin's event), logged and counted; the runtime and the other plugins
//! go on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::api::*;
use nri_api::{RUNTIME_SERVICE, method};
use nri_runtime::{Error, ErrorClass, Metrics, PeerLimits};
use nri_ttrpc::{CallOptions, Code};
use prost::Message;

/// Records `peer_refused` calls, and `plugin_invocation` results of
/// `CreateContainer`.
#[derive(Default)]
struct Refusals(
    Mutex<Vec<(String, String)>>,
    Mutex<Vec<(String, Result<(), ErrorClass>)>>,
);

impl Metrics for Refusals {
    fn peer_refused(&self, peer: &str, reason: &str) {
        self.0.lock().unwrap().push((peer.into(), reason.into()));
    }
    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        if operation == "CreateContainer" {
            self.1.lock().unwrap().push((plugin.into(), result));
        }
    }
}

impl Refusals {
    fn seen(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }
    fn creations(&self) -> Vec<(String, Result<(), ErrorClass>)> {
        self.1.lock().unwrap().clone()
    }
}

fn empty_updates(n: usize) -> UpdateContainersRequest {
    UpdateContainersRequest {
        update: vec![ContainerUpdate::default(); n],
        evict: Vec::new(),
    }
}

async fn call_raw(
    c: &Connected,
    m: &str,
    payload: Vec<u8>,
) -> Result<bytes::Bytes, nri_ttrpc::Error> {
    c.client
        .call(
            RUNTIME_SERVICE,
            m,
            payload.into(),
            CallOptions::new(Duration::from_secs(5)),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_registration_only_a_small_register_plugin_is_taken() {
    let env = TestEnv::new();
    let metrics = Arc::new(Refusals::default());
    let a = env.start(env.builder().metrics(metrics.clone())).await;
    let mut p = FakePlugin::new("10", "early");
    p.skip_register = true;
    let c = p.clone().connect(&env.socket).await.unwrap();

    // 1 MB of empty updates (2 bytes each, 200 MB decoded): skipped unread.
    let big = empty_updates(500_000).encode_to_vec();
    let err = call_raw(&c, method::UPDATE_CONTAINERS, big)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    // A small one: refused, not decoded.
    let err = c.update_containers(empty_updates(3)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(err.to_string().contains("not registered"), "{err}");
    // RegisterPlugin over 4 KiB.
    let fat = RegisterPluginRequest {
        plugin_name: "x".repeat(5000),
        plugin_idx: "10".into(),
        nri_version: String::new(),
    };
    let err = call_raw(&c, method::REGISTER_PLUGIN, fat.encode_to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert_eq!(
        metrics.seen(),
        [
            ("unregistered".to_owned(), "too_large".to_owned()),
            ("unregistered".into(), "unregistered".into()),
            ("unregistered".into(), "too_large".into()),
        ]
    );
    assert!(env.runtime.updates.lock().unwrap().is_empty());

    // The connection may still register, and then update.
    let reg = RegisterPluginRequest {
        plugin_name: "early".into(),
        plugin_idx: "10".into(),
        nri_version: "v0.12.2".into(),
    };
    call_raw(&c, method::REGISTER_PLUGIN, reg.encode_to_vec())
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let mut u = ContainerUpdate::new("c1");
    u.linux_resources_mut().memory = Some(LinuxMemory {
        limit: Some(OptionalInt64 { value: 1 << 20 }),
        ..Default::default()
    });
    c.update_containers(UpdateContainersRequest {
        update: vec![u],
        evict: Vec::new(),
    })
    .await
    .unwrap();
    assert_eq!(env.runtime.updates.lock().unwrap().len(), 1);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_beyond_the_known_containers_are_refused_undecoded() {
    let env = TestEnv::new();
    env.runtime.add_pod(pod("pod0"));
    env.runtime.add_container(ctr("pod0", "c0"));
    let metrics = Arc::new(Refusals::default());
    let a = env.start(env.builder().metrics(metrics.clone())).await;
    let c = FakePlugin::new("10", "flood")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    // One known container (from the snapshot) + 16.
    let err = c.update_containers(empty_updates(18)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(
        err.to_string()
            .contains("18 update entries, more than the 17"),
        "{err}"
    );
    assert_eq!(
        metrics.seen(),
        [("10-flood".to_owned(), "too_many_updates".to_owned())]
    );
    // 17 is within the limit (empty updates are dropped by the merge).
    c.update_containers(empty_updates(17)).await.unwrap();
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_too_many_updates_fails_that_plugins_event_only() {
    let env = TestEnv::new();
    let metrics = Arc::new(Refusals::default());
    let a = env.start(env.builder().metrics(metrics.clone())).await;
    let bad = FakePlugin::new("10", "bad").on_create(|_| CreateContainerResponse {
        evict: vec![ContainerEviction::default(); 10_000],
        ..Default::default()
    });
    let good = FakePlugin::new("20", "good").on_create(|_| {
        let mut adjust = ContainerAdjustment::default();
        adjust.add_annotation("good", "yes");
        CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        }
    });
    let _b = bad.connect(&env.socket).await.unwrap();
    let _g = good.connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    let p = pod("pod0");
    a.run_pod_sandbox(&p).await.unwrap();
    // Policy `fail` (the default): the creation fails, naming the plugin
    // and the refusal.
    let err = a
        .create_container(&p, &ctr("pod0", "c0"))
        .await
        .unwrap_err();
    match &err {
        Error::PluginFailed { plugin, cause, .. } => {
            assert_eq!(plugin, "10-bad");
            assert!(cause.to_string().contains("answer refused"), "{cause}");
            // Counted with an early stop: refused after 17 of the 10,000.
            assert!(
                cause
                    .to_string()
                    .contains("at least 17 evict entries, more than the 16 allowed"),
                "{cause}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        metrics.seen(),
        [("10-bad".to_owned(), "too_many_updates".to_owned())]
    );
    // The refused answer counts as an invalid response, not a success.
    assert_eq!(
        metrics.creations(),
        [("10-bad".to_owned(), Err(ErrorClass::InvalidResponse))]
    );
    assert_eq!(a.plugins().len(), 2, "nobody was disconnected");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_waiting_limit_are_closed_at_once() {
    let env = TestEnv::new();
    let metrics = Arc::new(Refusals::default());
    let mut limits = PeerLimits::default();
    limits.max_pending_connections = 1;
    let a = env
        .start(env.builder().metrics(metrics.clone()).peer_limits(limits))
        .await;
    let waiting = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
    let mut refused = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut refused, &mut buf),
    )
    .await
    .expect("closed at once")
    .unwrap_or(0);
    assert_eq!(n, 0, "end of stream");
    assert_eq!(
        metrics.seen(),
        [("unregistered".to_owned(), "pending_connections".to_owned())]
    );
    // Once the waiting one is gone, a plugin gets in.
    drop(waiting);
    let mut ok = None;
    for _ in 0..100 {
        if let Ok(c) = FakePlugin::new("10", "later").connect(&env.socket).await {
            ok = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok.is_some());
    wait_active(&a, 1).await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_for_connections_that_are_not_open_are_counted_as_refusals() {
    use tokio::io::AsyncWriteExt;
    let env = TestEnv::new();
    let metrics = Arc::new(Refusals::default());
    let a = env.start(env.builder().metrics(metrics.clone())).await;
    let stream = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
    let mux = nri_mux::Mux::new(stream);
    // Before registering: an "answer" on the plugin service connection
    // (not open on the runtime's side until registration) and a frame on
    // a connection nobody opens.
    let mut stray = mux.open(nri_mux::PLUGIN_SERVICE_CONN).unwrap();
    stray.write_all(&[0; 100]).await.unwrap();
    let mut other = mux.open(nri_mux::ConnId(7)).unwrap();
    other.write_all(&[0; 10]).await.unwrap();
    // The runtime reads the trunk in order: once this request is answered,
    // the frames before it were dropped.
    let client = nri_ttrpc::Client::new(mux.open(nri_mux::RUNTIME_SERVICE_CONN).unwrap());
    let err = client
        .call(
            RUNTIME_SERVICE,
            method::UPDATE_CONTAINERS,
            empty_updates(1).encode_to_vec().into(),
            CallOptions::new(Duration::from_secs(5)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    let unregistered = |reason: &str| ("unregistered".to_owned(), reason.to_owned());
    assert_eq!(
        metrics.seen(),
        [
            unregistered("unknown_connection"),
            unregistered("unknown_connection"),
            unregistered("unregistered"),
        ]
    );
    a.stop().await;
}

/// Reads `stream` until the runtime closes it.
async fn until_closed(mut stream: tokio::net::UnixStream) {
    let mut buf = [0u8; 64];
    loop {
        let n = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("the runtime closes the connection")
        .unwrap_or(0);
        if n == 0 {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_outside_the_allow_list_is_a_counted_refusal() {
    let env = TestEnv::new();
    let metrics = Arc::new(Refusals::default());
    let builder = env.builder().metrics(metrics.clone());
    // Nobody runs as these.
    let a = env
        .start(
            builder
                .allowed_uids([4_000_000_000])
                .allowed_gids([4_000_000_000]),
        )
        .await;
    let stream = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
    until_closed(stream).await;
    assert_eq!(
        metrics.seen(),
        [("unregistered".to_owned(), "peer_not_allowed".to_owned())]
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_missing_registrations_are_counted_refusals() {
    let env = TestEnv::new();
    let metrics = Arc::new(Refusals::default());
    // A plugin whose entry turns upgrades off: a second instance is refused.
    let builder = env
        .builder()
        .metrics(metrics.clone())
        .registration_timeout(Duration::from_secs(1))
        .plugin_policy(
            "dup",
            nri_runtime::PluginPolicy::default().with_supersede(false),
        );
    let a = env.start(builder).await;
    let _first = FakePlugin::new("10", "dup")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    // The same name again: refused (and reported before the answer).
    assert!(
        FakePlugin::new("10", "dup")
            .connect(&env.socket)
            .await
            .is_err()
    );
    assert_eq!(
        metrics.seen(),
        [("unregistered".to_owned(), "registration".to_owned())]
    );
    // A connection that never registers is closed after the timeout.
    let silent = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
    until_closed(silent).await;
    assert_eq!(
        metrics.seen()[1..],
        [("unregistered".to_owned(), "registration_timeout".to_owned())]
    );
    a.stop().await;
}
