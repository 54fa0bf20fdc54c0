//! `linux.resources` from adjustments and updates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use nri_api::api;
use nri_oci::{Applier, BLOCKIO_CLASS_ANNOTATION, BoxError, Error, Unresolved};
use oci_spec::runtime::{LinuxBlockIo, LinuxIntelRdt};
use serde_json::json;

fn full_resources() -> api::LinuxResources {
    api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: api::OptionalInt64::some(512i64 << 20),
            reservation: api::OptionalInt64::some(128i64 << 20),
            swap: api::OptionalInt64::some(1024i64 << 20),
            kernel: api::OptionalInt64::some(64i64 << 20),
            kernel_tcp: api::OptionalInt64::some(16i64 << 20),
            swappiness: api::OptionalUInt64::some(10u64),
            disable_oom_killer: api::OptionalBool::some(true),
            use_hierarchy: api::OptionalBool::some(true),
        }),
        cpu: Some(api::LinuxCpu {
            shares: api::OptionalUInt64::some(2048u64),
            quota: api::OptionalInt64::some(200_000i64),
            period: api::OptionalUInt64::some(100_000u64),
            realtime_runtime: api::OptionalInt64::some(950_000i64),
            realtime_period: api::OptionalUInt64::some(1_000_000u64),
            cpus: "0-3".into(),
            mems: "0".into(),
        }),
        hugepage_limits: vec![
            api::HugepageLimit {
                page_size: "2MB".into(),
                limit: 1 << 30,
            },
            api::HugepageLimit {
                page_size: "1GB".into(),
                limit: 0,
            },
        ],
        blockio_class: None,
        rdt_class: api::OptionalString::some("gold"),
        unified: BTreeMap::from([("memory.high".to_owned(), "400000000".to_owned())]),
        devices: vec![api::LinuxDeviceCgroup {
            allow: true,
            r#type: "c".into(),
            major: api::OptionalInt64::some(1i64),
            minor: api::OptionalInt64::some(3i64),
            access: "rwm".into(),
        }],
        pids: Some(api::LinuxPids { limit: 1024 }),
    }
}

#[test]
fn adjustment_sets_every_resource_field() {
    let spec = adjusted(&resources(full_resources()));
    let r = &json(&spec)["linux"]["resources"];
    assert_eq!(
        r["memory"],
        json!({
            "limit": 512 << 20, "reservation": 128 << 20, "swap": 1024 << 20,
            "kernel": 64 << 20, "kernelTCP": 16 << 20, "swappiness": 10,
            "disableOOMKiller": true, "useHierarchy": true
        })
    );
    assert_eq!(
        r["cpu"],
        json!({
            "shares": 2048, "quota": 200000, "period": 100000,
            "realtimeRuntime": 950000, "realtimePeriod": 1000000,
            "cpus": "0-3", "mems": "0"
        })
    );
    assert_eq!(r["pids"], json!({"limit": 1024}));
    assert_eq!(json(&spec)["linux"]["intelRdt"], json!({"closID": "gold"}));
    snap!("adjustment_sets_every_resource_field", spec);
}

#[test]
fn update_merges_unset_fields_keep_values() {
    let applier = applier();
    let mut spec = base_spec();
    applier.apply_update(&mut spec, &full_resources()).unwrap();
    let update = api::LinuxResources {
        memory: Some(api::LinuxMemory {
            reservation: api::OptionalInt64::some(1i64 << 20),
            ..Default::default()
        }),
        cpu: Some(api::LinuxCpu {
            cpus: "4-7".into(),
            ..Default::default()
        }),
        hugepage_limits: vec![api::HugepageLimit {
            page_size: "2MB".into(),
            limit: 2 << 30,
        }],
        unified: BTreeMap::from([("io.weight".to_owned(), "50".to_owned())]),
        ..Default::default()
    };
    applier.apply_update(&mut spec, &update).unwrap();
    let r = &json(&spec)["linux"]["resources"];
    assert_eq!(r["memory"]["reservation"], 1 << 20);
    assert_eq!(r["memory"]["limit"], 512 << 20);
    assert_eq!(r["memory"]["swap"], 1024 << 20);
    assert_eq!(r["cpu"]["cpus"], "4-7");
    assert_eq!(r["cpu"]["mems"], "0");
    assert_eq!(r["cpu"]["shares"], 2048);
    assert_eq!(
        r["hugepageLimits"],
        json!([{"pageSize": "2MB", "limit": 2i64 << 30}, {"pageSize": "1GB", "limit": 0}])
    );
    assert_eq!(
        r["unified"],
        json!({"memory.high": "400000000", "io.weight": "50"})
    );
    assert_eq!(r["pids"], json!({"limit": 1024}));
    snap!("update_merges_unset_fields_keep_values", spec);
}

