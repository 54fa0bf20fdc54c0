//! Many calls share one connection; connection loss fails them all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use nri_ttrpc::{Client, Error};

#[tokio::test(start_paused = true)]
async fn many_concurrent_calls_complete_out_of_order() {
    let (client, _srv) = pair();
    let mut calls = Vec::new();
    for i in 0..200u64 {
        let client = client.clone();
        // later calls finish first
        calls.push(tokio::spawn(async move {
            let got = client
                .call(SVC, "Sleep", u64_payload(1000 - i), opts())
                .await
                .unwrap();
            (i, got)
        }));
    }
    for c in calls {
        let (i, got) = c.await.unwrap();
        assert_eq!(got, u64_payload(1000 - i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_on_multi_thread_runtime() {
    let (client, _srv) = pair();
    let mut calls = Vec::new();
    for i in 0..500u32 {
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            let p = Bytes::from(i.to_string().repeat((i % 50) as usize + 1));
            let got = client.call(SVC, "Echo", p.clone(), opts()).await.unwrap();
            assert_eq!(got, p);
        }));
    }
    for c in calls {
        c.await.unwrap();
    }
}

#[tokio::test]
async fn connection_loss_fails_pending_and_later_calls() {
    let (client, srv) = pair();
    let pending: Vec<_> = (0..5)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call(SVC, "Forever", Bytes::new(), opts()).await })
        })
        .collect();
    // Make sure all requests are in flight before the server goes away.
    let got = client
        .call(SVC, "Echo", Bytes::from_static(b"x"), opts())
        .await
        .unwrap();
    assert_eq!(&got[..], b"x");
    assert!(!client.is_closed());
    srv.shutdown.cancel();
    srv.join().await.unwrap();
    client.closed().await;
    assert!(client.is_closed());
    for p in pending {
        let err = p.await.unwrap().unwrap_err();
        assert!(
            matches!(err, Error::ConnectionClosed { cause: None }),
            "{err:?}"
        );
    }
    let err = client
        .call(SVC, "Echo", Bytes::new(), opts())
        .await
        .unwrap_err();
    assert!(err.is_connection_closed(), "{err:?}");
}

#[tokio::test]
async fn close_fails_pending_calls_and_releases_transport() {
    let (client, srv) = pair();
    let pending = {
        let client = client.clone();
        tokio::spawn(async move { client.call(SVC, "Forever", Bytes::new(), opts()).await })
    };
    client
        .call(SVC, "Echo", Bytes::new(), opts())
        .await
        .unwrap();
    client.close();
    assert!(client.is_closed());
    let err = pending.await.unwrap().unwrap_err();
    assert!(err.is_connection_closed(), "{err:?}");
    // The transport is dropped, so the server sees end of stream.
    srv.join().await.unwrap();
}

#[tokio::test]
async fn dropping_last_client_stops_reader_and_closes_transport() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let srv = Running::spawn(test_server(), s);
    let client = Client::new(c);
    let clone = client.clone();
    clone.call(SVC, "Echo", Bytes::new(), opts()).await.unwrap();
    drop(client);
    drop(clone);
    srv.join().await.unwrap();
}
