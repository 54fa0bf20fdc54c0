//! Arbitrary bytes, cut into arbitrary chunks, through the mux frame
//! decoder: it must never panic, never hand out a frame over the maximum,
//! and stay poisoned after a fatal error.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use nri_mux::{Decoder, MAX_PAYLOAD};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk sizes the stream is cut into.
    let Some((&seed, data)) = data.split_first() else {
        return;
    };
    let mut dec = Decoder::new();
    let mut buf = BytesMut::new();
    let mut rest = data;
    let mut step = usize::from(seed) + 1;
    while !rest.is_empty() {
        let n = step.min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        step = step * 7 % 257 + 1;
        loop {
            match dec.decode(&mut buf) {
                Ok(Some((_, payload))) => assert!(payload.len() <= MAX_PAYLOAD),
                Ok(None) => break,
                Err(_) => {
                    assert!(dec.decode(&mut buf).is_err());
                    return;
                }
            }
        }
    }
    let _ = dec.decode_eof(&mut buf);
});
