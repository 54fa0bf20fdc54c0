//! The server polls each handler once on the serving task and spawns it only
//! if it is not finished. Handlers that answer at once, that wait, that
//! panic, or that overrun their deadline after waiting must all behave as
//! when every handler ran in its own task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use nri_ttrpc::{CallOptions, Client, Code, Methods, Server};
use tokio::sync::Notify;

/// A server with `Gate` (waits until the test opens the gate, then echoes)
/// and `Echo`.
fn gated_server(gate: Arc<Notify>) -> Server {
    let methods = Methods::new()
        .add("Echo", |_ctx, p: Bytes| async move { Ok(p) })
        .add("Gate", move |_ctx, p: Bytes| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                Ok(p)
            }
        });
    let mut server = Server::new();
    server.register(SVC, methods).unwrap();
    server
}

/// A waiting handler leaves the serving task free: a later call is answered
/// while the first still waits, and the first is answered once woken (its
/// waker was taken over by the spawned task).
#[tokio::test(start_paused = true)]
async fn waiting_handler_does_not_block_later_calls_and_is_woken() {
    let gate = Arc::new(Notify::new());
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _server = Running::spawn(gated_server(gate.clone()), s);
    let client = Client::new(c);

    let gated = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call(SVC, "Gate", Bytes::from_static(b"g"), opts())
                .await
        }
    });
    // Let the gated request reach its handler.
    tokio::task::yield_now().await;
    let echo = client
        .call(SVC, "Echo", Bytes::from_static(b"e"), opts())
        .await
        .unwrap();
    assert_eq!(echo, Bytes::from_static(b"e"));
    assert!(!gated.is_finished());

    gate.notify_one();
    let got = gated.await.unwrap().unwrap();
    assert_eq!(got, Bytes::from_static(b"g"));
}

/// The deadline timer is armed only after the first poll, but a handler
/// that waits past its deadline is still answered DEADLINE_EXCEEDED at the
/// deadline (plus the grace) measured from when the request arrived.
#[tokio::test(start_paused = true)]
async fn deadline_still_enforced_after_first_poll() {
    let gate = Arc::new(Notify::new());
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _server = Running::spawn(gated_server(gate), s);
    let mut peer = RawPeer::new(c);
    let mut req = request("Gate", b"x");
    req.timeout_nano = 1_000_000_000;
    let start = tokio::time::Instant::now();
    peer.send_request(1, &req).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!(id, 1);
    assert_eq!(code_of(&resp), Code::DeadlineExceeded);
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1) + nri_ttrpc::DEADLINE_GRACE
    );
}

/// A handler that is ready at once answers even with an already expired
/// deadline (negative timeout), as before.
#[tokio::test(start_paused = true)]
async fn ready_handler_answers_with_expired_deadline() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _server = Running::spawn(test_server(), s);
    let mut peer = RawPeer::new(c);
    let mut req = request("Echo", b"now");
    req.timeout_nano = -1;
    peer.send_request(1, &req).await;
    let (_, resp) = peer.recv_response().await;
    assert_eq!(code_of(&resp), Code::Ok);
    assert_eq!(resp.payload, Bytes::from_static(b"now"));
}

/// Many calls that answer at once, in sequence and concurrently, on a
/// multi-thread runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_immediate_calls() {
    let (client, _server) = pair();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..64u64 {
        let client = client.clone();
        set.spawn(async move {
            for j in 0..50u64 {
                let p = u64_payload(i * 1000 + j);
                let got = client
                    .call(
                        SVC,
                        "Echo",
                        p.clone(),
                        CallOptions::new(Duration::from_secs(20)),
                    )
                    .await
                    .unwrap();
                assert_eq!(got, p);
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}
