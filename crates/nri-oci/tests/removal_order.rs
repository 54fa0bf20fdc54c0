//! Removal markers are applied before additions for every keyed field,
//! whatever the order of entries in the adjustment (upstream's Go generator
//! walks maps in random order, so "remove then re-add" may end up removed).
//!
//! For map fields the keys below start with a character that sorts before
//! '-' ('+', '!'), so iterating the map in key order would meet the addition
//! first and the marker second: only an applier that does removals first
//! passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use nri_api::api;
use serde_json::json;

#[test]
fn map_keys_sorting_before_the_marker_still_end_present() {
    let adj = api::ContainerAdjustment {
        annotations: BTreeMap::from([
            ("+plus".to_owned(), "kept".to_owned()),
            ("-+plus".to_owned(), String::new()),
        ]),
        linux: Some(api::LinuxContainerAdjustment {
            sysctl: BTreeMap::from([
                ("!odd.key".to_owned(), "1".to_owned()),
                ("-!odd.key".to_owned(), String::new()),
            ]),
            net_devices: BTreeMap::from([
                (
                    "+eth0".to_owned(),
                    api::LinuxNetDevice { name: "in0".into() },
                ),
                ("-+eth0".to_owned(), api::LinuxNetDevice::default()),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    // The map really iterates the addition first.
    assert_eq!(adj.annotations.keys().next().unwrap(), "+plus");

    let spec = adjusted(&adj);
    let j = json(&spec);
    assert_eq!(j["annotations"]["+plus"], "kept");
    assert_eq!(j["linux"]["sysctl"]["!odd.key"], "1");
    assert_eq!(j["linux"]["netDevices"]["+eth0"], json!({"name": "in0"}));
}

#[test]
fn list_fields_with_addition_before_marker_end_present() {
    let adj = api::ContainerAdjustment {
        env: vec![kv("HOME", "/new"), kv("-HOME", "")],
        mounts: vec![
            mount("/etc/hosts", "/new/hosts", &[]),
            remove_mount("/etc/hosts"),
        ],
        linux: Some(api::LinuxContainerAdjustment {
            devices: vec![
                api::LinuxDevice {
                    path: "/dev/fuse".into(),
                    r#type: "c".into(),
                    major: 10,
                    minor: 229,
                    ..Default::default()
                },
                api::LinuxDevice {
                    path: "-/dev/fuse".into(),
                    ..Default::default()
                },
            ],
            namespaces: vec![
                api::LinuxNamespace {
                    r#type: "network".into(),
                    path: "/run/netns/x".into(),
                },
                api::LinuxNamespace {
                    r#type: "-network".into(),
                    path: String::new(),
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let spec = adjusted(&adj);
    let j = json(&spec);
    assert!(
        j["process"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("HOME=/new"))
    );
    assert!(
        j["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["destination"] == "/etc/hosts" && m["source"] == "/new/hosts")
    );
    assert_eq!(j["linux"]["devices"][0]["path"], "/dev/fuse");
    assert!(
        j["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .contains(&json!({"type": "network", "path": "/run/netns/x"}))
    );
    snap!("list_fields_with_addition_before_marker_end_present", spec);
}

#[test]
fn pure_removals_of_absent_keys_are_noops() {
    let adj = api::ContainerAdjustment {
        annotations: BTreeMap::from([("-nope".to_owned(), String::new())]),
        env: vec![kv("-NOPE", "")],
        mounts: vec![remove_mount("/nope")],
        linux: Some(api::LinuxContainerAdjustment {
            devices: vec![api::LinuxDevice {
                path: "-/dev/nope".into(),
                ..Default::default()
            }],
            namespaces: vec![api::LinuxNamespace {
                r#type: "-time".into(),
                path: String::new(),
            }],
            sysctl: BTreeMap::from([("-nope".to_owned(), String::new())]),
            net_devices: BTreeMap::from([("-nope".to_owned(), api::LinuxNetDevice::default())]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let spec = adjusted(&adj);
    let mut want = json(&base_spec());
    // Mount removal still re-sorts mounts the upstream way.
    want["mounts"] = json(&spec)["mounts"].clone();
    // Net device removal materialises an empty map.
    want["linux"]["netDevices"] = json!({});
    assert_eq!(json(&spec), want);
}

#[test]
fn same_result_regardless_of_list_order() {
    let a = vec![kv("-LANG", ""), kv("LANG", "de_DE.UTF-8"), kv("X", "1")];
    let b = vec![kv("X", "1"), kv("LANG", "de_DE.UTF-8"), kv("-LANG", "")];
    let sa = adjusted(&api::ContainerAdjustment {
        env: a,
        ..Default::default()
    });
    let sb = adjusted(&api::ContainerAdjustment {
        env: b,
        ..Default::default()
    });
    assert_eq!(sa, sb);
}
