//! Every adjustable field is merged into the adjustment for the runtime and
//! reflected in the container that later plugins see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{
    Field, Hook, Hooks, LinuxIoPriority, LinuxNetDevice, LinuxScheduler, LinuxSeccomp, MpolMode,
};

#[test]
fn annotations_mounts_env_args_are_merged_and_reflected() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_annotation("a", "1")
                .add_mount(mount("/data", "/host/data"))
                .add_env("FOO", "bar")
                .set_args(["run", "--fast"]);
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(m.annotations.get("a").map(String::as_str), Some("1"));
    assert_eq!(m.mounts, vec![mount("/data", "/host/data")]);
    assert_eq!(m.env.len(), 1);
    assert_eq!(
        (m.env[0].key.as_str(), m.env[0].value.as_str()),
        ("FOO", "bar")
    );
    assert_eq!(m.args, vec!["run", "--fast"]);
    let c = r.container().clone();
    assert_eq!(c.annotations.get("a").map(String::as_str), Some("1"));
    assert!(c.mounts.iter().any(|x| x.destination == "/data"));
    assert!(c.env.contains(&"FOO=bar".to_string()));
    assert_eq!(c.args, vec!["run", "--fast"]);
    // The next plugin's request carries the adjusted container.
    assert_eq!(r.request().container.as_ref(), Some(&c));
}

#[test]
fn hooks_accumulate_across_plugins() {
    let hook = |p: &str| Hooks {
        prestart: vec![Hook {
            path: p.into(),
            ..Default::default()
        }],
        poststop: vec![Hook {
            path: format!("{p}-stop"),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_hooks(hook("/bin/a"));
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.add_hooks(hook("/bin/b"));
        }),
    )
    .unwrap();
    let h = r.adjustment().hooks.as_ref().unwrap();
    let paths: Vec<_> = h.prestart.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(paths, ["/bin/a", "/bin/b"]);
    assert_eq!(h.poststop.len(), 2);
    assert_eq!(r.container().hooks.as_ref().unwrap().prestart.len(), 2);
    assert_eq!(r.owners().container(CTR).unwrap().hooks(), ["10-a", "20-b"]);
}

#[test]
fn devices_cdi_rlimits_are_merged() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_device(device("/dev/new", 7))
                .add_cdi_device("vendor.com/gpu=0")
                .add_rlimit("RLIMIT_NOFILE", 1024, 512);
        }),
    )
    .unwrap();
    let m = r.adjustment();
    assert_eq!(linux(m).devices, vec![device("/dev/new", 7)]);
    assert_eq!(m.cdi_devices[0].name, "vendor.com/gpu=0");
    assert_eq!(m.rlimits[0].r#type, "RLIMIT_NOFILE");
    let c = r.container();
    assert!(clinux(c).devices.iter().any(|d| d.path == "/dev/new"));
    assert_eq!(c.cdi_devices[0].name, "vendor.com/gpu=0");
    assert_eq!(c.rlimits[0].hard, 1024);
}

