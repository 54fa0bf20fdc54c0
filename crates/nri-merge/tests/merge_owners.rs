//! Owners encode to the wire OwningPlugins exactly as upstream does: Field
//! enum numbers, "NN-name", "-NN-name" for removals, comma-joined hook
//! injectors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{Field, Hook, Hooks};
use nri_merge::{Owner, Ownership};

#[test]
fn wire_encoding_of_owners() {
    let mut r = result();
    let hooks = Hooks {
        prestart: vec![Hook {
            path: "/h".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_annotation("k", "v")
                .set_linux_cpu_shares(1)
                .remove_env("OLD");
            a.add_hooks(hooks.clone());
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.add_hooks(hooks.clone());
        }),
    )
    .unwrap();
    let mut u = nri_api::api::ContainerUpdate::new("other");
    u.set_linux_memory_limit(1);
    r.apply(&pid("30-c"), None, vec![u], vec![]).unwrap();

    let wire = r.owners().to_wire();
    let fo = wire.owners.get(CTR).unwrap();
    assert_eq!(fo.simple.get(&16).map(String::as_str), Some("10-a")); // CPUShares = 16
    assert_eq!(fo.simple.get(&3).map(String::as_str), Some("10-a,20-b")); // OciHooks = 3
    assert_eq!(
        fo.compound
            .get(&1)
            .unwrap()
            .owners
            .get("k")
            .map(String::as_str),
        Some("10-a")
    ); // Annotations = 1
    assert_eq!(
        fo.compound
            .get(&6)
            .unwrap()
            .owners
            .get("OLD")
            .map(String::as_str),
        Some("-10-a")
    ); // Env = 6
    let other = wire.owners.get("other").unwrap();
    assert_eq!(other.simple.get(&8).map(String::as_str), Some("30-c")); // MemLimit = 8

    // Round trip through the wire form.
    assert_eq!(&Ownership::from_wire(&wire), r.owners());
}

#[test]
fn owner_strings() {
    assert_eq!(Owner::removed("10-a").to_wire(), "-10-a");
    assert_eq!(Owner::from_wire("-10-a"), Owner::removed("10-a"));
    assert_eq!(Owner::from_wire("10-a"), Owner::set("10-a"));
}

#[test]
fn unknown_field_numbers_are_skipped_when_parsing() {
    let mut w = nri_api::api::OwningPlugins::default();
    let mut fo = nri_api::api::FieldOwners::default();
    fo.simple.insert(999, "10-a".into());
    fo.simple.insert(Field::CgroupsPath as i32, "10-a".into());
    w.owners.insert("c".into(), fo);
    let o = Ownership::from_wire(&w);
    assert_eq!(
        o.owner("c", Field::CgroupsPath, None).unwrap().plugin(),
        "10-a"
    );
}
