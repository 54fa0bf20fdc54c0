//! A runtime cannot make a plugin hold an unbounded synchronization: the
//! pods, containers and bytes of all its messages are counted before they
//! are decoded and capped (`SyncLimits`), the synchronization must be over
//! within the registration timeout after Configure, and any request that
//! would decode to far more than its size is refused undecoded. Each ends
//! with a typed error (or a refusal), never with the plugin's memory.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use nri_api::api::{
    Container, CreateContainerRequest, CreateContainerResponse, Mount, SynchronizeRequest,
    SynchronizeResponse,
};
use nri_api::method;
use nri_plugin::{Builder, Code, Error, Phase, SyncLimits, SyncMode};
use prost::Message;

fn chunk(containers: usize, more: bool) -> SynchronizeRequest {
    SynchronizeRequest {
        pods: Vec::new(),
        containers: vec![Container::default(); containers],
        more,
    }
}

/// A `SynchronizeRequest` of `n` empty containers (field 2, length 0).
fn empty_containers(n: usize) -> Bytes {
    Bytes::from([0x12u8, 0x00].repeat(n))
}

#[tokio::test]
async fn a_million_empty_containers_are_refused_before_decoding() {
    for mode in [SyncMode::Collect, SyncMode::Streaming] {
        let rt = FakeRuntime::new();
        let (rec, _calls) = Recorder::new();
        let stub = Builder::new(rec)
            .name("test")
            .index("10")
            .socket_path(&rt.path)
            .sync_mode(mode)
            .build()
            .unwrap();
        let driver = async {
            let conn = rt.accept_configured().await;
            // 2 MB on the wire, 1.4 GB decoded: encoded by hand (the
            // structs would take the test that much).
            let err = conn
                .call_raw(method::SYNCHRONIZE, empty_containers(1_000_000))
                .await
                .unwrap_err();
            assert!(err.to_string().contains("1000000 containers"), "{err}");
            conn
        };
        let (res, _conn) = tokio::join!(stub.run(), driver);
        match res {
            Err(Error::SyncTooLarge {
                what: "containers",
                count: 1_000_000,
                limit: 20_000,
            }) => {}
            other => panic!("{mode:?}: {other:?}"),
        }
        assert!(stub.plugin().syncs.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn limits_count_across_chunks_and_are_configurable() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let mut limits = SyncLimits::default();
    limits.max_containers = 25;
    limits.max_bytes = 1 << 20;
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .sync_limits(limits)
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept_configured().await;
        for _ in 0..2 {
            let r: SynchronizeResponse = conn
                .call(method::SYNCHRONIZE, &chunk(10, true))
                .await
                .unwrap();
            assert!(r.more);
        }
        let err = conn
            .call::<_, SynchronizeResponse>(method::SYNCHRONIZE, &chunk(10, true))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unknown, "{err}");
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    assert!(
        matches!(
            res,
            Err(Error::SyncTooLarge {
                what: "containers",
                count: 30,
                limit: 25
            })
        ),
        "{res:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_synchronization_that_never_ends_times_out() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .registration_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept_configured().await;
        // Small chunks, each with `more`, forever.
        loop {
            let r = conn
                .call::<_, SynchronizeResponse>(method::SYNCHRONIZE, &chunk(1, true))
                .await;
            if r.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    match res {
        Err(Error::RegistrationTimeout {
            timeout,
            phase: Phase::Synchronizing,
        }) => assert_eq!(timeout, Duration::from_secs(3)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_event_that_would_decode_to_far_more_than_its_size_is_refused() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let bomb = CreateContainerRequest {
            pod: Some(pod("p0")),
            container: Some(Container {
                mounts: vec![Mount::default(); 500_000],
                ..container("c0", "p0")
            }),
        };
        let err = conn
            .call_raw(method::CREATE_CONTAINER, Bytes::from(bomb.encode_to_vec()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
        // The plugin goes on with normal events.
        let ok = CreateContainerRequest {
            pod: Some(pod("p0")),
            container: Some(container("c1", "p0")),
        };
        let _: CreateContainerResponse = conn.call(method::CREATE_CONTAINER, &ok).await.unwrap();
        let call = next_call_of(&mut calls, "CreateContainer").await;
        assert_eq!(call.container, "c1");
        handle.stop();
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

/// A synchronization whose messages each pass the per-message check (at
/// most 16 times their size once decoded) but together would decode to
/// far more than the bytes cap suggests is refused once the estimated
/// decoded size of all its messages goes over `max_decoded_bytes`, before
/// that message is decoded. Without the sum, 64 MiB of one-letter
/// environment variables would be about 1.2 GiB of heap; with the default
/// (256 MiB) a synchronization of 3.9 MB such messages is refused at its
/// sixth. Here the messages are 1 MB and the limit 16 MiB, so that a
/// debug build decodes one message only.
#[tokio::test]
async fn a_synchronization_that_would_decode_to_far_more_than_its_bytes_is_refused() {
    // One container with 330,000 `k` environment variables: 1 MB (3
    // bytes each on the wire, about 40 decoded).
    let ctr = Container {
        env: vec!["k".into(); 330_000],
        ..container("c0", "p0")
    };
    let message = Bytes::from(
        SynchronizeRequest {
            pods: Vec::new(),
            containers: vec![ctr],
            more: true,
        }
        .encode_to_vec(),
    );
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let mut limits = SyncLimits::default();
    assert_eq!(limits.max_decoded_bytes, 256 << 20);
    limits.max_decoded_bytes = 16 << 20;
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .sync_limits(limits)
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept_configured().await;
        let mut answered = 0;
        for _ in 0..4 {
            match conn.call_raw(method::SYNCHRONIZE, message.clone()).await {
                Ok(_) => answered += 1,
                Err(e) => {
                    assert!(e.to_string().contains("decoded bytes"), "{e}");
                    break;
                }
            }
        }
        (conn, answered)
    };
    let (res, (_conn, answered)) = tokio::join!(stub.run(), driver);
    assert!(
        matches!(
            res,
            Err(Error::SyncTooLarge {
                what: "decoded bytes",
                limit: 16_777_216,
                ..
            })
        ),
        "after {answered} messages: {res:?}"
    );
    assert_eq!(answered, 1);
    assert!(stub.plugin().syncs.lock().unwrap().is_empty());
}
