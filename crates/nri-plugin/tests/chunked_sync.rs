//! A synchronization split into several messages is echoed with more=true
//! and no updates until the last one, then handed to the plugin in one call.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{SynchronizeRequest, SynchronizeResponse};
use nri_api::method;
use nri_plugin::SyncKind;

#[tokio::test]
async fn chunks_are_reassembled() {
    let rt = FakeRuntime::new();
    let (mut rec, mut calls) = Recorder::new();
    rec.sync_updates = vec![recorder_update("c0-0")];
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_configured().await;
        let chunk = |n: usize, more: bool| SynchronizeRequest {
            pods: (0..3).map(|i| pod(&format!("p{n}-{i}"))).collect(),
            containers: (0..5)
                .map(|i| container(&format!("c{n}-{i}"), &format!("p{n}-0")))
                .collect(),
            more,
        };
        for n in 0..3 {
            let resp: SynchronizeResponse = conn
                .call(method::SYNCHRONIZE, &chunk(n, true))
                .await
                .unwrap();
            assert!(resp.more, "non-final chunk must be echoed with more=true");
            assert!(resp.update.is_empty(), "no updates before the last chunk");
        }
        assert!(
            calls.try_recv().is_err(),
            "plugin must not see partial syncs"
        );
        let resp: SynchronizeResponse = conn
            .call(method::SYNCHRONIZE, &chunk(3, false))
            .await
            .unwrap();
        assert!(!resp.more);
        assert_eq!(resp.update, vec![recorder_update("c0-0")]);
        let call = next_call(&mut calls).await;
        assert_eq!(call.what, "Synchronize Initial");
        assert_eq!((call.pod.as_str(), call.container.as_str()), ("12", "20"));
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert_eq!(
        stub.plugin().syncs.lock().unwrap().as_slice(),
        [(12, 20, SyncKind::Initial)]
    );
}
