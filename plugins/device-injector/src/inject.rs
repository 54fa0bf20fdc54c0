//! The annotations of upstream's device-injector and the adjustment they
//! give.

use std::collections::BTreeMap;

use nri_plugin::api::{
    ContainerAdjustment, IoPrioClass, LinuxDevice, LinuxIoPriority, LinuxNetDevice, LinuxScheduler,
    LinuxSchedulerFlag, LinuxSchedulerPolicy, Mount, MpolFlag, MpolMode, OptionalFileMode,
    OptionalUInt32,
};
use nri_sample_common::{container_annotation, decode_yaml};
use serde::Deserialize;
use serde::de::DeserializeOwned;

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

/// A refused annotation: the key and the problem.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid annotation {key:?}: {reason}")]
pub struct InjectError {
    /// The annotation key.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// An annotated device node.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct Device {
    /// Path in the container.
    pub path: String,
    /// `c`, `b`, `u` or `p`.
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

/// An annotated mount.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
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

/// An I/O priority.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct IoPrio {
    /// `IOPRIO_CLASS_NONE|RT|BE|IDLE`.
    pub class: String,
    /// Priority within the class.
    pub priority: i32,
}

/// A host network interface to move into the container.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct NetDevice {
    /// Host interface name.
    #[serde(rename = "hostIf")]
    pub host_if: String,
    /// Name in the container.
    pub name: String,
}

/// Scheduling attributes.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
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

/// A memory policy.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct MemoryPolicy {
    /// `MPOL_*` mode.
    pub mode: String,
    /// NUMA nodes, e.g. `"0-1,3"`.
    pub nodes: String,
    /// `MPOL_F_*` flags.
    pub flags: Vec<String>,
}

/// Every struct field name, for Go's case-insensitive key matching.
const FIELDS: &[&str] = &[
    "path",
    "type",
    "major",
    "minor",
    "file_mode",
    "uid",
    "gid",
    "source",
    "destination",
    "options",
    "class",
    "priority",
    "hostIf",
    "name",
    "policy",
    "nice",
    "flags",
    "runtime",
    "deadline",
    "period",
    "mode",
    "nodes",
];

/// Finds the annotation of `ctr` for `prefixes` and decodes it. `None`
/// when absent or empty.
fn lookup<T: DeserializeOwned>(
    annotations: &BTreeMap<String, String>,
    prefixes: &[&str],
    ctr: &str,
    what: &str,
    fields: &[&str],
) -> Result<Option<(String, T)>, InjectError> {
    let Some((key, value)) = container_annotation(annotations, prefixes, ctr, true) else {
        return Ok(None);
    };
    if value.trim().is_empty() {
        return Ok(None);
    }
    match decode_yaml::<Option<T>>(value, fields) {
        Ok(Some(v)) => Ok(Some((key, v))),
        Ok(None) => Ok(None),
        Err(e) => Err(InjectError {
            key,
            reason: format!("not a valid {what}: {e}"),
        }),
    }
}

