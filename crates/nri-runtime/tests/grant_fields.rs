//! Every field a plugin's adjustment can set is covered by exactly one
//! grant kind, so a field nri-api adds cannot slip past a grant.
//!
//! The fields are not listed here: they are walked from the protobuf
//! schema nri-api embeds (`FILE_DESCRIPTOR_SET`). For each leaf field of
//! `ContainerAdjustment` (recursing only into the messages that merely
//! group other fields), an adjustment with just that field set is built
//! from its wire bytes and classified as the runtime's grant check
//! classifies it (`adjustment_capabilities`): exactly one kind, and that
//! kind has exactly one name in a grant. A new field the classifier does
//! not know comes out with no kind and fails this test; so does a new
//! grouping message (until it is added to `GROUPS`).
//! Budget: well under 1 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use nri_api::api::ContainerAdjustment;
use nri_api::{Capability, CapabilitySet, adjustment_capabilities};
use nri_runtime::{adjustment_kind_name, parse_adjustment_kinds};
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

/// The messages that only group other fields: present but empty, they
/// change nothing (every other message field is a value: present, it is
/// set, as `oom_score_adj: {value: 0}` sets the score to 0).
const GROUPS: &[&str] = &[
    "ContainerAdjustment",
    "LinuxContainerAdjustment",
    "LinuxResources",
    "LinuxCPU",
    "LinuxMemory",
    "Hooks",
];

/// The messages of the schema, by full name (`.nri.pkg.api.v1alpha1.X`,
/// nested ones as `.X.Y`).
fn messages() -> BTreeMap<String, DescriptorProto> {
    let fds = FileDescriptorSet::decode(nri_api::FILE_DESCRIPTOR_SET).unwrap();
    let mut out = BTreeMap::new();
    for file in fds.file {
        let prefix = format!(".{}", file.package());
        for m in file.message_type {
            add(&prefix, m, &mut out);
        }
    }
    out
}

fn add(prefix: &str, m: DescriptorProto, out: &mut BTreeMap<String, DescriptorProto>) {
    let name = format!("{prefix}.{}", m.name());
    for n in m.nested_type.clone() {
        add(&name, n, out);
    }
    out.insert(name, m);
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(number: i32, wire: u64, out: &mut Vec<u8>) {
    varint(((number as u64) << 3) | wire, out);
}

fn delimited(number: i32, body: &[u8], out: &mut Vec<u8>) {
    key(number, 2, out);
    varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// One non-default value of a field of type `ty` (a message: an empty
/// one, which is present).
fn value(number: i32, ty: Type, out: &mut Vec<u8>) {
    match ty {
        Type::Double | Type::Fixed64 | Type::Sfixed64 => {
            key(number, 1, out);
            out.extend_from_slice(&1.0f64.to_le_bytes());
        }
        Type::Float | Type::Fixed32 | Type::Sfixed32 => {
            key(number, 5, out);
            out.extend_from_slice(&1.0f32.to_le_bytes());
        }
        Type::String | Type::Bytes => delimited(number, b"x", out),
        Type::Message | Type::Group => delimited(number, &[], out),
        _ => {
            key(number, 0, out);
            varint(1, out);
        }
    }
}

/// Every leaf field under message `name`: its path and the wire bytes of
/// a `name` with only that field set.
fn leaves(
    all: &BTreeMap<String, DescriptorProto>,
    name: &str,
    path: &str,
) -> Vec<(String, Vec<u8>)> {
    let m = all
        .get(name)
        .unwrap_or_else(|| panic!("{name} is not in the schema"));
    let mut out = Vec::new();
    for f in &m.field {
        let p = format!("{path}{}", f.name());
        let group = f.r#type() == Type::Message
            && f.label() != Label::Repeated
            && GROUPS
                .iter()
                .any(|g| f.type_name().ends_with(&format!(".{g}")));
        if group {
            for (sub, bytes) in leaves(all, f.type_name(), &format!("{p}.")) {
                let mut wire = Vec::new();
                delimited(f.number(), &bytes, &mut wire);
                out.push((sub, wire));
            }
            continue;
        }
        let mut wire = Vec::new();
        value(f.number(), f.r#type(), &mut wire);
        out.push((p, wire));
    }
    out
}

fn adjust_kinds() -> CapabilitySet {
    parse_adjustment_kinds(["all"]).unwrap()
}

#[test]
fn every_adjustment_field_is_covered_by_exactly_one_grant_kind() {
    let all = messages();
    let root = format!(".{}.ContainerAdjustment", nri_api::PROTO_PACKAGE);
    let fields = leaves(&all, &root, "");
    assert!(
        fields.len() >= 40,
        "the walk found only {} fields",
        fields.len()
    );
    let mut reached = CapabilitySet::EMPTY;
    let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (path, wire) in &fields {
        let adjust =
            ContainerAdjustment::decode(wire.as_slice()).unwrap_or_else(|e| panic!("{path}: {e}"));
        let kinds = adjustment_capabilities(&adjust);
        let list: Vec<Capability> = kinds.iter().collect();
        let [kind] = list.as_slice() else {
            panic!(
                "field {path} is covered by {} grant kinds ({kinds}), not exactly one",
                list.len()
            );
        };
        assert!(
            adjust_kinds().contains(*kind),
            "{path}: {kind} is not an adjustment kind"
        );
        let name = adjustment_kind_name(*kind);
        assert_eq!(
            parse_adjustment_kinds([name]).unwrap(),
            CapabilitySet::from(*kind),
            "{path}: the grant kind {name} names {kind} alone"
        );
        reached.insert(*kind);
        by_kind.entry(name).or_default().push(path.clone());
    }
    // Every grant kind is some field's: none is dead.
    assert_eq!(reached, adjust_kinds(), "fields by kind: {by_kind:#?}");
}

#[test]
fn the_walk_sees_nested_and_map_fields() {
    let all = messages();
    let root = format!(".{}.ContainerAdjustment", nri_api::PROTO_PACKAGE);
    let paths: Vec<String> = leaves(&all, &root, "")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for expected in [
        "annotations",
        "hooks.prestart",
        "linux.sysctl",
        "linux.resources.cpu.shares",
        "linux.resources.memory.limit",
        "linux.resources.memory.swappiness",
        "linux.resources.unified",
        "linux.oom_score_adj",
    ] {
        assert!(
            paths.iter().any(|p| p == expected),
            "{expected} not in {paths:?}"
        );
    }
}
