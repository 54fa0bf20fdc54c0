//! Messages with every field set, driven by the schema's descriptor set
//! ([`nri_api::FILE_DESCRIPTOR_SET`]), for property tests of code that
//! encodes or parses protobuf by hand: a field added to the schema is set
//! by these helpers without anyone editing a list.
//!
//! [`every_field`] writes the wire bytes of a message (every field,
//! recursively; one to three elements of each repeated field and map)
//! from a seed, and decodes them with prost. [`unset_fields`] lists the
//! fields of an encoded message that are absent, which proves that a
//! decoded message really has everything set.

use std::collections::BTreeSet;

use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

/// Nesting deeper than this is written empty (the schema has no
/// recursive message; this only bounds a future one).
const MAX_DEPTH: usize = 8;

/// The schema's descriptor set, decoded.
pub fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(nri_api::FILE_DESCRIPTOR_SET).expect("nri-api's descriptor set")
}

/// The message type `full_name` (`nri.pkg.api.v1alpha1.Container`, with
/// or without the leading dot).
pub fn message<'a>(fds: &'a FileDescriptorSet, full_name: &str) -> &'a DescriptorProto {
    find(fds, full_name)
        .and_then(|found| match found {
            Found::Message(m) => Some(m),
            Found::Enum(_) => None,
        })
        .unwrap_or_else(|| panic!("no message {full_name} in the schema"))
}

enum Found<'a> {
    Message(&'a DescriptorProto),
    Enum(&'a EnumDescriptorProto),
}

fn find<'a>(fds: &'a FileDescriptorSet, full_name: &str) -> Option<Found<'a>> {
    let name = full_name.trim_start_matches('.');
    for file in &fds.file {
        let Some(rest) = name
            .strip_prefix(file.package())
            .and_then(|r| r.strip_prefix('.'))
        else {
            continue;
        };
        let mut parts = rest.split('.');
        let first = parts.next()?;
        let rest: Vec<&str> = parts.collect();
        if rest.is_empty()
            && let Some(e) = file.enum_type.iter().find(|e| e.name() == first)
        {
            return Some(Found::Enum(e));
        }
        let mut msg = file.message_type.iter().find(|m| m.name() == first)?;
        for (i, part) in rest.iter().enumerate() {
            if i + 1 == rest.len()
                && let Some(e) = msg.enum_type.iter().find(|e| e.name() == *part)
            {
                return Some(Found::Enum(e));
            }
            msg = msg.nested_type.iter().find(|m| m.name() == *part)?;
        }
        return Some(Found::Message(msg));
    }
    None
}

/// A small seeded generator (SplitMix64): the same seed, the same message.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A non-empty string of 1 to 12 characters, some of them multi-byte.
    fn string(&mut self) -> String {
        const CHARS: &[char] = &['a', 'z', '0', '9', '-', '/', '.', '_', 'é', '€', ' ', '🦀'];
        let n = 1 + self.below(12);
        (0..n)
            .map(|_| CHARS[self.below(CHARS.len() as u64) as usize])
            .collect()
    }
}

/// Writes a message of type `full_name` with every field set.
struct Writer<'a> {
    fds: &'a FileDescriptorSet,
    rng: Rng,
}

