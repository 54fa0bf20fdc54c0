//! Which capabilities an adjustment needs: [`adjustment_capabilities`].

use super::{Capability, CapabilitySet};
use crate::api::{ContainerAdjustment, LinuxMemory, LinuxResources};

use Capability as C;

/// The capabilities a runtime needs to apply all of `adjust`: one per
/// field that is set (a removal marker counts as a use of its field).
///
/// ```
/// use nri_api::api::ContainerAdjustment;
/// use nri_api::{Capability, adjustment_capabilities};
///
/// let mut adjust = ContainerAdjustment::default();
/// adjust.add_env("A", "1").set_linux_memory_limit(1 << 30);
/// adjust.linux_mut().sysctl.insert("net.core.somaxconn".into(), "1024".into());
/// assert_eq!(
///     adjustment_capabilities(&adjust).to_string(),
///     "ADJUST_LINUX_SYSCTL,ADJUST_ENV,ADJUST_LINUX_MEMORY_LIMIT"
/// );
/// ```
pub fn adjustment_capabilities(adjust: &ContainerAdjustment) -> CapabilitySet {
    let mut set = CapabilitySet::EMPTY;
    let mut mark = |used: bool, c: Capability| {
        if used {
            set.insert(c);
        }
    };
    mark(!adjust.annotations.is_empty(), C::AdjustAnnotations);
    mark(!adjust.mounts.is_empty(), C::AdjustMounts);
    mark(!adjust.env.is_empty(), C::AdjustEnv);
    mark(
        adjust.hooks.as_ref().is_some_and(|h| {
            !(h.prestart.is_empty()
                && h.create_runtime.is_empty()
                && h.create_container.is_empty()
                && h.start_container.is_empty()
                && h.poststart.is_empty()
                && h.poststop.is_empty())
        }),
        C::AdjustOciHooks,
    );
    mark(!adjust.rlimits.is_empty(), C::AdjustPosixRlimits);
    mark(!adjust.cdi_devices.is_empty(), C::AdjustCdiDevices);
    mark(!adjust.args.is_empty(), C::AdjustLinuxContainerArgs);
    if let Some(l) = &adjust.linux {
        mark(!l.devices.is_empty(), C::AdjustLinuxDevices);
        mark(!l.cgroups_path.is_empty(), C::AdjustLinuxCgroupsPath);
        mark(l.oom_score_adj.is_some(), C::AdjustLinuxOomScore);
        mark(l.io_priority.is_some(), C::AdjustLinuxIoPriority);
        mark(l.seccomp_policy.is_some(), C::AdjustLinuxSeccompPolicy);
        mark(!l.namespaces.is_empty(), C::AdjustLinuxNamespaces);
        mark(!l.sysctl.is_empty(), C::AdjustLinuxSysctl);
        mark(!l.net_devices.is_empty(), C::AdjustLinuxNetworkDevices);
        mark(l.scheduler.is_some(), C::AdjustLinuxSchedulingPolicy);
        mark(l.rdt.is_some(), C::AdjustLinuxRdtClos);
        mark(l.memory_policy.is_some(), C::AdjustLinuxMemoryPolicy);
        if let Some(r) = &l.resources {
            set = set.union(resource_capabilities(r));
        }
    }
    set
}

/// The resource classes `resources` sets.
fn resource_capabilities(r: &LinuxResources) -> CapabilitySet {
    let mut set = CapabilitySet::EMPTY;
    let mut mark = |used: bool, c: Capability| {
        if used {
            set.insert(c);
        }
    };
    if let Some(cpu) = &r.cpu {
        mark(
            cpu.shares.is_some()
                || cpu.quota.is_some()
                || cpu.period.is_some()
                || cpu.realtime_runtime.is_some()
                || cpu.realtime_period.is_some()
                || !cpu.cpus.is_empty()
                || !cpu.mems.is_empty(),
            C::AdjustLinuxCpu,
        );
    }
    if let Some(m) = &r.memory {
        mark(m.limit.is_some(), C::AdjustLinuxMemoryLimit);
        mark(memory_tuning(m), C::AdjustLinuxMemoryTuning);
    }
    mark(!r.hugepage_limits.is_empty(), C::AdjustLinuxHugepageLimits);
    mark(r.blockio_class.is_some(), C::AdjustLinuxBlockioClass);
    mark(r.rdt_class.is_some(), C::AdjustLinuxRdtClass);
    mark(!r.unified.is_empty(), C::AdjustLinuxCgroupsUnified);
    mark(!r.devices.is_empty(), C::AdjustLinuxDeviceRules);
    mark(r.pids.is_some(), C::AdjustLinuxPidLimit);
    set
}

fn memory_tuning(m: &LinuxMemory) -> bool {
    m.reservation.is_some()
        || m.swap.is_some()
        || m.kernel.is_some()
        || m.kernel_tcp.is_some()
        || m.swappiness.is_some()
        || m.disable_oom_killer.is_some()
        || m.use_hierarchy.is_some()
}