#[test]
fn every_resource_field_is_merged() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_linux_memory_limit(1 << 30)
                .set_linux_memory_reservation(1 << 29)
                .set_linux_memory_swap(1 << 31)
                .set_linux_memory_kernel(1)
                .set_linux_memory_kernel_tcp(2)
                .set_linux_memory_swappiness(10)
                .set_linux_memory_disable_oom_killer()
                .set_linux_memory_use_hierarchy();
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.set_linux_cpu_shares(512)
                .set_linux_cpu_quota(1000)
                .set_linux_cpu_period(100_000)
                .set_linux_cpu_realtime_runtime(5)
                .set_linux_cpu_realtime_period(6)
                .set_linux_cpu_set_cpus("0-3")
                .set_linux_cpu_set_mems("0")
                .add_linux_hugepage_limit("2MB", 4096)
                .set_linux_blockio_class("gold")
                .set_linux_rdt_class("silver")
                .add_linux_unified("memory.high", "max")
                .set_linux_pid_limits(99);
        }),
    )
    .unwrap();
    let res = linux(r.adjustment()).resources.clone().unwrap();
    let res = &res;
    assert_memory_and_cpu(res);
    assert_eq!(res.hugepage_limits[0].limit, 4096);
    assert_eq!(res.blockio_class.as_ref().unwrap().value, "gold");
    assert_eq!(res.rdt_class.as_ref().unwrap().value, "silver");
    assert_eq!(
        res.unified.get("memory.high").map(String::as_str),
        Some("max")
    );
    assert_eq!(res.pids.as_ref().unwrap().limit, 99);
    // Reflected.
    let cres = clinux(r.container()).resources.as_ref().unwrap();
    assert_eq!(cres, res);
    // Owned field by field.
    let o = r.owners();
    assert_eq!(
        o.owner(CTR, Field::MemLimit, None).unwrap().plugin(),
        "10-a"
    );
    assert_eq!(
        o.owner(CTR, Field::PidsLimit, None).unwrap().plugin(),
        "20-b"
    );
    assert_eq!(
        o.owner(CTR, Field::HugepageLimits, Some("2MB"))
            .unwrap()
            .plugin(),
        "20-b"
    );
    assert_eq!(
        o.owner(CTR, Field::CgroupsUnified, Some("memory.high"))
            .unwrap()
            .plugin(),
        "20-b"
    );
}

#[test]
fn simple_linux_fields_are_merged() {
    let mut r = result();
    let seccomp = LinuxSeccomp {
        default_action: "SCMP_ACT_ERRNO".into(),
        ..Default::default()
    };
    let sched = LinuxScheduler {
        nice: 5,
        ..Default::default()
    };
    let io = LinuxIoPriority {
        class: 2,
        priority: 4,
    };
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_linux_cgroups_path("/kubepods/x")
                .set_linux_oom_score_adj(Some(-500))
                .set_linux_io_priority(io)
                .set_linux_seccomp_policy(seccomp.clone())
                .set_linux_scheduler(sched.clone())
                .set_linux_memory_policy(MpolMode::MpolBind, "0-1", &[]);
        }),
    )
    .unwrap();
    let l = linux(r.adjustment());
    assert_eq!(l.cgroups_path, "/kubepods/x");
    assert_eq!(l.oom_score_adj.unwrap().value, -500);
    assert_eq!(l.io_priority, Some(io));
    assert_eq!(l.seccomp_policy.as_ref(), Some(&seccomp));
    assert_eq!(l.scheduler.as_ref(), Some(&sched));
    assert_eq!(l.memory_policy.as_ref().unwrap().nodes, "0-1");
    let c = clinux(r.container());
    assert_eq!(c.cgroups_path, "/kubepods/x");
    assert_eq!(c.oom_score_adj.unwrap().value, -500);
    assert_eq!(c.io_priority, Some(io));
    assert_eq!(c.seccomp_policy.as_ref(), Some(&seccomp));
    assert_eq!(c.scheduler.as_ref(), Some(&sched));
}

#[test]
fn namespaces_sysctl_net_devices_are_merged() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_or_replace_namespace(ns("network", "/proc/9/ns/net"))
                .set_linux_sysctl("net.core.somaxconn", "1024")
                .add_linux_net_device(
                    "eth1",
                    LinuxNetDevice {
                        name: "net1".into(),
                    },
                );
        }),
    )
    .unwrap();
    let l = linux(r.adjustment());
    assert_eq!(l.namespaces, vec![ns("network", "/proc/9/ns/net")]);
    assert_eq!(
        l.sysctl.get("net.core.somaxconn").map(String::as_str),
        Some("1024")
    );
    assert_eq!(l.net_devices.get("eth1").unwrap().name, "net1");
    let c = clinux(r.container());
    // Replaced, not duplicated.
    let nets: Vec<_> = c
        .namespaces
        .iter()
        .filter(|n| n.r#type == "network")
        .collect();
    assert_eq!(nets, vec![&ns("network", "/proc/9/ns/net")]);
    assert_eq!(
        c.sysctl.get("net.core.somaxconn").map(String::as_str),
        Some("1024")
    );
    assert!(c.net_devices.contains_key("eth1"));
}

