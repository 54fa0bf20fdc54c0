//! Every way a plugin updates containers goes through the same checks,
//! validation and audit: Synchronize answers, unsolicited
//! UpdateContainers, and the updates in CreateContainer, UpdateContainer
//! and StopContainer answers (the audit of Synchronize answers is checked
//! in update_audit.rs, alone in its binary). The default validator's
//! `rejectFields` apply to updates as to adjustments, and `Devices` covers
//! device cgroup rules and CDI devices.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use nri_api::api::*;
use nri_runtime::validate::DefaultValidatorConfig;
use nri_runtime::{Error, Metrics};
use nri_ttrpc::Code;

/// Records `peer_refused` calls.
#[derive(Default)]
struct Refusals(Mutex<Vec<(String, String)>>);

impl Metrics for Refusals {
    fn peer_refused(&self, peer: &str, reason: &str) {
        self.0.lock().unwrap().push((peer.into(), reason.into()));
    }
}

fn mem_update(id: &str, limit: i64) -> ContainerUpdate {
    let mut u = ContainerUpdate::new(id);
    u.linux_resources_mut().memory = Some(LinuxMemory {
        limit: Some(OptionalInt64 { value: limit }),
        ..Default::default()
    });
    u
}

fn device_rule_update(id: &str) -> ContainerUpdate {
    let mut u = ContainerUpdate::new(id);
    u.linux_resources_mut().devices = vec![LinuxDeviceCgroup {
        allow: true,
        r#type: "c".into(),
        major: Some(OptionalInt64 { value: 1 }),
        minor: Some(OptionalInt64 { value: 1 }),
        access: "rwm".into(),
    }];
    u
}

fn rejecting(fields: &[&str]) -> DefaultValidatorConfig {
    let mut c = DefaultValidatorConfig::default();
    c.enable = true;
    c.reject_fields = fields.iter().map(|f| (*f).to_owned()).collect();
    c
}

async fn with_containers(env: &TestEnv) {
    env.runtime.add_pod(pod("pod0"));
    for id in ["c0", "c1"] {
        env.runtime.add_container(ctr("pod0", id));
    }
}

