//! Adjustments end-to-end through real plugin connections: merge,
//! conflicts, updates, evictions, validation, metrics and audit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use nri_api::api::*;
use nri_runtime::{Error, ErrorClass, Metrics, PluginFailure, PluginId};

fn annotate(key: &str, value: &str) -> ContainerAdjustment {
    ContainerAdjustment {
        annotations: [(key.to_owned(), value.to_owned())].into(),
        ..Default::default()
    }
}

fn cpu_update(id: &str, shares: u64) -> ContainerUpdate {
    ContainerUpdate {
        container_id: id.into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: shares }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::too_many_lines)]
async fn every_kind_of_adjustment_is_merged() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let p = FakePlugin::new("00", "test").on_create(|_| CreateContainerResponse {
        adjust: Some(ContainerAdjustment {
            annotations: [("key".into(), "00-test".into())].into(),
            mounts: vec![
                Mount {
                    destination: "/mnt/test".into(),
                    source: "/src".into(),
                    r#type: "bind".into(),
                    options: vec!["ro".into()],
                },
                Mount {
                    destination: "-/remove/test/destination".into(),
                    ..Default::default()
                },
            ],
            env: vec![
                KeyValue {
                    key: "KEY".into(),
                    value: "00-test".into(),
                },
                KeyValue {
                    key: "-OLD".into(),
                    value: String::new(),
                },
            ],
            hooks: Some(Hooks {
                prestart: vec![Hook {
                    path: "/bin/hook".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            linux: Some(LinuxContainerAdjustment {
                devices: vec![LinuxDevice {
                    path: "/dev/test".into(),
                    r#type: "c".into(),
                    major: 1,
                    minor: 3,
                    ..Default::default()
                }],
                resources: Some(LinuxResources {
                    memory: Some(LinuxMemory {
                        limit: Some(OptionalInt64 { value: 1 << 30 }),
                        ..Default::default()
                    }),
                    cpu: Some(LinuxCpu {
                        shares: Some(OptionalUInt64 { value: 512 }),
                        cpus: "0-1".into(),
                        ..Default::default()
                    }),
                    pids: Some(LinuxPids { limit: 100 }),
                    ..Default::default()
                }),
                oom_score_adj: Some(OptionalInt { value: 10 }),
                sysctl: [("net.core.somaxconn".into(), "256".into())].into(),
                ..Default::default()
            }),
            rlimits: vec![PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 456,
                soft: 123,
            }],
            cdi_devices: vec![CdiDevice {
                name: "vendor0.com/dev=dev0".into(),
            }],
            args: vec![String::new(), "sleep".into(), "1".into()],
        }),
        ..Default::default()
    });
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let mut c = ctr("p", "c");
    c.env = vec!["OLD=1".into()];
    c.mounts = vec![Mount {
        destination: "/remove/test/destination".into(),
        ..Default::default()
    }];
    let out = a.create_container(&pod("p"), &c).await.unwrap();
    let adj = &out.adjustment;
    assert_eq!(
        adj.annotations.get("key").map(String::as_str),
        Some("00-test")
    );
    assert!(adj.mounts.iter().any(|m| m.destination == "/mnt/test"));
    assert!(
        adj.mounts
            .iter()
            .any(|m| m.destination == "-/remove/test/destination")
    );
    assert!(adj.env.iter().any(|kv| kv.key == "KEY"));
    assert!(
        adj.env.iter().any(|kv| kv.key == "-OLD"),
        "pure removal of an existing env var reaches the runtime: {:?}",
        adj.env
    );
    assert_eq!(adj.hooks.as_ref().unwrap().prestart.len(), 1);
    let linux = adj.linux.as_ref().unwrap();
    assert_eq!(linux.devices[0].path, "/dev/test");
    let res = linux.resources.as_ref().unwrap();
    assert_eq!(
        res.memory.as_ref().unwrap().limit.as_ref().unwrap().value,
        1 << 30
    );
    assert_eq!(res.cpu.as_ref().unwrap().cpus, "0-1");
    assert_eq!(res.pids.as_ref().unwrap().limit, 100);
    assert_eq!(linux.oom_score_adj.as_ref().unwrap().value, 10);
    assert_eq!(
        linux.sysctl.get("net.core.somaxconn").map(String::as_str),
        Some("256")
    );
    assert_eq!(adj.rlimits[0].hard, 456);
    assert_eq!(adj.cdi_devices[0].name, "vendor0.com/dev=dev0");
    assert_eq!(adj.args, vec!["sleep", "1"]);
    // Owners are reported.
    let owners = &out.owners.owners["c"];
    assert_eq!(
        owners
            .simple
            .get(&(Field::MemLimit as i32))
            .map(String::as_str),
        Some("00-test")
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn conflicting_plugins_fail_creation_naming_both() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let _x = FakePlugin::new("00", "bar")
        .on_create(|_| CreateContainerResponse {
            adjust: Some(annotate("key", "bar")),
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    let _y = FakePlugin::new("10", "foo")
        .on_create(|_| CreateContainerResponse {
            adjust: Some(annotate("key", "foo")),
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    match &err {
        Error::PluginFailed {
            plugin,
            cause: PluginFailure::Conflict { message },
            ..
        } => {
            assert_eq!(plugin, "10-foo");
            assert!(
                message.contains("00-bar") && message.contains("10-foo"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_then_set_overrides_and_later_plugins_see_earlier_changes() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let _x = FakePlugin::new("00", "bar")
        .on_create(|_| CreateContainerResponse {
            adjust: Some(annotate("key", "bar")),
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    let _y = FakePlugin::new("10", "foo")
        .on_create(move |req| {
            *seen2.lock().unwrap() = req
                .container
                .as_ref()
                .unwrap()
                .annotations
                .get("key")
                .cloned();
            let mut adj = annotate("-key", "");
            adj.annotations.insert("key".into(), "foo".into());
            CreateContainerResponse {
                adjust: Some(adj),
                ..Default::default()
            }
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(seen.lock().unwrap().as_deref(), Some("bar"));
    assert_eq!(
        out.adjustment.annotations.get("key").map(String::as_str),
        Some("foo")
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn updates_and_evictions_from_create_update_and_stop() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let _x = FakePlugin::new("10", "upd")
        .on_create(|_| CreateContainerResponse {
            update: vec![cpu_update("other", 100)],
            evict: vec![ContainerEviction {
                container_id: "victim".into(),
                reason: "make room".into(),
            }],
            ..Default::default()
        })
        .on_update(|_| UpdateContainerResponse {
            update: vec![cpu_update("c", 700), cpu_update("other", 200)],
            evict: vec![ContainerEviction {
                container_id: "victim2".into(),
                reason: "r".into(),
            }],
        })
        .on_stop(|_| StopContainerResponse {
            update: vec![cpu_update("other", 300)],
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let (p, c) = (pod("p"), ctr("p", "c"));
    let out = a.create_container(&p, &c).await.unwrap();
    assert_eq!(out.updates[0].container_id, "other");
    assert_eq!(out.evictions[0].container_id, "victim");
    let up = a.update_container(&p, &c, None).await.unwrap();
    assert_eq!(
        up.updates.last().unwrap().container_id,
        "c",
        "target's update last"
    );
    assert_eq!(up.updates[0].container_id, "other");
    let shares = up
        .updates
        .last()
        .unwrap()
        .linux
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .cpu
        .as_ref()
        .unwrap()
        .shares
        .as_ref()
        .unwrap()
        .value;
    assert_eq!(shares, 700);
    assert_eq!(up.evictions[0].container_id, "victim2");
    let st = a.stop_container(&p, &c).await.unwrap();
    assert_eq!(st.updates[0].container_id, "other");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn update_of_the_container_being_created_is_refused() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let _x = FakePlugin::new("10", "self")
        .on_create(|_| CreateContainerResponse {
            update: vec![cpu_update("c", 1)],
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    assert!(a.create_container(&pod("p"), &ctr("p", "c")).await.is_err());
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn validator_plugins_see_the_merged_result_and_can_reject() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let _x = FakePlugin::new("10", "adj")
        .on_create(|req| {
            let id = req.container.as_ref().unwrap().id.clone();
            CreateContainerResponse {
                adjust: Some(annotate("forbidden", &id)),
                ..Default::default()
            }
        })
        .connect(&env.socket)
        .await
        .unwrap();
    let validator = FakePlugin::new("90", "val")
        .events("ValidateContainerAdjustment".parse().unwrap())
        .on_validate(|req| {
            let owner = req
                .owners
                .as_ref()
                .and_then(|o| o.owners.get(&req.container.as_ref().unwrap().id))
                .and_then(|f| f.compound.get(&(Field::Annotations as i32)))
                .and_then(|c| c.owners.get("forbidden"))
                .cloned();
            let names: Vec<_> = req
                .plugins
                .iter()
                .map(|p| format!("{}-{}", p.index, p.name))
                .collect();
            assert!(names.contains(&"10-adj".to_owned()));
            if req.container.as_ref().unwrap().id == "bad" {
                ValidateContainerAdjustmentResponse {
                    reject: true,
                    reason: format!("annotation owned by {}", owner.unwrap_or_default()),
                }
            } else {
                ValidateContainerAdjustmentResponse::default()
            }
        });
    let _v = validator.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    a.create_container(&pod("p"), &ctr("p", "good"))
        .await
        .unwrap();
    let err = a
        .create_container(&pod("p"), &ctr("p", "bad"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::ValidationRejected { plugin, reason } if plugin == "90-val" && reason.contains("10-adj")),
        "{err:?}"
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn default_validator_rejects_hook_injection() {
    let env = TestEnv::new();
    let cfg: nri_runtime::validate::DefaultValidatorConfig =
        serde_json::from_str(r#"{"enable": true, "rejectOCIHookAdjustment": true}"#).unwrap();
    let a = env.start(env.builder().default_validator(cfg)).await;
    let _x = FakePlugin::new("10", "hooker")
        .on_create(|req| {
            if req.container.as_ref().unwrap().id == "hooked" {
                CreateContainerResponse {
                    adjust: Some(ContainerAdjustment {
                        hooks: Some(Hooks {
                            prestart: vec![Hook {
                                path: "/x".into(),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            } else {
                CreateContainerResponse::default()
            }
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.create_container(&pod("p"), &ctr("p", "plain"))
        .await
        .unwrap();
    let err = a
        .create_container(&pod("p"), &ctr("p", "hooked"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::ValidationRejected { plugin, .. } if plugin == "00-default-validator"),
        "{err:?}"
    );
    a.stop().await;
}

#[derive(Default)]
struct Recording {
    calls: Mutex<Vec<(String, String, Result<(), ErrorClass>)>>,
    adjustments: Mutex<Vec<(String, String, usize, usize, usize)>>,
    conflicts: Mutex<Vec<String>>,
    active: Mutex<Vec<usize>>,
}

impl Metrics for Recording {
    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        self.calls
            .lock()
            .unwrap()
            .push((plugin.into(), operation.into(), result));
    }
    fn plugin_adjustments(&self, plugin: &str, operation: &str, a: usize, u: usize, e: usize) {
        self.adjustments
            .lock()
            .unwrap()
            .push((plugin.into(), operation.into(), a, u, e));
    }
    fn plugin_conflict(&self, plugin: &str, _operation: &str) {
        self.conflicts.lock().unwrap().push(plugin.into());
    }
    fn active_plugins(&self, count: usize) {
        self.active.lock().unwrap().push(count);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_invocations_adjustments_conflicts_and_plugins() {
    let env = TestEnv::new();
    let m = Arc::new(Recording::default());
    let a = env.start(env.builder().metrics(m.clone())).await;
    let _x = FakePlugin::new("00", "bar")
        .on_create(|_| CreateContainerResponse {
            adjust: Some(annotate("key", "bar")),
            update: vec![cpu_update("o", 1)],
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let _y = FakePlugin::new("10", "foo")
        .on_create(|_| CreateContainerResponse {
            adjust: Some(annotate("key", "foo")),
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    assert!(
        a.create_container(&pod("p"), &ctr("p", "c2"))
            .await
            .is_err()
    );
    let calls = m.calls.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|(p, o, r)| p == "00-bar" && o == "CreateContainer" && r.is_ok())
    );
    assert!(
        calls
            .iter()
            .any(|(p, o, r)| p == "00-bar" && o == "Synchronize" && r.is_ok())
    );
    assert!(
        calls
            .iter()
            .any(|(p, _, r)| p == "10-foo" && *r == Err(ErrorClass::Conflict))
    );
    assert_eq!(m.conflicts.lock().unwrap().as_slice(), ["10-foo"]);
    let adj = m.adjustments.lock().unwrap().clone();
    assert!(adj.contains(&("00-bar".into(), "CreateContainer".into(), 0, 1, 0)));
    // Two owned fields: the annotation of c and the CPU shares of o.
    assert!(
        adj.contains(&("00-bar".into(), "CreateContainer".into(), 2, 0, 0)),
        "{adj:?}"
    );
    assert_eq!(m.active.lock().unwrap().last(), Some(&2));
    a.stop().await;
}

#[test]
fn audit_trail_lists_every_owned_field() {
    let owners = OwningPlugins {
        owners: [(
            "c".to_owned(),
            FieldOwners {
                simple: [
                    (Field::MemLimit as i32, "10-a".to_owned()),
                    (Field::OciHooks as i32, "10-a,20-b".to_owned()),
                ]
                .into(),
                compound: [(
                    Field::Env as i32,
                    CompoundFieldOwners {
                        owners: [("FOO".to_owned(), "-20-b".to_owned())].into(),
                    },
                )]
                .into(),
            },
        )]
        .into(),
    };
    let mut per = nri_runtime::metrics::audit_owners("CreateContainer", &owners);
    per.sort();
    assert_eq!(per, vec![("10-a".to_owned(), 2), ("20-b".to_owned(), 2)]);
    let _ = PluginId::new("10", "a").unwrap();
}
