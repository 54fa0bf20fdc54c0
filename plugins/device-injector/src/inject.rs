//! The annotations of upstream's device-injector and the adjustment they
//! give, read as the Go plugin reads them (`sigs.k8s.io/yaml`, see
//! `nri_sample_common::goyaml`): the same input gives the same adjustment,
//! what Go refuses is refused, and what Go drops silently is dropped with a
//! warning (refused in strict mode).

use std::collections::BTreeMap;

use nri_plugin::api::{
    ContainerAdjustment, IoPrioClass, LinuxDevice, LinuxIoPriority, LinuxNamespace, LinuxNetDevice,
    LinuxScheduler, LinuxSchedulerFlag, LinuxSchedulerPolicy, Mount, MpolFlag, MpolMode,
    OptionalFileMode, OptionalUInt32,
};
use nri_sample_common::fence::Refused;
use nri_sample_common::goyaml::{Field, MAX_EXCERPT_BYTES, Shape, excerpt};
use nri_sample_common::{
    AnnotationError, Source, container_annotation, decode_annotation, listing,
};

use crate::fence::Fence;
use serde::{Deserialize, Serialize};

/// Device nodes: current and deprecated key prefix.
pub const DEVICE_KEYS: [&str; 2] = ["devices.noderesource.dev", "devices.nri.io"];
/// Mounts.
pub const MOUNT_KEYS: [&str; 2] = ["mounts.noderesource.dev", "mounts.nri.io"];
/// CDI devices.
pub const CDI_DEVICE_KEYS: [&str; 2] = ["cdi-devices.noderesource.dev", "cdi-devices.nri.io"];
/// I/O priority.
pub const IO_PRIO_KEYS: [&str; 2] = ["io-priority.noderesource.dev", "io-priority.nri.io"];
/// Network devices.
pub const NET_DEVICE_KEYS: [&str; 2] =
    ["network-devices.noderesource.dev", "network-devices.nri.io"];
/// Scheduling policy.
pub const SCHEDULER_KEYS: [&str; 2] = [
    "scheduling-policy.noderesource.dev",
    "scheduling-policy.nri.io",
];
/// Sysctls (no deprecated form upstream).
pub const SYSCTL_KEYS: [&str; 1] = ["sysctl.noderesource.dev"];
/// Memory policy.
pub const MEMORY_POLICY_KEYS: [&str; 2] =
    ["memory-policy.noderesource.dev", "memory-policy.nri.io"];

/// Why an annotation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// Not decodable as Go decodes it, or refused in strict mode.
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    /// A memory policy Go refuses.
    #[error("invalid memory policy annotation {key:?}: {reason}")]
    MemoryPolicy {
        /// The annotation key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Outside the operator's allow-list (`allow` in the configuration).
    #[error(transparent)]
    Refused(#[from] Refused),
}

/// An annotated device node.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct Device {
    /// Path in the container.
    pub path: String,
    /// `c`, `b`, `u` or `p` (passed on as given).
    pub r#type: String,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// File mode (0: not set).
    pub file_mode: u32,
    /// Owner uid (0: not set).
    pub uid: u32,
    /// Owner gid (0: not set).
    pub gid: u32,
}

const DEVICE: Shape = Shape::Struct(&[
    Field::new("path", Shape::Str),
    Field::new("type", Shape::Str),
    Field::new("major", Shape::Int(64)),
    Field::new("minor", Shape::Int(64)),
    Field::new("file_mode", Shape::Uint(32)),
    Field::new("uid", Shape::Uint(32)),
    Field::new("gid", Shape::Uint(32)),
]);

/// An annotated mount.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct MountSpec {
    /// Host path (or source of the file system).
    pub source: String,
    /// Path in the container.
    pub destination: String,
    /// File system type (`bind`, `tmpfs`, ...).
    pub r#type: String,
    /// Mount options.
    pub options: Vec<String>,
}

const MOUNT: Shape = Shape::Struct(&[
    Field::new("source", Shape::Str),
    Field::new("destination", Shape::Str),
    Field::new("type", Shape::Str),
    Field::new("options", Shape::Seq(&Shape::Str)),
]);

/// An I/O priority.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct IoPrio {
    /// `IOPRIO_CLASS_NONE|RT|BE|IDLE`.
    pub class: String,
    /// Priority within the class.
    pub priority: i32,
}

const IO_PRIO: Shape = Shape::Struct(&[
    Field::new("class", Shape::Str),
    Field::new("priority", Shape::Int(32)),
]);

