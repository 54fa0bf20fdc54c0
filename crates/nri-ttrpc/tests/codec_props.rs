//! Property tests of the sans-io codec: encode/decode round trips under
//! arbitrary chunking of the input stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use nri_ttrpc::codec::{self, Decoder, Frame, MessageType};
use nri_ttrpc::{Error, KeyValue, Request, Response, Status};
use proptest::prelude::*;
use prost::Message;

#[derive(Debug, PartialEq)]
enum Out {
    Frame(Frame),
    TooLarge(u32, u32),
    Unsupported(u32),
    Fatal,
}

/// Feeds `input` to a decoder in the given chunk sizes and collects everything.
fn decode_chunked(input: &[u8], chunks: &[usize], max: usize) -> Vec<Out> {
    let mut d = Decoder::with_max_message_len(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = input;
    let mut sizes = chunks.iter().copied().cycle();
    loop {
        loop {
            match d.decode(&mut buf) {
                Ok(Some(f)) => out.push(Out::Frame(f)),
                Ok(None) => break,
                Err(Error::FrameTooLarge { stream_id, len, .. }) => {
                    out.push(Out::TooLarge(stream_id, len))
                }
                Err(Error::UnsupportedMessageType { stream_id, .. }) => {
                    out.push(Out::Unsupported(stream_id))
                }
                Err(Error::InvalidMessageType { .. }) => {
                    out.push(Out::Fatal);
                    return out;
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        if rest.is_empty() {
            return out;
        }
        let n = sizes.next().unwrap_or(1).clamp(1, rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fn frame_strategy() -> impl Strategy<Value = (u32, bool, u8, Vec<u8>)> {
    (
        any::<u32>(),
        any::<bool>(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
}

proptest! {
    #[test]
    fn frames_roundtrip_under_any_chunking(
        frames in proptest::collection::vec(frame_strategy(), 0..20),
        chunks in proptest::collection::vec(1usize..700, 1..10),
    ) {
        let mut wire = BytesMut::new();
        let mut want = Vec::new();
        for (id, req, flags, payload) in &frames {
            let ty = if *req { MessageType::Request } else { MessageType::Response };
            codec::encode_frame(*id, ty, *flags, payload, &mut wire).unwrap();
            want.push(Out::Frame(Frame { stream_id: *id, message_type: ty, flags: *flags, payload: Bytes::copy_from_slice(payload) }));
        }
        prop_assert_eq!(decode_chunked(&wire, &chunks, codec::MAX_MESSAGE_LEN), want);
    }

    #[test]
    fn oversized_frames_are_skipped_exactly(
        frames in proptest::collection::vec(frame_strategy(), 0..20),
        chunks in proptest::collection::vec(1usize..700, 1..10),
        cap in 0usize..200,
    ) {
        let mut wire = BytesMut::new();
        let mut want = Vec::new();
        for (id, req, flags, payload) in &frames {
            let ty = if *req { MessageType::Request } else { MessageType::Response };
            codec::encode_frame(*id, ty, *flags, payload, &mut wire).unwrap();
            want.push(if payload.len() > cap {
                Out::TooLarge(*id, payload.len() as u32)
            } else {
                Out::Frame(Frame { stream_id: *id, message_type: ty, flags: *flags, payload: Bytes::copy_from_slice(payload) })
            });
        }
        prop_assert_eq!(decode_chunked(&wire, &chunks, cap), want);
    }

    #[test]
    fn arbitrary_bytes_decode_the_same_in_any_chunking(
        input in proptest::collection::vec(any::<u8>(), 0..2000),
        chunks in proptest::collection::vec(1usize..64, 1..10),
        cap in prop_oneof![Just(codec::MAX_MESSAGE_LEN), 0usize..300],
    ) {
        let whole = decode_chunked(&input, &[input.len().max(1)], cap);
        let chunked = decode_chunked(&input, &chunks, cap);
        prop_assert_eq!(whole, chunked);
    }

    #[test]
    fn envelopes_roundtrip(
        service in ".{0,40}", method in ".{0,40}",
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        timeout_nano in any::<i64>(),
        md in proptest::collection::vec((".{0,10}", ".{0,10}"), 0..5),
        code in any::<i32>(), message in ".{0,40}",
    ) {
        let req = Request {
            service, method, payload: Bytes::from(payload.clone()), timeout_nano,
            metadata: md.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect(),
        };
        let mut wire = BytesMut::new();
        codec::encode_message(9, MessageType::Request, 0, &req, &mut wire).unwrap();
        let out = decode_chunked(&wire, &[7], codec::MAX_MESSAGE_LEN);
        let [Out::Frame(f)] = &out[..] else { panic!("{out:?}") };
        prop_assert_eq!(f.stream_id, 9);
        prop_assert_eq!(Request::decode(f.payload.clone()).unwrap(), req);

        let resp = Response { status: Some(Status { code, message, details: vec![] }), payload: Bytes::from(payload) };
        let enc = resp.encode_to_vec();
        prop_assert_eq!(Response::decode(&enc[..]).unwrap(), resp);
    }

    /// `encode_request` (borrowed parts) writes exactly the bytes of
    /// `encode_message` with the equivalent `Request`.
    #[test]
    fn encode_request_matches_encode_message(
        service in ".{0,40}", method in ".{0,40}",
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        timeout_nano in prop_oneof![Just(0i64), Just(-1i64), any::<i64>()],
        md in proptest::collection::vec((".{0,10}", ".{0,10}"), 0..5),
        stream_id in any::<u32>(),
    ) {
        let metadata: Vec<KeyValue> = md.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect();
        let req = Request {
            service: service.clone(), method: method.clone(), payload: Bytes::from(payload.clone()),
            timeout_nano, metadata: metadata.clone(),
        };
        let mut want = BytesMut::new();
        codec::encode_message(stream_id, MessageType::Request, 0, &req, &mut want).unwrap();
        let mut got = BytesMut::from(&b"prefix"[..]);
        codec::encode_request(stream_id, &service, &method, &payload, timeout_nano, &metadata, &mut got).unwrap();
        prop_assert_eq!(&got[..6], b"prefix");
        prop_assert_eq!(&got[6..], &want[..]);
    }

    #[test]
    fn arbitrary_envelope_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = codec::decode_message::<Request>("request envelope", Bytes::from(input.clone()));
        let _ = codec::decode_message::<Response>("response envelope", Bytes::from(input));
    }
}
