//! A plugin's declared failure policy (`Builder::failure_policy`) is sent
//! in `ConfigureResponse.failure_policy` (field 3); without one the field
//! is absent, which is not the same as an empty policy. Checked on the
//! captured bytes of the answer.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use bytes::Bytes;
use common::*;
use nri_api::api::{Container, CreateContainerResponse, FailurePolicy, PodSandbox};
use nri_api::method;
use nri_plugin::{Builder, HandlerResult, Plugin};
use prost::Message;

struct Create;

#[nri_plugin::plugin]
impl Plugin for Create {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

/// The raw ConfigureResponse the plugin sends to a v0.12.5 runtime.
async fn configure_bytes(policy: Option<FailurePolicy>) -> Bytes {
    let rt = FakeRuntime::new();
    let mut b = Builder::new(Create)
        .name("create")
        .index("10")
        .socket_path(&rt.path);
    if let Some(p) = policy {
        b = b.failure_policy(p);
    }
    let stub = b.build().unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let req = configure_req("v0.12.5").encode_to_vec();
        let resp = conn.call_raw(method::CONFIGURE, req.into()).await.unwrap();
        conn.sync(vec![], vec![]).await.unwrap();
        handle.stop();
        resp
    };
    let (res, resp) = tokio::join!(stub.run(), driver);
    res.unwrap();
    resp
}

// events = 0x08 (CreateContainer) is field 2: `10 08`.

#[tokio::test]
async fn no_policy_sends_no_field() {
    assert_eq!(&configure_bytes(None).await[..], [0x10, 0x08]);
}

#[tokio::test]
async fn an_empty_policy_is_sent_as_an_empty_message() {
    let policy = FailurePolicy::default();
    assert_eq!(
        &configure_bytes(Some(policy)).await[..],
        [0x10, 0x08, 0x1a, 0x00]
    );
}

#[tokio::test]
async fn each_field_of_the_policy_is_sent() {
    let cases = [
        (true, false, vec![0x1a, 0x02, 0x08, 0x01]),
        (false, true, vec![0x1a, 0x02, 0x10, 0x01]),
        (true, true, vec![0x1a, 0x04, 0x08, 0x01, 0x10, 0x01]),
    ];
    for (fail_request, keep_connected, tail) in cases {
        let policy = FailurePolicy {
            fail_request,
            keep_connected,
        };
        let got = configure_bytes(Some(policy)).await;
        let mut want = vec![0x10, 0x08];
        want.extend(tail);
        assert_eq!(&got[..], want, "{policy:?}");
    }
}
