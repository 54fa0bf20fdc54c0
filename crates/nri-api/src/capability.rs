//! What a runtime does for its plugins: which adjustments it applies,
//! which container and pod fields it fills in, whether it applies updates
//! and evictions ([`Capability`], [`CapabilitySet`]); what a plugin needs
//! ([`Requirement`]: a capability or an event); and what a given runtime
//! can do ([`RuntimeCapabilities`]), declared by the runtime or inferred
//! from its name and version.
//!
//! The protocol has no capability field yet (containerd/nri's proposal adds
//! `ConfigureRequest.capabilities`, a bit set over its `Capability` enum).
//! Until it has one:
//!
//! * a runtime built on `nri-runtime` (and `nri-proxy`) declares its
//!   capabilities and the events it delivers in the build metadata of the
//!   `NRI_version` it sends in `Configure` ([`declared_nri_version`]):
//!   `v0.12.5+nri-rs.caps-43-7ffffffffff.events-3fff`; semantic versioning
//!   ignores build metadata, so every other reader still sees `v0.12.5`;
//! * for containerd and CRI-O, the capabilities are inferred from the
//!   runtime's name and version and its NRI version
//!   ([`infer_capabilities`]), from facts read in their sources (each
//!   cited on the rule in `capability/table.rs`);
//! * any other runtime: nothing is known ([`CapabilityBasis::Unknown`]);
//!   a check says it cannot tell instead of guessing.
//!
//! Names: the capabilities of containerd/nri's proposal keep its names and
//! numbers ([`Capability::upstream_number`]), so a plugin's declaration
//! maps onto the protocol field once it is released; the others (the
//! adjustments every NRI version has had, resource classes, updates,
//! evictions) are named in the same style.

mod runtime;
mod table;
mod usage;

use std::fmt;
use std::str::FromStr;

use crate::Error;
use crate::api::Event;

pub use runtime::{
    CapabilityBasis, CapabilityCheck, RuntimeCapabilities, declared_nri_version, parse_declaration,
};
pub use table::infer_capabilities;
pub use usage::adjustment_capabilities;

macro_rules! capabilities {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $bit:literal, $name:literal, $upstream:expr;
    )*) => {
        /// One thing a runtime may or may not do for its plugins.
        ///
        /// `ADJUST_*`: the runtime applies this part of a
        /// `ContainerAdjustment` to the container it creates (a runtime
        /// without it drops that part in silence). `INPUT_*`: the runtime
        /// fills in this part of the `Container` / `PodSandbox` it sends.
        /// The discriminant is the capability's bit in a [`CapabilitySet`]
        /// and in a runtime's declaration; it never changes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        #[repr(u8)]
        pub enum Capability {
            $( $(#[$doc])* $variant = $bit, )*
        }

        impl Capability {
            /// Every capability, in bit order.
            pub const ALL: &'static [Capability] = &[$(Capability::$variant,)*];

            /// The capability's name, e.g. `ADJUST_LINUX_SYSCTL` (the name
            /// of containerd/nri's proposal where it has one).
            pub const fn name(self) -> &'static str {
                match self { $(Capability::$variant => $name,)* }
            }

            /// The capability's number in containerd/nri's proposed
            /// `Capability` enum (the bit in its
            /// `ConfigureRequest.capabilities`), if it has one there.
            pub const fn upstream_number(self) -> Option<u32> {
                match self { $(Capability::$variant => $upstream,)* }
            }

            /// The capability's bit in a [`CapabilitySet`].
            pub const fn bit(self) -> u32 {
                self as u32
            }

            /// The capability with this bit, if any.
            pub const fn from_bit(bit: u32) -> Option<Capability> {
                match bit { $($bit => Some(Capability::$variant),)* _ => None }
            }
        }
    };
}

