//! Builders for the changes a plugin returns: [`ContainerAdjustment`] (for
//! the container being created), [`ContainerUpdate`] (resources of existing
//! containers) and [`ContainerEviction`].
//!
//! Keyed entries (annotations, mounts, environment, devices, namespaces,
//! sysctls, net devices) are removed by sending the key with a `-` prefix;
//! see [`mark_for_removal`].
//!
//! ```
//! use nri_api::api::{ContainerAdjustment, ContainerUpdate};
//!
//! let mut adj = ContainerAdjustment::default();
//! adj.add_annotation("example.com/touched", "yes")
//!     .remove_env("DEBUG")
//!     .set_linux_memory_limit(256 << 20)
//!     .set_linux_cpu_set_cpus("0-3");
//! assert_eq!(adj.env[0].key, "-DEBUG");
//!
//! let mut upd = ContainerUpdate::new("ctr-1");
//! upd.set_linux_cpu_shares(512).set_ignore_failure();
//! assert!(upd.ignore_failure);
//! ```

use crate::api::{
    CdiDevice, ContainerAdjustment, ContainerEviction, ContainerUpdate, Hooks, HugepageLimit,
    KeyValue, LinuxContainerAdjustment, LinuxContainerUpdate, LinuxCpu, LinuxDevice,
    LinuxIoPriority, LinuxMemory, LinuxMemoryPolicy, LinuxNamespace, LinuxNetDevice, LinuxPids,
    LinuxRdt, LinuxResources, LinuxScheduler, LinuxSeccomp, Mount, MpolFlag, MpolMode,
    OptionalRepeatedString, PosixRlimit,
};

/// Prefix marking a key for removal.
pub const REMOVAL_MARKER: char = '-';

/// `key` marked for removal (`"-key"`).
pub fn mark_for_removal(key: &str) -> String {
    format!("{REMOVAL_MARKER}{key}")
}

/// If `key` is marked for removal, the key without the marker.
pub fn is_marked_for_removal(key: &str) -> Option<&str> {
    key.strip_prefix(REMOVAL_MARKER)
}

/// `key` without a removal marker, if it has one.
pub fn clear_removal_marker(key: &str) -> &str {
    is_marked_for_removal(key).unwrap_or(key)
}

impl LinuxResources {
    /// The memory settings, created empty if absent.
    pub fn memory_mut(&mut self) -> &mut LinuxMemory {
        self.memory.get_or_insert_with(Default::default)
    }

    /// The CPU settings, created empty if absent.
    pub fn cpu_mut(&mut self) -> &mut LinuxCpu {
        self.cpu.get_or_insert_with(Default::default)
    }

    /// The pids settings, created empty if absent.
    pub fn pids_mut(&mut self) -> &mut LinuxPids {
        self.pids.get_or_insert_with(Default::default)
    }
}

