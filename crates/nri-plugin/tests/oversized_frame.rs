//! A multiplexer frame whose header claims more than the maximum payload
//! (what containerd/nri v0.12.4 started tearing its multiplexer down for):
//! the plugin closes that connection with a typed error, nothing panics,
//! and a plugin with a reconnect policy connects again.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use nri_plugin::{Builder, Error, Phase, ReconnectPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A frame header for connection 1 (the plugin's service) announcing
/// 4,194,315 bytes (0x0040000B): one more than the maximum payload, the
/// ttRPC header (10 bytes) plus ttRPC's 4 MiB message limit.
const OVERSIZED_HEADER: [u8; 8] = [0x00, 0x00, 0x00, 0x01, 0x00, 0x40, 0x00, 0x0B];

#[test]
fn the_header_claims_one_byte_over_the_maximum() {
    let len = u32::from_be_bytes([
        OVERSIZED_HEADER[4],
        OVERSIZED_HEADER[5],
        OVERSIZED_HEADER[6],
        OVERSIZED_HEADER[7],
    ]);
    assert_eq!(len as usize, nri_mux::MAX_PAYLOAD + 1);
}

/// The multiplexer's error somewhere in `err`'s chain (also inside an
/// `io::Error`, whose `source` skips the error it wraps).
fn oversized_in_chain(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(nri_mux::Error::OversizedFrame { len, .. }) = e.downcast_ref() {
            return *len as usize == nri_mux::MAX_PAYLOAD + 1;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if oversized_in_chain(inner) {
                    return true;
                }
            }
        }
        cur = e.source();
    }
    false
}

/// Reads until the plugin closes the socket; what it sent before is
/// returned.
async fn read_until_closed(raw: &mut tokio::net::UnixStream) -> Vec<u8> {
    let mut seen = Vec::new();
    tokio::time::timeout(TIMEOUT, raw.read_to_end(&mut seen))
        .await
        .expect("the plugin did not close the connection")
        .expect("read");
    seen
}

#[tokio::test]
async fn oversized_frame_closes_the_connection_with_a_typed_error() {
    let rt = FakeRuntime::new();
    let stub = test_stub(Recorder::new().0, &rt);
    let run = tokio::spawn(async move { stub.run().await });
    let mut raw = rt.accept_raw().await;
    raw.write_all(&OVERSIZED_HEADER).await.unwrap();

    // The plugin shuts the socket down: the runtime side reads to the end.
    read_until_closed(&mut raw).await;
    let err = tokio::time::timeout(TIMEOUT, run)
        .await
        .expect("run did not end")
        .expect("no panic")
        .expect_err("the connection is gone");
    match &err {
        Error::ConnectionLost {
            phase: Phase::Registering,
            source: Some(_),
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(oversized_in_chain(&err), "{err:?}");
}

#[tokio::test]
async fn a_reconnecting_plugin_connects_again() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(Recorder::new().0)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .reconnect(ReconnectPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(10),
        ))
        .build()
        .unwrap();
    let handle = stub.handle();
    let run = tokio::spawn(async move { stub.run().await });
    let mut raw = rt.accept_raw().await;
    raw.write_all(&OVERSIZED_HEADER).await.unwrap();
    read_until_closed(&mut raw).await;

    // The same plugin dials again and registers.
    let conn = tokio::time::timeout(TIMEOUT, rt.accept(Register::Accept))
        .await
        .expect("the plugin did not reconnect");
    let reg = conn.registered().await;
    assert_eq!(reg.plugin_name, "test");
    handle.stop();
    tokio::time::timeout(TIMEOUT, run)
        .await
        .expect("run did not end")
        .expect("no panic")
        .expect("stopped on request");
}