/// A host network interface to move into the container.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct NetDevice {
    /// Host interface name.
    #[serde(rename = "hostIf")]
    pub host_if: String,
    /// Name in the container.
    pub name: String,
}

const NET_DEVICE: Shape = Shape::Struct(&[
    Field::new("hostIf", Shape::Str),
    Field::new("name", Shape::Str),
]);

/// Scheduling attributes.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct Scheduler {
    /// `SCHED_OTHER`, `SCHED_FIFO`, ...
    pub policy: String,
    /// Nice value.
    pub nice: i32,
    /// Static priority.
    pub priority: i32,
    /// `SCHED_FLAG_*` names.
    pub flags: Vec<String>,
    /// SCHED_DEADLINE runtime (ns).
    pub runtime: u64,
    /// SCHED_DEADLINE deadline (ns).
    pub deadline: u64,
    /// SCHED_DEADLINE period (ns).
    pub period: u64,
}

const SCHEDULER: Shape = Shape::Struct(&[
    Field::new("policy", Shape::Str),
    Field::new("nice", Shape::Int(32)),
    Field::new("priority", Shape::Int(32)),
    Field::new("flags", Shape::Seq(&Shape::Str)),
    Field::new("runtime", Shape::Uint(64)),
    Field::new("deadline", Shape::Uint(64)),
    Field::new("period", Shape::Uint(64)),
]);

/// A memory policy.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct MemoryPolicy {
    /// `MPOL_*` mode.
    pub mode: String,
    /// NUMA nodes, e.g. `"0-1,3"`.
    pub nodes: String,
    /// `MPOL_F_*` flags.
    pub flags: Vec<String>,
}

const MEMORY_POLICY: Shape = Shape::Struct(&[
    Field::new("mode", Shape::Str),
    Field::new("nodes", Shape::Str),
    Field::new("flags", Shape::Seq(&Shape::Str)),
]);

/// What a container's adjustment is built from.
pub struct Request<'a> {
    /// Pod annotations.
    pub annotations: &'a BTreeMap<String, String>,
    /// Pod name (for messages).
    pub pod: &'a str,
    /// Pod namespace (for the allow-list and messages).
    pub namespace: &'a str,
    /// The pod's Linux namespaces as the runtime reports them (a pod
    /// without a `network` entry shares the node's network).
    pub linux_namespaces: &'a [LinuxNamespace],
    /// Container name.
    pub container: &'a str,
    /// Refuse what Go drops silently.
    pub strict: bool,
    /// The operator's allow-list.
    pub fence: &'a Fence,
}

impl Request<'_> {
    /// The effective annotation for `prefixes`, as Go's `getAnnotation`.
    fn find(&self, prefixes: &[&str]) -> Option<Source<'_>> {
        container_annotation(self.annotations, prefixes, self.container, true).map(|(k, v)| {
            let key = self
                .annotations
                .get_key_value(&k)
                .map_or("", |(k, _)| k.as_str());
            Source {
                pod: self.pod,
                container: self.container,
                annotation: key,
                value: v,
            }
        })
    }

    /// [`Request::find`], with the pod's namespace checked against the
    /// allow-list before anything is decoded when the value asks for
    /// something (is not blank).
    fn find_fenced(&self, prefixes: &[&str]) -> Result<Option<Source<'_>>, Refused> {
        let src = self.find(prefixes);
        if let Some(s) = &src {
            if !s.value.trim().is_empty() {
                self.fence.pod(self, s.annotation)?;
            }
        }
        Ok(src)
    }

    fn name(&self) -> String {
        format!("{}/{}", self.pod, self.container)
    }

    /// Whether the pod has its own namespace of type `ns` (`network`,
    /// `ipc`, `uts`).
    pub(crate) fn has_namespace(&self, ns: &str) -> bool {
        self.linux_namespaces.iter().any(|n| n.r#type == ns)
    }
}

fn devices(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    // Go: an empty value is no annotation.
    let Some(src) = r.find_fenced(&DEVICE_KEYS)?.filter(|s| !s.value.is_empty()) else {
        return Ok(());
    };
    let list: Vec<Device> = decode_annotation(&src, &Shape::Seq(&DEVICE), &Vec::new(), r.strict)?;
    if !list.is_empty() {
        r.fence.pod(r, src.annotation)?;
    }
    for d in &list {
        r.fence.device(r, src.annotation, d)?;
    }
    tracing::info!(
        "{}: injected {} devices: {}",
        r.name(),
        list.len(),
        listing(list.iter().map(|d| format!("{:?}", d.path)))
    );
    for d in list {
        a.add_device(LinuxDevice {
            path: d.path,
            r#type: d.r#type,
            major: d.major,
            minor: d.minor,
            file_mode: (d.file_mode != 0).then_some(OptionalFileMode { value: d.file_mode }),
            uid: (d.uid != 0).then_some(OptionalUInt32 { value: d.uid }),
            gid: (d.gid != 0).then_some(OptionalUInt32 { value: d.gid }),
        });
    }
    Ok(())
}

