//! Fuzz the ttRPC frame decoder and envelope decoding.
//!
//! The first input byte picks the chunk sizes used to feed the rest of the
//! input to the decoder, and the second the payload cap. Every frame's
//! payload is decoded as both envelopes. The same input fed in one piece
//! must give the same sequence of results: chunking must never matter.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use nri_ttrpc::Error;
use nri_ttrpc::codec::{self, Decoder};
use nri_ttrpc::{Request, Response};

#[derive(Debug, PartialEq)]
enum Out {
    Frame(u32, u8, Bytes),
    TooLarge(u32, u32),
    Unsupported(u32),
    Fatal,
}

fn run(input: &[u8], chunk_seed: u8, max: usize) -> Vec<Out> {
    let mut dec = Decoder::with_max_message_len(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = input;
    let mut step = usize::from(chunk_seed);
    loop {
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let _ = codec::decode_message::<Request>("request", frame.payload.clone());
                    let _ = codec::decode_message::<Response>("response", frame.payload.clone());
                    out.push(Out::Frame(
                        frame.stream_id,
                        frame.message_type.as_u8(),
                        frame.payload,
                    ));
                }
                Ok(None) => break,
                Err(Error::FrameTooLarge { stream_id, len, .. }) => {
                    out.push(Out::TooLarge(stream_id, len))
                }
                Err(Error::UnsupportedMessageType { stream_id, .. }) => {
                    out.push(Out::Unsupported(stream_id))
                }
                Err(Error::InvalidMessageType { .. }) => {
                    // Sticky: a second call must report it again.
                    assert!(matches!(
                        dec.decode(&mut buf),
                        Err(Error::InvalidMessageType { .. })
                    ));
                    out.push(Out::Fatal);
                    return out;
                }
                Err(e) => panic!("decoder returned an unexpected error: {e:?}"),
            }
        }
        if rest.is_empty() {
            return out;
        }
        // Vary chunk sizes: 1..=256, driven by the seed.
        step = step.wrapping_mul(31).wrapping_add(7);
        let n = if chunk_seed == 0 {
            rest.len()
        } else {
            (step % 256) + 1
        }
        .min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fuzz_target!(|data: &[u8]| {
    let [chunk_seed, cap_seed, input @ ..] = data else {
        return;
    };
    let max = if *cap_seed == 0 {
        codec::MAX_MESSAGE_LEN
    } else {
        usize::from(*cap_seed)
    };
    let whole = run(input, 0, max);
    let chunked = run(input, (*chunk_seed).max(1), max);
    assert_eq!(whole, chunked);
    // Envelope decoding of the raw input must not panic either.
    let _ = codec::decode_message::<Request>("request", Bytes::copy_from_slice(input));
    let _ = codec::decode_message::<Response>("response", Bytes::copy_from_slice(input));
});