impl Writer<'_> {
    fn message(&mut self, full_name: &str, depth: usize, buf: &mut Vec<u8>) {
        if depth > MAX_DEPTH {
            return;
        }
        let msg = message(self.fds, full_name);
        let map_entry = msg
            .options
            .as_ref()
            .is_some_and(|o| o.map_entry.unwrap_or(false));
        for field in &msg.field {
            let repeated = field.label() == Label::Repeated && !map_entry;
            let n = if repeated { 1 + self.rng.below(3) } else { 1 };
            for _ in 0..n {
                self.field(field, depth, buf);
            }
        }
    }

    fn field(
        &mut self,
        field: &prost_types::FieldDescriptorProto,
        depth: usize,
        buf: &mut Vec<u8>,
    ) {
        let tag = u32::try_from(field.number()).expect("field number");
        let rng = &mut self.rng;
        match field.r#type() {
            Type::String => {
                let s = rng.string();
                length_delimited(tag, s.as_bytes(), buf);
            }
            Type::Bytes => {
                let b: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
                length_delimited(tag, &b, buf);
            }
            Type::Bool => varint(tag, 1, buf),
            // Non-zero values, negative ones sign-extended as on the wire.
            Type::Int32 => varint(tag, i64::from(nonzero(rng) as i32) as u64, buf),
            Type::Int64 => varint(tag, nonzero(rng), buf),
            Type::Uint32 => varint(tag, u64::from(nonzero(rng) as u32).max(1), buf),
            Type::Uint64 => varint(tag, nonzero(rng), buf),
            Type::Enum => {
                let value = self.enum_value(field.type_name());
                varint(tag, i64::from(value) as u64, buf);
            }
            Type::Message => {
                let mut body = Vec::new();
                self.message(field.type_name(), depth + 1, &mut body);
                length_delimited(tag, &body, buf);
            }
            other => panic!(
                "field {} of type {other:?}: not generated yet (add it to nri-test-support's schema.rs)",
                field.name()
            ),
        }
    }

    /// A value of the enum other than its zero value (when it has one).
    fn enum_value(&mut self, full_name: &str) -> i32 {
        let Some(Found::Enum(e)) = find(self.fds, full_name) else {
            panic!("no enum {full_name} in the schema");
        };
        let values: Vec<i32> = e.value.iter().map(|v| v.number()).collect();
        let nonzero: Vec<i32> = values.iter().copied().filter(|v| *v != 0).collect();
        let pick = if nonzero.is_empty() {
            &values
        } else {
            &nonzero
        };
        pick[self.rng.below(pick.len() as u64) as usize]
    }
}

fn nonzero(rng: &mut Rng) -> u64 {
    rng.next() | 1
}

fn varint(tag: u32, value: u64, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, buf);
    encode_varint(value, buf);
}

fn length_delimited(tag: u32, body: &[u8], buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(body.len() as u64, buf);
    buf.extend_from_slice(body);
}

/// The wire bytes of a `full_name` message with every field of the
/// descriptor set, recursively, drawn from `seed`.
pub fn every_field_bytes(fds: &FileDescriptorSet, full_name: &str, seed: u64) -> Vec<u8> {
    let mut w = Writer {
        fds,
        rng: Rng(seed),
    };
    let mut buf = Vec::new();
    w.message(full_name, 0, &mut buf);
    buf
}

/// A message of type `M` with every field of the descriptor set set,
/// recursively, drawn from `seed`.
pub fn every_field<M: Message + prost::Name + Default>(seed: u64) -> M {
    let fds = descriptor_set();
    let bytes = every_field_bytes(&fds, &M::full_name(), seed);
    M::decode(bytes.as_slice()).expect("a generated message decodes")
}

/// The fields (as `Message.field` paths) of the encoded `full_name`
/// message `bytes` that are absent, recursively through the fields that
/// are present. Empty when every field of the schema is set.
pub fn unset_fields(fds: &FileDescriptorSet, full_name: &str, bytes: &[u8]) -> Vec<String> {
    let mut out = BTreeSet::new();
    unset_into(fds, full_name, bytes, 0, &mut out);
    out.into_iter().collect()
}

fn unset_into(
    fds: &FileDescriptorSet,
    full_name: &str,
    mut bytes: &[u8],
    depth: usize,
    out: &mut BTreeSet<String>,
) {
    let msg = message(fds, full_name);
    let mut seen = BTreeSet::new();
    while !bytes.is_empty() {
        let (tag, wire) = decode_key(&mut bytes).expect("a field key");
        seen.insert(tag);
        let body: &[u8] = match wire {
            WireType::Varint => {
                decode_varint(&mut bytes).expect("a varint");
                continue;
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut bytes).expect("a length") as usize;
                let (body, rest) = bytes.split_at(len);
                bytes = rest;
                body
            }
            WireType::SixtyFourBit => {
                bytes = &bytes[8..];
                continue;
            }
            WireType::ThirtyTwoBit => {
                bytes = &bytes[4..];
                continue;
            }
            other => panic!("wire type {other:?} in {full_name}"),
        };
        let field = msg.field.iter().find(|f| f.number() == tag as i32);
        if let Some(f) = field
            && f.r#type() == Type::Message
            && depth < MAX_DEPTH
        {
            unset_into(fds, f.type_name(), body, depth + 1, out);
        }
    }
    for f in &msg.field {
        if !seen.contains(&(f.number() as u32)) {
            out.insert(format!("{}.{}", msg.name(), f.name()));
        }
    }
}
