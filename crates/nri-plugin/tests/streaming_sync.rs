//! `SyncMode::Streaming`: each Synchronize message goes to
//! `Plugin::synchronize_chunk` as it arrives, as a lazily decoded
//! `SyncChunk`; the updates of all chunks are answered with the last
//! message; `Plugin::synchronize` is not called; a malformed message is
//! refused before the plugin sees it, an undecodable item fails the sync.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Mutex;

use common::*;
use nri_api::api::{
    Container, ContainerUpdate, Event, PodSandbox, SynchronizeRequest, SynchronizeResponse,
};
use nri_api::method;
use nri_plugin::{
    Builder, EventMask, HandlerError, HandlerResult, Plugin, Stub, SyncChunk, SyncKind, SyncMode,
};
use prost::Message;

#[derive(Default)]
struct Chunks {
    /// (pods, containers, more, kind) per call.
    seen: Mutex<Vec<(usize, usize, bool, SyncKind)>>,
    /// Ids of every pod and container decoded, in the order handed over.
    ids: Mutex<Vec<String>>,
    collected: Mutex<u32>,
    fail_on: Option<usize>,
}

#[nri_plugin::plugin]
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
        chunk: SyncChunk,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push((
                chunk.pod_count(),
                chunk.container_count(),
                chunk.more(),
                kind,
            ));
            seen.len() - 1
        };
        if self.fail_on == Some(n) {
            return Err(HandlerError::msg("chunk rejected"));
        }
        // Decoded one at a time; an undecodable item fails the sync.
        let mut first = None;
        for pod in chunk.pods() {
            self.ids.lock().unwrap().push(pod?.id);
        }
        for ctr in chunk.containers() {
            let ctr = ctr?;
            first.get_or_insert_with(|| ctr.id.clone());
            self.ids.lock().unwrap().push(ctr.id);
        }
        // One update per chunk, for its first container.
        Ok(first.map(|id| recorder_update(&id)).into_iter().collect())
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
    let stub = streaming_stub(&rt, Chunks::default());
    let handle = stub.handle();
    let plugin = stub.plugin();
    let driver = async {
        let conn = rt.accept_configured().await;
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
    let want: Vec<String> = (0..4)
        .flat_map(|n| {
            let req = chunk(n, n < 3);
            req.pods
                .into_iter()
                .map(|p| p.id)
                .chain(req.containers.into_iter().map(|c| c.id))
        })
        .collect();
    assert_eq!(
        *stub.plugin().ids.lock().unwrap(),
        want,
        "every pod and container of every message, in order"
    );
}

#[tokio::test]
async fn single_message_is_one_final_chunk() {
    let rt = FakeRuntime::new();
    let stub = streaming_stub(&rt, Chunks::default());
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_configured().await;
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
    let stub = streaming_stub(
        &rt,
        Chunks {
            fail_on: Some(1),
            ..Chunks::default()
        },
    );
    let driver = async {
        let conn = rt.accept_configured().await;
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
    assert_sync_failed(res, "chunk rejected");
}

/// A streaming plugin whose runtime sends `payload` as the first
/// Synchronize message: the runtime gets an error answer naming the
/// problem, the plugin is not called.
async fn malformed_message_is_refused(payload: Vec<u8>, want: &str) {
    let rt = FakeRuntime::new();
    let stub = streaming_stub(&rt, Chunks::default());
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_configured().await;
        let err = conn
            .call_raw(method::SYNCHRONIZE, payload.into())
            .await
            .unwrap_err();
        match &err {
            nri_ttrpc::Error::Status { code, message } => {
                assert_eq!(*code, nri_ttrpc::Code::InvalidArgument, "{err}");
                assert!(message.contains("malformed Synchronize message"), "{err}");
                assert!(message.contains(want), "{err}");
            }
            other => panic!("expected an error status, got {other:?}"),
        }
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert!(stub.plugin().seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn truncated_message_is_refused() {
    let mut bytes = chunk(0, false).encode_to_vec();
    bytes.truncate(bytes.len() - 3);
    malformed_message_is_refused(bytes, "overruns the message").await;
}

#[tokio::test]
async fn wrong_wire_type_is_refused() {
    // Field 2 (containers) as a varint.
    malformed_message_is_refused(
        vec![0x10, 0x01],
        "field 2 (containers) has wire type varint",
    )
    .await;
}

#[tokio::test]
async fn garbage_is_refused() {
    malformed_message_is_refused(vec![0xff; 16], "invalid field key").await;
}

#[tokio::test]
async fn undecodable_item_fails_the_sync() {
    let rt = FakeRuntime::new();
    let stub = streaming_stub(&rt, Chunks::default());
    let driver = async {
        let conn = rt.accept_configured().await;
        // A pod whose 3 payload bytes are a truncated string field; framing ok.
        let err = conn
            .call_raw(
                method::SYNCHRONIZE,
                vec![0x0a, 0x03, 0x0a, 0x05, b'x'].into(),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cannot decode pod #0"), "{err}");
        conn.close();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    assert_sync_failed(res, "cannot decode pod #0");
    assert_eq!(stub.plugin().seen.lock().unwrap().len(), 1);
}

/// A stub of `plugin` on `rt`'s socket in streaming sync mode.
fn streaming_stub(rt: &FakeRuntime, plugin: Chunks) -> Stub<Chunks> {
    Builder::new(plugin)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .sync_mode(SyncMode::Streaming)
        .build()
        .unwrap()
}

/// `run()` ended with `SynchronizeFailed` whose reason mentions `needle`.
fn assert_sync_failed<T: std::fmt::Debug>(res: Result<T, nri_plugin::Error>, needle: &str) {
    match res {
        Err(nri_plugin::Error::SynchronizeFailed { reason }) => {
            assert!(reason.contains(needle), "{reason}");
        }
        other => panic!("expected SynchronizeFailed, got {other:?}"),
    }
}