#[test]
fn empty_update_changes_nothing() {
    let mut spec = base_spec();
    applier()
        .apply_update(&mut spec, &api::LinuxResources::default())
        .unwrap();
    assert_eq!(spec, base_spec());
    // Empty sub-messages too.
    applier()
        .apply_update(
            &mut spec,
            &api::LinuxResources {
                memory: Some(Default::default()),
                cpu: Some(Default::default()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(spec, base_spec());
}

#[test]
fn memory_limit_without_swap_sets_swap_to_limit() {
    let mut spec = base_spec();
    applier()
        .apply_update(
            &mut spec,
            &api::LinuxResources {
                memory: Some(api::LinuxMemory {
                    limit: api::OptionalInt64::some(1i64 << 30),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .unwrap();
    let m = &json(&spec)["linux"]["resources"]["memory"];
    assert_eq!(
        (m["limit"].as_i64(), m["swap"].as_i64()),
        (Some(1 << 30), Some(1 << 30))
    );
}

#[test]
fn negative_pids_limit_is_unlimited() {
    let mut spec = base_spec();
    applier()
        .apply_update(
            &mut spec,
            &api::LinuxResources {
                pids: Some(api::LinuxPids { limit: -5 }),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        json(&spec)["linux"]["resources"]["pids"],
        json!({"limit": -1})
    );
}

#[test]
fn device_rules_are_appended_once() {
    let rule = api::LinuxDeviceCgroup {
        allow: true,
        r#type: "b".into(),
        major: api::OptionalInt64::some(8i64),
        minor: None,
        access: "r".into(),
    };
    let update = api::LinuxResources {
        devices: vec![rule.clone(), rule],
        ..Default::default()
    };
    let mut spec = base_spec();
    applier().apply_update(&mut spec, &update).unwrap();
    applier().apply_update(&mut spec, &update).unwrap();
    let rules = json(&spec)["linux"]["resources"]["devices"].clone();
    assert_eq!(rules.as_array().unwrap().len(), 3);
    assert_eq!(
        rules[2],
        json!({"allow": true, "type": "b", "major": 8, "access": "r"})
    );
}

fn blockio(class: &str) -> api::LinuxResources {
    api::LinuxResources {
        blockio_class: api::OptionalString::some(class),
        ..Default::default()
    }
}

#[test]
fn blockio_class_resolver_policy_and_clear() {
    let resolving = Applier::builder()
        .blockio_class_resolver(|class: &str| -> Result<LinuxBlockIo, BoxError> {
            match class {
                "slow" => {
                    let mut io = LinuxBlockIo::default();
                    io.set_weight(Some(10));
                    Ok(io)
                }
                other => Err(format!("unknown class {other}").into()),
            }
        })
        .build();
    let mut spec = base_spec();
    resolving.apply_update(&mut spec, &blockio("slow")).unwrap();
    assert_eq!(
        json(&spec)["linux"]["resources"]["blockIO"],
        json!({"weight": 10})
    );

    let err = resolving
        .apply_update(&mut spec, &blockio("fast"))
        .unwrap_err();
    assert!(matches!(&err, Error::BlockIoClass { class, .. } if class == "fast"));

    // "" clears, with or without a resolver.
    applier().apply_update(&mut spec, &blockio("")).unwrap();
    assert_eq!(json(&spec)["linux"]["resources"].get("blockIO"), None);

    let err = applier()
        .apply_update(&mut spec, &blockio("slow"))
        .unwrap_err();
    assert!(matches!(&err, Error::BlockIoClassUnresolved { class } if class == "slow"));

    let before = spec.clone();
    Applier::builder()
        .unresolved_blockio_class(Unresolved::Ignore)
        .build()
        .apply_update(&mut spec, &blockio("slow"))
        .unwrap();
    assert_eq!(spec, before);

    Applier::builder()
        .unresolved_blockio_class(Unresolved::Annotate)
        .build()
        .apply_update(&mut spec, &blockio("slow"))
        .unwrap();
    assert_eq!(json(&spec)["annotations"][BLOCKIO_CLASS_ANNOTATION], "slow");
}

fn rdt_class(class: &str) -> api::LinuxResources {
    api::LinuxResources {
        rdt_class: api::OptionalString::some(class),
        ..Default::default()
    }
}

#[test]
fn rdt_class_maps_to_clos_id_or_resolver() {
    let mut spec = base_spec();
    applier()
        .apply_update(&mut spec, &rdt_class("gold"))
        .unwrap();
    assert_eq!(json(&spec)["linux"]["intelRdt"], json!({"closID": "gold"}));

    let resolving = Applier::builder()
        .rdt_class_resolver(|class: &str| -> Result<LinuxIntelRdt, BoxError> {
            let mut rdt = LinuxIntelRdt::default();
            rdt.set_clos_id(Some(format!("{class}-group")))
                .set_schemata(Some(vec!["L3:0=ff".into()]));
            Ok(rdt)
        })
        .build();
    resolving
        .apply_update(&mut spec, &rdt_class("silver"))
        .unwrap();
    assert_eq!(
        json(&spec)["linux"]["intelRdt"],
        json!({"closID": "silver-group", "schemata": ["L3:0=ff"]})
    );

    applier().apply_update(&mut spec, &rdt_class("")).unwrap();
    assert_eq!(json(&spec)["linux"].get("intelRdt"), None);
}
