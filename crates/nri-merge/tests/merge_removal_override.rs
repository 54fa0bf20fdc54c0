//! A plugin's own removal followed by its own set is allowed, and is how a
//! later plugin deliberately overrides an earlier plugin's value (upstream's
//! rule). A third plugin then conflicts with the overrider.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::Field;
use nri_merge::Error;

#[test]
fn own_removal_then_set_is_allowed() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_annotation("old-ann")
                .add_annotation("old-ann", "new");
            a.remove_env("OLD").add_env("OLD", "2");
            a.remove_mount("/old").add_mount(mount("/old", "/host/new"));
            a.remove_device("/dev/old")
                .add_device(device("/dev/old", 9));
            a.remove_linux_sysctl("net.old")
                .set_linux_sysctl("net.old", "2");
            a.remove_namespace("ipc")
                .add_or_replace_namespace(ns("ipc", "/p"));
        }),
    )
    .unwrap();
    let o = r.owners();
    for (f, k) in [
        (Field::Annotations, "old-ann"),
        (Field::Env, "OLD"),
        (Field::Mounts, "/old"),
        (Field::Devices, "/dev/old"),
        (Field::Sysctl, "net.old"),
        (Field::Namespace, "ipc"),
    ] {
        let owner = o.owner(CTR, f, Some(k)).unwrap();
        assert_eq!(owner.plugin(), "10-a");
        assert!(!owner.is_removal(), "{f:?}: final word is a set");
    }
}

#[test]
fn later_plugin_overrides_with_remove_then_set() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_annotation("key", "10-a")
                .add_env("K", "a")
                .add_mount(mount("/m", "/a"));
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_annotation("key").add_annotation("key", "20-b");
            a.remove_env("K").add_env("K", "b");
            a.remove_mount("/m").add_mount(mount("/m", "/b"));
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(m.annotations.get("key").map(String::as_str), Some("20-b"));
    assert!(!m.annotations.contains_key("-key"));
    assert_eq!(m.env.len(), 1);
    assert_eq!(m.env[0].value, "b");
    assert_eq!(m.mounts, vec![mount("/m", "/b")]);
    assert_eq!(
        r.owners()
            .owner(CTR, Field::Env, Some("K"))
            .unwrap()
            .plugin(),
        "20-b"
    );

    // A third plugin setting the key conflicts with the overrider.
    let e = apply(
        &mut r,
        "30-c",
        adj(|a| {
            a.add_env("K", "c");
        }),
    )
    .unwrap_err();
    assert!(matches!(
        e,
        Error::Conflict { ref first_plugin, ref second_plugin, .. }
            if first_plugin == "20-b" && second_plugin == "30-c"
    ));
}

#[test]
fn rdt_remove_then_set_by_same_plugin() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_linux_rdt_clos_id("x");
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_linux_rdt().set_linux_rdt_clos_id("y");
        }),
    )
    .unwrap();
    let rdt = linux(r.adjustment()).rdt.as_ref().unwrap();
    assert_eq!(rdt.clos_id.as_ref().unwrap().value, "y");
    assert!(!rdt.remove);
}
