//! Conflicts name the field, the key, the container and both plugins, and
//! leave the collector unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{ContainerUpdate, Field, LinuxScheduler};
use nri_merge::Error;

fn conflict(e: Error) -> (Field, Option<String>, String, String, String) {
    match e {
        Error::Conflict {
            field,
            key,
            container,
            first_plugin,
            second_plugin,
        } => (field, key, container, first_plugin, second_plugin),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn simple_field_conflict_names_both_plugins() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_linux_memory_limit(1);
        }),
    )
    .unwrap();
    let e = apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.set_linux_memory_limit(2);
        }),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert_eq!(
        conflict(e),
        (
            Field::MemLimit,
            None,
            CTR.into(),
            "10-a".into(),
            "20-b".into()
        )
    );
    assert!(
        msg.contains("10-a") && msg.contains("20-b") && msg.contains("MemLimit"),
        "{msg}"
    );
}

#[test]
fn compound_field_conflicts_name_the_key() {
    type Setter = fn(&mut nri_api::api::ContainerAdjustment);
    let cases: Vec<(Field, &str, Setter)> = vec![
        (Field::Annotations, "k", |a| {
            a.add_annotation("k", "v");
        }),
        (Field::Mounts, "/m", |a| {
            a.add_mount(mount("/m", "/x"));
        }),
        (Field::Env, "E", |a| {
            a.add_env("E", "1");
        }),
        (Field::Devices, "/dev/d", |a| {
            a.add_device(device("/dev/d", 3));
        }),
        (Field::CdiDevices, "v.com/c=1", |a| {
            a.add_cdi_device("v.com/c=1");
        }),
        (Field::Rlimits, "RLIMIT_CORE", |a| {
            a.add_rlimit("RLIMIT_CORE", 1, 1);
        }),
        (Field::HugepageLimits, "1GB", |a| {
            a.add_linux_hugepage_limit("1GB", 1);
        }),
        (Field::CgroupsUnified, "io.max", |a| {
            a.add_linux_unified("io.max", "x");
        }),
        (Field::Namespace, "pid", |a| {
            a.add_or_replace_namespace(ns("pid", ""));
        }),
        (Field::Sysctl, "net.x", |a| {
            a.set_linux_sysctl("net.x", "1");
        }),
        (Field::LinuxNetDevices, "eth9", |a| {
            a.add_linux_net_device("eth9", Default::default());
        }),
    ];
    for (field, key, set) in cases {
        let mut r = result();
        apply(&mut r, "10-a", adj(set)).unwrap();
        let e = apply(&mut r, "20-b", adj(set)).unwrap_err();
        assert_eq!(
            conflict(e),
            (
                field,
                Some(key.to_string()),
                CTR.into(),
                "10-a".into(),
                "20-b".into()
            ),
            "{field:?}"
        );
    }
}

#[test]
fn every_simple_field_conflicts() {
    type Setter = fn(&mut nri_api::api::ContainerAdjustment);
    let cases: Vec<(Field, Setter)> = vec![
        (Field::Args, |a| {
            a.set_args(["x"]);
        }),
        (Field::CpuShares, |a| {
            a.set_linux_cpu_shares(1);
        }),
        (Field::CpuSetCpUs, |a| {
            a.set_linux_cpu_set_cpus("1");
        }),
        (Field::PidsLimit, |a| {
            a.set_linux_pid_limits(1);
        }),
        (Field::BlockioClass, |a| {
            a.set_linux_blockio_class("x");
        }),
        (Field::CgroupsPath, |a| {
            a.set_linux_cgroups_path("/x");
        }),
        (Field::OomScoreAdj, |a| {
            a.set_linux_oom_score_adj(Some(1));
        }),
        (Field::IoPriority, |a| {
            a.set_linux_io_priority(Default::default());
        }),
        (Field::SeccompPolicy, |a| {
            a.set_linux_seccomp_policy(Default::default());
        }),
        (Field::LinuxSched, |a| {
            a.set_linux_scheduler(LinuxScheduler::default());
        }),
        (Field::RdtClosId, |a| {
            a.set_linux_rdt_clos_id("x");
        }),
        (Field::RdtSchemata, |a| {
            a.set_linux_rdt_schemata(["x"]);
        }),
        (Field::RdtEnableMonitoring, |a| {
            a.set_linux_rdt_enable_monitoring(true);
        }),
        (Field::MemoryPolicy, |a| {
            a.set_linux_memory_policy(Default::default(), "0", &[]);
        }),
    ];
    for (field, set) in cases {
        let mut r = result();
        apply(&mut r, "10-a", adj(set)).unwrap();
        let e = apply(&mut r, "20-b", adj(set)).unwrap_err();
        assert_eq!(conflict(e).0, field);
    }
}

#[test]
fn same_key_twice_in_one_adjustment_conflicts_with_itself() {
    let mut r = result();
    let e = apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_mount(mount("/m", "/1")).add_mount(mount("/m", "/2"));
        }),
    )
    .unwrap_err();
    let (_, _, _, first, second) = conflict(e);
    assert_eq!((first.as_str(), second.as_str()), ("10-a", "10-a"));
}