#[tokio::test]
async fn the_default_validator_rules_apply_to_unsolicited_and_sync_updates() {
    let env = TestEnv::new();
    with_containers(&env).await;
    let metrics = Arc::new(Refusals::default());
    let b = env
        .builder()
        .metrics(metrics.clone())
        .default_validator(rejecting(&["MemLimit", "Devices"]));
    let a = env.start(b).await;
    let mut p = FakePlugin::new("10", "tuner");
    p.sync_updates = vec![mem_update("c0", 1 << 20)];
    let c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    // The Synchronize answer's update was rejected, not applied.
    assert!(env.runtime.updates.lock().unwrap().is_empty());
    let err = c
        .update_containers(UpdateContainersRequest {
            update: vec![mem_update("c1", 1 << 20)],
            evict: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert!(
        err.to_string().contains(
            "attempted restricted MemLimit update of container \"c1\" by plugin \"10-tuner\""
        ),
        "{err}"
    );
    // Device cgroup rules in an update count as devices.
    let err = c
        .update_containers(UpdateContainersRequest {
            update: vec![device_rule_update("c1")],
            evict: Vec::new(),
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("restricted Devices update"),
        "{err}"
    );
    // Other fields pass.
    let mut ok = ContainerUpdate::new("c1");
    ok.linux_resources_mut().pids = Some(LinuxPids { limit: 100 });
    c.update_containers(UpdateContainersRequest {
        update: vec![ok.clone()],
        evict: Vec::new(),
    })
    .await
    .unwrap();
    assert_eq!(env.runtime.updates.lock().unwrap().clone(), [ok]);
    let kinds: Vec<String> = metrics
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(_, k)| k.clone())
        .collect();
    assert_eq!(kinds, ["rejected_update"; 3]);
    a.stop().await;
}

#[tokio::test]
async fn update_and_stop_answers_are_validated() {
    let env = TestEnv::new();
    let b = env.builder().default_validator(rejecting(&["CPUShares"]));
    let a = env.start(b).await;
    let p = FakePlugin::new("10", "cpu")
        .on_update(|_| UpdateContainerResponse {
            update: vec![{
                let mut u = ContainerUpdate::new("other");
                u.linux_resources_mut().cpu = Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: 512 }),
                    ..Default::default()
                });
                u
            }],
            evict: Vec::new(),
        })
        .on_stop(|_| StopContainerResponse {
            update: vec![{
                let mut u = ContainerUpdate::new("other");
                u.linux_resources_mut().cpu = Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: 256 }),
                    ..Default::default()
                });
                u
            }],
        });
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let pod0 = pod("pod0");
    let c0 = ctr("pod0", "c0");
    // The runtime's own request may set CPU shares: only plugins are judged.
    let asked = LinuxResources {
        cpu: Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: 2 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = a
        .update_container(&pod0, &c0, Some(asked))
        .await
        .unwrap_err();
    match err {
        Error::ValidationRejected { plugin, reason } => {
            assert_eq!(plugin, "00-default-validator");
            assert!(
                reason.contains(
                    "restricted CPUShares update of container \"other\" by plugin \"10-cpu\""
                ),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // StopContainer never fails: the updates are dropped and reported.
    let out = a.stop_container(&pod0, &c0).await.unwrap();
    assert!(out.updates.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert!(
        out.errors[0].to_string().contains("CPUShares"),
        "{}",
        out.errors[0]
    );
    a.stop().await;
}

#[tokio::test]
async fn a_runtime_requested_change_is_not_blamed_on_plugins() {
    let env = TestEnv::new();
    let b = env.builder().default_validator(rejecting(&["CPUShares"]));
    let a = env.start(b).await;
    let _c = FakePlugin::new("10", "quiet")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let asked = LinuxResources {
        cpu: Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: 2 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = a
        .update_container(&pod("pod0"), &ctr("pod0", "c0"), Some(asked.clone()))
        .await
        .unwrap();
    assert_eq!(
        out.updates
            .last()
            .unwrap()
            .linux
            .as_ref()
            .unwrap()
            .resources,
        Some(asked)
    );
    a.stop().await;
}

#[tokio::test]
async fn devices_cover_cgroup_rules_and_cdi_devices_in_adjustments() {
    let env = TestEnv::new();
    let b = env.builder().default_validator(rejecting(&["Devices"]));
    let a = env.start(b).await;
    let p = FakePlugin::new("10", "dev").on_create(|r| {
        let mut adjust = ContainerAdjustment::default();
        match r.container.as_ref().map(|c| c.id.as_str()) {
            Some("rules") => {
                adjust
                    .linux
                    .get_or_insert_default()
                    .resources
                    .get_or_insert_default()
                    .devices = device_rule_update("x")
                    .linux
                    .unwrap()
                    .resources
                    .unwrap()
                    .devices;
            }
            Some("cdi") => adjust.cdi_devices.push(CdiDevice {
                name: "vendor.com/gpu=0".into(),
            }),
            Some("other") => {
                return CreateContainerResponse {
                    update: vec![device_rule_update("c9")],
                    ..Default::default()
                };
            }
            _ => {
                adjust.add_annotation("fine", "yes");
            }
        }
        CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        }
    });
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let pod0 = pod("pod0");
    a.run_pod_sandbox(&pod0).await.unwrap();
    let reason = |id: &'static str| {
        let a = a.clone();
        let pod0 = pod0.clone();
        let c = ctr("pod0", id);
        async move {
            match a.create_container(&pod0, &c).await {
                Err(Error::ValidationRejected { reason, .. }) => reason,
                other => panic!("{id}: {other:?}"),
            }
        }
    };
    let r = reason("rules").await;
    assert!(
        r.contains("restricted Devices (device cgroup rules) adjustment"),
        "{r}"
    );
    let r = reason("cdi").await;
    assert!(
        r.contains("restricted Devices (CDI devices) adjustment by plugin \"10-dev\""),
        "{r}"
    );
    a.create_container(&pod0, &ctr("pod0", "plain"))
        .await
        .unwrap();
    // Device rules in an update of another container never reach the
    // runtime: updates carry no device rules (as upstream drops them).
    let out = a
        .create_container(&pod0, &ctr("pod0", "other"))
        .await
        .unwrap();
    assert!(out.updates.iter().all(|u| {
        u.linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .is_none_or(|r| r.devices.is_empty())
    }));
    a.stop().await;
}
