//! Inference of a runtime's capabilities from its name, version and NRI
//! version, for the runtimes whose sources were read: containerd and CRI-O.
//!
//! Both build their NRI support on containerd/nri's Go module: its
//! adaptation merges the plugins' answers (`pkg/adaptation/result.go`,
//! `result.adjust`: a field it does not merge is dropped) and its spec
//! generator writes the merged adjustment into the container's OCI spec
//! (`pkg/runtime-tools/generate/generate.go`, `Generator.Adjust`, called by
//! containerd's `internal/cri/nri/nri_api_linux.go`
//! `API.WithContainerAdjustment` and by CRI-O's `server/nri-api.go`). So
//! what a runtime applies follows the NRI version it vendors
//! ([`NRI_ADJUSTMENTS`]), except where the runtime itself decides
//! ([`CONTAINERD`], [`CRIO`]). What a runtime fills in for plugins comes
//! from its own conversion of containers and pods (containerd's
//! `internal/nri/container.go`, `container_linux.go`, `sandbox.go`;
//! CRI-O's `internal/nri/` files of the same names).

use super::{Capability, CapabilitySet, RuntimeCapabilities};
use crate::{EventMask, NriVersion, infer_nri_version};

use Capability as C;

/// A version as (major, minor, patch).
type V = (u32, u32, u32);

const fn nri(minor: u32) -> NriVersion {
    NriVersion::new(0, minor, 0)
}

/// First NRI version whose adaptation merges the field and whose
/// generator applies it, read in containerd/nri at v0.2.0, v0.3.0, v0.4.0,
/// v0.6.1, v0.7.0, v0.8.0, v0.10.0, v0.11.0, v0.12.0 and v0.12.3
/// (`result.adjust` and `Generator.Adjust`):
///
/// - v0.2.0: annotations, mounts, env, hooks, devices, cgroups path, and
///   the resources CPU (every field), memory limit (`AdjustResources`
///   writes only the limit, and swap = limit), hugepage limits, unified,
///   block I/O class and RDT class; container updates
///   (`result.update`, `updateResources`).
/// - v0.4.0: rlimits (`adjustRlimits`, `AdjustRlimits`).
/// - v0.7.0: OOM score (`adjustOomScoreAdj`, `AdjustOomScoreAdj`), pids
///   limit (`adjustResources` and `AdjustResources` on `Pids`), CDI
///   devices (`adjustCDIDevices`, `InjectCDIDevices`; the runtime must
///   give an injector, see the runtimes' tables).
/// - v0.10.0: args, I/O priority, seccomp policy, namespaces
///   (`adjustArgs`, `adjustIOPriority`, `adjustSeccompPolicy`,
///   `adjustNamespaces` and their `Adjust*`), device cgroup rules
///   (`adjustResources` on `Devices`, merged from v0.10.0 only).
/// - v0.11.0: scheduler, net devices, RDT (`adjustLinuxScheduler`,
///   `adjustLinuxNetDevices`, `adjustRdt`).
/// - v0.12.0: sysctl (`adjustSysctl`: v0.11.0 has it too, but neither the
///   request's `Linux.Sysctl` nor the reply's map is made in
///   `collectCreateContainerResult`, so the first sysctl a plugin sets
///   writes into a nil map; v0.12.0 makes both), memory policy
///   (`adjustMemoryPolicy`, `AdjustMemoryPolicy`).
///
/// Never, through v0.12.3: the memory fields but the limit (merged by
/// `adjustMemoryResource`, not written by `AdjustResources`), evictions
/// (neither `result` nor `plugin.UpdateContainers` reads a plugin's
/// `evict` list).
const NRI_ADJUSTMENTS: &[(Capability, NriVersion)] = &[
    (C::AdjustAnnotations, nri(2)),
    (C::AdjustMounts, nri(2)),
    (C::AdjustEnv, nri(2)),
    (C::AdjustOciHooks, nri(2)),
    (C::AdjustLinuxDevices, nri(2)),
    (C::AdjustLinuxCgroupsPath, nri(2)),
    (C::AdjustLinuxCpu, nri(2)),
    (C::AdjustLinuxMemoryLimit, nri(2)),
    (C::AdjustLinuxHugepageLimits, nri(2)),
    (C::AdjustLinuxCgroupsUnified, nri(2)),
    (C::AdjustLinuxBlockioClass, nri(2)),
    (C::AdjustLinuxRdtClass, nri(2)),
    (C::UpdateContainers, nri(2)),
    (C::AdjustPosixRlimits, nri(4)),
    (C::AdjustLinuxOomScore, nri(7)),
    (C::AdjustLinuxPidLimit, nri(7)),
    (C::AdjustCdiDevices, nri(7)),
    (C::AdjustLinuxContainerArgs, nri(10)),
    (C::AdjustLinuxIoPriority, nri(10)),
    (C::AdjustLinuxSeccompPolicy, nri(10)),
    (C::AdjustLinuxNamespaces, nri(10)),
    (C::AdjustLinuxDeviceRules, nri(10)),
    (C::AdjustLinuxSchedulingPolicy, nri(11)),
    (C::AdjustLinuxNetworkDevices, nri(11)),
    (C::AdjustLinuxRdtClos, nri(11)),
    (C::AdjustLinuxSysctl, nri(12)),
    (C::AdjustLinuxMemoryPolicy, nri(12)),
];