#[test]
fn failed_apply_leaves_collector_unchanged() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_linux_cpu_shares(1);
        }),
    )
    .unwrap();
    let before_adj = r.adjustment().clone();
    let before_ctr = r.container().clone();
    let before_owners = r.owners().clone();
    // Annotations are applied before resources: the annotation must not stick.
    let mut u = ContainerUpdate::new("other");
    u.set_linux_cpu_shares(3);
    let e = r.apply(
        &pid("20-b"),
        Some(adj(|a| {
            a.add_annotation("new", "v").set_linux_cpu_shares(2);
        })),
        vec![u],
        vec![nri_api::api::ContainerEviction::new("x", "y")],
    );
    assert!(matches!(e, Err(Error::Conflict { .. })));
    assert_eq!(r.adjustment(), &before_adj);
    assert_eq!(r.container(), &before_ctr);
    assert_eq!(r.owners(), &before_owners);
    assert!(r.updates().is_empty() && r.evictions().is_empty());
    assert_eq!(r.plugins(), [pid("10-a")]);
}

#[test]
fn setting_after_another_plugins_removal_conflicts_with_the_remover() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_env("OLD");
        }),
    )
    .unwrap();
    let e = apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.add_env("OLD", "2");
        }),
    )
    .unwrap_err();
    assert_eq!(
        conflict(e),
        (
            Field::Env,
            Some("OLD".into()),
            CTR.into(),
            "10-a".into(),
            "20-b".into()
        )
    );
}

#[test]
fn removing_another_plugins_namespace_conflicts() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_or_replace_namespace(ns("pid", "/p"));
        }),
    )
    .unwrap();
    let e = apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_namespace("pid");
        }),
    )
    .unwrap_err();
    assert_eq!(conflict(e).0, Field::Namespace);
}

#[test]
fn update_conflicts_between_plugins() {
    let mut r = result();
    let mut u = ContainerUpdate::new("other");
    u.set_linux_memory_limit(1);
    r.apply(&pid("10-a"), None, vec![u.clone()], vec![])
        .unwrap();
    let e = r.apply(&pid("20-b"), None, vec![u], vec![]).unwrap_err();
    assert_eq!(
        conflict(e),
        (
            Field::MemLimit,
            None,
            "other".into(),
            "10-a".into(),
            "20-b".into()
        )
    );
}

#[test]
fn failed_apply_after_updates_and_evictions_keeps_the_earlier_ones() {
    let mut r = result();
    let mut u = ContainerUpdate::new("other");
    u.set_linux_cpu_shares(3);
    r.apply(
        &pid("10-a"),
        Some(adj(|a| {
            a.add_env("A", "1").set_linux_cpu_shares(1);
        })),
        vec![u],
        vec![nri_api::api::ContainerEviction::new("victim", "too big")],
    )
    .unwrap();
    apply(
        &mut r,
        "15-c",
        adj(|a| {
            a.add_annotation("c", "1");
        }),
    )
    .unwrap();
    let before_adj = r.adjustment().clone();
    let before_ctr = r.container().clone();
    let before_owners = r.owners().clone();
    let before_updates = r.updates().to_vec();
    let before_evictions = r.evictions().to_vec();
    assert_eq!(before_updates.len(), 1);
    assert_eq!(before_evictions.len(), 1);

    // Env and an annotation merge first, then the CPU shares conflict.
    let e = r.apply(
        &pid("20-b"),
        Some(adj(|a| {
            a.add_env("B", "2")
                .add_annotation("b", "2")
                .set_linux_cpu_shares(2);
        })),
        vec![],
        vec![],
    );
    assert!(matches!(e, Err(Error::Conflict { .. })));
    // Responses whose adjustment merged before their update, or their
    // eviction, failed.
    let mut conflicting = ContainerUpdate::new("other");
    conflicting.set_linux_cpu_shares(4);
    let e = r.apply(
        &pid("21-e"),
        Some(adj(|a| {
            a.add_env("E", "5").add_annotation("e", "5");
        })),
        vec![conflicting],
        vec![],
    );
    assert!(matches!(e, Err(Error::Conflict { .. })), "{e:?}");
    let own = nri_api::api::ContainerEviction::new(r.pristine().id.clone(), "no");
    let e = r.apply(
        &pid("22-f"),
        Some(adj(|a| {
            a.add_env("F", "6");
        })),
        vec![],
        vec![own],
    );
    assert!(matches!(e, Err(Error::InvalidUpdate { .. })), "{e:?}");
    assert_eq!(r.adjustment(), &before_adj);
    assert_eq!(r.container(), &before_ctr);
    assert_eq!(r.owners(), &before_owners);
    assert_eq!(r.updates(), &before_updates[..]);
    assert_eq!(r.evictions(), &before_evictions[..]);
    assert_eq!(r.plugins(), [pid("10-a"), pid("15-c")]);

    // And the collector goes on from there.
    apply(
        &mut r,
        "30-d",
        adj(|a| {
            a.add_env("D", "4");
        }),
    )
    .unwrap();
    assert_eq!(r.plugins(), [pid("10-a"), pid("15-c"), pid("30-d")]);
}
