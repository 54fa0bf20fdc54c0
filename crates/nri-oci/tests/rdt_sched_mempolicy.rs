//! RDT, scheduler, I/O priority, memory policy, sysctl, net devices,
//! cgroups path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use nri_api::api;
use serde_json::json;

fn rdt(r: api::LinuxRdt) -> api::ContainerAdjustment {
    linux(api::LinuxContainerAdjustment {
        rdt: Some(r),
        ..Default::default()
    })
}

#[test]
fn rdt_set_remove_and_remove_then_set() {
    let set = api::LinuxRdt {
        clos_id: api::OptionalString::some("gold"),
        schemata: Some(api::OptionalRepeatedString {
            value: vec!["L3:0=f0".into(), "MB:0=50".into()],
        }),
        enable_monitoring: api::OptionalBool::some(true),
        remove: false,
    };
    let mut spec = adjusted(&rdt(set));
    assert_eq!(
        json(&spec)["linux"]["intelRdt"],
        json!({"closID": "gold", "schemata": ["L3:0=f0", "MB:0=50"], "enableMonitoring": true})
    );

    // A partial update keeps the other fields.
    applier()
        .apply_adjustment(
            &mut spec,
            &rdt(api::LinuxRdt {
                clos_id: api::OptionalString::some("silver"),
                ..Default::default()
            }),
        )
        .unwrap();
    assert_eq!(json(&spec)["linux"]["intelRdt"]["closID"], "silver");
    assert_eq!(json(&spec)["linux"]["intelRdt"]["enableMonitoring"], true);

    // remove + clos_id: only the new clos_id is left.
    applier()
        .apply_adjustment(
            &mut spec,
            &rdt(api::LinuxRdt {
                clos_id: api::OptionalString::some("bronze"),
                remove: true,
                ..Default::default()
            }),
        )
        .unwrap();
    assert_eq!(
        json(&spec)["linux"]["intelRdt"],
        json!({"closID": "bronze"})
    );

    applier()
        .apply_adjustment(
            &mut spec,
            &rdt(api::LinuxRdt {
                remove: true,
                ..Default::default()
            }),
        )
        .unwrap();
    assert_eq!(json(&spec)["linux"].get("intelRdt"), None);
    assert_eq!(spec, base_spec());
}

#[test]
fn rdt_adjustment_overrides_rdt_class() {
    let spec = adjusted(&linux(api::LinuxContainerAdjustment {
        resources: Some(api::LinuxResources {
            rdt_class: api::OptionalString::some("class-a"),
            ..Default::default()
        }),
        rdt: Some(api::LinuxRdt {
            clos_id: api::OptionalString::some("explicit"),
            ..Default::default()
        }),
        ..Default::default()
    }));
    assert_eq!(
        json(&spec)["linux"]["intelRdt"],
        json!({"closID": "explicit"})
    );
}

fn sched(s: api::LinuxScheduler) -> api::ContainerAdjustment {
    linux(api::LinuxContainerAdjustment {
        scheduler: Some(s),
        ..Default::default()
    })
}

#[test]
fn scheduler_set_and_none_removes() {
    let mut spec = adjusted(&sched(api::LinuxScheduler {
        policy: api::LinuxSchedulerPolicy::SchedDeadline as i32,
        nice: 0,
        priority: 0,
        flags: vec![
            api::LinuxSchedulerFlag::SchedFlagReclaim as i32,
            api::LinuxSchedulerFlag::SchedFlagUtilClampMax as i32,
        ],
        runtime: 10_000_000,
        deadline: 30_000_000,
        period: 30_000_000,
    }));
    assert_eq!(
        json(&spec)["process"]["scheduler"],
        json!({
            "policy": "SCHED_DEADLINE",
            "flags": ["SCHED_FLAG_RECLAIM", "SCHED_FLAG_UTIL_CLAMP_MAX"],
            "runtime": 10000000, "deadline": 30000000, "period": 30000000
        })
    );
    applier()
        .apply_adjustment(
            &mut spec,
            &sched(api::LinuxScheduler {
                policy: api::LinuxSchedulerPolicy::SchedOther as i32,
                nice: -5,
                ..Default::default()
            }),
        )
        .unwrap();
    assert_eq!(
        json(&spec)["process"]["scheduler"],
        json!({"policy": "SCHED_OTHER", "nice": -5})
    );
    applier()
        .apply_adjustment(&mut spec, &sched(api::LinuxScheduler::default()))
        .unwrap();
    assert_eq!(json(&spec)["process"].get("scheduler"), None);
}

