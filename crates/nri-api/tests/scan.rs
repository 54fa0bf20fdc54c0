//! `scan` against prost: for random encodings of every message of the
//! schema (built from the embedded schema, with unknown fields, packed and
//! unpacked numbers, fields in any order) and for corrupted ones, the scan
//! accepts exactly what prost decodes, counts the entries prost decodes,
//! and its size estimate stays close to the heap prost's decoding
//! really allocates (measured by a counting allocator).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use nri_api::api;
use nri_api::scan::scan;
use proptest::prelude::*;
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};

// ---------------------------------------------------------------- allocator

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

struct Counting;

#[allow(unsafe_code)]
// SAFETY: forwards every call to `System` unchanged; the counter is a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|c| c.set(c.get() + layout.size() as isize));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - layout.size() as isize));
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

// ---------------------------------------------------------------- encoder

fn schema() -> FileDescriptorProto {
    let fds = FileDescriptorSet::decode(nri_api::FILE_DESCRIPTOR_SET).unwrap();
    fds.file.into_iter().next().unwrap()
}

/// A small deterministic generator (xorshift), seeded by proptest.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn key(out: &mut Vec<u8>, number: u32, wire: u8) {
    prost::encoding::encode_varint(u64::from(number << 3 | u32::from(wire)), out);
}

fn varint(out: &mut Vec<u8>, v: u64) {
    prost::encoding::encode_varint(v, out);
}

fn delimited(out: &mut Vec<u8>, body: &[u8]) {
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

struct Gen<'a> {
    file: &'a FileDescriptorProto,
    rng: Rng,
}

impl Gen<'_> {
    fn message_named(&self, type_name: &str) -> Option<&DescriptorProto> {
        let name = type_name.rsplit('.').next()?;
        self.file.message_type.iter().find(|m| m.name() == name)
    }

    fn string(&mut self) -> Vec<u8> {
        let n = self.rng.below(12);
        let mut s = String::new();
        for _ in 0..n {
            s.push(match self.rng.below(20) {
                0 => 'é',
                1 => '→',
                _ => char::from(b'a' + self.rng.below(26) as u8),
            });
        }
        s.into_bytes()
    }

    fn scalar_value(&mut self, t: Type, out: &mut Vec<u8>) {
        match t {
            Type::Bool => varint(out, self.rng.below(2)),
            Type::String | Type::Bytes => {
                let s = self.string();
                delimited(out, &s);
            }
            _ => {
                let v = match self.rng.below(3) {
                    0 => self.rng.below(128),
                    1 => self.rng.next(),
                    _ => self.rng.below(1 << 20),
                };
                varint(out, v);
            }
        }
    }

    fn wire_of(t: Type) -> u8 {
        match t {
            Type::String | Type::Bytes | Type::Message => 2,
            _ => 0,
        }
    }

    /// A random valid encoding of `msg`, nested at most `depth` more levels.
    fn message(&mut self, msg: &DescriptorProto, depth: u32, wide: bool) -> Vec<u8> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        for f in &msg.field {
            if !self.rng.chance(60) {
                continue;
            }
            let times = if f.label() == Label::Repeated {
                if wide {
                    self.rng.below(40)
                } else {
                    self.rng.below(4)
                }
            } else {
                1 + u64::from(self.rng.chance(5))
            };
            for _ in 0..times {
                if let Some(p) = self.field(msg, f, depth) {
                    parts.push(p);
                }
            }
        }
        if self.rng.chance(20) {
            // An unknown field, of some wire type.
            let mut p = Vec::new();
            let number = 1000 + self.rng.below(100) as u32;
            match self.rng.below(3) {
                0 => {
                    key(&mut p, number, 0);
                    varint(&mut p, self.rng.next());
                }
                1 => {
                    key(&mut p, number, 2);
                    let s = self.string();
                    delimited(&mut p, &s);
                }
                _ => {
                    key(&mut p, number, 5);
                    p.extend_from_slice(&[1, 2, 3, 4]);
                }
            }
            parts.push(p);
        }
        // Fields may come in any order.
        for i in (1..parts.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            parts.swap(i, j);
        }
        parts.concat()
    }

    fn field(
        &mut self,
        msg: &DescriptorProto,
        f: &FieldDescriptorProto,
        depth: u32,
    ) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let number = f.number() as u32;
        match f.r#type() {
            Type::Message => {
                if let Some(entry) = msg
                    .nested_type
                    .iter()
                    .find(|n| f.type_name().ends_with(&format!(".{}", n.name())))
                {
                    let mut body = Vec::new();
                    for p in &entry.field {
                        if self.rng.chance(90) {
                            let mut one = Vec::new();
                            key(&mut one, p.number() as u32, Self::wire_of(p.r#type()));
                            if p.r#type() == Type::Message {
                                if depth == 0 {
                                    continue;
                                }
                                let sub = self.message_named(p.type_name())?.clone();
                                let b = self.message(&sub, depth - 1, false);
                                delimited(&mut one, &b);
                            } else {
                                self.scalar_value(p.r#type(), &mut one);
                            }
                            body.extend(one);
                        }
                    }
                    key(&mut out, number, 2);
                    delimited(&mut out, &body);
                    return Some(out);
                }
                if depth == 0 {
                    return None;
                }
                let sub = self.message_named(f.type_name())?.clone();
                let b = self.message(&sub, depth - 1, false);
                key(&mut out, number, 2);
                delimited(&mut out, &b);
            }
            t if f.label() == Label::Repeated && Self::wire_of(t) == 0 && self.rng.chance(50) => {
                // Packed.
                let mut body = Vec::new();
                for _ in 0..self.rng.below(6) {
                    self.scalar_value(t, &mut body);
                }
                key(&mut out, number, 2);
                delimited(&mut out, &body);
            }
            t => {
                key(&mut out, number, Self::wire_of(t));
                self.scalar_value(t, &mut out);
            }
        }
        Some(out)
    }
}