capabilities! {
    /// `rlimits`: POSIX resource limits (NRI v0.4.0).
    AdjustPosixRlimits = 0, "ADJUST_POSIX_RLIMITS", Some(0);
    /// The container's `rlimits` are filled in.
    InputPosixRlimits = 1, "INPUT_POSIX_RLIMITS", Some(1);
    /// `linux.resources.pids`: the pids limit (NRI v0.7.0).
    AdjustLinuxPidLimit = 2, "ADJUST_LINUX_PID_LIMIT", Some(2);
    /// `linux.oom_score_adj` (NRI v0.7.0).
    AdjustLinuxOomScore = 3, "ADJUST_LINUX_OOM_SCORE", Some(3);
    /// The container's `linux.oom_score_adj` is filled in.
    InputLinuxOomScore = 4, "INPUT_LINUX_OOM_SCORE", Some(4);
    /// The pod's `ips` are filled in.
    InputIpAddresses = 5, "INPUT_IP_ADDRESSES", Some(5);
    /// `CDI_devices`: CDI devices injected by name (NRI v0.7.0, and a
    /// runtime that resolves them).
    AdjustCdiDevices = 6, "ADJUST_CDI_DEVICES", Some(6);
    /// The container's `CDI_devices` are filled in.
    InputCdiDevices = 7, "INPUT_CDI_DEVICES", Some(7);
    /// The container's `linux.seccomp_profile` is filled in.
    InputLinuxSecurityProfile = 8, "INPUT_LINUX_SECURITY_PROFILE", Some(8);
    /// `linux.namespaces` (NRI v0.10.0).
    AdjustLinuxNamespaces = 9, "ADJUST_LINUX_NAMESPACES", Some(9);
    /// `linux.seccomp_policy` (NRI v0.10.0).
    AdjustLinuxSeccompPolicy = 10, "ADJUST_LINUX_SECCOMP_POLICY", Some(10);
    /// The container's `linux.seccomp_policy` is filled in.
    InputLinuxSeccompPolicy = 11, "INPUT_LINUX_SECCOMP_POLICY", Some(11);
    /// `linux.io_priority` (NRI v0.10.0).
    AdjustLinuxIoPriority = 12, "ADJUST_LINUX_IO_PRIORITY", Some(12);
    /// The container's `linux.io_priority` is filled in.
    InputLinuxIoPriority = 13, "INPUT_LINUX_IO_PRIORITY", Some(13);
    /// `args`: the command line (NRI v0.10.0).
    AdjustLinuxContainerArgs = 14, "ADJUST_LINUX_CONTAINER_ARGS", Some(14);
    /// `linux.scheduler` (NRI v0.11.0).
    AdjustLinuxSchedulingPolicy = 15, "ADJUST_LINUX_SCHEDULING_POLICY", Some(15);
    /// The container's `linux.scheduler` is filled in.
    InputLinuxSchedulingPolicy = 16, "INPUT_LINUX_SCHEDULING_POLICY", Some(16);
    /// `linux.net_devices` (NRI v0.11.0).
    AdjustLinuxNetworkDevices = 17, "ADJUST_LINUX_NETWORK_DEVICES", Some(17);
    /// The container's `linux.net_devices` are filled in.
    InputLinuxNetworkDevices = 18, "INPUT_LINUX_NETWORK_DEVICES", Some(18);
    /// `linux.rdt`: Intel RDT CLOS, schemata, monitoring (NRI v0.11.0).
    AdjustLinuxRdtClos = 19, "ADJUST_LINUX_RDT_CLOS", Some(19);
    /// The container's `linux.rdt` is filled in.
    InputLinuxRdtClos = 20, "INPUT_LINUX_RDT_CLOS", Some(20);
    /// `linux.sysctl` (NRI v0.12.0; v0.11.0 has the field but its merge
    /// writes into maps it never made).
    AdjustLinuxSysctl = 21, "ADJUST_LINUX_SYSCTL", Some(21);
    /// The container's `linux.sysctl` is filled in.
    InputLinuxSysctl = 22, "INPUT_LINUX_SYSCTL", Some(22);
    /// The container's status fields (creation, start and finish times,
    /// exit code) are filled in.
    ExtraContainerStatus = 23, "EXTRA_CONTAINER_STATUS", Some(23);
    /// The container's `user` (uid, gid, additional gids) is filled in.
    InputUidAndGids = 24, "INPUT_UID_AND_GIDS", Some(24);
    /// `linux.memory_policy`: NUMA memory policy (NRI v0.12.0).
    AdjustLinuxMemoryPolicy = 25, "ADJUST_LINUX_MEMORY_POLICY", Some(25);
    /// The container's `linux.memory_policy` is filled in.
    InputLinuxMemoryPolicy = 26, "INPUT_LINUX_MEMORY_POLICY", Some(26);
    /// `annotations`.
    AdjustAnnotations = 27, "ADJUST_ANNOTATIONS", None;
    /// `mounts`.
    AdjustMounts = 28, "ADJUST_MOUNTS", None;
    /// `env`.
    AdjustEnv = 29, "ADJUST_ENV", None;
    /// `hooks`: OCI hooks.
    AdjustOciHooks = 30, "ADJUST_OCI_HOOKS", None;
    /// `linux.devices`: device nodes.
    AdjustLinuxDevices = 31, "ADJUST_LINUX_DEVICES", None;
    /// `linux.cgroups_path`.
    AdjustLinuxCgroupsPath = 32, "ADJUST_LINUX_CGROUPS_PATH", None;
    /// `linux.resources.cpu`: shares, quota, period, realtime, cpusets.
    AdjustLinuxCpu = 33, "ADJUST_LINUX_CPU", None;
    /// `linux.resources.memory.limit`.
    AdjustLinuxMemoryLimit = 34, "ADJUST_LINUX_MEMORY_LIMIT", None;
    /// The rest of `linux.resources.memory`: reservation, swap, kernel,
    /// kernel TCP, swappiness, OOM killer, hierarchy.
    AdjustLinuxMemoryTuning = 35, "ADJUST_LINUX_MEMORY_TUNING", None;
    /// `linux.resources.hugepage_limits`.
    AdjustLinuxHugepageLimits = 36, "ADJUST_LINUX_HUGEPAGE_LIMITS", None;
    /// `linux.resources.blockio_class`.
    AdjustLinuxBlockioClass = 37, "ADJUST_LINUX_BLOCKIO_CLASS", None;
    /// `linux.resources.rdt_class`.
    AdjustLinuxRdtClass = 38, "ADJUST_LINUX_RDT_CLASS", None;
    /// `linux.resources.unified`: raw cgroup v2 settings.
    AdjustLinuxCgroupsUnified = 39, "ADJUST_LINUX_CGROUPS_UNIFIED", None;
    /// `linux.resources.devices`: device cgroup rules.
    AdjustLinuxDeviceRules = 40, "ADJUST_LINUX_DEVICE_RULES", None;
    /// Container updates, in answers to events and unsolicited
    /// (`UpdateContainers`), are applied.
    UpdateContainers = 41, "UPDATE_CONTAINERS", None;
    /// Container evictions, in answers to events and unsolicited, are
    /// carried out.
    EvictContainers = 42, "EVICT_CONTAINERS", None;
}

