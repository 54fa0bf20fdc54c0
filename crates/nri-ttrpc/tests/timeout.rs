//! Every call has a deadline, enforced on both sides. Time is paused; no sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use nri_ttrpc::{CallOptions, Client, Code, Error, Response, Status};

#[tokio::test(start_paused = true)]
async fn stalled_peer_cannot_hang_caller() {
    let (c, _peer_kept_open) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let start = tokio::time::Instant::now();
    let err = client
        .call(
            SVC,
            "Echo",
            Bytes::new(),
            CallOptions::new(Duration::from_secs(2)),
        )
        .await
        .unwrap_err();
    match &err {
        Error::DeadlineExceeded {
            service,
            method,
            timeout,
        } => {
            assert_eq!(service, SVC);
            assert_eq!(method, "Echo");
            assert_eq!(*timeout, Duration::from_secs(2));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // The request was written completely, so the connection stays usable.
    assert!(!client.is_closed());
}

#[tokio::test(start_paused = true)]
async fn late_response_is_dropped_and_connection_continues() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let mut peer = RawPeer::new(s);
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(
                    SVC,
                    "Echo",
                    Bytes::new(),
                    CallOptions::new(Duration::from_secs(1)),
                )
                .await
        })
    };
    let (id1, _) = peer.recv_request().await;
    let err = first.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");

    let second = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Echo", Bytes::new(), opts()).await })
    };
    let (id2, _) = peer.recv_request().await;
    assert_eq!((id1, id2), (1, 3));
    // Late answer for stream 1, then the answer for stream 3.
    let ok = |p: &'static [u8]| Response {
        status: Some(Status::ok()),
        payload: Bytes::from_static(p),
    };
    peer.send_response(id1, &ok(b"late")).await;
    peer.send_response(id2, &ok(b"second")).await;
    assert_eq!(&second.await.unwrap().unwrap()[..], b"second");
    assert!(!client.is_closed());
}

#[tokio::test(start_paused = true)]
async fn server_answers_deadline_exceeded_when_handler_overruns() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _srv = Running::spawn(test_server(), s);
    let mut peer = RawPeer::new(c);
    let mut req = request("Forever", b"");
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

#[tokio::test(start_paused = true)]
async fn handler_finishing_in_time_succeeds() {
    let (client, _srv) = pair();
    let got = client
        .call(
            SVC,
            "Sleep",
            u64_payload(1_999),
            CallOptions::new(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    assert_eq!(got, u64_payload(1_999));
    let err = client
        .call(
            SVC,
            "Sleep",
            u64_payload(2_001),
            CallOptions::new(Duration::from_secs(2)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
}

#[tokio::test(start_paused = true)]
async fn write_stalled_mid_message_times_out_and_closes_connection() {
    // A 64-byte pipe nobody reads: the request cannot be written completely.
    let (c, _peer_kept_open) = tokio::io::duplex(64);
    let client = Client::new(c);
    let err = client
        .call(
            SVC,
            "Echo",
            Bytes::from(vec![0u8; 10_000]),
            CallOptions::new(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    // Half a message is on the wire: the connection cannot be used any more.
    assert!(client.is_closed());
    let err = client
        .call(SVC, "Echo", Bytes::new(), opts())
        .await
        .unwrap_err();
    assert!(err.is_connection_closed(), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn zero_timeout_fails_without_hanging() {
    let (c, _peer_kept_open) = tokio::io::duplex(DUPLEX);
    let client = Client::new(c);
    let err = client
        .call(SVC, "Echo", Bytes::new(), CallOptions::new(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
}