/// Damages an encoding the way a hostile or broken peer might.
fn corrupt(bytes: &mut Vec<u8>, rng: &mut Rng) {
    if bytes.is_empty() {
        bytes.push(rng.next() as u8);
        return;
    }
    let at = rng.below(bytes.len() as u64) as usize;
    match rng.below(4) {
        0 => bytes[at] = rng.next() as u8,
        1 => bytes.truncate(at),
        2 => bytes.insert(at, rng.next() as u8),
        _ => bytes[at] ^= 0x80,
    }
}

// ---------------------------------------------------------------- checks

/// Scans and decodes `bytes` as `M`: same verdict; for accepted input the
/// estimate against the heap really allocated.
fn compare<M: Message + Default + prost::Name>(bytes: &[u8]) -> Option<(usize, usize)> {
    let scanned = scan::<M>(bytes);
    let before = live();
    let decoded = M::decode(bytes);
    let heap = (live() - before).max(0) as usize;
    assert_eq!(
        scanned.is_ok(),
        decoded.is_ok(),
        "{}: scan {:?}, prost {:?}, bytes {bytes:02x?}",
        M::NAME,
        scanned.as_ref().err(),
        decoded.as_ref().err()
    );
    let scanned = scanned.ok()?;
    drop(decoded);
    let estimate = scanned.decoded_size() - size_of::<M>();
    Some((estimate, heap))
}

/// Runs `compare` for the message named `name`.
fn compare_named(name: &str, bytes: &[u8]) -> Option<(usize, usize)> {
    macro_rules! dispatch {
        ($($ty:path),* $(,)?) => {
            $(if <$ty as prost::Name>::NAME == name {
                return compare::<$ty>(bytes);
            })*
        };
    }
    nri_api::for_each_message!(dispatch);
    panic!("no message {name}");
}

