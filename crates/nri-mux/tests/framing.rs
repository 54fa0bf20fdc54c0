//! Frame layout on the wire: captured bytes for the encoder, and the exact
//! frames a `MuxConn` writes on the raw socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::BytesMut;
use common::*;
use nri_mux::{
    ConnId, Error, MAX_PAYLOAD, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, encode_message,
};
use tokio::io::AsyncWriteExt;

#[test]
fn captured_small_message() {
    let mut dst = BytesMut::new();
    encode_message(
        PLUGIN_SERVICE_CONN,
        b"\x00\x00\x00\x02\x00\x00\x00\x01\x01\x00ab",
        &mut dst,
    )
    .unwrap();
    assert_eq!(
        &dst[..],
        &[
            0x00, 0x00, 0x00, 0x01, // conn 1
            0x00, 0x00, 0x00, 0x0c, // 12 bytes
            0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00, b'a', b'b',
        ][..]
    );
}

#[test]
fn captured_5000_bytes_on_conn_2() {
    let msg = pattern(5000, 7);
    let mut dst = BytesMut::new();
    encode_message(RUNTIME_SERVICE_CONN, &msg, &mut dst).unwrap();
    assert_eq!(dst.len(), 8 + 4096 + 8 + 904);
    assert_eq!(
        &dst[0..8],
        &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x10, 0x00]
    );
    assert_eq!(&dst[8..8 + 4096], &msg[..4096]);
    assert_eq!(
        &dst[4104..4112],
        &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x03, 0x88]
    );
    assert_eq!(&dst[4112..], &msg[4096..]);
}

#[test]
fn captured_empty_message() {
    let mut dst = BytesMut::new();
    encode_message(ConnId(0x0102_0304), b"", &mut dst).unwrap();
    assert_eq!(&dst[..], &[0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0]);
}

#[test]
fn encoder_boundaries() {
    for (len, frames) in [
        (1usize, vec![1usize]),
        (4095, vec![4095]),
        (4096, vec![4096]),
        (4097, vec![4096, 1]),
        (1 << 20, vec![4096, (1 << 20) - 4096]),
        (MAX_PAYLOAD, vec![4096, MAX_PAYLOAD - 4096]),
    ] {
        let msg = pattern(len, 1);
        let mut dst = BytesMut::new();
        encode_message(RUNTIME_SERVICE_CONN, &msg, &mut dst).unwrap();
        let parsed = parse_frames(&dst);
        let sizes: Vec<_> = parsed.iter().map(|(_, p)| p.len()).collect();
        assert_eq!(sizes, frames, "message of {len} bytes");
        assert!(parsed.iter().all(|(id, _)| *id == 2));
        assert_eq!(parsed.concat_payload(), msg);
    }
}

#[test]
fn encoder_refuses_over_cap_and_writes_nothing() {
    let msg = vec![0u8; MAX_PAYLOAD + 1];
    let mut dst = BytesMut::from(&b"keep"[..]);
    let err = encode_message(PLUGIN_SERVICE_CONN, &msg, &mut dst).unwrap_err();
    assert!(
        matches!(err, Error::MessageTooLarge { len, max } if len == MAX_PAYLOAD + 1 && max == MAX_PAYLOAD)
    );
    assert_eq!(&dst[..], b"keep");
}

trait Concat {
    fn concat_payload(&self) -> Vec<u8>;
}
impl Concat for Vec<(u32, Vec<u8>)> {
    fn concat_payload(&self) -> Vec<u8> {
        self.iter().flat_map(|(_, p)| p.iter().copied()).collect()
    }
}

/// Writes messages of the boundary sizes through a MuxConn and checks the
/// exact frames on the raw socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_writes_go_compatible_frames() {
    let (mux, mut raw) = mux_and_raw();
    let reader = tokio::spawn(async move { read_to_end(&mut raw).await });
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();

    let sizes = [
        0usize,
        1,
        4095,
        4096,
        4097,
        1 << 20,
        MAX_PAYLOAD - 1,
        MAX_PAYLOAD,
        10,
    ];
    let mut expected = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let msg = pattern(len, i as u8);
        conn.write_all(&msg).await.unwrap();
        if len == 0 {
            continue; // an empty write sends nothing
        }
        let mut enc = BytesMut::new();
        encode_message(RUNTIME_SERVICE_CONN, &msg, &mut enc).unwrap();
        expected.extend_from_slice(&enc);
    }
    conn.flush().await.unwrap();
    let stats = mux.stats();
    assert_eq!(stats.messages_sent, sizes.len() as u64 - 1);
    mux.close();
    let got = reader.await.unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "trunk bytes differ from the expected frames"
    );

    let frames = parse_frames(&got);
    let sizes: Vec<_> = frames.iter().map(|(_, p)| p.len()).collect();
    assert_eq!(
        sizes,
        vec![
            1,
            4095,
            4096,
            4096,
            1,
            4096,
            (1 << 20) - 4096,
            4096,
            MAX_PAYLOAD - 1 - 4096,
            4096,
            MAX_PAYLOAD - 4096,
            10
        ]
    );
}

#[tokio::test]
async fn driver_refuses_over_cap_without_writing() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let err = conn.write(&vec![0u8; MAX_PAYLOAD + 1]).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(matches!(typed(&err), Error::MessageTooLarge { .. }));
    // The trunk is intact and the next message is the first thing on the wire.
    conn.write_all(b"next").await.unwrap();
    assert_eq!(read_n(&mut raw, 12).await, frame(1, b"next"));
}

#[tokio::test]
async fn one_write_call_is_one_message() {
    let (mux, mut raw) = mux_and_raw();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let msg = pattern(6000, 3);
    // A single poll_write takes the whole buffer, never a part.
    assert_eq!(conn.write(&msg).await.unwrap(), 6000);
    let got = read_n(&mut raw, 6000 + 16).await;
    let frames = parse_frames(&got);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].1.len(), 4096);
    assert_eq!(frames[1].1.len(), 6000 - 4096);
}
