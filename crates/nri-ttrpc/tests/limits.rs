//! Per-connection limits of the server (request size, requests in flight,
//! metadata entries) and the client's cap on status details: what goes
//! over is refused before it is decoded, reported to the observer, and
//! costs nothing but that request (or, for a peer that never reads its
//! answers, its own connection).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use nri_ttrpc::codec::{Header, MESSAGE_TYPE_REQUEST, MessageType, encode_message};
use nri_ttrpc::{
    Any, Client, Code, Error, KeyValue, Refusal, RequestLenLimit, Response, Server, ServerLimits,
    Status,
};
use prost::Message;
use tokio::io::AsyncWriteExt;

type Seen = Arc<Mutex<Vec<Refusal>>>;

/// The test server with `limits`, recording its refusals.
fn limited(limits: ServerLimits) -> (Server, Seen) {
    let mut server = test_server();
    server.set_limits(limits);
    let seen: Seen = Arc::default();
    let s = seen.clone();
    server.set_refusal_observer(move |r: &Refusal| s.lock().unwrap().push(r.clone()));
    (server, seen)
}

fn kinds(seen: &Seen) -> Vec<&'static str> {
    seen.lock().unwrap().iter().map(Refusal::kind).collect()
}

#[tokio::test]
async fn a_request_over_the_size_limit_is_skipped_unread_until_the_limit_is_raised() {
    let len = RequestLenLimit::new(64);
    let (server, seen) = limited(ServerLimits::default().with_max_request_len(len.clone()));
    let (c, s) = tokio::io::duplex(DUPLEX);
    let srv = Running::spawn(server, s);
    let mut peer = RawPeer::new(c);
    let big = request("Echo", &[1; 200]);
    peer.send_request(1, &big).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (1, Code::ResourceExhausted));
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [Refusal::TooLarge {
            stream_id: 1,
            len: big.encoded_len() as u32,
            max: 64
        }]
    );
    // The connection goes on; a small request is answered.
    peer.send_request(3, &request("Echo", b"ok")).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(&resp.payload[..], b"ok");
    // Raised while serving: the next large request goes through.
    len.set(4096);
    peer.send_request(5, &request("Echo", &[2; 200])).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(resp.payload.len(), 200);
    drop(peer);
    srv.join().await.unwrap();
}

#[tokio::test]
async fn requests_beyond_the_in_flight_limit_are_refused_then_accepted_again() {
    let (server, seen) = limited(ServerLimits::default().with_max_in_flight(2));
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _srv = Running::spawn(server, s);
    let client = Client::new(c);
    let slow = |c: &Client| {
        let c = c.clone();
        tokio::spawn(async move { c.call(SVC, "Sleep", u64_payload(200), opts()).await })
    };
    let (a, b) = (slow(&client), slow(&client));
    // Both are in flight once the Echo below is refused.
    let err = loop {
        match client
            .call(SVC, "Echo", Bytes::from_static(b"x"), opts())
            .await
        {
            Err(e) => break e,
            // Raced ahead of the slow ones: try again.
            Ok(_) => tokio::task::yield_now().await,
        }
    };
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.to_string().contains("limit 2"), "{err}");
    assert!(kinds(&seen).contains(&"in_flight"));
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    let ok = client
        .call(SVC, "Echo", Bytes::from_static(b"y"), opts())
        .await;
    assert_eq!(&ok.unwrap()[..], b"y");
}

#[tokio::test]
async fn a_peer_that_floods_without_reading_loses_its_connection() {
    let (server, seen) = limited(ServerLimits::default().with_max_in_flight(2));
    // A tiny pipe: answers cannot be written while the peer does not read.
    let (c, s) = tokio::io::duplex(64);
    let srv = Running::spawn(server, s);
    let mut peer = c;
    let mut id = 1;
    let end = loop {
        let mut b = bytes::BytesMut::new();
        let req = request("Forever", b"");
        encode_message(id, MessageType::Request, 0, &req, &mut b).unwrap();
        // Fails once the server has closed the connection.
        let written = peer.write_all(&b).await;
        id += 2;
        if written.is_err() || srv.task.is_finished() || id > 2001 {
            break srv.join().await;
        }
        tokio::task::yield_now().await;
    };
    assert!(
        matches!(end, Err(Error::TooManyInFlight { max: 2 })),
        "{end:?}"
    );
    assert!(kinds(&seen).contains(&"in_flight"));
}

