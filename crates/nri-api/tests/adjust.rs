//! Adjustment, update and eviction builders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::api::{
    ContainerAdjustment, ContainerEviction, ContainerUpdate, Hook, Hooks, IoPrioClass, LinuxDevice,
    LinuxIoPriority, LinuxNamespace, LinuxNetDevice, LinuxScheduler, LinuxSeccomp, Mount, MpolFlag,
    MpolMode, OptionalInt, OptionalInt64, OptionalString,
};
use nri_api::{clear_removal_marker, is_marked_for_removal, mark_for_removal};

#[test]
fn removal_markers() {
    assert_eq!(mark_for_removal("FOO"), "-FOO");
    assert_eq!(is_marked_for_removal("-FOO"), Some("FOO"));
    assert_eq!(is_marked_for_removal("FOO"), None);
    assert_eq!(is_marked_for_removal(""), None);
    assert_eq!(clear_removal_marker("-FOO"), "FOO");
    assert_eq!(clear_removal_marker("FOO"), "FOO");
}

#[test]
fn keyed_additions_and_removals() {
    let mut a = ContainerAdjustment::default();
    a.add_annotation("a", "1")
        .remove_annotation("b")
        .add_env("X", "y")
        .remove_env("Z")
        .add_mount(Mount {
            destination: "/data".into(),
            source: "/host".into(),
            r#type: "bind".into(),
            options: vec!["rbind".into()],
        })
        .remove_mount("/tmp")
        .add_device(LinuxDevice {
            path: "/dev/foo".into(),
            r#type: "c".into(),
            major: 1,
            minor: 2,
            ..Default::default()
        })
        .remove_device("/dev/bar")
        .add_cdi_device("vendor.com/gpu=0")
        .add_or_replace_namespace(LinuxNamespace {
            r#type: "network".into(),
            path: "/proc/1/ns/net".into(),
        })
        .remove_namespace("ipc")
        .set_linux_sysctl("net.ipv4.ip_forward", "1")
        .remove_linux_sysctl("kernel.msgmax")
        .add_linux_net_device(
            "eth1",
            LinuxNetDevice {
                name: "net1".into(),
            },
        )
        .remove_linux_net_device("eth2");

    assert_eq!(a.annotations.get("a").unwrap(), "1");
    assert_eq!(a.annotations.get("-b").unwrap(), "");
    assert_eq!(
        a.env.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(),
        ["X", "-Z"]
    );
    assert_eq!(a.mounts[1].destination, "-/tmp");
    let linux = a.linux.as_ref().unwrap();
    assert_eq!(linux.devices[1].path, "-/dev/bar");
    assert_eq!(a.cdi_devices[0].name, "vendor.com/gpu=0");
    assert_eq!(linux.namespaces[1].r#type, "-ipc");
    assert_eq!(linux.sysctl.get("net.ipv4.ip_forward").unwrap(), "1");
    assert!(linux.sysctl.contains_key("-kernel.msgmax"));
    assert_eq!(linux.net_devices.get("eth1").unwrap().name, "net1");
    assert!(linux.net_devices.contains_key("-eth2"));
}

#[test]
fn args_hooks_rlimits() {
    let mut a = ContainerAdjustment::default();
    a.set_args(["/bin/sh", "-c", "true"]);
    assert_eq!(a.args, ["/bin/sh", "-c", "true"]);
    a.update_args(vec!["/bin/app".to_string()]);
    assert_eq!(a.args, ["", "/bin/app"]);

    let hook = Hook {
        path: "/bin/hook".into(),
        timeout: Some(OptionalInt::from(5)),
        ..Default::default()
    };
    a.add_hooks(Hooks {
        prestart: vec![hook.clone()],
        poststop: vec![hook.clone()],
        ..Default::default()
    });
    a.add_hooks(Hooks {
        poststop: vec![hook.clone()],
        ..Default::default()
    });
    let hooks = a.hooks.as_ref().unwrap();
    assert_eq!(hooks.prestart.len(), 1);
    assert_eq!(hooks.poststop.len(), 2);

    a.add_rlimit("RLIMIT_NOFILE", 1024, 512);
    assert_eq!(a.rlimits[0].r#type, "RLIMIT_NOFILE");
    assert_eq!((a.rlimits[0].hard, a.rlimits[0].soft), (1024, 512));
}

#[test]
fn resources() {
    let mut a = ContainerAdjustment::default();
    a.set_linux_memory_limit(1 << 30)
        .set_linux_memory_reservation(1 << 29)
        .set_linux_memory_swap(2 << 30)
        .set_linux_memory_kernel(1)
        .set_linux_memory_kernel_tcp(2)
        .set_linux_memory_swappiness(10)
        .set_linux_memory_disable_oom_killer()
        .set_linux_memory_use_hierarchy()
        .set_linux_cpu_shares(1024)
        .set_linux_cpu_quota(50_000)
        .set_linux_cpu_period(100_000)
        .set_linux_cpu_realtime_runtime(950)
        .set_linux_cpu_realtime_period(1000)
        .set_linux_cpu_set_cpus("0-3")
        .set_linux_cpu_set_mems("0")
        .set_linux_pid_limits(100)
        .add_linux_hugepage_limit("2MB", 4 << 20)
        .set_linux_blockio_class("slow")
        .set_linux_rdt_class("gold")
        .add_linux_unified("memory.high", "max");
    let r = a.linux.as_ref().unwrap().resources.as_ref().unwrap();
    let m = r.memory.as_ref().unwrap();
    assert_eq!(m.limit, Some(OptionalInt64::from(1 << 30)));
    assert_eq!(m.reservation.as_ref().unwrap().value, 1 << 29);
    assert_eq!(m.swap.as_ref().unwrap().value, 2 << 30);
    assert_eq!(m.kernel.as_ref().unwrap().value, 1);
    assert_eq!(m.kernel_tcp.as_ref().unwrap().value, 2);
    assert_eq!(m.swappiness.as_ref().unwrap().value, 10);
    assert!(m.disable_oom_killer.as_ref().unwrap().value);
    assert!(m.use_hierarchy.as_ref().unwrap().value);
    let c = r.cpu.as_ref().unwrap();
    assert_eq!(c.shares.as_ref().unwrap().value, 1024);
    assert_eq!(c.quota.as_ref().unwrap().value, 50_000);
    assert_eq!(c.period.as_ref().unwrap().value, 100_000);
    assert_eq!(c.realtime_runtime.as_ref().unwrap().value, 950);
    assert_eq!(c.realtime_period.as_ref().unwrap().value, 1000);
    assert_eq!((c.cpus.as_str(), c.mems.as_str()), ("0-3", "0"));
    assert_eq!(r.pids.as_ref().unwrap().limit, 100);
    assert_eq!(r.hugepage_limits[0].page_size, "2MB");
    assert_eq!(r.blockio_class, Some(OptionalString::from("slow")));
    assert_eq!(r.rdt_class.as_ref().unwrap().value, "gold");
    assert_eq!(r.unified.get("memory.high").unwrap(), "max");
}

#[test]
fn linux_settings() {
    let mut a = ContainerAdjustment::default();
    a.set_linux_cgroups_path("/kubepods/x")
        .set_linux_oom_score_adj(Some(-500))
        .set_linux_io_priority(LinuxIoPriority {
            class: IoPrioClass::IoprioClassBe as i32,
            priority: 4,
        })
        .set_linux_seccomp_policy(LinuxSeccomp {
            default_action: "SCMP_ACT_ALLOW".into(),
            ..Default::default()
        })
        .set_linux_scheduler(LinuxScheduler {
            nice: 5,
            ..Default::default()
        })
        .set_linux_memory_policy(MpolMode::MpolBind, "0-1", &[MpolFlag::MpolFStaticNodes])
        .set_linux_rdt_clos_id("c1")
        .set_linux_rdt_schemata(["L3:0=f"])
        .set_linux_rdt_enable_monitoring(true)
        .remove_linux_rdt();
    let l = a.linux.as_ref().unwrap();
    assert_eq!(l.cgroups_path, "/kubepods/x");
    assert_eq!(l.oom_score_adj, Some(OptionalInt::from(-500)));
    assert_eq!(l.io_priority.as_ref().unwrap().priority, 4);
    assert_eq!(
        l.seccomp_policy.as_ref().unwrap().default_action,
        "SCMP_ACT_ALLOW"
    );
    assert_eq!(l.scheduler.as_ref().unwrap().nice, 5);
    let mp = l.memory_policy.as_ref().unwrap();
    assert_eq!(
        (mp.mode, mp.nodes.as_str(), mp.flags.as_slice()),
        (2, "0-1", &[0][..])
    );
    let rdt = l.rdt.as_ref().unwrap();
    assert_eq!(rdt.clos_id.as_ref().unwrap().value, "c1");
    assert_eq!(rdt.schemata.as_ref().unwrap().value, ["L3:0=f"]);
    assert!(rdt.enable_monitoring.as_ref().unwrap().value);
    assert!(rdt.remove);

    a.set_linux_oom_score_adj(None);
    assert_eq!(a.linux.as_ref().unwrap().oom_score_adj, None);
}

#[test]
fn update_and_eviction() {
    let mut u = ContainerUpdate::new("c1");
    u.set_linux_memory_limit(100)
        .set_linux_pid_limits(7)
        .add_linux_unified("cpu.weight", "50")
        .set_ignore_failure();
    assert_eq!(u.container_id, "c1");
    assert!(u.ignore_failure);
    let r = u.linux.as_ref().unwrap().resources.as_ref().unwrap();
    assert_eq!(
        r.memory.as_ref().unwrap().limit.as_ref().unwrap().value,
        100
    );
    assert_eq!(r.pids.as_ref().unwrap().limit, 7);
    u.set_container_id("c2");
    assert_eq!(u.container_id, "c2");

    let e = ContainerEviction::new("c3", "out of memory");
    assert_eq!(
        (e.container_id.as_str(), e.reason.as_str()),
        ("c3", "out of memory")
    );
}
