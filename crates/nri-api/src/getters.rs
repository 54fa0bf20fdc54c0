//! Getters for nested optional values of [`Container`], [`PodSandbox`],
//! [`LinuxResources`] and [`Mount`]: one call where the messages need a
//! chain of `Option`s (Go's `GetLinux().GetResources().GetMemory().
//! GetLimit().GetValue()`).
//!
//! Each getter returns `None` when any message on the way is absent; string
//! getters also return `None` for an empty string (protobuf's "not set").
//!
//! ```
//! use nri_api::api::{Container, LinuxContainer, LinuxResources};
//!
//! let mut res = LinuxResources::default();
//! res.memory_mut().limit = Some((256 << 20).into());
//! res.cpu_mut().cpus = "0-3".into();
//! let ctr = Container {
//!     linux: Some(LinuxContainer { resources: Some(res), ..Default::default() }),
//!     env: vec!["TIER=web".into()],
//!     ..Default::default()
//! };
//! assert_eq!(ctr.memory_limit(), Some(256 << 20));
//! assert_eq!(ctr.resources().and_then(|r| r.cpuset_cpus()), Some("0-3"));
//! assert_eq!(ctr.cpu_shares(), None);
//! assert_eq!(ctr.env_value("TIER"), Some("web"));
//! ```

use crate::api::{Container, LinuxNamespace, LinuxResources, Mount, PodSandbox};

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

impl LinuxResources {
    /// Memory limit in bytes (`memory.limit`).
    pub fn memory_limit(&self) -> Option<i64> {
        self.memory.as_ref()?.limit.as_ref().map(|v| v.value)
    }

    /// Memory reservation in bytes (`memory.reservation`).
    pub fn memory_reservation(&self) -> Option<i64> {
        self.memory.as_ref()?.reservation.as_ref().map(|v| v.value)
    }

    /// Memory plus swap limit in bytes (`memory.swap`).
    pub fn memory_swap(&self) -> Option<i64> {
        self.memory.as_ref()?.swap.as_ref().map(|v| v.value)
    }

    /// CPU shares (`cpu.shares`).
    pub fn cpu_shares(&self) -> Option<u64> {
        self.cpu.as_ref()?.shares.as_ref().map(|v| v.value)
    }

    /// CFS quota in microseconds (`cpu.quota`).
    pub fn cpu_quota(&self) -> Option<i64> {
        self.cpu.as_ref()?.quota.as_ref().map(|v| v.value)
    }

    /// CFS period in microseconds (`cpu.period`).
    pub fn cpu_period(&self) -> Option<u64> {
        self.cpu.as_ref()?.period.as_ref().map(|v| v.value)
    }

    /// The cpuset's CPUs (`cpu.cpus`, e.g. `0-3`).
    pub fn cpuset_cpus(&self) -> Option<&str> {
        non_empty(&self.cpu.as_ref()?.cpus)
    }

    /// The cpuset's memory nodes (`cpu.mems`).
    pub fn cpuset_mems(&self) -> Option<&str> {
        non_empty(&self.cpu.as_ref()?.mems)
    }

    /// Maximum number of processes (`pids.limit`).
    pub fn pids_limit(&self) -> Option<i64> {
        self.pids.as_ref().map(|p| p.limit)
    }

    /// Block I/O class (`blockio_class`).
    pub fn blockio_class(&self) -> Option<&str> {
        self.blockio_class.as_ref().map(|v| v.value.as_str())
    }

    /// RDT class (`rdt_class`).
    pub fn rdt_class(&self) -> Option<&str> {
        self.rdt_class.as_ref().map(|v| v.value.as_str())
    }
}

impl Container {
    /// The container's Linux resources (`linux.resources`).
    pub fn resources(&self) -> Option<&LinuxResources> {
        self.linux.as_ref()?.resources.as_ref()
    }

    /// Memory limit in bytes (`linux.resources.memory.limit`).
    pub fn memory_limit(&self) -> Option<i64> {
        self.resources()?.memory_limit()
    }

    /// CPU shares (`linux.resources.cpu.shares`).
    pub fn cpu_shares(&self) -> Option<u64> {
        self.resources()?.cpu_shares()
    }

    /// OOM score adjustment (`linux.oom_score_adj`).
    pub fn oom_score_adj(&self) -> Option<i64> {
        self.linux.as_ref()?.oom_score_adj.as_ref().map(|v| v.value)
    }

    /// Cgroups path (`linux.cgroups_path`).
    pub fn cgroups_path(&self) -> Option<&str> {
        non_empty(&self.linux.as_ref()?.cgroups_path)
    }

    /// The value of environment variable `name` (from `env`'s `NAME=value`
    /// entries; the last one wins, as in a process environment).
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
    }

    /// Annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// Label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// The mount at `destination`.
    pub fn mount(&self, destination: &str) -> Option<&Mount> {
        self.mounts.iter().find(|m| m.destination == destination)
    }
}

impl PodSandbox {
    /// The pod's resources (`linux.pod_resources`).
    pub fn pod_resources(&self) -> Option<&LinuxResources> {
        self.linux.as_ref()?.pod_resources.as_ref()
    }

