//! Registration, configuration, synchronization and stop against an
//! in-process fake runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::Event;
use nri_plugin::{Builder, EventMask, Phase, SyncKind, VersionOrigin};

#[tokio::test]
async fn registers_configures_synchronizes_and_stops() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let events = mask(&[Event::RunPodSandbox, Event::CreateContainer]);
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .events(events)
        .build()
        .unwrap();
    assert_eq!(stub.plugin_name(), "10-test");
    assert!(!stub.is_pre_launched());
    let handle = stub.handle();
    assert!(!handle.is_connected());

    let run = stub.run();
    tokio::pin!(run);
    let conn = tokio::select! {
        c = rt.accept(Register::Accept) => c,
        r = &mut run => panic!("run ended early: {r:?}"),
    };
    let reg = tokio::select! {
        r = conn.registered() => r,
        r = &mut run => panic!("run ended early: {r:?}"),
    };
    assert_eq!(reg.plugin_name, "test");
    assert_eq!(reg.plugin_idx, "10");
    assert_eq!(reg.nri_version, nri_api::NRI_VERSION);

    let driver = async {
        let mut req = configure_req("v0.12.2");
        req.config = "some config".into();
        let resp = conn.configure(req).await.unwrap();
        assert_eq!(EventMask::from_i32(resp.events), events);
        let sync = conn
            .sync(vec![pod("p1")], vec![container("c1", "p1")])
            .await
            .unwrap();
        assert!(!sync.more);
        assert!(sync.update.is_empty());
        let call = next_call(&mut calls).await;
        assert_eq!(call.what, "Synchronize Initial");
        assert_eq!((call.pod.as_str(), call.container.as_str()), ("1", "1"));

        assert!(handle.is_connected());
        let info = handle.runtime().unwrap();
        assert_eq!(info.name, "fake-runtime");
        assert_eq!(info.version, "v1.0.0");
        assert_eq!(info.nri_version.origin, VersionOrigin::Reported);
        assert_eq!(info.request_timeout, std::time::Duration::from_secs(2));
        assert_eq!(handle.subscribed_events(), events);
        assert!(handle.dropped_events().is_empty());
        handle.stop();
    };
    let (res, ()) = tokio::join!(&mut run, driver);
    res.unwrap();
    assert!(!handle.is_connected());
}

#[tokio::test]
async fn configure_gets_config_text_and_sync_kind_initial() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let mut req = configure_req("v0.12.2");
        req.config = "key=value\n".into();
        conn.configure(req).await.unwrap();
        conn.sync(vec![], vec![]).await.unwrap();
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert_eq!(
        stub.plugin().configs.lock().unwrap().as_slice(),
        ["key=value\n"]
    );
    assert_eq!(
        stub.plugin().syncs.lock().unwrap().as_slice(),
        [(0, 0, SyncKind::Initial)]
    );
}

#[tokio::test]
async fn run_twice_concurrently_is_already_started() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let first = stub.run();
    tokio::pin!(first);
    let conn = tokio::select! {
        c = rt.accept_ready() => c,
        r = &mut first => panic!("run ended early: {r:?}"),
    };
    let second = stub.run().await;
    assert!(
        matches!(second, Err(nri_plugin::Error::AlreadyStarted)),
        "{second:?}"
    );
    handle.stop();
    first.await.unwrap();
    drop(conn);
}

#[tokio::test]
async fn connection_lost_reports_the_phase() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let driver = async {
        let conn = rt.accept_ready().await;
        conn.close();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    match res {
        Err(nri_plugin::Error::ConnectionLost { phase, .. }) => assert_eq!(phase, Phase::Running),
        other => panic!("expected ConnectionLost, got {other:?}"),
    }

    // Lost while waiting for Configure.
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn.close();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    match res {
        Err(nri_plugin::Error::ConnectionLost { phase, .. }) => {
            assert_eq!(phase, Phase::Configuring)
        }
        other => panic!("expected ConnectionLost, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_multi_thread_runtime_too() {
    {
        let fake = FakeRuntime::new();
        let (rec, mut calls) = Recorder::new();
        let stub = Builder::new(rec)
            .name("test")
            .index("10")
            .socket_path(&fake.path)
            .build()
            .unwrap();
        let handle = stub.handle();
        let task = tokio::spawn(async move { stub.run().await });
        let conn = fake.accept_ready().await;
        next_call(&mut calls).await;
        handle.stop();
        task.await.unwrap().unwrap();
        drop(conn);
    }
}
