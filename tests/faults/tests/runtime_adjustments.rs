//! Runtime side under plugins whose adjustments are invalid or
//! conflicting: structurally invalid adjustments, negative resource
//! limits, two plugins changing one field. Each is refused naming the
//! plugin (or both), and the runtime keeps serving.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::bad_plugin::*;
use common::*;
use nri_api::api::{
    self, ContainerAdjustment, CreateContainerResponse, KeyValue, LinuxContainerAdjustment,
    LinuxCpu, LinuxMemory, LinuxResources, Mount, OptionalInt64, OptionalUInt64,
};
use nri_api::method;
use nri_runtime::{Error, ErrorClass};
use prost::Message;

// ---------------------------------------------------- invalid adjustments

fn adjust(f: impl FnOnce(&mut ContainerAdjustment)) -> Act {
    let mut adj = ContainerAdjustment::default();
    f(&mut adj);
    Act::ok(&CreateContainerResponse {
        adjust: Some(adj),
        ..Default::default()
    })
}

fn resources(f: impl FnOnce(&mut LinuxResources)) -> impl FnOnce(&mut ContainerAdjustment) {
    move |adj| {
        let mut r = LinuxResources::default();
        f(&mut r);
        adj.linux = Some(LinuxContainerAdjustment {
            resources: Some(r),
            ..Default::default()
        });
    }
}

/// The outcome of one CreateContainer where `10-bad` answers `act`, under
/// policy `fail`; the good plugin must have been called unless the request
/// failed.
async fn create_with(act: fn() -> Act) -> Result<nri_runtime::CreateContainerOutcome, Error> {
    let env = Env::new();
    let (a, mut good, _raw) = setup(&env, env.builder(), act).await;
    let r = a.create_container(&pod("p"), &ctr("p", "c1")).await;
    if r.is_ok() {
        assert_eq!(good.next().await.1, "c1");
    }
    // Whatever happened, the runtime serves the next request.
    let rep = a.start_container(&pod("p"), &ctr("p", "c1")).await.unwrap();
    assert!(rep.errors.is_empty());
    good.stop().await;
    a.stop().await;
    r
}

fn mount_without_destination() -> Act {
    adjust(|a| {
        a.mounts.push(Mount {
            destination: String::new(),
            source: "/tmp".into(),
            r#type: "bind".into(),
            options: vec!["rbind".into()],
        })
    })
}

fn env_without_name() -> Act {
    adjust(|a| {
        a.env.push(KeyValue {
            key: String::new(),
            value: "v".into(),
        })
    })
}

/// Structurally invalid adjustments (a mount without destination, an env
/// entry without a name) are refused as an unusable answer naming the
/// plugin (`PluginFailure::InvalidResponse`; policy `fail` fails the
/// request), and the runtime keeps serving.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn invalid_adjustments_are_refused_naming_the_plugin() {
    let guard = no_panics();
    let cases: Vec<Case> = vec![
        ("mount without destination", mount_without_destination),
        ("env without name", env_without_name),
    ];
    for (what, act) in cases {
        match create_with(act).await {
            Err(Error::PluginFailed { plugin, cause, .. }) => {
                assert_eq!(plugin, BAD, "{what}");
                assert!(cause.to_string().contains("empty"), "{what}: {cause}");
            }
            other => panic!("{what}: not refused: {other:?}"),
        }
    }
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn negative_resource_limits_are_refused_naming_the_plugin() {
    let guard = no_panics();
    let cases: Vec<Case> = vec![
        ("negative memory limit", || {
            adjust(resources(|r| {
                r.memory = Some(LinuxMemory {
                    limit: Some(OptionalInt64 { value: -5 }),
                    ..Default::default()
                })
            }))
        }),
        ("absurd cpu shares and quota", || {
            adjust(resources(|r| {
                r.cpu = Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: u64::MAX }),
                    quota: Some(OptionalInt64 { value: i64::MIN }),
                    period: Some(OptionalUInt64 { value: 0 }),
                    ..Default::default()
                })
            }))
        }),
    ];
    // Negative limits are refused naming the plugin; huge values that are
    // well-formed (u64::MAX shares) are the kernel's to clamp or refuse.
    for (what, act) in cases {
        match create_with(act).await {
            Err(Error::PluginFailed { plugin, .. }) => assert_eq!(plugin, BAD, "{what}"),
            other => panic!("{what}: not refused: {other:?}"),
        }
    }
    guard.check();
}

