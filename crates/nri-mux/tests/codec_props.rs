//! Property tests of the sans-io codec: encode/decode round trips with the
//! byte stream cut into arbitrary chunks; arbitrary bytes never panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::BytesMut;
use nri_mux::{ConnId, Decoder, Error, FIRST_FRAME_MAX, MAX_PAYLOAD, encode_message};
use proptest::prelude::*;

fn messages() -> impl Strategy<Value = Vec<(u32, Vec<u8>)>> {
    let len = prop_oneof![0usize..64, 4090usize..4102, 0usize..20_000];
    prop::collection::vec(
        (
            1u32..5,
            len.prop_flat_map(|n| prop::collection::vec(any::<u8>(), n)),
        ),
        0..12,
    )
}

proptest! {
    #[test]
    fn round_trip_any_chunking(msgs in messages(), cuts in prop::collection::vec(1usize..9000, 1..40)) {
        let mut wire = BytesMut::new();
        for (c, m) in &msgs {
            encode_message(ConnId(*c), m, &mut wire).unwrap();
        }
        let mut dec = Decoder::new();
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        let mut rest = &wire[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            i += 1;
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                frames.push(f);
            }
        }
        prop_assert!(dec.decode_eof(&mut buf).unwrap().is_none());

        // Regroup frames into messages: a first frame of exactly 4096 bytes
        // is followed by the rest when the message was longer.
        let mut it = frames.into_iter();
        for (c, m) in &msgs {
            let (fc, first) = it.next().unwrap();
            prop_assert_eq!(fc, ConnId(*c));
            prop_assert!(first.len() <= FIRST_FRAME_MAX);
            let mut got = first.to_vec();
            if m.len() > FIRST_FRAME_MAX {
                let (sc, second) = it.next().unwrap();
                prop_assert_eq!(sc, ConnId(*c));
                got.extend_from_slice(&second);
            }
            prop_assert_eq!(&got, m);
        }
        prop_assert!(it.next().is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2000), cut in 1usize..64) {
        let mut dec = Decoder::new();
        let mut buf = BytesMut::new();
        let mut failed = false;
        for chunk in data.chunks(cut) {
            buf.extend_from_slice(chunk);
            loop {
                match dec.decode(&mut buf) {
                    Ok(Some((_, p))) => prop_assert!(p.len() <= MAX_PAYLOAD),
                    Ok(None) => break,
                    Err(Error::OversizedFrame { len, .. }) => {
                        prop_assert!(len as usize > MAX_PAYLOAD);
                        failed = true;
                        break;
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                }
            }
            if failed {
                // Poisoned: the error repeats.
                prop_assert!(dec.decode(&mut buf).is_err());
                break;
            }
        }
        if !failed {
            match dec.decode_eof(&mut buf) {
                Ok(None) => prop_assert!(buf.is_empty()),
                Ok(Some(_)) => prop_assert!(false, "complete frame left undecoded"),
                Err(Error::TruncatedFrame { buffered }) => prop_assert_eq!(buffered, buf.len()),
                Err(e) => prop_assert!(false, "unexpected error {e:?}"),
            }
        }
    }

    #[test]
    fn pieces_carry_the_same_frames_as_whole_decoding(
        msgs in messages(),
        cuts in prop::collection::vec(1usize..9000, 1..40),
        whole_max in prop_oneof![Just(0usize), 1usize..5000, Just(usize::MAX)],
    ) {
        let mut wire = BytesMut::new();
        for (c, m) in &msgs {
            encode_message(ConnId(*c), m, &mut wire).unwrap();
        }
        let mut whole = Decoder::new();
        let mut all = wire.clone();
        let mut expected = Vec::new();
        while let Some((c, p)) = whole.decode(&mut all).unwrap() {
            expected.push((c, p.to_vec()));
        }
        let mut dec = Decoder::new();
        let mut buf = BytesMut::new();
        let mut frames: Vec<(ConnId, Vec<u8>)> = Vec::new();
        let mut rest = &wire[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            i += 1;
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(p) = dec.decode_piece(&mut buf, whole_max).unwrap() {
                if p.first {
                    frames.push((p.conn, Vec::new()));
                }
                let (c, f) = frames.last_mut().unwrap();
                prop_assert_eq!(*c, p.conn);
                // A frame up to `whole_max` comes in one piece.
                prop_assert!(!(p.first && p.frame_len as usize <= whole_max) || p.last);
                f.extend_from_slice(&p.data);
                prop_assert_eq!(p.last, f.len() == p.frame_len as usize);
            }
        }
        prop_assert!(dec.check_eof(&buf).is_ok());
        prop_assert_eq!(frames, expected);
    }
}
