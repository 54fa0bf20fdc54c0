//! The adjustment kinds a grant names: nri-api's `ADJUST_*` capabilities,
//! also by a short name (`annotations`, `rlimits`, `sysctl`, ...), and
//! the groups `resources` and `all`.

use nri_api::{Capability, CapabilitySet};

use Capability as C;

/// Each adjustment kind: its capability, its short name in the
/// configuration, and the field of `ContainerAdjustment` it is.
const KINDS: &[(Capability, &str, &str)] = &[
    (C::AdjustAnnotations, "annotations", "annotations"),
    (C::AdjustMounts, "mounts", "mounts"),
    (C::AdjustEnv, "env", "env"),
    (C::AdjustOciHooks, "hooks", "hooks"),
    (C::AdjustPosixRlimits, "rlimits", "rlimits"),
    (C::AdjustCdiDevices, "cdi-devices", "CDI_devices"),
    (C::AdjustLinuxContainerArgs, "args", "args"),
    (C::AdjustLinuxDevices, "devices", "linux.devices"),
    (
        C::AdjustLinuxCgroupsPath,
        "cgroups-path",
        "linux.cgroups_path",
    ),
    (C::AdjustLinuxOomScore, "oom-score", "linux.oom_score_adj"),
    (C::AdjustLinuxIoPriority, "io-priority", "linux.io_priority"),
    (
        C::AdjustLinuxSeccompPolicy,
        "seccomp",
        "linux.seccomp_policy",
    ),
    (C::AdjustLinuxNamespaces, "namespaces", "linux.namespaces"),
    (C::AdjustLinuxSysctl, "sysctl", "linux.sysctl"),
    (
        C::AdjustLinuxNetworkDevices,
        "net-devices",
        "linux.net_devices",
    ),
    (
        C::AdjustLinuxSchedulingPolicy,
        "scheduler",
        "linux.scheduler",
    ),
    (C::AdjustLinuxRdtClos, "rdt", "linux.rdt"),
    (
        C::AdjustLinuxMemoryPolicy,
        "memory-policy",
        "linux.memory_policy",
    ),
    (C::AdjustLinuxCpu, "cpu", "linux.resources.cpu"),
    (
        C::AdjustLinuxMemoryLimit,
        "memory-limit",
        "linux.resources.memory.limit",
    ),
    (
        C::AdjustLinuxMemoryTuning,
        "memory-tuning",
        "linux.resources.memory",
    ),
    (
        C::AdjustLinuxHugepageLimits,
        "hugepage-limits",
        "linux.resources.hugepage_limits",
    ),
    (
        C::AdjustLinuxBlockioClass,
        "blockio-class",
        "linux.resources.blockio_class",
    ),
    (
        C::AdjustLinuxRdtClass,
        "rdt-class",
        "linux.resources.rdt_class",
    ),
    (
        C::AdjustLinuxCgroupsUnified,
        "unified",
        "linux.resources.unified",
    ),
    (
        C::AdjustLinuxDeviceRules,
        "device-rules",
        "linux.resources.devices",
    ),
    (C::AdjustLinuxPidLimit, "pids", "linux.resources.pids"),
];

/// The kinds of `linux.resources` (the group `resources`).
const RESOURCES: &[Capability] = &[
    C::AdjustLinuxCpu,
    C::AdjustLinuxMemoryLimit,
    C::AdjustLinuxMemoryTuning,
    C::AdjustLinuxHugepageLimits,
    C::AdjustLinuxBlockioClass,
    C::AdjustLinuxRdtClass,
    C::AdjustLinuxCgroupsUnified,
    C::AdjustLinuxDeviceRules,
    C::AdjustLinuxPidLimit,
];

/// Every adjustment kind (`ADJUST_*`).
pub(crate) fn all_kinds() -> CapabilitySet {
    Capability::ALL
        .iter()
        .copied()
        .filter(|c| c.name().starts_with("ADJUST_"))
        .collect()
}

/// The short name of an adjustment kind (`sysctl` for
/// `ADJUST_LINUX_SYSCTL`), or the capability's name for a capability
/// without one.
pub fn adjustment_kind_name(c: Capability) -> &'static str {
    KINDS
        .iter()
        .find(|(k, _, _)| *k == c)
        .map_or_else(|| c.name(), |(_, short, _)| short)
}