    /// The pod's overhead (`linux.pod_overhead`).
    pub fn pod_overhead(&self) -> Option<&LinuxResources> {
        self.linux.as_ref()?.pod_overhead.as_ref()
    }

    /// The resources of the pod's sandbox container (`linux.resources`).
    pub fn resources(&self) -> Option<&LinuxResources> {
        self.linux.as_ref()?.resources.as_ref()
    }

    /// Cgroup parent (`linux.cgroup_parent`).
    pub fn cgroup_parent(&self) -> Option<&str> {
        non_empty(&self.linux.as_ref()?.cgroup_parent)
    }

    /// The namespace of type `ns_type` (`network`, `ipc`, ...).
    pub fn namespace_of(&self, ns_type: &str) -> Option<&LinuxNamespace> {
        self.linux
            .as_ref()?
            .namespaces
            .iter()
            .find(|n| n.r#type == ns_type)
    }

    /// Annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// Label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

impl Mount {
    /// A mount of `source` at `destination` with file system type `fs_type`
    /// (`bind`, `tmpfs`, ...) and `options`.
    ///
    /// ```
    /// let m = nri_api::api::Mount::new("/scratch", "tmpfs", "tmpfs", ["size=64m", "nosuid"]);
    /// assert_eq!(m.fs_type(), "tmpfs");
    /// assert_eq!(m.options, ["size=64m", "nosuid"]);
    /// ```
    pub fn new<I, S>(
        destination: impl Into<String>,
        fs_type: impl Into<String>,
        source: impl Into<String>,
        options: I,
    ) -> Mount
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Mount {
            destination: destination.into(),
            r#type: fs_type.into(),
            source: source.into(),
            options: options.into_iter().map(Into::into).collect(),
        }
    }

    /// The file system type (the `r#type` field).
    pub fn fs_type(&self) -> &str {
        &self.r#type
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::api::{
        LinuxContainer, LinuxPodSandbox, LinuxResources, OptionalInt, OptionalString,
    };

    use super::*;

    #[test]
    fn absent_messages_on_the_way_give_none() {
        let ctr = Container::default();
        assert_eq!(ctr.memory_limit(), None);
        assert_eq!(ctr.oom_score_adj(), None);
        assert_eq!(ctr.cgroups_path(), None);
        let empty = Container {
            linux: Some(LinuxContainer::default()),
            ..Default::default()
        };
        assert_eq!(empty.resources(), None);
        assert_eq!(LinuxResources::default().cpuset_cpus(), None);
        assert_eq!(PodSandbox::default().cgroup_parent(), None);
    }

    #[test]
    fn present_values_are_returned() {
        let mut res = LinuxResources::default();
        res.memory_mut().limit = Some((1_i64 << 30).into());
        res.memory_mut().reservation = Some((1_i64 << 20).into());
        res.cpu_mut().shares = Some(512_u64.into());
        res.cpu_mut().quota = Some((-1_i64).into());
        res.cpu_mut().period = Some(100_000_u64.into());
        res.cpu_mut().mems = "0".into();
        res.pids_mut().limit = 64;
        res.blockio_class = Some(OptionalString::from("slow"));
        assert_eq!(res.memory_reservation(), Some(1 << 20));
        assert_eq!(res.memory_swap(), None);
        assert_eq!(res.cpu_quota(), Some(-1));
        assert_eq!(res.cpu_period(), Some(100_000));
        assert_eq!(res.cpuset_mems(), Some("0"));
        assert_eq!(res.pids_limit(), Some(64));
        assert_eq!(res.blockio_class(), Some("slow"));
        assert_eq!(res.rdt_class(), None);
        let ctr = Container {
            linux: Some(LinuxContainer {
                resources: Some(res.clone()),
                oom_score_adj: Some(OptionalInt { value: -500 }),
                cgroups_path: "/kubepods/x".into(),
                ..Default::default()
            }),
            env: vec!["A=1".into(), "AB=2".into(), "A=3".into()],
            mounts: vec![Mount::new("/data", "bind", "/srv", ["ro"])],
            ..Default::default()
        };
        assert_eq!(ctr.memory_limit(), Some(1 << 30));
        assert_eq!(ctr.cpu_shares(), Some(512));
        assert_eq!(ctr.oom_score_adj(), Some(-500));
        assert_eq!(ctr.cgroups_path(), Some("/kubepods/x"));
        assert_eq!(ctr.env_value("A"), Some("3"));
        assert_eq!(ctr.env_value("AB"), Some("2"));
        assert_eq!(ctr.env_value("B"), None);
        assert_eq!(ctr.mount("/data").map(Mount::fs_type), Some("bind"));
        let pod = PodSandbox {
            linux: Some(LinuxPodSandbox {
                pod_resources: Some(res),
                cgroup_parent: "/kubepods".into(),
                namespaces: vec![LinuxNamespace {
                    r#type: "network".into(),
                    path: "/var/run/netns/x".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pod.pod_resources().and_then(|r| r.cpu_shares()), Some(512));
        assert_eq!(pod.pod_overhead(), None);
        assert_eq!(pod.cgroup_parent(), Some("/kubepods"));
        assert_eq!(
            pod.namespace_of("network").map(|n| n.path.as_str()),
            Some("/var/run/netns/x")
        );
    }
}
