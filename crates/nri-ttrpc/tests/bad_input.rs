//! Malformed input never panics or hangs: it is answered on its stream or ends
//! the connection with a typed error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use nri_ttrpc::codec::{Header, MESSAGE_TYPE_DATA, MESSAGE_TYPE_REQUEST, MESSAGE_TYPE_RESPONSE};
use nri_ttrpc::{Client, Code, Error, Response, Status};
use proptest::prelude::*;
use tokio::io::AsyncWriteExt;

fn header(length: u32, stream_id: u32, message_type: u8) -> [u8; 10] {
    Header {
        length,
        stream_id,
        message_type,
        flags: 0,
    }
    .to_bytes()
}

/// A server on one end; the raw peer on the other.
fn server_and_peer() -> (Running, RawPeer) {
    let (c, s) = tokio::io::duplex(DUPLEX);
    (Running::spawn(test_server(), s), RawPeer::new(c))
}

#[tokio::test]
async fn truncated_header_then_eof_is_typed_error() {
    let (srv, mut peer) = server_and_peer();
    peer.send_raw(&[0, 0, 0]).await;
    drop(peer);
    let err = srv.join().await.unwrap_err();
    assert!(matches!(err, Error::Truncated { buffered: 3 }), "{err:?}");
}

#[tokio::test]
async fn truncated_payload_then_eof_is_typed_error() {
    let (srv, mut peer) = server_and_peer();
    peer.send_raw(&header(100, 1, MESSAGE_TYPE_REQUEST)).await;
    peer.send_raw(&[0; 40]).await;
    drop(peer);
    let err = srv.join().await.unwrap_err();
    assert!(matches!(err, Error::Truncated { buffered: 40 }), "{err:?}");
}

#[tokio::test]
async fn clean_eof_is_ok() {
    let (srv, mut peer) = server_and_peer();
    peer.send_request(1, &request("Echo", b"x")).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(&resp.payload[..], b"x");
    drop(peer);
    srv.join().await.unwrap();
}

#[tokio::test]
async fn garbage_envelope_is_invalid_argument_and_connection_continues() {
    let (_srv, mut peer) = server_and_peer();
    // Field 1 declared as a 100-byte string, but only 1 byte follows.
    let garbage = [0x0a, 100, b'x'];
    peer.send_raw(&header(garbage.len() as u32, 1, MESSAGE_TYPE_REQUEST))
        .await;
    peer.send_raw(&garbage).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (1, Code::InvalidArgument));
    peer.send_request(3, &request("Echo", b"ok")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, &resp.payload[..]), (3, &b"ok"[..]));
}

#[tokio::test]
async fn even_and_non_increasing_stream_ids_are_invalid_argument() {
    let (_srv, mut peer) = server_and_peer();
    peer.send_request(2, &request("Echo", b"")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (2, Code::InvalidArgument));
    peer.send_request(5, &request("Echo", b"")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (5, Code::Ok));
    peer.send_request(3, &request("Echo", b"")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (3, Code::InvalidArgument));
}

#[tokio::test]
async fn data_message_is_unimplemented_and_response_type_is_ignored() {
    let (_srv, mut peer) = server_and_peer();
    peer.send_raw(&header(3, 1, MESSAGE_TYPE_DATA)).await;
    peer.send_raw(b"abc").await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (1, Code::Unimplemented));
    // A response sent to the server: ignored, no answer.
    peer.send_response(3, &Response::default()).await;
    peer.send_request(5, &request("Echo", b"next")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, &resp.payload[..]), (5, &b"next"[..]));
}

#[tokio::test]
async fn unknown_message_type_ends_serve_with_typed_error() {
    let (srv, mut peer) = server_and_peer();
    peer.send_raw(&header(0, 1, 7)).await;
    let err = srv.join().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidMessageType {
                stream_id: 1,
                message_type: 7
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn length_over_cap_is_answered_then_truncation_reported() {
    let (srv, mut peer) = server_and_peer();
    peer.send_raw(&header(u32::MAX, 1, MESSAGE_TYPE_REQUEST))
        .await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (1, Code::ResourceExhausted));
    peer.io.shutdown().await.unwrap();
    let err = srv.join().await.unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
}

#[tokio::test]
async fn client_gets_decode_error_for_garbage_response() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let mut peer = RawPeer::new(s);
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id, _) = peer.recv_request().await;
    peer.send_raw(&header(2, id, MESSAGE_TYPE_RESPONSE)).await;
    peer.send_raw(&[0xff, 0xff]).await;
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
    assert!(!client.is_closed());
}

#[tokio::test]
async fn client_closes_on_corrupt_stream_and_on_truncation() {
    for (bytes, want_invalid_type) in [
        (header(0, 1, 0).to_vec(), true),
        (header(50, 1, MESSAGE_TYPE_RESPONSE)[..7].to_vec(), false),
    ] {
        let (c, s) = tokio::io::duplex(DUPLEX);
        let client = Client::new(c);
        let mut peer = RawPeer::new(s);
        let call = {
            let client = client.clone();
            tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
        };
        peer.recv_request().await;
        peer.send_raw(&bytes).await;
        drop(peer);
        let err = call.await.unwrap().unwrap_err();
        let Error::ConnectionClosed { cause: Some(cause) } = &err else {
            panic!("{err:?}");
        };
        if want_invalid_type {
            assert!(
                matches!(**cause, Error::InvalidMessageType { .. }),
                "{cause:?}"
            );
        } else {
            assert!(
                matches!(**cause, Error::Truncated { buffered: 7 }),
                "{cause:?}"
            );
        }
        assert!(client.is_closed());
    }
}

#[tokio::test]
async fn client_ignores_server_requests_and_unknown_streams() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let mut peer = RawPeer::new(s);
    peer.send_request(1, &request("Echo", b"")).await;
    peer.send_response(
        99,
        &Response {
            status: Some(Status::ok()),
            payload: Bytes::new(),
        },
    )
    .await;
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id, _) = peer.recv_request().await;
    peer.send_response(
        id,
        &Response {
            status: None,
            payload: Bytes::from_static(b"y"),
        },
    )
    .await;
    assert_eq!(&call.await.unwrap().unwrap()[..], b"y");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary bytes sent to a server: serve() ends (Ok or a typed error)
    /// once the peer closes, without panicking or hanging.
    #[test]
    fn server_survives_arbitrary_bytes(
        prefix in proptest::collection::vec(any::<u8>(), 0..64),
        garbage in proptest::collection::vec(any::<u8>(), 0..2048),
        valid_first in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(async {
            let (srv, mut peer) = server_and_peer();
            if valid_first {
                peer.send_request(1, &request("Echo", &prefix)).await;
            } else {
                peer.send_raw(&prefix).await;
            }
            peer.send_raw(&garbage).await;
            peer.io.shutdown().await.unwrap();
            let res = tokio::time::timeout(Duration::from_secs(60), srv.join()).await;
            prop_assert!(res.is_ok(), "serve did not end");
            Ok(())
        })?;
    }
}