/// What decoding allocates is at most 5/4 of the estimate (over 20,000
/// random messages it was at most 1.14 times, and at least 0.31 times:
/// repeated map keys and repeated single fields are counted each time),
/// plus a little for the smallest messages.
fn check_estimate(name: &str, estimate: usize, heap: usize) {
    assert!(
        4 * heap <= 5 * estimate + 256,
        "{name}: decoding allocated {heap} bytes, estimate {estimate}"
    );
    assert!(
        estimate <= 4 * heap + 512,
        "{name}: estimate {estimate} far above the {heap} bytes allocated"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn scan_agrees_with_prost(seed in 1u64.., which in any::<prop::sample::Index>(), wide in any::<bool>()) {
        let file = schema();
        let msg = which.get(&file.message_type).clone();
        let mut g = Gen { file: &file, rng: Rng(seed) };
        let bytes = g.message(&msg, 6, wide);
        let (estimate, heap) = compare_named(msg.name(), &bytes)
            .unwrap_or_else(|| panic!("{}: a valid encoding was refused", msg.name()));
        check_estimate(msg.name(), estimate, heap);
        let mut bad = bytes;
        for _ in 0..1 + g.rng.below(3) {
            corrupt(&mut bad, &mut g.rng);
        }
        let _ = compare_named(msg.name(), &bad);
    }
}

/// Top-level counts are the lengths prost decodes.
#[test]
fn counts_match_decoded_lengths() {
    let file = schema();
    for seed in 1..200u64 {
        let mut g = Gen {
            file: &file,
            rng: Rng(seed),
        };
        let m = |name: &str| {
            file.message_type
                .iter()
                .find(|m| m.name() == name)
                .unwrap()
                .clone()
        };

        let b = g.message(&m("UpdateContainersRequest"), 5, true);
        let s = scan::<api::UpdateContainersRequest>(&b).unwrap();
        let d = api::UpdateContainersRequest::decode(&b[..]).unwrap();
        assert_eq!(
            (s.count("update"), s.count("evict")),
            (d.update.len(), d.evict.len())
        );

        let b = g.message(&m("CreateContainerResponse"), 5, true);
        let s = scan::<api::CreateContainerResponse>(&b).unwrap();
        let d = api::CreateContainerResponse::decode(&b[..]).unwrap();
        assert_eq!(
            (s.count("update"), s.count("evict")),
            (d.update.len(), d.evict.len())
        );

        let b = g.message(&m("SynchronizeRequest"), 4, true);
        let s = scan::<api::SynchronizeRequest>(&b).unwrap();
        let d = api::SynchronizeRequest::decode(&b[..]).unwrap();
        assert_eq!(
            (s.count("pods"), s.count("containers")),
            (d.pods.len(), d.containers.len())
        );

        let b = g.message(&m("ContainerAdjustment"), 4, true);
        let s = scan::<api::ContainerAdjustment>(&b).unwrap();
        let d = api::ContainerAdjustment::decode(&b[..]).unwrap();
        assert_eq!(s.count("env"), d.env.len());
        assert_eq!(s.count("mounts"), d.mounts.len());
        assert_eq!(s.count("rlimits"), d.rlimits.len());
        // A map counts its entries on the wire; prost keeps one per key.
        assert!(s.count("annotations") >= d.annotations.len());
        assert_eq!(s.count("hooks"), 0, "not a repeated field");
    }
}

/// The attack the scan is for: 2 bytes per entry on the wire, hundreds
/// once decoded.
#[test]
fn empty_entries_are_counted_at_their_struct_size() {
    let req = api::UpdateContainersRequest {
        update: vec![api::ContainerUpdate::default(); 50_000],
        evict: vec![api::ContainerEviction::default(); 10],
    };
    let bytes = req.encode_to_vec();
    let s = scan::<api::UpdateContainersRequest>(&bytes).unwrap();
    assert_eq!(s.wire_len(), 100_020);
    assert_eq!((s.count("update"), s.count("evict")), (50_000, 10));
    // Vectors grow by doubling: 65,536 and 16 slots.
    let structs =
        65_536 * size_of::<api::ContainerUpdate>() + 16 * size_of::<api::ContainerEviction>();
    assert_eq!(
        s.decoded_size(),
        size_of::<api::UpdateContainersRequest>() + structs
    );
    assert_eq!(
        s.decoded_size_beyond(&["update", "evict"]),
        size_of::<api::UpdateContainersRequest>()
    );
    assert_eq!(s.message(), "UpdateContainersRequest");
}

#[test]
fn nested_entries_and_strings_are_counted() {
    let update = api::ContainerUpdate {
        container_id: "abcd".into(),
        linux: Some(api::LinuxContainerUpdate {
            resources: Some(api::LinuxResources {
                hugepage_limits: vec![api::HugepageLimit::default(); 3],
                unified: [("k".to_owned(), "vv".to_owned())].into(),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    };
    let req = api::CreateContainerResponse {
        update: vec![update],
        ..Default::default()
    };
    let s = scan::<api::CreateContainerResponse>(&req.encode_to_vec()).unwrap();
    // The id's 4 bytes; a vector of 4 hugepage limits; one B-tree node of
    // 11 (String, String) slots and its header, and the 3 bytes of "k", "vv".
    let node = 11 * 2 * size_of::<String>() + 16;
    let held = 4 + 4 * size_of::<api::HugepageLimit>() + node + 3;
    assert_eq!(
        s.decoded_size_beyond(&["update"]),
        size_of::<api::CreateContainerResponse>() + held
    );
}

#[test]
fn refusals_say_where_and_why() {
    // `update` (field 1) claims 5 bytes, 1 follows.
    let err = scan::<api::UpdateContainersRequest>(&[0x0a, 0x05, 0x00]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("malformed UpdateContainersRequest message at byte"),
        "{text}"
    );
    assert!(text.contains("runs past the end"), "{text}");
    // Wrong wire type for a known field.
    let err = scan::<api::UpdateContainersRequest>(&[0x08, 0x01]).unwrap_err();
    assert!(err.to_string().contains("wire type"), "{err}");
    // Invalid UTF-8 in a string.
    let err = scan::<api::ContainerEviction>(&[0x0a, 0x01, 0xff]).unwrap_err();
    assert!(err.to_string().contains("UTF-8"), "{err}");
    assert!(api::ContainerEviction::decode(&[0x0a, 0x01, 0xff][..]).is_err());
    // Groups deeper than prost allows.
    // 101 nested groups of the (unknown) field 1 of `Empty`: start-group
    // keys, then as many end-group keys.
    let mut deep = vec![0x0b; 101];
    deep.extend(vec![0x0c; 101]);
    assert_eq!(
        scan::<api::Empty>(&deep).is_ok(),
        api::Empty::decode(&deep[..]).is_ok()
    );
    assert!(scan::<api::Empty>(&deep).is_err());
}

#[test]
fn types_outside_the_schema_are_refused() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Foreign {}
    impl prost::Name for Foreign {
        const NAME: &'static str = "Foreign";
        const PACKAGE: &'static str = "elsewhere";
    }
    assert!(matches!(
        scan::<Foreign>(&[]),
        Err(nri_api::Error::NotInSchema { message: "Foreign" })
    ));
}

#[test]
fn count_at_most_counts_a_top_level_field_and_stops_past_the_limit() {
    use nri_api::api::{ContainerEviction, ContainerUpdate, UpdateContainerResponse};
    use nri_api::scan::count_at_most;
    let msg = UpdateContainerResponse {
        update: vec![
            ContainerUpdate {
                container_id: "c".into(),
                ..Default::default()
            };
            50
        ],
        evict: vec![ContainerEviction::default(); 3],
    };
    let b = msg.encode_to_vec();
    type R = UpdateContainerResponse;
    assert_eq!(count_at_most::<R>(&b, "update", 100).unwrap(), 50);
    assert_eq!(count_at_most::<R>(&b, "evict", 100).unwrap(), 3);
    assert_eq!(
        count_at_most::<R>(&b, "update", 10).unwrap(),
        11,
        "stops past 10"
    );
    assert_eq!(count_at_most::<R>(&b, "no_such_field", 10).unwrap(), 0);
    // The count agrees with a full scan.
    let scan = nri_api::scan::scan::<R>(&b).unwrap();
    assert_eq!(scan.count("update"), 50);
    // A cut message is malformed where the count reads it.
    assert!(count_at_most::<R>(&b[..b.len() - 1], "evict", 100).is_err());
    // A million empty entries are refused after looking at a few.
    let huge = [0x0a_u8, 0].repeat(1_000_000);
    assert_eq!(count_at_most::<R>(&huge, "update", 16).unwrap(), 17);
}