#[tokio::test]
async fn metadata_beyond_the_limit_is_refused_before_decoding() {
    let (server, seen) = limited(ServerLimits::default().with_max_metadata(3));
    let (c, s) = tokio::io::duplex(DUPLEX);
    let srv = Running::spawn(server, s);
    let mut peer = RawPeer::new(c);
    let mut req = request("Meta", b"");
    req.metadata = vec![KeyValue::new("k", "v"); 3];
    peer.send_request(1, &req).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(&resp.payload[..], b"k=v;k=v;k=v;");
    req.metadata.push(KeyValue::default());
    peer.send_request(3, &req).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(code_of(&resp), Code::ResourceExhausted);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [Refusal::TooMuchMetadata {
            stream_id: 3,
            count: 4,
            max: 3
        }]
    );
    drop(peer);
    srv.join().await.unwrap();
}

#[tokio::test]
async fn malformed_requests_are_reported() {
    let (server, seen) = limited(ServerLimits::default());
    let (c, s) = tokio::io::duplex(DUPLEX);
    let srv = Running::spawn(server, s);
    let mut peer = RawPeer::new(c);
    // An even stream id, then an envelope that does not decode.
    peer.send_request(2, &request("Echo", b"")).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(code_of(&resp), Code::InvalidArgument);
    let h = Header {
        length: 2,
        stream_id: 3,
        message_type: MESSAGE_TYPE_REQUEST,
        flags: 0,
    };
    peer.send_raw(&h.to_bytes()).await;
    peer.send_raw(&[0x0a, 0x05]).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(code_of(&resp), Code::InvalidArgument);
    assert_eq!(kinds(&seen), ["malformed", "malformed"]);
    drop(peer);
    srv.join().await.unwrap();
}

#[tokio::test]
async fn a_response_with_thousands_of_status_details_is_refused_undecoded() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let mut peer = RawPeer::new(s);
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id, _) = peer.recv_request().await;
    let resp = Response {
        status: Some(Status {
            code: 2,
            message: "no".into(),
            details: vec![Any::default(); 100_000],
        }),
        payload: Bytes::new(),
    };
    peer.send_response(id, &resp).await;
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ResponseRefused { .. }), "{err:?}");
    assert_eq!(err.code(), Code::ResourceExhausted);
    // The client still works.
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id, _) = peer.recv_request().await;
    peer.send_response(
        id,
        &Response {
            status: None,
            payload: Bytes::from_static(b"fine"),
        },
    )
    .await;
    assert_eq!(&call.await.unwrap().unwrap()[..], b"fine");
}

#[tokio::test]
async fn a_fed_server_follows_the_size_limit_too() {
    let len = RequestLenLimit::new(64);
    let (server, seen) = limited(ServerLimits::default().with_max_request_len(len.clone()));
    let (c, s) = tokio::io::duplex(DUPLEX);
    let (mut feed, serving) = server.serve_fed(s, tokio_util::sync::CancellationToken::new());
    let task = tokio::spawn(serving);
    let mut peer = RawPeer::new(c);
    let big = request("Echo", &[1; 200]);
    let frame = |id: u32| {
        let mut b = bytes::BytesMut::new();
        encode_message(id, MessageType::Request, 0, &big, &mut b).unwrap();
        b
    };
    feed.data(&frame(1));
    let (_, resp) = peer.recv_response().await;
    assert_eq!(code_of(&resp), Code::ResourceExhausted);
    assert_eq!(kinds(&seen), ["too_large"]);
    len.set(1024);
    feed.data(&frame(3));
    let (_, resp) = peer.recv_response().await;
    assert_eq!(resp.payload.len(), 200);
    drop(feed);
    task.await.unwrap().unwrap();
}