fn cdi_devices(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    let Some(src) = r
        .find_fenced(&CDI_DEVICE_KEYS)?
        .filter(|s| !s.value.is_empty())
    else {
        return Ok(());
    };
    let names: Vec<String> =
        decode_annotation(&src, &Shape::Seq(&Shape::Str), &Vec::new(), r.strict)?;
    if !names.is_empty() {
        r.fence.pod(r, src.annotation)?;
    }
    for n in &names {
        r.fence.cdi_device(r, src.annotation, n)?;
    }
    tracing::info!(
        "{}: injected {} CDI devices: {}",
        r.name(),
        names.len(),
        listing(names.iter().map(|n| format!("{n:?}")))
    );
    for n in names {
        a.add_cdi_device(n);
    }
    Ok(())
}

fn mounts(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    let Some(src) = r.find_fenced(&MOUNT_KEYS)?.filter(|s| !s.value.is_empty()) else {
        return Ok(());
    };
    let list: Vec<MountSpec> = decode_annotation(&src, &Shape::Seq(&MOUNT), &Vec::new(), r.strict)?;
    if !list.is_empty() {
        r.fence.pod(r, src.annotation)?;
    }
    for m in &list {
        r.fence.mount(r, src.annotation, m)?;
    }
    tracing::info!(
        "{}: injected {} mounts: {}",
        r.name(),
        list.len(),
        listing(
            list.iter()
                .map(|m| format!("{:?} -> {:?}", m.source, m.destination))
        )
    );
    for m in list {
        a.add_mount(Mount {
            source: m.source,
            destination: m.destination,
            r#type: m.r#type,
            options: m.options,
        });
    }
    Ok(())
}

fn io_priority(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    // Go: present, even empty, counts (an empty value is an empty class).
    let Some(src) = r.find_fenced(&IO_PRIO_KEYS)? else {
        return Ok(());
    };
    let p: IoPrio = decode_annotation(&src, &IO_PRIO, &IoPrio::default(), r.strict)?;
    match IoPrioClass::from_str_name(&p.class) {
        Some(class) => {
            r.fence.pod(r, src.annotation)?;
            r.fence.io_class(r, src.annotation, class.as_str_name())?;
            tracing::info!(
                "{}: injected I/O priority {}:{}",
                r.name(),
                class.as_str_name(),
                p.priority
            );
            a.set_linux_io_priority(LinuxIoPriority {
                class: class as i32,
                priority: p.priority,
            });
        }
        None => src
            .dropped(
                r.strict,
                format!(
                    "unknown I/O priority class {:?}, no I/O priority set",
                    p.class
                ),
            )
            .map_err(AnnotationError::from)?,
    }
    Ok(())
}

fn scheduler(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    let Some(src) = r.find_fenced(&SCHEDULER_KEYS)? else {
        return Ok(());
    };
    let s: Scheduler = decode_annotation(&src, &SCHEDULER, &Scheduler::default(), r.strict)?;
    // Go looks names up in the enum's map: an unknown name is 0, which is
    // SCHED_NONE for the policy (no scheduling attributes) and
    // SCHED_FLAG_RESET_ON_FORK for a flag.
    let policy = match LinuxSchedulerPolicy::from_str_name(&s.policy) {
        Some(p) => p,
        None => {
            src.dropped(
                r.strict,
                format!(
                    "unknown scheduling policy {:?}, taken as SCHED_NONE",
                    s.policy
                ),
            )
            .map_err(AnnotationError::from)?;
            LinuxSchedulerPolicy::SchedNone
        }
    };
    r.fence.pod(r, src.annotation)?;
    r.fence.policy(r, src.annotation, policy.as_str_name())?;
    let mut flags = Vec::with_capacity(s.flags.len());
    // One warning for all the unknown flags.
    let mut drops = src.drops(r.strict);
    for f in &s.flags {
        let flag = match LinuxSchedulerFlag::from_str_name(f) {
            Some(flag) => flag,
            None => {
                drops
                    .push(format!(
                        "unknown scheduling flag {f:?}, taken as SCHED_FLAG_RESET_ON_FORK"
                    ))
                    .map_err(AnnotationError::from)?;
                LinuxSchedulerFlag::SchedFlagResetOnFork
            }
        };
        flags.push(flag as i32);
    }
    drop(drops);
    tracing::info!(
        "{}: adjusted scheduling attributes: policy {}, nice {}, priority {}, {} flags",
        r.name(),
        policy.as_str_name(),
        s.nice,
        s.priority,
        flags.len()
    );
    a.set_linux_scheduler(LinuxScheduler {
        policy: policy as i32,
        nice: s.nice,
        priority: s.priority,
        flags,
        runtime: s.runtime,
        deadline: s.deadline,
        period: s.period,
    });
    Ok(())
}