/// The field a capability is about, for errors (`linux.sysctl`).
pub(crate) fn field_of(c: Capability) -> &'static str {
    match c {
        C::UpdateContainers => "update",
        C::EvictContainers => "evict",
        _ => KINDS
            .iter()
            .find(|(k, _, _)| *k == c)
            .map_or_else(|| c.name(), |(_, _, field)| field),
    }
}

/// Parses a list of adjustment kinds: short names (`annotations`,
/// `sysctl`, `memory-limit`, ...), capability names (`ADJUST_LINUX_SYSCTL`;
/// case and `-`/`_` do not matter) and the groups `resources` (every kind
/// of `linux.resources`) and `all`. The error names the bad entry and
/// lists the valid ones.
///
/// ```
/// use nri_api::Capability;
/// use nri_runtime::parse_adjustment_kinds;
///
/// let kinds = parse_adjustment_kinds(["annotations", "ADJUST_POSIX_RLIMITS"]).unwrap();
/// assert!(kinds.contains(Capability::AdjustPosixRlimits));
/// assert!(parse_adjustment_kinds(["resources"]).unwrap().contains(Capability::AdjustLinuxCpu));
/// assert!(parse_adjustment_kinds(["INPUT_LINUX_SYSCTL"]).is_err());
/// ```
pub fn parse_adjustment_kinds<S: AsRef<str>>(
    names: impl IntoIterator<Item = S>,
) -> Result<CapabilitySet, String> {
    let mut set = CapabilitySet::EMPTY;
    for name in names {
        set = set.union(parse_kind(name.as_ref())?);
    }
    Ok(set)
}

fn parse_kind(name: &str) -> Result<CapabilitySet, String> {
    let norm = name.trim().to_ascii_lowercase().replace('_', "-");
    match norm.as_str() {
        "all" => return Ok(all_kinds()),
        "resources" => return Ok(CapabilitySet::of(RESOURCES)),
        "update-containers" | "updates" => {
            return Err(format!(
                "{name:?} is not an adjustment kind: container updates are allowed with `updates: true`"
            ));
        }
        "evict-containers" | "evictions" => {
            return Err(format!(
                "{name:?} is not an adjustment kind: evictions are allowed with `evictions: true`"
            ));
        }
        _ => {}
    }
    if let Some((c, _, _)) = KINDS.iter().find(|(_, short, _)| *short == norm) {
        return Ok((*c).into());
    }
    match Capability::from_name(&norm.replace('-', "_")) {
        Some(c) if c.name().starts_with("ADJUST_") => Ok(c.into()),
        _ => {
            let valid: Vec<&str> = KINDS.iter().map(|(_, short, _)| *short).collect();
            Err(format!(
                "unknown adjustment kind {name:?}; the kinds are: {}, resources, all (or their ADJUST_* capability names)",
                valid.join(", ")
            ))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_adjust_capability_has_a_short_name_and_a_field() {
        for c in all_kinds().iter() {
            assert_ne!(adjustment_kind_name(c), c.name(), "{c}");
            assert_ne!(field_of(c), c.name(), "{c}");
            let back = parse_adjustment_kinds([adjustment_kind_name(c)]).unwrap();
            assert_eq!(back, CapabilitySet::from(c));
            let by_name = parse_adjustment_kinds([c.name().to_lowercase()]).unwrap();
            assert_eq!(by_name, CapabilitySet::from(c));
        }
        assert_eq!(KINDS.len(), all_kinds().iter().count());
    }

    #[test]
    fn groups_and_errors() {
        let r = parse_adjustment_kinds(["resources"]).unwrap();
        assert!(r.contains(C::AdjustLinuxPidLimit) && !r.contains(C::AdjustEnv));
        assert_eq!(parse_adjustment_kinds(["all"]).unwrap(), all_kinds());
        let e = parse_adjustment_kinds(["sysctls"]).unwrap_err();
        assert!(
            e.contains("unknown adjustment kind \"sysctls\"") && e.contains("sysctl,"),
            "{e}"
        );
        let e = parse_adjustment_kinds(["UPDATE_CONTAINERS"]).unwrap_err();
        assert!(e.contains("updates: true"), "{e}");
        assert!(parse_adjustment_kinds(["INPUT_POSIX_RLIMITS"]).is_err());
        assert_eq!(
            parse_adjustment_kinds(["Memory_Limit", "oom-score"]).unwrap(),
            CapabilitySet::of(&[C::AdjustLinuxMemoryLimit, C::AdjustLinuxOomScore])
        );
    }
}
