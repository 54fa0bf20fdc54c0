//! Calls that succeed or fail normally, end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use nri_ttrpc::{CallOptions, Client, Code, Error, KeyValue};

#[tokio::test]
async fn echo_small_empty_and_large() {
    let (client, _srv) = pair();
    for len in [0usize, 1, 64, 4086, 4087, 100_000, 4_000_000] {
        let payload = Bytes::from((0..len).map(|i| i as u8).collect::<Vec<_>>());
        let got = client
            .call(SVC, "Echo", payload.clone(), opts())
            .await
            .unwrap();
        assert_eq!(got, payload, "len {len}");
    }
}

#[tokio::test]
async fn over_unix_socket_pair() {
    let (a, b) = tokio::net::UnixStream::pair().unwrap();
    let _srv = Running::spawn(test_server(), b);
    let client = Client::new(a);
    let got = client
        .call(SVC, "Echo", Bytes::from_static(b"unix"), opts())
        .await
        .unwrap();
    assert_eq!(&got[..], b"unix");
}

#[tokio::test]
async fn typed_call_message() {
    let (client, _srv) = pair();
    let req = KeyValue::new("k", "v");
    let resp: KeyValue = client
        .call_message(SVC, "Echo", &req, opts())
        .await
        .unwrap();
    assert_eq!(resp, req);
}

#[tokio::test]
async fn handler_status_reaches_caller() {
    let (client, _srv) = pair();
    let err = client
        .call(SVC, "Fail", Bytes::new(), opts())
        .await
        .unwrap_err();
    match &err {
        Error::Status { code, message } => {
            assert_eq!(*code, Code::NotFound);
            assert_eq!(message, "nope");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn handler_panic_is_internal_and_connection_survives() {
    let (client, _srv) = pair();
    let err = client
        .call(SVC, "Panic", Bytes::new(), opts())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    let got = client
        .call(SVC, "Echo", Bytes::from_static(b"x"), opts())
        .await
        .unwrap();
    assert_eq!(&got[..], b"x");
}

#[tokio::test]
async fn metadata_reaches_handler() {
    let (client, _srv) = pair();
    let o = opts()
        .with_metadata("a", "1")
        .with_metadata("a", "2")
        .with_metadata("traceparent", "t");
    let got = client.call(SVC, "Meta", Bytes::new(), o).await.unwrap();
    assert_eq!(&got[..], b"a=1;a=2;traceparent=t;");
}

#[tokio::test(start_paused = true)]
async fn deadline_reaches_handler() {
    let (client, _srv) = pair();
    let o = CallOptions::new(Duration::from_secs(10));
    let got = client.call(SVC, "Deadline", Bytes::new(), o).await.unwrap();
    let ms: u64 = std::str::from_utf8(&got).unwrap().parse().unwrap();
    assert!((9_900..=10_000).contains(&ms), "{ms}");
}

#[tokio::test]
async fn wire_request_fields_and_stream_ids() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let mut peer = RawPeer::new(s);
    for (i, want_id) in [1u32, 3, 5].into_iter().enumerate() {
        let cl = client.clone();
        let call = tokio::spawn(async move {
            cl.call(
                "svc.X",
                "M",
                Bytes::from_static(b"p"),
                CallOptions::new(Duration::from_millis(1500)).with_metadata("k", "v"),
            )
            .await
        });
        let (id, req) = peer.recv_request().await;
        assert_eq!(id, want_id, "call {i}");
        assert_eq!(req.service, "svc.X");
        assert_eq!(req.method, "M");
        assert_eq!(&req.payload[..], b"p");
        assert_eq!(req.timeout_nano, 1_500_000_000);
        assert_eq!(req.metadata, vec![KeyValue::new("k", "v")]);
        peer.send_response(
            id,
            &nri_ttrpc::Response {
                status: None,
                payload: Bytes::from_static(b"r"),
            },
        )
        .await;
        assert_eq!(&call.await.unwrap().unwrap()[..], b"r");
    }
}