impl Capability {
    /// True for the capabilities about what the runtime tells plugins
    /// (`INPUT_*`, `EXTRA_CONTAINER_STATUS`) rather than what it does.
    pub const fn is_input(self) -> bool {
        matches!(
            self,
            Capability::InputPosixRlimits
                | Capability::InputLinuxOomScore
                | Capability::InputIpAddresses
                | Capability::InputCdiDevices
                | Capability::InputLinuxSecurityProfile
                | Capability::InputLinuxSeccompPolicy
                | Capability::InputLinuxIoPriority
                | Capability::InputLinuxSchedulingPolicy
                | Capability::InputLinuxNetworkDevices
                | Capability::InputLinuxRdtClos
                | Capability::InputLinuxSysctl
                | Capability::ExtraContainerStatus
                | Capability::InputUidAndGids
                | Capability::InputLinuxMemoryPolicy
        )
    }

    /// Looks a capability up by name, case-insensitively
    /// (`adjust_linux_sysctl` or `ADJUST_LINUX_SYSCTL`).
    pub fn from_name(name: &str) -> Option<Capability> {
        let name = name.trim();
        Capability::ALL
            .iter()
            .copied()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Capability {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::from_name(s).ok_or_else(|| Error::UnknownCapability {
            name: s.trim().to_owned(),
        })
    }
}

/// A set of [`Capability`]s.
///
/// ```
/// use nri_api::{Capability, CapabilitySet};
///
/// let set: CapabilitySet = "ADJUST_LINUX_SYSCTL, adjust_env".parse()?;
/// assert!(set.contains(Capability::AdjustEnv));
/// assert_eq!(set.to_string(), "ADJUST_LINUX_SYSCTL,ADJUST_ENV");
/// assert!(CapabilitySet::all().contains_all(set));
/// # Ok::<(), nri_api::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CapabilitySet(u128);

impl CapabilitySet {
    /// No capability.
    pub const EMPTY: CapabilitySet = CapabilitySet(0);

    /// Every capability this crate knows.
    pub const fn all() -> CapabilitySet {
        CapabilitySet::below(Capability::ALL.len() as u32)
    }

    /// The capabilities with a bit below `count` (what a declarer that
    /// knew `count` capabilities can speak about).
    pub const fn below(count: u32) -> CapabilitySet {
        if count >= 128 {
            CapabilitySet(u128::MAX)
        } else {
            CapabilitySet((1u128 << count) - 1)
        }
    }

    /// A set from its bits (bits of no known capability are kept).
    pub const fn from_bits(bits: u128) -> CapabilitySet {
        CapabilitySet(bits)
    }

    /// The bits.
    pub const fn bits(self) -> u128 {
        self.0
    }

    /// A set of these capabilities.
    pub const fn of(capabilities: &[Capability]) -> CapabilitySet {
        let mut bits = 0u128;
        let mut i = 0;
        while i < capabilities.len() {
            bits |= 1u128 << capabilities[i] as u32;
            i += 1;
        }
        CapabilitySet(bits)
    }

    /// True if `capability` is in the set.
    pub const fn contains(self, capability: Capability) -> bool {
        self.0 & (1u128 << capability as u32) != 0
    }