fn bad(key: &str, reason: impl Into<String>) -> InjectError {
    InjectError {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

impl Device {
    fn to_nri(&self, key: &str, i: usize) -> Result<LinuxDevice, InjectError> {
        if self.path.is_empty() {
            return Err(bad(key, format!("device {i}: path is missing")));
        }
        if !matches!(self.r#type.as_str(), "c" | "b" | "u" | "p") {
            return Err(bad(
                key,
                format!(
                    "device {i} ({}): type {:?} is not one of c, b, u, p",
                    self.path, self.r#type
                ),
            ));
        }
        Ok(LinuxDevice {
            path: self.path.clone(),
            r#type: self.r#type.clone(),
            major: self.major,
            minor: self.minor,
            file_mode: (self.file_mode != 0).then_some(OptionalFileMode {
                value: self.file_mode,
            }),
            uid: (self.uid != 0).then_some(OptionalUInt32 { value: self.uid }),
            gid: (self.gid != 0).then_some(OptionalUInt32 { value: self.gid }),
        })
    }
}

impl Scheduler {
    fn to_nri(&self, key: &str) -> Result<LinuxScheduler, InjectError> {
        let policy = LinuxSchedulerPolicy::from_str_name(&self.policy).ok_or_else(|| {
            bad(
                key,
                format!("unknown scheduling policy {:?} (SCHED_OTHER, SCHED_FIFO, SCHED_RR, SCHED_BATCH, SCHED_ISO, SCHED_IDLE, SCHED_DEADLINE)", self.policy),
            )
        })?;
        let flags = self
            .flags
            .iter()
            .map(|f| {
                LinuxSchedulerFlag::from_str_name(f)
                    .map(|f| f as i32)
                    .ok_or_else(|| bad(key, format!("unknown scheduling flag {f:?}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(LinuxScheduler {
            policy: policy as i32,
            nice: self.nice,
            priority: self.priority,
            flags,
            runtime: self.runtime,
            deadline: self.deadline,
            period: self.period,
        })
    }
}

/// Builds the adjustment for container `ctr` of a pod with `annotations`:
/// devices, CDI devices, mounts, I/O priority, scheduling attributes,
/// network devices, sysctls and memory policy, in that order. Logs each
/// injection with `name` (`pod/container`).
///
/// # Errors
///
/// The first refused annotation.
pub fn adjustment(
    annotations: &BTreeMap<String, String>,
    ctr: &str,
    name: &str,
) -> Result<ContainerAdjustment, InjectError> {
    let mut a = ContainerAdjustment::default();

    if let Some((key, devices)) =
        lookup::<Vec<Device>>(annotations, &DEVICE_KEYS, ctr, "device list", FIELDS)?
    {
        for (i, d) in devices.iter().enumerate() {
            a.add_device(d.to_nri(&key, i)?);
            tracing::info!("{name}: injected device {:?}", d.path);
        }
    }

    if let Some((key, names)) =
        lookup::<Vec<String>>(annotations, &CDI_DEVICE_KEYS, ctr, "CDI device list", &[])?
    {
        for n in names {
            if n.is_empty() {
                return Err(bad(&key, "empty CDI device name"));
            }
            tracing::info!("{name}: injected CDI device {n:?}");
            a.add_cdi_device(n);
        }
    }

    if let Some((key, mounts)) =
        lookup::<Vec<MountSpec>>(annotations, &MOUNT_KEYS, ctr, "mount list", FIELDS)?
    {
        for (i, m) in mounts.into_iter().enumerate() {
            if m.destination.is_empty() {
                return Err(bad(&key, format!("mount {i}: destination is missing")));
            }
            tracing::info!(
                "{name}: injected mount {:?} -> {:?}",
                m.source,
                m.destination
            );
            a.add_mount(Mount {
                source: m.source,
                destination: m.destination,
                r#type: m.r#type,
                options: m.options,
            });
        }
    }

    if let Some((key, p)) =
        lookup::<IoPrio>(annotations, &IO_PRIO_KEYS, ctr, "I/O priority", FIELDS)?
    {
        let class = IoPrioClass::from_str_name(&p.class).ok_or_else(|| {
            bad(
                &key,
                format!(
                    "unknown I/O priority class {:?} (IOPRIO_CLASS_NONE, IOPRIO_CLASS_RT, IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE)",
                    p.class
                ),
            )
        })?;
        tracing::info!("{name}: injected I/O priority {}:{}", p.class, p.priority);
        a.set_linux_io_priority(LinuxIoPriority {
            class: class as i32,
            priority: p.priority,
        });
    }

    if let Some((key, s)) = lookup::<Scheduler>(
        annotations,
        &SCHEDULER_KEYS,
        ctr,
        "scheduling policy",
        FIELDS,
    )? {
        a.set_linux_scheduler(s.to_nri(&key)?);
        tracing::info!("{name}: adjusted scheduling attributes to {s:?}");
    }

    if let Some((key, devs)) = lookup::<Vec<NetDevice>>(
        annotations,
        &NET_DEVICE_KEYS,
        ctr,
        "network device list",
        FIELDS,
    )? {
        for (i, d) in devs.into_iter().enumerate() {
            if d.host_if.is_empty() {
                return Err(bad(&key, format!("network device {i}: hostIf is missing")));
            }
            tracing::info!(
                "{name}: injected network device {:?} -> {:?}",
                d.host_if,
                d.name
            );
            a.add_linux_net_device(d.host_if, LinuxNetDevice { name: d.name });
        }
    }

    if let Some((_, sysctl)) = lookup::<BTreeMap<String, String>>(
        annotations,
        &SYSCTL_KEYS,
        ctr,
        "sysctl map (name: \"value\")",
        &[],
    )? {
        for (k, v) in sysctl {
            tracing::info!("{name}: adjusted sysctl {k}={v}");
            a.set_linux_sysctl(k, v);
        }
    }

    if let Some((key, p)) = lookup::<MemoryPolicy>(
        annotations,
        &MEMORY_POLICY_KEYS,
        ctr,
        "memory policy",
        FIELDS,
    )? {
        let mode = MpolMode::from_str_name(&p.mode)
            .ok_or_else(|| bad(&key, format!("invalid memory policy mode {:?}", p.mode)))?;
        let flags = p
            .flags
            .iter()
            .map(|f| {
                MpolFlag::from_str_name(f)
                    .ok_or_else(|| bad(&key, format!("invalid memory policy flag {f:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        tracing::info!("{name}: adjusted memory policy to {p:?}");
        a.set_linux_memory_policy(mode, p.nodes, &flags);
    }

    Ok(a)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn devices(a: &ContainerAdjustment) -> Vec<(String, i64, i64)> {
        a.linux
            .as_ref()
            .map(|l| {
                l.devices
                    .iter()
                    .map(|d| (d.path.clone(), d.major, d.minor))
                    .collect()
            })
            .unwrap_or_default()
    }

    const NULL: &str = "- path: /dev/test-null\n  type: c\n  major: 1\n  minor: 3\n";
    const ZERO: &str = "- path: /dev/test-zero\n  type: c\n  major: 1\n  minor: 5\n";

    #[test]
    fn device_precedence() {
        // container beats pod, current prefix beats deprecated one at the same scope,
        // and a deprecated container key beats a current pod key.
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[
                    ("devices.noderesource.dev/container.ctr0", NULL),
                    ("devices.nri.io/container.ctr0", ZERO),
                ],
                "/dev/test-null",
            ),
            (
                &[
                    ("devices.noderesource.dev/pod", ZERO),
                    ("devices.noderesource.dev/container.ctr0", NULL),
                ],
                "/dev/test-null",
            ),
            (
                &[
                    ("devices.noderesource.dev/pod", ZERO),
                    ("devices.nri.io/container.ctr0", NULL),
                ],
                "/dev/test-null",
            ),
            (
                &[
                    ("devices.nri.io/pod", NULL),
                    ("devices.noderesource.dev", ZERO),
                ],
                "/dev/test-null",
            ),
            (
                &[("devices.noderesource.dev", ZERO), ("devices.nri.io", NULL)],
                "/dev/test-zero",
            ),
            (&[("devices.nri.io", ZERO)], "/dev/test-zero"),
        ];
        for (a, want) in cases {
            let adj = adjustment(&ann(a), "ctr0", "p/ctr0").unwrap();
            assert_eq!(devices(&adj)[0].0, *want, "{a:?}");
        }
        let adj = adjustment(
            &ann(&[("devices.noderesource.dev/container.ctr1", NULL)]),
            "ctr0",
            "x",
        )
        .unwrap();
        assert!(devices(&adj).is_empty());
    }

    #[test]
    fn device_fields() {
        let a = ann(&[(
            "devices.noderesource.dev/container.c",
            "- path: /dev/x\n  type: b\n  major: 8\n  minor: 1\n  file_mode: 0660\n  uid: 5\n- Path: /dev/y\n  TYPE: c\n  major: 1\n  minor: 3\n",
        )]);
        let adj = adjustment(&a, "c", "x").unwrap();
        let devs = &adj.linux.as_ref().unwrap().devices;
        assert_eq!(devs[0].file_mode, Some(OptionalFileMode { value: 0o660 }));
        assert_eq!(devs[0].uid, Some(OptionalUInt32 { value: 5 }));
        assert_eq!(devs[0].gid, None);
        assert_eq!(devs[1].path, "/dev/y");
        assert_eq!(devs[1].file_mode, None);
    }

    #[test]
    fn cdi_and_mounts() {
        let a = ann(&[
            (
                "cdi-devices.nri.io/container.c0",
                "- vendor0.com/device=null\n",
            ),
            (
                "cdi-devices.noderesource.dev/pod",
                "- vendor0.com/device=zero\n- vendor1.com/device=dev0\n",
            ),
            (
                "mounts.noderesource.dev/container.c2",
                "- source: /home\n  destination: /host-home\n  type: bind\n  options:\n  - bind\n  - ro\n",
            ),
        ]);
        let adj = adjustment(&a, "c0", "x").unwrap();
        assert_eq!(adj.cdi_devices.len(), 1);
        assert_eq!(adj.cdi_devices[0].name, "vendor0.com/device=null");
        assert!(adj.mounts.is_empty());
        let adj = adjustment(&a, "c2", "x").unwrap();
        assert_eq!(adj.cdi_devices.len(), 2);
        assert_eq!(adj.mounts.len(), 1);
        assert_eq!(adj.mounts[0].destination, "/host-home");
        assert_eq!(adj.mounts[0].options, ["bind", "ro"]);
    }

    #[test]
    fn other_settings() {
        let a = ann(&[
            (
                "io-priority.noderesource.dev/container.c",
                "class: IOPRIO_CLASS_RT\npriority: 4\n",
            ),
            (
                "scheduling-policy.nri.io/pod",
                "policy: SCHED_FIFO\npriority: 10\nflags: [SCHED_FLAG_RESET_ON_FORK]\n",
            ),
            (
                "network-devices.noderesource.dev/container.c",
                "- hostIf: ens2.100\n  Name: netdev0\n",
            ),
            (
                "sysctl.noderesource.dev/container.c",
                "net.core.somaxconn: \"256\"\n",
            ),
            (
                "memory-policy.noderesource.dev",
                "mode: MPOL_INTERLEAVE\nnodes: \"2,3\"\nflags: [MPOL_F_STATIC_NODES]\n",
            ),
        ]);
        let adj = adjustment(&a, "c", "x").unwrap();
        let l = adj.linux.unwrap();
        assert_eq!(
            l.io_priority,
            Some(LinuxIoPriority {
                class: IoPrioClass::IoprioClassRt as i32,
                priority: 4
            })
        );
        let s = l.scheduler.unwrap();
        assert_eq!(s.policy, LinuxSchedulerPolicy::SchedFifo as i32);
        assert_eq!(s.priority, 10);
        assert_eq!(s.flags, [LinuxSchedulerFlag::SchedFlagResetOnFork as i32]);
        assert_eq!(l.net_devices["ens2.100"].name, "netdev0");
        assert_eq!(l.sysctl["net.core.somaxconn"], "256");
        let m = l.memory_policy.unwrap();
        assert_eq!(m.mode, MpolMode::MpolInterleave as i32);
        assert_eq!(m.nodes, "2,3");
        assert_eq!(m.flags, [MpolFlag::MpolFStaticNodes as i32]);
    }

    #[test]
    fn empty_values_are_ignored() {
        let a = ann(&[
            ("devices.noderesource.dev/container.c", ""),
            ("mounts.noderesource.dev", "  \n"),
        ]);
        assert_eq!(
            adjustment(&a, "c", "x").unwrap(),
            ContainerAdjustment::default()
        );
    }

    #[test]
    fn errors_name_the_annotation() {
        let cases = [
            (
                "devices.noderesource.dev/container.c",
                "- path: /dev/x\n  type: q\n",
                "type \"q\"",
            ),
            (
                "devices.noderesource.dev/container.c",
                "- type: c\n",
                "path is missing",
            ),
            (
                "devices.noderesource.dev/container.c",
                "path: /dev/x",
                "not a valid device list",
            ),
            (
                "devices.noderesource.dev/container.c",
                "- path: /dev/x\n  major: one\n",
                "not a valid device list",
            ),
            ("devices.nri.io/pod", "- [", "not a valid device list"),
            (
                "cdi-devices.noderesource.dev/container.c",
                "vendor.com/device=x",
                "not a valid CDI device list",
            ),
            (
                "mounts.noderesource.dev/container.c",
                "- source: /a\n",
                "destination is missing",
            ),
            (
                "io-priority.noderesource.dev/container.c",
                "class: FAST\n",
                "unknown I/O priority class",
            ),
            (
                "scheduling-policy.noderesource.dev/container.c",
                "policy: SCHED_FAST\n",
                "unknown scheduling policy",
            ),
            (
                "scheduling-policy.noderesource.dev/container.c",
                "policy: SCHED_RR\nflags: [X]\n",
                "unknown scheduling flag",
            ),
            (
                "network-devices.noderesource.dev/container.c",
                "- name: eth1\n",
                "hostIf is missing",
            ),
            (
                "sysctl.noderesource.dev/container.c",
                "net.core.somaxconn: [1]\n",
                "not a valid sysctl map",
            ),
            (
                "memory-policy.noderesource.dev/container.c",
                "mode: MPOL_FOO\n",
                "invalid memory policy mode",
            ),
            (
                "memory-policy.noderesource.dev/container.c",
                "mode: MPOL_BIND\nflags: [F]\n",
                "invalid memory policy flag",
            ),
        ];
        for (k, v, want) in cases {
            let e = adjustment(&ann(&[(k, v)]), "c", "x").unwrap_err();
            assert_eq!(e.key, k);
            let text = e.to_string();
            assert!(text.contains(k) && text.contains(want), "{k}={v:?}: {text}");
        }
    }
}