/// Resource setters shared by adjustments and updates; each type provides
/// `linux_resources_mut`.
macro_rules! resource_setters {
    ($ty:ident) => {
        impl $ty {
            /// Sets the memory limit (bytes).
            pub fn set_linux_memory_limit(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().memory_mut().limit = Some(value.into());
                self
            }

            /// Sets the memory reservation (soft limit, bytes).
            pub fn set_linux_memory_reservation(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().memory_mut().reservation = Some(value.into());
                self
            }

            /// Sets the memory plus swap limit (bytes).
            pub fn set_linux_memory_swap(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().memory_mut().swap = Some(value.into());
                self
            }

            /// Sets the kernel memory limit (bytes).
            pub fn set_linux_memory_kernel(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().memory_mut().kernel = Some(value.into());
                self
            }

            /// Sets the kernel TCP buffer limit (bytes).
            pub fn set_linux_memory_kernel_tcp(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().memory_mut().kernel_tcp = Some(value.into());
                self
            }

            /// Sets the swappiness.
            pub fn set_linux_memory_swappiness(&mut self, value: u64) -> &mut Self {
                self.linux_resources_mut().memory_mut().swappiness = Some(value.into());
                self
            }

            /// Disables the OOM killer.
            pub fn set_linux_memory_disable_oom_killer(&mut self) -> &mut Self {
                self.linux_resources_mut().memory_mut().disable_oom_killer = Some(true.into());
                self
            }

            /// Turns on hierarchical memory accounting.
            pub fn set_linux_memory_use_hierarchy(&mut self) -> &mut Self {
                self.linux_resources_mut().memory_mut().use_hierarchy = Some(true.into());
                self
            }

            /// Sets the CPU shares (relative weight).
            pub fn set_linux_cpu_shares(&mut self, value: u64) -> &mut Self {
                self.linux_resources_mut().cpu_mut().shares = Some(value.into());
                self
            }

            /// Sets the CFS quota (microseconds).
            pub fn set_linux_cpu_quota(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().cpu_mut().quota = Some(value.into());
                self
            }

            /// Sets the CFS period (microseconds).
            pub fn set_linux_cpu_period(&mut self, value: u64) -> &mut Self {
                self.linux_resources_mut().cpu_mut().period = Some(value.into());
                self
            }

            /// Sets the real-time runtime (microseconds).
            pub fn set_linux_cpu_realtime_runtime(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().cpu_mut().realtime_runtime = Some(value.into());
                self
            }

            /// Sets the real-time period (microseconds).
            pub fn set_linux_cpu_realtime_period(&mut self, value: u64) -> &mut Self {
                self.linux_resources_mut().cpu_mut().realtime_period = Some(value.into());
                self
            }

            /// Sets the allowed CPUs (cpuset list such as `"0-3,8"`).
            pub fn set_linux_cpu_set_cpus(&mut self, value: impl Into<String>) -> &mut Self {
                self.linux_resources_mut().cpu_mut().cpus = value.into();
                self
            }

            /// Sets the allowed memory nodes (cpuset list).
            pub fn set_linux_cpu_set_mems(&mut self, value: impl Into<String>) -> &mut Self {
                self.linux_resources_mut().cpu_mut().mems = value.into();
                self
            }

            /// Sets the maximum number of tasks.
            pub fn set_linux_pid_limits(&mut self, value: i64) -> &mut Self {
                self.linux_resources_mut().pids_mut().limit = value;
                self
            }

            /// Adds a hugepage limit (bytes) for a page size such as `"2MB"`.
            pub fn add_linux_hugepage_limit(
                &mut self,
                page_size: impl Into<String>,
                limit: u64,
            ) -> &mut Self {
                self.linux_resources_mut()
                    .hugepage_limits
                    .push(HugepageLimit {
                        page_size: page_size.into(),
                        limit,
                    });
                self
            }

            /// Sets the block I/O class.
            pub fn set_linux_blockio_class(&mut self, value: impl Into<String>) -> &mut Self {
                self.linux_resources_mut().blockio_class = Some(value.into().into());
                self
            }

            /// Sets the RDT class.
            pub fn set_linux_rdt_class(&mut self, value: impl Into<String>) -> &mut Self {
                self.linux_resources_mut().rdt_class = Some(value.into().into());
                self
            }

            /// Sets a raw cgroup v2 setting.
            pub fn add_linux_unified(
                &mut self,
                key: impl Into<String>,
                value: impl Into<String>,
            ) -> &mut Self {
                self.linux_resources_mut()
                    .unified
                    .insert(key.into(), value.into());
                self
            }
        }
    };
}

resource_setters!(ContainerAdjustment);
resource_setters!(ContainerUpdate);

impl ContainerAdjustment {
    /// The Linux part, created empty if absent.
    pub fn linux_mut(&mut self) -> &mut LinuxContainerAdjustment {
        self.linux.get_or_insert_with(Default::default)
    }

    /// The Linux resources, created empty if absent.
    pub fn linux_resources_mut(&mut self) -> &mut LinuxResources {
        self.linux_mut()
            .resources
            .get_or_insert_with(Default::default)
    }

    fn rdt_mut(&mut self) -> &mut LinuxRdt {
        self.linux_mut().rdt.get_or_insert_with(Default::default)
    }