/// What a runtime decides itself: a capability it has in these version
/// ranges (`[from, until)`; `until` `None`: open), in addition to the NRI
/// version's condition for adjustments.
type Ranges = &'static [(V, Option<V>)];

/// From a version on.
macro_rules! since {
    ($major:literal, $minor:literal, $patch:literal) => {
        &[(($major, $minor, $patch), None)]
    };
}

/// A runtime whose sources were read.
struct Runtime {
    /// The newest release line read: for a later version, what the table
    /// does not grant is unknown rather than missing.
    checked: (u32, u32),
    /// Capabilities that need the runtime's part (below) besides the NRI
    /// version's; absent from this list: the NRI version decides alone.
    rules: &'static [(Capability, Ranges)],
}

/// containerd, read at v1.7.0-v1.7.34, v2.0.0-v2.0.11, v2.1.0, v2.1.9,
/// v2.2.0, v2.2.1, v2.3.0, v2.3.4, v2.3.7, v2.4.0 and v2.4.2:
///
/// - CDI devices: `internal/cri/nri/nri_api_linux.go`
///   `API.WithContainerAdjustment` gives the generator
///   `WithCDIDeviceInjector` from v2.1.0 (and in 1.7 from v1.7.30,
///   `pkg/cri/nri/nri_api_linux.go`); 2.0.x and 1.7 before v1.7.30 give
///   none, and the generator then skips CDI devices in silence.
/// - Inputs (`internal/nri` `commonContainerToNRI`, `containerToNRI`,
///   `podSandboxToNRI`): OOM score always; pod IPs (`GetIPs`) from
///   v2.1.0; I/O priority, scheduler, net devices, RDT and seccomp
///   profile from v2.2.1; rlimits, user, sysctl, CDI devices, seccomp
///   policy and the status times from v2.3.0; memory policy never
///   (through v2.4.2).
const CONTAINERD: Runtime = Runtime {
    checked: (2, 4),
    rules: &[
        (
            C::AdjustCdiDevices,
            &[((1, 7, 30), Some((2, 0, 0))), ((2, 1, 0), None)],
        ),
        (C::InputLinuxOomScore, since!(1, 7, 0)),
        (C::InputIpAddresses, since!(2, 1, 0)),
        (C::InputLinuxIoPriority, since!(2, 2, 1)),
        (C::InputLinuxSchedulingPolicy, since!(2, 2, 1)),
        (C::InputLinuxNetworkDevices, since!(2, 2, 1)),
        (C::InputLinuxRdtClos, since!(2, 2, 1)),
        (C::InputLinuxSecurityProfile, since!(2, 2, 1)),
        (C::InputPosixRlimits, since!(2, 3, 0)),
        (C::InputUidAndGids, since!(2, 3, 0)),
        (C::InputLinuxSysctl, since!(2, 3, 0)),
        (C::InputCdiDevices, since!(2, 3, 0)),
        (C::InputLinuxSeccompPolicy, since!(2, 3, 0)),
        (C::ExtraContainerStatus, since!(2, 3, 0)),
        (C::InputLinuxMemoryPolicy, &[]),
    ],
};