fn net_devices(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    let Some(src) = r.find_fenced(&NET_DEVICE_KEYS)? else {
        return Ok(());
    };
    let list: Vec<NetDevice> =
        decode_annotation(&src, &Shape::Seq(&NET_DEVICE), &Vec::new(), r.strict)?;
    if !list.is_empty() {
        r.fence.pod(r, src.annotation)?;
    }
    for d in &list {
        r.fence.net_device(r, src.annotation, d)?;
    }
    tracing::info!(
        "{}: injected {} network devices: {}",
        r.name(),
        list.len(),
        listing(
            list.iter()
                .map(|d| format!("{:?} -> {:?}", d.host_if, d.name))
        )
    );
    for d in list {
        a.add_linux_net_device(d.host_if, LinuxNetDevice { name: d.name });
    }
    Ok(())
}

fn sysctls(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    let Some(src) = r.find_fenced(&SYSCTL_KEYS)? else {
        return Ok(());
    };
    let map: BTreeMap<String, String> =
        decode_annotation(&src, &Shape::Map(&Shape::Str), &BTreeMap::new(), r.strict)?;
    if !map.is_empty() {
        r.fence.pod(r, src.annotation)?;
    }
    for k in map.keys() {
        r.fence.sysctl(r, src.annotation, k)?;
    }
    tracing::info!(
        "{}: adjusted {} sysctls: {}",
        r.name(),
        map.len(),
        listing(map.iter().map(|(k, v)| format!("{k:?}={v:?}")))
    );
    for (k, v) in map {
        a.set_linux_sysctl(k, v);
    }
    Ok(())
}

fn memory_policy(r: &Request<'_>, a: &mut ContainerAdjustment) -> Result<(), InjectError> {
    let Some(src) = r.find_fenced(&MEMORY_POLICY_KEYS)? else {
        return Ok(());
    };
    let p: MemoryPolicy =
        decode_annotation(&src, &MEMORY_POLICY, &MemoryPolicy::default(), r.strict)?;
    let bad = |reason: String| InjectError::MemoryPolicy {
        key: src.annotation.to_owned(),
        reason,
    };
    // Go refuses an unknown (or empty) mode or flag.
    let mode = MpolMode::from_str_name(&p.mode).ok_or_else(|| {
        bad(format!(
            "invalid memory policy mode {:?}",
            excerpt(&p.mode, MAX_EXCERPT_BYTES)
        ))
    })?;
    let flags = p
        .flags
        .iter()
        .map(|f| {
            MpolFlag::from_str_name(f).ok_or_else(|| {
                bad(format!(
                    "invalid memory policy flag {:?}",
                    excerpt(f, MAX_EXCERPT_BYTES)
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    r.fence.pod(r, src.annotation)?;
    tracing::info!(
        "{}: adjusted memory policy: {}, nodes {}, {} flags",
        r.name(),
        mode.as_str_name(),
        listing([format!("{:?}", p.nodes)]),
        flags.len()
    );
    a.set_linux_memory_policy(mode, p.nodes, &flags);
    Ok(())
}

/// Builds the adjustment of a container: devices, CDI devices, mounts, I/O
/// priority, scheduling attributes, network devices, sysctls and memory
/// policy, in the Go plugin's order (the first refused annotation wins).
///
/// # Errors
///
/// The first refused annotation.
pub fn adjustment(r: &Request<'_>) -> Result<ContainerAdjustment, InjectError> {
    let mut a = ContainerAdjustment::default();
    devices(r, &mut a)?;
    cdi_devices(r, &mut a)?;
    mounts(r, &mut a)?;
    io_priority(r, &mut a)?;
    scheduler(r, &mut a)?;
    net_devices(r, &mut a)?;
    sysctls(r, &mut a)?;
    memory_policy(r, &mut a)?;
    Ok(a)
}

#[cfg(test)]
#[path = "inject_tests.rs"]
mod tests;
