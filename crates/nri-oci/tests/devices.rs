//! Devices (`linux.devices` + cgroup allow rules) and CDI devices.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use nri_api::api;
use nri_oci::{Applier, BoxError, CDI_ANNOTATION, Error, Unresolved};
use oci_spec::runtime::Spec;
use serde_json::json;

fn device(path: &str, typ: &str, major: i64, minor: i64) -> api::LinuxDevice {
    api::LinuxDevice {
        path: path.into(),
        r#type: typ.into(),
        major,
        minor,
        file_mode: api::OptionalFileMode::some(0o660u32),
        uid: api::OptionalUInt32::some(0u32),
        gid: api::OptionalUInt32::some(44u32),
    }
}

fn remove_device(path: &str) -> api::LinuxDevice {
    api::LinuxDevice {
        path: format!("-{path}"),
        ..Default::default()
    }
}

fn devices(d: Vec<api::LinuxDevice>) -> api::ContainerAdjustment {
    linux(api::LinuxContainerAdjustment {
        devices: d,
        ..Default::default()
    })
}

#[test]
fn add_devices_with_allow_rules() {
    let spec = adjusted(&devices(vec![
        device("/dev/nvme0n1", "b", 259, 0),
        device("/dev/dri/card0", "c", 226, 0),
        device("/dev/ttyX", "u", 4, 64),
        device("/dev/myfifo", "p", 0, 0),
    ]));
    let j = json(&spec);
    assert_eq!(j["linux"]["devices"].as_array().unwrap().len(), 5);
    assert_eq!(
        j["linux"]["resources"]["devices"],
        json!([
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rwm"},
            {"allow": true, "type": "b", "major": 259, "minor": 0, "access": "rwm"},
            {"allow": true, "type": "c", "major": 226, "minor": 0, "access": "rw"},
            {"allow": true, "type": "c", "major": 4, "minor": 64, "access": "rw"},
        ])
    );
    snap!("add_devices_with_allow_rules", spec);
}

#[test]
fn remove_device_drops_node_and_its_rule() {
    let spec = adjusted(&devices(vec![
        remove_device("/dev/fuse"),
        remove_device("/dev/absent"),
    ]));
    let j = json(&spec);
    assert_eq!(j["linux"]["devices"], json!([]));
    assert_eq!(
        j["linux"]["resources"]["devices"],
        json!([{"allow": false, "access": "rwm"}])
    );
    snap!("remove_device_drops_node_and_its_rule", spec);
}

#[test]
fn remove_then_add_same_path_is_present() {
    let spec = adjusted(&devices(vec![
        device("/dev/fuse", "c", 10, 229),
        remove_device("/dev/fuse"),
    ]));
    let j = json(&spec);
    assert_eq!(
        j["linux"]["devices"],
        json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 0o660, "uid": 0, "gid": 44}])
    );
    // The original rwm rule is kept (the node still exists) and the new rw
    // rule is added.
    assert_eq!(
        j["linux"]["resources"]["devices"].as_array().unwrap().len(),
        3
    );
}

#[test]
fn replace_device_with_other_numbers_drops_stale_rule() {
    let spec = adjusted(&devices(vec![device("/dev/fuse", "c", 10, 230)]));
    assert_eq!(
        json(&spec)["linux"]["resources"]["devices"],
        json!([
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 230, "access": "rw"},
        ])
    );
}

#[test]
fn adding_same_device_twice_adds_one_rule() {
    let adj = devices(vec![device("/dev/dri/card0", "c", 226, 0)]);
    let mut spec = adjusted(&adj);
    Applier::builder()
        .build()
        .apply_adjustment(&mut spec, &adj)
        .unwrap();
    assert_eq!(
        json(&spec)["linux"]["resources"]["devices"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(json(&spec)["linux"]["devices"].as_array().unwrap().len(), 2);
}

fn cdi(names: &[&str]) -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        cdi_devices: names
            .iter()
            .map(|n| api::CdiDevice {
                name: n.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn cdi_injector_gets_deduplicated_names_and_edits_spec() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let applier = Applier::builder()
        .cdi_injector(
            move |spec: &mut Spec, names: &[String]| -> Result<(), BoxError> {
                seen2.lock().unwrap().extend_from_slice(names);
                spec.annotations_mut()
                    .get_or_insert_with(Default::default)
                    .insert("injected".into(), names.join(";"));
                Ok(())
            },
        )
        .build();
    let mut spec = base_spec();
    applier
        .apply_adjustment(
            &mut spec,
            &cdi(&["vendor.com/gpu=0", "vendor.com/gpu=1", "vendor.com/gpu=0"]),
        )
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        ["vendor.com/gpu=0", "vendor.com/gpu=1"]
    );
    assert_eq!(
        json(&spec)["annotations"]["injected"],
        "vendor.com/gpu=0;vendor.com/gpu=1"
    );
}

#[test]
fn cdi_without_injector_by_policy() {
    let adj = cdi(&["vendor.com/gpu=0"]);
    let mut spec = base_spec();
    let err = Applier::builder()
        .build()
        .apply_adjustment(&mut spec, &adj)
        .unwrap_err();
    assert!(matches!(&err, Error::CdiUnresolved { devices } if devices == &["vendor.com/gpu=0"]));
    assert_eq!(spec, base_spec());

    Applier::builder()
        .unresolved_cdi(Unresolved::Ignore)
        .build()
        .apply_adjustment(&mut spec, &adj)
        .unwrap();
    assert_eq!(spec, base_spec());

    let annotate = Applier::builder()
        .unresolved_cdi(Unresolved::Annotate)
        .build();
    annotate.apply_adjustment(&mut spec, &adj).unwrap();
    annotate
        .apply_adjustment(&mut spec, &cdi(&["vendor.com/gpu=0", "vendor.com/nic=1"]))
        .unwrap();
    assert_eq!(
        json(&spec)["annotations"][CDI_ANNOTATION],
        "vendor.com/gpu=0,vendor.com/nic=1"
    );
}

#[test]
fn cdi_injector_failure_is_typed_and_atomic() {
    let applier = Applier::builder()
        .cdi_injector(|spec: &mut Spec, _: &[String]| -> Result<(), BoxError> {
            spec.set_hostname(Some("half-done".into()));
            Err("no such device".into())
        })
        .build();
    let mut spec = base_spec();
    let err = applier
        .apply_adjustment(&mut spec, &cdi(&["vendor.com/gpu=9"]))
        .unwrap_err();
    assert!(matches!(err, Error::CdiInjection { .. }));
    assert_eq!(
        std::error::Error::source(&err).unwrap().to_string(),
        "no such device"
    );
    assert_eq!(spec, base_spec());
}
