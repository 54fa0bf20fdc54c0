//! Removing things the container already had (before any plugin) reaches the
//! runtime as removal markers in the merged adjustment (upstream loses them
//! for env and devices, and misfiles sysctl removals), and later plugins see
//! the container without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::Field;

#[test]
fn pure_removals_of_existing_entries_are_in_the_merge() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_annotation("old-ann")
                .remove_env("OLD")
                .remove_mount("/old")
                .remove_device("/dev/old")
                .remove_namespace("network")
                .remove_linux_sysctl("net.old")
                .remove_linux_net_device("eth-old");
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(m.annotations.keys().collect::<Vec<_>>(), ["-old-ann"]);
    assert_eq!(
        m.env.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["-OLD"]
    );
    assert_eq!(
        m.mounts
            .iter()
            .map(|x| x.destination.as_str())
            .collect::<Vec<_>>(),
        ["-/old"]
    );
    let l = linux(m);
    assert_eq!(
        l.devices
            .iter()
            .map(|d| d.path.as_str())
            .collect::<Vec<_>>(),
        ["-/dev/old"]
    );
    assert_eq!(
        l.namespaces
            .iter()
            .map(|n| n.r#type.as_str())
            .collect::<Vec<_>>(),
        ["-network"]
    );
    // The sysctl removal is a sysctl, not an annotation.
    assert_eq!(l.sysctl.keys().collect::<Vec<_>>(), ["-net.old"]);
    assert_eq!(l.net_devices.keys().collect::<Vec<_>>(), ["-eth-old"]);

    // Later plugins see the container without them.
    let c = r.container();
    assert!(c.annotations.is_empty());
    assert_eq!(c.env, vec!["PATH=/bin"]);
    assert!(c.mounts.is_empty());
    let cl = clinux(c);
    assert!(cl.devices.is_empty());
    assert_eq!(cl.namespaces, vec![ns("ipc", "")]);
    assert!(cl.sysctl.is_empty());
    assert!(cl.net_devices.is_empty());

    // And the removals are owned, as removals.
    for (f, k) in [
        (Field::Annotations, "old-ann"),
        (Field::Env, "OLD"),
        (Field::Mounts, "/old"),
        (Field::Devices, "/dev/old"),
        (Field::Namespace, "network"),
        (Field::Sysctl, "net.old"),
        (Field::LinuxNetDevices, "eth-old"),
    ] {
        let o = r.owners().owner(CTR, f, Some(k)).unwrap();
        assert!(o.is_removal() && o.plugin() == "10-a", "{f:?}");
    }
}

#[test]
fn removal_of_an_earlier_plugins_addition_replaces_it() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_env("NEW", "1").add_device(device("/dev/n", 4));
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_env("NEW").remove_device("/dev/n");
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(
        m.env.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["-NEW"]
    );
    assert_eq!(
        linux(m)
            .devices
            .iter()
            .map(|d| d.path.as_str())
            .collect::<Vec<_>>(),
        ["-/dev/n"]
    );
    assert!(!r.container().env.iter().any(|e| e.starts_with("NEW=")));
}
