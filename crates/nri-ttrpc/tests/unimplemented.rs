//! Unknown services and methods are answered with UNIMPLEMENTED (12), not NOT_FOUND.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use nri_ttrpc::{Client, Code, Error, RequestContext, Server, Service, Status, service_fn};

#[tokio::test]
async fn unknown_service() {
    let (client, _srv) = pair();
    let err = client
        .call("no.such.Service", "Echo", Bytes::new(), opts())
        .await
        .unwrap_err();
    match err {
        Error::Status { code, message } => {
            assert_eq!(code, Code::Unimplemented);
            assert_eq!(message, "service no.such.Service");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn unknown_method() {
    let (client, _srv) = pair();
    let err = client
        .call(SVC, "NoSuchMethod", Bytes::new(), opts())
        .await
        .unwrap_err();
    match err {
        Error::Status { code, message } => {
            assert_eq!(code, Code::Unimplemented);
            assert_eq!(message, "method NoSuchMethod");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn wire_code_is_12() {
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _srv = Running::spawn(test_server(), c);
    let mut peer = RawPeer::new(s);
    peer.send_request(1, &request("Nope", b"")).await;
    let (id, resp) = peer.recv_response().await;
    assert_eq!(id, 1);
    assert_eq!(resp.status.unwrap().code, 12);
}

#[tokio::test]
async fn service_fn_adapter() {
    let svc = service_fn(|ctx: RequestContext, p: Bytes| async move {
        match ctx.method() {
            "Echo" => Ok(p),
            m => Err(Status::unknown_method(m)),
        }
    });
    // Direct use, without a connection.
    let err = svc
        .call(RequestContext::new("s", "X"), "X", Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    let mut server = Server::new();
    server.register("s", svc).unwrap();
    assert!(matches!(
        server.register("s", service_fn(|_c, p| async move { Ok(p) })),
        Err(Error::DuplicateService { .. })
    ));
    let (c, s) = tokio::io::duplex(DUPLEX);
    let _srv = Running::spawn(server, s);
    let client = Client::new(c);
    assert_eq!(
        &client
            .call("s", "Echo", Bytes::from_static(b"e"), opts())
            .await
            .unwrap()[..],
        b"e"
    );
    let err = client
        .call("s", "Other", Bytes::new(), opts())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
}
