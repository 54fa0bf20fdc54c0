//! Registration, configuration and synchronization of external plugins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;

#[tokio::test(flavor = "multi_thread")]
async fn plugin_registers_configures_and_syncs() {
    let env = TestEnv::new();
    env.runtime.add_pod(pod("p0"));
    env.runtime.add_pod(pod("p1"));
    env.runtime.add_container(ctr("p0", "c0"));
    env.runtime.add_container(ctr("p1", "c1"));
    let a = env.start(env.builder()).await;
    let p = FakePlugin::new("05", "abcd-0123+EFGH_4567.ijkl");
    let _c = p.clone().connect(&env.socket).await.expect("registered");
    wait_active(&a, 1).await;
    let got = p.received();
    assert_eq!(got[0].method, "Configure");
    assert_eq!(got[1].method, "Synchronize");
    assert_eq!(got[1].sync_pods, vec!["p0", "p1"]);
    assert_eq!(got[1].sync_containers, vec!["c0", "c1"]);
    let info = &a.plugins()[0];
    assert_eq!(info.id.to_string(), "05-abcd-0123+EFGH_4567.ijkl");
    assert_eq!(
        info.events,
        EventMask::ALL,
        "mask 0 means every event the runtime knows"
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_name_and_index_are_refused() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let err = FakePlugin::new("05", "foo,bar")
        .connect(&env.socket)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("foo,bar"), "{err}");
    let err = FakePlugin::new("5", "foo")
        .connect(&env.socket)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("index"), "{err}");
    assert!(a.plugins().is_empty());
    a.stop().await;
}

/// With `supersede: false` in its entry, a second instance of a connected
/// plugin is refused (the behaviour before upgrades without a gap; see
/// tests/upgrade.rs for the default).
#[tokio::test(flavor = "multi_thread")]
async fn duplicate_name_refused_while_first_is_connected_when_supersede_is_off() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().plugin_policy(
            "dup",
            nri_runtime::PluginPolicy::default().with_supersede(false),
        ))
        .await;
    let first = FakePlugin::new("10", "dup")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let err = FakePlugin::new("10", "dup")
        .connect(&env.socket)
        .await
        .err()
        .expect("duplicate refused");
    assert!(err.to_string().contains("already connected"), "{err}");
    // Same name, another index is a different plugin.
    let _other = FakePlugin::new("11", "dup")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    first.crash();
    wait_active_exact(&a, 1).await;
    let _again = FakePlugin::new("10", "dup")
        .connect(&env.socket)
        .await
        .expect("accepted after disconnect");
    wait_active(&a, 2).await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_event_bits_are_rejected_with_a_clear_error() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let mut p = FakePlugin::new("10", "future");
    p.events = 0x4000 | 0x8;
    let c = p.connect(&env.socket).await.unwrap();
    // Registration itself succeeded; configure fails and the runtime closes.
    tokio::time::timeout(Duration::from_secs(5), c.mux.closed())
        .await
        .expect("closed by runtime")
        .ok();
    assert!(a.plugins().is_empty());
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn configure_carries_runtime_identity_and_timeouts() {
    use nri_api::api::ConfigureRequest;
    use prost::Message;
    // Capture the raw Configure through a custom validator of the request:
    // the fake plugin only records the method, so check what we send by
    // decoding on a raw connection.
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .registration_timeout(Duration::from_millis(5005))
                .request_timeout(Duration::from_millis(2007)),
        )
        .await;
    let stream = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let svc = nri_ttrpc::service_fn(move |ctx, payload: bytes::Bytes| {
        let tx = tx.clone();
        async move {
            if ctx.method() == "Configure" {
                let _ = tx.send(ConfigureRequest::decode(payload).unwrap());
                return Ok(bytes::Bytes::from(
                    nri_api::api::ConfigureResponse {
                        events: 0x8,
                        failure_policy: None,
                    }
                    .encode_to_vec(),
                ));
            }
            if ctx.method() == "Synchronize" {
                return Ok(bytes::Bytes::from(
                    nri_api::api::SynchronizeResponse::default().encode_to_vec(),
                ));
            }
            Err(nri_ttrpc::Status::unknown_method(ctx.method()))
        }
    });
    let opts = nri_test_support::plugin_end::Options {
        register: Some(nri_api::api::RegisterPluginRequest {
            plugin_name: "raw".into(),
            plugin_idx: "01".into(),
            nri_version: String::new(),
        }),
        wake_hints: false,
    };
    let end = nri_test_support::plugin_end::PluginEnd::connect(stream, svc, opts)
        .await
        .unwrap();
    let req = rx.recv().await.unwrap();
    assert_eq!(req.runtime_name, "fake-runtime");
    assert_eq!(req.runtime_version, "v1.2.3");
    assert_eq!(req.registration_timeout, 5005);
    assert_eq!(req.request_timeout, 2007);
    // Our NRI version, tagged so that our plugins know the runtime is
    // ours, and declaring the default: every capability but evictions
    // (bit 42), every event.
    assert_eq!(
        req.nri_version,
        "v0.12.5+nri-rs.caps-43-3ffffffffff.events-3fff"
    );
    assert!(nri_api::is_nri_rs_runtime(&req.nri_version));
    wait_active(&a, 1).await;
    assert_eq!(
        a.plugins()[0].events,
        EventMask::from(Event::CreateContainer)
    );
    a.stop().await;
    end.shutdown.cancel();
    let _ = end.serving.await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn registration_timeout_closes_silent_connections() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().registration_timeout(Duration::from_secs(5)))
        .await;
    let mut p = FakePlugin::new("10", "silent");
    p.skip_register = true;
    let c = p.connect(&env.socket).await.unwrap();
    let t0 = tokio::time::Instant::now();
    let _ = c.mux.closed().await;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert!(a.plugins().is_empty());
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn disabled_connections_create_no_socket() {
    let env = TestEnv::new();
    let a = env.start(env.builder().disable_connections(true)).await;
    assert!(!env.socket.exists());
    assert!(
        FakePlugin::new("10", "x")
            .connect(&env.socket)
            .await
            .is_err()
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_updates_reach_the_runtime_and_unsolicited_updates_too() {
    use nri_api::api::*;
    let env = TestEnv::new();
    env.runtime.add_pod(pod("p0"));
    env.runtime.add_container(ctr("p0", "c0"));
    let a = env.start(env.builder()).await;
    let upd = |shares: u64| ContainerUpdate {
        container_id: "c0".into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: shares }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    };
    let mut p = FakePlugin::new("10", "upd");
    p.sync_updates = vec![upd(100)];
    let c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    assert_eq!(env.runtime.updates.lock().unwrap().len(), 1);
    let resp = c
        .update_containers(UpdateContainersRequest {
            update: vec![upd(200)],
            evict: vec![ContainerEviction {
                container_id: "c0".into(),
                reason: "test".into(),
            }],
        })
        .await
        .unwrap();
    assert!(resp.failed.is_empty());
    assert_eq!(env.runtime.updates.lock().unwrap().len(), 2);
    assert_eq!(env.runtime.evictions.lock().unwrap()[0].container_id, "c0");
    a.stop().await;
}
