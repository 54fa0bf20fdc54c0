//! A client and a server fed by their transport (`Client::with_feed`,
//! `Server::serve_fed`): messages given in any pieces are handled, errors
//! and the end of the connection end it with the right cause, and dropping
//! the feed closes it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::{Bytes, BytesMut};
use common::*;
use nri_ttrpc::codec::{self, MessageType};
use nri_ttrpc::{Client, ClientFeed, Code, Error, Response, ServerFeed, Status};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The bytes of one response frame.
fn response_bytes(stream_id: u32, resp: &Response) -> Vec<u8> {
    let mut b = BytesMut::new();
    codec::encode_message(stream_id, MessageType::Response, 0, resp, &mut b).unwrap();
    b.to_vec()
}

/// A fed client writing to a raw peer.
fn fed_client() -> (Client, ClientFeed, RawPeer) {
    let (wr, peer_io) = tokio::io::duplex(DUPLEX);
    let (client, feed) = Client::with_feed(wr);
    (client, feed, RawPeer::new(peer_io))
}

/// Starts a call of `method` with `payload` in a task of its own.
fn spawn_call(
    client: &Client,
    method: &'static str,
    payload: &'static [u8],
) -> JoinHandle<Result<Bytes, Error>> {
    let c = client.clone();
    tokio::spawn(async move {
        c.call(SVC, method, Bytes::from_static(payload), opts())
            .await
    })
}

fn ok_response(payload: &[u8]) -> Response {
    Response {
        status: Some(Status::ok()),
        payload: Bytes::copy_from_slice(payload),
    }
}

/// Whether a feed is inside a frame after `fed` bytes of two frames, the
/// first `first_len` long, `total` in all.
fn mid_frame(fed: usize, first_len: usize, total: usize) -> bool {
    fed != first_len && fed != total
}

#[tokio::test]
async fn answers_fed_in_pieces_and_out_of_order_complete_their_calls() {
    let (client, mut feed, mut peer) = fed_client();
    let first = spawn_call(&client, "Echo", b"one");
    let (id1, req1) = peer.recv_request().await;
    assert_eq!(&req1.payload[..], b"one");
    let second = spawn_call(&client, "Fail", b"two");
    let (id2, _) = peer.recv_request().await;

    // The second call's answer first, then the first's, split everywhere,
    // including inside the headers.
    let mut bytes = response_bytes(
        id2,
        &Response {
            status: Some(Status::new(Code::NotFound, "nope")),
            payload: Bytes::new(),
        },
    );
    bytes.extend(response_bytes(id1, &ok_response(b"answer one")));
    let first_len = bytes.len() - response_bytes(id1, &ok_response(b"answer one")).len();
    let mut fed = 0;
    for piece in bytes.chunks(3) {
        feed.data(piece);
        fed += piece.len();
        assert_eq!(feed.is_mid_frame(), mid_frame(fed, first_len, bytes.len()));
    }
    assert!(!feed.is_mid_frame(), "nothing held between frames");
    assert_eq!(&first.await.unwrap().unwrap()[..], b"answer one");
    match second.await.unwrap() {
        Err(Error::Status { code, .. }) => assert_eq!(code, Code::NotFound),
        other => panic!("expected NOT_FOUND, got {other:?}"),
    }
    assert!(!client.is_closed());
}

#[tokio::test]
async fn a_corrupt_stream_fails_pending_calls_and_closes_the_client() {
    let (client, mut feed, mut peer) = fed_client();
    let call = spawn_call(&client, "Echo", b"");
    peer.recv_request().await;
    // A header with a message type that does not exist (0x7).
    feed.data(&[0, 0, 0, 1, 0, 0, 0, 1, 0x7, 0, b'x']);
    match call.await.unwrap() {
        Err(Error::ConnectionClosed { cause: Some(c) }) => {
            assert!(matches!(*c, Error::InvalidMessageType { .. }), "{c:?}")
        }
        other => panic!("expected a closed connection with a cause, got {other:?}"),
    }
    assert!(client.is_closed());
}

