//! `SyncMode::Streaming`: each Synchronize message goes to
//! `Plugin::synchronize_chunk` as it arrives; the updates of all chunks are
//! answered with the last message; `Plugin::synchronize` is not called.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Mutex;

use common::*;
use nri_api::api::{
    Container, ContainerUpdate, Event, PodSandbox, SynchronizeRequest, SynchronizeResponse,
};
use nri_api::method;
use nri_plugin::{Builder, EventMask, HandlerError, HandlerResult, Plugin, SyncKind, SyncMode};

#[derive(Default)]
struct Chunks {
    /// (pods, containers, more, kind) per call.
    seen: Mutex<Vec<(usize, usize, bool, SyncKind)>>,
    collected: Mutex<u32>,
    fail_on: Option<usize>,
}

impl Plugin for Chunks {
    const EVENTS: EventMask = EventMask::from_events(&[Event::StartContainer]);

    async fn synchronize(
        &self,
        _pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        *self.collected.lock().unwrap() += 1;
        Ok(Vec::new())
    }

    async fn synchronize_chunk(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        more: bool,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push((pods.len(), containers.len(), more, kind));
            seen.len() - 1
        };
        if self.fail_on == Some(n) {
            return Err(HandlerError::msg("chunk rejected"));
        }
        // One update per chunk, for its first container.
        Ok(containers
            .first()
            .map(|c| recorder_update(&c.id))
            .into_iter()
            .collect())
    }
}

fn chunk(n: usize, more: bool) -> SynchronizeRequest {
    SynchronizeRequest {
        pods: (0..2).map(|i| pod(&format!("p{n}-{i}"))).collect(),
        containers: (0..3)
            .map(|i| container(&format!("c{n}-{i}"), &format!("p{n}-0")))
            .collect(),
        more,
    }
}

#[tokio::test]
async fn chunks_are_handed_over_one_by_one() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(Chunks::default())
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .sync_mode(SyncMode::Streaming)
        .build()
        .unwrap();
    let handle = stub.handle();
    let plugin = stub.plugin();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn.configure(configure_req("v0.12.2")).await.unwrap();
        for n in 0..3 {
            let resp: SynchronizeResponse = conn
                .call(method::SYNCHRONIZE, &chunk(n, true))
                .await
                .unwrap();
            assert!(resp.more, "non-final chunk must be echoed with more=true");
            assert!(resp.update.is_empty(), "no updates before the last chunk");
            // Handed over before the next message is sent.
            assert_eq!(plugin.seen.lock().unwrap().len(), n + 1);
        }
        let resp: SynchronizeResponse = conn
            .call(method::SYNCHRONIZE, &chunk(3, false))
            .await
            .unwrap();
        assert!(!resp.more);
        assert_eq!(
            resp.update,
            (0..4)
                .map(|n| recorder_update(&format!("c{n}-0")))
                .collect::<Vec<_>>(),
            "the updates of all chunks, in order, with the last answer"
        );
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    let seen = stub.plugin().seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            (2, 3, true, SyncKind::Initial),
            (2, 3, true, SyncKind::Initial),
            (2, 3, true, SyncKind::Initial),
            (2, 3, false, SyncKind::Initial),
        ]
    );
    assert_eq!(*stub.plugin().collected.lock().unwrap(), 0);
}

#[tokio::test]
async fn single_message_is_one_final_chunk() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(Chunks::default())
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .sync_mode(SyncMode::Streaming)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn.configure(configure_req("v0.12.2")).await.unwrap();
        let resp: SynchronizeResponse = conn
            .call(method::SYNCHRONIZE, &chunk(7, false))
            .await
            .unwrap();
        assert!(!resp.more);
        assert_eq!(resp.update, vec![recorder_update("c7-0")]);
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert_eq!(
        stub.plugin().seen.lock().unwrap().as_slice(),
        [(2, 3, false, SyncKind::Initial)]
    );
}

#[tokio::test]
async fn failing_chunk_fails_the_sync() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(Chunks {
        fail_on: Some(1),
        ..Chunks::default()
    })
    .name("test")
    .index("10")
    .socket_path(&rt.path)
    .sync_mode(SyncMode::Streaming)
    .build()
    .unwrap();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn.configure(configure_req("v0.12.2")).await.unwrap();
        let _: SynchronizeResponse = conn
            .call(method::SYNCHRONIZE, &chunk(0, true))
            .await
            .unwrap();
        let err = conn
            .call::<_, SynchronizeResponse>(method::SYNCHRONIZE, &chunk(1, true))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("chunk rejected"), "{err}");
        conn.close();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    match res {
        Err(nri_plugin::Error::SynchronizeFailed { reason }) => {
            assert!(reason.contains("chunk rejected"), "{reason}");
        }
        other => panic!("expected SynchronizeFailed, got {other:?}"),
    }
}