#[test]
fn rdt_is_merged_and_removal_wins_only_as_last_word() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_linux_rdt_clos_id("gold")
                .set_linux_rdt_schemata(["L3:0=ff"])
                .set_linux_rdt_enable_monitoring(true);
        }),
    )
    .unwrap();
    let rdt = linux(r.adjustment()).rdt.as_ref().unwrap();
    assert_eq!(rdt.clos_id.as_ref().unwrap().value, "gold");
    assert_eq!(rdt.schemata.as_ref().unwrap().value, vec!["L3:0=ff"]);
    assert!(rdt.enable_monitoring.unwrap().value);
    assert!(!rdt.remove);
    assert_eq!(
        clinux(r.container())
            .rdt
            .as_ref()
            .unwrap()
            .clos_id
            .as_ref()
            .unwrap()
            .value,
        "gold"
    );

    // A later plugin removes RDT: the merged result is a pure removal.
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_linux_rdt();
        }),
    )
    .unwrap();
    let rdt = linux(r.adjustment()).rdt.as_ref().unwrap();
    assert!(rdt.remove);
    assert!(rdt.clos_id.is_none() && rdt.schemata.is_none() && rdt.enable_monitoring.is_none());
    assert!(clinux(r.container()).rdt.is_none());
    assert!(
        r.owners()
            .owner(CTR, Field::RdtClosId, None)
            .unwrap()
            .is_removal()
    );
}

#[test]
fn no_linux_section_unless_touched() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_annotation("x", "y");
        }),
    )
    .unwrap();
    assert!(r.adjustment().linux.is_none());
    assert!(r.adjustment().hooks.is_none());
}

#[test]
fn args_override_form_replaces_earlier_plugin() {
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.set_args(["a"]);
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.update_args(["b", "c"]);
        }),
    )
    .unwrap();
    assert_eq!(r.adjustment().args, vec!["b", "c"]);
    assert_eq!(r.container().args, vec!["b", "c"]);
    assert_eq!(
        r.owners().owner(CTR, Field::Args, None).unwrap().plugin(),
        "20-b"
    );
}

#[test]
fn into_response_carries_everything() {
    let mut r = result();
    let mut u = nri_api::api::ContainerUpdate::new("other");
    u.set_linux_cpu_shares(5);
    r.apply(
        &pid("10-a"),
        Some(adj(|a| {
            a.add_env("A", "1");
        })),
        vec![u],
        vec![nri_api::api::ContainerEviction::new("victim", "too hungry")],
    )
    .unwrap();
    let resp = r.into_response();
    assert_eq!(resp.adjust.unwrap().env[0].key, "A");
    assert_eq!(resp.update[0].container_id, "other");
    assert_eq!(resp.evict[0].container_id, "victim");
}

/// The memory and CPU settings of `every_resource_field_is_merged`.
fn assert_memory_and_cpu(res: &nri_api::api::LinuxResources) {
    let mem = res.memory.as_ref().unwrap();
    assert_eq!(mem.limit.unwrap().value, 1 << 30);
    assert_eq!(mem.reservation.unwrap().value, 1 << 29);
    assert_eq!(mem.swap.unwrap().value, 1 << 31);
    assert_eq!(mem.kernel.unwrap().value, 1);
    assert_eq!(mem.kernel_tcp.unwrap().value, 2);
    assert_eq!(mem.swappiness.unwrap().value, 10);
    assert!(mem.disable_oom_killer.unwrap().value);
    assert!(mem.use_hierarchy.unwrap().value);
    let cpu = res.cpu.as_ref().unwrap();
    assert_eq!(cpu.shares.unwrap().value, 512);
    assert_eq!(cpu.quota.unwrap().value, 1000);
    assert_eq!(cpu.period.unwrap().value, 100_000);
    assert_eq!(cpu.realtime_runtime.unwrap().value, 5);
    assert_eq!(cpu.realtime_period.unwrap().value, 6);
    assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("0-3", "0"));
}