#[test]
fn scheduler_flags_oci_spec_misspells_are_written_correctly() {
    let spec = adjusted(&sched(api::LinuxScheduler {
        policy: api::LinuxSchedulerPolicy::SchedDeadline as i32,
        flags: vec![
            api::LinuxSchedulerFlag::SchedFlagResetOnFork as i32,
            api::LinuxSchedulerFlag::SchedFlagDlOverrun as i32,
            api::LinuxSchedulerFlag::SchedFlagKeepParams as i32,
        ],
        runtime: 1,
        deadline: 2,
        period: 3,
        ..Default::default()
    }));
    assert_eq!(
        nri_oci::spec_json(&spec).unwrap()["process"]["scheduler"]["flags"],
        json!([
            "SCHED_FLAG_RESET_ON_FORK",
            "SCHED_FLAG_DL_OVERRUN",
            "SCHED_FLAG_KEEP_PARAMS"
        ])
    );
    // What plain serde writes (the reason for `spec_json`).
    assert_eq!(
        serde_json::to_value(&spec).unwrap()["process"]["scheduler"]["flags"][0],
        "SCHED_RESET_ON_FORK"
    );
}

#[test]
fn spec_json_capabilities_in_a_stable_order() {
    let a = nri_oci::spec_json(&oci_spec::runtime::Spec::default()).unwrap();
    let caps = &a["process"]["capabilities"];
    for set in ["bounding", "effective", "permitted"] {
        let names: Vec<&str> = caps[set]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert!(!names.is_empty(), "{set}");
        assert_eq!(names, sorted, "{set}");
    }
    // Specs built independently (each with its own hash set order) give the
    // same JSON.
    for _ in 0..8 {
        assert_eq!(
            nri_oci::spec_json(&oci_spec::runtime::Spec::default()).unwrap(),
            a
        );
    }
}

#[test]
fn io_priority_set_and_none_removes() {
    let ioprio = |class: api::IoPrioClass, priority| {
        linux(api::LinuxContainerAdjustment {
            io_priority: Some(api::LinuxIoPriority {
                class: class as i32,
                priority,
            }),
            ..Default::default()
        })
    };
    let mut spec = adjusted(&ioprio(api::IoPrioClass::IoprioClassRt, 2));
    assert_eq!(
        json(&spec)["process"]["ioPriority"],
        json!({"class": "IOPRIO_CLASS_RT", "priority": 2})
    );
    applier()
        .apply_adjustment(&mut spec, &ioprio(api::IoPrioClass::IoprioClassNone, 0))
        .unwrap();
    assert_eq!(json(&spec)["process"].get("ioPriority"), None);
}

#[test]
fn memory_policy_is_replaced() {
    let spec = adjusted(&linux(api::LinuxContainerAdjustment {
        memory_policy: Some(api::LinuxMemoryPolicy {
            mode: api::MpolMode::MpolInterleave as i32,
            nodes: "0-1".into(),
            flags: vec![api::MpolFlag::MpolFStaticNodes as i32],
        }),
        ..Default::default()
    }));
    assert_eq!(
        json(&spec)["linux"]["memoryPolicy"],
        json!({"mode": "MPOL_INTERLEAVE", "nodes": "0-1", "flags": ["MPOL_F_STATIC_NODES"]})
    );
}

#[test]
fn sysctl_net_devices_and_cgroups_path() {
    let spec = adjusted(&linux(api::LinuxContainerAdjustment {
        sysctl: BTreeMap::from([
            (
                "-net.ipv4.ip_unprivileged_port_start".to_owned(),
                String::new(),
            ),
            ("net.core.somaxconn".to_owned(), "4096".to_owned()),
            ("-kernel.absent".to_owned(), String::new()),
        ]),
        net_devices: BTreeMap::from([
            (
                "eth1".to_owned(),
                api::LinuxNetDevice {
                    name: "net1".into(),
                },
            ),
            ("-eth9".to_owned(), api::LinuxNetDevice::default()),
        ]),
        cgroups_path: "/kubepods/burstable/pod1/ctr1".into(),
        ..Default::default()
    }));
    let l = &json(&spec)["linux"];
    assert_eq!(l["sysctl"], json!({"net.core.somaxconn": "4096"}));
    assert_eq!(l["netDevices"], json!({"eth1": {"name": "net1"}}));
    assert_eq!(l["cgroupsPath"], "/kubepods/burstable/pod1/ctr1");
    snap!("sysctl_net_devices_and_cgroups_path", spec);

    // Removing the net device again leaves an empty map.
    let mut spec = spec;
    applier()
        .apply_adjustment(
            &mut spec,
            &linux(api::LinuxContainerAdjustment {
                net_devices: BTreeMap::from([("-eth1".to_owned(), api::LinuxNetDevice::default())]),
                ..Default::default()
            }),
        )
        .unwrap();
    assert_eq!(json(&spec)["linux"]["netDevices"], json!({}));
}

#[test]
fn all_linux_fields_on_a_spec_without_linux() {
    let mut spec = base_spec();
    spec.set_linux(None);
    applier()
        .apply_adjustment(
            &mut spec,
            &linux(api::LinuxContainerAdjustment {
                sysctl: BTreeMap::from([("net.core.somaxconn".to_owned(), "1".to_owned())]),
                memory_policy: Some(api::LinuxMemoryPolicy::default()),
                ..Default::default()
            }),
        )
        .unwrap();
    assert_eq!(
        json(&spec)["linux"],
        json!({"sysctl": {"net.core.somaxconn": "1"}, "memoryPolicy": {"mode": "MPOL_DEFAULT"}})
    );
}