#[tokio::test]
async fn the_end_of_the_connection_fails_pending_calls() {
    let (client, mut feed, mut peer) = fed_client();
    let call = spawn_call(&client, "Echo", b"");
    let (id, _) = peer.recv_request().await;
    // Half a response, then the end: the call reports the truncation.
    let bytes = response_bytes(id, &ok_response(b"cut short"));
    feed.data(&bytes[..bytes.len() / 2]);
    feed.end(None);
    match call.await.unwrap() {
        Err(Error::ConnectionClosed { cause: Some(c) }) => {
            assert!(matches!(*c, Error::Truncated { .. }), "{c:?}")
        }
        other => panic!("expected a truncated connection, got {other:?}"),
    }
    // Later calls fail at once.
    assert!(matches!(
        client.call(SVC, "Echo", Bytes::new(), opts()).await,
        Err(Error::ConnectionClosed { .. })
    ));
}

#[tokio::test]
async fn dropping_the_feed_closes_the_client() {
    let (client, feed, _peer) = fed_client();
    assert!(!client.is_closed());
    drop(feed);
    assert!(client.is_closed());
    client.closed().await;
}

/// The bytes of one request frame.
fn request_bytes(stream_id: u32, method: &str, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    codec::encode_message(
        stream_id,
        MessageType::Request,
        0,
        &request(method, payload),
        &mut b,
    )
    .unwrap();
    b.to_vec()
}

/// The test server, fed, writing to a raw peer; its future runs in a task.
fn fed_server() -> (ServerFeed, JoinHandle<Result<(), Error>>, RawPeer) {
    let (wr, peer_io) = tokio::io::duplex(DUPLEX);
    let (feed, serving) = test_server().serve_fed(wr, CancellationToken::new());
    (feed, tokio::spawn(serving), RawPeer::new(peer_io))
}

#[tokio::test]
async fn a_fed_server_answers_at_once_and_runs_slow_handlers_in_its_future() {
    let (mut feed, serving, mut peer) = fed_server();
    // A slow request (50 ms) and a quick one, fed byte by byte.
    let mut bytes = request_bytes(1, "Sleep", &50u64.to_be_bytes());
    bytes.extend(request_bytes(3, "Echo", b"quick"));
    let first_len = request_bytes(1, "Sleep", &50u64.to_be_bytes()).len();
    for (i, b) in bytes.iter().enumerate() {
        feed.data(std::slice::from_ref(b));
        assert_eq!(
            feed.is_mid_frame(),
            mid_frame(i + 1, first_len, bytes.len())
        );
    }
    // The quick answer was written while `data` ran: the slow handler did
    // not hold it up.
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, &resp.payload[..]), (3, &b"quick"[..]));
    let (id, resp) = peer.recv_response().await;
    assert_eq!((id, code_of(&resp)), (1, Code::Ok));
    // A clean end: the server's future ends with `Ok`.
    feed.end(None);
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_fed_server_ends_with_the_stream_error_and_aborts_its_handlers() {
    let (mut feed, serving, mut peer) = fed_server();
    feed.data(&request_bytes(1, "Forever", b""));
    feed.data(&request_bytes(3, "Echo", b"x"));
    assert_eq!(peer.recv_response().await.0, 3);
    // A request cut short by the end of the stream.
    let cut = request_bytes(5, "Echo", b"cut short");
    feed.data(&cut[..cut.len() - 2]);
    feed.end(None);
    match serving.await.unwrap() {
        Err(Error::Truncated { .. }) => {}
        other => panic!("expected a truncated stream, got {other:?}"),
    }
    // The `Forever` handler was aborted: nothing more is written, and the
    // writer (held by that handler's task until then) is gone.
    drop(feed);
    assert!(peer.recv().await.is_none());
}

#[tokio::test]
async fn dropping_a_server_feed_ends_the_connection_cleanly() {
    let (wr, _peer_io) = tokio::io::duplex(DUPLEX);
    let (feed, serving) = test_server().serve_fed(wr, CancellationToken::new());
    drop(feed);
    serving.await.unwrap();
}