    /// Adds or replaces an annotation.
    pub fn add_annotation(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> &mut Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Removes an annotation.
    pub fn remove_annotation(&mut self, key: &str) -> &mut Self {
        self.annotations
            .insert(mark_for_removal(key), String::new());
        self
    }

    /// Adds a mount.
    pub fn add_mount(&mut self, mount: Mount) -> &mut Self {
        self.mounts.push(mount);
        self
    }

    /// Removes the mount at `destination` (path inside the container).
    pub fn remove_mount(&mut self, destination: &str) -> &mut Self {
        self.mounts.push(Mount {
            destination: mark_for_removal(destination),
            ..Default::default()
        });
        self
    }

    /// Sets an environment variable.
    pub fn add_env(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.env.push(KeyValue {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Removes an environment variable.
    pub fn remove_env(&mut self, key: &str) -> &mut Self {
        self.env.push(KeyValue {
            key: mark_for_removal(key),
            value: String::new(),
        });
        self
    }

    /// Replaces the command line; conflicts if another plugin also sets it.
    pub fn set_args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the command line, overriding an earlier plugin's command
    /// line instead of conflicting with it (sent with a leading empty
    /// element).
    pub fn update_args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = std::iter::once(String::new())
            .chain(args.into_iter().map(Into::into))
            .collect();
        self
    }

    /// Appends OCI hooks, stage by stage.
    pub fn add_hooks(&mut self, hooks: Hooks) -> &mut Self {
        let h = self.hooks.get_or_insert_with(Default::default);
        h.prestart.extend(hooks.prestart);
        h.create_runtime.extend(hooks.create_runtime);
        h.create_container.extend(hooks.create_container);
        h.start_container.extend(hooks.start_container);
        h.poststart.extend(hooks.poststart);
        h.poststop.extend(hooks.poststop);
        self
    }

    /// Sets a POSIX rlimit (e.g. `"RLIMIT_NOFILE"`).
    pub fn add_rlimit(&mut self, r#type: impl Into<String>, hard: u64, soft: u64) -> &mut Self {
        self.rlimits.push(PosixRlimit {
            r#type: r#type.into(),
            hard,
            soft,
        });
        self
    }

    /// Adds a device node.
    pub fn add_device(&mut self, device: LinuxDevice) -> &mut Self {
        self.linux_mut().devices.push(device);
        self
    }

    /// Removes the device node at `path`.
    pub fn remove_device(&mut self, path: &str) -> &mut Self {
        self.linux_mut().devices.push(LinuxDevice {
            path: mark_for_removal(path),
            ..Default::default()
        });
        self
    }

    /// Injects a CDI device by fully qualified name (`vendor.com/class=dev`).
    pub fn add_cdi_device(&mut self, name: impl Into<String>) -> &mut Self {
        self.cdi_devices.push(CdiDevice { name: name.into() });
        self
    }

    /// Adds a namespace, or replaces the one of the same type.
    pub fn add_or_replace_namespace(&mut self, namespace: LinuxNamespace) -> &mut Self {
        self.linux_mut().namespaces.push(namespace);
        self
    }

    /// Removes the namespace of type `ns_type` (e.g. `"network"`).
    pub fn remove_namespace(&mut self, ns_type: &str) -> &mut Self {
        self.linux_mut().namespaces.push(LinuxNamespace {
            r#type: mark_for_removal(ns_type),
            path: String::new(),
        });
        self
    }

    /// Moves host network interface `host_if` into the container.
    pub fn add_linux_net_device(
        &mut self,
        host_if: impl Into<String>,
        device: LinuxNetDevice,
    ) -> &mut Self {
        self.linux_mut().net_devices.insert(host_if.into(), device);
        self
    }

    /// Drops host network interface `host_if` from the container.
    pub fn remove_linux_net_device(&mut self, host_if: &str) -> &mut Self {
        self.linux_mut()
            .net_devices
            .insert(mark_for_removal(host_if), LinuxNetDevice::default());
        self
    }

    /// Sets a namespaced kernel parameter.
    pub fn set_linux_sysctl(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> &mut Self {
        self.linux_mut().sysctl.insert(key.into(), value.into());
        self
    }

    /// Removes a kernel parameter setting.
    pub fn remove_linux_sysctl(&mut self, key: &str) -> &mut Self {
        self.linux_mut()
            .sysctl
            .insert(mark_for_removal(key), String::new());
        self
    }

    /// Sets the cgroup path.
    pub fn set_linux_cgroups_path(&mut self, path: impl Into<String>) -> &mut Self {
        self.linux_mut().cgroups_path = path.into();
        self
    }

    /// Sets (`Some`) or unsets (`None`) the OOM score adjustment.
    pub fn set_linux_oom_score_adj(&mut self, value: Option<i64>) -> &mut Self {
        self.linux_mut().oom_score_adj = value.map(Into::into);
        self
    }

    /// Sets the I/O priority.
    pub fn set_linux_io_priority(&mut self, io_priority: LinuxIoPriority) -> &mut Self {
        self.linux_mut().io_priority = Some(io_priority);
        self
    }

    /// Sets the seccomp policy.
    pub fn set_linux_seccomp_policy(&mut self, policy: LinuxSeccomp) -> &mut Self {
        self.linux_mut().seccomp_policy = Some(policy);
        self
    }

    /// Sets the scheduling parameters.
    pub fn set_linux_scheduler(&mut self, scheduler: LinuxScheduler) -> &mut Self {
        self.linux_mut().scheduler = Some(scheduler);
        self
    }

    /// Sets the NUMA memory policy.
    pub fn set_linux_memory_policy(
        &mut self,
        mode: MpolMode,
        nodes: impl Into<String>,
        flags: &[MpolFlag],
    ) -> &mut Self {
        self.linux_mut().memory_policy = Some(LinuxMemoryPolicy {
            mode: mode as i32,
            nodes: nodes.into(),
            flags: flags.iter().map(|f| *f as i32).collect(),
        });
        self
    }

    /// Sets the RDT class of service id.
    pub fn set_linux_rdt_clos_id(&mut self, value: impl Into<String>) -> &mut Self {
        self.rdt_mut().clos_id = Some(value.into().into());
        self
    }

    /// Sets the RDT schemata lines.
    pub fn set_linux_rdt_schemata<I, S>(&mut self, lines: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rdt_mut().schemata = Some(lines.into_iter().collect::<OptionalRepeatedString>());
        self
    }

    /// Turns RDT monitoring on or off.
    pub fn set_linux_rdt_enable_monitoring(&mut self, value: bool) -> &mut Self {
        self.rdt_mut().enable_monitoring = Some(value.into());
        self
    }

    /// Removes all RDT settings of the container.
    pub fn remove_linux_rdt(&mut self) -> &mut Self {
        self.rdt_mut().remove = true;
        self
    }
}

impl ContainerUpdate {
    /// An empty update for container `container_id`.
    pub fn new(container_id: impl Into<String>) -> Self {
        ContainerUpdate {
            container_id: container_id.into(),
            ..Default::default()
        }
    }

    /// Sets the container the update is for.
    pub fn set_container_id(&mut self, container_id: impl Into<String>) -> &mut Self {
        self.container_id = container_id.into();
        self
    }

    /// The Linux part, created empty if absent.
    pub fn linux_mut(&mut self) -> &mut LinuxContainerUpdate {
        self.linux.get_or_insert_with(Default::default)
    }

    /// The Linux resources, created empty if absent.
    pub fn linux_resources_mut(&mut self) -> &mut LinuxResources {
        self.linux_mut()
            .resources
            .get_or_insert_with(Default::default)
    }

    /// Marks the update as optional: failing to apply it does not fail the
    /// operation it came with.
    pub fn set_ignore_failure(&mut self) -> &mut Self {
        self.ignore_failure = true;
        self
    }
}

impl ContainerEviction {
    /// A request to evict `container_id`, with a reason.
    pub fn new(container_id: impl Into<String>, reason: impl Into<String>) -> Self {
        ContainerEviction {
            container_id: container_id.into(),
            reason: reason.into(),
        }
    }
}