/// Plugin `10-one` sets env `SHARED` and mount `/data`; plugin `20-two`
/// then, depending on the container: sets `SHARED` too (conflict naming
/// both), removes both (upstream's rule: a later plugin's removal wins
/// silently and is recorded as its own in the owners, so validators and
/// the audit trail see it), or removes and sets (upstream's documented
/// override: allowed, `20-two` wins).
#[tokio::test(flavor = "current_thread", start_paused = true)]
#[allow(clippy::too_many_lines)]
async fn conflicting_changes_fail_naming_both_and_removals_are_owned() {
    let guard = no_panics();
    let env = Env::new();
    let (a, mut good) = env.start_with_good(env.builder()).await;
    let mut one = RawPlugin::connect(&env.socket, RawOpts::default(), |m, _| {
        (m == method::CREATE_CONTAINER).then(|| {
            adjust(|a| {
                a.env.push(KeyValue {
                    key: "SHARED".into(),
                    value: "one".into(),
                });
                a.mounts.push(Mount {
                    destination: "/data".into(),
                    source: "/one".into(),
                    r#type: "bind".into(),
                    options: vec!["rbind".into()],
                });
            })
        })
    })
    .await;
    one.register("one", "10").await.unwrap();
    let mut two = RawPlugin::connect(&env.socket, RawOpts::default(), |m, payload| {
        if m != method::CREATE_CONTAINER {
            return None;
        }
        let req = api::CreateContainerRequest::decode(payload.clone()).unwrap();
        let id = req.container.unwrap().id;
        Some(adjust(|a| {
            if id.contains("remove") {
                a.env.push(KeyValue {
                    key: "-SHARED".into(),
                    value: String::new(),
                });
                a.mounts.push(Mount {
                    destination: "-/data".into(),
                    ..Default::default()
                });
            }
            if id.contains("set") {
                a.env.push(KeyValue {
                    key: "SHARED".into(),
                    value: "two".into(),
                });
            }
        }))
    })
    .await;
    two.register("two", "20").await.unwrap();
    env.probe.active(3).await;

    let err = a
        .create_container(&pod("p"), &ctr("p", "set"))
        .await
        .expect_err("two plugins setting one env var");
    let text = err.to_string();
    assert!(
        text.contains("10-one") && text.contains("20-two") && text.contains("SHARED"),
        "the conflict names both plugins and the key: {text}"
    );
    assert!(
        matches!(&err, Error::PluginFailed { plugin, cause, .. }
            if plugin == "20-two" && cause.class() == ErrorClass::Conflict),
        "{err:?}"
    );

    let out = a
        .create_container(&pod("p"), &ctr("p", "remove"))
        .await
        .expect("a pure removal of another plugin's change is upstream's rule");
    assert!(!out.adjustment.env.iter().any(|kv| kv.key == "SHARED"));
    assert!(
        !out.adjustment
            .mounts
            .iter()
            .any(|m| m.destination == "/data")
    );
    let owners = &out.owners.owners["remove"];
    let owner = |field: api::Field, key: &str| owners.compound[&(field as i32)].owners[key].clone();
    assert_eq!(owner(api::Field::Env, "SHARED"), "-20-two");
    assert_eq!(owner(api::Field::Mounts, "/data"), "-20-two");
    assert_eq!(good.next().await.1, "remove");

    let out = a
        .create_container(&pod("p"), &ctr("p", "remove-set"))
        .await
        .expect("remove then set is upstream's override rule");
    assert!(
        out.adjustment
            .env
            .iter()
            .any(|kv| kv.key == "SHARED" && kv.value == "two")
    );
    assert_eq!(good.next().await.1, "remove-set");
    good.still_serves(&a, "c2").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}
