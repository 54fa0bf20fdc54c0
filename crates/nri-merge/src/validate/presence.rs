//! Whether a merged adjustment, or a container update, touches a field,
//! independent of owners.

use nri_api::api::{ContainerAdjustment, Field, LinuxCpu, LinuxMemory, LinuxResources};

/// Whether `adjust` changes `field` (sets it, or removes any key of it).
///
/// Validators use this next to the owners, so that a request whose owners are
/// incomplete (for instance built by a runtime that does not record pure
/// removals) cannot slip a change through.
pub fn is_adjusted(adjust: &ContainerAdjustment, field: Field) -> bool {
    let linux = adjust.linux.as_ref();
    let res = linux.and_then(|l| l.resources.as_ref());
    let rdt = linux.and_then(|l| l.rdt.as_ref());
    match field {
        Field::None => false,
        Field::Annotations => !adjust.annotations.is_empty(),
        Field::Mounts => !adjust.mounts.is_empty(),
        Field::OciHooks => adjust.hooks.as_ref().is_some_and(|h| {
            !(h.prestart.is_empty()
                && h.create_runtime.is_empty()
                && h.create_container.is_empty()
                && h.start_container.is_empty()
                && h.poststart.is_empty()
                && h.poststop.is_empty())
        }),
        Field::Devices => linux.is_some_and(|l| !l.devices.is_empty()),
        Field::CdiDevices => !adjust.cdi_devices.is_empty(),
        Field::Env => !adjust.env.is_empty(),
        Field::Args => !adjust.args.is_empty(),
        Field::CgroupsPath => linux.is_some_and(|l| !l.cgroups_path.is_empty()),
        Field::OomScoreAdj => linux.is_some_and(|l| l.oom_score_adj.is_some()),
        Field::Rlimits => !adjust.rlimits.is_empty(),
        Field::IoPriority => linux.is_some_and(|l| l.io_priority.is_some()),
        Field::SeccompPolicy => linux.is_some_and(|l| l.seccomp_policy.is_some()),
        Field::Namespace => linux.is_some_and(|l| !l.namespaces.is_empty()),
        Field::Sysctl => linux.is_some_and(|l| !l.sysctl.is_empty()),
        Field::LinuxNetDevices => linux.is_some_and(|l| !l.net_devices.is_empty()),
        Field::LinuxSched => linux.is_some_and(|l| l.scheduler.is_some()),
        Field::RdtClosId => rdt.is_some_and(|r| r.clos_id.is_some() || r.remove),
        Field::RdtSchemata => rdt.is_some_and(|r| r.schemata.is_some() || r.remove),
        Field::RdtEnableMonitoring => {
            rdt.is_some_and(|r| r.enable_monitoring.is_some() || r.remove)
        }
        Field::MemoryPolicy => linux.is_some_and(|l| l.memory_policy.is_some()),
        Field::MemLimit
        | Field::MemReservation
        | Field::MemSwapLimit
        | Field::MemKernelLimit
        | Field::MemTcpLimit
        | Field::MemSwappiness
        | Field::MemDisableOomKiller
        | Field::MemUseHierarchy
        | Field::CpuShares
        | Field::CpuQuota
        | Field::CpuPeriod
        | Field::CpuRealtimeRuntime
        | Field::CpuRealtimePeriod
        | Field::CpuSetCpUs
        | Field::CpuSetMems
        | Field::PidsLimit
        | Field::HugepageLimits
        | Field::BlockioClass
        | Field::RdtClass
        | Field::CgroupsUnified => resources_touch(res, field).unwrap_or(false),
    }
}

/// Whether the resources `res` of a container update change `field`.
///
/// An update can only change resources: every other field is `false`. Its
/// device cgroup rules (`resources.devices`) count as [`Field::Devices`].
pub fn is_updated(res: &LinuxResources, field: Field) -> bool {
    if field == Field::Devices {
        return !res.devices.is_empty();
    }
    resources_touch(Some(res), field).unwrap_or(false)
}

/// Whether resources change `field`; `None` when `field` is not one of
/// the resource fields. [`Field::Devices`] is answered for the device
/// cgroup rules (`resources.devices`).
fn resources_touch(res: Option<&LinuxResources>, field: Field) -> Option<bool> {
    let mem = |f: fn(&LinuxMemory) -> bool| res.and_then(|r| r.memory.as_ref()).is_some_and(f);
    let cpu = |f: fn(&LinuxCpu) -> bool| res.and_then(|r| r.cpu.as_ref()).is_some_and(f);
    let res_has = |f: fn(&LinuxResources) -> bool| res.is_some_and(f);
    Some(match field {
        Field::MemLimit => mem(|m| m.limit.is_some()),
        Field::MemReservation => mem(|m| m.reservation.is_some()),
        Field::MemSwapLimit => mem(|m| m.swap.is_some()),
        Field::MemKernelLimit => mem(|m| m.kernel.is_some()),
        Field::MemTcpLimit => mem(|m| m.kernel_tcp.is_some()),
        Field::MemSwappiness => mem(|m| m.swappiness.is_some()),
        Field::MemDisableOomKiller => mem(|m| m.disable_oom_killer.is_some()),
        Field::MemUseHierarchy => mem(|m| m.use_hierarchy.is_some()),
        Field::CpuShares => cpu(|c| c.shares.is_some()),
        Field::CpuQuota => cpu(|c| c.quota.is_some()),
        Field::CpuPeriod => cpu(|c| c.period.is_some()),
        Field::CpuRealtimeRuntime => cpu(|c| c.realtime_runtime.is_some()),
        Field::CpuRealtimePeriod => cpu(|c| c.realtime_period.is_some()),
        Field::CpuSetCpUs => cpu(|c| !c.cpus.is_empty()),
        Field::CpuSetMems => cpu(|c| !c.mems.is_empty()),
        Field::PidsLimit => res_has(|r| r.pids.is_some()),
        Field::HugepageLimits => res_has(|r| !r.hugepage_limits.is_empty()),
        Field::BlockioClass => res_has(|r| r.blockio_class.is_some()),
        Field::RdtClass => res_has(|r| r.rdt_class.is_some()),
        Field::CgroupsUnified => res_has(|r| !r.unified.is_empty()),
        Field::Devices => res_has(|r| !r.devices.is_empty()),
        _ => return None,
    })
}