    /// True if every capability of `other` is in the set.
    pub const fn contains_all(self, other: CapabilitySet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Adds `capability`.
    pub fn insert(&mut self, capability: Capability) -> &mut Self {
        self.0 |= 1u128 << capability as u32;
        self
    }

    /// Removes `capability`.
    pub fn remove(&mut self, capability: Capability) -> &mut Self {
        self.0 &= !(1u128 << capability as u32);
        self
    }

    /// The set with `capability` added.
    #[must_use]
    pub const fn with(self, capability: Capability) -> CapabilitySet {
        CapabilitySet(self.0 | 1u128 << capability as u32)
    }

    /// The set without `capability`.
    #[must_use]
    pub const fn without(self, capability: Capability) -> CapabilitySet {
        CapabilitySet(self.0 & !(1u128 << capability as u32))
    }

    /// Capabilities in either set.
    #[must_use]
    pub const fn union(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 | other.0)
    }

    /// Capabilities in both sets.
    #[must_use]
    pub const fn intersection(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 & other.0)
    }

    /// Capabilities of `self` not in `other`.
    #[must_use]
    pub const fn difference(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 & !other.0)
    }

    /// True if the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The known capabilities in the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .iter()
            .copied()
            .filter(move |c| self.contains(*c))
    }

    /// The set as containerd/nri's proposed wire field would carry it:
    /// one bit per [`Capability::upstream_number`], in 64-bit words;
    /// capabilities without an upstream number are left out.
    pub fn to_upstream_words(self) -> Vec<u64> {
        let mut words = vec![0u64; 1];
        for c in self.iter() {
            if let Some(n) = c.upstream_number() {
                let (w, b) = ((n / 64) as usize, n % 64);
                if words.len() <= w {
                    words.resize(w + 1, 0);
                }
                words[w] |= 1 << b;
            }
        }
        words
    }

    /// Parses a comma-separated list of capability names (blanks around
    /// names are ignored; an empty list is the empty set).
    pub fn parse(list: &str) -> Result<CapabilitySet, Error> {
        let mut set = CapabilitySet::EMPTY;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            set.insert(name.parse()?);
        }
        Ok(set)
    }
}

impl FromStr for CapabilitySet {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CapabilitySet::parse(s)
    }
}

/// Names joined with `,` in bit order; the empty set prints as `""`.
impl fmt::Display for CapabilitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for c in self.iter() {
            write!(f, "{sep}{}", c.name())?;
            sep = ",";
        }
        Ok(())
    }
}

impl fmt::Debug for CapabilitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CapabilitySet({self})")
    }
}

impl From<Capability> for CapabilitySet {
    fn from(c: Capability) -> Self {
        CapabilitySet::EMPTY.with(c)
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<T: IntoIterator<Item = Capability>>(iter: T) -> Self {
        let mut set = CapabilitySet::EMPTY;
        for c in iter {
            set.insert(c);
        }
        set
    }
}

/// Something a plugin needs from its runtime: a capability, or the
/// delivery of an event (e.g. `ValidateContainerAdjustment` for a
/// validator, `UpdatePodSandbox` for a plugin that follows pod resizes).
///
/// ```
/// use nri_api::{Capability, Requirement, api::Event};
///
/// let needs: Vec<Requirement> = vec![
///     Capability::AdjustLinuxSysctl.into(),
///     Event::ValidateContainerAdjustment.into(),
/// ];
/// assert_eq!(needs[0].to_string(), "ADJUST_LINUX_SYSCTL");
/// assert_eq!(needs[1].to_string(), "event ValidateContainerAdjustment");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Requirement {
    /// A capability.
    Capability(Capability),
    /// The delivery of an event.
    Event(Event),
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Capability(c) => f.write_str(c.name()),
            Requirement::Event(e) => write!(f, "event {}", e.pretty_name()),
        }
    }
}

impl From<Capability> for Requirement {
    fn from(c: Capability) -> Self {
        Requirement::Capability(c)
    }
}

impl From<Event> for Requirement {
    fn from(e: Event) -> Self {
        Requirement::Event(e)
    }
}

impl FromStr for Requirement {
    type Err = Error;
    /// A capability name, or an event's name (`UpdatePodSandbox`),
    /// optionally after `event ` or `event:`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let ev = s
            .strip_prefix("event ")
            .or_else(|| s.strip_prefix("event:"))
            .map(str::trim);
        if let Some(c) = ev.is_none().then(|| Capability::from_name(s)).flatten() {
            return Ok(Requirement::Capability(c));
        }
        let name = ev.unwrap_or(s);
        match Event::ALL_EVENTS
            .into_iter()
            .find(|e| e.pretty_name().eq_ignore_ascii_case(name))
        {
            Some(e) => Ok(Requirement::Event(e)),
            None => Err(Error::UnknownCapability { name: s.to_owned() }),
        }
    }
}