/// CRI-O, read at v1.26.0, v1.28.0, v1.29.0, v1.30.0-v1.36.0:
///
/// - CDI devices: `server/nri-api.go` gives the generator
///   `WithCDIDeviceInjector` from v1.34.0.
/// - Inputs (`internal/nri` `containerToNRI`, `podSandboxToNRI`): OOM
///   score always; pod IPs from v1.32.0; I/O priority, scheduler, net
///   devices and RDT from v1.35.0; rlimits and user from v1.36.0; seccomp
///   profile, sysctl, CDI devices, seccomp policy, status times and memory
///   policy never (through v1.36.0).
const CRIO: Runtime = Runtime {
    checked: (1, 36),
    rules: &[
        (C::AdjustCdiDevices, since!(1, 34, 0)),
        (C::InputLinuxOomScore, since!(1, 26, 0)),
        (C::InputIpAddresses, since!(1, 32, 0)),
        (C::InputLinuxIoPriority, since!(1, 35, 0)),
        (C::InputLinuxSchedulingPolicy, since!(1, 35, 0)),
        (C::InputLinuxNetworkDevices, since!(1, 35, 0)),
        (C::InputLinuxRdtClos, since!(1, 35, 0)),
        (C::InputPosixRlimits, since!(1, 36, 0)),
        (C::InputUidAndGids, since!(1, 36, 0)),
        (C::InputLinuxSecurityProfile, &[]),
        (C::InputLinuxSysctl, &[]),
        (C::InputCdiDevices, &[]),
        (C::InputLinuxSeccompPolicy, &[]),
        (C::ExtraContainerStatus, &[]),
        (C::InputLinuxMemoryPolicy, &[]),
    ],
};

fn in_ranges(v: V, ranges: Ranges) -> bool {
    ranges
        .iter()
        .any(|(from, until)| *from <= v && until.is_none_or(|u| v < u))
}

/// Infers what a runtime can do from its name (`containerd`, `cri-o` or
/// `crio`, any case), its version and, if known, its NRI version (the
/// `NRI_version` it reported; else inferred from its version with
/// [`infer_nri_version`]).
///
/// Returns `None` for another runtime, an unparsable version or one older
/// than the runtime's first NRI release (containerd 1.7.0, CRI-O 1.26.0):
/// nothing is inferred for them. For a version after the newest release
/// line whose sources were read (containerd 2.4, CRI-O 1.36), what the
/// facts grant is kept and the rest is unknown
/// ([`RuntimeCapabilities::known`]), not missing.
///
/// The facts and where they were read are on the private tables of this
/// module (`capability/table.rs`); `docs/plugin-sdk.md` has them as one
/// table.
///
/// ```
/// use nri_api::{Capability, infer_capabilities};
///
/// let c21 = infer_capabilities("containerd", "v2.1.9", None).unwrap();
/// assert!(c21.supported.contains(Capability::AdjustCdiDevices));
/// assert!(!c21.supported.contains(Capability::AdjustLinuxSysctl));
/// let c24 = infer_capabilities("containerd", "v2.4.2", None).unwrap();
/// assert!(c24.supported.contains(Capability::AdjustLinuxSysctl));
/// assert!(!c24.supported.contains(Capability::AdjustLinuxMemoryTuning));
/// assert!(infer_capabilities("my-runtime", "v1.0.0", None).is_none());
/// ```
pub fn infer_capabilities(
    runtime_name: &str,
    runtime_version: &str,
    nri_version: Option<NriVersion>,
) -> Option<RuntimeCapabilities> {
    let runtime = match runtime_name.trim().to_ascii_lowercase().as_str() {
        "containerd" => &CONTAINERD,
        "cri-o" | "crio" => &CRIO,
        _ => return None,
    };
    let v = NriVersion::parse(runtime_version).ok()?;
    // None before the runtime's first release with NRI.
    let shipped = infer_nri_version(runtime_name, runtime_version)?;
    let nri = nri_version.unwrap_or(shipped);
    let v = (v.major, v.minor, v.patch);
    let mut supported = CapabilitySet::EMPTY;
    for c in Capability::ALL.iter().copied() {
        let by_nri = match NRI_ADJUSTMENTS.iter().find(|(a, _)| *a == c) {
            Some((_, since)) => nri >= *since,
            // Not an adjustment: the runtime decides alone.
            None => c.is_input(),
        };
        let by_runtime = match runtime.rules.iter().find(|(a, _)| *a == c) {
            Some((_, ranges)) => in_ranges(v, ranges),
            None => true,
        };
        if by_nri && by_runtime {
            supported.insert(c);
        }
    }
    let known = if (v.0, v.1) > runtime.checked {
        supported
    } else {
        CapabilitySet::all()
    };
    Some(RuntimeCapabilities {
        basis: super::CapabilityBasis::Inferred,
        supported,
        known,
        events: nri.valid_events(),
        events_known: EventMask::ALL,
    })
}
