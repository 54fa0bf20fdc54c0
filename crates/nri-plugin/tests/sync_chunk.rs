//! `SyncChunk`: lazy iteration over an encoded `SynchronizeRequest` yields
//! exactly what prost decodes of the same bytes; malformed framing is a
//! typed error from `SyncChunk::new`, an undecodable item a typed error
//! from the iterator; nothing panics on any input.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::{BufMut, Bytes};
use nri_api::api::{Container, Mount, PodSandbox, SynchronizeRequest};
use nri_plugin::{Error, SyncChunk};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};

fn pod(i: usize) -> PodSandbox {
    PodSandbox {
        id: format!("pod-{i}"),
        name: format!("name-{i}"),
        uid: format!("uid-{i}"),
        namespace: "default".into(),
        labels: [("app".to_string(), format!("a{i}"))].into(),
        annotations: [("k".to_string(), "v".repeat(i % 7))].into(),
        pid: i as u32,
        ips: vec![format!("10.0.0.{}", i % 250)],
        ..Default::default()
    }
}

fn container(i: usize) -> Container {
    Container {
        id: format!("ctr-{i}"),
        pod_sandbox_id: format!("pod-{}", i / 5),
        name: format!("c{i}"),
        state: (i % 4) as i32,
        args: vec!["/bin/sh".into(), "-c".into(), format!("sleep {i}")],
        env: vec![format!("I={i}")],
        mounts: vec![Mount {
            destination: "/data".into(),
            source: format!("/var/lib/{i}"),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// What prost decodes of `bytes`.
fn prost_decode(bytes: &[u8]) -> Result<SynchronizeRequest, prost::DecodeError> {
    SynchronizeRequest::decode(bytes)
}

/// The chunk's view of `bytes`, through the iterators (checking counts and
/// `size_hint` on the way).
fn lazy_decode(bytes: &[u8]) -> Result<SynchronizeRequest, Error> {
    let chunk = SyncChunk::new(Bytes::copy_from_slice(bytes))?;
    let pods_it = chunk.pods();
    assert_eq!(pods_it.len(), chunk.pod_count());
    let pods = pods_it.collect::<Result<Vec<_>, _>>()?;
    let containers = chunk.containers().collect::<Result<Vec<_>, _>>()?;
    assert_eq!(pods.len(), chunk.pod_count());
    assert_eq!(containers.len(), chunk.container_count());
    let more = chunk.more();
    let (p2, c2) = chunk.into_vecs()?;
    assert_eq!((&p2, &c2), (&pods, &containers), "into_vecs = iterators");
    Ok(SynchronizeRequest {
        pods,
        containers,
        more,
    })
}

fn assert_same(bytes: &[u8]) {
    let want = prost_decode(bytes).expect("test input decodes with prost");
    let got = lazy_decode(bytes).expect("lazy decoding");
    assert_eq!(got, want);
}

fn put_item<M: Message>(tag: u32, m: &M, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(m.encoded_len() as u64, buf);
    m.encode(buf).unwrap();
}

fn put_more(v: u64, buf: &mut Vec<u8>) {
    encode_key(3, WireType::Varint, buf);
    encode_varint(v, buf);
}

/// One unknown field of each wire type.
fn put_unknown(n: usize, buf: &mut Vec<u8>) {
    match n % 5 {
        0 => {
            encode_key(9, WireType::Varint, buf);
            encode_varint(300 + n as u64, buf);
        }
        1 => {
            encode_key(10, WireType::SixtyFourBit, buf);
            buf.put_u64_le(n as u64);
        }
        2 => {
            encode_key(11, WireType::LengthDelimited, buf);
            encode_varint(3, buf);
            buf.extend_from_slice(b"abc");
        }
        3 => {
            encode_key(12, WireType::ThirtyTwoBit, buf);
            buf.put_u32_le(n as u32);
        }
        _ => {
            encode_key(13, WireType::StartGroup, buf);
            encode_key(1, WireType::Varint, buf);
            encode_varint(7, buf);
            encode_key(13, WireType::EndGroup, buf);
        }
    }
}

fn encoded(req: &SynchronizeRequest) -> Vec<u8> {
    req.encode_to_vec()
}

#[test]
fn empty_message() {
    assert_same(&[]);
    let chunk = SyncChunk::new(Bytes::new()).unwrap();
    assert_eq!(
        (chunk.pod_count(), chunk.container_count(), chunk.more()),
        (0, 0, false)
    );
    assert_eq!(chunk.pods().next().map(|r| r.is_ok()), None);
    // Only `more`.
    assert_same(&encoded(&SynchronizeRequest {
        more: true,
        ..Default::default()
    }));
}

#[test]
fn only_pods() {
    for n in [1, 2, 17] {
        assert_same(&encoded(&SynchronizeRequest {
            pods: (0..n).map(pod).collect(),
            containers: vec![],
            more: n % 2 == 0,
        }));
    }
}

#[test]
fn only_containers() {
    for n in [1, 3, 40] {
        assert_same(&encoded(&SynchronizeRequest {
            pods: vec![],
            containers: (0..n).map(container).collect(),
            more: true,
        }));
    }
}

#[test]
fn pods_and_containers() {
    assert_same(&encoded(&SynchronizeRequest {
        pods: (0..10).map(pod).collect(),
        containers: (0..50).map(container).collect(),
        more: false,
    }));
    // Default (empty) items are zero-length entries.
    assert_same(&encoded(&SynchronizeRequest {
        pods: vec![PodSandbox::default(); 3],
        containers: vec![Container::default(); 2],
        more: true,
    }));
}

#[test]
fn interleaved_fields_and_unknown_fields() {
    let mut buf = Vec::new();
    for i in 0..25 {
        put_unknown(i, &mut buf);
        match i % 3 {
            0 => put_item(1, &pod(i), &mut buf),
            1 => put_item(2, &container(i), &mut buf),
            _ => put_more(i as u64 % 2, &mut buf),
        }
    }
    put_unknown(4, &mut buf);
    assert_same(&buf);
    // `more` repeated: the last value wins, any non-zero varint is true.
    let mut buf = Vec::new();
    put_more(5, &mut buf);
    put_item(1, &pod(1), &mut buf);
    put_more(0, &mut buf);
    assert_same(&buf);
    assert!(!SyncChunk::new(buf.into()).unwrap().more());
    let mut buf = Vec::new();
    put_more(0, &mut buf);
    put_more(1 << 40, &mut buf);
    assert_same(&buf);
    assert!(SyncChunk::new(buf.into()).unwrap().more());
}

#[test]
fn large_message() {
    // About the shape of one runtime message of a big sync.
    assert_same(&encoded(&SynchronizeRequest {
        pods: (0..300).map(pod).collect(),
        containers: (0..1500).map(container).collect(),
        more: true,
    }));
}

fn framing_error(bytes: &[u8]) -> (usize, String) {
    assert!(prost_decode(bytes).is_err(), "prost refuses it too");
    match SyncChunk::new(Bytes::copy_from_slice(bytes)) {
        Err(Error::MalformedSync { offset, reason, .. }) => (offset, reason),
        other => panic!("expected MalformedSync, got {other:?}"),
    }
}

#[test]
fn truncated_length_is_refused() {
    let mut buf = encoded(&SynchronizeRequest {
        pods: (0..3).map(pod).collect(),
        containers: (0..3).map(container).collect(),
        more: false,
    });
    let last_start = buf.len() - container(2).encoded_len() - 2;
    buf.truncate(buf.len() - 1);
    let (offset, reason) = framing_error(&buf);
    assert_eq!(offset, last_start);
    assert!(reason.contains("overruns the message"), "{reason}");
    // A length varint cut in the middle.
    let (offset, reason) = framing_error(&[0x0a, 0x80]);
    assert_eq!(offset, 0);
    assert!(reason.contains("invalid length"), "{reason}");
}

#[test]
fn wrong_wire_types_are_refused() {
    for (bytes, want) in [
        (&[0x08, 0x01][..], "field 1 (pods) has wire type varint"),
        (
            &[0x15, 0, 0, 0, 0][..],
            "field 2 (containers) has wire type 32-bit",
        ),
        (
            &[0x1a, 0x00][..],
            "field 3 (more) has wire type length-delimited",
        ),
    ] {
        let (offset, reason) = framing_error(bytes);
        assert_eq!(offset, 0);
        assert!(reason.contains(want), "{reason}");
    }
}

#[test]
fn garbage_is_refused() {
    for bytes in [
        &[0xff; 12][..],      // key varint too long
        &[0x00][..],          // tag 0
        &[0x0f][..],          // wire type 7
        &[0x4c][..],          // end group without start (field 9)
        &[0x4b][..],          // start group never ended (field 9)
        &[0x49, 1, 2][..],    // unknown fixed64 cut short
        &[0x52, 0x05, 1][..], // unknown length-delimited cut short
    ] {
        let err = SyncChunk::new(Bytes::copy_from_slice(bytes)).unwrap_err();
        assert!(matches!(err, Error::MalformedSync { .. }), "{err:?}");
        assert!(prost_decode(bytes).is_err(), "{bytes:?}");
    }
}

#[test]
fn undecodable_item_is_an_iterator_error() {
    let mut buf = Vec::new();
    put_item(1, &pod(0), &mut buf);
    // A pod whose payload is a string field running past its end.
    let bad_at = buf.len();
    buf.extend_from_slice(&[0x0a, 0x03, 0x0a, 0x05, b'x']);
    put_item(1, &pod(2), &mut buf);
    put_item(2, &container(0), &mut buf);
    let chunk = SyncChunk::new(buf.clone().into()).unwrap();
    assert_eq!(chunk.pod_count(), 3);
    let got: Vec<_> = chunk.pods().collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].as_ref().unwrap(), &pod(0));
    match &got[1] {
        Err(
            e @ Error::MalformedSync {
                offset,
                reason,
                source,
            },
        ) => {
            assert_eq!(*offset, bad_at + 2, "offset of the item's payload");
            assert!(reason.contains("cannot decode pod #1"), "{reason}");
            assert!(source.is_some());
            assert!(std::error::Error::source(e).is_some());
        }
        other => panic!("expected MalformedSync, got {other:?}"),
    }
    assert_eq!(got[2].as_ref().unwrap(), &pod(2), "iteration goes on");
    assert_eq!(chunk.containers().next().unwrap().unwrap(), container(0));
    assert!(matches!(
        chunk.into_vecs(),
        Err(Error::MalformedSync { .. })
    ));
    assert!(prost_decode(&buf).is_err());
}

/// Small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random messages (valid, then mutated): never a panic, and the chunk
/// accepts and decodes exactly what prost accepts, with the same result.
#[test]
fn random_inputs_match_prost() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for round in 0..3000 {
        let mut buf = Vec::new();
        for _ in 0..rng.below(12) {
            match rng.below(4) {
                0 => put_item(1, &pod(rng.below(50)), &mut buf),
                1 => put_item(2, &container(rng.below(50)), &mut buf),
                2 => put_more(rng.below(3) as u64, &mut buf),
                _ => put_unknown(rng.below(5), &mut buf),
            }
        }
        // Mutate all but a few rounds.
        if round % 4 != 0 && !buf.is_empty() {
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(buf.len());
                match rng.below(3) {
                    0 => buf[i] = rng.next() as u8,
                    1 => buf.truncate(i),
                    _ => buf.insert(i, rng.next() as u8),
                }
                if buf.is_empty() {
                    break;
                }
            }
        }
        let want = prost_decode(&buf);
        let got = lazy_decode(&buf);
        match (&want, &got) {
            (Ok(w), Ok(g)) => {
                assert_eq!(g, w, "round {round}: {buf:?}");
                accepted += 1;
            }
            (Err(_), Err(Error::MalformedSync { .. })) => {}
            _ => panic!("round {round}: prost {want:?} vs chunk {got:?} for {buf:?}"),
        }
    }
    assert!(accepted > 750, "enough valid inputs: {accepted}");
}
