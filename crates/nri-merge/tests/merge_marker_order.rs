//! "-key" markers are applied before additions, and the merged result holds
//! at most one entry per key, so its order cannot change the outcome.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{KeyValue, LinuxNetDevice};

#[test]
fn removal_listed_after_addition_still_applies_first() {
    let mut r = result();
    // The plugin lists the addition first and the removal second.
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.env.push(KeyValue {
                key: "OLD".into(),
                value: "new".into(),
            });
            a.env.push(KeyValue {
                key: "-OLD".into(),
                value: String::new(),
            });
            a.add_mount(mount("/old", "/host/new")).remove_mount("/old");
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(m.env.len(), 1);
    assert_eq!(
        (m.env[0].key.as_str(), m.env[0].value.as_str()),
        ("OLD", "new")
    );
    assert_eq!(m.mounts, vec![mount("/old", "/host/new")]);
    assert!(r.container().env.contains(&"OLD=new".to_string()));
    assert!(!r.container().env.contains(&"OLD=1".to_string()));
}

#[test]
fn maps_never_hold_both_marker_and_key() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_annotation("old-ann")
                .add_annotation("old-ann", "x");
            a.remove_linux_sysctl("net.old")
                .set_linux_sysctl("net.old", "2");
            a.remove_linux_net_device("eth-old")
                .add_linux_net_device("eth-old", LinuxNetDevice { name: "n".into() });
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(m.annotations.keys().collect::<Vec<_>>(), ["old-ann"]);
    assert_eq!(linux(m).sysctl.keys().collect::<Vec<_>>(), ["net.old"]);
    assert_eq!(linux(m).net_devices.keys().collect::<Vec<_>>(), ["eth-old"]);

    // A later plugin's removal turns the key back into a pure marker.
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_annotation("old-ann");
        }),
    )
    .unwrap();
    assert_eq!(
        r.adjustment().annotations.keys().collect::<Vec<_>>(),
        ["-old-ann"]
    );
}

#[test]
fn lists_hold_one_entry_per_key() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_mount(mount("/x", "/1"));
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_mount("/x");
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "30-c",
        adj(|a| {
            a.remove_mount("/x").add_mount(mount("/x", "/3"));
        }),
    )
    .unwrap();
    assert_eq!(r.adjustment().mounts, vec![mount("/x", "/3")]);
    let in_ctr: Vec<_> = r
        .container()
        .mounts
        .iter()
        .filter(|m| m.destination == "/x")
        .collect();
    assert_eq!(in_ctr, vec![&mount("/x", "/3")]);
}
