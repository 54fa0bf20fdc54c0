//! Bad input gives typed errors naming the field, never a panic, and leaves
//! the spec unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use nri_api::api;
use nri_oci::{Applier, BoxError, Error};
use oci_spec::runtime::LinuxIntelRdt;

fn linux_adj(l: api::LinuxContainerAdjustment) -> api::ContainerAdjustment {
    // Valid changes before the bad one, to check atomicity.
    api::ContainerAdjustment {
        annotations: BTreeMap::from([("valid".to_owned(), "1".to_owned())]),
        env: vec![kv("VALID", "1")],
        linux: Some(l),
        ..Default::default()
    }
}

#[allow(clippy::too_many_lines)]
fn cases() -> Vec<(&'static str, api::ContainerAdjustment)> {
    let l = api::LinuxContainerAdjustment::default;
    vec![
        (
            "empty annotation key",
            api::ContainerAdjustment {
                annotations: BTreeMap::from([(String::new(), "v".to_owned())]),
                ..Default::default()
            },
        ),
        (
            "bare removal marker",
            api::ContainerAdjustment {
                annotations: BTreeMap::from([("-".to_owned(), String::new())]),
                ..Default::default()
            },
        ),
        (
            "env key with '='",
            api::ContainerAdjustment {
                env: vec![kv("A=B", "c")],
                ..Default::default()
            },
        ),
        (
            "mount without destination",
            api::ContainerAdjustment {
                mounts: vec![mount("", "/src", &[])],
                ..Default::default()
            },
        ),
        (
            "hook without path",
            api::ContainerAdjustment {
                hooks: Some(api::Hooks {
                    poststop: vec![api::Hook::default()],
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
        (
            "unknown rlimit",
            api::ContainerAdjustment {
                rlimits: vec![api::PosixRlimit {
                    r#type: "RLIMIT_BOGUS".into(),
                    hard: 1,
                    soft: 1,
                }],
                ..Default::default()
            },
        ),
        (
            "empty CDI device name",
            api::ContainerAdjustment {
                cdi_devices: vec![api::CdiDevice::default()],
                ..Default::default()
            },
        ),
        (
            "unknown device type",
            linux_adj(api::LinuxContainerAdjustment {
                devices: vec![api::LinuxDevice {
                    path: "/dev/x".into(),
                    r#type: "a".into(),
                    ..Default::default()
                }],
                ..l()
            }),
        ),
        (
            "oom score out of range",
            linux_adj(api::LinuxContainerAdjustment {
                oom_score_adj: api::OptionalInt::some(1001i64),
                ..l()
            }),
        ),
        (
            "unknown io priority class",
            linux_adj(api::LinuxContainerAdjustment {
                io_priority: Some(api::LinuxIoPriority {
                    class: 9,
                    priority: 0,
                }),
                ..l()
            }),
        ),
        (
            "unknown scheduler policy",
            linux_adj(api::LinuxContainerAdjustment {
                scheduler: Some(api::LinuxScheduler {
                    policy: 42,
                    ..Default::default()
                }),
                ..l()
            }),
        ),
        (
            "unknown memory policy mode",
            linux_adj(api::LinuxContainerAdjustment {
                memory_policy: Some(api::LinuxMemoryPolicy {
                    mode: 99,
                    ..Default::default()
                }),
                ..l()
            }),
        ),
        (
            "unknown namespace",
            linux_adj(api::LinuxContainerAdjustment {
                namespaces: vec![api::LinuxNamespace {
                    r#type: "net".into(),
                    path: String::new(),
                }],
                ..l()
            }),
        ),
        (
            "unknown seccomp action",
            linux_adj(api::LinuxContainerAdjustment {
                seccomp_policy: Some(api::LinuxSeccomp {
                    default_action: "SCMP_ACT_PERHAPS".into(),
                    ..Default::default()
                }),
                ..l()
            }),
        ),
        (
            "empty sysctl key",
            linux_adj(api::LinuxContainerAdjustment {
                sysctl: BTreeMap::from([("-".to_owned(), String::new())]),
                ..l()
            }),
        ),
        (
            "hugepage limit beyond i64",
            linux_adj(api::LinuxContainerAdjustment {
                resources: Some(api::LinuxResources {
                    hugepage_limits: vec![api::HugepageLimit {
                        page_size: "2MB".into(),
                        limit: u64::MAX,
                    }],
                    ..Default::default()
                }),
                ..l()
            }),
        ),
        (
            "bad cgroup access",
            linux_adj(api::LinuxContainerAdjustment {
                resources: Some(api::LinuxResources {
                    devices: vec![api::LinuxDeviceCgroup {
                        allow: true,
                        access: "rwx".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..l()
            }),
        ),
        (
            "unresolved blockio class",
            linux_adj(api::LinuxContainerAdjustment {
                resources: Some(api::LinuxResources {
                    blockio_class: api::OptionalString::some("slow"),
                    ..Default::default()
                }),
                ..l()
            }),
        ),
        (
            "unresolved CDI device",
            api::ContainerAdjustment {
                env: vec![kv("VALID", "1")],
                cdi_devices: vec![api::CdiDevice {
                    name: "vendor.com/gpu=0".into(),
                }],
                ..Default::default()
            },
        ),
    ]
}

#[test]
fn every_bad_input_is_a_typed_error_and_spec_is_unchanged() {
    let applier = applier();
    let mut messages = Vec::new();
    for (name, adj) in cases() {
        let mut spec = base_spec();
        let err = applier.apply_adjustment(&mut spec, &adj).expect_err(name);
        assert_eq!(spec, base_spec(), "{name}: spec changed on error");
        messages.push(format!("{name}: {err}"));
    }
    insta::assert_json_snapshot!("error_messages", messages);
}

#[test]
fn error_fields_are_structured() {
    let err = applier()
        .apply_adjustment(
            &mut base_spec(),
            &api::ContainerAdjustment {
                mounts: vec![mount("", "/src", &[])],
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(
        err,
        Error::MissingField {
            field: "mounts",
            what: "mount destination"
        }
    ));

    let err = applier()
        .apply_adjustment(
            &mut base_spec(),
            &linux(api::LinuxContainerAdjustment {
                oom_score_adj: api::OptionalInt::some(i64::MIN),
                ..Default::default()
            }),
        )
        .unwrap_err();
    assert!(
        matches!(&err, Error::OutOfRange { field: "linux.oom_score_adj", value, .. } if value == &i64::MIN.to_string())
    );

    let err = applier()
        .apply_adjustment(
            &mut base_spec(),
            &linux(api::LinuxContainerAdjustment {
                scheduler: Some(api::LinuxScheduler {
                    policy: 1,
                    flags: vec![77],
                    ..Default::default()
                }),
                ..Default::default()
            }),
        )
        .unwrap_err();
    assert!(matches!(
        err,
        Error::UnknownEnum {
            field: "linux.scheduler.flags",
            value: 77
        }
    ));
}

#[test]
fn update_errors_are_atomic_too() {
    let rdt_fails = Applier::builder()
        .rdt_class_resolver(|_: &str| -> Result<LinuxIntelRdt, BoxError> {
            Err("no such class".into())
        })
        .build();
    let mut spec = base_spec();
    let err = rdt_fails
        .apply_update(
            &mut spec,
            &api::LinuxResources {
                cpu: Some(api::LinuxCpu {
                    cpus: "9".into(),
                    ..Default::default()
                }),
                rdt_class: api::OptionalString::some("platinum"),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(&err, Error::RdtClass { class, .. } if class == "platinum"));
    assert_eq!(spec, base_spec());
}
