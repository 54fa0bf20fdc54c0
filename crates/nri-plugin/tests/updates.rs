//! Unsolicited UpdateContainers (updates and evictions) through a cloneable
//! handle, from any task.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::ContainerEviction;
use nri_plugin::{Builder, Error};

#[tokio::test]
async fn unsolicited_updates_and_evictions_reach_the_runtime() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();

    let err = handle
        .update_containers(vec![recorder_update("c1")], vec![])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotConnected), "{err:?}");

    let driver = async {
        let conn = rt.accept_ready().await;
        next_call(&mut calls).await;
        // From another task, through a clone of the handle.
        let h = handle.clone();
        let task = tokio::spawn(async move {
            h.update_containers(
                vec![recorder_update("c1"), recorder_update("c2")],
                vec![ContainerEviction {
                    container_id: "c3".into(),
                    reason: "too greedy".into(),
                }],
            )
            .await
        });
        let req = conn.updates.lock().await.recv().await.unwrap();
        assert_eq!(
            req.update,
            vec![recorder_update("c1"), recorder_update("c2")]
        );
        assert_eq!(req.evict.len(), 1);
        assert_eq!(req.evict[0].container_id, "c3");
        assert_eq!(req.evict[0].reason, "too greedy");
        // The fake runtime reports the first update as failed.
        let failed = task.await.unwrap().unwrap();
        assert_eq!(failed, vec![recorder_update("c1")]);
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    let err = handle.update_containers(vec![], vec![]).await.unwrap_err();
    assert!(matches!(err, Error::NotConnected), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn unsolicited_update_has_a_deadline() {
    // A runtime that never answers UpdateContainers: the call ends at the
    // request timeout with an Rpc error.
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .request_timeout(std::time::Duration::from_secs(3))
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        // Accept raw: serve RegisterPlugin ourselves but not UpdateContainers.
        let conn = rt.accept_ready().await;
        next_call(&mut calls).await;
        // Stop the runtime's server so nothing answers.
        conn.stop_serving();
        let start = tokio::time::Instant::now();
        let err = handle
            .update_containers(vec![recorder_update("c1")], vec![])
            .await
            .unwrap_err();
        let waited = start.elapsed();
        assert!(
            matches!(
                err,
                Error::Rpc {
                    method: "UpdateContainers",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            waited >= std::time::Duration::from_secs(3)
                && waited < std::time::Duration::from_secs(4),
            "{waited:?}"
        );
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}
