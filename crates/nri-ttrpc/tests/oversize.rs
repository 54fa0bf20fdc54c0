//! Messages over 4 MiB are refused or answered with RESOURCE_EXHAUSTED; the connection survives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use nri_ttrpc::codec::{HEADER_LEN, MAX_MESSAGE_LEN, MESSAGE_TYPE_REQUEST, MESSAGE_TYPE_RESPONSE};
use nri_ttrpc::{Client, Code, Error, Response, Status};

fn header(len: u32, stream_id: u32, ty: u8) -> [u8; HEADER_LEN] {
    nri_ttrpc::codec::Header {
        length: len,
        stream_id,
        message_type: ty,
        flags: 0,
    }
    .to_bytes()
}

#[tokio::test]
async fn client_refuses_oversized_request() {
    let (client, _srv) = pair();
    let err = client
        .call(SVC, "Echo", Bytes::from(vec![0u8; MAX_MESSAGE_LEN]), opts())
        .await
        .unwrap_err();
    match err {
        Error::MessageTooLarge { len, max } => {
            assert!(len > MAX_MESSAGE_LEN);
            assert_eq!(max, MAX_MESSAGE_LEN);
        }
        other => panic!("{other:?}"),
    }
    // Nothing was sent; the connection is fine.
    let got = client
        .call(SVC, "Echo", Bytes::from_static(b"ok"), opts())
        .await
        .unwrap();
    assert_eq!(&got[..], b"ok");
}

#[tokio::test]
async fn server_answers_oversized_request_and_keeps_connection() {
    let (c, s) = tokio::io::duplex(16 << 20);
    let _srv = Running::spawn(test_server(), s);
    let mut peer = RawPeer::new(c);
    let len = MAX_MESSAGE_LEN as u32 + 1;
    peer.send_raw(&header(len, 1, MESSAGE_TYPE_REQUEST)).await;
    peer.send_raw(&vec![0xAB; len as usize]).await;
    peer.send_request(3, &request("Echo", b"after")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!(id, 1);
    assert_eq!(code_of(&resp), Code::ResourceExhausted);
    let msg = resp.status.unwrap().message;
    assert!(msg.contains("4194305") && msg.contains("4194304"), "{msg}");
    let (id, resp) = peer.recv_response().await;
    assert_eq!(id, 3);
    assert_eq!(code_of(&resp), Code::Ok);
    assert_eq!(&resp.payload[..], b"after");
}

#[tokio::test]
async fn oversized_response_becomes_resource_exhausted() {
    let (client, _srv) = pair();
    let err = client
        .call(SVC, "Big", u64_payload(MAX_MESSAGE_LEN as u64), opts())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // Largest response that fits: payload field overhead is 1 tag + 4 varint bytes,
    // plus the empty OK status (2 bytes).
    let fit = (MAX_MESSAGE_LEN - 2 - 1 - 4) as u64;
    let got = client
        .call(SVC, "Big", u64_payload(fit), opts())
        .await
        .unwrap();
    assert_eq!(got.len() as u64, fit);
    let err = client
        .call(SVC, "Big", u64_payload(fit + 1), opts())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
}

#[tokio::test]
async fn client_fails_only_the_stream_with_an_oversized_response() {
    let (c, s) = tokio::io::duplex(16 << 20);
    let client = Client::new(c);
    let mut peer = RawPeer::new(s);
    let first = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id, _) = peer.recv_request().await;
    let len = MAX_MESSAGE_LEN as u32 + 100;
    peer.send_raw(&header(len, id, MESSAGE_TYPE_RESPONSE)).await;
    peer.send_raw(&vec![1u8; len as usize]).await;
    let err = first.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::FrameTooLarge { stream_id: 1, len: l, .. } if l == len),
        "{err:?}"
    );
    assert_eq!(err.code(), Code::ResourceExhausted);

    let second = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id, _) = peer.recv_request().await;
    peer.send_response(
        id,
        &Response {
            status: Some(Status::ok()),
            payload: Bytes::from_static(b"fine"),
        },
    )
    .await;
    assert_eq!(&second.await.unwrap().unwrap()[..], b"fine");
}

#[test]
fn encode_request_refuses_oversize_and_leaves_dst_unchanged() {
    use bytes::BytesMut;
    use nri_ttrpc::codec;
    let big = vec![0u8; codec::MAX_MESSAGE_LEN];
    let mut dst = BytesMut::from(&b"keep"[..]);
    let err = codec::encode_request(1, SVC, "Echo", &big, 0, &[], &mut dst).unwrap_err();
    assert!(
        matches!(err, nri_ttrpc::Error::MessageTooLarge { .. }),
        "{err:?}"
    );
    assert_eq!(&dst[..], b"keep");
}
