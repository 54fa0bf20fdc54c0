//! Merging of `LinuxResources` with ownership, shared by adjustments and
//! container updates.

use nri_api::api::{Field, LinuxCpu, LinuxMemory, LinuxPids, LinuxResources};

use crate::error::Error;

/// Where a resource merge writes to: the resources as seen by later plugins
/// and, for adjustments, the merged adjustment as well.
pub(crate) struct Targets<'a> {
    pub(crate) targets: Vec<&'a mut LinuxResources>,
    /// Append cgroup device rules (`resources.devices`; no ownership). Only
    /// adjustments carry them; updates ignore them, like upstream.
    pub(crate) devices: bool,
}

macro_rules! merge_optional {
    ($claim:expr, $src:expr, $targets:expr, $sub:ident, $ty:ty,
     [$(($name:ident, $field:expr)),* $(,)?]) => {
        if let Some(src) = $src.$sub.as_ref() {
            $(
                if let Some(v) = src.$name.as_ref() {
                    $claim($field, None)?;
                    for t in $targets.iter_mut() {
                        t.$sub.get_or_insert_with(<$ty>::default).$name = Some(v.clone());
                    }
                }
            )*
        }
    };
}

/// Claims a field (and key, for compound fields) for the plugin whose
/// resources are being merged.
pub(crate) type Claim<'a> = dyn FnMut(Field, Option<&str>) -> Result<(), Error> + 'a;

/// Claims (through `claim`: field, key of a compound field) every field set
/// in `src` and writes it into every target. Stops at the first failed claim.
pub(crate) fn merge_resources(
    claim: &mut Claim<'_>,
    src: &LinuxResources,
    mut to: Targets<'_>,
) -> Result<(), Error> {
    let targets = &mut to.targets;
    merge_memory_cpu(claim, src, targets)?;
    for l in &src.hugepage_limits {
        claim(Field::HugepageLimits, Some(&l.page_size))?;
        for t in targets.iter_mut() {
            t.hugepage_limits.retain(|x| x.page_size != l.page_size);
            t.hugepage_limits.push(l.clone());
        }
    }
    if to.devices {
        for t in targets.iter_mut() {
            t.devices.extend(src.devices.iter().cloned());
        }
    }
    for (k, v) in &src.unified {
        claim(Field::CgroupsUnified, Some(k))?;
        for t in targets.iter_mut() {
            t.unified.insert(k.clone(), v.clone());
        }
    }
    if let Some(v) = src.blockio_class.as_ref() {
        claim(Field::BlockioClass, None)?;
        for t in targets.iter_mut() {
            t.blockio_class = Some(v.clone());
        }
    }
    if let Some(v) = src.rdt_class.as_ref() {
        claim(Field::RdtClass, None)?;
        for t in targets.iter_mut() {
            t.rdt_class = Some(v.clone());
        }
    }
    // Upstream reads the pids of the base copy here instead of the plugin's
    // update, so pids from plugin updates are lost; we take the plugin's.
    if let Some(p) = src.pids.as_ref() {
        claim(Field::PidsLimit, None)?;
        for t in targets.iter_mut() {
            t.pids = Some(LinuxPids { limit: p.limit });
        }
    }
    Ok(())
}

/// The memory and CPU parts of [`merge_resources`].
fn merge_memory_cpu(
    claim: &mut Claim<'_>,
    src: &LinuxResources,
    targets: &mut [&mut LinuxResources],
) -> Result<(), Error> {
    merge_optional!(
        claim,
        src,
        targets,
        memory,
        LinuxMemory,
        [
            (limit, Field::MemLimit),
            (reservation, Field::MemReservation),
            (swap, Field::MemSwapLimit),
            (kernel, Field::MemKernelLimit),
            (kernel_tcp, Field::MemTcpLimit),
            (swappiness, Field::MemSwappiness),
            (disable_oom_killer, Field::MemDisableOomKiller),
            (use_hierarchy, Field::MemUseHierarchy),
        ]
    );
    merge_optional!(
        claim,
        src,
        targets,
        cpu,
        LinuxCpu,
        [
            (shares, Field::CpuShares),
            (quota, Field::CpuQuota),
            (period, Field::CpuPeriod),
            (realtime_runtime, Field::CpuRealtimeRuntime),
            (realtime_period, Field::CpuRealtimePeriod),
        ]
    );
    if let Some(cpu) = src.cpu.as_ref() {
        if !cpu.cpus.is_empty() {
            claim(Field::CpuSetCpUs, None)?;
            for t in targets.iter_mut() {
                t.cpu.get_or_insert_with(LinuxCpu::default).cpus = cpu.cpus.clone();
            }
        }
        if !cpu.mems.is_empty() {
            claim(Field::CpuSetMems, None)?;
            for t in targets.iter_mut() {
                t.cpu.get_or_insert_with(LinuxCpu::default).mems = cpu.mems.clone();
            }
        }
    }
    Ok(())
}
